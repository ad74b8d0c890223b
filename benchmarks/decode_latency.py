#!/usr/bin/env python3
"""Decode latency: ms per generated token for unmodified, ``ovpasses.rewrite`` and "decompose every
SDPA", through ov.Core on CPU, per runtime.

    python benchmarks/decode_latency.py --export --rounds 0      # make the model once (export venv)
    python benchmarks/decode_latency.py                          # newest and 2026.0.0

The model is a random-weight Gemma 4 text model with E2B's layer layout (35 layers, 20 borrowing
a KV cache, 8 query heads and 1 KV head) and widths large enough that attention matters (hidden
1024, head dim 128 / 256 on full layers), exported by ``tools/export_gemma4.py`` into
``out/bench/e2b35-wide``. Each measurement is one process under the runtime's virtual environment
(``.venvs/dev`` for ``newest``, ``.venvs/ov-VERSION`` otherwise): compile with the plugin's default
configuration, then per repeat reset the state, prefill ``--prefill`` tokens and decode ``--decode``
tokens one at a time; the figure is the median decode step. Processes of the modes alternate, so
slow drift of the machine hits every mode alike. Writes ``benchmarks/results/decode_latency.json``.

``--eager`` measures SDPA recovery instead: the same model exported with transformers' eager attention
(``--attn-implementation eager``, into ``out/bench/e2b35-wide-eager``: no SDPA), unmodified against
``ovpasses.rewrite`` (EagerAttentionToSDPA, then the plan); writes ``decode_latency_eager.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, markdown_table, progress, write_record

sys.path.insert(0, str(ROOT / "tools"))
from runtime_matrix import run_worker, venv_python  # noqa: E402

MODEL = ROOT / "out" / "bench" / "e2b35-wide"
EAGER_MODEL = ROOT / "out" / "bench" / "e2b35-wide-eager"
EXPORT_ARGS = ["--preset", "e2b35", "--hidden-size", "1024", "--intermediate-size", "2048", "--head-dim", "128",
               "--global-head-dim", "256", "--per-layer-input-size", "64", "--vocab-size", "8192",
               "--new-tokens", "4"]
# what is compared on each runtime: newest (fixed) and an affected one, where unmodified crashes
PLAN = {"newest": ["unmodified", "rewritten"], "2026.0.0": ["unmodified", "rewritten", "decomposed"]}


def worker(xml: Path, mode: str, prefill: int, decode: int, repeats: int) -> dict:
    """Runs in the runtime's own interpreter; prints one JSON line."""
    import numpy as np
    import openvino as ov

    from ovpasses._ov import infer   # start_async and wait: one inference thread hides a failed one from infer()
    from ovpasses.app.check import count_fused_sdpa, make_feeds
    from testkit.matrix import apply_mode

    core = ov.Core()
    model = apply_mode(core.read_model(xml), mode)
    result = {"runtime": ov.get_version().split("-")[0], "mode": mode}
    try:
        compiled = core.compile_model(model, "CPU")
        result["fused_sdpa"] = count_fused_sdpa(compiled)
        result["inference_precision"] = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
        feeds = make_feeds(model, decode, prefill=prefill)
        request = compiled.create_infer_request()
        prefill_s, steps = [], []
        for _ in range(repeats):
            request.reset_state()
            start = time.perf_counter()
            infer(request, feeds[0])
            prefill_s.append(time.perf_counter() - start)
            for feed in feeds[1:]:
                start = time.perf_counter()
                infer(request, feed)
                steps.append(time.perf_counter() - start)
            logits = request.get_output_tensor(0).data
            # measured on 2026.0 pinned to one core: a state lost by the fused kernel gives 0-token
            # outputs instead of an error; a run that does not return its tokens is not a result
            if logits.shape[:2] != (1, 1) or not np.isfinite(logits).all():
                raise RuntimeError(f"wrong output: logits of shape {logits.shape} for one token")
        result.update(status="ok", prefill_ms=round(statistics.median(prefill_s) * 1e3, 1),
                      decode_ms_per_token=round(statistics.median(steps) * 1e3, 2),
                      decode_ms_p90=round(float(np.percentile(steps, 90)) * 1e3, 2), decode_steps=len(steps))
    except Exception as exc:  # noqa: BLE001 - a runtime that fails is a result
        result.update(status="failed", error=(str(exc).strip().splitlines() or [repr(exc)])[-1][:200])
    return result


