#!/usr/bin/env python3
"""Check a fixture folder written by ``tools/export_gemma4.py`` with plain ``openvino``: greedy-decode
its prompt through ov.Core and compare with transformers' tokens in ``reference.json``::

    python tools/ov_greedy.py tests/fixtures/gemma4/tiny8 [--device CPU] [--precision exact|default]

Exits non-zero when the tokens differ. The decoding loop is :func:`ovpasses.greedy.greedy_generate`.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))   # run from a checkout without installing

from ovpasses.check import EXACT_CPU_CONFIG, count_fused_sdpa  # noqa: E402
from ovpasses.greedy import greedy_generate  # noqa: E402


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
    got = greedy_generate(compiled, ref["prompt_ids"], ref["max_new_tokens"])
    ok = got == ref["generated_ids"]
    print(f"openvino {ov.__version__} {args.device} precision={args.precision}: {'MATCH' if ok else 'MISMATCH'}")
    print(f"  expected {ref['generated_ids']}")
    print(f"  got      {got}")
    print(f"  fused ScaledDotProductAttention nodes: {count_fused_sdpa(compiled)}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
