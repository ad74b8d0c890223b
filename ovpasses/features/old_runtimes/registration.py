"""The old runtimes' registration: what the target cannot read (a fact), the lowering steps, last, and what
became of each such operation (its summary section)."""

from __future__ import annotations

from types import MappingProxyType

from ovpasses.features.old_runtimes.convert_one_hot16_to_one_hot1 import ConvertOneHot16ToOneHot1
from ovpasses.features.old_runtimes.erfinv_constant_folding import ErfInvConstantFolding
from ovpasses.errors import UnreadableOperationError
from ovpasses.features.old_runtimes.plan import lowering_part, outcomes, refusal_message, unreadable_before
from ovpasses.plan.feature import Feature, Phase, Step


def _summary(run, model, options) -> dict:
    refused = {name: getattr(rule, "refused", {}) for name, rule in run.rules.items()}
    return {"op_versions": outcomes(model, options.runtime.version, run.kept["op_before"], options.passes, refused)}


def _refuse(summary) -> UnreadableOperationError | None:
    """An operation the target still cannot read: the error names it, its opset, the target and the first release
    that reads it."""
    refused = [a for a in summary.op_versions if not a.handled]
    if not refused:
        return None
    return UnreadableOperationError(refusal_message(summary.profile.version, refused),
                                    target=summary.profile.version, refused=refused)


FEATURE = Feature(
    "old_runtimes",
    # what the target cannot read, as the model is now (the lowering rules plan on it)
    facts=MappingProxyType({"op_before": lambda facts: unreadable_before(facts.model, facts.options.runtime.version)}),
    steps=(Step(ErfInvConstantFolding, lowering_part(ErfInvConstantFolding), Phase.LOWER),   # cannot read ErfInv
           Step(ConvertOneHot16ToOneHot1, lowering_part(ConvertOneHot16ToOneHot1), Phase.LOWER)),   # ... OneHot-16
    keeps=("op_before",),
    summary=_summary,
    refuse=_refuse,
)
