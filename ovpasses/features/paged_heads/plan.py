"""The ``paged_heads`` step of the pipeline: plan with :func:`analyze_paged_heads`, pad with
:class:`AttentionHeadPadding`, and say what it costs and where it is (not) needed.

``paged_heads="keep"`` (default) changes nothing and still plans, so that the reports can name the
option and its price on a model and runtime that need it; ``"pad"`` pads every cache to one layout
(see :mod:`ovpasses.features.paged_heads.attention_head_padding`). Decisions are data (:class:`PagedHeadsAction`,
:class:`~ovpasses.features.paged_heads.paged_path.PagedWarning`); their sentences and the report lines are the application's
(:func:`ovpasses.app.render.text.paged_heads_lines`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import openvino as ov

from ovpasses._ov import SDPA_TYPE
from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.features.paged_heads import analysis as heads_analysis
from ovpasses.features.paged_heads.analysis import analyze_paged_heads
from ovpasses.features.paged_heads.paged_path import PagedRisk, PagedWarning
from ovpasses.modes import OptionChoice, PagedHeads
from ovpasses.plan.runtimes import Version
from ovpasses.rules import Planned, RulePlan

class PagedHeadsAction(str, enum.Enum):
    KEPT = "kept"                  # paged_heads="keep": nothing changed
    PADDED = "padded"
    UNIFORM = "uniform"            # one layout already: nothing to pad
    REFUSED = "refused"            # the analysis refused the model (reasons in plan.refusals)
    NOT_SELECTED = "not_selected"  # the pass is not among passes=


@dataclass(frozen=True)
class PagedHeadsStep:
    """What the step planned and did."""

    mode: PagedHeads
    action: PagedHeadsAction
    plan: heads_analysis.PagedHeads   # the padding plan (not the mode of the same name)
    needed: bool                 # the runtime's CPU PagedAttention needs one head layout
    runtime: Version
    changed: tuple[str, ...] = ()   # variable ids padded

    def to_dict(self) -> dict:
        return {"mode": self.mode.value, "action": self.action.value, "needed": self.needed,
                "changed": list(self.changed), **self.plan.to_dict()}

    def warnings(self) -> list[PagedWarning]:
        """What the padding asked for does not do here: it is not needed on this runtime (only a cost), or the
        runtime needs it and the model refused it."""
        pad = OptionChoice("paged_heads", PagedHeads.PAD)
        if self.mode is PagedHeads.PAD and not self.needed and self.plan.padded:
            return [PagedWarning(PagedRisk.PADDING_NOT_NEEDED, self.runtime, option=pad,
                                 bytes_per_token=self.bytes_per_token)]
        if self.mode is PagedHeads.PAD and self.action == PagedHeadsAction.REFUSED and self.needed:
            return [PagedWarning(PagedRisk.PADDING_REFUSED, self.runtime, option=pad, refusal=self.plan.refusals[0])]
        return []

    @property
    def bytes_per_token(self) -> tuple[int | None, int | None]:
        """KV bytes per token at batch 1 as exported and as padded (None: a dynamic dimension, or no target)."""
        return (self.plan.bytes_per_token(),
                self.plan.bytes_per_token(padded=True) if self.plan.target else None)


def sdpa_by_name(model: ov.Model, names: set[str]) -> dict[str, ov.Node]:
    """The SDPA nodes of ``model`` named in ``names``, by friendly name, in topological order."""
    return {n.get_friendly_name(): n for n in model.get_ordered_ops()
            if n.get_type_name() == SDPA_TYPE and n.get_friendly_name() in names}


def paged_heads_plan(model: ov.Model, analysis: KVSharingAnalysis, mode: PagedHeads, needed: bool,
                     runtime: Version, concats: list[ov.Node] | None = None) -> PagedHeadsStep:
    """Plan the padding of ``model`` (its KV-sharing ``analysis`` as it is now; ``concats``: its Concat nodes in
    topological order, where the caller has them); the action says whether the pass has anything to do
    (:data:`PagedHeadsAction.KEPT` with ``mode="pad"``: it has)."""
    plan = analyze_paged_heads(model, analysis, concats)
    action = PagedHeadsAction.KEPT
    if mode is PagedHeads.PAD and plan.refusals:
        action = PagedHeadsAction.REFUSED
    elif mode is PagedHeads.PAD and not plan.padded:
        action = PagedHeadsAction.UNIFORM
    return PagedHeadsStep(mode, action, plan, needed, runtime)


# --------------------------------------------------------- the feature's part of the plan of a run
# (each builder takes the run's facts, :class:`ovpasses.plan.targets.Facts`, and the plan made so far)
def padding_part(facts, _plan) -> RulePlan:
    """Planned in every mode, so that the reports can name the option and its price where the runtime needs
    it; pads with ``paged_heads="pad"`` only."""
    options = facts.options
    heads = paged_heads_plan(facts.model, facts.kv, options.paged_heads, options.runtime.paged_cpu_one_head_size,
                             options.runtime.version, facts.by_type.get("Concat", []))
    pads = options.paged_heads is PagedHeads.PAD and heads.action == PagedHeadsAction.KEPT
    nodes = tuple(Planned(vid, "its heads differ from the widest cache's") for vid in heads.plan.padded) if pads else ()
    return RulePlan("AttentionHeadPadding", nodes, heads)
