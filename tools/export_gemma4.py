#!/usr/bin/env python3
"""Build tiny random-weight Gemma 4 / Gemma 3n models and export them to OpenVINO IR.

No model hub is needed: the model, a tiny WordLevel tokenizer (and for the multimodal preset a
Gemma 4 image processor) are created locally from a fixed seed, exported with optimum-intel
(stateful, FP32 weights, no weight compression) and the tokenizer is converted with
openvino-tokenizers.  Three kinds of model, chosen by the preset:

* ``gemma4_text`` (``tiny8``, ``e2b35``, ``tiny8u``, ``a26``): ``Gemma4ForCausalLM`` from a
  ``Gemma4TextConfig``, exported as ``text-generation-with-past`` -> ``openvino_model.xml``; ``a26`` has
  the 26B/31B attention layout (``attention_k_eq_v``, ``num_global_key_value_heads``).
* ``gemma4_vlm`` (``vlm8``): ``Gemma4ForConditionalGeneration`` (tiny8's text layout with a tiny
  vision tower, no audio tower) exported as ``image-text-to-text`` like
  ``optimum-cli export openvino -m google/gemma-4-E2B-it --task image-text-to-text``:
  ``openvino_language_model.xml`` (inputs_embeds + per_layer_inputs, stateful),
  ``openvino_text_embeddings_model.xml``, ``openvino_text_embeddings_per_layer_model.xml``,
  ``openvino_vision_embeddings_model.xml``, the (de)tokenizer, ``preprocessor_config.json`` and
  ``chat_template.jinja``: what openvino_genai's VLMPipeline loads.
* ``gemma3n_text`` (``gemma3n-tiny8``): ``Gemma3nForCausalLM`` from a ``Gemma3nTextConfig`` with
  KV-shared layers and activation sparsity on its first layers (as Gemma 3n E2B/E4B), exported as
  ``text-generation-with-past`` -> ``openvino_model.xml``.

Beside the IR a ``reference.json`` records

* the full config,
* the ground truth of KV sharing per decoder layer, read from transformers' own attention modules
  (``is_kv_shared_layer``, ``kv_shared_layer_index``, ``store_full_length_kv``),
* the prompt ``input_ids`` and transformers' greedy continuation (for ``vlm8`` a chat-templated
  text prompt, and under ``image_prompt`` the same text after a generated 96x96 image, stored as
  ``reference_image.npy``),
* the versions of the tools used.

Run it with the export environment (``bash tools/venv.sh export``: torch CPU, transformers 5.5.4,
optimum-intel 2.2.0, Pillow)::

    .venvs/export/bin/python tools/export_gemma4.py --preset tiny8 --out tests/fixtures/gemma4/tiny8
    .venvs/export/bin/python tools/export_gemma4.py --preset e2b35 --out tests/fixtures/gemma4/e2b35
    .venvs/export/bin/python tools/export_gemma4.py --preset vlm8 --out tests/fixtures/gemma4/vlm8
    .venvs/export/bin/python tools/export_gemma4.py --preset a26 --long-prompt-length 28 --out tests/fixtures/gemma4/a26
    .venvs/export/bin/python tools/export_gemma4.py --preset gemma3n-tiny8 --out tests/fixtures/gemma3n/tiny8

Verify the result with an OpenVINO runtime (any env with ``openvino``; ``openvino_genai`` is used
when importable: LLMPipeline, or VLMPipeline for ``vlm8``, stateful and with a SchedulerConfig)::

    .venvs/dev/bin/python tools/export_gemma4.py --verify-only --out tests/fixtures/gemma4/tiny8

or with the standalone loop (openvino + numpy only; for ``vlm8`` it runs the embedding IRs and the
language model, with and without the image)::

    .venvs/dev/bin/python tools/ov_greedy.py tests/fixtures/gemma4/tiny8

The script is deterministic: the same arguments give byte-identical files (it re-executes
itself with PYTHONHASHSEED=0 because transformers iterates a ``set`` of layer types while
tracing, which otherwise permutes tensor names in the XML).  Re-running it replaces the
output folder.

Workarounds, each with its cause
--------------------------------
* optimum-intel 2.2.0 registers ``gemma4_text`` with MIN_TRANSFORMERS_VERSION 5.5 but inherits
  MAX_TRANSFORMERS_VERSION 5.0 from GemmaOpenVINOConfig, so it refuses every transformers version;
  ``gemma3n_text`` (Gemma3nTextOpenVINOConfig, a subclass) inherits the same bound.  The script lifts
  the inherited bound of Gemma4TextOpenVINOConfig (which lifts it for the subclass too) before a text
  export.  The ``image-text-to-text`` export needs no lift: its language-model config is built by
  get_vlm_text_generation_config, which does not carry the bound.
* optimum's Gemma4 dummy cache makes sliding layers ``sliding_window`` long and full layers
  ``sequence_length`` long; the traced mask needs them equal, so the trace uses
  ``sequence_length=sliding_window`` (the IR shapes stay dynamic).  Same for the VLM's language model.
* Gemma 3n: transformers' Gemma3nTextAttention lets a KV-shared layer read its owner's K/V only when
  a cache object is passed; with ``use_cache=False`` it projects its own K/V, a different model from
  the one ``generate`` runs (measured: other greedy tokens from step 1).  The reference's second
  check therefore recomputes the whole sequence in one forward pass *with* a fresh cache (for Gemma 4
  too, where both ways agree).
* Gemma 3n's activation sparsity traces ``torch.distributions.Normal.icdf`` -> ``aten::erfinv``,
  which OpenVINO converts from 2026.2 on (``ErfInv``, opset17).  The IR holds that op, so runtimes
  before 2026.2 cannot read it (measured: 2026.0.0 refuses ``ErfInv ... unsupported opset: opset17``).
* The Gemma 4 processor (``Gemma4Processor``) also needs ``Gemma4VideoProcessor``, which needs
  torchvision; the only torchvision wheels reachable here (PyPI's 0.28.0) are CUDA builds that do not
  load against torch 2.13.0+cpu (``operator torchvision::nms does not exist``).  So the checkpoint
  folder gets the tokenizer (with the chat template) and the PIL image processor
  (``Gemma4ImageProcessorPil``, hence Pillow in the export venv; it also computes the reference's
  pixel values), not a ``processor_config.json``.  optimum-intel's maybe_load_preprocessors then
  loads only the tokenizer and Gemma 4's audio feature extractor (AutoProcessor and
  AutoImageProcessor need torchvision and fail, which it catches); that feature extractor is read
  from the image processor's ``preprocessor_config.json`` and keeps its keys as attributes, so
  (measured) optimum takes ``max_soft_tokens`` from it to size the vision trace (the pooling is baked
  in for ``max_soft_tokens * pooling_kernel_size**2`` patches) and saves it as the export's
  ``preprocessor_config.json``: the image keys VLMPipeline reads (``patch_size``, ``max_soft_tokens``,
  ``pooling_kernel_size``, ``image_mean``/``image_std``) plus the audio ones.  An export from a real
  checkpoint with torchvision would carry ``processor_config.json`` instead; VLMPipeline reads either.
* ``--attn-implementation eager`` (an IR without ScaledDotProductAttention, for SDPA recovery): optimum-intel
  2.2.0 honours it for the text export (its Gemma2ModelPatcher forces no attention; measured: the trace of
  tiny8 holds 8 ``aten::softmax`` and no ``aten::scaled_dot_product_attention``; its image-text-to-text
  language-model patcher, Gemma4LMModelPatcher, always calls an eager attention of its own). But ovc's
  ``convert_model`` then runs MOCTransformations (``moc_emit_ir`` -> ``apply_moc_transformations``), whose
  SDPAFusionMatcher fuses the fp32 eager subgraph again (measured: 8 Softmax after the frontend, 8
  ScaledDotProductAttention after MOC, for an fp16 trace too). Published eager IRs escape it in ways this
  script cannot reproduce with the 2026.4.1 converter (an older converter, 16-bit Converts around the
  Softmax). So while converting, every Softmax output is also read by a temporary Result
  (:func:`keep_eager_attention`): SDPAFusionMatcher fuses only a Softmax with one consumer
  (``consumers_count(1)``), every other MOC transformation runs as usual, and the Results are removed
  right after. The IR then holds transformers' eager subgraph as MOC leaves it; the script checks that it
  has no SDPA and a Softmax per layer. (Skipping MOC altogether was tried: it leaves unused trace inputs
  in the IR, which ov.Core greedy loops refuse.)

Notes
-----
* The reference is fp32.  On CPU compare with ``ovpasses.precision.EXACT_CPU_CONFIG`` (f32 inference,
  f32 KV cache, no dynamic quantization of activations): the defaults (bf16 inference
  on avx512_bf16/AMX CPUs, f16 KV cache for SDPA, u8/f16 for paged attention) flip
  near-tied greedy picks of these random models within a few tokens.
* openvino_genai can run the text folders both from strings (the made-up ``w<id>`` WordLevel
  tokenizer) and from token ids (``TokenizedInputs``), which is what the checks use.  VLMPipeline
  takes strings: the checks pass ``reference.json``'s ``prompt_text`` and let genai apply the chat
  template, as transformers did for ``prompt_ids``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SLIDING = "sliding_attention"
FULL = "full_attention"

GEMMA4_TEXT, GEMMA4_VLM, GEMMA3N_TEXT = "gemma4_text", "gemma4_vlm", "gemma3n_text"

# Files the fixture keeps; everything else optimum writes (weights in
# safetensors/pytorch format, ...) is deleted.
KEEP_FILES = {
    "openvino_model.xml",
    "openvino_model.bin",
    "openvino_language_model.xml",
    "openvino_language_model.bin",
    "openvino_text_embeddings_model.xml",
    "openvino_text_embeddings_model.bin",
    "openvino_text_embeddings_per_layer_model.xml",
    "openvino_text_embeddings_per_layer_model.bin",
    "openvino_vision_embeddings_model.xml",
    "openvino_vision_embeddings_model.bin",
    "openvino_tokenizer.xml",
    "openvino_tokenizer.bin",
    "openvino_detokenizer.xml",
    "openvino_detokenizer.bin",
    "config.json",
    "generation_config.json",
    "preprocessor_config.json",
    "processor_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "reference.json",
    "reference_image.npy",
}

# Special token ids of the made-up tokenizer (same ids as the real Gemma tokenizer
# for pad/eos/bos).
PAD_ID, EOS_ID, BOS_ID, UNK_ID = 0, 1, 2, 3
NUM_SPECIAL = 4

# Gemma 4's multimodal and turn tokens (the strings of the real tokenizer; openvino_genai's
# InputsEmbedderGemma4 looks them up by these strings) and Gemma 3n's turn tokens.
GEMMA4_SPECIAL_TOKENS = {
    "boi_token": "<|image>",
    "eoi_token": "<image|>",
    "image_token": "<|image|>",
    "video_token": "<|video|>",
    "boa_token": "<|audio>",
    "eoa_token": "<audio|>",
    "audio_token": "<|audio|>",
}
GEMMA4_TURN_TOKENS = ("<|turn>", "<turn|>")
GEMMA3N_TURN_TOKENS = ("<start_of_turn>", "<end_of_turn>")
ROLE_WORDS = ("system", "user", "model")

# Minimal chat templates in the format of the real ones (roles, turn tokens, Gemma 4's image
# placeholder); the assistant role is called "model".
GEMMA4_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<|turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}<|image|>{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}<turn|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|turn>model\n{% endif %}"
)
GEMMA3N_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "<start_of_turn>{{ 'model' if message['role'] == 'assistant' else message['role'] }}\n"
    "{{ message['content'] }}<end_of_turn>\n{% endfor %}"
    "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)

REFERENCE_IMAGE_FILE = "reference_image.npy"

# --------------------------------------------------------------------------------------
# Presets
# --------------------------------------------------------------------------------------
# Pattern letters: s = sliding_attention, f = full_attention (tiled over all layers).
# ``model`` is the kind of model (GEMMA4_TEXT when absent).
PRESETS: dict[str, dict[str, Any]] = {
    # 8 layers, 4 cache owners (0-3), 4 borrowers (4-7); sliding and full owners/borrowers,
    # GQA 4 q heads : 2 kv heads, per-layer inputs, different head dims for full layers.
    "tiny8": dict(
        num_hidden_layers=8,
        num_kv_shared_layers=4,
        layer_pattern="sssf",
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        global_head_dim=32,
        hidden_size_per_layer_input=16,
        vocab_size=512,
        # 12 prompt + 20 new tokens > 16: the window is active during decoding (sliding
        # owners and borrowers mask out old positions).
        sliding_window=16,
        use_double_wide_mlp=True,
        final_logit_softcapping=30.0,
        init_std=0.02,
        # seed picked (from 0..39) for the largest smallest top1-top2 logit gap over the
        # 20 greedy steps (1.4e-2), so that graph rewrites that only reorder fp32 math keep
        # the greedy tokens.
        seed=35,
    ),
    # Gemma 4 E2B layer layout (35 layers, (4 sliding + 1 full) x 7, last 20 layers borrow
    # the KV cache: 15 cache owners) with E2B's head layout (8 q heads, 1 kv head, full
    # layers with 2x head dim) but tiny widths.
    "e2b35": dict(
        num_hidden_layers=35,
        num_kv_shared_layers=20,
        layer_pattern="ssssf",
        hidden_size=32,
        intermediate_size=32,
        num_attention_heads=8,
        num_key_value_heads=1,
        head_dim=8,
        global_head_dim=16,
        hidden_size_per_layer_input=8,
        vocab_size=256,
        sliding_window=512,  # E2B's window (not reached by the 32-token reference)
        use_double_wide_mlp=True,
        final_logit_softcapping=30.0,
        init_std=0.02,
        seed=9,  # picked like tiny8's (smallest top1-top2 gap 5.7e-3)
    ),
    # Gemma4ForConditionalGeneration: tiny8's text layout (4 owners, 4 borrowers) with a 2-layer
    # vision tower (patch 4 px, 3x3 pooling, at most 70 soft tokens: a 96x96 image is 24x24 patches
    # -> 64 image tokens), no audio tower.
    "vlm8": dict(
        model=GEMMA4_VLM,
        num_hidden_layers=8,
        num_kv_shared_layers=4,
        layer_pattern="sssf",
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        global_head_dim=32,
        hidden_size_per_layer_input=16,
        vocab_size=512,
        sliding_window=16,  # a 14-token text prompt + 20 new tokens passes it; the image prompt is 80
        use_double_wide_mlp=True,
        final_logit_softcapping=30.0,
        init_std=0.02,
        vision_hidden_size=16,
        vision_intermediate_size=32,
        vision_num_layers=2,
        vision_num_heads=2,
        vision_head_dim=8,
        patch_size=4,
        pooling_kernel_size=3,
        position_embedding_size=256,  # > the longest side in patches (70 * 3 = 210)
        max_soft_tokens=70,  # the smallest value Gemma4ImageProcessor accepts
        image_size=96,  # the reference image: kept as it is by the processor (no resize)
        # seed picked (from 0..39) for the largest smallest top1-top2 gap over both prompts (1.0e-2)
        seed=3,
    ),
    # Gemma3nForCausalLM with tiny8's layout (layers 4-7 borrow from 2 and 3) and Gemma 3n E2B's
    # features: AltUp (4 inputs), LAuReL, per-layer inputs, activation sparsity (0.95) on the first
    # layers (E2B: 10 of 35; here 2 of 8), one head dim for all layers.
    "gemma3n-tiny8": dict(
        model=GEMMA3N_TEXT,
        num_hidden_layers=8,
        num_kv_shared_layers=4,
        layer_pattern="sssf",
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        hidden_size_per_layer_input=16,
        vocab_size=512,
        sliding_window=16,  # 12 prompt + 20 new tokens pass it
        laurel_rank=8,
        altup_num_inputs=4,
        activation_sparsity=0.95,
        sparse_layers=2,
        final_logit_softcapping=30.0,
        init_std=0.02,
        # seed picked from 0..39 like tiny8's among those whose 20 tokens are mostly distinct:
        # smallest top1-top2 gap 5.6e-3, 18 distinct tokens (seed 27's gap is 1.4e-2, but it
        # repeats one token 6 times)
        seed=14,
    ),
}

# Options of the command line -> settings key, and the models whose presets have that key.
OVERRIDES = {
    "num_layers": "num_hidden_layers",
    "num_kv_shared_layers": "num_kv_shared_layers",
    "layer_types": "layer_pattern",
    "hidden_size": "hidden_size",
    "intermediate_size": "intermediate_size",
    "num_heads": "num_attention_heads",
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "global_head_dim": "global_head_dim",
    "per_layer_input_size": "hidden_size_per_layer_input",
    "vocab_size": "vocab_size",
    "sliding_window": "sliding_window",
    "init_std": "init_std",
    "seed": "seed",
    "sparse_layers": "sparse_layers",
}
# Gemma 4 26B/31B's attention layout in small (31B is dense; 26B adds MoE blocks, left out here): no KV
# sharing and no per-layer inputs; sliding layers 4 KV heads x 8 (26B/31B: 16 x 256), full layers 1 KV head
# x 16 (4 x 512: a quarter of the KV heads, twice the head size) with K = V (``attention_k_eq_v``: V is the
# raw k_proj output, no v_proj); layers 2 and 3 are adjacent full layers; 8 query heads (GQA groups of 2 and
# 8, as 32 query heads on 16 and 4); tiny8's widths, vocabulary and window (16, passed by 12 + 20 tokens).
PRESETS["a26"] = dict(
    PRESETS["tiny8"], num_kv_shared_layers=0, layer_pattern="s,s,f,f,s,s,s,f", hidden_size_per_layer_input=0,
    use_double_wide_mlp=False, num_attention_heads=8,
    num_key_value_heads=4, head_dim=8,                                           # sliding layers: 4 x 8
    num_global_key_value_heads=1, global_head_dim=16, attention_k_eq_v=True,     # full layers: 1 x 16, K = V
    # seed picked from 0..39 for the largest smallest top1-top2 gap over both prompts (12 and 28 tokens):
    # 4.9e-3, 18 distinct tokens of 20
    seed=27,
)
# tiny8 with one head size (full layers 16 like the sliding ones): a Gemma 4 layout that the CPU
# PagedAttention of openvino 2025.2 - 2026.2 can run (it mixes up layers whose head sizes differ), so
# that the sliding window and KV sharing of the paged path can be checked there (smallest top1-top2
# gap 4.4e-3 with the 12-token prompt).
PRESETS["tiny8u"] = dict(PRESETS["tiny8"], global_head_dim=16)


def model_kind(s: dict[str, Any]) -> str:
    return s.get("model", GEMMA4_TEXT)


def default_prompt_ids(vocab_size: int, length: int = 12, first_word_id: int = NUM_SPECIAL) -> list[int]:
    """``<bos>`` followed by fixed pseudo-random ordinary-word ids in ``[first_word_id, vocab_size)``."""
    span = vocab_size - first_word_id
    return [BOS_ID] + [first_word_id + (13 + 97 * k * k + 31 * k) % span for k in range(length - 1)]


def log(msg: str) -> None:
    print(f"[export_gemma4 {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def die(msg: str) -> None:
    print(f"export_gemma4: error: {msg}", file=sys.stderr, flush=True)
    sys.exit(2)


# --------------------------------------------------------------------------------------
# Config / model / tokenizer
# --------------------------------------------------------------------------------------
def expand_layer_types(pattern: str, num_layers: int) -> list[str]:
    """``"sssf"`` -> tiled list; ``"s,s,f"`` or ``"sliding_attention,full_attention"`` -> as given."""
    pattern = pattern.strip()
    names = {"s": SLIDING, "sliding": SLIDING, SLIDING: SLIDING, "f": FULL, "full": FULL, FULL: FULL}
    if "," in pattern:
        items = [p.strip().lower() for p in pattern.split(",") if p.strip()]
        if len(items) != num_layers:
            die(f"--layer-types lists {len(items)} entries but --num-layers is {num_layers}")
    else:
        items = list(pattern.lower())
        items = [items[i % len(items)] for i in range(num_layers)]
    try:
        return [names[i] for i in items]
    except KeyError as e:
        die(f"unknown layer type {e} in {pattern!r} (use s/f, sliding/full, or sliding_attention/full_attention)")
    raise AssertionError


def build_settings(args: argparse.Namespace) -> dict[str, Any]:
    if args.preset not in PRESETS:
        die(f"unknown preset {args.preset!r}; choose one of {sorted(PRESETS)}")
    s = dict(PRESETS[args.preset])
    for option, key in OVERRIDES.items():
        value = getattr(args, option)
        if value is None:
            continue
        if key not in s:
            die(f"--{option.replace('_', '-')} does not apply to preset {args.preset} ({model_kind(s)})")
        s[key] = value
    if args.no_double_wide_mlp:
        if "use_double_wide_mlp" not in s:
            die(f"--no-double-wide-mlp does not apply to preset {args.preset} ({model_kind(s)})")
        s["use_double_wide_mlp"] = False
    n, shared = s["num_hidden_layers"], s["num_kv_shared_layers"]
    if not 0 <= shared < n:
        die(f"num_kv_shared_layers must be in [0, num_layers), got {shared} with {n} layers")
    if any(s["num_attention_heads"] % s.get(key, 1) for key in ("num_key_value_heads", "num_global_key_value_heads")):
        die("num_heads must be a multiple of num_kv_heads (and of the full layers' KV heads)")
    if s["vocab_size"] < first_word_id(s) + 16:
        die("vocab_size is too small")
    if not 0 <= s.get("sparse_layers", 0) <= n:
        die(f"--sparse-layers must be in [0, {n}]")
    s["layer_types"] = expand_layer_types(s.pop("layer_pattern"), n)
    if args.attn_implementation != "sdpa":   # recorded only where it differs from transformers' default
        s["attn_implementation"] = args.attn_implementation
    if args.weight_format != "fp32":
        s["weight_format"] = args.weight_format
    if model_kind(s) != GEMMA3N_TEXT and s["layer_types"][-1] != FULL:
        die("Gemma 4 forces the last layer to full_attention; make the pattern end with 'f'")
    owners = s["layer_types"][: n - shared]
    for i in range(n - shared, n):
        if s["layer_types"][i] not in owners:
            die(f"borrower layer {i} ({s['layer_types'][i]}) has no earlier cache owner of the same type")
    return s


def tokenizer_spec(kind: str) -> dict[str, Any]:
    """The special tokens, plain words and chat template of the made-up tokenizer of ``kind``."""
    if kind == GEMMA4_VLM:
        return dict(special=list(GEMMA4_TURN_TOKENS) + list(GEMMA4_SPECIAL_TOKENS.values()), words=list(ROLE_WORDS),
                    named=dict(GEMMA4_SPECIAL_TOKENS), chat_template=GEMMA4_CHAT_TEMPLATE)
    if kind == GEMMA3N_TEXT:
        return dict(special=list(GEMMA3N_TURN_TOKENS), words=list(ROLE_WORDS), named={},
                    chat_template=GEMMA3N_CHAT_TEMPLATE)
    return dict(special=[], words=[], named={}, chat_template=None)


def first_word_id(s: dict[str, Any]) -> int:
    """Id of ``w<id>``, the first ordinary word: ids below it are special tokens and role words."""
    spec = tokenizer_spec(model_kind(s))
    return NUM_SPECIAL + len(spec["special"]) + len(spec["words"])


def build_tokenizer(vocab_size: int, special: list[str] = (), words: list[str] = (), named: dict[str, str] | None = None,
                    chat_template: str | None = None):
    """A made-up WordLevel vocabulary: ``<pad> <eos> <bos> <unk>``, then ``special`` (added special
    tokens, split off before whitespace splitting, as in the real tokenizers), then ``words``, then
    ``w<id>`` up to ``vocab_size``. ``named`` maps attribute names (``image_token``, ...) to special
    tokens, as the real tokenizer_config.json does."""
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": PAD_ID, "<eos>": EOS_ID, "<bos>": BOS_ID, "<unk>": UNK_ID}
    for token in list(special) + list(words):
        vocab[token] = len(vocab)
    for i in range(len(vocab), vocab_size):
        vocab[f"w{i}"] = i
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if special:
        tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", pair="<bos> $A $B", special_tokens=[("<bos>", BOS_ID)]
    )
    extra = {"extra_special_tokens": dict(named)} if named else {}
    hf_tok = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        clean_up_tokenization_spaces=False,
        model_max_length=4096,
        **extra,
    )
    if chat_template is not None:
        hf_tok.chat_template = chat_template
    return hf_tok


def build_text_config(s: dict[str, Any], architectures: list[str] | None):
    """The decoder's config: Gemma4TextConfig or (gemma3n_text) Gemma3nTextConfig."""
    common = dict(
        vocab_size=s["vocab_size"],
        vocab_size_per_layer_input=s["vocab_size"],
        hidden_size=s["hidden_size"],
        intermediate_size=s["intermediate_size"],
        num_hidden_layers=s["num_hidden_layers"],
        num_attention_heads=s["num_attention_heads"],
        num_key_value_heads=s["num_key_value_heads"],
        head_dim=s["head_dim"],
        hidden_size_per_layer_input=s["hidden_size_per_layer_input"],
        num_kv_shared_layers=s["num_kv_shared_layers"],
        layer_types=list(s["layer_types"]),
        sliding_window=s["sliding_window"],
        max_position_embeddings=4096,
        final_logit_softcapping=s["final_logit_softcapping"],
        initializer_range=s["init_std"],
        tie_word_embeddings=True,
        pad_token_id=PAD_ID,
        eos_token_id=EOS_ID,
        bos_token_id=BOS_ID,
    )
    if architectures is not None:
        common["architectures"] = architectures
    if model_kind(s) == GEMMA3N_TEXT:
        from transformers import Gemma3nTextConfig

        n, sparse = s["num_hidden_layers"], s["sparse_layers"]
        return Gemma3nTextConfig(
            **common,
            laurel_rank=s["laurel_rank"],
            altup_num_inputs=s["altup_num_inputs"],
            activation_sparsity_pattern=[s["activation_sparsity"]] * sparse + [0.0] * (n - sparse),
        )
    from transformers import Gemma4TextConfig

    large = {key: s[key] for key in ("num_global_key_value_heads", "attention_k_eq_v") if key in s}   # 26B/31B
    return Gemma4TextConfig(**common, global_head_dim=s["global_head_dim"], use_double_wide_mlp=s["use_double_wide_mlp"],
                            **large)


