"""What every benchmark script shares: the machine description, tables, timing and the JSON record.

Each script in this folder prints a markdown table and writes ``benchmarks/results/<name>.json``
holding the rows, the machine, the OpenVINO version and the command line that produced them.
"""

from __future__ import annotations

import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# $OVPASSES_BENCH_RESULTS redirects the records (the smoke tests write to a temporary folder)
RESULTS = Path(os.environ.get("OVPASSES_BENCH_RESULTS") or ROOT / "benchmarks" / "results")
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def machine() -> dict:
    """CPU model, logical cores, memory and OS of this machine."""
    cpu = platform.processor() or "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory_gib = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                memory_gib = round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return {"cpu": cpu, "logical_cores": os.cpu_count(), "memory_gib": memory_gib,
            "os": platform.platform(), "python": platform.python_version()}


def openvino_version() -> str:
    import openvino as ov
    return ov.get_version().split("-")[0]


def median_seconds(fn: Callable[[], object], repeats: int, setup: Callable[[], object] | None = None) -> float:
    """Median wall time of ``fn`` over ``repeats`` runs; ``setup`` (untimed) runs before each and its
    result, if not None, is passed to ``fn``."""
    times = []
    for _ in range(repeats):
        arg = setup() if setup else None
        start = time.perf_counter()
        fn(arg) if setup else fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def markdown_table(header: list[str], rows: list[list]) -> str:
    cells = [[str(c) for c in row] for row in [header] + rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["| " + " | ".join(c.ljust(w) for c, w in zip(cells[0], widths)) + " |",
             "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(row, widths)) + " |" for row in cells[1:]]
    return "\n".join(lines)


def write_record(name: str, rows: list[dict], **extra) -> Path:
    """``benchmarks/results/<name>.json``: rows plus machine, runtime and command; written atomically."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    record = {"benchmark": name, "command": shlex.join([Path(sys.executable).name] + sys.argv),
              "openvino": openvino_version(), "machine": machine(),
              "date": time.strftime("%Y-%m-%d"), **extra, "rows": rows}
    target = RESULTS / f"{name}.json"
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(record, indent=1) + "\n")
    tmp.replace(target)
    return target


def model_parser(doc: str, context: int):
    """The command line the sliding-window scripts share: ``--model`` (an export folder), ``--context`` (prompt
    tokens, default ``context``) and ``--chunk`` (prefill chunk, default 1000); the description is ``doc``'s
    first paragraph."""
    import argparse

    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--context", type=int, default=context)
    parser.add_argument("--chunk", type=int, default=1000)
    return parser


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def stateful_feeder(request) -> Callable:
    """``feed(ids)``: one inference of a stateful LLM IR's ``request`` on the next token ids (batch 1; the
    mask and positions follow the tokens fed so far); returns the last position's logits (a float32 copy)."""
    import numpy as np

    from ovpasses._ov import infer   # start_async and wait: one inference thread hides a failed one from infer()

    past = 0

    def feed(ids):
        nonlocal past
        n = len(ids)
        infer(request, {"input_ids": np.asarray(ids, np.int64)[None],
                        "attention_mask": np.ones((1, past + n), np.int64),
                        "position_ids": np.arange(past, past + n, dtype=np.int64)[None],
                        "beam_idx": np.zeros(1, np.int32)})
        past += n
        return np.array(request.get_output_tensor(0).data[0, -1], np.float32, copy=True)

    return feed


def stateful_sdpa_beside(kv_heads: int = 4, size: int = 64):
    """A fused stateful SDPA as exporters write one (ReadValue -> Gather(beam_idx) -> Concat -> SDPA, Assign), to put
    beside what a probe measures: the CPU plugin treats a model with one as an LLM. Returns the SDPA's output, the
    Assigns and the Parameters (``fq`` [1, kv_heads, ?, size] and ``beam_idx``)."""
    import numpy as np
    import openvino as ov
    from openvino import opset13 as ops
    from openvino.op.util import Variable, VariableInfo

    fq = ops.parameter([1, kv_heads, -1, size], ov.Type.f32, name="fq")
    beam = ops.parameter([-1], ov.Type.i32, name="beam_idx")
    first = ops.gather(ops.shape_of(fq), ops.constant(np.int64([0])), ops.constant(np.int64([0])))
    sinks, caches = [], []
    for name in ("k_cache", "v_cache"):
        info = VariableInfo()
        info.data_shape, info.data_type = ov.PartialShape([-1, kv_heads, -1, size]), ov.Type.f32
        info.variable_id = name
        variable = Variable(info)
        init = ops.broadcast(ops.constant(np.float32(0)),
                             ops.concat([first, ops.constant(np.int64([kv_heads, 0, size]))], 0))
        cache = ops.concat([ops.gather(ops.read_value(init, variable), beam, ops.constant(np.int64(0))), fq], 2)
        sinks.append(ops.assign(cache, variable))
        caches.append(cache)
    fused = ops.scaled_dot_product_attention(fq, caches[0], caches[1], causal=True)
    return fused.output(0), sinks, [fq, beam]
