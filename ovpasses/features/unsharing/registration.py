"""The unsharing's registration (``kv_sharing="unshare"``): its step, the plan made again after it, its summary
section."""

from __future__ import annotations

from ovpasses.features.unsharing.plan import unsharing_part
from ovpasses.features.unsharing.shared_kv_cache_unsharing import SharedKVCacheUnsharing
from ovpasses.plan.feature import Feature, Phase, Step
from ovpasses.plan.targets import plan_again


def _summary(run, _model, _options) -> dict:
    """The copies made and, per cache kept shared for a borrower, why (the plan's refusals and the rule's)."""
    unshared, kept_shared = [], {}
    if (part := run.parts.get(SharedKVCacheUnsharing.NAME)) is not None:
        kept_shared = dict(part.data.refused)
        if (rule := run.rules.get(SharedKVCacheUnsharing.NAME)) is not None:
            unshared = list(rule.caches)
            kept_shared.update(rule.refused)
    return {"unshared": unshared, "kept_shared": kept_shared}


FEATURE = Feature(
    "unsharing",
    steps=(Step(SharedKVCacheUnsharing, unsharing_part, Phase.CACHES, replan=plan_again),),
    summary=_summary,
)