def build_config(s: dict[str, Any], tok=None):
    """The model's config; for gemma4_vlm a Gemma4Config whose multimodal token ids are ``tok``'s."""
    kind = model_kind(s)
    if kind == GEMMA4_TEXT:
        return build_text_config(s, ["Gemma4ForCausalLM"])
    if kind == GEMMA3N_TEXT:
        return build_text_config(s, ["Gemma3nForCausalLM"])
    from transformers import Gemma4Config, Gemma4VisionConfig

    vision = Gemma4VisionConfig(
        hidden_size=s["vision_hidden_size"],
        intermediate_size=s["vision_intermediate_size"],
        num_hidden_layers=s["vision_num_layers"],
        num_attention_heads=s["vision_num_heads"],
        num_key_value_heads=s["vision_num_heads"],
        head_dim=s["vision_head_dim"],
        patch_size=s["patch_size"],
        pooling_kernel_size=s["pooling_kernel_size"],
        position_embedding_size=s["position_embedding_size"],
        initializer_range=s["init_std"],
    )
    ids = {name: tok.convert_tokens_to_ids(token) for name, token in GEMMA4_SPECIAL_TOKENS.items()}
    return Gemma4Config(
        text_config=build_text_config(s, None),
        vision_config=vision,
        audio_config=None,
        boi_token_id=ids["boi_token"],
        eoi_token_id=ids["eoi_token"],
        image_token_id=ids["image_token"],
        video_token_id=ids["video_token"],
        boa_token_id=ids["boa_token"],
        eoa_token_index=ids["eoa_token"],
        audio_token_id=ids["audio_token"],
        initializer_range=s["init_std"],
        tie_word_embeddings=True,
        architectures=["Gemma4ForConditionalGeneration"],
    )


