"""Where a decode step's (or the prefill's) time goes, per form of the model (issue 22): the CPU plugin's
per-node counters.

    .venvs/dev/bin/python benchmarks/probes/sliding_window_profile.py --model out/e2b-wide-w512 --context 8192
        [--chunk 1000] [--steps 8] [--phase decode|prefill] [--forms unmodified,bounded]
        [--config default|exact] [--top 12] [--trim]

Each form is compiled with ``PERF_COUNT: YES`` (and the config's properties), filled with the
``--context``-token prompt in ``--chunk``-token chunks, then ``--steps`` decode steps run. With
``--phase decode`` the counters of those steps (``request.profiling_info``: per executed node, its real
time) are summed per node type and per node, and the step's wall time is recorded beside them; with
``--phase prefill`` the counters of every prefill chunk are (per chunk: ``"step"`` is a chunk, the
decode steps are not profiled). The SDPA counters say which layers run the fused stateful kernel.

The CPU plugin's counters are each node's mean over every inference its compiled model has run, whichever
request ran it (``benchmarks/records/2026-11-27-chunked-prefill-kernel.md``; a second request of the same model
reports the same means), so a phase's time per node is its total after the phase less its total before (a mean
times the inferences run), over the phase's inferences. Before 2026-11-27 (session 20) the decode phase summed the
running means of the prompt and the steps: its node figures after a prompt were mostly the prompt's.
Writes ``benchmarks/results/sliding_window_profile-<name>.json``.
"""

from __future__ import annotations

import collections
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
from common import markdown_table, model_parser, progress, stateful_feeder, write_record  # noqa: E402  (a module of benchmarks/)
from sliding_window import FORMS, configs


def layers_of_nodes(compiled) -> dict[str, str]:
    """Runtime node name -> the decoder layer it computes (``"-"``: none). A node's ``originalLayersNames``
    name the IR's ops it runs (``...layers.N...``); the nodes the plugin makes itself (the MatMuls and
    Softmax of an SDPA it decomposed) name none: they take the layer of their nearest named input."""
    ops = compiled.get_runtime_model().get_ordered_ops()
    named: dict[str, str] = {}
    for op in ops:
        info = op.get_rt_info()
        names = info["originalLayersNames"].astype(str) if "originalLayersNames" in info else ""
        found = re.search(r"layers\.(\d+)\.", names)
        named[op.get_friendly_name()] = found.group(1) if found else "-"

    def nearest(op, depth: int) -> str:
        layer = named.get(op.get_friendly_name(), "-")
        if layer != "-" or depth == 0:
            return layer
        for port in range(op.get_input_size()):
            layer = nearest(op.input_value(port).get_node(), depth - 1)
            if layer != "-":
                return layer
        return "-"

    return {op.get_friendly_name(): nearest(op, 6) for op in ops}


def layer_kinds(model_dir: Path) -> dict[str, str]:
    """Decoder layer -> ``sliding`` or ``full`` (the config's ``layer_types``), ``+ borrower`` for the
    last ``num_kv_shared_layers``; empty when the config does not say."""
    import json
    config = json.loads((model_dir / "config.json").read_text())
    config = config.get("text_config", config)
    types = config.get("layer_types") or []
    shared = int(config.get("num_kv_shared_layers") or 0)
    return {str(i): kind.replace("_attention", "") + (" borrower" if i >= len(types) - shared else "")
            for i, kind in enumerate(types)}


