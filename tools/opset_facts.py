#!/usr/bin/env python3
"""Measure which operation versions and IR versions each OpenVINO runtime reads.

    python tools/opset_facts.py                       # every runtime venv, table on stdout
    python tools/opset_facts.py --runtimes 2026.0.0 newest --json benchmarks/results/opset_facts.json

The facts in ``ovpasses/plan/runtimes.py`` (``OPS_FIRST_READ``, ``IR_VERSIONS_READ``) come from this
script's record. Each runtime runs in its own virtual environment (.venvs/ov-VERSION; ``newest`` is
.venvs/dev), in a worker process (``--worker``), which measures:

* ``python_opsets``: the highest ``openvino.opsetN`` module of its Python API;
* ``reader_opsets``: the opsets its IR reader knows: ``opsetN`` for which a one-Parameter IR whose
  Parameter says ``version="opsetN"`` is read (N = 1..20);
* ``not_read``: the operation versions it does not read, among every (type, ``opsetK``) pair that the
  newest runtime registers (its wheel's ``include/openvino/opsets/opsetN_tbl.hpp`` tables, where an op
  ``ov::op::vK`` is written to IR files as ``version="opsetK"``, ``v0`` as ``opset1``): each pair is
  read from a two-layer IR, ``<layer type=T version=opsetK>`` (no inputs) -> Result. The reader refuses
  a pair it does not know with ``Cannot create T layer ... from unsupported opset: opsetK`` or ``Opset
  opsetK doesn't contain the operation with type: T``; any other outcome (the op's own validation of
  its missing inputs, a missing body) means it created the op, so it reads that version. Pairs the
  newest runtime itself does not read are dropped first: the naming rule does not hold for them
  (``Gelu`` ``v0`` is registered in opset2 and written as ``opset2``), so no IR holds them;
* ``ir_versions_read``: the ``<net version>`` values it reads (1, 5-13): a one-Add model written by
  its own ``ov.save_model``, the attribute edited; ``save_model_ir_version``: what ``save_model`` writes;
* ``saved_by_newest``: whether it reads IR files that the newest runtime saved with one op each of the
  versions that some measured runtime does not read (``ErfInv`` opset17, ``OneHot`` and ``AvgPool``
  opset16), and the error when it does not.

A probe that kills its worker (ReadValue and Assign without a variable segfault) is recorded as
``crashed`` and the worker restarts after it.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNTIMES = ["2025.2.0", "2025.4.1", "2026.0.0", "2026.1.0", "2026.2.1", "2026.3.1", "newest"]
NOT_READ = ("from unsupported opset", "doesn't contain the operation with type")
IR_VERSIONS = [1, 5, 6, 7, 8, 9, 10, 11, 12, 13]
# IR files the newest runtime writes for the worker, one op each (see save_newest)
SAVED_BY_NEWEST = ("ErfInv-opset17", "OneHot-opset16", "AvgPool-opset16")


# ---------------------------------------------------------------- worker side (runs under the measured runtime)

def _probe_xml(type_name: str, opset: str) -> str:
    return f"""<?xml version="1.0"?>
<net name="probe" version="11"><layers>
<layer id="0" name="probe" type="{type_name}" version="{opset}"><output><port id="0" precision="FP32"><dim>1</dim></port></output></layer>
<layer id="1" name="out" type="Result" version="opset1"><input><port id="0" precision="FP32"><dim>1</dim></port></input></layer>
</layers><edges><edge from-layer="0" from-port="0" to-layer="1" to-port="0"/></edges></net>"""


def _parameter_xml(opset: str) -> str:
    return f"""<?xml version="1.0"?>
