"""Probe (issue 22): query-blocked ("banded") attention in the bounded layers, against bounded and unmodified.

A bounded layer's SDPA attends ``Concat(past P, new n)`` with the sliding mask: in a prefill chunk every
query scores all ``P + n`` keys, though it sees at most ``W``. :func:`banded` splits the ``n`` queries into
blocks of ``b = min(n, --block)`` and folds the blocks into the batch axis (the SDPA stays rank 4); block
``j`` reads only the ``W - 1 + b`` keys from ``P + j*b - (W - 1)`` on. Keys and values get ``W - 1`` zero
rows in front and ``nb*b - n`` at the end, the mask ``-inf``-like columns there (f32 min), so every
block's band has the same length and one Gather with computed indices cuts the bands out; the rows
padded at the end are sliced off the output. The keys a block leaves out are outside every one of its
queries' windows, which the mask already excluded, so the values are those of the bounded model.

    .venvs/dev/bin/python benchmarks/probes/sliding_window_banded.py --model out/e2b-wide-w512 --context 8192 \
        [--chunk 1000] [--block 128] [--decode 8] [--rounds 3] [--config exact|default] [--name NAME]

A probe, not a pass (it is not in ``ovpasses``): each round compiles nothing new; per round, each form
in turn (interleaved) gets a fresh request, the prompt in ``--chunk``-token chunks (prefill seconds),
then ``--decode`` greedy tokens (median ms per token); tokens and the largest logit difference are
compared with the first form's (``--forms``, default all three, unmodified first). The window is the
config's ``sliding_window``. Writes
``benchmarks/results/sliding_window_banded-<model folder>-<context>[-<config>].json``.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
from common import markdown_table, model_parser, progress, stateful_feeder, write_record  # noqa: E402  (a module of benchmarks/)
from sliding_window import configs

FORMS = ("unmodified", "bounded", "banded")


def banded(model, window: int, block: int) -> int:
    """Replace every bounded SDPA of ``model`` (its mask the bounding's key Slice) by the banded form;
    returns how many."""
    from openvino import opset13 as ops

    from ovpasses.features.sliding_window.sliding_window_cache_bounding import KEYS_SUFFIX

    def i64(values):
        return ops.constant(np.asarray(values, np.int64).reshape(-1))

    def dim(output, axis):
        return ops.gather(ops.shape_of(output, "i64"), i64([axis]), i64(0))

    def arange(stop):   # 0 .. stop-1 of a one-element i64 tensor
        return ops.range(ops.constant(np.int64(0)), ops.squeeze(stop, i64([0])), ops.constant(np.int64(1)), "i64")

    def pad(x, axis: int, front, back, value: float):   # a rank-4 ``x`` padded on ``axis`` with ``value``
        zero = i64([0])
        begins = ops.concat([front if a == axis else zero for a in range(4)], 0)
        ends = ops.concat([back if a == axis else zero for a in range(4)], 0)
        return ops.pad(x, begins, ends, "constant", ops.constant(np.array(value, np.float32)))

    changed = 0
    for sdpa in model.get_ordered_ops():
        if sdpa.get_type_name() != "ScaledDotProductAttention" or sdpa.get_input_size() < 4:
            continue
        mask = sdpa.input_value(3)
        if not mask.get_node().get_friendly_name().endswith(KEYS_SUFFIX):
            continue
        q, k, v = (sdpa.input_value(i) for i in range(3))
        extra = [sdpa.input_value(i) for i in range(4, sdpa.get_input_size())]
        n = dim(q, 2)
        length = dim(k, 2)                       # P + n
        past = ops.subtract(length, n)            # P
        b = ops.minimum(n, i64([block]))
        nb = ops.divide(ops.add(n, ops.subtract(b, i64([1]))), b)   # ceil(n / b), integer divide
        rows = ops.multiply(nb, b)
        tail = ops.subtract(rows, n)
        band = ops.add(b, i64([window - 1]))
        batch = dim(q, 0)

        # keys and values: W-1 zero rows in front, tail rows at the end; block j reads rows [j*b + P, +band)
        starts = ops.add(ops.multiply(arange(nb), b), past)                          # [nb]
        idx = ops.add(ops.unsqueeze(starts, i64([1])), ops.unsqueeze(arange(band), i64([0])))   # [nb, band]

        def blocks_kv(x):
            padded = pad(x, 2, i64([window - 1]), tail, 0.0)
            g = ops.gather(padded, idx, i64(2))                       # [B, Hkv, nb, band, D]
            g = ops.transpose(g, i64([0, 2, 1, 3, 4]))                # [B, nb, Hkv, band, D]
            shape = ops.concat([ops.multiply(batch, nb), dim(x, 1), band, dim(x, 3)], 0)
            return ops.reshape(g, shape, False)

        kb, vb = blocks_kv(k), blocks_kv(v)
        # queries: tail rows at the end, [B, H, nb, b, D] -> [B*nb, H, b, D]
        qp = pad(q, 2, i64([0]), tail, 0.0)
        qb = ops.reshape(qp, ops.concat([batch, dim(q, 1), nb, b, dim(q, 3)], 0), False)
        qb = ops.transpose(qb, i64([0, 2, 1, 3, 4]))
        qb = ops.reshape(qb, ops.concat([ops.multiply(batch, nb), dim(q, 1), b, dim(q, 3)], 0), False)
        # mask [B|1, 1, n, P+n]: broadcast to batch B, rows padded with 0 (kept finite), columns like the keys
        mask_b = ops.broadcast(mask, ops.concat([batch, i64([1]), n, length], 0), "bidirectional")
        mask_rows = pad(mask_b, 2, i64([0]), tail, 0.0)
        mask_cols = pad(mask_rows, 3, i64([window - 1]), tail, float(np.finfo(np.float32).min))
        columns = ops.add(length, ops.add(tail, i64([window - 1])))
        mr = ops.reshape(mask_cols, ops.concat([batch, nb, b, columns], 0), False)
        # per block j: its b rows, columns idx[j] (a Gather over the last axis, batch_dims B, nb, b)
        idx_b = ops.broadcast(ops.unsqueeze(ops.unsqueeze(idx, i64([0])), i64([2])),
                              ops.concat([batch, nb, b, band], 0))            # [B, nb, b, band]
        mg = ops.gather(mr, idx_b, i64(3), 3)                                   # [B, nb, b, band]
        mb = ops.reshape(mg, ops.concat([ops.multiply(batch, nb), i64([1]), b, band], 0), False)
        out = ops.scaled_dot_product_attention(qb, kb, vb, mb, *extra, causal=False)
        dv = dim(v, 3)
        o = ops.reshape(out, ops.concat([batch, nb, dim(q, 1), b, dv], 0), False)
        o = ops.transpose(o, i64([0, 2, 1, 3, 4]))
        o = ops.reshape(o, ops.concat([batch, dim(q, 1), rows, dv], 0), False)
        o = ops.slice(o, i64([0]), n, i64([1]), i64([2]))
        for target in list(sdpa.output(0).get_target_inputs()):
            target.replace_source_output(o.output(0))
        changed += 1
    model.validate_nodes_and_infer_types()
    return changed


def window_of(model_dir: Path) -> int:
    config = json.loads((model_dir / "config.json").read_text())
    return int(config.get("text_config", config)["sliding_window"])


def compiled_forms(model_dir: Path, config: dict, block: int, names=FORMS) -> tuple[dict, int]:
    import openvino as ov

    import ovpasses
    core = ov.Core()
    forms, changed = {}, 0
    for form in names:
        model = core.read_model(model_dir / "openvino_model.xml")
        if form != "unmodified":
            ovpasses.rewrite(model, sliding_window="bounded")
        if form == "banded":
            changed = banded(model, window_of(model_dir), block)
            progress(f"banded: {changed} SDPAs")
        forms[form] = core.compile_model(model, "CPU", config)
    return forms, changed


def measure(compiled, prompt, chunk: int, decode: int) -> dict:
    request = compiled.create_infer_request()
    request.reset_state()
    feed = stateful_feeder(request)
    start = time.perf_counter()
    for begin in range(0, len(prompt), chunk):
        logits = feed(prompt[begin:begin + chunk])
    prefill = time.perf_counter() - start
    steps, tokens, times = [logits], [], []
    for _ in range(decode):
        tokens.append(int(np.argmax(steps[-1])))
        start = time.perf_counter()
        steps.append(feed([tokens[-1]]))
        times.append(time.perf_counter() - start)
    return {"prefill_s": round(prefill, 3), "decode_ms": round(1000 * statistics.median(times), 2),
            "tokens": tokens, "logits": steps}


def main(argv=None) -> int:
    parser = model_parser(__doc__, 8192)
    parser.add_argument("--block", type=int, default=128)
    parser.add_argument("--decode", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--config", choices=("default", "exact"), default="exact")
    parser.add_argument("--forms", default=",".join(FORMS),
                        help="comma-separated, in this order; the first is the reference of tokens and logits")
    parser.add_argument("--name")
    args = parser.parse_args(argv)
    names = args.forms.split(",")
    if not set(names) <= set(FORMS):
        parser.error(f"--forms takes {', '.join(FORMS)}")
    name = args.name or f"sliding_window_banded-{args.model.name}-{args.context}-{args.config}"
    forms, changed = compiled_forms(args.model, configs()[args.config], args.block, names)
    prompt = np.random.default_rng(0).integers(4, 4000, args.context)
    rows = []
    for round_ in range(1, args.rounds + 1):
        reference = None
        for form, compiled in forms.items():
            progress(f"round {round_}/{args.rounds}: {form}")
            result = measure(compiled, prompt, args.chunk, args.decode)
            logits = result.pop("logits")
            reference = reference or (result["tokens"], logits)
            result.update(form=form, round=round_, tokens_equal_reference=result["tokens"] == reference[0],
                          max_logit_diff=max(float(np.max(np.abs(a - b))) for a, b in zip(logits, reference[1])))
            rows.append(result)
            write_record(name, rows, model=str(args.model), context=args.context, chunk=args.chunk,
                         block=args.block, window=window_of(args.model), banded_sdpas=changed, decode=args.decode,
                         config=configs()[args.config] or "CPU plugin defaults (no properties)")
    table = []
    base = statistics.median(r["prefill_s"] for r in rows if r["form"] == names[0])
    for form in names:
        mine = [r for r in rows if r["form"] == form]
        prefill = statistics.median(r["prefill_s"] for r in mine)
        table.append([form, round(prefill, 2), round(prefill / base, 3), statistics.median(r["decode_ms"] for r in mine),
                      all(r["tokens_equal_reference"] for r in mine), max(r["max_logit_diff"] for r in mine)])
    print(markdown_table(["form", "prefill s (median)", f"prefill x {names[0]}", "decode ms/token", f"tokens = {names[0]}",
                          "max logit diff"], table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
