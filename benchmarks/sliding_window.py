"""Bounded sliding-window caches: KV state, prefill and decode time, unmodified / bounded / unshared /
unshared + bounded side by side (issue 22).

    .venvs/dev/bin/python benchmarks/sliding_window.py [--fixture tests/fixtures/gemma4/e2b35]
        [--context 2048] [--chunk 512] [--decode 32] [--rounds 3]

For each round, each form in turn (interleaved, so that load on the machine spreads over all of them):
a fresh request is filled with a ``--context``-token prompt in ``--chunk``-token chunks (prefill time),
then ``--decode`` tokens are decoded one by one (median ms per token). State is the bytes of every
state after the prefill. Plugin defaults (no precision hints): the figures are for the CPU plugin as a
user gets it, not the f32 configuration the exactness tests use. The fixture's widths are tiny (head
sizes 8/16, one KV head): per-node overhead dominates; real-width figures need an export at E2B's widths.
Writes ``benchmarks/results/sliding_window-<fixture>-<context>.json``.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from common import ROOT, markdown_table, progress, write_record  # noqa: E402  (sibling module)

FORMS = {"unmodified": None, "bounded": ("keep", "bounded"), "unshared": ("unshare", "full"),
         "unshared+bounded": ("unshare", "bounded")}


def compiled_forms(fixture: Path) -> dict:
    import openvino as ov

    import ovpasses
    from ovpasses.check import count_fused_sdpa
    core, out = ov.Core(), {}
    for name, form in FORMS.items():
        model = core.read_model(fixture / "openvino_model.xml")
        if form is not None:
            ovpasses.rewrite(model, kv_sharing=form[0], sliding_window=form[1])
        compiled = core.compile_model(model, "CPU")
        out[name] = (compiled, count_fused_sdpa(compiled))
    return out


def measure(compiled, context: int, chunk: int, decode: int, vocab: int) -> dict:
    request = compiled.create_infer_request()
    request.reset_state()
    prompt = np.random.default_rng(0).integers(4, vocab, context)
    past = 0

    def feed(ids):
        nonlocal past
        n = len(ids)
        request.infer({"input_ids": np.asarray(ids, np.int64)[None], "attention_mask": np.ones((1, past + n), np.int64),
                       "position_ids": np.arange(past, past + n, dtype=np.int64)[None],
                       "beam_idx": np.zeros(1, np.int32)})
        past += n
        return int(np.argmax(request.get_output_tensor(0).data[0, -1]))

    start = time.perf_counter()
    for begin in range(0, context, chunk):
        token = feed(prompt[begin:begin + chunk])
    prefill = time.perf_counter() - start
    state = sum(s.state.get_byte_size() for s in request.query_state())
    steps = []
    for _ in range(decode):
        start = time.perf_counter()
        token = feed([token])
        steps.append(time.perf_counter() - start)
    return {"prefill_s": prefill, "decode_ms": 1000 * statistics.median(steps), "state_bytes": state}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--fixture", type=Path, default=ROOT / "tests" / "fixtures" / "gemma4" / "e2b35")
    parser.add_argument("--context", type=int, default=2048)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    import json
    vocab = json.loads((args.fixture / "config.json").read_text()).get("vocab_size") or 256
    forms = compiled_forms(args.fixture)
    runs: dict[str, list[dict]] = {name: [] for name in forms}
    for round_ in range(args.rounds):
        for name, (compiled, _) in forms.items():
            progress(f"round {round_ + 1}/{args.rounds}: {name}")
            runs[name].append(measure(compiled, args.context, args.chunk, args.decode, vocab))
    rows = []
    base = {key: statistics.median(r[key] for r in runs["unmodified"]) for key in ("prefill_s", "decode_ms")}
    base_state = runs["unmodified"][0]["state_bytes"]
    for name, (_, fused) in forms.items():
        prefill = statistics.median(r["prefill_s"] for r in runs[name])
        decode = statistics.median(r["decode_ms"] for r in runs[name])
        state = runs[name][0]["state_bytes"]
        rows.append({"form": name, "fused_sdpa": fused, "state_bytes": state, "state_x": round(state / base_state, 3),
                     "prefill_s": round(prefill, 4), "prefill_x": round(prefill / base["prefill_s"], 3),
                     "decode_ms": round(decode, 3), "decode_x": round(decode / base["decode_ms"], 3)})
    print(markdown_table(list(rows[0]), [list(r.values()) for r in rows]))
    write_record(f"sliding_window-{args.fixture.name}-{args.context}", rows,
                 fixture=str(args.fixture.resolve().relative_to(ROOT)), context=args.context, chunk=args.chunk, decode=args.decode, rounds=args.rounds,
                 config="CPU plugin defaults")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
