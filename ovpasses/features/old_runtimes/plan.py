"""Op-version lowering: make an IR readable by an older runtime where that is exact.

Operations newer than the target reads (:mod:`ovpasses.features.old_runtimes.analysis`) are
constant-folded or converted into older operations by the lowering passes (:data:`LOWERING_PASSES`); what
is left is refused, with the reason the pattern of its pass gave (the pass's ``refused``, filled by the predicate
its pattern uses). :func:`lower_op_versions` runs them
alone (an IR of an export folder without stateful attention); the pipeline runs the same passes as its
last steps (:data:`ovpasses.pipeline.STEPS`) and records the outcome with :func:`outcomes`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import openvino as ov

from ovpasses.features.old_runtimes.analysis import OpVersionAnalysis, UnreadableOp, analyze_op_versions, op_version
from ovpasses.errors import UnreadableOperationError, UnsupportedRuntimeError
from ovpasses.features.old_runtimes.convert_one_hot16_to_one_hot1 import ConvertOneHot16ToOneHot1
from ovpasses.features.old_runtimes.erfinv_constant_folding import ErfInvConstantFolding
from ovpasses.plan.decisions import Lowered
from ovpasses.plan.runtimes import Version, installed_version, reads_op, version_string
from ovpasses.step import PassReport, run_step
from ovpasses.rules import Planned, RulePlan

# Passes that replace operations the target cannot read, each by the (type, opset) it replaces
LOWERING_PASSES: tuple[type, ...] = (ErfInvConstantFolding, ConvertOneHot16ToOneHot1)
NO_LOWERING = "ovpasses has no constant folding or exact decomposition into older operations for it"
# Per lowering pass that ran (its NAME), what its pattern refused: friendly name -> reason (its ``refused``)
Refusals = dict[str, dict[str, str]]


@dataclass(frozen=True)
class OpVersionAction:
    """One operation the target could not read as exported, and what the pipeline did about it."""

    op: UnreadableOp
    action: Lowered
    reason: str = ""
    pass_name: str | None = None   # the lowering pass that replaced it, or whose refusal ``reason`` is

    @property
    def handled(self) -> bool:
        """The rewritten model no longer holds it."""
        return self.action != Lowered.REFUSED

    def to_dict(self) -> dict:
        return {**self.op.to_dict(), "action": self.action.value, "reason": self.reason, "pass": self.pass_name,
                "handled": self.handled}


@dataclass(repr=False)
class OpVersionLowering:
    """What :func:`lower_op_versions` did: per operation the target could not read, its action."""

    target: Version
    actions: list[OpVersionAction] = field(default_factory=list)
    passes: list[PassReport] = field(default_factory=list)

    @property
    def refused(self) -> list[OpVersionAction]:
        return [a for a in self.actions if not a.handled]

    def error(self, path=None) -> UnreadableOperationError:
        """The error that the target cannot read the model: the operations refused, the target, the file."""
        message = refusal_message(self.target, self.refused)
        return UnreadableOperationError(message if path is None else f"{path}: {message}", target=self.target,
                                        refused=self.refused, path=path)


def refusal_message(target: Version, refused: list[OpVersionAction], name_target=None) -> str:
    """The message of :class:`UnreadableOperationError`: each refused operation (the first five), why,
    and the first release that reads it. ``name_target(release)`` says how to name a target release (default:
    ``runtime='2026.2.1'``, as :func:`ovpasses.rewrite` takes it; ``ovpass`` names its option)."""
    name_target = name_target or (lambda release: f"runtime='{release}'")
    shown = version_string(target)
    parts = []
    for item in refused[:5]:
        first = item.op.first_read_string
        reads = (f"openvino {first} is the first release that reads it" if first else
                 "no release that ovpasses has measured reads it")
        parts.append(f"{item.op.describe()}: {item.reason}; {reads}")
    more = f"; and {len(refused) - 5} more" if len(refused) > 5 else ""
    firsts = [a.op.first_read for a in refused if a.op.first_read is not None]
    newest = version_string(max(firsts)) if firsts else None
    advice = (f"Prepare the IR for openvino {newest} or newer ({name_target(newest)}), or run it there"
              if len(firsts) == len(refused) else "Run it on the runtime that exported it")
    count = f"{len(refused)} operation{'s' if len(refused) > 1 else ''}"
    return (f"openvino {shown} cannot read {count} of this model, and ovpasses cannot replace "
            f"{'them' if len(refused) > 1 else 'it'} by operations that {shown} reads: {'; '.join(parts)}{more}. "
            f"{advice}")


def unreadable_before(model: ov.Model, target: Version) -> OpVersionAnalysis | None:
    """The operations of ``model`` that ``target`` cannot read, or None when there is nothing to look at:
    the installed runtime, and any release at least as new, reads whatever the installed one could build."""
    with contextlib.suppress(UnsupportedRuntimeError):   # a local build's version: look
        if target >= installed_version():
            return None
    before = analyze_op_versions(model, target)
    return None if before.readable else before


def lowering_target(pass_class: type, before: OpVersionAnalysis | None, target: Version):
    """What a lowering pass gets: a predicate on the operations ``target`` cannot read, when the model
    holds one it replaces; else None (the pass has nothing to do)."""
    if before is None or pass_class not in LOWERING_PASSES or not before.versions() & set(pass_class.OPS):
        return None
    return lambda node: not reads_op(target, node.get_type_name(), op_version(node))


def outcomes(model: ov.Model, target: Version, before: OpVersionAnalysis | None,
             selected: frozenset[str], refused: Refusals) -> list[OpVersionAction]:
    """Per operation ``target`` could not read before the lowering passes ran, what became of it. The truth
    is what is left: an operation still there was refused, whatever the passes reported; the reason is
    the one its pass's pattern gave (``refused``)."""
    if before is None:
        return []
    left = {(op.name, op.type, op.opset, op.where) for op in analyze_op_versions(model, target).unreadable}
    actions = []
    for op in before.unreadable:
        owner = next((p for p in LOWERING_PASSES if (op.type, op.opset) in p.OPS), None)
        if (op.name, op.type, op.opset, op.where) not in left:
            actions.append(OpVersionAction(op, owner.ACTION, owner.ACTION_REASON, owner.NAME) if owner else
                           OpVersionAction(op, Lowered.REPLACED))
        elif owner is None:
            actions.append(OpVersionAction(op, Lowered.REFUSED, NO_LOWERING))
        elif owner.NAME not in selected:
            actions.append(OpVersionAction(op, Lowered.REFUSED, f"pass {owner.NAME} not selected", owner.NAME))
        else:
            reason = refused.get(owner.NAME, {}).get(op.name, f"pass {owner.NAME} did not take it")
            actions.append(OpVersionAction(op, Lowered.REFUSED, reason, owner.NAME))
    return actions


