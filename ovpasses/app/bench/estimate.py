"""What a form of a model is estimated to hold at a context, before ``ovpass bench`` runs it: the weights, the KV
caches as the CPU plugin holds them, and the attention scores of the prompt. A form whose estimate exceeds the
memory available is skipped with its estimate, instead of failing to allocate or being killed for memory while
the other forms are measured.

The scores are what grows with the square of the prompt. Per attention layer of a form (``summary.fusion()``,
from the same pipeline run that tells bench whether the form applies; the query heads from the model's SDPAs):

* a layer the plugin leaves out of its stateful kernel (a bounded cache; a cache read by several SDPAs) runs
  decomposed attention and materialises its scores whole, ``query heads x rows x keys``, where ``rows`` is the
  prompt (whole) or the chunk, and ``keys`` the positions before it that its cache keeps (a bounded cache at
  most its ``keep``), plus the rows;
* a layer in the fused kernel holds no such matrix for a first prompt fed whole (the tiled kernel), but every
  chunk after the first runs its single-token kernel, which holds one f32 buffer of ``query heads x rows x
  keys`` for the widest layer (benchmarks/records/2026-11-27-prefill-score-budget.md).

Measured as an excess of context memory over the unmodified model's, the unfused layers' scores come to 3.3-7.1
f32 score matrices of a whole prompt held at once, not one per layer: the plugin's dynamic memory puts tensors
into groups and holds each group's largest (benchmarks/records/2026-11-26-whole-prompt-mask-memory.md). So the
estimate counts :data:`HELD_SCORE_MATRICES` of the largest, at most one per unfused layer. It leaves out what the
process holds whatever the form (the runtime's libraries, the compilation, a first inference's 380-700 MiB at the
width models): a guide to what a form adds, not a bound of its peak.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

SCORE_BYTES = 4   # f32
# f32 whole-prompt score matrices the CPU plugin of openvino 2026.4.1 held at once, from the excess of context
# memory over the unmodified model at 4k-8k fed whole: gpt-oss-20b widths bounded 3.9 (4 unfused layers), Gemma 3 4B
# widths bounded 7.1 (10 layers; benchmarks/records/2026-12-06-bench-16k.md and -bench-after-fixes.md), Gemma 4 E2B
# widths unmodified 4.1 at 4k and 3.3 at 8k (22 layers; 2026-11-27-amx-gaps.md). 6: the estimate is 0.84x the
# measured excess at Gemma 3 widths, 1.0x at gpt-oss, 1.5-1.8x at E2B widths: a guide to refuse what is far out of reach
# (Gemma 3 widths bounded at 16k fed whole: 32 GiB of scores), not a bound.
HELD_SCORE_MATRICES = 6


@dataclass(frozen=True)
class Attention:
    """One attention layer of a form, as what its prompt holds depends on it."""

    name: str
    query_heads: int | None     # None: a dynamic dimension
    fused: bool                 # in the plugin's stateful kernel (summary.fusion())
    keep: int | None = None     # positions its bounded cache keeps (None: every position)

    def keys(self, context: int, rows: int) -> int:
        """The keys the last ``rows`` of a ``context``-token prompt attend to."""
        before = context - rows
        return rows + (before if self.keep is None else min(before, self.keep))


@dataclass(frozen=True)
class Estimate:
    """What a form is estimated to hold at a context, in bytes."""

    weights: int
    kv: int
    scores: int

    @property
    def mib(self) -> float:
        return (self.weights + self.kv + self.scores) / 2**20

    def to_dict(self) -> dict:
        return {"weights_mib": round(self.weights / 2**20, 1), "kv_mib": round(self.kv / 2**20, 1),
                "scores_mib": round(self.scores / 2**20, 1)}


def query_heads(model) -> dict[str, int | None]:
    """Per SDPA of ``model`` (friendly name), its query heads: the dimensions of Q between the batch and the
    sequence (``[B, H, S, D]``, or ``[B, Hkv, G, S, D]``); None where one is dynamic."""
    heads: dict[str, int | None] = {}
    for node in model.get_ordered_ops():
        if node.get_type_name() != "ScaledDotProductAttention":
            continue
        shape = node.input_value(0).get_partial_shape()
        dims = [shape[i] for i in range(1, shape.rank.get_length() - 2)] if shape.rank.is_static else [None]
        count = 1
        for dim in dims:
            if dim is None or dim.is_dynamic:
                count = None
                break
            count *= dim.get_length()
        heads[node.get_friendly_name()] = count
    return heads


def attention(summary, heads: dict[str, int | None], unmodified: bool = False) -> tuple[Attention, ...]:
    """The attention layers of the form ``summary`` describes (``unmodified``: of the model before it), with
    ``heads`` read from the model before the rewrite."""
    from ovpasses.modes import SlidingWindow

    keep: dict[str, int] = {}
    caches = summary.sliding_window_caches
    if not unmodified and summary.sliding_window is SlidingWindow.BOUNDED and caches is not None:
        for bounded in caches.bounded.values():
            for reader in bounded.readers:
                keep[reader] = max(keep.get(reader, 0), bounded.keep)
    return tuple(Attention(name, heads.get(name), verdict.expected, keep.get(name))
                 for name, verdict in summary.fusion(unmodified=unmodified).items())


def scores_bytes(layers: Iterable[Attention], context: int, chunk: int = 0) -> int | None:
    """The attention scores a ``context``-token prompt fed whole (``chunk`` 0) or in chunks holds at its largest
    (the last chunk): :data:`HELD_SCORE_MATRICES` of the unfused layers' whole scores, and, fed in chunks, the
    fused kernel's buffer for the widest fused layer. None: a layer's query heads are unknown."""
    layers = tuple(layers)
    if any(layer.query_heads is None for layer in layers):
        return None
    rows = min(chunk, context) if chunk else context
    unfused = sorted((layer.query_heads * rows * layer.keys(context, rows) for layer in layers if not layer.fused),
                     reverse=True)
    held = sum(unfused[:HELD_SCORE_MATRICES])
    buffer = max((layer.query_heads for layer in layers if layer.fused), default=0) * rows * context \
        if rows < context else 0
    return (held + buffer) * SCORE_BYTES


def estimate(weights: int, kv: int | None, layers: Iterable[Attention], context: int, chunk: int = 0) \
        -> Estimate | None:
    """The form's estimate at ``context`` (None: its KV caches or its query heads are not known)."""
    scores = scores_bytes(layers, context, chunk)
    return None if kv is None or scores is None else Estimate(weights, kv, scores)


__all__ = ["HELD_SCORE_MATRICES", "Attention", "Estimate", "attention", "estimate", "query_heads", "scores_bytes"]