def profile(model_dir: Path, form: str, config: dict, context: int, chunk: int, steps: int, margin: int,
            phase: str = "decode", trim: bool = False) -> dict:
    import openvino as ov

    import ovpasses
    from ovpasses.app.check import count_fused_sdpa
    core = ov.Core()
    model = core.read_model(model_dir / "openvino_model.xml")
    if FORMS[form] is not None:
        ovpasses.rewrite(model, kv_sharing=FORMS[form][0], sliding_window=FORMS[form][1],
                         sliding_window_margin=margin if FORMS[form][1] == "bounded" else 0)
    compiled = core.compile_model(model, "CPU", dict(config, PERF_COUNT="YES"))
    request = compiled.create_infer_request()
    request.reset_state()
    trimmer = None
    if trim and FORMS[form] is not None and FORMS[form][1] == "trimmable":
        from ovpasses.features.sliding_window.trim import SlidingWindowTrimmer
        trimmer = SlidingWindowTrimmer.for_model(model, request, every=32)
    feed_logits = stateful_feeder(request)

    def feed(ids) -> int:
        return int(np.argmax(feed_logits(ids)))

    walls = []

    def timed(ids, count: bool) -> int:
        start = time.perf_counter()
        token = feed(ids)
        if count:
            walls.append(time.perf_counter() - start)
        return token

    node_type: dict[str, str] = {}

    def totals(inferences: int) -> dict[str, float]:
        """Each executed node's time over the model's inferences so far, us: its mean times their count."""
        spent = {}
        for info in request.profiling_info:
            if info.status == info.Status.EXECUTED:
                node_type[info.node_name] = f"{info.node_type} ({info.exec_type})"
                spent[info.node_name] = info.real_time.total_seconds() * 1e6 * inferences
        return spent

    prompt = np.random.default_rng(0).integers(4, 4000, context)
    bounds = list(range(0, context, chunk))
    for begin in bounds:
        token = timed(prompt[begin:begin + chunk], phase == "prefill")
        if trimmer is not None:
            trimmer.trim()
    before = {}
    if phase == "decode":
        before = totals(len(bounds))
        for _ in range(steps):
            token = timed([token], True)
            if trimmer is not None:
                trimmer.step()
    after = totals(len(bounds) + (steps if phase == "decode" else 0))

    layer_of = layers_of_nodes(compiled)
    by_layer: collections.Counter = collections.Counter()   # (layer, "FullyConnected" | "other")
    by_type: collections.Counter = collections.Counter()
    by_node: collections.Counter = collections.Counter()
    for name, total in after.items():
        us, kind = total - before.get(name, 0.0), node_type[name]
        by_type[kind.split(" (")[0]] += us
        part = "FullyConnected" if kind.startswith("FullyConnected ") else "other"
        by_layer[(layer_of.get(name, "-"), part)] += us
        by_node[name] += us
    steps = len(walls)
    total = sum(by_type.values())
    return {"form": form, "phase": phase, "fused_sdpa": count_fused_sdpa(compiled), "context": context,
            "trims": trimmer.trims if trimmer is not None else None,
            "steps": steps, "wall_s": round(sum(walls), 3),
            "step_ms_median": round(1000 * statistics.median(walls), 2),
            "counted_ms_per_step": round(total / steps / 1000, 2),
            "by_type_ms_per_step": {k: round(v / steps / 1000, 3) for k, v in by_type.most_common()},
            # per decoder layer ("-": embeddings, final norm, lm head): FullyConnected (projections, MLP)
            # and the rest (attention: SDPA or the plugin's decomposition of it, norms, RoPE, masks)
            "by_layer_ms_per_step": {layer: {part: round(by_layer[(layer, part)] / steps / 1000, 3)
                                             for part in ("FullyConnected", "other")}
                                     for layer in sorted({k[0] for k in by_layer}, key=lambda x: (len(x), x))},
            "top_nodes_ms_per_step": [{"node": f"{k} [{node_type[k]}]", "type": node_type[k], "ms": round(v / steps / 1000, 3)}
                                      for k, v in by_node.most_common(40)]}


def main(argv=None) -> int:
    parser = model_parser(__doc__, 8192)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--phase", choices=("decode", "prefill"), default="decode")
    parser.add_argument("--forms", default="unmodified,bounded")
    parser.add_argument("--config", choices=("default", "exact"), default="default")
    parser.add_argument("--margin", type=int, default=0)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--trim", action="store_true",
                        help="trimmable forms: cut the caches after each chunk and every 32 steps (not counted)")
    parser.add_argument("--name")
    args = parser.parse_args(argv)
    rows = []
    phase = "" if args.phase == "decode" else "-prefill"
    name = args.name or f"sliding_window_profile-{args.model.name}-{args.context}-{args.config}{phase}"
    kinds = layer_kinds(args.model)
    for form in args.forms.split(","):
        progress(f"profiling {form}'s {args.phase} at {args.context} ({args.config})")
        rows.append(profile(args.model, form, configs()[args.config], args.context, args.chunk, args.steps,
                            args.margin, args.phase, args.trim))
        write_record(name, rows, model=str(args.model), context=args.context, chunk=args.chunk, steps=args.steps,
                     phase=args.phase,
                     config=configs()[args.config] or "CPU plugin defaults (no properties)", margin=args.margin)
        row = rows[-1]
        print(f"\n{form} ({args.phase}, {row['wall_s']} s in all): step {row['step_ms_median']} ms (counters {row['counted_ms_per_step']} ms), "
              f"fused SDPA {row['fused_sdpa']}")
        print(markdown_table(["node type", "ms/step"], list(row["by_type_ms_per_step"].items())[:args.top]))
        print(markdown_table(["layer", "kind", "FullyConnected ms/step", "other ms/step"],
                             [[layer, kinds.get(layer, ""), parts["FullyConnected"], parts["other"]]
                              for layer, parts in row["by_layer_ms_per_step"].items()]))
        print(markdown_table(["node", "type", "ms/step"],
                             [[n["node"][-60:], n["type"], n["ms"]] for n in row["top_nodes_ms_per_step"][:args.top]]),
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