def build_model(config, s: dict[str, Any]):
    import torch
    import transformers

    cls = {GEMMA4_TEXT: "Gemma4ForCausalLM", GEMMA4_VLM: "Gemma4ForConditionalGeneration",
           GEMMA3N_TEXT: "Gemma3nForCausalLM"}[model_kind(s)]
    seed = s["seed"]
    torch.manual_seed(seed)
    model = getattr(transformers, cls)(config).eval().to(torch.float32)
    if "attn_implementation" in s:
        model.set_attn_implementation(s["attn_implementation"])
    # Gemma initialises every RMSNorm scale to exactly 1; jitter them (deterministically) so that a graph transformation that drops or
    # swaps a norm weight changes the output.
    gen = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.add_(0.1 * torch.randn(p.shape, generator=gen))
        # The embedding is tied to the LM head: shrink the rows of the special tokens
        # (<pad> <eos> <bos> <unk>, and turn/multimodal tokens and role words where the tokenizer
        # has them) so that their logits stay near 0 and greedy decoding (almost surely) never
        # picks them: genai must not stop on eos, and a generated <bos>/<pad> is a poor test token.
        model.get_input_embeddings().weight[:first_word_id(s)] *= 0.05
    model.generation_config.eos_token_id = EOS_ID
    model.generation_config.bos_token_id = BOS_ID
    model.generation_config.pad_token_id = PAD_ID
    model.generation_config.do_sample = False
    return model