<net name="probe" version="11"><layers>
<layer id="0" name="x" type="Parameter" version="{opset}"><data shape="1" element_type="f32"/><output><port id="0" precision="FP32"><dim>1</dim></port></output></layer>
<layer id="1" name="out" type="Result" version="opset1"><input><port id="0" precision="FP32"><dim>1</dim></port></input></layer>
</layers><edges><edge from-layer="0" from-port="0" to-layer="1" to-port="0"/></edges></net>"""


def _reads(core, xml: str) -> tuple[bool, str]:
    import numpy as np
    import openvino as ov
    try:
        core.read_model(xml, ov.Tensor(np.zeros(0, np.uint8)))
        return True, ""
    except Exception as exc:  # noqa: BLE001 - every refusal is a result
        text = str(exc).strip()
        message = next((line.strip() for line in text.splitlines() if any(m in line for m in NOT_READ)), None)
        return message is None, message or (text.splitlines() or [repr(exc)])[-1][:200]


def worker(pairs: list[list[str]], saved: dict[str, str]) -> None:
    """Print the runtime's facts as one JSON line, then one JSON line per probed pair."""
    import pkgutil

    import openvino as ov

    core = ov.Core()
    python_opsets = max(int(m.name[5:]) for m in pkgutil.iter_modules(ov.__path__)
                        if m.name.startswith("opset") and m.name[5:].isdigit())
    reader_opsets = [n for n in range(1, 21) if _reads(core, _parameter_xml(f"opset{n}"))[0]]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "add.xml"
        p = ov.opset1.parameter([2], ov.Type.f32)
        ov.save_model(ov.Model([ov.opset1.add(p, p)], [p], "add"), path)
        text = path.read_text()
        written = int(re.search(r'<net name="add" version="(\d+)"', text).group(1))
        ir_read = []
        for version in IR_VERSIONS:
            path.write_text(text.replace(f'version="{written}"', f'version="{version}"', 1))
            try:
                core.read_model(path)
                ir_read.append(version)
            except RuntimeError:
                pass
    saved_result = {}
    for name, xml_path in saved.items():
        try:
            core.read_model(xml_path)
            saved_result[name] = "read"
        except RuntimeError as exc:
            saved_result[name] = next((ln.strip() for ln in str(exc).splitlines() if any(m in ln for m in NOT_READ)),
                                      str(exc).strip().splitlines()[-1])
    print(json.dumps({"runtime": ov.get_version().split("-")[0], "python_opsets": python_opsets,
                      "reader_opsets": reader_opsets, "ir_versions_read": ir_read,
                      "save_model_ir_version": written, "saved_by_newest": saved_result}), flush=True)
    for type_name, opset in pairs:
        read, message = _reads(core, _probe_xml(type_name, opset))
        print(json.dumps({"pair": [type_name, opset], "read": read, "message": message}), flush=True)


def newest_pairs() -> list[list[str]]:
    """Every (type, opsetK) the running (newest) runtime registers, as it writes them to IR files."""
    import openvino as ov
    folder = Path(ov.__file__).parent / "include" / "openvino" / "opsets"
    pairs = set()
    for table in folder.glob("opset*_tbl.hpp"):
        for type_name, version in re.findall(r"_OPENVINO_OP_REG\((\w+),\s*ov::op::v(\d+)\)", table.read_text()):
            pairs.add((type_name, f"opset{max(int(version), 1)}"))
    return [list(p) for p in sorted(pairs, key=lambda p: (int(p[1][5:]), p[0]))]


def save_newest(folder: Path) -> dict[str, str]:
    """Save one IR per entry of SAVED_BY_NEWEST with the running (newest) runtime; their paths."""
    import numpy as np
    import openvino as ov
    from openvino import opset1, opset16, opset17

    x = opset1.parameter([2, 3, 4, 4], ov.Type.f32, name="x")
    i = opset1.parameter([4], ov.Type.i64, name="i")
    one, zero = opset1.constant(np.float32(1)), opset1.constant(np.float32(0))
    models = {
        "ErfInv-opset17": ov.Model([opset17.erfinv(x)], [x], "erfinv"),
        "OneHot-opset16": ov.Model([opset16.one_hot(i, opset1.constant(np.int64(3)), one, zero, -1, "normalize")],
                                   [i], "one_hot"),
        "AvgPool-opset16": ov.Model([opset16.avg_pool(x, [1, 1], [0, 0], [0, 0], [2, 2], True)], [x], "avg_pool"),
    }
    paths = {}
    for name in SAVED_BY_NEWEST:
        path = folder / f"{name}.xml"
        ov.save_model(models[name], path, compress_to_fp16=False)
        assert f'version="{name.split("-")[1]}"' in path.read_text(), name
        paths[name] = str(path)
    return paths


# ---------------------------------------------------------------- orchestrator side

