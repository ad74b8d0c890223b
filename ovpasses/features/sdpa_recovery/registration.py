"""The SDPA recovery's registration: its fact (the eager attention subgraphs), its step, its summary section."""

from __future__ import annotations

from types import MappingProxyType

from ovpasses.features.sdpa_recovery.analysis import find_eager_attention
from ovpasses.features.sdpa_recovery.eager_attention_to_sdpa import EagerAttentionToSDPA
from ovpasses.features.sdpa_recovery.plan import recovery_part
from ovpasses.plan.feature import Feature, Phase, Step


def _summary(run, _model, _options) -> dict:
    """The eager subgraphs of the input (the part's data), those made SDPAs, and the pass when ``passes=`` left
    it out."""
    name = EagerAttentionToSDPA.NAME
    part, rule = run.parts.get(name), run.rules.get(name)
    return {"eager_attention": list(part.data) if part is not None else [],
            "recovered": list(rule.changed) if rule is not None else [],
            "eager_not_applied": name if part is not None and part.nodes and rule is None else None}


FEATURE = Feature(
    "sdpa_recovery",
    facts=MappingProxyType({"eager": lambda facts: find_eager_attention(facts.model, facts.by_type.get("Softmax", []))}),
    steps=(Step(EagerAttentionToSDPA, recovery_part, Phase.RECOVER),),   # IRs exported with eager attention
    summary=_summary,
)
