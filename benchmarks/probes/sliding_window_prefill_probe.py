"""Peak RSS of one prompt's prefill (whole or in chunks), an optional trim and a few decode steps, one form in this
process (issue 32). Prints one JSON line. Run each form in a fresh process:

    .venvs/dev/bin/python benchmarks/probes/sliding_window_prefill_probe.py --model out/gemma3-4b-widths \
        --form trimmable --context 16384 [--chunk 1000 [--first 4096]] [--trim] [--decode 4] [--mmap-threshold] \
        [--keep-malloc] [--drop-sinks] [--config '{"KV_CACHE_PRECISION": "f32"}']

``before``: VmRSS after compiling (MiB); ``peak_prefill`` / ``peak_trim`` / ``peak_end``: VmHWM (reset through
``/proc/self/clear_refs`` before the request) after the prefill, after the trim, after the decode steps. The
trimmable form's ``SlidingWindowTrimmer`` fixes glibc's mmap threshold at 1 MiB (``--keep-malloc``: it does not,
``release_memory=False``); ``--mmap-threshold`` does the same for the unmodified form, so that both run under the
same malloc. With ``--chunk`` the trimmable form
prefills through ``SlidingWindowTrimmer.prefill`` (a trim after each chunk; ``--first``: its first chunk's length),
the unmodified one in the same chunks. Plugin defaults (no properties)."""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import openvino as ov

import ovpasses
from ovpasses.pipeline import PIPELINE_PASSES
from ovpasses.features.sliding_window.trim import (SCORE_BUDGET, SlidingWindowTrimmer, _fix_mmap_threshold, chunk_bounds,
                                                   query_heads)


def _status(key: str) -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))


