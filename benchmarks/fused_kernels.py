#!/usr/bin/env python3
"""Fused stateful SDPA kernels per runtime: unmodified vs ``ovpasses.rewrite`` vs "decompose every SDPA".

    python benchmarks/fused_kernels.py                                  # every runtime, both fixtures
    python benchmarks/fused_kernels.py --runtimes 2026.0.0 newest --create

For each runtime (its own virtual environment, as in ``tools/runtime_matrix.py``), fixture and mode,
one process compiles the IR on CPU (f32, f32 KV cache), counts the runtime-model nodes whose
``layerType`` is ``ScaledDotProductAttention`` and greedy-decodes through ov.Core against
transformers' tokens. A count is reported even where decoding then fails (the count is taken at
compile time). Writes ``benchmarks/results/fused_kernels.json``.
"""

from __future__ import annotations

import argparse
import sys

from common import ROOT, markdown_table, progress, write_record

sys.path.insert(0, str(ROOT / "tools"))
from runtime_matrix import FIXTURES, RUNTIMES, run_cell, venv_python  # noqa: E402

MODES = ["unmodified", "rewritten", "decomposed"]
STATUS = {"ok": "ok", "wrong tokens": "wrong", "failed": "fails", "crashed": "crash", "timeout": "timeout"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtimes", nargs="+", default=RUNTIMES)
    parser.add_argument("--fixtures", nargs="+", default=FIXTURES)
    parser.add_argument("--create", action="store_true", help="create missing runtime venvs with tools/venv.sh")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    args = parser.parse_args(argv)

    cells, rows = [], []
    for runtime in args.runtimes:
        python = venv_python(runtime, args.create)
        for fixture in args.fixtures:
            row = {}
            for mode in MODES:
                cell = run_cell(python, fixture, mode, "core", args.timeout)
                cell.setdefault("runtime", runtime)
                cells.append(cell)
                row[mode] = cell
            version = next((c["runtime"] for c in row.values() if "." in c.get("runtime", "")), runtime)
            rows.append([version, fixture] + [
                f"{row[m].get('fused_sdpa', '?')} ({STATUS.get(row[m]['status'], row[m]['status'])})" for m in MODES])
            progress("  " + "  ".join(map(str, rows[-1])))
    print("fused stateful SDPA kernels after compile_model (CPU); in brackets: greedy decode vs transformers\n")
    print(markdown_table(["runtime", "fixture", "unmodified", "ovpasses.rewrite", "decompose every SDPA"], rows))
    target = write_record("fused_kernels", cells)
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
