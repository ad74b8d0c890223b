"""The text a person reads: the sentence of each typed decision, and a rewrite summary as lines.

The decisions themselves are enum values (:mod:`ovpasses.plan.decisions`); this is the one place where they
become sentences. Nothing reads these sentences back.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from ovpasses.rules import Status
from ovpasses.features.sliding_window.cache_nodes import REFUSALS, Refusal
from ovpasses.features.sliding_window.caches import HELD_CONTEXT
from ovpasses.features.sliding_window.plan import MaskAction
from ovpasses.analysis.stateful_fusion import Fusion, FusionVerdict
from ovpasses.errors import InvalidOptionError, UnreadableOperationError
from ovpasses.features.old_runtimes.plan import refusal_message
from ovpasses.modes import FirstPrompt, KVSharing, SlidingWindow
from ovpasses.plan.decisions import Action, Lowered
from ovpasses.plan.runtimes import OPSETS_MEASURED_ON
from ovpasses.units import size_text  # noqa: F401 - the renderers' size formatter, re-exported
# the sliding-window and paged-path parts of the text, re-exported: one module a renderer imports
from ovpasses.app.render.paged import (  # noqa: F401
    option_flag, option_keyword, paged_heads_lines, paged_warning_text)
from ovpasses.app.render.sliding_window import (  # noqa: F401
    BENCH_HINT, BLOCKED_CLIENTS, BLOCKED_PAYS, HELD_BY, NO_SLIDING_LAYER_TEXT, TRIMMABLE_CLIENTS, blocked_lines,
    bytes_or_unknown, held_bytes_text, held_text, past_length_source, payoff_lines)

if TYPE_CHECKING:
    from ovpasses.features.old_runtimes.plan import OpVersionAction
    from ovpasses.summary import RewriteSummary

ACTION_TEXT = {
    Action.NATIVE: "none: fused natively",
    Action.NATIVE_UNFUSED: "none: the plugin leaves this shared cache unfused",
    Action.UNANALYSED: "none: a sub-graph operation (not analysed) also reads this cache; left as it is",
    Action.STATELESS: "none: reads no cache",
    Action.SHAPEOF: "cache ShapeOf computed from the Concat inputs, so the plugin can fuse it",
    Action.BARRIER: "kept out of stateful fusion (no-op Reshape on K/V)",
    Action.DECOMPOSE: "decomposed (scale after MatMul(Q,K^T)): no other way to keep it out of fusion",
    Action.UNSHARED: "reads a KV cache of its own (unshared), so the plugin can fuse it",
    Action.BOUNDED: "reads a bounded sliding-window cache (its last W-1 positions); not fused",
    Action.TRIMMABLE: "reads a sliding-window cache the program may trim to its last W-1 positions; still fused",
}

MASK_ACTION_TEXT = {
    MaskAction.SLICE: "Slice inserted: the paged converter reads the window from it",
    MaskAction.SLICED_ALREADY: "none: read through a Slice already; the paged converter reads the window",
    MaskAction.NATIVE: "nothing to do: openvino_genai's paged path on this runtime reads this window as exported",
    MaskAction.IGNORED: "none: this runtime's CPU PagedAttention ignores sliding windows (see the warning)",
}


FUSION_TEXT = {
    Fusion.FUSED: "fused: ",
    Fusion.FUSED_AFTER_REWRITE: "fused after rewrite: ",
    Fusion.FUSED_STATE_LOST: "fused, but ",
    Fusion.NOT_FUSED: "not fused: ",
}
# what a table whose own column says fused or not still has to say before the reason
FUSION_WHY = {Fusion.FUSED_AFTER_REWRITE: "after rewrite: ", Fusion.FUSED_STATE_LOST: "fused, but "}


def fusion_text(verdict: FusionVerdict | dict) -> str:
    """A fusion verdict (a :class:`FusionVerdict` or its dict) as one sentence: the verdict, then why."""
    outcome, reason = (verdict["outcome"], verdict["reason"]) if isinstance(verdict, dict) else \
        (verdict.outcome, verdict.reason)
    return FUSION_TEXT[Fusion(outcome)] + reason


def fusion_why(verdict: dict) -> str:
    """Why, for a table whose own column says whether the SDPA is fused (a verdict's dict)."""
    return FUSION_WHY.get(Fusion(verdict["outcome"]), "") + verdict["reason"]


def planned(text: str, not_applied: str | None) -> str:
    """A planned action's sentence, or, when ``passes=`` left its pass out, what was not applied."""
    return text if not_applied is None else f"not applied (pass {not_applied} not selected); planned: {text}"


def action_text(action: Action | str, not_applied: str | None = None) -> str:
    return planned(ACTION_TEXT[Action(action)], not_applied)


def mask_action_text(action: MaskAction | str, not_applied: str | None = None) -> str:
    return planned(MASK_ACTION_TEXT[MaskAction(action)], not_applied)


def op_action_text(item: OpVersionAction | dict) -> str:
    """What became of an operation the target cannot read (an :class:`OpVersionAction` or its dict), as a
    sentence."""
    action, reason, pass_name = ((item["action"], item["reason"], item["pass"]) if isinstance(item, dict) else
                                 (item.action, item.reason, item.pass_name))
    action = Lowered(action)
    if action == Lowered.CONSTANT_FOLDED:
        return f"constant-folded: {reason} ({pass_name})"
    if action == Lowered.CONVERTED:
        return f"converted to {reason} ({pass_name})"
    if action == Lowered.REPLACED:
        return "replaced"
    return f"refused: {reason}"


WIDTH = 100   # the widest line of text output


def fit(text: str, width: int = WIDTH, hanging: int = 4) -> str:
    """``text`` with every line wider than ``width`` wrapped at spaces, its continuation lines indented
    ``hanging`` more than the line's own indent. A word wider than the room left (a long node name) stays
    whole, on a line of its own: a name is for copying."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(line.strip(" "), width, initial_indent=indent, subsequent_indent=indent + " " * hanging,
                             break_long_words=False, break_on_hyphens=False) or [line]
    return "\n".join(out)


def eager_lines(entries: list[dict]) -> list[str]:
    """The eager attention subgraphs found (``RewriteSummary.eager_to_dicts()``), how many are SDPAs now,
    and why each other one is left eager."""
    if not entries:
        return []
    recovered = sum(e["recovered"] for e in entries)
    not_applied = {e["not_applied"] for e in entries if e["not_applied"]}
    lines = [f"eager attention: {len(entries)} subgraphs, {recovered} recovered as ScaledDotProductAttention"
             + (f" (not applied: {', '.join(sorted(not_applied))} not selected)" if not_applied else "")]
    lines += [f"  left eager: {e['name']}: {e['reason']}" for e in entries if not e["recoverable"]]
    return lines


# who gets what from sliding_window="trimmable" (measured: benchmarks/records/2026-11-26-bounded-vs-native.md)
PROFILE_TEXT = {
    "fixed": "fixed profile: its CPU plugin keeps the state of the caches it fuses",
    "affected": "affected profile: its CPU plugin can lose the state of a cache it fuses; the rewrite works around it",
}


def profile_text(name: str) -> str:
    """What a runtime profile's name means to a user."""
    return PROFILE_TEXT.get(name, f"{name} profile")


OWN_REFUSAL_LINES = frozenset({"SharedKVCacheUnsharing", "ErfInvConstantFolding", "ConvertOneHot16ToOneHot1",
                               "SlidingWindowKVCacheBounding", "TrimmableSlidingWindowKVCache",
                               "BlockedFirstPrompt"})


STATE_KINDS = {"scan": "carried through a scan Loop", "conv": "convolution", "recurrent": "recurrent",
               "unread": "read by nothing"}


def states_text(states: list[dict]) -> str | None:
    """``"3 states that are not KV caches (2 convolution, 1 carried through a scan Loop): left as they are"``
    (entries of ``KVSharingAnalysis.to_dict()["states"]``); None where there are none."""
    if not states:
        return None
    counts: dict[str, int] = {}
    for state in states:
        counts[state["kind"]] = counts.get(state["kind"], 0) + 1
    kinds = ", ".join(f"{n} {STATE_KINDS[kind]}" for kind, n in counts.items())
    many = len(states) > 1
    return (f"{len(states)} state{'s that are not KV caches' if many else ' that is not a KV cache'} ({kinds}): "
            f"left as {'they are' if many else 'it is'}")


def summary_text(summary: RewriteSummary, family: str | None = None) -> str:
    """The rewrite summary as lines: what was detected, what each pass changed, what was not applied and
    how the model is left, the masks, the caches unshared or bounded, and every warning. ``family``: the
    export's model family, whose measurements the payoff quotes (:func:`payoff_lines`)."""
    counts = summary.analysis.status_counts()
    caches = summary.analysis.caches
    lines = [
        f"runtime {summary.profile.version_string} ({profile_text(summary.profile.name)})",
        f"detected: {len(caches)} caches ({summary.analysis.shared_cache_count} shared), "
        f"SDPA exclusive={counts['exclusive']} shared={counts['shared']} stateless={counts['stateless']}",
    ]
    states = states_text([s.to_dict() for s in summary.analysis.states.values()])
    if states:
        lines.append(states)
    for p in summary.passes:
        lines.append(f"{p.name}: {len(p.changed)} changed" + (f" ({', '.join(p.changed[:3])}"
                                                              f"{', ...' if len(p.changed) > 3 else ''})"
                                                              if p.changed else ""))
    for record in summary.records:   # the unsharing's and the lowering's refusals have their own lines below
        if record.status is Status.REFUSED and record.rule not in OWN_REFUSAL_LINES:
            handed = f"; handed to {record.planned.fallback}" if record.planned.fallback else ""
            lines.append(f"{record.rule} refused {record.node}: {record.reason}{handed}")
    lines += eager_lines(summary.eager_to_dicts())
    fusion = summary.fusion()
    for pass_, names in summary.not_applied().items():
        layers = ", ".join(str(summary.analysis.layer(n)) for n in names)
        lines.append(f"not applied ({pass_} not selected): layer{'s' if len(names) > 1 else ''} {layers}; "
                     f"planned: {action_text(summary.decisions[names[0]].action)}")
        for name in names:
            lines.append(f"  layer {summary.analysis.layer(name)} as left: {fusion_text(fusion[name])}")
    for mask in summary.masks:   # the Select's name is in to_dict()
        text = mask_action_text(summary.mask_actions[mask.select], summary.masks_not_applied.get(mask.select))
        lines.append(f"sliding-window mask (window {mask.window}, "
                     f"{len(mask.sdpa_direct) + len(mask.sdpa_sliced)} SDPA): {text}")
    no_effect = summary.no_effect()
    if "kv_sharing" in no_effect:
        lines.append(f"kv sharing: {summary.kv_sharing}: changed nothing: "
                     + ("no cache is shared" if "no_shared_cache" in no_effect["kv_sharing"] else
                        "every shared cache is kept shared (below)"))
    elif summary.kv_sharing is not KVSharing.KEEP:
        lines.append(f"kv sharing: {summary.kv_sharing}: {len(summary.unshared)} caches added, "
                     f"{bytes_or_unknown(summary.extra_cache_bytes_per_token)} per token of context (batch 1)")
    for cache, reason in summary.kept_shared.items():
        lines.append(f"kept shared: {cache}: {reason}")
    bounded = summary.sliding_window_caches
    if "sliding_window" in no_effect and bounded is not None and not bounded.has_sliding_layer:
        lines.append(f"sliding window: {summary.sliding_window}: {NO_SLIDING_LAYER_TEXT}")
    elif "sliding_window" in no_effect:   # one line, whatever the number of caches
        reasons = "; ".join(f"{count} cache{'s' if count > 1 else ''}: {REFUSALS[Refusal(reason)]}"
                            for reason, count in no_effect["sliding_window"].items())
        lines.append(f"sliding window: {summary.sliding_window}: changed nothing: {reasons or 'the model has no cache'}")
    elif summary.sliding_window is not SlidingWindow.FULL and bounded is not None:
        verb = "trimmable by the program (ovpasses.features.sliding_window.trim)" \
            if summary.sliding_window is SlidingWindow.TRIMMABLE else "bounded"
        lines.append(f"sliding window: {summary.sliding_window}: {len(bounded.bounded)} caches {verb}"
                     + (f" (window {', '.join(map(str, sorted({b.window for b in bounded.bounded.values()})))}, "
                        f"past length from {past_length_source(bounded)})" if bounded.bounded else ""))
        whole = [vid for vid, refusal in bounded.refused.items() if refusal.reason is Refusal.FULL_ATTENTION]
        if whole:   # as it must be: a full-attention layer reads every position
            lines.append(f"  kept whole: {len(whole)} cache{'s' if len(whole) > 1 else ''} of full-attention layers, "
                         "which read every position")
        for vid, refusal in bounded.refused.items():
            if refusal.reason is not Refusal.FULL_ATTENTION:
                lines.append(f"  not {'trimmable' if summary.sliding_window is SlidingWindow.TRIMMABLE else 'bounded'}: "
                             f"{vid}: {refusal.message}")
        trimmable = summary.sliding_window is SlidingWindow.TRIMMABLE
        lines += [f"  KV held at {h['context']} tokens, {held_text(h)}: {held_bytes_text(h)}"
                  for h in bounded.held_at(HELD_CONTEXT, trimmable)]
        if (pays := summary.sliding_window_payoff) is not None:
            lines += ["  " + line for line in payoff_lines(pays.to_dict(), family)]
        if trimmable and bounded.bounded:
            lines += [f"  {client}: {benefit}" for client, benefit in TRIMMABLE_CLIENTS.items()]
    if summary.options.first_prompt is FirstPrompt.BLOCKED:
        lines += blocked_lines(summary.first_prompt_to_dict())
    lines += paged_heads_lines(summary.paged_heads.to_dict()) if summary.paged_heads else []
    for message in summary.analysis.unhandled:
        lines.append(f"not handled: {message}")
    for finding in summary.findings:
        lines.append(f"warning: KV sharing: {finding.message}")
    for warning in summary.warnings:
        lines.append(f"warning: {paged_warning_text(warning)}")
    measured = summary.profile.version in OPSETS_MEASURED_ON
    for item in summary.op_versions:
        verb = "cannot read" if measured else "is not known to read"   # between measured releases
        lines.append(f"{summary.profile.version_string} {verb} {item.op.describe()}: {op_action_text(item)}")
    return "\n".join(lines)


def error_text(error: Exception) -> str:
    """What ``ovpass`` says of an error: an operation the target cannot read names its ``--runtime`` option, an
    option that needs another names both as flags; any other error says its own message."""
    if isinstance(error, UnreadableOperationError) and error.refused:
        message = refusal_message(error.target, error.refused, lambda _release: "--runtime")
        return message if error.path is None else f"{error.path}: {message}"
    if isinstance(error, InvalidOptionError) and error.needs is not None:   # the CLI speaks in its flags
        return (f"{option_flag(error.choice)} needs {option_flag(error.needs)}"
                + (f", not {option_flag(error.given)}" if error.given is not None else ""))
    return str(error)


def with_warning_texts(data: dict) -> dict:
    """A report (``RewriteSummary.to_dict()``, an inspect report) as ``ovpass`` prints it in JSON: its paged-path
    warnings as their sentences."""
    return {**data, "warnings": [paged_warning_text(w) for w in data.get("warnings", [])]} \
        if "warnings" in data else data


