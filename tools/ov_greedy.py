#!/usr/bin/env python3
"""Minimal greedy decoding of an optimum-intel stateful LLM IR with plain ``openvino``.

Only ``openvino`` and ``numpy`` are needed (no openvino_genai, no torch)::

    from ov_greedy import ov_greedy_generate, count_fused_sdpa
    compiled = ov.Core().compile_model("dir/openvino_model.xml", "CPU")
    ids = ov_greedy_generate(compiled, prompt_ids=[2, 17, 301], max_new_tokens=20)

As a script it checks a fixture folder written by ``tools/export_gemma4.py``::

    python tools/ov_greedy.py tests/fixtures/gemma4/tiny8 [--device CPU]

and exits non-zero when the tokens differ from ``reference.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

import numpy as np


# Compile properties under which the CPU plugin reproduces fp32 transformers greedy tokens:
# by default it runs bf16 on CPUs with avx512_bf16/AMX and keeps the KV cache in f16
# (stateful SDPA) or u8/f16 (paged attention), which flips near-tied picks of a random model.
EXACT_CPU_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}


def _input_names(compiled) -> set[str]:
    names: set[str] = set()
    for port in compiled.inputs:
        names.update(port.get_names())
    return names


def ov_greedy_generate(compiled, prompt_ids: Sequence[int], max_new_tokens: int,
                       eos_token_id: int | None = None) -> list[int]:
    """Greedy-decode ``max_new_tokens`` tokens (batch 1) from a stateful decoder IR.

    ``compiled`` is an ``openvino.CompiledModel`` of a stateful optimum-intel export whose
    inputs are a subset of ``input_ids``, ``attention_mask``, ``position_ids``,
    ``beam_idx`` and whose first output is ``logits [batch, seq, vocab]``.  The first call
    feeds the whole prompt, each later call one token.  Stops early only if
    ``eos_token_id`` is given and generated.
    """
    names = _input_names(compiled)
    unknown = names - {"input_ids", "attention_mask", "position_ids", "beam_idx"}
    if unknown:
        raise ValueError(f"ov_greedy_generate: unsupported model inputs {sorted(unknown)}")
    if "input_ids" not in names:
        raise ValueError("ov_greedy_generate: the model has no input_ids input")

    request = compiled.create_infer_request()
    request.reset_state()
    tokens = [int(t) for t in prompt_ids]
    step_ids = np.array([tokens], dtype=np.int64)
    past = 0
    out: list[int] = []
    for _ in range(max_new_tokens):
        n = step_ids.shape[1]
        feed = {"input_ids": step_ids}
        if "attention_mask" in names:
            feed["attention_mask"] = np.ones((1, past + n), dtype=np.int64)
        if "position_ids" in names:
            feed["position_ids"] = np.arange(past, past + n, dtype=np.int64)[None, :]
        if "beam_idx" in names:
            feed["beam_idx"] = np.zeros((1,), dtype=np.int32)
        request.infer(feed)
        logits = request.get_output_tensor(0).data
        nxt = int(np.argmax(logits[0, -1]))
        out.append(nxt)
        past += n
        if eos_token_id is not None and nxt == eos_token_id:
            break
        step_ids = np.array([[nxt]], dtype=np.int64)
    return out


def count_layer_type(compiled, layer_type: str) -> int:
    """Number of nodes of ``compiled.get_runtime_model()`` whose rt_info layerType is ``layer_type``."""
    count = 0
    for node in compiled.get_runtime_model().get_ordered_ops():
        rt = node.get_rt_info()
        if "layerType" in rt and rt["layerType"].astype(str) == layer_type:
            count += 1
    return count


def count_fused_sdpa(compiled) -> int:
    """Number of fused ScaledDotProductAttention kernels in the compiled (runtime) model."""
    return count_layer_type(compiled, "ScaledDotProductAttention")


def main(argv=None) -> int:
    import openvino as ov

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("model_dir")
    p.add_argument("--device", default="CPU")
    p.add_argument("--precision", choices=["exact", "default"], default="exact",
                   help=f"exact: compile with {EXACT_CPU_CONFIG}; default: the device defaults")
    args = p.parse_args(argv)
    d = Path(args.model_dir)
    ref = json.loads((d / "reference.json").read_text())
    config = dict(EXACT_CPU_CONFIG) if args.precision == "exact" else {}
    compiled = ov.Core().compile_model(d / "openvino_model.xml", args.device, config)
    got = ov_greedy_generate(compiled, ref["prompt_ids"], ref["max_new_tokens"])
    ok = got == ref["generated_ids"]
    print(f"openvino {ov.__version__} {args.device} precision={args.precision}: {'MATCH' if ok else 'MISMATCH'}")
    print(f"  expected {ref['generated_ids']}")
    print(f"  got      {got}")
    print(f"  fused ScaledDotProductAttention nodes: {count_fused_sdpa(compiled)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
