"""The unfused expands' part of the plan: which SDPAs lose their GQA expand. Pure over the facts and the plan."""

from __future__ import annotations

from ovpasses.analysis.stateful_fusion import predict_fusion
from ovpasses.passes.gqa_expand import gqa_expand, rebuilt
from ovpasses.plan.decisions import Action
from ovpasses.rules import Planned, RulePlan


def expand_part(facts, plan) -> RulePlan | None:
    """Every mode: the SDPAs, as the earlier rules left the model, that the CPU plugin is not expected to fuse
    (:func:`~ovpasses.analysis.stateful_fusion.predict_fusion`) and that read K or V through an expand as exported
    (one this rule rebuilt, a numpy Broadcast, is not planned again: a second rewrite changes nothing)."""
    profile = facts.options.runtime
    nodes = []
    for name, node in facts.sdpa_nodes.items():
        if not any((expand := gqa_expand(node, port)) is not None and not rebuilt(expand) for port in (1, 2)):
            continue
        decision = plan.decisions.get(name) if plan is not None else None
        action = decision.action if decision is not None else None
        verdict = predict_fusion(facts.kv, name, barrier=action == Action.BARRIER,
                                 shapeof_moved=action == Action.SHAPEOF,
                                 shapeof_loses_state=profile.decompose_cache_shapeof)
        if not verdict.expected:
            nodes.append(Planned(name, f"the plugin does not fuse it ({verdict.reason}): its expand copies the "
                                       "cache per query head every step"))
    return RulePlan("UnfusedSDPAExpandRewrite", tuple(nodes))
