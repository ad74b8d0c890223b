"""What kind of attention each SDPA computes: sliding window or full, and its head sizes. Changes nothing.

Gemma 3n and Gemma 4 alternate sliding-window and full attention layers, with different head sizes; a
layer that borrows a KV cache must borrow one of its own kind. The kind is read from the SDPA's inputs:

* the mask (port 3): ``sliding`` when the graph that computes it holds the sliding-window comparison
  that exporters write for ``kv_idx > q_idx - window`` (``Greater(kv, Add(q, Constant(-window)))``, or
  ``Subtract(q, Constant(window))``, or the same as ``Less`` with the operands swapped); ``chunked`` when
  it holds the chunked-attention comparison ``kv_idx // chunk == q_idx // chunk`` (Llama 4's
  ``attention_chunk_size``: ``Equal(Floor(Divide(kv, C)), Floor(Divide(q, C)))``, or Divide with Python
  division alone); ``full`` for any other mask, ``none`` when there is no mask or it is a constant zero;
* the head size: the static last dimension of Q (else K), and that of V;
* the ``causal`` attribute.

The mask graph is walked backwards (data edges, iteratively) once per distinct mask output, so the
layers that share a mask cost one walk.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov

from ovpasses._ov import MASK_PORT

COMPARISONS = {"Greater": 1, "Less": 0}   # comparison -> the input that holds "q - window"
MAX_MASK_NODES = 5000                     # a mask graph larger than this is not searched further


@dataclass(frozen=True)
class AttentionKind:
    """The kind of attention one SDPA computes."""

    mask: str                       # "sliding", "chunked", "full" or "none"
    window: int | None              # the sliding window, for "sliding"; the chunk, for "chunked"
    head_size: int | None           # static last dimension of Q (else K); None when dynamic
    v_head_size: int | None         # static last dimension of V
    causal: bool

    @property
    def label(self) -> str:
        """A short label: ``sliding 16``, ``chunked 8192``, ``full``, ``no mask``; ``causal`` added when set."""
        text = f"{self.mask} {self.window}" if self.mask in ("sliding", "chunked") else \
            "full" if self.mask == "full" else "no mask"
        return text + (" causal" if self.causal else "")

    def differences(self, other: AttentionKind) -> list[str]:
        """What differs from ``other``, one phrase each (this first): empty when they are of one kind."""
        out = []
        if (self.mask, self.window) != (other.mask, other.window):
            out.append(f"mask {_mask_text(self)} vs {_mask_text(other)}")
        if None not in (self.head_size, other.head_size) and self.head_size != other.head_size:
            out.append(f"head size {self.head_size} vs {other.head_size}")
        if None not in (self.v_head_size, other.v_head_size) and self.v_head_size != other.v_head_size:
            out.append(f"V head size {self.v_head_size} vs {other.v_head_size}")
        if self.causal != other.causal:
            out.append(f"causal {self.causal} vs {other.causal}")
        return out

    def to_dict(self) -> dict:
        return {"label": self.label, "mask": self.mask, "window": self.window, "head_size": self.head_size,
                "v_head_size": self.v_head_size, "causal": self.causal}


def _mask_text(kind: AttentionKind) -> str:
    return f"sliding (window {kind.window})" if kind.mask == "sliding" else \
        f"chunked (chunk {kind.window})" if kind.mask == "chunked" else kind.mask


def attention_kinds(sdpa_nodes: dict[str, ov.Node]) -> dict[str, AttentionKind]:
    """The :class:`AttentionKind` of each SDPA of ``sdpa_nodes`` (friendly name -> node, as
    :meth:`ovpasses.analysis.KVSharingAnalysis.sdpa_nodes` gives them)."""
    windows: dict[tuple[ov.Node, int], tuple[str, int | None]] = {}
    kinds = {}
    for name, node in sdpa_nodes.items():
        mask: tuple[str, int | None] = ("none", None)
        if node.get_input_size() > MASK_PORT:
            source = node.input_value(MASK_PORT)
            key = (source.get_node(), source.get_index())
            if key not in windows:
                windows[key] = _mask_kind(source)
            mask = windows[key]
        q, k, v = (node.input_value(port).get_partial_shape() for port in range(3))
        kinds[name] = AttentionKind(mask[0], mask[1], _last_dim(q) or _last_dim(k), _last_dim(v),
                                    bool(node.get_attributes().get("causal", False)))
    return kinds


def _last_dim(shape: ov.PartialShape) -> int | None:
    if shape.rank.is_dynamic or shape.rank.get_length() == 0 or shape[shape.rank.get_length() - 1].is_dynamic:
        return None
    return shape[shape.rank.get_length() - 1].get_length()


def _mask_kind(mask: ov.Output) -> tuple[str, int | None]:
    node = mask.get_node()
    if node.get_type_name() == "Constant" and not np.any(node.get_data()):
        return "none", None
    seen = {node}
    pending = [node]
    while pending and len(seen) < MAX_MASK_NODES:
        current = pending.pop()
        window = _window_of(current)
        if window is not None:
            return "sliding", window
        chunk = _chunk_of(current)
        if chunk is not None:
            return "chunked", chunk
        for value in current.input_values():
            source = value.get_node()
            if source not in seen and source.get_type_name() not in ("Constant", "Parameter", "ReadValue"):
                seen.add(source)
                pending.append(source)
    return "full", None


def _window_of(node: ov.Node) -> int | None:
    """The window of a sliding-window comparison ``kv > q - window`` (or ``q - window < kv``), or of its
    negation as a distance, ``q - kv >= window`` (transformers 4's masks: Gemma 3's image-text-to-text
    export), else None."""
    if node.get_type_name() == "GreaterEqual" and node.input_value(0).get_node().get_type_name() == "Subtract":
        constant = node.input_value(1).get_node()
        values = np.asarray(constant.get_data()).ravel() if constant.get_type_name() == "Constant" else None
        if values is not None and values.size == 1 and constant.get_output_element_type(0).is_integral() \
                and int(values[0]) > 0:
            return int(values[0])
    port = COMPARISONS.get(node.get_type_name())
    if port is None:
        return None
    shifted = node.input_value(port).get_node()
    for index in range(shifted.get_input_size() if shifted.get_type_name() in ("Add", "Subtract") else 0):
        constant = shifted.input_value(index).get_node()
        if constant.get_type_name() != "Constant" or not constant.get_output_element_type(0).is_integral():
            continue
        values = np.asarray(constant.get_data()).ravel()
        if values.size != 1:
            continue
        offset = int(values[0]) if shifted.get_type_name() == "Add" else -int(values[0])
        if offset < 0 and (shifted.get_type_name() == "Add" or index == 1):
            return -offset
    return None


def _chunk_of(node: ov.Node) -> int | None:
    """The chunk ``C`` of a chunked-attention comparison ``Equal(kv // C, q // C)``: each side a
    ``Floor(Divide(x, C))`` or a Divide with Python division (``m_pythondiv``, integer floor division), C one
    positive integral constant, the same on both sides; else None."""
    if node.get_type_name() != "Equal":
        return None
    chunks = set()
    for value in node.input_values():
        divide = value.get_node()
        if divide.get_type_name() == "Floor":
            divide = divide.input_value(0).get_node()
        elif not divide.get_attributes().get("m_pythondiv", False) or not divide.get_output_element_type(0).is_integral():
            return None
        if divide.get_type_name() != "Divide" or divide.input_value(1).get_node().get_type_name() != "Constant":
            return None
        values = np.asarray(divide.input_value(1).get_node().get_data()).ravel()
        if values.size != 1 or values[0] <= 0 or values[0] != int(values[0]):
            return None
        chunks.add(int(values[0]))
    return chunks.pop() if len(chunks) == 1 else None
