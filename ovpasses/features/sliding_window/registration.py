"""The sliding windows' registration: the masks (facts), each mask's action and the windows (its section of the
plan: ``windows`` is what the paged path's warnings read), its steps, what it requires of the options, its summary
section."""

from __future__ import annotations

from types import MappingProxyType

from ovpasses.errors import InvalidOptionError
from ovpasses.features.sliding_window import plan as windows
from ovpasses.features.sliding_window.first_prompt import BlockedFirstPrompt
from ovpasses.features.sliding_window.mask_expand import SDPAMaskExpandElimination
from ovpasses.features.sliding_window.masks import find_distance_window_masks, find_sliding_window_masks
from ovpasses.features.sliding_window.release_points import SDPAReleasePoints
from ovpasses.features.sliding_window.sliding_window_cache_bounding import SlidingWindowKVCacheBounding
from ovpasses.features.sliding_window.sliding_window_cache_trimmable import TrimmableSlidingWindowKVCache
from ovpasses.features.sliding_window.sliding_window_mask_slice import SlidingWindowMaskSliceInsertion
from ovpasses.modes import FirstPrompt, OptionChoice, SlidingWindow
from ovpasses.plan.feature import Feature, Phase, Step
from ovpasses.rules import Status


def _plan(facts, _plan) -> dict:
    masks = facts.masks
    return {"masks": tuple(masks), "mask_actions": MappingProxyType(windows.mask_plan(masks, facts.options.runtime)),
            "windows": windows.mask_windows(masks)}


def _blocked_needs_trimmable(options) -> None:
    if options.first_prompt is FirstPrompt.BLOCKED and options.sliding_window is not SlidingWindow.TRIMMABLE:
        raise InvalidOptionError(f"first_prompt={options.first_prompt} needs sliding_window=trimmable (its caches "
                                 f"are born trimmed), not sliding_window={options.sliding_window}",
                                 choice=OptionChoice("first_prompt", options.first_prompt),
                                 needs=OptionChoice("sliding_window", SlidingWindow.TRIMMABLE),
                                 given=OptionChoice("sliding_window", options.sliding_window))


def _summary(run, _model, _options) -> dict:
    caches = next((run.parts[r.NAME].data for r in (SlidingWindowKVCacheBounding, TrimmableSlidingWindowKVCache)
                   if r.NAME in run.parts), None)
    return {"masks": list(run.plan.masks), "mask_actions": dict(run.plan.mask_actions),
            "masks_not_applied": {r.node: r.rule for r in run.records if r.rule == SlidingWindowMaskSliceInsertion.NAME
                                  and r.status is Status.NOT_SELECTED},
            "sliding_window_caches": caches}


FEATURE = Feature(
    "sliding_window",
    facts=MappingProxyType({"masks": lambda facts: find_sliding_window_masks(facts.sdpa_nodes.values()),
                            "distance_masks": lambda facts: find_distance_window_masks(facts.sdpa_nodes.values())}),
    plan=_plan,
    steps=(
        Step(SlidingWindowMaskSliceInsertion, windows.mask_slice_part, Phase.WINDOWS),   # runtimes whose paged converter needs it
        Step(SlidingWindowKVCacheBounding, windows.bounding_part, Phase.WINDOWS),        # sliding_window="bounded" only
        Step(TrimmableSlidingWindowKVCache, windows.trimming_part, Phase.WINDOWS),       # sliding_window="trimmable" only
        Step(BlockedFirstPrompt, windows.blocked_part, Phase.FINISH),                    # first_prompt="blocked" only
        Step(SDPAReleasePoints, windows.release_part, Phase.FINISH),                     # sliding_window="trimmable" only
        Step(SDPAMaskExpandElimination, windows.mask_expand_part, Phase.FINISH),         # sliding_window="trimmable" only
    ),
    checks=(_blocked_needs_trimmable,),
    summary=_summary,
)
