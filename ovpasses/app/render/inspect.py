"""The inspect report (:func:`ovpasses.report.inspect.inspect_model`, ``ovpass.inspect/3``) as text and as
Graphviz DOT; both only format the report's data."""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.app.render.text import (
    TRIMMABLE_CLIENTS,
    blocked_lines,
    WIDTH,
    action_text,
    eager_lines,
    fusion_text,
    states_text,
    fusion_why,
    held_bytes_text,
    held_text,
    mask_action_text,
    op_action_text,
    paged_heads_lines,
    paged_warning_text,
    NO_SLIDING_LAYER_TEXT,
    payoff_lines,
    profile_text,
    size_text,
)
from ovpasses.errors import OvpassesError
from ovpasses.plan.decisions import Action

if TYPE_CHECKING:   # imported where a graph is made (KVSharingAnalysis.graph)
    import networkx as nx

ROW, COLUMN = 5, 6   # the picture's grid: exclusive caches per row, borrowers per column
STATUS_COLORS = {"exclusive": "palegreen", "shared": "lightsalmon", "stateless": "lightgrey"}


# ------------------------------------------------------------------------------------------------ text

def _reads(report_sdpa: dict, owners: dict[str, int | None]) -> str:
    """Whose caches an SDPA reads: ``own``, ``layer 2``, ``layer 0, own``, ``?`` (no owner) or ``-`` (none)."""
    sources = sorted({owners[v] for v in report_sdpa["kv_variables"]}, key=lambda x: (x is None, x))
    if not sources:
        return "-"
    if sources == [report_sdpa["layer"]]:
        return "own"
    return ", ".join("?" if s is None else ("own" if s == report_sdpa["layer"] else f"layer {s}") for s in sources)


