"""What a whole prompt's tensors need against what the CPU plugin's grouping of them holds (issue 32): the live
tensors by their true lifetimes, and the plugin's rule for grouping tensors of dynamic shape replayed on them.
Diagnostic, not a benchmark.

    .venvs/dev/bin/python benchmarks/probes/plugin_memory_groups.py --model out/gpt-oss-20b-widths --context 8192 \
        [--form unmodified --form blocked]

Each form runs in a fresh process: compiled (plugin defaults), one request on a ``--context``-token prompt fed whole,
then ``compiled.get_runtime_model()`` (the request's shapes and each node's ``execOrder``). Every output of a node
that computes (not a Const, Parameter or Result) is a box from its producer's execution index to its last reader's.
``need``: the most bytes of boxes alive at one index (what a solver that packs by lifetime could reach; in-place
outputs, which share their input's memory, are counted as their own, so it is an upper bound). ``grouped``: the
boxes sorted by start, each put into the first group whose last box does not overlap it, each group one block as
large as its largest box, as the plugin does for tensors whose size is unknown at compile time
(``MemoryManageNonOverlapingSets`` in ``src/plugins/intel_cpu/src/memory_control.cpp``). An estimate, not a
bound: the plugin also stretches a box that crosses a sync point to the next one (not replayed: it holds more), and
in-place outputs are counted as their own (it holds less; at Gemma 3 4B widths, 16k, blocked: 3,708 replayed, 3,158
MiB of context held).
Beside them the process's peak RSS over the request and the RSS before it (``context`` = their difference), as the
prefill probe reads them (glibc's mmap threshold at 1 MiB).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
from common import markdown_table, model_parser, progress, write_record  # noqa: E402  (a module of benchmarks/)

MIB = 1 << 20


def boxes_of(runtime_model) -> list[tuple[int, int, int]]:
    """(first, last execution index, bytes) of every output of every node that computes, in a runtime model whose
    shapes are a request's."""
    import numpy as np
    order = {op.get_friendly_name(): int(op.get_rt_info()["execOrder"].astype(str))
             for op in runtime_model.get_ordered_ops()}
    boxes = []
    for op in runtime_model.get_ordered_ops():
        if op.get_rt_info()["layerType"].astype(str) in ("Const", "Input", "Output"):
            continue
        start = order[op.get_friendly_name()]
        for port in range(op.get_output_size()):
            shape = op.get_output_partial_shape(port)
            if not shape.is_static:
                continue
            size = int(np.prod([d.get_length() for d in shape], dtype=np.int64)) * op.get_output_element_type(port).size
            readers = [order[t.get_node().get_friendly_name()] for t in op.output(port).get_target_inputs()]
            boxes.append((start, max(readers, default=start), size))
    return boxes


def need(boxes: list[tuple[int, int, int]]) -> int:
    """The most bytes alive at one execution index."""
    return max((sum(size for first, last, size in boxes if first <= at <= last) for at in {b[0] for b in boxes}),
               default=0)


def grouped(boxes: list[tuple[int, int, int]]) -> list[int]:
    """The blocks (bytes, largest first) of the plugin's greedy grouping: boxes by start, each into the first group
    whose last box it does not overlap, a group as large as its largest box."""
    groups: list[list[tuple[int, int, int]]] = []
    for box in sorted(boxes, key=lambda b: (b[0], b[1])):
        for group in groups:
            first, last, _ = group[-1]
            if first > box[1] or last < box[0]:
                group.append(box)
                break
        else:
            groups.append([box])
    return sorted((max(b[2] for b in group) for group in groups), reverse=True)


def worker(model_dir: str, form: str, context: int) -> dict:
    import numpy as np
    import openvino as ov

    import ovpasses
    from ovpasses.features.sliding_window.trim import _fix_mmap_threshold
    from sliding_window_prefill_probe import _status as status   # the probe's reading of /proc/self/status
    _fix_mmap_threshold()
    core = ov.Core()
    model = core.read_model(f"{model_dir}/openvino_model.xml")
    if form != "unmodified":
        ovpasses.rewrite(model, sliding_window="trimmable", first_prompt="blocked" if form == "blocked" else "fused")
    compiled = core.compile_model(model, "CPU")
    request = compiled.create_infer_request()
    before = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    request.infer({"input_ids": np.random.default_rng(0).integers(4, 2000, context)[None].astype(np.int64),
                   "attention_mask": np.ones((1, context), np.int64),
                   "position_ids": np.arange(context, dtype=np.int64)[None], "beam_idx": np.zeros(1, np.int32)})
    peak = status("VmHWM")
    boxes = boxes_of(compiled.get_runtime_model())
    blocks, needed = grouped(boxes), need(boxes)
    return {"form": form, "context": context, "peak_rss_mib": round(peak), "context_mib": round(peak - before),
            "boxes": len(boxes), "need_bytes": needed, "need_mib": round(needed / MIB), "groups": len(blocks),
            "grouped_bytes": sum(blocks), "grouped_mib": round(sum(blocks) / MIB),
            "grouped_blocks_mib": [round(b / MIB) for b in blocks if b >= MIB]}


def main(argv=None) -> int:
    parser = model_parser(__doc__, 8192)
    parser.add_argument("--form", action="append", choices=("unmodified", "trimmable", "blocked"),
                        help="repeat for several (default: unmodified)")
    parser.add_argument("--worker", action="store_true", help="(internal) measure one form in this process")
    args = parser.parse_args(argv)
    forms = args.form or ["unmodified"]
    if args.worker:
        print(json.dumps(worker(str(args.model), forms[0], args.context)))
        return 0
    rows = []
    for form in forms:
        progress(f"{form}: a {args.context}-token prompt fed whole, in a fresh process")
        proc = subprocess.run([sys.executable, __file__, "--worker", "--model", str(args.model), "--context",
                               str(args.context), "--form", form], capture_output=True, text=True, check=True)
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    write_record(f"plugin_memory_groups-{args.model.name}-{args.context}", rows, model=str(args.model),
                 context=args.context, config="CPU plugin defaults (no properties)")
    print(markdown_table(["form", "peak RSS MiB", "context MiB", "tensors", "need MiB", "groups", "grouped MiB"],
                         [[r["form"], r["peak_rss_mib"], r["context_mib"], r["boxes"], r["need_mib"], r["groups"],
                           r["grouped_mib"]] for r in rows]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