def _drop_sinks(model: ov.Model) -> int:
    """Replace every 6-input SDPA (query, key, value, mask, scale, sink) with the same SDPA without its sink."""
    from openvino.utils.node_factory import NodeFactory

    dropped = 0
    for node in model.get_ordered_ops():
        if node.get_type_name() == "ScaledDotProductAttention" and node.get_input_size() == 6:
            new = NodeFactory("opset13").create("ScaledDotProductAttention",
                                                [node.input_value(i) for i in range(5)], node.get_attributes())
            new.set_friendly_name(node.get_friendly_name())
            node.output(0).replace(new.output(0))
            dropped += 1
    model.validate_nodes_and_infer_types()
    return dropped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--form", choices=("unmodified", "trimmable", "blocked"), required=True,
                        help="blocked: trimmable with first_prompt=blocked")
    parser.add_argument("--context", type=int, required=True)
    parser.add_argument("--chunk", type=int, default=0, help="0: the prompt whole")
    parser.add_argument("--first", type=int, default=None, help="the first chunk's length (default: --chunk)")
    parser.add_argument("--score-budget", type=int, default=SCORE_BUDGET >> 20,
                        help="MiB: chunks after a past shortened to keep the single-token kernel's scores under it "
                             "(the helper's default; the unmodified model's chunks cut the same way); 0: fixed chunks")
    parser.add_argument("--trim", action="store_true", help="trim after the prefill and every 32 decode steps")
    parser.add_argument("--decode", type=int, default=0)
    parser.add_argument("--mmap-threshold", action="store_true", help="unmodified: glibc's threshold as the trimmer's")
    parser.add_argument("--drop-sinks", action="store_true",
                        help="diagnostic, not exact: every SDPA's sink input dropped (is the sink what costs?)")
    parser.add_argument("--keep-malloc", action="store_true",
                        help="trimmable: the trimmer leaves glibc's mmap threshold as it is (release_memory=False)")
    parser.add_argument("--ir", default=None,
                        help="the form's IR folder, written beforehand (`ovpass rewrite`): loaded as a client loads it, "
                             "not rewritten in this process (the rewrite's own heap stays out of the figures)")
    parser.add_argument("--config", default="{}", help="compile properties as JSON (default: plugin defaults)")
    parser.add_argument("--without-pass", default="",
                        help="the rewrite without these passes, comma-separated (e.g. SDPAReleasePoints: what the pass is "
                             "worth)")
    args = parser.parse_args()

    if args.ir and (args.form == "unmodified" or args.without_pass):
        parser.error("--ir: a rewritten form's folder (--form trimmable / blocked, no --without-pass)")
    core = ov.Core()
    model = core.read_model(f"{args.ir or args.model}/openvino_model.xml")
    if args.form != "unmodified" and not args.ir:
        left_out = set(filter(None, args.without_pass.split(",")))
        if left_out - set(PIPELINE_PASSES):
            parser.error(f"--without-pass: no such pass {sorted(left_out - set(PIPELINE_PASSES))}")
        passes = [p for p in PIPELINE_PASSES if p not in left_out] if left_out else None
        ovpasses.rewrite(model, sliding_window="trimmable", passes=passes,
                         first_prompt="blocked" if args.form == "blocked" else "fused")
    if args.drop_sinks:
        _drop_sinks(model)
    request = core.compile_model(model, "CPU", json.loads(args.config)).create_infer_request()
    trimmer = SlidingWindowTrimmer.for_model(model, request, every=32, release_memory=not args.keep_malloc) \
        if args.form != "unmodified" else None
    mmap = (trimmer is not None and not args.keep_malloc) or (args.mmap_threshold and _fix_mmap_threshold())
    before = _status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    n = args.context
    inputs = {"input_ids": np.random.default_rng(0).integers(4, 2000, n)[None].astype(np.int64),
              "attention_mask": np.ones((1, n), np.int64), "position_ids": np.arange(n, dtype=np.int64)[None],
              "beam_idx": np.zeros(1, np.int32)}
    budget = (args.score_budget << 20) or None
    start = time.time()
    if args.chunk and trimmer is not None:
        trimmer.prefill(inputs, args.chunk, first=args.first, score_budget=budget)
    elif args.chunk:
        heads = query_heads(model)
        bounds = chunk_bounds(n, args.chunk, args.first,
                              score_budget=(heads, budget) if budget and heads else None)
        for begin, end in zip(bounds, bounds[1:]):
            request.infer({"input_ids": inputs["input_ids"][:, begin:end], "attention_mask": inputs["attention_mask"][:, :end],
                           "position_ids": inputs["position_ids"][:, begin:end], "beam_idx": inputs["beam_idx"]})
    else:
        request.infer(inputs)
    prefill = time.time() - start
    peak_prefill = _status("VmHWM")
    if args.trim and trimmer is not None:
        trimmer.trim()
    peak_trim = _status("VmHWM")
    past = n
    steps = []
    for _ in range(args.decode):
        token = int(request.get_output_tensor(0).data[0, -1].argmax())
        begin = time.time()
        request.infer({"input_ids": np.array([[token]]), "attention_mask": np.ones((1, past + 1), np.int64),
                       "position_ids": np.array([[past]]), "beam_idx": np.zeros(1, np.int32)})
        steps.append(time.time() - begin)
        past += 1
        if args.trim and trimmer is not None:
            trimmer.step()
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print(json.dumps(dict(form=args.form, ir=args.ir, without_pass=args.without_pass or None, chunk=args.chunk, first=args.first, score_budget_mib=args.score_budget if args.chunk else None, trim=args.trim, mmap=bool(mmap), context=n,
                          drop_sinks=args.drop_sinks, config=json.loads(args.config),
                          before=round(before), prefill_s=round(prefill, 1), peak_prefill=round(peak_prefill),
                          peak_trim=round(peak_trim), peak_end=round(_status("VmHWM")), load=load,
                          decode_ms=round(float(np.median(steps)) * 1e3, 1) if steps else None)))


if __name__ == "__main__":
    main()