def inspect_text(report: dict, verbose: bool = False, family: str | None = None) -> str:
    """The report as text: one row per layer (index, kind, status, whose cache it reads, whether it is
    expected to be fused and why), the shared caches by layer, the lint's findings. ``verbose`` adds the
    SDPAs' and caches' full names. ``family``: the export's model family, whose measurements the payoff
    quotes."""
    counts = report["detected"]
    by_name = {s["name"]: s for s in report["sdpa"]}
    owners = {v["variable_id"]: by_name[v["owner"]]["layer"] if v["owner"] else None for v in report["variables"]}
    lines = [f"runtime {report['runtime']} ({profile_text(report['profile'])})",
             f"{len(report['variables'])} caches ({sum(v['shared'] for v in report['variables'])} shared); "
             f"SDPA exclusive={counts['exclusive']} shared={counts['shared']} stateless={counts['stateless']}; "
             f"expected fused: {report['fused_expected']} of {len(report['sdpa'])} "
             f"(unmodified: {report['fused_expected_unmodified']})",
             *filter(None, [states_text(report.get("states", []))]),
             *eager_lines(report.get("eager_attention", [])),
             ""]
    kind_width = max((len(s["kind"]["label"]) for s in report["sdpa"]), default=4)
    rows = [("layer", "kind", "head", "status", "reads", "fused", "why")]
    for s in report["sdpa"]:
        kind = s["kind"]
        head = "?" if kind["head_size"] is None else str(kind["head_size"])
        if kind["v_head_size"] != kind["head_size"]:
            head += f"/{'?' if kind['v_head_size'] is None else kind['v_head_size']}"
        rows.append((str(s["layer"]), kind["label"], head, s["status"], _reads(s, owners),
                     "yes" if s["fusion"]["expected"] else "no", fusion_why(s["fusion"])))
    widths = [max(len(r[i]) for r in rows) for i in range(6)]
    widths[1] = max(widths[1], kind_width)
    for index, row in enumerate(rows):
        cells = f"{row[0]:>{widths[0]}}  " + "  ".join(f"{c:<{w}}" for c, w in zip(row[1:6], widths[1:])) + "  "
        lines += _column(cells, row[6])
        if index == 0:
            continue
        s = report["sdpa"][index - 1]
        indent = " " * (widths[0] + 2)
        if Action(s["action"]).changes or s["not_applied"]:
            lines.append(f"{indent}rewrite: {action_text(s['action'], s['not_applied'])}")
        if s["fusion_unmodified"] != s["fusion"]:
            lines.append(f"{indent}unmodified: {fusion_text(s['fusion_unmodified'])}")
        if verbose:
            lines.append(f"{indent}SDPA {s['name']}")
            lines.append(f"{indent}caches {', '.join(s['kv_variables']) or '-'}; action: {action_text(s['action'], s['not_applied'])}")
    windows = sorted({s["kind"]["window"] for s in report["sdpa"] if s["kind"].get("window")})
    mode = report.get("sliding_window", "full")
    if mode == "full" and windows:   # the modes that would pay, in one line
        sliding = sum(bool(s["kind"].get("window")) for s in report["sdpa"])
        lines += ["", f"sliding window: {sliding} of {len(report['sdpa'])} layers attend to a window of "
                      f"{', '.join(map(str, windows))} positions: --sliding-window trimmable (programs that trim) "
                      "or bounded would hold less KV past it; 'ovpass inspect' with either says what each would "
                      "hold and when it pays"]
    elif mode != "full" and not windows:
        lines += ["", f"sliding window: {mode}: {NO_SLIDING_LAYER_TEXT}"]
    elif mode != "full":
        lines += ["", f"sliding window: {mode}"]
        for s in report["sdpa"]:   # the full-attention layers keep every position, as they must: not listed
            if s.get("window") is not None:
                held = ("trimmable" if mode == "trimmable" else "bounded") if s["cache_bounded"] else "whole"
                lines.append(f"  layer {s['layer']}: window {s['window']}, cache {held}")
        full = [str(s["layer"]) for s in report["sdpa"] if "window" in s and s["window"] is None]
        if full:
            lines.append(f"  full-attention layer{'s' if len(full) > 1 else ''} {', '.join(full)}: cache kept whole "
                         "(they read every position)")
        kv = report["kv_bytes"]
        lines.append(f"  KV bytes at batch 1, {kv['context']:,} tokens, in the element types the IR declares: "
                     f"{size_text(kv['full'])} as exported, {size_text(kv['bounded'])} "
                     f"{'once trimmed' if mode == 'trimmable' else 'bounded'} ({_size(kv['per_token'])} per token)")
        lines += [f"  held, {held_text(h)}: " + (f"{size_text(h['full'])} as exported, {size_text(h['bounded'])} "
                  "bounded" if "bounded" in h else held_bytes_text(h)) for h in kv.get("held", [])]
        if report.get("sliding_window_payoff"):
            lines += ["  " + line for line in payoff_lines(report["sliding_window_payoff"], family)]
        if mode == "trimmable":
            lines += [f"  {client}: {benefit}" for client, benefit in TRIMMABLE_CLIENTS.items()]
    if report.get("first_prompt", {}).get("mode") == "blocked":
        lines += ["", *blocked_lines(report["first_prompt"])]
    shared = [v for v in report["variables"] if v["shared"]]
    if shared:
        lines += ["", "shared caches (owner: borrowers):"]
        grouped: dict[tuple, list[str]] = {}
        for v in shared:
            key = (owners[v["variable_id"]], tuple(v["borrowers"]), tuple(v["unanalysed_readers"]))
            grouped.setdefault(key, []).append(v)
        for (owner, borrowers, unanalysed), variables in grouped.items():
            ports = "/".join(sorted({"K" if v["key_readers"] else "V" for v in variables}))
            head = f"layer {owner}" if owner is not None else f"no owner ({', '.join(v['variable_id'] for v in variables)})"
            layers = ", ".join(str(by_name[b]["layer"]) for b in borrowers)
            line = f"  {head}: {'layer' if len(borrowers) == 1 else 'layers'} {layers or '-'} ({ports})"
            if unanalysed:
                line += f"; also read by {', '.join(unanalysed)} (not analysed)"
            lines.append(line)
            if verbose:
                for v in variables:
                    lines.append(f"    {v['variable_id']}: owner {v['owner'] or '-'}; borrowers "
                                 f"{', '.join(v['borrowers']) or '-'}")
    lines += ["", "KV sharing lint: " + (f"{len(report['lint'])} finding{'s' if len(report['lint']) > 1 else ''}"
                                         if report["lint"] else "no findings")]
    lines += [f"  {f['code']}: {f['message']}" for f in report["lint"]]
    for mask in report.get("sliding_window_masks", []):   # the Select's long name only when verbose
        lines.append(f"sliding-window mask{' ' + mask['select'] if verbose else ''} (window {mask['window']}, "
                     f"{len(mask['sdpa'])} SDPA): {mask_action_text(mask['action'], mask['not_applied'])}")
    if report.get("kv_sharing", "keep") != "keep":
        extra = report["extra_cache_bytes_per_token"]
        lines += ["", f"kv sharing: {report['kv_sharing']}: {len(report['unshared'])} caches added, "
                      f"{_size(extra)} per token of context (batch 1)"]
        lines += [f"  {u['variable_id']}: for layer {by_name[u['borrower']]['layer'] if u['borrower'] in by_name else u['borrower']}, "
                  f"{_size(u['bytes_per_token'])} per token" for u in report["unshared"]]
        lines += [f"  kept shared: {cache}: {reason}" for cache, reason in report["kept_shared"].items()]
    if report.get("paged_heads"):
        lines += paged_heads_lines(report["paged_heads"])
    for message in report["unhandled"]:
        lines.append(f"not handled: {message}")
    for warning in report.get("warnings", []):
        lines.append(f"warning: {paged_warning_text(warning)}")
    ops = report.get("unreadable_ops", [])
    if ops:
        verdict = ("the rewritten IR is readable there" if report["readable"] else
                   "ovpass rewrite refuses: the rewritten IR would not be readable there")
        lines += ["", f"operations openvino {report['runtime']} cannot read as exported ({verdict}):"]
        for op in ops:
            where = f" in {op['where']}" if op["where"] else ""
            first = f"first read by {op['first_read']}" if op["first_read"] else "no measured release reads it"
            lines.append(f"  {op['type']} ({op['opset']}, {first}) '{op['name']}'{where}")
            lines.append(f"    action: {op_action_text(op)}")
    return "\n".join(lines) + "\n"


