"""A decode step of the unmodified, the trimmable and the trimmable-without-release-points forms, compiled in one
process and stepped in turn, so that the machine's drift between processes does not enter the comparison
(issue 32; record benchmarks/records/2026-11-27-release-points.md). Plugin defaults. The forms step in turn, in
reverse order every other step; which form was compiled first also moves a step by several percent, so run it with
``--order`` rotated and compare rounds. Prints one JSON line: per form, the median decode step in ms after a
``--context``-token prompt fed whole::

    python benchmarks/probes/release_points_decode.py --model out/gemma3-4b-widths --context 2048 [--steps 60] \
        [--order unmodified,trimmable,norelease] [--trim]

``--trim``: the rewritten forms' caches are cut to what they keep after the prompt, and every 32 steps after
(``SlidingWindowTrimmer``, as the prompt helper and the prefill probe's ``--trim`` do; the trims are not timed):
the decode step a program that trims pays, against the unmodified model's, in one process.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import openvino as ov

import ovpasses
from ovpasses.features.sliding_window.trim import SlidingWindowTrimmer
from ovpasses.pipeline import PIPELINE_PASSES

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
import common  # noqa: F401,E402  (a module of benchmarks/: puts the checkout on sys.path for testkit)
from testkit.matrix import rewrite_trimmable_key_columns  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="an export folder (openvino_model.xml)")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--order", default="unmodified,trimmable,norelease",
                        help="the forms, in the order they are compiled (norelease: trimmable without release points; "
                             "built: trimmable with the key columns built from the mask's inputs at every window)")
    parser.add_argument("--trim", action="store_true",
                        help="cut the rewritten forms' caches after the prompt and every 32 steps (not timed)")
    args = parser.parse_args()
    core = ov.Core()
    requests, trimmers = {}, {}
    for form in args.order.split(","):
        model = core.read_model(f"{args.model}/openvino_model.xml")
        if form == "trimmable":
            ovpasses.rewrite(model, sliding_window="trimmable")
        elif form == "built":   # trimmable, the key columns built from the mask's inputs at every window
            rewrite_trimmable_key_columns(model, sliced=False)
        elif form == "norelease":
            ovpasses.rewrite(model, sliding_window="trimmable",
                             passes=[p for p in PIPELINE_PASSES if p != "SDPAReleasePoints"])
        requests[form] = core.compile_model(model, "CPU").create_infer_request()
        if args.trim and form != "unmodified":
            trimmers[form] = SlidingWindowTrimmer.for_model(model, requests[form], every=32)
    n = args.context
    ids = np.random.default_rng(0).integers(4, 2000, n)[None].astype(np.int64)
    for request in requests.values():
        request.infer({"input_ids": ids, "attention_mask": np.ones((1, n), np.int64),
                       "position_ids": np.arange(n)[None], "beam_idx": np.zeros(1, np.int32)})
    for trimmer in trimmers.values():
        trimmer.trim()
    times = {form: [] for form in requests}
    for step in range(args.steps):
        past = n + step
        for form, request in (requests.items() if step % 2 == 0 else reversed(list(requests.items()))):
            start = time.perf_counter()
            request.infer({"input_ids": np.array([[5]]), "attention_mask": np.ones((1, past + 1), np.int64),
                           "position_ids": np.array([[past]]), "beam_idx": np.zeros(1, np.int32)})
            times[form].append(time.perf_counter() - start)
            if form in trimmers:
                trimmers[form].step()
    print(json.dumps(dict(model=args.model, context=n, openvino=ov.get_version(), trim=args.trim,
                          trims={f: t.trims for f, t in trimmers.items()},
                          decode_ms={f: round(1e3 * float(np.median(t[5:])), 2) for f, t in times.items()})))


if __name__ == "__main__":
    main()
