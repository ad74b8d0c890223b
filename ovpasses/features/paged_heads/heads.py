"""The head layout of each ScaledDotProductAttention node: query heads and head sizes. Changes nothing.

Read from the static dimensions of the SDPA's inputs, which the specification lays out as::

    Q [..., H, L, E]    K [..., H or Hkv, S, E]    V [..., H or Hkv, S, Ev]

``H`` is dimension -3 of Q (``None`` when Q has rank 3 or that dimension is dynamic), ``E`` the last
dimension of K and ``Ev`` the last of V (``None`` when dynamic). This is what openvino_genai's
PagedAttention conversion turns into each layer's query width (``H * E``) and cache head sizes; the
CPU PagedAttention of some releases mixes up layers whose ``(H, E, Ev)`` differ (see
:func:`ovpasses.features.paged_heads.paged_path.paged_warnings`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import openvino as ov


@dataclass(frozen=True, order=True)
class AttentionHeads:
    """Query heads and head sizes of one SDPA; ``None`` where the dimension is not static."""

    q_heads: int | None
    head_size: int | None
    v_head_size: int | None

    @property
    def known(self) -> bool:
        return None not in (self.q_heads, self.head_size, self.v_head_size)

    def __str__(self) -> str:
        text = f"{self.q_heads}x{self.head_size}"
        return text if self.v_head_size == self.head_size else f"{text} (V {self.v_head_size})"


def _dim(output: ov.Output, index: int, min_rank: int = 1) -> int | None:
    """Dimension ``index`` of ``output`` when its rank is static and at least ``min_rank`` and the
    dimension is static; else None."""
    shape = output.get_partial_shape()
    if shape.rank.is_dynamic or shape.rank.get_length() < min_rank:
        return None
    dim = shape[index]
    return dim.get_length() if dim.is_static else None


def attention_heads(sdpa_nodes: dict[str, ov.Node]) -> dict[str, AttentionHeads]:
    """Friendly name -> :class:`AttentionHeads` of each SDPA in ``sdpa_nodes``."""
    # a rank-3 Q is [B, L, E]: it has no heads dimension
    return {name: AttentionHeads(_dim(node.input_value(0), -3, min_rank=4),
                                 _dim(node.input_value(1), -1), _dim(node.input_value(2), -1))
            for name, node in sdpa_nodes.items()}


def head_layouts(heads: dict[str, AttentionHeads]) -> Counter[AttentionHeads]:
    """How many SDPAs have each layout."""
    return Counter(heads.values())