def _column(cells: str, text: str) -> list[str]:
    """A table row whose last column, ``text``, wraps within :data:`~ovpasses.app.render.text.WIDTH` under its
    own column (a column that starts too far right for that wraps under the row instead)."""
    room = WIDTH - len(cells)
    if len(cells) + len(text) <= WIDTH or room < 30:
        return [cells + text]
    first, *rest = textwrap.wrap(text, room, break_long_words=False, break_on_hyphens=False)
    return [cells + first, *(" " * len(cells) + line for line in rest)]


def _size(count: int | None) -> str:
    return "an unknown number of bytes" if count is None else size_text(count)


SKIPPED_TEXT = {"no_stateful_attention": "no stateful attention", "not_an_ir": "XML, not an IR"}


def skipped_text(skipped: list[dict]) -> str:
    """The IRs of a folder that were not worked on, and why (``ExportScan.skipped_dicts()``), as one line
    (empty when none)."""
    if not skipped:
        return ""
    return "skipped: " + ", ".join(f"{s['file']} ({SKIPPED_TEXT[s['reason']]})" for s in skipped)


# ------------------------------------------------------------------------------------------------ dot

def report_graph(report: dict) -> nx.DiGraph:
    """The analysis' networkx graph (:meth:`KVSharingAnalysis.graph`: variables -> SDPAs, edges with
    ``role`` and ``ports``) of an :func:`inspect_model` report, its SDPA nodes carrying the report's
    entry (``layer``, ``kind``, ``fusion``, ``action``, ...) as ``report``."""
    graph = KVSharingAnalysis.from_dict(report).graph()
    for entry in report["sdpa"]:
        graph.nodes[("sdpa", entry["name"])]["report"] = entry
    for variable in report["variables"]:
        graph.nodes[("variable", variable["variable_id"])]["report"] = variable
    return graph


