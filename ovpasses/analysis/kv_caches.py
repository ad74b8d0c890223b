"""The result of the KV-sharing analysis (:func:`ovpasses.analysis.kv_sharing.analyze_kv_sharing`): per cache
variable who reads it (:class:`CacheInfo`), per SDPA what it reads (:class:`SDPAInfo`), every other state
(:class:`~ovpasses.analysis.states.StateInfo`), and the runtime-info keys the detection writes. Plain data."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Literal

import openvino as ov

from ovpasses._ov import KEY_PORT, VALUE_PORT
from ovpasses.analysis.states import StateInfo

if TYPE_CHECKING:   # imported where a graph is made: networkx costs every ovpass command ~0.13 s of start-up
    import networkx as nx

Status = Literal["exclusive", "shared", "stateless"]

# runtime-info keys written on each SDPA by SharedKVCacheDetection
RT_STATUS = "ovpasses_kv_status"          # exclusive | shared | stateless
RT_VARIABLES = "ovpasses_kv_variables"    # comma-separated variable ids the SDPA reads as K or V
RT_OWNER_OF = "ovpasses_kv_owner_of"      # comma-separated variable ids whose owner the SDPA is


@dataclass(frozen=True)
class CacheInfo:
    """One cache variable and who reads it."""

    variable_id: str
    sdpa: tuple[str, ...]              # reading SDPAs (friendly names), in topological order
    owner: str | None                  # None when no Assign writes the variable or no reader reads its path
    borrowers: tuple[str, ...]
    key_readers: tuple[str, ...]       # SDPAs that read it at port 1
    value_readers: tuple[str, ...]     # SDPAs that read it at port 2
    shape_consumers: tuple[str, ...]   # ShapeOf nodes that read its data
    assign: str | None
    read_values: tuple[str, ...]
    # ShapeOf nodes that read the node feeding the Assign (the Concat), the consumer the CPU plugin's
    # stateful fusion of 2025.2 - 2026.1 cannot live with
    concat_shape_consumers: tuple[str, ...] = ()
    # readers that reach the cache through a path that avoids the node feeding the Assign (their own
    # Gather / Concat on the ReadValue): the plugin does not see them when it fuses the owner
    off_path_readers: tuple[str, ...] = ()
    # sub-graph operations (Loop, TensorIterator, If; friendly names) that the cache's data enters or
    # whose bodies read or write its variable: their bodies are not analysed, so each may read the
    # cache in any way and counts as one more reader
    unanalysed_readers: tuple[str, ...] = ()
    # its Assign stores a window of the Concat (SlidingWindowKVCacheBounding's Slice), not the whole of it
    bounded: bool = False

    @property
    def shared(self) -> bool:
        """Read by more than one SDPA, or by anything the analysis cannot see into."""
        return len(self.sdpa) > 1 or bool(self.unanalysed_readers)


@dataclass(frozen=True)
class SDPAInfo:
    """One SDPA node and the caches it reads."""

    name: str
    kv_variables: tuple[str, ...]
    status: Status
    owner_of: tuple[str, ...]
    order: int                         # topological index in the model
    # the decoder layer: the number after "layers." in the friendly name where every SDPA's name has a
    # distinct one (exporters name them "__module.model.layers.4.self_attn/..."), else the SDPA's
    # position among the SDPAs in topological order (see layer_indices)
    layer: int = -1


@dataclass(repr=False)
class KVSharingAnalysis:
    """The result of :func:`analyze_kv_sharing`: plain data, one source of truth for passes and reports."""

    caches: dict[str, CacheInfo]
    sdpa: dict[str, SDPAInfo]
    unhandled: list[str] = field(default_factory=list)
    # every other variable: a state no SDPA reads as K or V (conv, SSM, recurrent), by variable id
    states: dict[str, StateInfo] = field(default_factory=dict)

    def __repr__(self) -> str:
        counts = self.status_counts()
        return (f"KVSharingAnalysis({len(self.caches)} caches ({self.shared_cache_count} "
                f"shared), {len(self.sdpa)} SDPA: exclusive={counts['exclusive']} shared={counts['shared']} "
                f"stateless={counts['stateless']}, unhandled={len(self.unhandled)})")

    def layer(self, name: str) -> int:
        """The decoder-layer index of the SDPA ``name`` (:attr:`SDPAInfo.layer`)."""
        return self.sdpa[name].layer

    def cache_label(self, vid: str) -> str:
        """A short name for cache ``vid``: ``layer 2's K cache`` (the owner's layer; K or V as its readers
        read it), or the variable id where no SDPA owns it."""
        cache = self.caches[vid]
        if cache.owner is None:
            return f"cache {vid}"
        kind = "K" if cache.key_readers and not cache.value_readers else \
            "V" if cache.value_readers and not cache.key_readers else "K/V"
        return f"layer {self.layer(cache.owner)}'s {kind} cache"

    @property
    def shared_cache_count(self) -> int:
        """How many caches are shared (read by several SDPAs or by an unanalysed reader)."""
        return sum(c.shared for c in self.caches.values())

    @property
    def shared_sdpa(self) -> list[str]:
        return [n for n, s in self.sdpa.items() if s.status == "shared"]

    @property
    def exclusive_sdpa(self) -> list[str]:
        return [n for n, s in self.sdpa.items() if s.status == "exclusive"]

    def sdpa_nodes(self, ordered_ops: list[ov.Node]) -> dict[str, ov.Node]:
        """Friendly name -> SDPA node, from the ``get_ordered_ops()`` list the analysis was made on."""
        return {name: ordered_ops[info.order] for name, info in self.sdpa.items()}

    def status_counts(self) -> dict[str, int]:
        counts = {"exclusive": 0, "shared": 0, "stateless": 0}
        for info in self.sdpa.values():
            counts[info.status] += 1
        return counts

    def graph(self) -> nx.DiGraph:
        """Variables -> SDPAs: nodes ``("variable", id)`` and ``("sdpa", name)``; edges carry ``role``
        (``owner`` or ``borrower``) and ``ports`` (the SDPA ports, 1 for K and 2 for V)."""
        import networkx as nx
        g = nx.DiGraph()
        for name, info in self.sdpa.items():
            g.add_node(("sdpa", name), status=info.status, order=info.order)
        for vid, cache in self.caches.items():
            g.add_node(("variable", vid), shared=cache.shared, shape_consumers=len(cache.shape_consumers),
                       unanalysed_readers=cache.unanalysed_readers)
            for name in cache.sdpa:
                ports = tuple(p for p, readers in ((KEY_PORT, cache.key_readers), (VALUE_PORT, cache.value_readers))
                              if name in readers)
                g.add_edge(("variable", vid), ("sdpa", name),
                           role="owner" if name == cache.owner else "borrower", ports=ports)
        return g

    @classmethod
    def from_dict(cls, data: dict) -> KVSharingAnalysis:
        """The analysis back from :meth:`to_dict` (or an ``ovpass.inspect/1`` report); fields it does not
        know are ignored."""
        def build(kind, entry):
            names = {f.name for f in fields(kind)}
            return kind(**{k: tuple(v) if isinstance(v, list) else v for k, v in entry.items() if k in names})

        caches = {v["variable_id"]: build(CacheInfo, v) for v in data["variables"]}
        sdpa = {s["name"]: build(SDPAInfo, s) for s in data["sdpa"]}
        return cls(caches=caches, sdpa=sdpa, unhandled=list(data.get("unhandled", ())),
                   states={s["variable_id"]: StateInfo.from_dict(s) for s in data.get("states", ())})

    def to_dict(self) -> dict:
        return {
            "variables": [dict(asdict(c), shared=c.shared) for c in self.caches.values()],
            "sdpa": [asdict(s) for s in sorted(self.sdpa.values(), key=lambda s: s.order)],
            "unhandled": list(self.unhandled),
            "states": [s.to_dict() for s in self.states.values()],
        }
