"""States that are not KV caches: what a hybrid model carries beside its attention caches.

A stateful IR keeps every recurrent quantity in a variable (ReadValue ... Assign). The KV-sharing analysis
(:mod:`ovpasses.analysis.kv_sharing`) calls a variable a KV cache when an SDPA reads it as K or V along
the cache's own path, or when it grows (its Assign stores the whole Concat(past, new)); every other variable is a :class:`StateInfo`, named by what its data meets first:

* ``scan``: it enters a Loop or TensorIterator (the model's own recurrence: Mamba-2's SSM scan, Gated
  DeltaNet's recurrent state);
* ``conv``: a convolution's window of past inputs ``[batch, channels, kernel - 1]`` (the short
  convolutions of Mamba, LFM2, Gated DeltaNet): its path ends in a (Group)Convolution, or in the Roll that
  shifts the window (transformers' Mamba and Zamba2 decode step);
* ``recurrent``: any other state that arithmetic reads (an SSM state updated step by step, without a Loop;
  Mamba-1's SSM state is rank 3 like a conv state, so the rank does not tell them apart);
* ``unread``: nothing but its Assign (or nothing) reads it.

No pass touches a state: it is reported, counted apart from the KV caches, and left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import openvino as ov

from ovpasses._strenum import StrEnum
from ovpasses.analysis.cache_chain import variable_id


# what ends a convolution window's path (measured on optimum-intel 2.2.0 exports of Qwen3.5, Qwen3-Next, LFM2,
# Granite 4 hybrid: GroupConvolution; Zamba2 and Mamba: Roll)
CONV_READERS = frozenset({"Convolution", "GroupConvolution", "Roll"})


class StateKind(StrEnum):
    """What a variable that no SDPA reads as K or V holds (the JSON carries the value)."""

    SCAN = "scan"
    CONV = "conv"
    RECURRENT = "recurrent"
    UNREAD = "unread"


@dataclass(frozen=True)
class StateInfo:
    """One variable that is not a KV cache."""

    variable_id: str
    kind: StateKind
    rank: int | None                  # the rank of the state's data (None: dynamic)
    read_values: tuple[str, ...]
    readers: tuple[str, ...] = ()     # the types of the operations that end its path (sorted)

    def to_dict(self) -> dict:
        return {"variable_id": self.variable_id, "kind": self.kind.value, "rank": self.rank,
                "read_values": list(self.read_values), "readers": list(self.readers)}

    @classmethod
    def from_dict(cls, data: dict) -> StateInfo:
        return cls(data["variable_id"], StateKind(data["kind"]), data.get("rank"), tuple(data.get("read_values", ())),
                   tuple(data.get("readers", ())))


def states_of(read_values: Iterable[ov.Node], caches: set[str], ends: dict[str, set[str]],
              scanned: set[str]) -> dict[str, StateInfo]:
    """Every variable of ``read_values`` that is not in ``caches`` (the KV caches), with its
    kind: ``ends`` maps a variable to the types of the operations that end its path, ``scanned`` holds the
    variables whose data enters a sub-graph operation."""
    found: dict[str, list[ov.Node]] = {}
    for rv in read_values:
        vid = variable_id(rv)
        if vid not in caches:
            found.setdefault(vid, []).append(rv)
    states = {}
    for vid, nodes in found.items():
        rank = nodes[0].get_output_partial_shape(0).rank
        rank = rank.get_length() if rank.is_static else None
        readers = tuple(sorted(ends.get(vid, ())))
        if vid in scanned:
            kind = StateKind.SCAN
        elif not readers:
            kind = StateKind.UNREAD
        elif set(readers) & CONV_READERS:
            kind = StateKind.CONV
        else:
            kind = StateKind.RECURRENT
        states[vid] = StateInfo(vid, kind, rank, tuple(n.get_friendly_name() for n in nodes), readers)
    return states