def lower_op_versions(model: ov.Model, target: Version, selected: frozenset[str] | None = None) -> OpVersionLowering:
    """Replace, in place, the operations of ``model`` that release ``target`` cannot read, where that is
    exact: each pass of :data:`LOWERING_PASSES` (those in ``selected``; default all) runs when the model
    holds an operation it replaces that ``target`` cannot read, and only on such operations.

    Returns, per operation ``target`` could not read as exported, what was done, or why it was refused
    (the reason comes from the predicate of the pattern that did not take it). Raises nothing: :func:`ovpasses.rewrite`
    turns refusals into :class:`UnreadableOperationError`.
    """
    selected = frozenset(p.NAME for p in LOWERING_PASSES) if selected is None else selected
    lowering = OpVersionLowering(target)
    before = unreadable_before(model, target)
    refused: Refusals = {}
    for pass_class in LOWERING_PASSES:
        nodes = lowering_target(pass_class, before, target)
        if nodes is not None and pass_class.NAME in selected:
            pass_, report = run_step(model, pass_class, (nodes,))
            lowering.passes.append(report)
            refused[pass_class.NAME] = pass_.refused
    lowering.actions = outcomes(model, target, before, selected, refused)
    return lowering


# --------------------------------------------------------- the feature's part of the plan of a run
# (each builder takes the run's facts, :class:`ovpasses.plan.targets.Facts`, and the plan made so far)
def lowering_part(rule: type):
    """The part of a lowering rule: the operations the target cannot read that it replaces."""
    def part(facts, _plan) -> RulePlan | None:
        before = facts.op_before
        chosen = lowering_target(rule, before, facts.options.runtime.version)
        if chosen is None:
            return None
        nodes = tuple(Planned(op.name, f"{facts.options.runtime.version_string} cannot read {op.type}-{op.opset}")
                      for op in before.unreadable if (op.type, op.opset) in rule.OPS)
        return RulePlan(rule.NAME, nodes, chosen)
    return part
