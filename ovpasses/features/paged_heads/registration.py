"""The paged heads' registration (``paged_heads="pad"``): the paged path's warnings as a section of the plan, the
padding step and the warnings made again after it, its summary section.

The warnings read the sliding windows as plain data: the ``windows`` section another feature puts in the plan,
by name (features never import each other)."""

from __future__ import annotations

from dataclasses import replace

from ovpasses.analysis.attention_kinds import AttentionKind
from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.features.paged_heads.attention_head_padding import AttentionHeadPadding
from ovpasses.features.paged_heads.heads import attention_heads
from ovpasses.features.paged_heads.paged_path import paged_warnings
from ovpasses.features.paged_heads.plan import PagedHeadsAction, padding_part
from ovpasses.plan.feature import Feature, Phase, Step


def chunks_of(kinds: dict[str, AttentionKind], analysis: KVSharingAnalysis) -> tuple[int, ...]:
    """The chunks of the chunked-attention layers that read a KV cache (those the paged path converts)."""
    return tuple(sorted({k.window for name, k in kinds.items() if k.mask == "chunked" and name in analysis.sdpa
                         and analysis.sdpa[name].kv_variables}))


def _warnings(facts, plan) -> tuple:
    return tuple(paged_warnings(facts.options.runtime, plan.analysis, attention_heads(facts.sdpa_nodes),
                                plan.sections.get("windows", ()), chunks_of(plan.kinds, plan.analysis)))


def _plan(facts, plan) -> dict:
    """What no rewrite mends on the paged path, as the layers are."""
    return {"warnings": _warnings(facts, plan)}


def _padded(plan, facts):
    """The warnings for the layers as the padding left them."""
    return plan.with_sections(warnings=_warnings(facts, plan))


def _summary(run, _model, _options) -> dict:
    heads = None
    warnings = list(run.plan.warnings)
    if (part := run.parts.get(AttentionHeadPadding.NAME)) is not None:
        heads = part.data
        if (rule := run.rules.get(AttentionHeadPadding.NAME)) is not None:
            heads = replace(heads, action=PagedHeadsAction.PADDED, changed=tuple(rule.changed))
        elif part.nodes:
            heads = replace(heads, action=PagedHeadsAction.NOT_SELECTED)
        if heads.action != PagedHeadsAction.NOT_SELECTED:
            warnings += heads.warnings()
    return {"paged_heads": heads, "warnings": warnings}


FEATURE = Feature(
    "paged_heads",
    plan=_plan,
    steps=(Step(AttentionHeadPadding, padding_part, Phase.CACHES, replan=_padded),),
    summary=_summary,
)
