"""The sliding-window feature's part of the plan: per sliding-window mask, what the pipeline does on a runtime
profile (openvino_genai's paged path). Pure over plain data: :func:`mask_plan` reads the masks
(:mod:`ovpasses.features.sliding_window.masks`) and the profile.

A decision is an enum value (:class:`MaskAction`: the JSON reports carry its value); the sentences a person
reads are rendered at the edge (:mod:`ovpasses.app.render.text`).
"""

from __future__ import annotations

from ovpasses._strenum import StrEnum

from ovpasses.features.sliding_window.masks import SlidingWindowMask
from ovpasses.plan.profiles import RuntimeProfile


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
