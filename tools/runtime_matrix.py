#!/usr/bin/env python3
"""Run exported LLM fixtures on several OpenVINO runtimes, unmodified and rewritten, and print a table.

    python tools/runtime_matrix.py                         # every runtime below, the Gemma 4 fixtures
    python tools/runtime_matrix.py --runtimes 2026.0.0 newest --fixtures tiny8 tiny8u:long --json out.json
    python tools/runtime_matrix.py --fixtures gemma3n/tiny8 --modes unmodified prepared --runtimes 2026.0.0

Each runtime runs in its own virtual environment, .venvs/ov-VERSION (``newest`` is .venvs/dev). Each
cell (fixture x mode x ov.Core / genai stateful / genai paged) runs in its own process via
``python -m testkit.matrix``. A fixture is a folder under tests/fixtures (``gemma3n/tiny8``;
a bare name such as ``tiny8`` is one of tests/fixtures/gemma4) or any path to an export folder with
a ``reference.json``.

Modes: ``unmodified`` and ``decomposed`` run the export as it is / with every SDPA decomposed;
``rewritten`` is ``ovpasses.rewrite`` under the runtime itself (which must read the IR first);
``paged-pad`` the same with ``paged_heads="pad"`` (one head layout for the paged path); ``bounded`` with
``sliding_window="bounded"`` (the family fixtures of tests/fixtures/FAMILIES.md); ``trimmable`` with
``sliding_window="trimmable"`` (no client here trims: each runs its own loop);
``prepared`` is the way to an older runtime: the folder is rewritten under the *newest* runtime,
``ovpass rewrite FIXTURE -o TMP --runtime VERSION`` in .venvs/dev, and that folder then runs
unmodified under VERSION.
``FIXTURE:long`` runs the fixture's reference after its long prompt (longer than the sliding window).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIMES = ["2025.2.0", "2025.4.1", "2026.0.0", "2026.1.0", "2026.2.1", "2026.3.1", "newest"]
FIXTURES = ["tiny8", "e2b35", "tiny8u", "tiny8u:long", "a26", "a26:long", "vlm8", "gemma3n/tiny8", "tiny8e",
            "gemma3n/tiny8e"]
MODES = ["unmodified", "rewritten", "unshared", "bounded", "trimmable", "trimmable-sliced", "paged-pad", "decomposed",
         "prepared"]
PATHS = ["core", "stateful", "paged"]
# the workers import this checkout's ovpasses, whatever the venvs have installed
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def fixture_path(fixture: str) -> Path:
    """A fixture name (``tiny8``: tests/fixtures/gemma4/tiny8; ``gemma3n/tiny8``: tests/fixtures/gemma3n/tiny8)
    or a path to an export folder."""
    for candidate in (ROOT / "tests" / "fixtures" / "gemma4" / fixture, ROOT / "tests" / "fixtures" / fixture,
                      Path(fixture)):
        if (candidate / "reference.json").is_file():
            return candidate.resolve()
    raise SystemExit(f"runtime_matrix: no fixture {fixture!r} (a folder with reference.json)")


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
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV)
    except subprocess.TimeoutExpired:
        return {**labels, "status": "timeout"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        status = "crashed" if proc.returncode < 0 else "failed"
        return {**labels, "status": status, "error": f"process exit {proc.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


def prepare(fixture: Path, runtime: str, folder: Path, timeout: int) -> dict | None:
    """Rewrite ``fixture`` for ``runtime`` under the newest runtime into ``folder``; None when that worked,
    else the failure as a cell's fields."""
    newest = str(venv_python("newest", False))
    version = subprocess.run([newest, "-c", "import openvino; print(openvino.get_version())"],
                             capture_output=True, text=True, check=True).stdout.split("-")[0].strip()
    target = version if runtime == "newest" else runtime
    cmd = [str(venv_python("newest", False)), "-m", "ovpasses.app.cli", "rewrite", str(fixture), "-o", str(folder),
           "--runtime", target]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=ENV)
    except subprocess.TimeoutExpired:
        return {"status": "timeout", "error": "ovpass rewrite under the newest runtime timed out"}
    if proc.returncode != 0:
        return {"status": "refused", "error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return None


def run_cell(python: Path, fixture: str, mode: str, path: str, timeout: int, prepared: Path | None = None) -> dict:
    """One cell; ``prepared`` is the folder the newest runtime rewrote for this runtime (mode ``prepared``);
    ``NAME:long`` runs the fixture's long prompt."""
    labels = {"fixture": fixture, "mode": mode, "path": path}
    name, _, prompt = fixture.partition(":")
    folder, worker_mode = (prepared, "unmodified") if mode == "prepared" else (fixture_path(name), mode)
    cmd = [str(python), "-m", "testkit.matrix", str(folder), "--mode", worker_mode, "--path", path,
           "--prompt", prompt or "default"]
    cell = run_worker(cmd, timeout, labels)
    cell.update(labels)
    if mode == "prepared":
        cell["prepared_with"] = "newest"
    return cell


def cell_text(cell: dict) -> str:
    text = {"ok": "ok", "wrong tokens": "WRONG", "failed": "FAIL", "crashed": "CRASH", "timeout": "TIMEOUT",
            "refused": "REFUSED"}
    out = text.get(cell["status"], cell["status"])
    if cell["status"] == "failed" and "unsupported opset" in cell.get("error", ""):
        out = "UNREADABLE"   # the runtime cannot read the IR (an operation of a newer opset)
    if cell["status"] == "wrong tokens" and "first_mismatch" in cell:
        out += f" (from {cell['first_mismatch'] + 1})"
    if "fused_sdpa" in cell:
        out += f" ({cell['fused_sdpa']} fused)"
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtimes", nargs="+", default=RUNTIMES)
    parser.add_argument("--fixtures", nargs="+", default=FIXTURES)
    parser.add_argument("--modes", nargs="+", choices=MODES, default=MODES[:2],
                        help="unshared: rewritten with --kv-sharing unshare; bounded: with --sliding-window bounded; "
                             "trimmable: with --sliding-window trimmable (nothing trims: the clients' own loops); "
                             "paged-pad: rewritten with --paged-heads pad; decomposed: every SDPA decomposed; "
                             "prepared: rewritten for the runtime under the newest one (default: unmodified rewritten)")
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=PATHS)
    parser.add_argument("--create", action="store_true", help="create missing runtime venvs with tools/venv.sh")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per cell")
    parser.add_argument("--json", type=Path, help="write every cell as JSON here")
    args = parser.parse_args(argv)

    cells = []
    header = ["runtime", "fixture", "mode"] + args.paths
    rows = []
    scratch = tempfile.TemporaryDirectory(prefix="runtime-matrix-")
    for runtime in args.runtimes:
        python = venv_python(runtime, args.create)
        for fixture in args.fixtures:
            fixture_path(fixture.partition(":")[0])   # fails early on a name that is no fixture
            for mode in args.modes:
                prepared = Path(scratch.name) / f"{runtime}-{fixture.replace('/', '-')}"
                failure = prepare(fixture_path(fixture.partition(":")[0]), runtime, prepared, args.timeout) \
                    if mode == "prepared" else None
                row = []
                for path in args.paths:
                    if failure is None:
                        cell = run_cell(python, fixture, mode, path, args.timeout, prepared)
                    else:
                        cell = {"fixture": fixture, "mode": mode, "path": path, **failure}
                    cell.setdefault("runtime", runtime)
                    cells.append(cell)
                    row.append(cell_text(cell))
                rows.append([cells[-1]["runtime"], fixture, mode] + row)
                print("  ".join(rows[-1]), file=sys.stderr, flush=True)
    scratch.cleanup()
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
