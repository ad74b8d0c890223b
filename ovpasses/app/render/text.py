"""The text a person reads: the sentence of each typed decision, and a rewrite summary as lines.

The decisions themselves are enum values (:mod:`ovpasses.plan.decisions`); this is the one place where they
become sentences. Nothing reads these sentences back.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from ovpasses.analysis.stateful_fusion import Fusion, FusionVerdict
from ovpasses.paged_padding import PagedHeadsAction, kv_cost_text
from ovpasses.passes.attention_head_padding import AttentionHeadPadding
from ovpasses.plan.decisions import Action, Lowered, MaskAction
from ovpasses.plan.runtimes import OPSETS_MEASURED_ON

if TYPE_CHECKING:
    from ovpasses.lowering import OpVersionAction
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
    MaskAction.NATIVE: "none: this runtime's paged converter reads the window as it is",
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


def _bytes(count: int | None) -> str:
    return "an unknown number of bytes (a dynamic head dimension)" if count is None else f"{count} bytes"


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


def summary_text(summary: RewriteSummary) -> str:
    """The rewrite summary as lines: what was detected, what each pass changed, what was not applied and
    how the model is left, the masks, the caches unshared or bounded, and every warning."""
    counts = summary.analysis.status_counts()
    caches = summary.analysis.caches
    lines = [
        f"runtime {summary.profile.version_string} ({summary.profile.name} profile)",
        f"detected: {len(caches)} caches ({sum(c.shared for c in caches.values())} shared), "
        f"SDPA exclusive={counts['exclusive']} shared={counts['shared']} stateless={counts['stateless']}",
    ]
    for p in summary.passes:
        lines.append(f"{p.name}: {len(p.changed)} changed" + (f" ({', '.join(p.changed[:3])}"
                                                              f"{', ...' if len(p.changed) > 3 else ''})"
                                                              if p.changed else ""))
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
    if summary.kv_sharing != "keep":
        lines.append(f"kv sharing: {summary.kv_sharing}: {len(summary.unshared)} caches added, "
                     f"{_bytes(summary.extra_cache_bytes_per_token)} per token of context (batch 1)")
    for cache, reason in summary.kept_shared.items():
        lines.append(f"kept shared: {cache}: {reason}")
    bounded = summary.sliding_window_caches
    if summary.sliding_window != "full" and bounded is not None:
        verb = "trimmable by the program (ovpasses.sliding_window_trim)" if summary.sliding_window == "trimmable" \
            else "bounded"
        lines.append(f"sliding window: {summary.sliding_window}: {len(bounded.bounded)} caches {verb}"
                     + (f" (window {', '.join(map(str, sorted({b.window for b in bounded.bounded.values()})))}, "
                        f"past length from {bounded.reference})" if bounded.bounded else ""))
        for vid, refusal in bounded.refused.items():
            lines.append(f"  not {'trimmable' if summary.sliding_window == 'trimmable' else 'bounded'}: {vid}: "
                         f"{refusal.message}")
    lines += paged_heads_lines(summary.paged_heads.to_dict()) if summary.paged_heads else []
    for message in summary.analysis.unhandled:
        lines.append(f"not handled: {message}")
    for finding in summary.findings:
        lines.append(f"warning: KV sharing: {finding.message}")
    for message in summary.warnings:
        lines.append(f"warning: {message}")
    measured = summary.profile.version in OPSETS_MEASURED_ON
    for item in summary.op_versions:
        verb = "cannot read" if measured else "is not known to read"   # between measured releases
        lines.append(f"{summary.profile.version_string} {verb} {item.op.describe()}: {op_action_text(item)}")
    return "\n".join(lines)


def paged_heads_lines(data: dict) -> list[str]:
    """The report lines of a :meth:`PagedHeadsStep.to_dict` (rewrite and inspect print the same); none when
    there is nothing to say (one layout, or padding neither asked for nor needed by the runtime)."""
    target = "x".join(map(str, data["target"])) if data["target"] else None
    cost = kv_cost_text(data["bytes_per_token"], data["bytes_per_token_padded"])
    action = PagedHeadsAction(data["action"])
    if action == PagedHeadsAction.PADDED:
        return [f"paged heads: pad: {len(data['changed'])} caches padded to {target} (KV heads x head size; were "
                f"{data['layouts']})", f"  {cost}", f"  layers: {_layer_heads(data['layers'])}"]
    if action == PagedHeadsAction.REFUSED:
        return [f"paged heads: not padded: {r['message']}" for r in data["refusals"][:3]]
    if action == PagedHeadsAction.NOT_SELECTED:
        return [f"paged heads: not applied (pass {AttentionHeadPadding.NAME} not selected); planned: "
                f"{len(data['padded'])} caches to {target}"]
    if action == PagedHeadsAction.KEPT and data["padded"] and data["needed"]:
        return [f"paged heads: {data['layouts']} (KV heads x head size)",
                f"  --paged-heads pad would make every cache {target}: {cost}",
                f"  layers: {_layer_heads(data['layers'])}"]
    return []


def _layer_heads(layers: list[dict]) -> str:
    """``"8 query heads on 1x8 in 28 layers, ..."``: the layers' heads as exported (query heads on KV heads x
    head size; ``/Ev`` where V's head size differs), grouped."""
    def one(layer: dict) -> str:
        v_size = "" if layer["v_head_size"] == layer["head_size"] else f"/{layer['v_head_size']}"
        return f"{layer['q_heads']} query heads on {layer['kv_heads']}x{layer['head_size']}{v_size}"

    counts = Counter(one(layer) for layer in layers)
    return ", ".join(f"{heads} in {n} layer{'s' if n > 1 else ''}" for heads, n in counts.items())
