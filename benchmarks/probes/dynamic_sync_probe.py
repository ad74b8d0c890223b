"""What a dynamic node costs a decode step, and what a sync point costs (issue 32; runtime notes, docs/runtimes.md).

The CPU plugin runs a model with dynamic shapes node by node; a node whose output shape depends on input values
(Range, a Slice with computed bounds, a Broadcast or Reshape to a computed shape) is a sync point, and with fewer
than 10 executable nodes per sync point it processes the shapes sequentially. This probe takes an exported model,
makes it trimmable (as the sliding-window forms run), adds ``--count`` side outputs of two nodes each, with a Range
(``--kind sync``: a sync point each) or a Multiply (``--kind plain``: none), prefills 600 tokens and times 40 decode
steps (median of the last 35, plugin defaults). Prints one JSON line::

    python benchmarks/probes/dynamic_sync_probe.py --model out/gemma3-4b-widths --kind sync --count 150
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import openvino as ov
from openvino import opset13 as ops

import ovpasses


def _model(path: str, kind: str, count: int) -> ov.Model:
    model = ov.Core().read_model(f"{path}/openvino_model.xml")
    ovpasses.rewrite(model, sliding_window="trimmable")
    mask = next(p for p in model.get_parameters() if p.get_friendly_name() == "attention_mask")
    length = ops.gather(ops.shape_of(mask, "i64"), ops.constant(np.int64(1)), ops.constant(np.int64(0)))
    outs = []
    for i in range(count):
        if kind == "sync":
            x = ops.range(ops.constant(np.int64(i)), ops.add(length, ops.constant(np.int64(i))),
                          ops.constant(np.int64(1)), "i64")
        else:
            x = ops.multiply(ops.shape_of(mask, "i64"), ops.constant(np.int64(i + 1)))
        outs.append(ops.result(ops.reduce_sum(x, ops.constant(np.int64(0)), False)))
    if outs:
        model.add_results(outs)
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--kind", choices=("sync", "plain"), default="plain")
    parser.add_argument("--count", type=int, default=0)
    args = parser.parse_args()
    request = ov.Core().compile_model(_model(args.model, args.kind, args.count), "CPU").create_infer_request()
    n = 600
    ids = np.random.default_rng(0).integers(4, 2000, n)[None].astype(np.int64)
    request.infer({"input_ids": ids, "attention_mask": np.ones((1, n), np.int64), "position_ids": np.arange(n)[None],
                   "beam_idx": np.zeros(1, np.int32)})
    past, steps = n, []
    for _ in range(40):
        token = int(request.get_output_tensor(0).data[0, -1].argmax())
        start = time.perf_counter()
        request.infer({"input_ids": np.array([[token]]), "attention_mask": np.ones((1, past + 1), np.int64),
                       "position_ids": np.array([[past]]), "beam_idx": np.zeros(1, np.int32)})
        steps.append(time.perf_counter() - start)
        past += 1
    print(json.dumps(dict(kind=args.kind, count=args.count, openvino=ov.get_version(),
                          decode_ms=round(1e3 * float(np.median(steps[5:])), 2),
                          decode_min_ms=round(1e3 * min(steps[5:]), 2))))


if __name__ == "__main__":
    main()
