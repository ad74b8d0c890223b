"""Do chained SDPAs outside the CPU plugin's fused kernel share memory? (issue 32; runtime notes, docs/runtimes.md)

A model with one fused stateful SDPA (as every exported LLM has: the plugin then decomposes any other SDPA into
MatMul + Softmax) and ``RUNS`` plain SDPAs over ``BLOCKS`` blocks of ``[4, 2048, 2047]`` scores, each run after
the previous one (its slice bounds read a 0 computed from the previous run's output). Prints the request's
context memory (its peak RSS over the RSS before it, the inputs made) as one JSON line. ``--static``: the same
shapes static (the memory solver places them). ``--if``: each run's SDPA inside an If taken every time (its
else body passes Q through), as a form would gate its runs off a decode step::

    python benchmarks/probes/dynamic_memory_probe.py --runs 8 --blocks 8 [--static | --if]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import openvino as ov
from openvino import opset8
from openvino import opset13 as ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
from common import stateful_sdpa_beside  # noqa: E402  (a module of benchmarks/)

KV_HEADS, ROWS, KEYS, SIZE = 4, 2048, 2047, 256


def _i64(values) -> ov.Node:
    return ops.constant(np.asarray(values, np.int64).reshape(-1))


def _gated(qs: ov.Node, ks: ov.Node, mask: ov.Node) -> ov.Output:
    """``SDPA(qs, ks, ks, mask)`` inside an If whose condition is true whenever ``qs`` has rows."""
    shape = [-1, KV_HEADS, ROWS, SIZE]
    tq, tk, eq = (ops.parameter(s, ov.Type.f32) for s in (shape, [-1, KV_HEADS, KEYS, SIZE], shape))
    then_out = ops.result(ops.scaled_dot_product_attention(tq, tk, tk, mask, ops.constant(np.float32(0.0625)),
                                                           causal=False))
    else_out = ops.result(eq)
    rows = ops.gather(ops.shape_of(qs, "i64"), _i64([0]), _i64([0]))
    gate = opset8.if_op(ops.squeeze(ops.greater(rows, _i64([0])), _i64([0])).output(0))
    gate.set_then_body(ov.Model([then_out], [tq, tk], "run"))
    gate.set_else_body(ov.Model([else_out], [eq], "none"))
    gate.set_input(qs.output(0), tq, eq)
    gate.set_input(ks.output(0), tk, None)
    return gate.set_output(then_out, else_out)


def _model(runs: int, blocks: int, static: bool, gated: bool = False) -> ov.Model:
    batch = blocks if static else -1
    q = ops.parameter([batch, KV_HEADS, ROWS, SIZE], ov.Type.f32, name="q")
    k = ops.parameter([batch, KV_HEADS, KEYS, SIZE], ov.Type.f32, name="k")
    mask = ops.constant(np.zeros((1, 1, ROWS, KEYS), np.float32))
    count = ops.gather(ops.shape_of(q, "i64"), _i64([0]), _i64([0]))
    per_run = ops.divide(ops.add(count, _i64([runs - 1])), _i64([runs]))
    outs, after = [], _i64([0])
    for run in range(runs):
        begin = ops.add(ops.minimum(ops.multiply(per_run, _i64([run])), count), after)
        end = ops.add(ops.minimum(ops.multiply(per_run, _i64([run + 1])), count), after)
        qs, ks = (opset8.slice(x, begin, end, _i64([1]), _i64([0])) for x in (q, k))
        if gated:
            out = _gated(qs, ks, mask).get_node()
        else:
            out = ops.scaled_dot_product_attention(qs, ks, ks, mask, ops.constant(np.float32(0.0625)), causal=False)
        outs.append(out)
        after = ops.multiply(ops.gather(ops.shape_of(out, "i64"), _i64([0]), _i64([0])), _i64([0]))
    fused, sinks, extra = stateful_sdpa_beside()   # the plugin treats the model as an LLM
    return ov.Model([ops.concat(outs, 0).output(0), fused], sinks, [q, k] + extra)


def _rss(key: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith(key))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--blocks", type=int, default=8)
    parser.add_argument("--static", action="store_true")
    parser.add_argument("--if", dest="gated", action="store_true", help="each run inside an If")
    args = parser.parse_args()
    compiled = ov.Core().compile_model(_model(args.runs, args.blocks, args.static, args.gated), "CPU")
    kinds = sorted({op.get_rt_info()["layerType"].astype(str) for op in compiled.get_runtime_model().get_ops()}
                   & {"MatMul", "Softmax", "Subgraph", "ScaledDotProductAttention"})
    request = compiled.create_infer_request()
    rng = np.random.default_rng(0)
    q = rng.random((args.blocks, KV_HEADS, ROWS, SIZE), np.float32)
    k = rng.random((args.blocks, KV_HEADS, KEYS, SIZE), np.float32)
    before = _rss("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    request.infer({"q": q, "k": k, "fq": rng.random((1, 4, 8, 64), np.float32), "beam_idx": np.zeros(1, np.int32)})
    print(json.dumps(dict(runs=args.runs, blocks=args.blocks, static=args.static, gated=args.gated,
                          openvino=ov.get_version(),
                          context_mib=_rss("VmHWM") - before, kinds=kinds)))


if __name__ == "__main__":
    main()
