#!/usr/bin/env python3
"""Run the Gemma 4 fixtures on several OpenVINO runtimes, unmodified and rewritten, and print a table.

    python tools/runtime_matrix.py                         # every runtime below, both fixtures
    python tools/runtime_matrix.py --runtimes 2026.0.0 newest --fixtures tiny8 --json out.json

Each runtime runs in its own virtual environment, .venvs/ov-VERSION (created by tools/venv.sh when
missing; ``newest`` is .venvs/dev). Each cell (fixture x unmodified/rewritten x ov.Core / genai
stateful / genai paged) runs in its own process via ``python -m ovpasses.testing.matrix``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIMES = ["2025.2.0", "2025.4.1", "2026.0.0", "2026.1.0", "2026.2.1", "2026.3.1", "newest"]
FIXTURES = ["tiny8", "e2b35"]
MODES = ["unmodified", "rewritten", "unshared", "decomposed"]
PATHS = ["core", "stateful", "paged"]


def venv_python(runtime: str, create: bool) -> Path:
    name = "dev" if runtime == "newest" else f"ov-{runtime}"
    python = ROOT / ".venvs" / name / "bin" / "python"
    if create:
        args = ["dev"] if runtime == "newest" else ["ov", runtime]
        subprocess.run(["bash", str(ROOT / "tools" / "venv.sh"), *args], check=True)
    if not python.exists():
        raise SystemExit(f"runtime_matrix: {python} is missing; run tools/venv.sh ov {runtime} or pass --create")
    return python


def run_worker(cmd: list[str], timeout: int, labels: dict) -> dict:
    """Run a worker process that prints one JSON object as its last ``{`` line; return that object, or
    ``labels`` with a status (timeout / crashed / failed) and the last line of stderr."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**labels, "status": "timeout"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        status = "crashed" if proc.returncode < 0 else "failed"
        return {**labels, "status": status, "error": f"process exit {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def run_cell(python: Path, fixture: str, mode: str, path: str, timeout: int) -> dict:
    cmd = [str(python), "-m", "ovpasses.testing.matrix", str(ROOT / "tests" / "fixtures" / "gemma4" / fixture),
           "--mode", mode, "--path", path]
    return run_worker(cmd, timeout, {"fixture": fixture, "mode": mode, "path": path})


def cell_text(cell: dict) -> str:
    text = {"ok": "ok", "wrong tokens": "WRONG", "failed": "FAIL", "crashed": "CRASH", "timeout": "TIMEOUT"}
    out = text.get(cell["status"], cell["status"])
    if "fused_sdpa" in cell:
        out += f" ({cell['fused_sdpa']} fused)"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtimes", nargs="+", default=RUNTIMES)
    parser.add_argument("--fixtures", nargs="+", default=FIXTURES)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES[:2],
                        help="unshared: rewritten with --kv-sharing unshare; decomposed: every SDPA decomposed "
                             "(default: unmodified rewritten)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=PATHS)
    parser.add_argument("--create", action="store_true", help="create missing runtime venvs with tools/venv.sh")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    parser.add_argument("--json", type=Path, help="write every cell as JSON here")
    args = parser.parse_args(argv)

    cells = []
    header = ["runtime", "fixture", "mode"] + args.paths
    rows = []
    for runtime in args.runtimes:
        python = venv_python(runtime, args.create)
        for fixture in args.fixtures:
            for mode in args.modes:
                row = []
                for path in args.paths:
                    cell = run_cell(python, fixture, mode, path, args.timeout)
                    cell.setdefault("runtime", runtime)
                    cells.append(cell)
                    row.append(cell_text(cell))
                rows.append([cells[-1]["runtime"], fixture, mode] + row)
                print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    if args.json:
        args.json.write_text(json.dumps(cells, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
