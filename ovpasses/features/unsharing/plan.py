"""The plan of ``kv_sharing="unshare"``: which shared caches :class:`SharedKVCacheUnsharing` gives each borrower
a copy of, why the others stay shared (the reasons below, as the plan and the pass report them), what each
copy costs (:class:`UnsharedCache`) and the label each copy's variable id carries. Pure: reads the
KV-sharing analysis only.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.modes import KVSharing
from ovpasses.plan.decisions import Action
from ovpasses.rules import Planned, RulePlan


# why a cache is left shared, as the plan and the pass report it
SUBGRAPH_READER = "a sub-graph operation (not analysed) also reads this cache"
NO_OWNER = "no SDPA reads this cache on its Assign's path (no owner whose new K/V a copy could store)"
SEVERAL_READ_VALUES = "the variable has several ReadValues"
# Measured on 2026.0.0 and 2026.4.1 (tests/test_kv_cache_unsharing.py::test_cache_without_initialiser_stays_shared):
# the CPU plugin compiles a shared cache whose ReadValue has no initialiser (it leaves it unfused), and
# fails to compile the same cache once it is exclusive ("... contains less parent edges than 0"). A copy
# would be exclusive, so such a cache stays shared.
NO_INITIALISER = ("its ReadValue has no initialiser: the CPU plugin cannot compile an exclusive (fused) cache "
                  "without one, and each copy would be exclusive")
# Measured on 2026.0.0 and 2026.4.1 (tests/test_kv_cache_unsharing.py::test_cache_read_with_a_scalar_mask_stays_shared):
# the CPU plugin's fused stateful SDPA rejects a rank-0 attention mask at the first inference ("attention_mask
# do not match q and k"); ranks 2 to 4 run. While the cache is shared no reader is fused and the model runs.
SCALAR_MASK = ("an SDPA that reads it takes a scalar (rank-0) attention mask, which the CPU plugin's fused "
               "stateful SDPA rejects, and every reader would be fused once the cache is unshared")
NO_CACHE_CONCAT = "its path from the ReadValue holds no Concat(past, new) of the cache"
SEVERAL_CACHE_CONCATS = "its path from the ReadValue holds several Concat(past, new) of the cache"


@dataclass(frozen=True)
class UnsharingPlan:
    """Which shared caches to unshare and for which borrowers; why the others stay shared."""

    targets: dict[str, tuple[str, ...]]   # cache variable id -> borrower SDPAs (friendly names) to unshare
    refused: dict[str, str] = field(default_factory=dict)   # cache variable id -> why it stays shared


@dataclass(frozen=True)
class UnsharedCache:
    """One variable the pass added: a copy of ``source_variable`` that only ``borrower`` reads.

    ``bytes_per_token`` is what the copy adds per token of context at batch 1: the element size of the
    variable times the product of its dimensions other than the batch (dim 0, counted as 1) and the
    sequence (the Concat axis); None when one of them is dynamic. It counts the element type of the
    IR; a plugin may store the cache in another precision (the CPU plugin's KV_CACHE_PRECISION).
    """

    variable_id: str
    source_variable: str
    borrower: str
    ports: tuple[int, ...]          # the borrower's SDPA ports that now read it (1: K, 2: V)
    element_type: str
    shape: str                      # the variable's partial shape
    sequence_axis: int
    bytes_per_token: int | None


def plan_unsharing(analysis: KVSharingAnalysis) -> UnsharingPlan:
    """The shared caches of ``analysis`` that :class:`SharedKVCacheUnsharing` can give each borrower a
    copy of. Pure: reads the analysis only.

    * A cache that a sub-graph operation also reads stays shared: nothing is known about how the body
      reads it, so nothing can be said about a copy either.
    * A cache needs an owner (an SDPA reading it on the Assign's path: its Concat's new K/V is what
      every copy appends) and one ReadValue.
    """
    targets: dict[str, tuple[str, ...]] = {}
    refused: dict[str, str] = {}
    for vid, cache in analysis.caches.items():
        if not cache.shared:
            continue
        if cache.unanalysed_readers:
            refused[vid] = SUBGRAPH_READER
        elif cache.owner is None:
            refused[vid] = NO_OWNER
        elif len(cache.read_values) != 1:
            refused[vid] = SEVERAL_READ_VALUES
        elif cache.borrowers:
            targets[vid] = cache.borrowers
    return UnsharingPlan(targets, refused)


_LAYER = re.compile(r"(?:^|[./])(layers?\.\d+)(?=[./]|$)")


def borrower_labels(names: Iterable[str]) -> dict[str, str]:
    """A short, unique label per SDPA friendly name: its ``layers.N`` part where that is unique among
    ``names`` (``__module.model.layers.7.self_attn/...`` -> ``layers.7``), else the whole name."""
    names = list(names)
    found = {name: _LAYER.search(name) for name in names}
    short = {name: m.group(1) for name, m in found.items() if m}
    counts: dict[str, int] = {}
    for label in short.values():
        counts[label] = counts.get(label, 0) + 1
    return {name: short[name] if name in short and counts[short[name]] == 1 else name for name in names}


# --------------------------------------------------------- the feature's part of the plan of a run
# (each builder takes the run's facts, :class:`ovpasses.plan.targets.Facts`, and the plan made so far)
def unsharing_part(facts, _plan) -> RulePlan | None:
    if facts.options.kv_sharing is not KVSharing.UNSHARE:
        return None
    planned = plan_unsharing(facts.kv)
    nodes = tuple(Planned(borrower, f"borrows {vid}", Action.UNSHARED.value, (borrower,), marks=(vid,))
                  for vid, borrowers in planned.targets.items() for borrower in borrowers)
    return RulePlan("SharedKVCacheUnsharing", nodes, planned)
