#!/usr/bin/env python3
"""Check a fixture folder written by ``tools/export_gemma4.py`` with plain ``openvino``: greedy-decode
its prompt through ov.Core and compare with transformers' tokens in ``reference.json``::

    python tools/ov_greedy.py tests/fixtures/gemma4/tiny8 [--device CPU] [--precision exact|default]

Exits non-zero when the tokens differ. A causal-LM folder (``openvino_model.xml``) is decoded by
:func:`ovpasses.greedy.greedy_generate`. A multimodal folder (``openvino_language_model.xml``, Gemma 4)
is decoded by :func:`vlm_greedy`: the text and per-layer embedding IRs turn ids into the language
model's ``inputs_embeds`` and ``per_layer_inputs``; for the image prompt the vision IR's soft tokens
replace the embeddings of the image tokens, as openvino_genai's VLMPipeline does. Both prompts of
``reference.json`` are run (``prompt_ids``, and ``image_prompt`` with ``reference_image.npy``).
Needs openvino and numpy only.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # run from a checkout without installing


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


def fixture_cases(folder: Path, reference: dict) -> list[dict]:
    """The prompts of a fixture: ``text`` (``prompt_ids``) and, where recorded, ``image``. Each has
    ``prompt_ids``, ``expected`` (transformers' greedy tokens), ``prompt_text`` (the user message that
    VLMPipeline takes; None for causal-LM folders) and ``image`` (HWC uint8 or None)."""
    cases = [{"name": "text", "prompt_ids": reference["prompt_ids"], "expected": reference["generated_ids"],
              "prompt_text": reference.get("prompt_text"), "image": None}]
    if "image_prompt" in reference:
        prompt = reference["image_prompt"]
        cases.append({"name": "image", "prompt_ids": prompt["prompt_ids"], "expected": prompt["generated_ids"],
                      "prompt_text": prompt["prompt_text"], "image": np.load(folder / prompt["image"]["file"])})
    return cases


def vlm_greedy(folder: Path, prompt_ids: list[int], max_new_tokens: int, device: str = "CPU",
               config: dict | None = None, image: np.ndarray | None = None) -> tuple[list[int], int]:
    """Greedy-decode a Gemma 4 image-text-to-text export (batch 1) over ov.Core; returns the tokens
    and the number of fused ScaledDotProductAttention kernels in the language model's runtime model."""
    import openvino as ov

    from ovpasses.check import count_fused_sdpa

    core, config = ov.Core(), config or {}
    model_config = json.loads((folder / "config.json").read_text())
    language = core.compile_model(folder / "openvino_language_model.xml", device, config)
    embed = core.compile_model(folder / "openvino_text_embeddings_model.xml", device, config)
    per_layer_xml = folder / "openvino_text_embeddings_per_layer_model.xml"
    per_layer = core.compile_model(per_layer_xml, device, config) if per_layer_xml.exists() else None
    names = {name for port in language.inputs for name in port.get_names()}
    image_token_id = model_config["image_token_id"]

    step_ids = np.array([prompt_ids], np.int64)
    embeds_BSH = np.array(embed(step_ids)[0])
    if image is not None:
        pre = json.loads((folder / "preprocessor_config.json").read_text())
        patches, positions, soft_tokens = gemma4_patches(image, pre["patch_size"], pre["max_soft_tokens"],
                                                         pre["pooling_kernel_size"])
        vision = core.compile_model(folder / "openvino_vision_embeddings_model.xml", device, config)
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


def run_core(folder: Path, case: dict, device: str = "CPU", config: dict | None = None) -> tuple[list[int], int]:
    """One case of :func:`fixture_cases` through ov.Core: the tokens and the fused SDPA count."""
    import openvino as ov

    from ovpasses.check import count_fused_sdpa
    from ovpasses.greedy import greedy_generate

    steps = len(case["expected"])
    if (folder / "openvino_language_model.xml").exists():
        return vlm_greedy(folder, case["prompt_ids"], steps, device, config, case["image"])
    compiled = ov.Core().compile_model(folder / "openvino_model.xml", device, config or {})
    return greedy_generate(compiled, case["prompt_ids"], steps), count_fused_sdpa(compiled)


def main(argv=None) -> int:
    import openvino as ov

    from ovpasses.check import EXACT_CPU_CONFIG

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir")
    p.add_argument("--device", default="CPU")
    p.add_argument("--precision", choices=["exact", "default"], default="exact",
                   help=f"exact: compile with {EXACT_CPU_CONFIG}; default: the device defaults")
    args = p.parse_args(argv)
    d = Path(args.model_dir)
    ref = json.loads((d / "reference.json").read_text())
    config = dict(EXACT_CPU_CONFIG) if args.precision == "exact" else {}
    ok = True
    for case in fixture_cases(d, ref):
        got, fused = run_core(d, case, args.device, config)
        match = got == case["expected"]
        ok &= match
        print(f"openvino {ov.__version__} {args.device} precision={args.precision} [{case['name']}]: "
              f"{'MATCH' if match else 'MISMATCH'}")
        print(f"  expected {case['expected']}")
        print(f"  got      {got}")
        print(f"  fused ScaledDotProductAttention nodes: {fused}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
