"""A lint of KV sharing: borrowers that read a cache of another attention kind, and caches nobody writes.

The bug class it is for: a fine-tuning framework's Gemma 4 code keyed borrowers by layer index, so a
sliding-window borrower read the cache of a full-attention layer (and the other way round). The
graph stays valid where the head sizes agree, and decodes wrong. Findings, each naming both layers and
what differs (:class:`~ovpasses.analysis.attention_kinds.AttentionKind`):

* ``borrower_kind``: a borrower whose attention differs in kind from its cache owner's: mask (sliding
  or full, and the window), head size, V head size, causal;
* ``kv_split``: an SDPA that takes K and V from caches of different layers;
* ``mixed_kinds``: a cache that no SDPA owns, read by SDPAs of different kinds;
* ``no_assign``: a cache that no Assign writes (its state never advances).

Plain data from the analysis and the kinds; changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ovpasses.analysis.attention_kinds import AttentionKind
from ovpasses.analysis.kv_sharing import KVSharingAnalysis


@dataclass(frozen=True)
class Finding:
    """One lint finding: a code (``borrower_kind``, ``kv_split``, ``mixed_kinds``, ``no_assign``), a message
    naming the layers and what differs, the layers and the cache variables concerned."""

    code: str
    message: str
    layers: tuple[int, ...]
    variables: tuple[str, ...]

    def to_dict(self) -> dict:
        return {"code": self.code, "message": self.message, "layers": list(self.layers),
                "variables": list(self.variables)}


def lint_kv_sharing(analysis: KVSharingAnalysis, kinds: dict[str, AttentionKind]) -> list[Finding]:
    """The findings of the sharing lint for ``analysis``, with ``kinds`` from
    :func:`~ovpasses.analysis.attention_kinds.attention_kinds`; empty for a correct export."""
    findings: list[Finding] = []
    layer = analysis.layer
    seen_pairs: set[tuple[str, str]] = set()
    unowned_mixed: dict[tuple[str, ...], list[str]] = {}   # readers -> caches without an owner, of mixed kinds
    unwritten: dict[tuple[str, ...], list[str]] = {}       # readers -> caches no Assign writes
    for vid, cache in analysis.caches.items():
        if cache.owner is not None:
            owner = cache.owner
            for borrower in cache.borrowers:
                differs = kinds[borrower].differences(kinds[owner])
                if not differs or (borrower, owner) in seen_pairs:
                    continue
                seen_pairs.add((borrower, owner))
                variables = tuple(v for v in analysis.sdpa[borrower].kv_variables if analysis.caches[v].owner == owner)
                findings.append(Finding(
                    "borrower_kind",
                    f"layer {layer(borrower)} ({kinds[borrower].label}) reads the cache of layer {layer(owner)} "
                    f"({kinds[owner].label}): {'; '.join(differs)}",
                    (layer(borrower), layer(owner)), variables))
        elif _kinds_of(cache.sdpa, kinds) > 1:
            unowned_mixed.setdefault(cache.sdpa, []).append(vid)
        if cache.assign is None:
            unwritten.setdefault(cache.sdpa, []).append(vid)
    for readers, variables in unowned_mixed.items():
        groups: dict[str, list[int]] = {}
        for n in readers:
            groups.setdefault(kinds[n].label, []).append(layer(n))
        findings.append(Finding(
            "mixed_kinds",
            f"cache {', '.join(variables)} (no owner) is read by SDPAs of different kinds: "
            + "; ".join(f"{label} (layer{'s' if len(ls) > 1 else ''} {', '.join(map(str, ls))})"
                        for label, ls in groups.items()),
            tuple(layer(n) for n in readers), tuple(variables)))
    for readers, variables in unwritten.items():
        findings.append(Finding(
            "no_assign", f"cache {', '.join(variables)} is written by no Assign (read by "
                         f"{_layers_text(analysis, readers)}): its state never advances past what ReadValue "
                         "initialises",
            tuple(layer(n) for n in readers), tuple(variables)))
    for name, info in analysis.sdpa.items():
        sources = {}
        for vid in info.kv_variables:
            cache = analysis.caches[vid]
            source = (f"layer {layer(cache.owner)}" if cache.owner is not None
                      else f"an unowned cache first read by layer {layer(cache.sdpa[0])}")
            for readers, port in ((cache.key_readers, "K"), (cache.value_readers, "V")):
                if name in readers:
                    sources.setdefault(port, set()).add(source)
        if sources.get("K") and sources.get("V") and sources["K"] != sources["V"]:
            findings.append(Finding(
                "kv_split",
                f"layer {layer(name)} takes K from {', '.join(sorted(sources['K']))} and V from "
                f"{', '.join(sorted(sources['V']))}",
                (layer(name),), info.kv_variables))
    return findings


def _kinds_of(names, kinds: dict[str, AttentionKind]) -> int:
    return len({kinds[n] for n in names})


def _layers_text(analysis: KVSharingAnalysis, names) -> str:
    if not names:
        return "no SDPA"
    return ("layer " if len(names) == 1 else "layers ") + ", ".join(str(analysis.layer(n)) for n in names)
