"""What no rewrite mends on openvino_genai's paged path (CPU PagedAttention) for a model on a runtime, or what
``paged_heads="pad"`` does not do there, as data: :class:`PagedWarning` (a risk, the option that mends it, the
release that fixes it) and :func:`paged_warnings`. Pure. The sentences are the application's
(:func:`ovpasses.app.render.text.paged_warning_text`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.features.paged_heads.analysis import PaddingRefusal
from ovpasses.features.paged_heads.heads import AttentionHeads, head_layouts
from ovpasses.modes import OptionChoice, PagedHeads
from ovpasses.plan.profiles import RuntimeProfile
from ovpasses.plan.runtimes import (
    PAGED_CPU_IGNORES_WINDOW,
    PAGED_CPU_NEEDS_ONE_HEAD_SIZE,
    PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT,
    PAGED_IGNORES_CHUNK,
    Version,
    version_string,
)


class PagedRisk(str, enum.Enum):
    """What openvino_genai's paged path (CPU PagedAttention) does wrong with a model on a runtime, or what
    ``paged_heads=pad`` does not do there (its value is what the JSON could carry; the sentence is rendered at
    the edge, :func:`ovpasses.app.render.text.paged_warning_text`)."""

    MIXED_HEAD_SIZES = "mixed_head_sizes"      # wrong tokens: the layers' head sizes differ; padding mends it
    MIXED_QUERY_HEADS = "mixed_query_heads"    # wrong tokens: the layers' query-head counts differ; nothing does
    IGNORES_WINDOW = "ignores_window"          # wrong tokens once a sequence outgrows the window; nothing mends it
    IGNORES_CHUNK = "ignores_chunk"            # wrong tokens once a sequence outgrows a chunk; nothing mends it
    PADDING_NOT_NEEDED = "padding_not_needed"  # paged_heads=pad where the runtime does not need it: only a cost
    PADDING_REFUSED = "padding_refused"        # paged_heads=pad needed, and the model refused it


# what mends head sizes that differ on the paged path, short of a newer runtime or the stateful path
PAD_HEADS = OptionChoice("paged_heads", PagedHeads.PAD)


@dataclass(frozen=True)
class PagedWarning:
    """One thing no rewrite mends on openvino_genai's paged path (or that the padding asked for does not do),
    as data: the risk, the runtime, what of the model shows it, the option that mends it (``option``) or
    that it is about, and the first release that mends it (None: none measured)."""

    risk: PagedRisk
    runtime: Version
    layouts: tuple[tuple[str, int], ...] = ()   # (query heads x head size, layers), as the model has them
    windows: tuple[int, ...] = ()               # the sliding layers' windows (IGNORES_CHUNK: the chunks)
    option: OptionChoice | None = None
    fixed_in: Version | None = None
    bytes_per_token: tuple[int | None, int | None] | None = None   # KV bytes per token before, after padding
    refusal: PaddingRefusal | None = None       # why the padding refused the model

    def to_dict(self) -> dict:
        """Plain data (the library's reports carry it; the application renders the sentence)."""
        return {"risk": self.risk.value, "runtime": version_string(self.runtime), "layouts": [list(l) for l in self.layouts],
                "windows": list(self.windows),
                "option": None if self.option is None else {"option": self.option.option,
                                                            "value": self.option.value.value},
                "fixed_in": None if self.fixed_in is None else version_string(self.fixed_in),
                "bytes_per_token": None if self.bytes_per_token is None else list(self.bytes_per_token),
                "refusal": None if self.refusal is None else self.refusal.to_dict()}


def paged_warnings(profile: RuntimeProfile, analysis: KVSharingAnalysis, heads: dict[str, AttentionHeads],
                   windows: tuple[int, ...], chunks: tuple[int, ...] = ()) -> list[PagedWarning]:
    """What no rewrite mends on openvino_genai's paged path on ``profile``, for this model. Pure.

    ``windows`` are the windows of the model's sliding-window masks, as plain data (the sliding-window
    feature finds the masks; ``ovpasses.plan.targets`` passes their windows: no feature imports another);
    ``chunks`` the chunks of its chunked-attention layers (:mod:`ovpasses.analysis.attention_kinds`).

    The SDPAs that read a KV cache are the ones the paged path turns into PagedAttention. When the
    runtime's CPU PagedAttention needs one head size (or one query-head count) and they have several,
    it computes garbage whatever the rewrite does, short of padding every cache to the widest head
    (which would grow the stateful model's state as well); when it ignores sliding windows, a model
    with one is wrong once a sequence outgrows the window. Each warning names the ways out as data.
    """
    paged = {n: h for n, h in heads.items() if n in analysis.sdpa and analysis.sdpa[n].status != "stateless" and h.known}
    layouts = tuple((str(layout), count) for layout, count in sorted(head_layouts(paged).items()))
    out = []
    if profile.paged_cpu_one_head_size and len({(h.head_size, h.v_head_size) for h in paged.values()}) > 1:
        out.append(PagedWarning(PagedRisk.MIXED_HEAD_SIZES, profile.version, layouts=layouts, option=PAD_HEADS,
                                fixed_in=PAGED_CPU_NEEDS_ONE_HEAD_SIZE[1]))
    if profile.paged_cpu_one_query_head_count and len({h.q_heads for h in paged.values()}) > 1:
        out.append(PagedWarning(PagedRisk.MIXED_QUERY_HEADS, profile.version, layouts=layouts,
                                fixed_in=PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT[1]))
    if profile.paged_cpu_ignores_window and windows:
        out.append(PagedWarning(PagedRisk.IGNORES_WINDOW, profile.version,
                                windows=tuple(sorted(set(windows))), fixed_in=PAGED_CPU_IGNORES_WINDOW[1]))
    if profile.paged_ignores_chunk and chunks:
        out.append(PagedWarning(PagedRisk.IGNORES_CHUNK, profile.version, windows=tuple(sorted(set(chunks))),
                                fixed_in=PAGED_IGNORES_CHUNK[1]))
    return out
