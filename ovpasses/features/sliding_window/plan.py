"""The sliding-window feature's part of the plan: per sliding-window mask, what the pipeline does on a runtime
profile (openvino_genai's paged path). Pure over plain data: :func:`mask_plan` reads the masks
(:mod:`ovpasses.features.sliding_window.masks`) and the profile.

A decision is an enum value (:class:`MaskAction`: the JSON reports carry its value); the sentences a person
reads are rendered at the edge (:mod:`ovpasses.app.render.text`).
"""

from __future__ import annotations

from dataclasses import replace

from ovpasses._strenum import StrEnum

from ovpasses.features.sliding_window.masks import SlidingWindowMask
from ovpasses.plan.profiles import RuntimeProfile
from ovpasses.features.sliding_window.caches import analyze_sliding_window_caches, trimmable_caches
from ovpasses.features.sliding_window.first_prompt_plan import RT_BLOCKED, RT_NODE, plan_blocked
from ovpasses.features.sliding_window.mask_expand import expand_candidates
from ovpasses.features.sliding_window.release_points import release_candidates
from ovpasses.features.sliding_window.sliding_window_cache_trimmable import SLICED_FROM, narrowed_mask
from ovpasses.modes import FirstPrompt, SlidingWindow
from ovpasses.plan.decisions import Action
from ovpasses.rules import Planned, RulePlan


class MaskAction(StrEnum):
    """What the pipeline does to one sliding-window mask (a Select)."""

    SLICE = "slice"                    # SlidingWindowMaskSliceInsertion: the paged converter reads the window
    SLICED_ALREADY = "sliced_already"  # nothing: read through a Slice already
    NATIVE = "native"                  # nothing: this runtime's paged converter reads the window as it is
    IGNORED = "ignored"                # nothing: this runtime's CPU PagedAttention ignores sliding windows


def mask_plan(masks: list[SlidingWindowMask], profile: RuntimeProfile) -> dict[str, MaskAction]:
    """Per sliding-window mask (its Select's friendly name), what the pipeline does on ``profile``. Pure."""
    actions = {}
    for mask in masks:
        if not mask.sdpa_direct:
            actions[mask.select] = MaskAction.SLICED_ALREADY
        elif profile.slice_sliding_window_mask:
            actions[mask.select] = MaskAction.SLICE
        elif profile.paged_cpu_ignores_window:
            actions[mask.select] = MaskAction.IGNORED
        else:
            actions[mask.select] = MaskAction.NATIVE
    return actions


def mask_windows(masks: list[SlidingWindowMask]) -> tuple[int, ...]:
    """The windows of ``masks``, each once, in ascending order: the plain data another feature reads (the paged
    path's warnings, :func:`ovpasses.features.paged_heads.paged_path.paged_warnings`). Pure."""
    return tuple(sorted({mask.window for mask in masks}))


# --------------------------------------------------------- the feature's part of the plan of a run
# (each builder takes the run's facts, :class:`ovpasses.plan.targets.Facts`, and the plan made so far)
def mask_slice_part(_facts, plan) -> RulePlan:
    nodes = tuple(Planned(mask, "the paged converter of this runtime needs a Slice to keep the window")
                  for mask, action in plan.mask_actions.items() if action == MaskAction.SLICE)
    return RulePlan("SlidingWindowMaskSliceInsertion", nodes)


def _sliding_caches(facts, rule: str, action: Action, columns: bool = False) -> RulePlan:
    """Last: planned (:func:`analyze_sliding_window_caches`) on the model as the other rules left it. ``columns``:
    the reason says which key columns its readers' mask gives them (:func:`narrowed_mask`). Bounded caches leave
    the plugin's fused kernel, which some runtimes cannot do with an f16 state (the profile's
    ``unfused_f16_state_fails``); trimmable ones stay in it."""
    caches = analyze_sliding_window_caches(
        facts.model, facts.kv, facts.masks, facts.options.sliding_window_margin, facts.distance_masks,
        keep_f16_states_fused=action is Action.BOUNDED and facts.options.runtime.unfused_f16_state_fails)

    def reason(c) -> str:
        said = f"only sliding-window attention (window {c.window}) reads it"
        if columns:
            said += ("; its readers' key columns built from the mask's inputs"
                     if narrowed_mask(c.window, caches.reference is not None) else
                     f"; its readers' key columns a Slice of the exported mask (a window of {SLICED_FROM:,} or more "
                     "beside full-attention layers)")
        return said

    nodes = tuple(Planned(vid, reason(c), action.value, c.readers) for vid, c in caches.bounded.items())
    return RulePlan(rule, nodes, caches)


