"""The ``paged_heads`` step of the pipeline: plan with :func:`analyze_paged_heads`, pad with
:class:`AttentionHeadPadding`, and say what it costs and where it is (not) needed.

``paged_heads="keep"`` (default) changes nothing and still plans, so that the reports can name the
option and its price on a model and runtime that need it; ``"pad"`` pads every cache to one layout
(see :mod:`ovpasses.passes.attention_head_padding`). Decisions are data (:class:`PagedHeadsAction`);
the report lines are the application's (:func:`ovpasses.app.render.text.paged_heads_lines`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import openvino as ov

from ovpasses._ov import SDPA_TYPE
from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.analysis.paged_heads import PagedHeads, analyze_paged_heads
from ovpasses.errors import OvpassesError

PAGED_HEADS_MODES = ("keep", "pad")


class PagedHeadsAction(str, enum.Enum):
    KEPT = "kept"                  # paged_heads="keep": nothing changed
    PADDED = "padded"
    UNIFORM = "uniform"            # one layout already: nothing to pad
    REFUSED = "refused"            # the analysis refused the model (reasons in plan.refusals)
    NOT_SELECTED = "not_selected"  # the pass is not among passes=


@dataclass
class PagedHeadsStep:
    """What the step planned and did."""

    mode: str
    action: PagedHeadsAction
    plan: PagedHeads
    needed: bool                 # the runtime's CPU PagedAttention needs one head layout
    runtime: str
    changed: tuple[str, ...] = ()   # variable ids padded

    def cost(self) -> str:
        return kv_cost_text(self.plan.bytes_per_token(), self.plan.bytes_per_token(padded=True) if self.plan.target else None)

    def to_dict(self) -> dict:
        return {"mode": self.mode, "action": self.action.value, "needed": self.needed,
                "changed": list(self.changed), **self.plan.to_dict()}

    def warnings(self) -> list[str]:
        if self.mode == "pad" and not self.needed and self.plan.padded:
            return [f"--paged-heads pad is not needed on openvino {self.runtime}: its CPU PagedAttention keys "
                    f"its executors by head size and KV heads; the padding only costs memory ({self.cost()})"]
        if self.mode == "pad" and self.action == PagedHeadsAction.REFUSED and self.needed:
            return [f"--paged-heads pad could not pad this model ({self.plan.refusals[0].message}): the paged path "
                    f"on openvino {self.runtime} stays wrong where head layouts differ"]
        return []


def kv_cost_text(before: int | None, after: int | None) -> str:
    """KV bytes per token before and after the padding, as a phrase."""
    if not before or not after:
        return "KV bytes per token unknown (a dynamic dimension)"
    return f"KV bytes per token (batch 1) {before} -> {after} ({after / before:.2f}x)"


def sdpa_by_name(model: ov.Model, names: set[str]) -> dict[str, ov.Node]:
    """The SDPA nodes of ``model`` named in ``names``, by friendly name, in topological order."""
    return {n.get_friendly_name(): n for n in model.get_ordered_ops()
            if n.get_type_name() == SDPA_TYPE and n.get_friendly_name() in names}


def check_paged_heads(mode: str) -> None:
    if mode not in PAGED_HEADS_MODES:
        raise OvpassesError(f"paged_heads must be one of {', '.join(PAGED_HEADS_MODES)}, not {mode!r}")


def paged_heads_plan(model: ov.Model, analysis: KVSharingAnalysis, mode: str, needed: bool,
                     runtime: str) -> PagedHeadsStep:
    """Plan the padding of ``model`` (its KV-sharing ``analysis`` as it is now); the action says whether the
    pass has anything to do (:data:`PagedHeadsAction.KEPT` with ``mode="pad"``: it has)."""
    plan = analyze_paged_heads(model, analysis)
    step = PagedHeadsStep(mode, PagedHeadsAction.KEPT, plan, needed, runtime)
    if mode == "pad" and plan.refusals:
        step.action = PagedHeadsAction.REFUSED
    elif mode == "pad" and not plan.padded:
        step.action = PagedHeadsAction.UNIFORM
    return step
