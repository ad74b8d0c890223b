#!/usr/bin/env python3
"""Check a fixture folder written by ``tools/export_gemma4.py`` with plain ``openvino``: greedy-decode
its prompt through ov.Core and compare with transformers' tokens in ``reference.json``::

    python tools/ov_greedy.py tests/fixtures/gemma4/tiny8 [--device CPU] [--precision exact|default]

Exits non-zero when the tokens differ. A causal-LM folder (``openvino_model.xml``) is decoded by
:func:`testkit.greedy.greedy_generate`. A multimodal folder (``openvino_language_model.xml``, Gemma 4)
is decoded by :func:`vlm_greedy`: the text and per-layer embedding IRs turn ids into the language
model's ``inputs_embeds`` and ``per_layer_inputs``; for the image prompt the vision IR's soft tokens
replace the embeddings of the image tokens, as openvino_genai's VLMPipeline does. Both prompts of
``reference.json`` are run (``prompt_ids``, and ``image_prompt`` with ``reference_image.npy``).
Needs openvino and numpy only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))   # run from a checkout without installing


from testkit.greedy import gemma4_patches, vlm_greedy  # noqa: E402,F401 - re-exported


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


def run_core(folder: Path, case: dict, device: str = "CPU", config: dict | None = None) -> tuple[list[int], int]:
    """One case of :func:`fixture_cases` through ov.Core: the tokens and the fused SDPA count."""
    import openvino as ov

    from ovpasses.app.check import count_fused_sdpa
    from testkit.greedy import greedy_generate

    steps = len(case["expected"])
    if (folder / "openvino_language_model.xml").exists():
        return vlm_greedy(folder, case["prompt_ids"], steps, device, config, case["image"])
    compiled = ov.Core().compile_model(folder / "openvino_model.xml", device, config or {})
    return greedy_generate(compiled, case["prompt_ids"], steps), count_fused_sdpa(compiled)


def main(argv=None) -> int:
    import openvino as ov

    from ovpasses.precision import EXACT_CPU_CONFIG

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
