#!/usr/bin/env python3
"""Pass pipeline speed: ``ovpasses.rewrite`` wall time against the CPU plugin's ``compile_model`` on
the same IR, in one process (median of several runs), and how the rewrite scales with graph size.

    python benchmarks/pipeline_speed.py                        # fixtures + synthetic stacks, plot
    python benchmarks/pipeline_speed.py --runtime 2026.0       # the affected profile's pipeline
    python benchmarks/pipeline_speed.py --ir out/bench/e2b350/openvino_model.xml
    python benchmarks/pipeline_speed.py --modes default,trimmable --layers   # each mode's cost, exported IRs only

Models: the Gemma 4 E2B-shaped fixture (35 layers, 15 cache owners, 20 borrowers), any ``--ir``
given (``tools/export_gemma4.py --preset e2b35 --num-layers 350 --num-kv-shared-layers 200`` makes
the 10x one), and synthetic E2B-shaped stacks from :func:`testkit.graphs.build_stack` at
``--layers`` (default 35 to 350). Each rewrite runs on a fresh clone (cloning is not timed);
compile_model uses the plugin's default configuration. Every mode of ``--modes`` (default: all) is timed on the
exported IRs, with the passes it ran and the time outside them (the analyses and the plan); the synthetic stacks
run the default rewrite. Writes
``benchmarks/results/pipeline_speed-<runtime>.json`` and a PNG of rewrite time against node count.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import sys
from pathlib import Path

from common import ROOT, RESULTS, markdown_table, median_seconds, openvino_version, progress, write_record

import openvino as ov  # noqa: E402

import ovpasses  # noqa: E402
from ovpasses.analysis import analyze_kv_sharing  # noqa: E402
from testkit.graphs import StackSpec, build_stack, sharing_layout  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "gemma4" / "e2b35" / "openvino_model.xml"


def e2b_stack(layers: int) -> ov.Model:
    """A synthetic stack with E2B's proportions: 20/35 of the layers borrow, two attention kinds,
    GQA 8:1 with the bidirectional broadcast, Gather(beam_idx) and a past-length ShapeOf on layer 0."""
    shared = layers * 20 // 35
    spec = StackSpec(k_source=sharing_layout(layers, shared), heads=8, kv_heads=1, head_dim=8,
                     gqa_form="bidirectional", past_length_from=(0,))
    return build_stack(spec)


# the modes --modes takes: the options of ovpasses.rewrite each one runs with
MODES = {
    "default": {},
    "unshare": {"kv_sharing": "unshare"},
    "bounded": {"sliding_window": "bounded"},
    "trimmable": {"sliding_window": "trimmable"},
    "trimmable+blocked": {"sliding_window": "trimmable", "first_prompt": "blocked"},
    "paged-heads-pad": {"paged_heads": "pad"},
}


def measure(name: str, model: ov.Model, runtime: str | None, repeats: int, compile_repeats: int,
            core: ov.Core, mode: str = "default", compile_s: float | None = None) -> dict:
    nodes = len(model.get_ordered_ops())
    summaries = []

    def run(clone: ov.Model) -> None:
        summaries.append(ovpasses.rewrite(clone, runtime, **MODES[mode]))

    rewrite_s = median_seconds(run, repeats, setup=model.clone)
    analysis_s = median_seconds(lambda: analyze_kv_sharing(model), repeats)
    if compile_s is None:
        compile_s = median_seconds(lambda: core.compile_model(model, "CPU"), compile_repeats)
    gc.collect()
    summary = summaries[-1]
    passes_ms = {p.name: round(p.seconds * 1e3, 2) for p in summary.passes}
    row = {"model": name, "mode": mode, "nodes": nodes, "sdpa": len(summary.analysis.sdpa),
           "caches": len(summary.analysis.caches), "changed": sum(len(p.changed) for p in summary.passes),
           "rewrite_ms": round(rewrite_s * 1e3, 2), "analysis_ms": round(analysis_s * 1e3, 2),
           "compile_ms": round(compile_s * 1e3, 1), "rewrite_pct_of_compile": round(100 * rewrite_s / compile_s, 2),
           "rewrite_us_per_node": round(rewrite_s * 1e6 / nodes, 3), "passes_ms": passes_ms,
           "outside_passes_ms": round(rewrite_s * 1e3 - sum(passes_ms.values()), 2)}
    progress(f"  {name}: {row}")
    return row


def plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for kind, marker in (("synthetic", "o"), ("exported", "s")):
        pts = sorted((r["nodes"], r["rewrite_ms"], r["analysis_ms"]) for r in rows
                     if r["kind"] == kind and r["mode"] == "default")
        if not pts:
            continue
        x = [p[0] for p in pts]
        ax.plot(x, [p[1] for p in pts], marker=marker, label=f"ovpasses.rewrite ({kind} IR)")
        ax.plot(x, [p[2] for p in pts], marker=marker, linestyle="--", label=f"analysis only ({kind} IR)")
    base = min((r for r in rows if r["kind"] == "synthetic"), key=lambda r: r["nodes"], default=None)
    if base:
        xs = sorted(r["nodes"] for r in rows)
        ax.plot(xs, [base["rewrite_ms"] * n / base["nodes"] for n in xs], color="grey", linestyle=":",
                label="linear from the smallest synthetic stack")
    ax.set_xlabel("nodes in the model")
    ax.set_ylabel("wall time, ms (median)")
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runtime", help="plan for this runtime (default: the installed one)")
    parser.add_argument("--layers", type=int, nargs="*", default=[35, 70, 140, 210, 350],
                        help="synthetic E2B-shaped stacks of these layer counts")
    parser.add_argument("--ir", type=Path, nargs="*", default=[], help="more exported IRs (.xml) to time")
    parser.add_argument("--repeats", type=int, default=7, help="rewrite and analysis runs per model")
    parser.add_argument("--compile-repeats", type=int, default=3, help="compile_model runs per model")
    parser.add_argument("--modes", default=",".join(MODES),
                        help=f"the modes timed on the exported IRs, comma-separated (default: all of {', '.join(MODES)})")
    parser.add_argument("--no-plot", action="store_true")
    args = parser.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if unknown := [m for m in modes if m not in MODES]:
        parser.error(f"unknown mode {', '.join(unknown)}; modes: {', '.join(MODES)}")

    core = ov.Core()
    runtime = openvino_version()
    profile = ovpasses.profile_for(args.runtime)
    progress(f"openvino {runtime}; pipeline for {profile.version_string} ({profile.name} profile)")
    rows = []
    for xml in [FIXTURE] + list(args.ir):
        if not xml.exists():
            raise SystemExit(f"pipeline_speed: {xml} does not exist")
        model = core.read_model(xml)
        compile_s = None
        for mode in modes:
            row = measure(xml.parent.name, model, args.runtime, args.repeats, args.compile_repeats, core, mode,
                          compile_s)
            compile_s = row["compile_ms"] / 1e3   # one compile_model figure per IR, the rewrite's by mode
            rows.append({"kind": "exported", **row})
        del model
    for layers in args.layers:
        rows.append({"kind": "synthetic", **measure(f"stack{layers}", e2b_stack(layers), args.runtime, args.repeats,
                                                    args.compile_repeats, core)})

    header = ["model", "mode", "kind", "nodes", "SDPA", "changed", "rewrite ms", "outside passes ms", "analysis ms",
              "compile_model ms", "rewrite / compile", "µs/node"]
    print(f"openvino {runtime}, pipeline for the {profile.name} profile; medians of {args.repeats} rewrites "
          f"and {args.compile_repeats} compiles\n")
    print(markdown_table(header, [[r["model"], r["mode"], r["kind"], r["nodes"], r["sdpa"], r["changed"],
                                   r["rewrite_ms"], r["outside_passes_ms"],
                                   r["analysis_ms"], r["compile_ms"], f"{r['rewrite_pct_of_compile']}%",
                                   r["rewrite_us_per_node"]] for r in rows]))
    scaling = {}
    for kind in ("synthetic", "exported"):
        group = sorted((r for r in rows if r["kind"] == kind and r["mode"] == "default"), key=lambda r: r["nodes"])
        if len(group) >= 2:
            lo, hi = group[0], group[-1]
            scaling[kind] = {"from": lo["model"], "to": hi["model"], "node_ratio": round(hi["nodes"] / lo["nodes"], 2),
                             "time_ratio": round(hi["rewrite_ms"] / lo["rewrite_ms"], 2)}
            print(f"\n{kind}: {scaling[kind]['node_ratio']}x the nodes ({lo['model']} -> {hi['model']}) takes "
                  f"{scaling[kind]['time_ratio']}x the rewrite time")
    name = f"pipeline_speed-{runtime}" + (f"-plan{profile.version_string}" if args.runtime else "")
    target = write_record(name, rows, profile=profile.name, plan_runtime=profile.version_string, scaling=scaling,
                          repeats=args.repeats, compile_repeats=args.compile_repeats)
    print(f"\nwrote {target}")
    if not args.no_plot:
        if importlib.util.find_spec("matplotlib") is None:
            print("no plot: matplotlib is not installed here (pip install '.[bench]'; .venvs/dev has it)")
            return 0
        png = RESULTS / f"{name}.png"
        plot(rows, png, f"ovpasses.rewrite time vs graph size (openvino {runtime}, {profile.name} profile)")
        print(f"wrote {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
