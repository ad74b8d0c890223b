"""Greedy decoding, batch 1: a stateful LLM IR (optimum-intel's inputs), and a Gemma 4 image-text-to-text
export through its own embedding IRs, as openvino_genai's VLMPipeline feeds it."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import openvino as ov

from ovpasses.app.check.inputs import LLM_INPUTS
from ovpasses.errors import OvpassesError


def greedy_generate(compiled: ov.CompiledModel, prompt_ids: Iterable[int], max_new_tokens: int,
                    eos_token_id: int | None = None, prefill_chunk: int | None = None,
                    request: ov.InferRequest | None = None) -> list[int]:
    """Greedy-decode ``max_new_tokens`` tokens (batch 1) from a stateful optimum-intel decoder IR.

    The inputs must be ``input_ids`` and a subset of ``attention_mask``, ``position_ids`` and
    ``beam_idx``; the first output is ``logits [batch, seq, vocab]``. The prompt goes in whole, or in
    pieces of ``prefill_chunk`` tokens; each later call feeds one token. ``request`` (one of
    ``compiled``'s, reset here) lets the caller read the states afterwards. Stops early only if
    ``eos_token_id`` is given and generated.
    """
    names = {name for port in compiled.inputs for name in port.get_names()}
    unknown = names - set(LLM_INPUTS)
    if unknown or "input_ids" not in names:
        raise OvpassesError(f"greedy decoding needs input_ids and a subset of {', '.join(LLM_INPUTS[1:])}; "
                            f"the model has {', '.join(sorted(names))}")
    request = request or compiled.create_infer_request()
    request.reset_state()
    prompt = [int(t) for t in prompt_ids]
    chunk = prefill_chunk or len(prompt)
    past = 0

    def feed(ids: list[int]) -> int:
        nonlocal past
        n = len(ids)
        inputs = {"input_ids": np.array([ids], np.int64)}
        if "attention_mask" in names:
            inputs["attention_mask"] = np.ones((1, past + n), np.int64)
        if "position_ids" in names:
            inputs["position_ids"] = np.arange(past, past + n, dtype=np.int64)[None, :]
        if "beam_idx" in names:
            inputs["beam_idx"] = np.zeros((1,), np.int32)
        request.infer(inputs)
        past += n
        return int(np.argmax(request.get_output_tensor(0).data[0, -1]))

    if max_new_tokens <= 0:
        return []
    for start in range(0, len(prompt), chunk):
        token = feed(prompt[start:start + chunk])
    out: list[int] = [token]
    while len(out) < max_new_tokens and not (eos_token_id is not None and token == eos_token_id):
        token = feed([token])
        out.append(token)
    return out


def gemma4_patches(image: np.ndarray, patch_size: int, max_soft_tokens: int,
                   pooling_kernel_size: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Gemma4ImageProcessor's ``pixel_values`` ``[max_patches, patch_size**2 * 3]`` (f32) and
    ``image_position_ids`` ``[max_patches, 2]`` (x, y; -1 for padding) of an HWC uint8 image, and the
    number of soft tokens it makes. Only for images the processor keeps at their size (no resize):
    others raise ``ValueError``. The export checks this against transformers' processor."""
    height, width, channels = image.shape
    max_patches = max_soft_tokens * pooling_kernel_size ** 2
    # transformers' get_aspect_ratio_preserving_size: the size the processor resizes to
    factor = math.sqrt(max_patches * patch_size ** 2 / (height * width))
    side = pooling_kernel_size * patch_size
    target = (math.floor(factor * height / side) * side, math.floor(factor * width / side) * side)
    if target != (height, width):
        raise ValueError(f"the processor would resize a {height}x{width} image to {target[0]}x{target[1]}; "
                         "gemma4_patches handles images it keeps as they are")
    pixels = (image.astype(np.float64) * (1 / 255)).astype(np.float32)   # the processor's rescale
    rows, cols = height // patch_size, width // patch_size
    patches_PC = (pixels.reshape(rows, patch_size, cols, patch_size, channels)
                  .transpose(0, 2, 1, 3, 4).reshape(rows * cols, patch_size * patch_size * channels))
    grid_x, grid_y = np.meshgrid(np.arange(cols), np.arange(rows), indexing="xy")
    positions_P2 = np.stack([grid_x, grid_y], axis=-1).reshape(rows * cols, 2).astype(np.int64)
    pad = max_patches - rows * cols
    patches_PC = np.concatenate([patches_PC, np.zeros((pad, patches_PC.shape[1]), np.float32)])
    positions_P2 = np.concatenate([positions_P2, np.full((pad, 2), -1, np.int64)])
    return patches_PC, positions_P2, rows * cols // pooling_kernel_size ** 2


def gemma3_pixels(image: np.ndarray, preprocessor: dict) -> np.ndarray:
    """Gemma3ImageProcessor's ``pixel_values`` ``[1, 3, H, W]`` (f32) of an HWC uint8 image already at the
    processor's size (no resize, no pan and scan): rescaled to [0, 1], then normalised by its mean and std."""
    size = preprocessor["size"]
    if list(image.shape[:2]) != [size["height"], size["width"]]:
        raise ValueError(f"gemma3_pixels takes images of the processor's size {size}, not {image.shape[:2]}")
    pixels = image.astype(np.float32) * np.float32(preprocessor["rescale_factor"])
    mean, std = (np.array(preprocessor[key], np.float32) for key in ("image_mean", "image_std"))
    pixels = (pixels - mean) / std
    return np.ascontiguousarray(pixels.transpose(2, 0, 1)[None])


def vlm_greedy(folder: Path, prompt_ids: list[int], max_new_tokens: int, device: str = "CPU",
               config: dict | None = None, image: np.ndarray | None = None) -> tuple[list[int], int]:
    """Greedy-decode a Gemma 4 or Gemma 3 image-text-to-text export (batch 1) over ov.Core; returns the tokens
    and the number of fused ScaledDotProductAttention kernels in the language model's runtime model."""
    from ovpasses.app.check import count_fused_sdpa

    core, config = ov.Core(), config or {}
    model_config = json.loads((folder / "config.json").read_text())
    language = core.compile_model(folder / "openvino_language_model.xml", device, config)
    embed = core.compile_model(folder / "openvino_text_embeddings_model.xml", device, config)
    per_layer_xml = folder / "openvino_text_embeddings_per_layer_model.xml"
    per_layer = core.compile_model(per_layer_xml, device, config) if per_layer_xml.exists() else None
    names = {name for port in language.inputs for name in port.get_names()}
    image_token_id = model_config.get("image_token_id", model_config.get("image_token_index"))   # Gemma 4, Gemma 3

    step_ids = np.array([prompt_ids], np.int64)
    embeds_BSH = np.array(embed(step_ids)[0])
    if image is not None:
        pre = json.loads((folder / "preprocessor_config.json").read_text())
        vision = core.compile_model(folder / "openvino_vision_embeddings_model.xml", device, config)
        if "mm_tokens_per_image" in model_config:   # Gemma 3: the whole image in, mm_tokens_per_image out
            soft_tokens = model_config["mm_tokens_per_image"]
            soft_NH = np.array(vision({"pixel_values": gemma3_pixels(image, pre)})[0]).reshape(soft_tokens, -1)
        else:
            patches, positions, soft_tokens = gemma4_patches(image, pre["patch_size"], pre["max_soft_tokens"],
                                                             pre["pooling_kernel_size"])
            soft_NH = np.array(vision({"pixel_values": patches[None], "image_position_ids": positions[None]})[0])
        at_image = step_ids[0] == image_token_id
        if not soft_NH.shape[0] == soft_tokens == int(at_image.sum()):
            raise ValueError(f"{soft_NH.shape[0]} soft tokens from the vision model, {soft_tokens} expected, "
                             f"{int(at_image.sum())} image tokens in the prompt")
        embeds_BSH[0, at_image] = soft_NH
    request = language.create_infer_request()
    request.reset_state()
    past, out = 0, []
    for _ in range(max_new_tokens):
        n = step_ids.shape[1]
        feed = {"inputs_embeds": embeds_BSH,
                "attention_mask": np.ones((1, past + n), np.int64),
                "position_ids": np.arange(past, past + n, dtype=np.int64)[None, :],
                "beam_idx": np.zeros((1,), np.int32)}
        if "per_layer_inputs" in names:
            feed["per_layer_inputs"] = np.array(per_layer(step_ids)[0])
        if "token_type_ids" in names:   # exported when text_config.use_bidirectional_attention == "vision"
            feed["token_type_ids"] = (step_ids == image_token_id).astype(np.int64)
        request.infer(feed)
        token = int(np.argmax(request.get_output_tensor(0).data[0, -1]))
        out.append(token)
        past += n
        step_ids = np.array([[token]], np.int64)
        embeds_BSH = np.array(embed(step_ids)[0])
    return out, count_fused_sdpa(language)


def genai_chat(pipe, turns: Iterable[str], answer: int) -> list[list[int]]:
    """The token ids of each answer of ``pipe``'s (an openvino_genai LLMPipeline or VLMPipeline) greedy chat over
    ``turns``, exactly ``answer`` tokens each, between start_chat and finish_chat."""
    import openvino_genai as genai

    from ovpasses.app.check.genai import token_collector
    config = genai.GenerationConfig()
    config.max_new_tokens = config.min_new_tokens = answer
    config.do_sample = False
    answers = []
    pipe.start_chat()
    try:
        for turn in turns:
            streamer = token_collector()
            pipe.generate(turn, generation_config=config, streamer=streamer)
            answers.append(list(streamer.ids))
    finally:
        pipe.finish_chat()
    assert [len(a) for a in answers] == [answer] * len(list(turns)), "genai did not give each answer's tokens"
    return answers


def vlm_pipeline_tokens(folder: Path, path: str, prompt: str, image: np.ndarray | None, new_tokens: int,
                        config: dict) -> list[int]:
    """Exactly ``new_tokens`` greedy token ids of openvino_genai's VLMPipeline on ``folder`` for ``prompt`` (and
    ``image``, HWC, or None), on its ``path``: "stateful" (``ATTENTION_BACKEND="SDPA"``) or "paged" (a scheduler
    config), compiled with ``config``."""
    import openvino_genai as genai

    from ovpasses.app.check.genai import token_collector
    kwargs = {"ATTENTION_BACKEND": "SDPA"} if path == "stateful" else {"scheduler_config": genai.SchedulerConfig()}
    pipe = genai.VLMPipeline(str(folder), "CPU", **kwargs, **config)
    generation = genai.GenerationConfig()
    generation.max_new_tokens = generation.min_new_tokens = new_tokens
    generation.do_sample = False
    streamer = token_collector()
    images = [ov.Tensor(image[None])] if image is not None else []
    pipe.generate(prompt, images=images, generation_config=generation, streamer=streamer)
    return list(streamer.ids)