def venv_python(runtime: str) -> Path:
    python = ROOT / ".venvs" / ("dev" if runtime == "newest" else f"ov-{runtime}") / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"opset_facts: {python} is missing; run tools/venv.sh ov {runtime}")
    return python


def measure(python: Path, pairs: list[list[str]], saved: dict[str, str]) -> dict:
    facts: dict | None = None
    results: dict[tuple[str, str], dict] = {}
    todo = list(pairs)
    while True:
        proc = subprocess.run([str(python), __file__, "--worker"], input=json.dumps({"pairs": todo, "saved": saved}),
                              capture_output=True, text=True, timeout=1200)
        lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if lines and "runtime" in lines[0]:
            facts = facts or lines[0]
            lines = lines[1:]
        for line in lines:
            results[tuple(line["pair"])] = line
        done = len(lines)
        if proc.returncode == 0 or done >= len(todo):
            break
        crashed = todo[done]   # the worker died on this probe
        results[tuple(crashed)] = {"pair": crashed, "read": None, "message": f"crashed (exit {proc.returncode})"}
        todo = todo[done + 1:]
        if not todo:
            break
    assert facts is not None, f"{python}: the worker printed nothing: {proc.stderr[-500:]}"
    facts["not_read"] = sorted([list(k) for k, v in results.items() if v["read"] is False],
                               key=lambda p: (int(p[1][5:]), p[0]))
    facts["crashed"] = sorted([list(k) for k, v in results.items() if v["read"] is None])
    facts["probed"] = len(results)
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtimes", nargs="+", default=RUNTIMES)
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--list-pairs", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--save-newest", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        request = json.loads(sys.stdin.read())
        worker(request["pairs"], request["saved"])
        return 0
    if args.list_pairs:
        print(json.dumps(newest_pairs()))
        return 0
    if args.save_newest:
        print(json.dumps(save_newest(args.save_newest)))
        return 0

    newest = venv_python("newest")
    candidates = json.loads(subprocess.run([str(newest), __file__, "--list-pairs"], capture_output=True, text=True,
                                           check=True).stdout)
    with tempfile.TemporaryDirectory(prefix="opset-facts-") as tmp:
        saved = json.loads(subprocess.run([str(newest), __file__, "--save-newest", tmp], capture_output=True,
                                          text=True, check=True).stdout)
        newest_facts = measure(newest, candidates, saved)
        pairs = [p for p in candidates if p not in newest_facts["not_read"]]
        record = []
        for runtime in args.runtimes:
            facts = measure(venv_python(runtime), pairs, saved)
            record.append(facts)
            print(f"{facts['runtime']}: python opset{facts['python_opsets']}, reader opsets "
                  f"{facts['reader_opsets'][0]}-{facts['reader_opsets'][-1]}, IR versions {facts['ir_versions_read']} "
                  f"(writes {facts['save_model_ir_version']}), {len(facts['not_read'])} of {facts['probed']} "
                  "op versions "
                  f"not read, {len(facts['crashed'])} probes crashed, saved by newest: {facts['saved_by_newest']}",
                  file=sys.stderr, flush=True)
    # one row per op version that some measured runtime does not read
    missing = sorted({tuple(p) for f in record for p in f["not_read"]}, key=lambda p: (int(p[1][5:]), p[0]))
    header = ["op version"] + [f["runtime"] for f in record]
    rows = [[f"{t} ({o})"] + ["-" if [t, o] in f["not_read"] else "reads" for f in record] for t, o in missing]
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print("| " + " | ".join(h.ljust(w) for h, w in zip(header, widths)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        print("| " + " | ".join(str(c).ljust(w) for c, w in zip(row, widths)) + " |")
    if args.json:   # one line per runtime, so that a diff of two records shows what changed
        head = {"command": "python tools/opset_facts.py " + " ".join(argv if argv is not None else sys.argv[1:]),
                "candidates": len(candidates), "not_written_by_newest": newest_facts["not_read"],
                "probed": len(pairs)}
        lines = [json.dumps(head)[:-1] + ', "runtimes": [']
        lines += [" " + json.dumps(f) + ("," if i < len(record) - 1 else "") for i, f in enumerate(record)]
        args.json.write_text("\n".join(lines) + "\n]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