def decoder_of(model):
    """The decoder stack (``.layers``) and its config, for causal-LM and multimodal models."""
    inner = model.model
    text = getattr(inner, "language_model", inner)
    return text, text.config


def kv_sharing_ground_truth(model) -> list[dict[str, Any]]:
    """Read the KV-sharing layout from transformers' own attention modules."""
    decoder, cfg = decoder_of(model)
    n_shared = cfg.num_kv_shared_layers
    owners = [i for i in range(cfg.num_hidden_layers) if not decoder.layers[i].self_attn.is_kv_shared_layer]
    # optimum-intel numbers the cache inputs past_key_values.<k>.key/value over the
    # non-shared layers (layer_types[:-num_kv_shared_layers]) in order.
    cache_slot = {layer: k for k, layer in enumerate(owners)}
    out = []
    for i, layer in enumerate(decoder.layers):
        a = layer.self_attn
        entry = {
            "layer": i,
            "attention_type": a.layer_type,
            "sliding_window": a.sliding_window,
            "head_dim": a.head_dim,
            "num_kv_heads": cfg.num_attention_heads // a.num_key_value_groups,
            "kv": "borrow" if a.is_kv_shared_layer else "own",
            "kv_source_layer": a.kv_shared_layer_index if a.is_kv_shared_layer else i,
            "stores_kv_for_borrowers": bool(a.store_full_length_kv),
        }
        if getattr(cfg, "attention_k_eq_v", False):   # Gemma 4 26B/31B's full layers: V is the raw k_proj output
            entry["v_from_k_proj"] = bool(a.use_alternative_attention)
        src = entry["kv_source_layer"]
        entry["ir_cache_slot"] = cache_slot[src]
        entry["ir_cache_inputs"] = [f"past_key_values.{cache_slot[src]}.key", f"past_key_values.{cache_slot[src]}.value"]
        out.append(entry)
    assert len(owners) == cfg.num_hidden_layers - n_shared
    return out


