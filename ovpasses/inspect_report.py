"""``ovpass inspect``: the KV-sharing map of a model and what the rewrite does to each SDPA, as a plain
report (the ``ovpass.inspect/1`` schema) and its text and Graphviz formats.

The report reads the same objects the passes use (:class:`~ovpasses.analysis.KVSharingAnalysis` and the
:class:`~ovpasses.pipeline.RewriteSummary` of a rewrite on a clone); the formats only format it.
"""

from __future__ import annotations

import openvino as ov

from ovpasses.pipeline import run_pipeline


def inspect_model(model: ov.Model, runtime: str | None = None) -> dict:
    """The KV-sharing map of ``model`` and what ``ovpass rewrite`` would do to each SDPA on ``runtime``,
    and the operations ``runtime`` cannot read as exported with what the rewrite does about each.

    Runs the pipeline on a clone (the actions are the ones the rewrite really takes, including the
    fallback to decomposition and the refusal of an operation it cannot replace); ``model`` is not
    changed. The result follows the schema documented in README.md (``"schema": "ovpass.inspect/1"``).
    """
    summary = run_pipeline(model.clone(), runtime)
    data = summary.analysis.to_dict()
    for sdpa in data["sdpa"]:
        sdpa["action"] = summary.actions[sdpa["name"]]
    return {
        "schema": "ovpass.inspect/1",
        "runtime": summary.profile.version_string,
        "profile": summary.profile.name,
        "detected": summary.analysis.status_counts(),
        "variables": sorted(data["variables"], key=lambda v: v["variable_id"]),
        "sdpa": data["sdpa"],
        "unhandled": data["unhandled"],
        "unreadable_ops": [a.to_dict() for a in summary.op_versions],
        "readable": summary.readable,
    }


def inspect_dot(report: dict) -> str:
    """Graphviz text of an :func:`inspect_model` report: caches (boxes) -> SDPAs (ellipses), the owner's
    edge solid, borrowers' edges dashed, each labelled with the ports read (K, V); sub-graph operations
    that read a cache unanalysed are components on dotted edges."""
    def q(text: str) -> str:  # a DOT string; a literal backslash-n in ``text`` stays a line break
        return '"' + str(text).replace('"', '\\"') + '"'

    colors = {"exclusive": "palegreen", "shared": "lightsalmon", "stateless": "lightgrey"}
    lines = ["digraph kv_sharing {", "  rankdir=LR;",
             f"  label={q('KV sharing, runtime ' + report['runtime'] + ' (' + report['profile'] + ' profile)')};",
             "  node [fontname=Helvetica, fontsize=10];"]
    for sdpa in report["sdpa"]:
        label = f"{sdpa['name']}\\n{sdpa['status']}\\n{sdpa['action']}"
        lines.append(f"  {q('sdpa:' + sdpa['name'])} [shape=ellipse, style=filled, "
                     f"fillcolor={colors.get(sdpa['status'], 'white')}, label={q(label)}];")
    for var in report["variables"]:
        shape = "box3d" if var["shared"] else "box"
        lines.append(f"  {q('var:' + var['variable_id'])} [shape={shape}, label={q(var['variable_id'])}];")
        for name in var["sdpa"]:
            ports = "".join(p for p, readers in (("K", var["key_readers"]), ("V", var["value_readers"]))
                            if name in readers)
            role = "owner" if name == var["owner"] else "borrower"
            style = "solid" if role == "owner" else "dashed"
            lines.append(f"  {q('var:' + var['variable_id'])} -> {q('sdpa:' + name)} "
                         f"[style={style}, label={q(role + ' ' + ports)}];")
        for op in var["unanalysed_readers"]:
            label = f"{op}\\nnot analysed"
            lines.append(f"  {q('op:' + op)} [shape=component, label={q(label)}];")
            lines.append(f"  {q('var:' + var['variable_id'])} -> {q('op:' + op)} [style=dotted];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def inspect_text(report: dict) -> str:
    counts = report["detected"]
    lines = [f"runtime {report['runtime']} ({report['profile']} profile)",
             f"{len(report['variables'])} caches ({sum(v['shared'] for v in report['variables'])} shared); "
             f"SDPA exclusive={counts['exclusive']} shared={counts['shared']} stateless={counts['stateless']}",
             "", "SDPA (topological order):"]
    width = max((len(s["name"]) for s in report["sdpa"]), default=4)
    for s in report["sdpa"]:
        lines.append(f"  {s['name']:<{width}}  {s['status']:<9}  caches: {', '.join(s['kv_variables']) or '-'}")
        lines.append(f"  {'':<{width}}  action: {s['action']}")
    shared = [v for v in report["variables"] if v["shared"]]
    if shared:
        lines += ["", "shared caches:"]
        for v in shared:
            line = f"  {v['variable_id']}: owner {v['owner'] or '-'}; borrowers {', '.join(v['borrowers']) or '-'}"
            if v["unanalysed_readers"]:
                line += f"; also read by {', '.join(v['unanalysed_readers'])} (not analysed)"
            lines.append(line)
    for message in report["unhandled"]:
        lines.append(f"not handled: {message}")
    ops = report.get("unreadable_ops", [])
    if ops:
        verdict = ("the rewritten IR is readable there" if report["readable"] else
                   "ovpass rewrite refuses: the rewritten IR would not be readable there")
        lines += ["", f"operations openvino {report['runtime']} cannot read as exported ({verdict}):"]
        for op in ops:
            where = f" in {op['where']}" if op["where"] else ""
            first = f"first read by {op['first_read']}" if op["first_read"] else "no measured release reads it"
            lines.append(f"  {op['type']} ({op['opset']}, {first}) '{op['name']}'{where}")
            lines.append(f"    action: {op['action']}")
    return "\n".join(lines) + "\n"