def measure(runtime: str, xml: Path, mode: str, args) -> dict:
    cmd = [str(venv_python(runtime, create=False)), str(Path(__file__).resolve()), "--worker", mode, "--ir", str(xml),
           "--prefill", str(args.prefill), "--decode", str(args.decode), "--repeats", str(args.repeats)]
    return run_worker(cmd, args.timeout, {"runtime": runtime, "mode": mode})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ir", type=Path)
    parser.add_argument("--export", action="store_true", help=f"export the model into {MODEL} (needs .venvs/export)")
    parser.add_argument("--eager", action="store_true", help=f"the eager-attention export ({EAGER_MODEL}): "
                        "unmodified against recovered")
    parser.add_argument("--runtimes", nargs="+", default=list(PLAN), help="newest and/or VERSION (modes per PLAN)")
    parser.add_argument("--prefill", type=int, default=384)
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3, help="prefill + decode rounds per process")
    parser.add_argument("--rounds", type=int, default=3, help="processes per mode, alternating between modes")
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    folder = EAGER_MODEL if args.eager else MODEL
    args.ir = args.ir or folder / "openvino_model.xml"
    if args.worker:
        print(json.dumps(worker(args.ir, args.worker, args.prefill, args.decode, args.repeats)), flush=True)
        return 0
    if args.export:
        python = ROOT / ".venvs" / "export" / "bin" / "python"
        eager = ["--attn-implementation", "eager"] if args.eager else []
        subprocess.run([str(python), str(ROOT / "tools" / "export_gemma4.py"), *EXPORT_ARGS, *eager, "--out",
                        str(folder)], check=True, cwd=ROOT)
    if not args.ir.exists():
        raise SystemExit(f"decode_latency: {args.ir} is missing; run with --export first")
    if args.rounds < 1:
        return 0   # --export --rounds 0: make the model only

    rows, table = [], []
    for runtime in args.runtimes:
        modes = ["unmodified", "rewritten"] if args.eager else PLAN.get(runtime, ["unmodified", "rewritten", "decomposed"])
        runs: dict[str, list[dict]] = {m: [] for m in modes}
        for r in range(args.rounds):
            for mode in modes:
                result = measure(runtime, args.ir, mode, args)
                progress(f"  {runtime} {mode} round {r + 1}: {result}")
                runs[mode].append(result)
        for mode in modes:
            ok = [x for x in runs[mode] if x["status"] == "ok"]
            row = {"runtime": runs[mode][0].get("runtime", runtime), "mode": mode, "runs": runs[mode]}
            if ok:
                row.update(decode_ms_per_token=round(statistics.median(x["decode_ms_per_token"] for x in ok), 2),
                           prefill_ms=round(statistics.median(x["prefill_ms"] for x in ok), 1),
                           fused_sdpa=ok[0]["fused_sdpa"], inference_precision=ok[0]["inference_precision"])
            else:
                row["error"] = runs[mode][0].get("error", runs[mode][0]["status"])
            rows.append(row)
        base = {r["mode"]: r for r in rows if r["runtime"] == rows[-1]["runtime"]}
        for mode in modes:
            r = base[mode]
            ratios = {}
            if mode == "rewritten" and "decode_ms_per_token" in r:
                ratios = {ref: round(r["decode_ms_per_token"] / base[ref]["decode_ms_per_token"], 3)
                          for ref in ("unmodified", "decomposed") if "decode_ms_per_token" in base.get(ref, {})}
                r["ratio"] = ratios
            table.append([r["runtime"], mode, r.get("fused_sdpa", "-"), r.get("prefill_ms", "-"),
                          r.get("decode_ms_per_token", r.get("error", "?")[:60]),
                          ", ".join(f"{v:.3f}x {k}" for k, v in ratios.items())])
    print(f"decode latency, CPU, default configuration; prefill {args.prefill} tokens, then {args.decode} decode "
          f"steps x {args.repeats} repeats x {args.rounds} processes per mode (medians)\n")
    print(markdown_table(["runtime", "mode", "fused SDPA", "prefill ms", "decode ms/token", "rewritten / other"], table))
    target = write_record("decode_latency_eager" if args.eager else "decode_latency", rows, model=str(args.ir.relative_to(ROOT)) if args.ir.is_relative_to(ROOT)
                          else str(args.ir), prefill=args.prefill, decode=args.decode,
                          export_args=EXPORT_ARGS + (["--attn-implementation", "eager"] if args.eager else []))
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
