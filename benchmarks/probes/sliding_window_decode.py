"""Decode at long contexts without the prefill: unmodified and trimmable forms, interleaved rounds (issue 32).

    .venvs/dev/bin/python benchmarks/probes/sliding_window_decode.py --model out/gemma3-4b-widths
        [--context 2048 8192 16384] [--decode 64] [--every 32] [--rounds 3] [--forms unmodified,trimmable]

The prefill of a long context takes minutes on 2 busy cores, and one round of decode timing there is noise (the
same model's decode measured 316 and 689 ms/token in two runs of ``sliding_window.py`` at 8k). This script fills
each state with ``set_state`` instead: random values, the context's length for every cache of the unmodified form,
and for the trimmable form's sliding caches the last ``W - 1`` positions (what the trimmer leaves), then decodes
``--decode`` steps with the mask and positions of that context, trimming every ``--every`` steps inside the timed
steps (``decode_ms_mean`` carries the trims, ``decode_ms`` is the median step, ``trim_ms`` the time of one trim of
every sliding state). Each form and context is compiled in a fresh process, forms interleaved per round. Values
are random, so tokens are not compared (exactness: ``sliding_window.py`` and the tests). Plugin defaults unless
``--config exact``. Peak RSS is the process' VmHWM after the decode (weights, states, the kernel's caches).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
from common import markdown_table, progress, write_record  # noqa: E402  (a module of benchmarks/)

FORMS = {"unmodified": "full", "trimmable": "trimmable"}


def worker(model_dir: Path, form: str, context: int, decode: int, every: int, config_name: str) -> dict:
    import openvino as ov

    import ovpasses
    from ovpasses.app.check import count_fused_sdpa
    from ovpasses.precision import EXACT_CPU_CONFIG
    from ovpasses.features.sliding_window.trim import SlidingWindowTrimmer, trimmable_caches

    core = ov.Core()
    model = core.read_model(model_dir / "openvino_model.xml")
    ovpasses.rewrite(model, sliding_window=FORMS[form])
    compiled = core.compile_model(model, "CPU", dict(EXACT_CPU_CONFIG) if config_name == "exact" else {})
    keep = trimmable_caches(model)
    request = compiled.create_infer_request()
    rng = np.random.default_rng(0)
    for state in request.query_state():   # 0-length states at first: their shape gives heads and head size
        shape = list(state.state.shape)
        shape[0], shape[2] = 1, keep.get(state.name, context)
        state.state = ov.Tensor((rng.standard_normal(shape) * 0.5).astype(np.float32))
    trimmer = SlidingWindowTrimmer(request, keep, every) if keep else None
    if trimmer:   # the states hold their keep already
        trimmer.mark_trimmed(context)
    steps, trims = [], []
    token = 5
    for i in range(decode):
        past = context + i
        start = time.perf_counter()
        request.infer({"input_ids": np.array([[token]], np.int64), "attention_mask": np.ones((1, past + 1), np.int64),
                       "position_ids": np.array([[past]], np.int64), "beam_idx": np.zeros(1, np.int32)})
        token = int(np.argmax(request.get_output_tensor(0).data[0, -1]))
        if trimmer:
            before = time.perf_counter()
            if trimmer.step():
                trims.append(time.perf_counter() - before)
        steps.append(time.perf_counter() - start)
    held = {}
    for state in request.query_state():
        held[state.state.shape[2]] = held.get(state.state.shape[2], 0) + 1
    peak = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
                if line.startswith("VmHWM:"))
    return {"fused_sdpa": count_fused_sdpa(compiled), "decode_ms": 1000 * statistics.median(steps),
            "decode_ms_mean": 1000 * statistics.fmean(steps), "trim_ms": 1000 * statistics.fmean(trims) if trims else None,
            "trims": len(trims), "positions_held": held, "peak_rss_mib": round(peak / 1024, 1)}


def _load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--context", type=int, nargs="+", default=[2048, 8192, 16384])
    parser.add_argument("--decode", type=int, default=64)
    parser.add_argument("--every", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--forms", default=",".join(FORMS))
    parser.add_argument("--config", choices=("default", "exact"), default="default")
    parser.add_argument("--name")
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)   # FORM CONTEXT
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.model, args.worker[0], int(args.worker[1]), args.decode, args.every,
                                args.config)))
        return 0
    forms = args.forms.split(",")
    name = args.name or f"sliding_window_decode-{args.model.name}-{args.config}"
    rows: list[dict] = []
    for context in args.context:
        runs: dict[str, list[dict]] = {f: [] for f in forms}
        for round_ in range(args.rounds):
            for form in forms:
                load = _load()
                proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--model", str(args.model),
                                       "--decode", str(args.decode), "--every", str(args.every), "--config",
                                       args.config, "--worker", form, str(context)],
                                      capture_output=True, text=True)
                if proc.returncode != 0:
                    raise RuntimeError(f"{form} at {context}: {proc.stderr[-2000:]}")
                m = json.loads(proc.stdout.strip().splitlines()[-1])
                m["load"] = load
                runs[form].append(m)
                progress(f"context {context} round {round_ + 1}: {form} decode {m['decode_ms']:.1f} ms "
                         f"(mean {m['decode_ms_mean']:.1f}, trim {m['trim_ms']}) peak {m['peak_rss_mib']} MiB, load {load}")
                base = statistics.median(r["decode_ms"] for r in runs[forms[0]])
                base_mean = statistics.median(r["decode_ms_mean"] for r in runs[forms[0]])
                rows = [r for r in rows if r["context"] != context] + [
                    {"context": context, "form": f, "fused_sdpa": ms[0]["fused_sdpa"],
                     "decode_ms": round(statistics.median(r["decode_ms"] for r in ms), 1),
                     "decode_x": round(statistics.median(r["decode_ms"] for r in ms) / base, 3),
                     "decode_ms_mean": round(statistics.median(r["decode_ms_mean"] for r in ms), 1),
                     "decode_mean_x": round(statistics.median(r["decode_ms_mean"] for r in ms) / base_mean, 3),
                     "trim_ms": ms[0]["trim_ms"] and round(statistics.median(r["trim_ms"] for r in ms), 1),
                     "decode_ms_each_round": [round(r["decode_ms"], 1) for r in ms],
                     "decode_ms_mean_each_round": [round(r["decode_ms_mean"], 1) for r in ms],
                     "positions_held": ms[0]["positions_held"], "peak_rss_mib": max(r["peak_rss_mib"] for r in ms),
                     "load": [r["load"] for r in ms]}
                    for f, ms in runs.items() if ms]
                write_record(name, rows, complete=False, model=str(args.model), decode=args.decode, every=args.every,
                             rounds=args.rounds, config=args.config)
        keys = ["context", "form", "fused_sdpa", "decode_ms", "decode_x", "decode_ms_mean", "decode_mean_x", "trim_ms",
                "peak_rss_mib"]
        print(markdown_table(keys, [[r[k] for k in keys] for r in rows if r["context"] == context]), flush=True)
    write_record(name, rows, complete=True, model=str(args.model), decode=args.decode, every=args.every,
                 rounds=args.rounds, config=args.config)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
