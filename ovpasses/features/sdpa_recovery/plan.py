"""The SDPA recovery's part of the plan of a run: the eager attention subgraphs that compute exactly SDPA."""

from __future__ import annotations

from ovpasses.rules import Planned, RulePlan


# --------------------------------------------------------- the feature's part of the plan of a run
# (each builder takes the run's facts, :class:`ovpasses.plan.targets.Facts`, and the plan made so far)
def recovery_part(facts, _plan) -> RulePlan | None:
    """First: the SDPAs it recovers then go through detection and the plan like exported ones."""
    nodes = tuple(Planned(e.name, "eager attention") for e in facts.eager if e.recoverable)
    return RulePlan("EagerAttentionToSDPA", nodes, tuple(facts.eager)) if facts.eager else None
