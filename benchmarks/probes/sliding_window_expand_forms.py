"""The GQA expand in front of the bounded model's unfused SDPAs, several KV heads (issue 22): which form decodes fastest.

    .venvs/dev/bin/python benchmarks/probes/sliding_window_expand_forms.py --model out/e2b-kv2-w512 --context 4096
        [--chunk 1000] [--decode 16] [--config default|exact]
        [--forms unmodified,bounded-bidirectional,bounded,bounded-grouped]

Forms: ``unmodified``; ``bounded-bidirectional``: ``sliding_window="bounded"`` with the exporter's expand kept
(``Broadcast`` bidirectional, which the CPU plugin turns into a Multiply by a broadcast of ones); ``bounded``:
the library's bounding (the expand's Broadcast in numpy mode from its own input); ``bounded-grouped``: the
bounded model with every expanded SDPA fed the grouped form instead (``Q`` reshaped to ``[B, Hkv, rep, L, D]``,
K and V ``[B, Hkv, 1, S, D]``, the mask unsqueezed, the output reshaped back: rank 5, which the CPU plugin
decomposes into MatMuls; an experiment, not in the library). Each form in turn in this process: a fresh
request, the ``--context``-token prompt in ``--chunk``-token chunks, then ``--decode`` greedy steps (median
ms); tokens and the largest logit difference against the unmodified form's.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
from common import markdown_table, model_parser, progress, stateful_feeder, write_record  # noqa: E402  (a module of benchmarks/)
from sliding_window import configs

FORMS = ("unmodified", "bounded-bidirectional", "bounded", "bounded-grouped")


def _i64(values):
    from openvino import opset13 as ops
    return ops.constant(np.asarray(values, np.int64).reshape(-1))


def grouped_form(model) -> int:
    """Feed every SDPA whose K and V come through an expand the grouped form; returns how many changed."""
    from openvino import opset13 as ops

    from ovpasses.passes.gqa_expand import gqa_expand as _expand
    changed = 0
    for sdpa in [n for n in model.get_ordered_ops() if n.get_type_name() == "ScaledDotProductAttention"]:
        expands = [_expand(sdpa, port) for port in (1, 2)]
        if None in expands:
            continue
        query = sdpa.input_value(0)
        heads, head = (query.get_partial_shape()[i].get_length() for i in (1, 3))
        (key, _, _), (value, _, _) = expands
        kv_heads = key.get_output_partial_shape(0)[1].get_length()
        value_head = value.get_output_partial_shape(0)[4].get_length()
        args = [ops.reshape(query, _i64([0, kv_heads, heads // kv_heads, -1, head]), True), key, value]
        if sdpa.get_input_size() > 3:
            args.append(ops.unsqueeze(sdpa.input_value(3), _i64([1])))
        if sdpa.get_input_size() > 4:
            args.append(sdpa.input_value(4))
        grouped = ops.scaled_dot_product_attention(*args, causal=sdpa.get_attributes()["causal"])
        sdpa.output(0).replace(ops.reshape(grouped, _i64([0, heads, -1, value_head]), True).output(0))
        changed += 1
    model.validate_nodes_and_infer_types()
    return changed


def build(model_dir: Path, form: str):
    import openvino as ov

    import ovpasses
    from ovpasses.features.sliding_window import sliding_window_cache_bounding as bounding
    model = ov.Core().read_model(model_dir / "openvino_model.xml")
    if form == "unmodified":
        return model
    numpy_expand = bounding.numpy_expand
    if form == "bounded-bidirectional":
        bounding.numpy_expand = lambda sdpa, port: False
    try:
        ovpasses.rewrite(model, sliding_window="bounded")
    finally:
        bounding.numpy_expand = numpy_expand
    if form == "bounded-grouped":
        grouped_form(model)
    return model


def run(compiled, context: int, chunk: int, decode: int) -> dict:
    request = compiled.create_infer_request()
    request.reset_state()
    feed = stateful_feeder(request)
    prompt = np.random.default_rng(0).integers(4, 4000, context)
    start = time.perf_counter()
    for begin in range(0, context, chunk):
        logits = feed(prompt[begin:begin + chunk])
    prefill = time.perf_counter() - start
    steps, all_logits = [], []
    for _ in range(decode):
        all_logits.append(logits)
        start = time.perf_counter()
        logits = feed([int(np.argmax(logits))])
        steps.append(time.perf_counter() - start)
    return {"prefill_s": round(prefill, 2), "decode_ms": round(1000 * statistics.median(steps), 1),
            "logits": np.array(all_logits)}


def main(argv=None) -> int:
    import openvino as ov

    parser = model_parser(__doc__, 4096)
    parser.add_argument("--decode", type=int, default=16)
    parser.add_argument("--config", choices=("default", "exact"), default="default")
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--name")
    args = parser.parse_args(argv)
    forms = args.forms.split(",")
    if forms[0] != "unmodified" or not set(forms) <= set(FORMS):
        parser.error(f"--forms must start with unmodified and name only {', '.join(FORMS)}")
    rows, reference = [], None
    for form in forms:
        progress(f"{form}: compiling and running at {args.context}")
        compiled = ov.Core().compile_model(build(args.model, form), "CPU", configs()[args.config])
        result = run(compiled, args.context, args.chunk, args.decode)
        logits = result.pop("logits")
        reference = logits if reference is None else reference
        rows.append(dict(result, form=form, tokens_equal_unmodified=bool((logits.argmax(1) == reference.argmax(1)).all()),
                         max_logit_diff=float(np.abs(logits - reference).max())))
        del compiled
    base = rows[0]
    for row in rows:
        row["decode_x"] = round(row["decode_ms"] / base["decode_ms"], 3)
        row["prefill_x"] = round(row["prefill_s"] / base["prefill_s"], 3)
    keys = ["form", "prefill_s", "prefill_x", "decode_ms", "decode_x", "tokens_equal_unmodified", "max_logit_diff"]
    print(markdown_table(keys, [[row[k] for k in keys] for row in rows]))
    write_record(args.name or f"sliding_window_expand_forms-{args.model.name}-{args.context}-{args.config}", rows,
                 model=str(args.model), context=args.context, chunk=args.chunk, decode=args.decode, config=args.config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