def bounding_part(facts, _plan) -> RulePlan | None:
    if facts.options.sliding_window is not SlidingWindow.BOUNDED:
        return None
    return _sliding_caches(facts, "SlidingWindowKVCacheBounding", Action.BOUNDED)


def trimming_part(facts, _plan) -> RulePlan | None:
    if facts.options.sliding_window is not SlidingWindow.TRIMMABLE:
        return None
    return _sliding_caches(facts, "TrimmableSlidingWindowKVCache", Action.TRIMMABLE, columns=True)


def blocked_part(facts, _plan) -> RulePlan | None:
    """first_prompt="blocked" only: the trimmable sliding SDPAs (as the trimmable rule left them) whose first
    prompt runs in query blocks (:func:`~ovpasses.features.sliding_window.first_prompt.plan_blocked`)."""
    if facts.options.first_prompt is not FirstPrompt.BLOCKED:
        return None
    blocked = replace(plan_blocked(facts.model), slice_masks=facts.options.runtime.slice_sliding_window_mask)
    nodes = tuple(Planned(layer.sdpa, f"it reads sliding-window caches a trim cuts to {layer.keep} positions")
                  for layer in blocked.layers)
    nodes += tuple(Planned(name, "it reads a trimmable sliding-window cache") for name in blocked.refused)
    return RulePlan("BlockedFirstPrompt", nodes, blocked)


def _blocked_sdpas(model) -> set[str]:
    """The SDPAs BlockedFirstPrompt gave a blocked first prompt (the model's runtime info)."""
    names = model.get_rt_info(RT_BLOCKED).astype(str) if model.has_rt_info(RT_BLOCKED) else ""
    return {name for name in names.split(",") if name}


def release_part(facts, _plan) -> RulePlan | None:
    """sliding_window="trimmable" only, last: a release point after every SDPA but the blocked first prompt's (its
    layers end in a sync point of their own; its runs are rank 5), on the model as the other rules left it
    (:func:`~ovpasses.features.sliding_window.release_points.release_candidates`). Nothing where no cache is
    trimmable (a model without sliding-window layers): the mode then has no effect, and the model is the default
    rewrite's, whose decode the points would slow (about 6% at Gemma 4 E2B widths)."""
    if facts.options.sliding_window is not SlidingWindow.TRIMMABLE:
        return None
    model = facts.model
    if not trimmable_caches(model):   # the mode changed no cache: it leaves the model as the default rewrite does
        return RulePlan("SDPAReleasePoints", ())
    skip = _blocked_sdpas(model)
    skip |= {n.get_friendly_name() for n in model.get_ordered_ops() if RT_NODE in n.get_rt_info()}
    nodes = tuple(Planned(name, "a sync point after it frees what crossed earlier sync points with its layer")
                  for name in release_candidates(model, frozenset(skip)))
    return RulePlan("SDPAReleasePoints", nodes)


def mask_expand_part(facts, _plan) -> RulePlan | None:
    """sliding_window="trimmable" only, last: the SDPA masks whose expand is left to the SDPAs
    (:func:`~ovpasses.features.sliding_window.mask_expand.expand_candidates`), on the model as the other rules left
    it; none where a blocked first prompt was given (there the plugin's memory groups took more at gpt-oss widths:
    the rule's module docstring)."""
    if facts.options.sliding_window is not SlidingWindow.TRIMMABLE:
        return None
    model = facts.model
    if _blocked_sdpas(model) or not trimmable_caches(model):   # no trimmable cache: as the default rewrite leaves it
        return RulePlan("SDPAMaskExpandElimination", ())
    nodes = tuple(Planned(name, "only SDPAs read the mask, and an SDPA broadcasts its mask itself")
                  for name in expand_candidates(model))
    return RulePlan("SDPAMaskExpandElimination", nodes)
