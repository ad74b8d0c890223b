#!/usr/bin/env python3
"""Decode latency and KV-cache memory of ``--kv-sharing keep`` against ``unshare``, at several context
lengths, through ov.Core on CPU, per runtime.

    python benchmarks/unshare_decode.py --export             # make the model once (export venv)
    python benchmarks/unshare_decode.py                      # newest and 2026.0.0, contexts 512 2048 4096

The model is decode_latency.py's: a random-weight Gemma 4 text model with E2B's layer layout (35
layers, 20 borrowing a KV cache, 8 query heads and 1 KV head), hidden 1024, head dim 128 / 256 on
full layers, exported into ``out/bench/e2b35-wide``. ``keep`` is ``ovpasses.rewrite`` as by default
(on 2026.0.0 the unmodified IR fails); ``unshare`` is ``rewrite(kv_sharing="unshare")``. Every process
runs under the runtime's virtual environment and compiles with the plugin's default configuration.

Latency, paired: one process compiles both models, prefills ``context`` tokens into each, then decodes
``--decode`` tokens alternating one step of keep with one step of unshare, so that load from other
processes on the machine hits both alike; per mode the figure is the median step, wall time (and the
process's mean CPU time per step, all threads, beside it). ``--rounds`` such processes per cell;
the table shows the median over them. The ratio is the median of the per-process ratios.

Memory, one process per mode (peak RSS counts one model only): prefill ``context`` tokens, decode 4.
``cache B/token`` is what the IR's cache variables hold per token of context at batch 1 (the element
size of each variable times its dimensions other than batch and sequence; the CPU plugin may store a
cache in another precision, see KV_CACHE_PRECISION); ``peak RSS`` is the process's high-water mark
(VmHWM), ``RSS growth`` its growth from after compile_model to that peak. The load average of the
machine is recorded with each process. Writes ``benchmarks/results/unshare_decode.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import ROOT, markdown_table, progress, write_record
from decode_latency import EXPORT_ARGS, MODEL

sys.path.insert(0, str(ROOT / "tools"))
from runtime_matrix import run_worker, venv_python  # noqa: E402

MODES = {"keep": "rewritten", "unshare": "unshared"}   # benchmark mode -> testkit.matrix.apply_mode
RUNTIMES = ["newest", "2026.0.0"]
GOAL = 0.85   # unshare at most 0.85x keep's decode ms/token at the longest context


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cache_bytes_per_token(model) -> int | None:
    """What the model's cache variables hold per token at batch 1: per variable, its element size times
    its dimensions other than dim 0 (batch) and the sequence (its other dynamic dimension)."""
    total = 0
    for variable in model.get_variables():
        info = variable.get_info()
        dims = list(info.data_shape)[1:]
        dynamic = [d for d in dims if not d.is_static]
        if len(dynamic) != 1:
            return None
        size = info.data_type.size
        for d in dims:
            size *= d.get_length() if d.is_static else 1
        total += size
    return total


def _check_logits(request) -> None:
    import numpy as np

    logits = request.get_output_tensor(0).data
    if logits.shape[:2] != (1, 1) or not np.isfinite(logits).all():
        raise RuntimeError(f"wrong output: logits of shape {logits.shape} for one token")


def _cpu_seconds() -> float:
    times = os.times()
    return times.user + times.system


def worker(xml: Path, what: str, context: int, decode: int, repeats: int) -> dict:
    """Runs in the runtime's own interpreter; prints one JSON line. ``what`` is ``pair`` (latency of both
    modes, steps alternating) or a mode (memory of that mode alone)."""
    import numpy as np
    import openvino as ov

    from ovpasses._ov import infer   # start_async and wait: one inference thread hides a failed one from infer()
    from ovpasses.app.check import count_fused_sdpa, make_feeds
    from testkit.matrix import apply_mode

    core = ov.Core()
    modes = list(MODES) if what == "pair" else [what]
    models = {mode: apply_mode(core.read_model(xml), MODES[mode]) for mode in modes}
    result = {"runtime": ov.get_version().split("-")[0], "what": what, "context": context,
              "loadavg_1min_start": round(os.getloadavg()[0], 2), "modes": {}}
    try:
        compiled = {mode: core.compile_model(model, "CPU") for mode, model in models.items()}
        for mode, model in models.items():
            result["modes"][mode] = {
                "fused_sdpa": count_fused_sdpa(compiled[mode]),
                "cache_bytes_per_token": cache_bytes_per_token(model), "cache_variables": len(model.get_variables()),
                "inference_precision": compiled[mode].get_property("INFERENCE_PRECISION_HINT").get_type_name(),
                "kv_cache_precision": compiled[mode].get_property("KV_CACHE_PRECISION").get_type_name()}
        feeds = make_feeds(models[modes[0]], decode, prefill=context)
        requests = {mode: c.create_infer_request() for mode, c in compiled.items()}
        rss_compiled = _status_kib("VmRSS")
        prefill_s = {mode: [] for mode in modes}
        steps = {mode: [] for mode in modes}
        cpu = {mode: [] for mode in modes}
        for _ in range(repeats):
            for mode, request in requests.items():
                request.reset_state()
                start = time.perf_counter()
                infer(request, feeds[0])
                prefill_s[mode].append(time.perf_counter() - start)
            for feed in feeds[1:]:
                for mode, request in requests.items():   # one step of each mode in turn
                    start, start_cpu = time.perf_counter(), _cpu_seconds()
                    infer(request, feed)
                    steps[mode].append(time.perf_counter() - start)
                    cpu[mode].append(_cpu_seconds() - start_cpu)
            for request in requests.values():
                _check_logits(request)
        peak = _status_kib("VmHWM")
        for mode in modes:
            result["modes"][mode].update(
                prefill_ms=round(statistics.median(prefill_s[mode]) * 1e3, 1),
                decode_ms_per_token=round(statistics.median(steps[mode]) * 1e3, 2),
                decode_ms_p90=round(float(np.percentile(steps[mode], 90)) * 1e3, 2),
                # os.times() counts in clock ticks (10 ms): the mean over the steps, not a per-step median
                decode_cpu_ms_per_token=round(sum(cpu[mode]) / len(cpu[mode]) * 1e3, 2), decode_steps=len(steps[mode]))
        if what != "pair":
            result["modes"][what].update(peak_rss_mib=round(peak / 1024, 1),
                                         rss_growth_mib=round((peak - rss_compiled) / 1024, 1))
        result.update(status="ok", loadavg_1min_end=round(os.getloadavg()[0], 2))
    except Exception as exc:  # noqa: BLE001 - a runtime that fails is a result
        result.update(status="failed", error=(str(exc).strip().splitlines() or [repr(exc)])[-1][:200])
    return result


def measure(runtime: str, xml: Path, what: str, context: int, decode: int, args) -> dict:
    cmd = [str(venv_python(runtime, create=False)), str(Path(__file__).resolve()), "--worker", what, "--ir", str(xml),
           "--contexts", str(context), "--decode", str(decode), "--repeats", str(args.repeats)]
    return run_worker(cmd, args.timeout, {"runtime": runtime, "what": what, "context": context})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ir", type=Path, default=MODEL / "openvino_model.xml")
    parser.add_argument("--export", action="store_true", help=f"export the model into {MODEL} (needs .venvs/export)")
    parser.add_argument("--runtimes", nargs="+", default=RUNTIMES, help="newest and/or VERSION (.venvs/ov-VERSION)")
    parser.add_argument("--contexts", nargs="+", type=int, default=[512, 2048, 4096],
                        help="prefill lengths in tokens; decoding starts from there")
    parser.add_argument("--decode", type=int, default=32, help="decode steps of each mode after each prefill")
    parser.add_argument("--repeats", type=int, default=1, help="prefill + decode rounds per process")
    parser.add_argument("--rounds", type=int, default=2, help="paired latency processes per cell")
    parser.add_argument("--memory-decode", type=int, default=4, help="decode steps of the memory processes")
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)

    if args.worker:
        print(json.dumps(worker(args.ir, args.worker, args.contexts[0], args.decode, args.repeats)), flush=True)
        return 0
    if args.export:
        python = ROOT / ".venvs" / "export" / "bin" / "python"
        subprocess.run([str(python), str(ROOT / "tools" / "export_gemma4.py"), *EXPORT_ARGS, "--out", str(MODEL)],
                       check=True, cwd=ROOT)
        return 0
    if not args.ir.exists():
        raise SystemExit(f"unshare_decode: {args.ir} is missing; run with --export first")

    rows, table = [], []
    for runtime in args.runtimes:
        for context in args.contexts:
            pairs, memory = [], {}
            for r in range(args.rounds):
                pairs.append(measure(runtime, args.ir, "pair", context, args.decode, args))
                progress(f"  {runtime} {context} pair round {r + 1}: {pairs[-1]}")
            for mode in MODES:
                memory[mode] = measure(runtime, args.ir, mode, context, args.memory_decode, args)
                progress(f"  {runtime} {context} {mode} memory: {memory[mode]}")
            ok = [p for p in pairs if p["status"] == "ok"]
            cell = {}
            for mode in MODES:
                row = {"runtime": pairs[0].get("runtime", runtime), "mode": mode, "context": context,
                       "latency_runs": [{**{k: v for k, v in p.items() if k != "modes"}, **p.get("modes", {}).get(mode, {})}
                                        for p in pairs],
                       "memory_run": {**{k: v for k, v in memory[mode].items() if k != "modes"},
                                      **memory[mode].get("modes", {}).get(mode, {})}}
                if ok:
                    runs = [p["modes"][mode] for p in ok]
                    row.update(decode_ms_per_token=round(statistics.median(x["decode_ms_per_token"] for x in runs), 2),
                               decode_cpu_ms_per_token=round(statistics.median(x["decode_cpu_ms_per_token"]
                                                                               for x in runs), 2),
                               prefill_ms=round(statistics.median(x["prefill_ms"] for x in runs), 1),
                               **{k: runs[0][k] for k in ("fused_sdpa", "cache_bytes_per_token", "cache_variables",
                                                          "inference_precision", "kv_cache_precision")})
                else:
                    row["error"] = pairs[0].get("error", pairs[0]["status"])
                if row["memory_run"].get("status") == "ok":
                    row.update(peak_rss_mib=row["memory_run"]["peak_rss_mib"],
                               rss_growth_mib=row["memory_run"]["rss_growth_mib"])
                cell[mode] = row
                rows.append(row)
            if ok:
                cell["unshare"]["ratio_to_keep"] = round(statistics.median(
                    p["modes"]["unshare"]["decode_ms_per_token"] / p["modes"]["keep"]["decode_ms_per_token"]
                    for p in ok), 3)
            loads = [p[k] for p in pairs + list(memory.values()) for k in ("loadavg_1min_start", "loadavg_1min_end")
                     if k in p]
            for mode, row in cell.items():
                table.append([row["runtime"], context, mode, row.get("fused_sdpa", "-"), row.get("prefill_ms", "-"),
                              row.get("decode_ms_per_token", row.get("error", "?")[:60]),
                              row.get("decode_cpu_ms_per_token", "-"),
                              f"{row['ratio_to_keep']:.3f}x" if "ratio_to_keep" in row else "",
                              row.get("cache_bytes_per_token", "-"), row.get("peak_rss_mib", "-"),
                              row.get("rss_growth_mib", "-"),
                              f"{min(loads):.1f}-{max(loads):.1f}" if loads else "-"])
    print(f"unshare vs keep, CPU, default configuration; prefill CONTEXT tokens, then {args.decode} decode steps "
          f"per mode alternating, x {args.repeats} repeats x {args.rounds} paired processes per cell (medians); "
          f"memory from one process per mode ({args.memory_decode} decode steps)\n")
    print(markdown_table(["runtime", "context", "mode", "fused SDPA", "prefill ms", "decode ms/token",
                          "CPU ms/token", "unshare / keep", "cache B/token", "peak RSS MiB", "RSS growth MiB",
                          "load avg"], table))
    longest = [r for r in rows if r["context"] == max(args.contexts) and "ratio_to_keep" in r]
    for r in longest:
        print(f"{r['runtime']} at {r['context']} tokens: unshare {r['ratio_to_keep']:.3f}x keep "
              f"({'meets' if r['ratio_to_keep'] <= GOAL else 'misses'} the goal of at most {GOAL}x)")
    target = write_record("unshare_decode", rows, model=str(args.ir.relative_to(ROOT)) if args.ir.is_relative_to(ROOT)
                          else str(args.ir), contexts=args.contexts, decode=args.decode, repeats=args.repeats,
                          rounds=args.rounds, memory_decode=args.memory_decode, export_args=EXPORT_ARGS,
                          goal_ratio_at_longest_context=GOAL)
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
