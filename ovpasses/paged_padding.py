"""The ``paged_heads`` step of the pipeline: plan with :func:`analyze_paged_heads`, pad with
:class:`AttentionHeadPadding`, and say what it costs and where it is (not) needed.

``paged_heads="keep"`` (default) changes nothing and still plans, so that the reports can name the
option and its price on a model and runtime that need it; ``"pad"`` pads every cache to one layout
(see :mod:`ovpasses.passes.attention_head_padding`). Decisions are data (:class:`PagedHeadsAction`);
sentences are made here, at the edge, from them.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass

import openvino as ov

from ovpasses._ov import SDPA_TYPE
from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.analysis.paged_heads import PagedHeads, analyze_paged_heads
from ovpasses.options import PagedHeads
from ovpasses.passes.attention_head_padding import AttentionHeadPadding

class PagedHeadsAction(str, enum.Enum):
    KEPT = "kept"                  # paged_heads="keep": nothing changed
    PADDED = "padded"
    UNIFORM = "uniform"            # one layout already: nothing to pad
    REFUSED = "refused"            # the analysis refused the model (reasons in plan.refusals)
    NOT_SELECTED = "not_selected"  # the pass is not among passes=


@dataclass
class PagedHeadsStep:
    """What the step planned and did."""

    mode: PagedHeads
    action: PagedHeadsAction
    plan: PagedHeads
    needed: bool                 # the runtime's CPU PagedAttention needs one head layout
    runtime: str
    changed: tuple[str, ...] = ()   # variable ids padded

    def cost(self) -> str:
        return _cost(self.plan.bytes_per_token(), self.plan.bytes_per_token(padded=True) if self.plan.target else None)

    def to_dict(self) -> dict:
        return {"mode": self.mode.value, "action": self.action.value, "needed": self.needed,
                "changed": list(self.changed), **self.plan.to_dict()}

    def lines(self) -> list[str]:
        return summary_lines(self.to_dict())

    def warnings(self) -> list[str]:
        if self.mode is PagedHeads.PAD and not self.needed and self.plan.padded:
            return [f"--paged-heads pad is not needed on openvino {self.runtime}: its CPU PagedAttention keys "
                    f"its executors by head size and KV heads; the padding only costs memory ({self.cost()})"]
        if self.mode is PagedHeads.PAD and self.action == PagedHeadsAction.REFUSED and self.needed:
            return [f"--paged-heads pad could not pad this model ({self.plan.refusals[0].message}): the paged path "
                    f"on openvino {self.runtime} stays wrong where head layouts differ"]
        return []


def _cost(before: int | None, after: int | None) -> str:
    if not before or not after:
        return "KV bytes per token unknown (a dynamic dimension)"
    return f"KV bytes per token (batch 1) {before} -> {after} ({after / before:.2f}x)"


def summary_lines(data: dict) -> list[str]:
    """The report lines of a :meth:`PagedHeadsStep.to_dict` (rewrite and inspect print the same); none when
    there is nothing to say (one layout, or padding neither asked for nor needed by the runtime)."""
    target = "x".join(map(str, data["target"])) if data["target"] else None
    cost = _cost(data["bytes_per_token"], data["bytes_per_token_padded"])
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


def sdpa_by_name(model: ov.Model, names: set[str]) -> dict[str, ov.Node]:
    """The SDPA nodes of ``model`` named in ``names``, by friendly name, in topological order."""
    return {n.get_friendly_name(): n for n in model.get_ordered_ops()
            if n.get_type_name() == SDPA_TYPE and n.get_friendly_name() in names}


def paged_heads_plan(model: ov.Model, analysis: KVSharingAnalysis, mode: PagedHeads, needed: bool,
                     runtime: str) -> PagedHeadsStep:
    """Plan the padding of ``model`` (its KV-sharing ``analysis`` as it is now); the action says whether the
    pass has anything to do (:data:`PagedHeadsAction.KEPT` with ``mode="pad"``: it has)."""
    plan = analyze_paged_heads(model, analysis)
    step = PagedHeadsStep(mode, PagedHeadsAction.KEPT, plan, needed, runtime)
    if mode is PagedHeads.PAD and plan.refusals:
        step.action = PagedHeadsAction.REFUSED
    elif mode is PagedHeads.PAD and not plan.padded:
        step.action = PagedHeadsAction.UNIFORM
    return step