def greedy_reference(model, prompt_ids: list[int], new_tokens: int, first_word: int = NUM_SPECIAL,
                     **model_inputs) -> dict[str, Any]:
    """transformers' greedy continuation of ``prompt_ids`` (``model_inputs``: e.g. pixel values),
    its top1-top2 logit gap per step, and a check that one forward pass over the whole sequence
    (with a fresh cache: see the module docstring on Gemma 3n) picks the same tokens."""
    import torch

    input_ids = torch.tensor([prompt_ids], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(
            input_ids=input_ids,
            attention_mask=torch.ones_like(input_ids),
            **model_inputs,
            max_new_tokens=new_tokens,
            min_new_tokens=0,
            do_sample=False,
            num_beams=1,
            output_scores=True,
            return_dict_in_generate=True,
            eos_token_id=EOS_ID,
            pad_token_id=PAD_ID,
        )
    gen = out.sequences[0, len(prompt_ids):].tolist()
    margins = []
    for step_scores in out.scores:
        top2 = torch.topk(step_scores[0].float(), 2).values
        margins.append(float(top2[0] - top2[1]))
    if len(gen) != new_tokens:
        raise RuntimeError(f"greedy generation stopped after {len(gen)} tokens (eos?) : {gen}")
    if any(t < first_word for t in gen):
        raise RuntimeError(f"greedy generation picked a special token ({gen}); choose another --seed or --prompt-ids")
    if min(margins) < 1e-4:
        log(f"warning: a greedy step has a top1-top2 logit gap of {min(margins):.2g}; "
            "consider another --seed (runtimes with lossy precision may flip it)")
    with torch.no_grad():
        seq = out.sequences
        logits = model(input_ids=seq, attention_mask=torch.ones_like(seq), use_cache=True, **model_inputs).logits[0]
    whole = logits[len(prompt_ids) - 1 : -1].argmax(-1).tolist()
    if whole != gen:
        raise RuntimeError(f"transformers step-by-step and whole-sequence greedy disagree: {gen} vs {whole}")
    return {"generated_ids": gen, "top1_top2_logit_margin": margins}


REFERENCE_IMAGE_CONTENT = ("RGB uint8, HWC; at row y, column x: R = x * 255 // (size - 1), "
                           "G = y * 255 // (size - 1), B = (x + y) * 7 % 256")


def reference_image(size: int):
    """The reference image, ``size`` x ``size``: see REFERENCE_IMAGE_CONTENT."""
    import numpy as np

    y, x = np.mgrid[0:size, 0:size]
    return np.stack([(x * 255) // (size - 1), (y * 255) // (size - 1), ((x + y) * 7) % 256], -1).astype(np.uint8)


def words_text(ids: list[int]) -> str:
    return " ".join(f"w{i}" for i in ids)


def vlm_references(model, tok, image_processor, s: dict[str, Any], new_tokens: int, user_ids: list[int]) -> dict[str, Any]:
    """Two greedy references of the VLM: a chat-templated text prompt, and the same text after an
    image (``<|image|>`` expanded by the processor's rule to ``<|image>`` + one ``<|image|>`` per soft
    token + ``<image|>``). Each gives the text openvino_genai's VLMPipeline takes (it applies the
    chat template itself) and the ids transformers ran."""
    import numpy as np
    from PIL import Image

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ov_greedy import gemma4_patches

    user = words_text(user_ids)
    image_token = GEMMA4_SPECIAL_TOKENS["image_token"]
    chat = tok.apply_chat_template([{"role": "user", "content": [{"type": "text", "text": user}]}],
                                   tokenize=False, add_generation_prompt=True)
    text_ids = tok(chat, add_special_tokens=False).input_ids
    text_ref = greedy_reference(model, text_ids, new_tokens, first_word_id(s))
    log(f"transformers greedy, text prompt ({len(text_ids)} tokens): {text_ref['generated_ids']}")

    image = reference_image(s["image_size"])
    features = image_processor(Image.fromarray(image), return_tensors="pt")
    soft_tokens = int(features["num_soft_tokens_per_image"][0])
    # the numpy patching that tools/ov_greedy.py feeds the vision IR must be the processor's
    patches, positions, n = gemma4_patches(image, s["patch_size"], s["max_soft_tokens"], s["pooling_kernel_size"])
    if not (n == soft_tokens and np.array_equal(patches[None], features["pixel_values"].numpy())
            and np.array_equal(positions[None], features["image_position_ids"].numpy())):
        die("tools/ov_greedy.gemma4_patches disagrees with Gemma4ImageProcessor on the reference image")
    image_chat = tok.apply_chat_template(
        [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": user}]}],
        tokenize=False, add_generation_prompt=True)
    expanded = image_chat.replace(image_token, GEMMA4_SPECIAL_TOKENS["boi_token"] + image_token * soft_tokens
                                  + GEMMA4_SPECIAL_TOKENS["eoi_token"])
    image_ids = tok(expanded, add_special_tokens=False).input_ids
    image_ref = greedy_reference(model, image_ids, new_tokens, first_word_id(s), pixel_values=features["pixel_values"],
                                 image_position_ids=features["image_position_ids"])
    log(f"transformers greedy, image prompt ({len(image_ids)} tokens, {soft_tokens} image tokens): "
        f"{image_ref['generated_ids']}")
    return {
        "image": image,
        "text": {"prompt_text": user, "chat_prompt": chat, "prompt_ids": text_ids, **text_ref},
        "image_prompt": {
            "prompt_text": image_token + user,
            "chat_prompt": image_chat,
            "image": {"file": REFERENCE_IMAGE_FILE, "shape": list(image.shape), "dtype": "uint8",
                      "content": REFERENCE_IMAGE_CONTENT},
            "num_image_tokens": soft_tokens,
            "prompt_ids": image_ids,
            "max_new_tokens": new_tokens,
            **image_ref,
        },
    }


def reproduce_command(args: argparse.Namespace) -> str:
    """The command line that recreates this fixture (without machine-specific paths)."""
    parts = ["python tools/export_gemma4.py", f"--preset {args.preset}"]
    skip = {"preset", "out", "work_dir", "keep_work", "verify", "verify_only", "device", "precision"}
    defaults = vars(parse_args(["--out", "x"]))
    for k, v in vars(args).items():
        if k in skip or v == defaults.get(k):
            continue
        flag = "--" + k.replace("_", "-")
        parts.append(flag if v is True else f"{flag} {v}")
    parts.append("--out <dir>")
    return " ".join(parts)


def versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {"python": sys.version.split()[0]}
    for pkg in ("torch", "transformers", "optimum", "optimum-intel", "openvino", "openvino-tokenizers", "nncf", "tokenizers") + extra:
        try:
            out[pkg] = version(pkg)
        except PackageNotFoundError:
            out[pkg] = "not installed"
    return out


# --------------------------------------------------------------------------------------
# Export
# --------------------------------------------------------------------------------------
DESCRIPTIONS = {
    GEMMA4_TEXT: "Tiny random-weight Gemma 4 text model exported by tools/export_gemma4.py",
    GEMMA4_VLM: "Tiny random-weight Gemma 4 multimodal model (Gemma4ForConditionalGeneration, vision tower, "
                "no audio) exported as image-text-to-text by tools/export_gemma4.py",
    GEMMA3N_TEXT: "Tiny random-weight Gemma 3n text model (Gemma3nForCausalLM) exported by tools/export_gemma4.py",
}


def export(args: argparse.Namespace) -> Path:
    try:
        import torch
        import transformers  # noqa: F401
        from optimum.exporters.openvino import main_export
        from optimum.intel import OVConfig
    except ImportError as e:
        die(f"{e}. Run this with the export env (torch, transformers>=5.5, optimum-intel), e.g. .venvs/export/bin/python")

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # bit-stable reference logits

    s = build_settings(args)
    kind = model_kind(s)
    first = first_word_id(s)
    if args.prompt_ids:
        prompt_ids = [int(x) for x in args.prompt_ids.split(",")]
    else:
        prompt_ids = default_prompt_ids(s["vocab_size"], first_word_id=first)
    if any(not 0 <= t < s["vocab_size"] for t in prompt_ids):
        die(f"prompt ids must be in [0, {s['vocab_size']})")
    if kind == GEMMA4_VLM and (prompt_ids[0] != BOS_ID or any(t < first for t in prompt_ids[1:])):
        die(f"vlm8 prompts are <bos> and words (ids >= {first}); the chat template adds the rest")
    out_dir = Path(args.out).resolve()
    work_root = Path(args.work_dir or tempfile.mkdtemp(prefix="gemma4_export_")).resolve()
    hf_dir = work_root / "hf"
    ov_tmp = work_root / "ov"
    for d in (hf_dir, ov_tmp):
        if d.exists():
            shutil.rmtree(d)
    hf_dir.mkdir(parents=True)

    log(f"preset={args.preset} model={kind} layers={s['num_hidden_layers']} shared={s['num_kv_shared_layers']} "
        f"types={''.join('f' if t == FULL else 's' for t in s['layer_types'])} seed={s['seed']}")
    tok = build_tokenizer(s["vocab_size"], **tokenizer_spec(kind))
    config = build_config(s, tok)
    model = build_model(config, s)
    nparams = sum(p.numel() for p in model.parameters())
    log(f"built {type(model).__name__} with {nparams:,} parameters")

    layout = kv_sharing_ground_truth(model)
    image_processor = None
    try:
        if kind == GEMMA4_VLM:
            from transformers.models.gemma4.image_processing_pil_gemma4 import Gemma4ImageProcessorPil

            image_processor = Gemma4ImageProcessorPil(patch_size=s["patch_size"], max_soft_tokens=s["max_soft_tokens"],
                                                      pooling_kernel_size=s["pooling_kernel_size"])
            refs = vlm_references(model, tok, image_processor, s, args.new_tokens, prompt_ids[1:])
            ref = refs["text"]
        else:
            ref = greedy_reference(model, prompt_ids, args.new_tokens, first)
            log(f"transformers greedy ({args.new_tokens} tokens): {ref['generated_ids']}")
    except RuntimeError as e:
        die(str(e))
    margins = ref["top1_top2_logit_margin"] + (refs["image_prompt"]["top1_top2_logit_margin"] if kind == GEMMA4_VLM else [])
    log(f"min top1-top2 logit margin: {min(margins):.4g}")
    long_ref = None
    if args.long_prompt_length:
        long_ids = default_prompt_ids(s["vocab_size"], args.long_prompt_length)
        try:
            long_ref = dict(prompt_ids=long_ids, **greedy_reference(model, long_ids, args.new_tokens, first))
        except RuntimeError as e:
            die(f"long prompt: {e}")
        log(f"transformers greedy after the {len(long_ids)}-token prompt: {long_ref['generated_ids']} "
            f"(min margin {min(long_ref['top1_top2_logit_margin']):.4g})")

    model.save_pretrained(hf_dir, safe_serialization=True)
    tok.save_pretrained(hf_dir)
    if image_processor is not None:
        image_processor.save_pretrained(hf_dir)
    log(f"saved transformers model + tokenizer to {hf_dir}")

    task = "image-text-to-text" if kind == GEMMA4_VLM else "text-generation-with-past"
    log(f"exporting with optimum-intel ({task}, stateful, {s.get('weight_format', 'fp32')} weights) ...")
    if kind != GEMMA4_VLM:
        allow_gemma4_text_export()
    with keep_eager_attention(s.get("attn_implementation") == "eager"):
        main_export(
            model_name_or_path=str(hf_dir),
            output=str(ov_tmp),
            task=task,
            framework="pt",
            stateful=True,
            ov_config=OVConfig(dtype="fp32"),
            convert_tokenizer=True,
            library_name="transformers",
            local_files_only=True,
            model_loading_kwargs={"attn_implementation": s["attn_implementation"]} if "attn_implementation" in s else None,
            # optimum's Gemma4DummyPastKeyValuesGenerator makes the dummy cache of sliding
            # layers sliding_window long and that of full layers sequence_length long; the
            # traced attention mask needs both to be equal, so trace with
            # sequence_length == sliding_window (shapes stay dynamic in the IR).
            sequence_length=s["sliding_window"],
        )
    main_xml = ov_tmp / ("openvino_language_model.xml" if kind == GEMMA4_VLM else "openvino_model.xml")
    if s.get("weight_format") == "int8":
        compress_weights_int8(main_xml)
    _checked_attention(main_xml, s)
    irs = (["openvino_language_model", "openvino_text_embeddings_model", "openvino_text_embeddings_per_layer_model",
            "openvino_vision_embeddings_model"] if kind == GEMMA4_VLM else ["openvino_model"])
    for name in [f"{ir}.{ext}" for ir in irs for ext in ("xml", "bin")]:
        if not (ov_tmp / name).exists():
            die(f"optimum-intel did not write {name} in {ov_tmp}")
    if not (ov_tmp / "openvino_tokenizer.xml").exists():
        log("optimum did not convert the tokenizer; converting with openvino_tokenizers")
        import openvino as ov
        from openvino_tokenizers import convert_tokenizer

        ov_tok, ov_detok = convert_tokenizer(tok, with_detokenizer=True)
        ov.save_model(ov_tok, ov_tmp / "openvino_tokenizer.xml")
        ov.save_model(ov_detok, ov_tmp / "openvino_detokenizer.xml")

    if kind == GEMMA4_VLM:
        ir_info = {f"{ir}.xml": describe_ir(ov_tmp / f"{ir}.xml") for ir in irs}
        import numpy as np

        np.save(ov_tmp / REFERENCE_IMAGE_FILE, refs["image"])
    else:
        ir_info = describe_ir(ov_tmp / "openvino_model.xml")

    reference = {
        "description": DESCRIPTIONS[kind],
        "preset": args.preset,
        "seed": s['seed'],
        "command": reproduce_command(args),
        "runtime_note": "generated_ids are fp32 transformers greedy tokens; compare on CPU with "
        "INFERENCE_PRECISION_HINT=f32 and KV_CACHE_PRECISION=f32 (the CPU plugin defaults to bf16 "
        "inference on avx512_bf16/AMX CPUs and to an f16/u8 KV cache, which flips near-tied picks "
        "of this random model)",
        "settings": {k: v for k, v in s.items()},
        "num_parameters": nparams,
        "config": json.loads(config.to_json_string(use_diff=False)),
        "kv_sharing": {
            "num_kv_shared_layers": config.get_text_config().num_kv_shared_layers,
            "first_kv_shared_layer": config.get_text_config().num_hidden_layers - config.get_text_config().num_kv_shared_layers,
            "cache_owners": [e["layer"] for e in layout if e["kv"] == "own"],
            "borrowers": {str(e["layer"]): e["kv_source_layer"] for e in layout if e["kv"] == "borrow"},
            "layers": layout,
            "source": f"transformers {type(decoder_of(model)[0].layers[0].self_attn).__name__}.is_kv_shared_layer / "
                      "kv_shared_layer_index / store_full_length_kv",
        },
    }
    if kind == GEMMA4_VLM:
        reference.update({
            "prompt_text": ref["prompt_text"],
            "chat_prompt": ref["chat_prompt"],
            "prompt_note": "prompt_text is the user message; prompt_ids are transformers' ids of chat_prompt "
                           "(the chat template applied to it, tokenized without adding <bos> again); "
                           "openvino_genai's VLMPipeline is given prompt_text and applies the template itself",
        })
    reference.update({
        "prompt_ids": ref["prompt_ids"] if kind == GEMMA4_VLM else prompt_ids,
        "max_new_tokens": args.new_tokens,
        "generated_ids": ref["generated_ids"],
        "top1_top2_logit_margin": ref["top1_top2_logit_margin"],
    })
    if kind == GEMMA4_VLM:
        reference["image_prompt"] = refs["image_prompt"]
    if long_ref:
        reference["long_prompt"] = long_ref
    if s.get("weight_format") == "int8":
        reference["ir_reference"] = ir_greedy_reference(main_xml, reference["prompt_ids"], args.new_tokens)
        log(f"the int8 IR's own greedy tokens: {reference['ir_reference']['generated_ids']}")
    reference.update({
        "eos_token_id": EOS_ID,
        "ir": ir_info,
        "versions": versions(("pillow",) if kind == GEMMA4_VLM else ()),
    })
    (ov_tmp / "reference.json").write_text(json.dumps(reference, indent=1) + "\n")

    # Keep only what the fixture needs.
    for p in sorted(ov_tmp.iterdir()):
        if p.name not in KEEP_FILES:
            log(f"dropping {p.name}")
            shutil.rmtree(p) if p.is_dir() else p.unlink()
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(ov_tmp, out_dir)
    if not args.keep_work:
        shutil.rmtree(work_root, ignore_errors=True)
    total = sum(p.stat().st_size for p in out_dir.iterdir())
    log(f"wrote {out_dir} ({total / 1e6:.2f} MB)")
    for p in sorted(out_dir.iterdir()):
        log(f"  {p.name:45s} {p.stat().st_size:>10,d}")
    return out_dir


INT8_WEIGHTS = {"bits": 8, "sym": False}   # what optimum-cli --weight-format int8 asks NNCF for


def ir_greedy_reference(xml: Path, prompt_ids: list[int], new_tokens: int) -> dict[str, Any]:
    """The IR's own greedy tokens (ov.Core, ovpasses.precision.EXACT_CPU_CONFIG): the reference of a
    weight-compressed IR, whose int8 weights change the logits away from transformers' fp32 ones."""
    import openvino as ov

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from ovpasses.precision import EXACT_CPU_CONFIG
    from testkit.greedy import greedy_generate

    compiled = ov.Core().compile_model(xml, "CPU", EXACT_CPU_CONFIG)
    return {"generated_ids": greedy_generate(compiled, prompt_ids, new_tokens),
            "source": f"ov.Core greedy loop on this IR, openvino {ov.__version__.split('-')[0]}, EXACT_CPU_CONFIG",
            "note": "generated_ids above are transformers' fp32 tokens; the int8 weights change the logits, so "
                    "clients of this IR are checked against these tokens"}


def compress_weights_int8(xml: Path) -> None:
    """NNCF's int8 weight compression (per channel, asymmetric) of the IR, through optimum-intel's own
    ``_weight_only_quantization``, as ``optimum-cli export openvino --weight-format int8`` does it after
    the export (``main_export`` alone leaves an explicit quantization config to its caller)."""
    import openvino as ov
    from optimum.intel.openvino.quantization import _weight_only_quantization

    model = ov.Core().read_model(xml)
    _weight_only_quantization(model, dict(INT8_WEIGHTS))
    tmp = xml.with_name(xml.stem + "_int8.xml")
    ov.save_model(model, tmp, compress_to_fp16=False)
    del model
    for suffix in (".xml", ".bin"):
        tmp.with_suffix(suffix).replace(xml.with_suffix(suffix))
    log(f"{xml.name}: weights compressed to int8 by NNCF")


def keep_eager_attention(enabled: bool):
    """While ``enabled``: ovc's MOCTransformations (``apply_moc_transformations``, which convert_model runs
    on the traced model) run with every Softmax's output also read by a temporary Result, removed again
    right after. Its SDPAFusion fuses only a Softmax with one consumer, so eager attention stays eager;
    every other transformation of MOC runs as usual (see the module docstring)."""
    import contextlib

    if not enabled:
        return contextlib.nullcontext()
    import openvino as ov
    import openvino._offline_transformations as offline

    moc = offline.apply_moc_transformations

    def moc_keeping_softmax(model, *args, **kwargs):
        probes = [ov.opset13.result(n.output(0)) for n in model.get_ordered_ops() if n.get_type_name() == "Softmax"]
        model.add_results(probes)
        moc(model, *args, **kwargs)
        for probe in probes:
            model.remove_result(probe)
        model.validate_nodes_and_infer_types()

    @contextlib.contextmanager
    def patched():
        offline.apply_moc_transformations = moc_keeping_softmax
        try:
            yield
        finally:
            offline.apply_moc_transformations = moc
    return patched()


def _checked_attention(xml: Path, s: dict[str, Any]) -> None:
    """The IR's attention is what ``--attn-implementation`` asked for: with ``eager`` no
    ScaledDotProductAttention and a Softmax per layer."""
    if s.get("attn_implementation") != "eager":
        return
    import openvino as ov

    types = [n.get_type_name() for n in ov.Core().read_model(xml).get_ops()]
    sdpa, softmax = types.count("ScaledDotProductAttention"), types.count("Softmax")
    log(f"{xml.name}: {sdpa} ScaledDotProductAttention, {softmax} Softmax")
    if sdpa or softmax < s["num_hidden_layers"]:
        die(f"{xml.name} was to hold eager attention: {sdpa} ScaledDotProductAttention, {softmax} Softmax")


def allow_gemma4_text_export() -> None:
    """optimum-intel 2.2.0 registers ``gemma4_text`` with MIN_TRANSFORMERS_VERSION 5.5 but
    inherits MAX_TRANSFORMERS_VERSION 5.0 from GemmaOpenVINOConfig, so the export is
    refused on every transformers version.  Lift the inherited upper bound for this
    config class only (the check is the only thing in the way); ``gemma3n_text``'s config class
    is a subclass that inherits it, so this lifts it there too."""
    from optimum.exporters.openvino import model_configs

    cls = getattr(model_configs, "Gemma4TextOpenVINOConfig", None)
    if cls is None:
        die("this optimum-intel has no Gemma4TextOpenVINOConfig (need optimum-intel >= 2.2)")
    if cls.MAX_TRANSFORMERS_VERSION is not None and "MAX_TRANSFORMERS_VERSION" not in cls.__dict__:
        log(f"note: lifting inherited MAX_TRANSFORMERS_VERSION={cls.MAX_TRANSFORMERS_VERSION} of Gemma4TextOpenVINOConfig")
        cls.MAX_TRANSFORMERS_VERSION = None


def describe_ir(xml: Path) -> dict[str, Any]:
    import openvino as ov

    m = ov.Core().read_model(xml)
    return {
        "inputs": {p.get_any_name(): [p.get_element_type().get_type_name(), str(p.get_partial_shape())] for p in m.inputs},
        "outputs": {p.get_any_name(): [p.get_element_type().get_type_name(), str(p.get_partial_shape())] for p in m.outputs},
        "states": sorted(v.get_info().variable_id for v in m.get_variables()),
        "stateful": bool(m.get_variables()),
    }


# --------------------------------------------------------------------------------------
# Verification (needs only openvino; openvino_genai optional)
# --------------------------------------------------------------------------------------
def verify(out_dir: Path, device: str = "CPU", precision: str = "exact") -> bool:
    """Check the IR against reference.json with ov.Core and (if importable) openvino_genai.

    ``precision="exact"`` compiles with ovpasses.precision.EXACT_CPU_CONFIG (f32 inference, f32
    KV cache): the CPU plugin defaults to bf16 inference on CPUs with avx512_bf16/AMX and to
    an f16 (SDPA) or u8/f16 (paged attention) KV cache, which can flip near-tied greedy picks
    of a random model.  ``"default"`` uses the device defaults.
    """
    import numpy as np
    import openvino as ov

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from ov_greedy import fixture_cases, run_core
    from ovpasses.app.check.genai import token_collector
    from ovpasses.precision import EXACT_CPU_CONFIG

    ref = json.loads((out_dir / "reference.json").read_text())
    vlm = (out_dir / "openvino_language_model.xml").exists()
    props = dict(EXACT_CPU_CONFIG) if precision == "exact" else {}
    ok = True
    log(f"openvino {ov.__version__}, device {device}, precision {precision} {props}")

    for case in fixture_cases(out_dir, ref):
        log(f"[{case['name']}] expected (transformers): {case['expected']}")
        got, fused = run_core(out_dir, case, device, props)
        match = got == case["expected"]
        ok &= match
        log(f"[{case['name']}] ov.Core greedy loop: {'MATCH' if match else 'MISMATCH'} {got} "
            f"(fused ScaledDotProductAttention nodes in the {device} runtime model: {fused})")

    try:
        import openvino_genai as genai
    except ImportError:
        log("openvino_genai not importable: skipping pipeline checks")
        return ok

    def run_pipe(case, **kw):
        cfg = genai.GenerationConfig()
        cfg.max_new_tokens = len(case["expected"])
        cfg.min_new_tokens = len(case["expected"])
        cfg.do_sample = False
        if vlm:
            pipe = genai.VLMPipeline(str(out_dir), device, **kw, **props)
            streamer = token_collector()
            images = [ov.Tensor(case["image"][None])] if case["image"] is not None else []
            pipe.generate(case["prompt_text"], images=images, generation_config=cfg, streamer=streamer)
            return streamer.ids
        pipe = genai.LLMPipeline(str(out_dir), device, **kw, **props)
        ids = ov.Tensor(np.array([case["prompt_ids"]], dtype=np.int64))
        mask = ov.Tensor(np.ones((1, len(case["prompt_ids"])), dtype=np.int64))
        res = pipe.generate(genai.TokenizedInputs(ids, mask), cfg)
        return [int(t) for t in res.tokens[0]]

    kind = "VLMPipeline" if vlm else "LLMPipeline"
    for case in fixture_cases(out_dir, ref):
        for label, kw in (
            (f"genai {kind} ATTENTION_BACKEND=SDPA", {"ATTENTION_BACKEND": "SDPA"}),
            (f"genai {kind} scheduler_config (PA)", {"scheduler_config": genai.SchedulerConfig()}),
        ):
            try:
                got = run_pipe(case, **kw)
                match = got == case["expected"]
                log(f"[{case['name']}] {label}: {'MATCH' if match else 'MISMATCH'} {got}")
            except Exception as e:  # noqa: BLE001
                match = False
                msg = str(e).strip().splitlines()
                log(f"[{case['name']}] {label}: FAILED {type(e).__name__}: {msg[0] if msg else ''}")
            ok &= match
    return ok


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", default="tiny8", help=f"one of {sorted(PRESETS)} (default tiny8)")
    p.add_argument("--out", required=True, help="output folder (replaced if it exists)")
    p.add_argument("--num-layers", type=int)
    p.add_argument("--num-kv-shared-layers", type=int, help="number of trailing layers that borrow a KV cache")
    p.add_argument("--layer-types", help="pattern tiled over the layers, e.g. 'sssf' or 'ssssf', "
                   "or an explicit comma list 's,f,s,f' (s=sliding_attention, f=full_attention)")
    p.add_argument("--hidden-size", type=int)
    p.add_argument("--intermediate-size", type=int)
    p.add_argument("--num-heads", type=int, help="query heads")
    p.add_argument("--num-kv-heads", type=int, help="key/value heads (GQA)")
    p.add_argument("--head-dim", type=int, help="head dim of sliding layers")
    p.add_argument("--global-head-dim", type=int, help="head dim of full-attention layers (Gemma 4)")
    p.add_argument("--per-layer-input-size", type=int, help="hidden_size_per_layer_input (0 disables PLE)")
    p.add_argument("--vocab-size", type=int)
    p.add_argument("--sliding-window", type=int)
    p.add_argument("--init-std", type=float, help="initializer_range (std of random weights)")
    p.add_argument("--no-double-wide-mlp", action="store_true", help="use_double_wide_mlp=False (Gemma 4)")
    p.add_argument("--sparse-layers", type=int, help="Gemma 3n: number of first layers with activation sparsity")
    p.add_argument("--seed", type=int, help="random seed of the weights (default: the preset's)")
    p.add_argument("--attn-implementation", choices=["sdpa", "eager"], default="sdpa",
                   help="transformers' attention for the reference and the trace (eager: an IR without "
                        "ScaledDotProductAttention, see the module docstring)")
    p.add_argument("--weight-format", choices=["fp32", "int8"], default="fp32",
                   help="int8: NNCF int8 weight compression of the IR (the reference stays transformers' fp32 tokens)")
    p.add_argument("--new-tokens", type=int, default=20, help="greedy tokens recorded in reference.json")
    p.add_argument("--prompt-ids", help="comma-separated prompt token ids (default: 12 fixed ids starting with bos; "
                   "vlm8: bos and the words of the user message)")
    p.add_argument("--long-prompt-length", type=int, default=0,
                   help="also record transformers' greedy tokens after a prompt of this many fixed ids "
                        "(reference.json 'long_prompt'); for prompts longer than the sliding window")
    p.add_argument("--work-dir", help="scratch folder (default: a fresh temp dir)")
    p.add_argument("--keep-work", action="store_true", help="keep the scratch folder (transformers checkpoint)")
    p.add_argument("--verify", action="store_true", help="after exporting, verify with openvino (+genai if present)")
    p.add_argument("--verify-only", action="store_true", help="only verify an existing --out folder")
    p.add_argument("--device", default="CPU")
    p.add_argument("--precision", choices=["exact", "default"], default="exact",
                   help="--verify: 'exact' = f32 inference + f32 KV cache (default), 'default' = device defaults")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not args.verify_only and os.environ.get("PYTHONHASHSEED") != "0" and argv is None:
        # Gemma4TextModel iterates a set of layer-type strings while building the rotary
        # embeddings; its order (and so the traced tensor names in the IR) depends on the
        # string hash seed.  Re-run with a fixed seed so the IR is byte-for-byte reproducible.
        env = dict(os.environ, PYTHONHASHSEED="0")
        os.execve(sys.executable, [sys.executable, os.path.abspath(__file__)] + sys.argv[1:], env)
    if args.verify_only:
        return 0 if verify(Path(args.out), args.device, args.precision) else 1
    out = export(args)
    if args.verify:
        return 0 if verify(out, args.device, args.precision) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