def inspect_dot(report: dict) -> str:
    """Graphviz text of an :func:`inspect_model` report, drawn from :func:`report_graph` through the
    ``graphviz`` package (``pip install 'ovpasses[dot]'``).

    Each cache owner is a cluster holding its caches (one box for the variables it owns, 3-D when
    shared), the owner and the borrowers; an SDPA is labelled with its layer, kind and status, filled
    by status and drawn with a double border when the CPU plugin is expected to fuse it. The owner's
    edge is solid, borrowers' dashed, each labelled with what it reads (K, V); sub-graph operations that
    read a cache unanalysed are components on dotted edges. Full names, reasons and actions are
    tooltips (SVG); a legend explains the marks.
    """
    try:
        import graphviz
    except ImportError as error:
        raise OvpassesError("--format dot needs the graphviz package: pip install 'ovpasses[dot]' "
                            "(or pip install graphviz)") from error
    graph = report_graph(report)
    title = f"KV sharing, runtime {report['runtime']} ({report['profile']} profile)"
    dot = graphviz.Digraph("kv_sharing", graph_attr={
        "rankdir": "LR", "label": title, "labelloc": "t", "fontname": "Helvetica", "fontsize": "12",
        "nodesep": "0.12", "ranksep": "0.5", "newrank": "true", "tooltip": title},
        node_attr={"fontname": "Helvetica", "fontsize": "10"}, edge_attr={"fontname": "Helvetica", "fontsize": "9"})

    sdpa_nodes = {n: d["report"] for n, d in graph.nodes(data=True) if n[0] == "sdpa"}
    # group each owner's variables into one cache node; an unowned variable is a group of its own
    groups: dict[str, dict] = {}
    for node, data in graph.nodes(data=True):
        if node[0] != "variable":
            continue
        variable = data["report"]
        key = f"cache:{variable['owner']}" if variable["owner"] else f"cache:{variable['variable_id']}"
        group = groups.setdefault(key, {"owner": variable["owner"], "variables": [], "shared": False,
                                        "readers": {}, "unanalysed": []})
        group["variables"].append(variable["variable_id"])
        group["shared"] |= variable["shared"]
        group["unanalysed"] += [op for op in variable["unanalysed_readers"] if op not in group["unanalysed"]]
        for _, target, edge in graph.out_edges(node, data=True):
            ports = group["readers"].setdefault(target[1], {"role": edge["role"], "ports": set()})
            ports["ports"].update("K" if p == 1 else "V" for p in edge["ports"])
    placed: set[str] = set()
    # DOT identifiers: the graphviz package reads "a:b" as node a, port b, and friendly names hold colons
    ids = {name: f"sdpa{sdpa_nodes[('sdpa', name)]['layer']}_{i}" for i, (_, name) in enumerate(sdpa_nodes)}
    cache_ids = {key: f"cache{i}" for i, key in enumerate(groups)}

    def sdpa_node(container, name: str) -> None:
        entry = sdpa_nodes[("sdpa", name)]
        fused = entry["fusion"]["expected"]
        label = f"{entry['layer']} {entry['kind']['label']}\n{entry['status']}, {'fused' if fused else 'not fused'}"
        tooltip = (f"{name}\n{fusion_text(entry['fusion'])}\nunmodified: {fusion_text(entry['fusion_unmodified'])}\n"
                   f"action: {action_text(entry['action'], entry['not_applied'])}")
        container.node(ids[name], label, shape="box", style="rounded,filled",
                       fillcolor=STATUS_COLORS.get(entry["status"], "white"),
                       peripheries="2" if fused else "1", tooltip=tooltip)
        placed.add(name)

    ordered_groups = sorted(groups.items(), key=lambda item: (
        item[1]["owner"] is None, sdpa_nodes[("sdpa", item[1]["owner"])]["layer"] if item[1]["owner"] else 0))
    # grid rows: up to ROW caches of one reader each side by side, a cache of several readers alone
    rows: list[list] = []
    for item in ordered_groups:
        single = len(item[1]["readers"]) == 1
        if single and rows and len(rows[-1]) < ROW and len(rows[-1][0][1]["readers"]) == 1:
            rows[-1].append(item)
        else:
            rows.append([item])
    # dot stacks the rows bottom-up in this layout: define the last row first; a cluster's borrowers go in
    # columns of COLUMN
    for row in reversed(rows):
        previous: str | None = None
        for key, group in row:
            owner = group["owner"]
            layer = sdpa_nodes[("sdpa", owner)]["layer"] if owner else None
            readers = sorted(group["readers"], key=lambda n: sdpa_nodes[("sdpa", n)]["layer"])
            with dot.subgraph(name=f"cluster_{cache_ids[key]}") as cluster:
                cluster.attr(label=f"layer {layer}'s cache" if owner else "no owner", style="rounded",
                             color="grey60", fontsize="10", tooltip=", ".join(group["variables"]))
                ports = sorted({p for r in group["readers"].values() for p in r["ports"]})
                cache_label = (f"cache {layer}" if owner else "cache") + f"\n{'/'.join(ports) or '-'}"
                cluster.node(cache_ids[key], cache_label, shape="box3d" if group["shared"] else "box",
                             tooltip="\n".join(group["variables"]))
                for name in readers:
                    if name not in placed:
                        sdpa_node(cluster, name)
                for first, second in zip(readers, readers[COLUMN:]):
                    cluster.edge(ids[first], ids[second], style="invis")
            if previous is not None:
                dot.edge(previous, cache_ids[key], style="invis")
            previous = ids[readers[-1]] if readers else None
    for node, entry in sorted(sdpa_nodes.items(), key=lambda item: item[1]["layer"]):
        if node[1] not in placed:
            sdpa_node(dot, node[1])
    for key, group in ordered_groups:
        for name, reader in group["readers"].items():
            ports = "".join(sorted(reader["ports"]))
            dot.edge(cache_ids[key], ids[name], label="" if ports == "KV" else ports,
                     style="solid" if reader["role"] == "owner" else "dashed",
                     tooltip=f"{reader['role']}: {', '.join(group['variables'])}")
        for index, op in enumerate(group["unanalysed"]):
            op_id = f"{cache_ids[key]}_op{index}"
            dot.node(op_id, f"{op}\nnot analysed", shape="component", tooltip=op)
            dot.edge(cache_ids[key], op_id, style="dotted")
    with dot.subgraph(name="cluster_legend") as legend:
        legend.attr(label="legend", style="rounded", color="grey60", fontsize="10")
        legend.node("legend", _LEGEND, shape="plaintext")
    return dot.source


_LEGEND = ("<<table border='0' cellborder='1' cellspacing='2' cellpadding='3'>"
           "<tr><td bgcolor='palegreen'>exclusive</td><td bgcolor='lightsalmon'>shared</td>"
           "<td bgcolor='lightgrey'>stateless</td></tr>"
           "<tr><td colspan='3' align='left'>double border: expected fused (CPU stateful kernel)</td></tr>"
           "<tr><td colspan='3' align='left'>solid edge: owner; dashed: borrower</td></tr>"
           "<tr><td colspan='3' align='left'>edge K or V: reads only that (else both)</td></tr>"
           "<tr><td colspan='3' align='left'>3-D box: cache read by several SDPAs</td></tr>"
           "<tr><td colspan='3' align='left'>hover: full names, reasons, actions (SVG)</td></tr></table>>")
