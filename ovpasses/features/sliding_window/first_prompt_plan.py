"""The plan of :class:`~ovpasses.features.sliding_window.first_prompt.BlockedFirstPrompt`: which trimmable sliding
SDPAs take a blocked first prompt, in how many runs of blocks, and why the others do not (all or none). Reads the
model; changes nothing. The form, its graph and its measurements: :mod:`~ovpasses.features.sliding_window.first_prompt`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import openvino as ov

from ovpasses._ov import MASK_PORT
from ovpasses.analysis.cache_chain import find_cache_chains
from ovpasses.features.sliding_window.cache_nodes import CacheNodes, CacheRefusal, Refusal, cache_nodes
from ovpasses.features.sliding_window.caches import trimmable_caches
from ovpasses.features.sliding_window.mask_columns import slice_keeps_all, walkable

RT_BLOCKED = "ovpasses_blocked_first_prompt"   # on the model: the SDPAs made so (comma-separated friendly names)
RT_NODE = "ovpasses_blocked_first_prompt"       # on each node the pass makes: the SDPA it serves
BLOCK_ROWS = 256     # query rows per block, at most (at most W): a block's scores are rows x (keep + rows)
# The blocks run in a layer's SDPAs one after another, as many runs as keep one run's scores (query heads x
# rows x keys, f32, materialized: the CPU plugin decomposes an SDPA outside its fused kernel) under
# RUN_SCORES at a 16k prompt: fewer runs hold more memory per run (the plugin's dynamic memory is not shared
# between them: record 2026-11-27-blocked-first-prompt.md), more runs are more nodes (a run cost the compiled
# model about 7 MiB over Gemma 3 4B widths' ten sliding layers, and its nodes run on empty tensors every decode
# step). A layer that would need more than MAX_RUNS is refused: at W = 4,096 and 32 query heads (Mistral 7B
# widths) the prototype held 2-4x the unmodified model's context memory, and at Gemma 2 2B widths (W = 4,096, 8
# query heads: 28 runs) the form held 1.19x / 1.12x the unmodified model's peak RSS at 4k / 8k fed whole and
# decoded 1.2x slower (a run's nodes cost a decode step 20-40 us; record
# 2026-11-27-blocked-wide-windows.md). The layers taken so far need 8 (Gemma 3 4B) and 13 (gpt-oss-20b).
RUN_SCORES = 80 << 20
REFERENCE_PROMPT = 16384
MAX_RUNS = 16


@dataclass(frozen=True)
class BlockedLayer:
    """One SDPA the rule gives a blocked first prompt: its friendly name, the variables of its K and V caches and
    the positions a trim keeps of them."""

    sdpa: str
    k_cache: str
    v_cache: str
    keep: int
    runs: int


@dataclass(frozen=True)
class BlockedPlan:
    """The rule's frozen plan: the layers it changes, and why it leaves the others (SDPA name -> reason)."""

    layers: tuple[BlockedLayer, ...] = ()
    refused: dict[str, str] = field(default_factory=dict)
    block_rows: int = BLOCK_ROWS
    slice_masks: bool = False   # the runtime's paged converter reads the window only in Select -> Slice -> SDPA


def plan_blocked(model: ov.Model) -> BlockedPlan:
    """Which SDPAs of ``model`` (made trimmable: :func:`trimmable_caches`) take a blocked first prompt, and why the
    others that read a trimmable cache do not. All or none: every trimmable cache is born trimmed or none is (the
    trimmable form fails an inference whose sliding caches of one mask hold different lengths, and a trim cuts
    them together). Reads the model; changes nothing."""
    if model.has_rt_info(RT_BLOCKED):
        return BlockedPlan()
    caches = trimmable_caches(model)
    if not caches:
        return BlockedPlan()
    chains = find_cache_chains(model, set(caches), "BlockedFirstPrompt.plan")
    readers: dict[str, tuple[ov.Node, dict[int, str]]] = {}
    found: dict[str, CacheNodes] = {}
    blocker = ""
    for vid in sorted(caches):
        nodes = cache_nodes(*chains[vid]) if vid in chains else CacheRefusal(Refusal.NO_CACHE_CONCAT)
        if isinstance(nodes, CacheRefusal):
            blocker = blocker or f"cache {vid}: {nodes.message}"
            continue
        found[vid] = nodes
        if len(nodes.readers) != 1:
            blocker = blocker or f"cache {vid} is read by {len(nodes.readers)} SDPAs (KV-shared layers)"
        for sdpa, port in nodes.readers:
            readers.setdefault(sdpa.get_friendly_name(), (sdpa, {}))[1][port] = vid
    layers, refused = [], {}
    for name, (sdpa, ports) in readers.items():
        reason = _refusal(sdpa, ports, caches, found)
        if reason:
            refused[name] = reason
            blocker = blocker or f"SDPA '{name}': {reason}"
        else:
            layers.append(BlockedLayer(name, ports[1], ports[2], caches[ports[1]],
                                       runs_for(sdpa.get_input_partial_shape(0)[1].get_length(), caches[ports[1]])))
    if blocker:   # none: the caches a trim cuts together are born trimmed together
        refused.update({layer.sdpa: f"another trimmable cache cannot take it ({blocker}), and all are born "
                                    "trimmed or none" for layer in layers})
        layers = []
    return BlockedPlan(tuple(layers), refused)


def runs_for(heads: int, keep: int, rows: int = BLOCK_ROWS) -> int:
    """The runs of a layer of ``heads`` query heads whose cache keeps ``keep`` positions (see RUN_SCORES)."""
    kspan = keep + min(rows, keep + 1)
    return max(1, -(-REFERENCE_PROMPT * heads * kspan * 4 // RUN_SCORES))


def mask_source(mask: ov.Output) -> ov.Output:
    """``mask`` through the Slices that keep all of it (the trimmable form's Slice for the paged converters of
    2026.0 - 2026.2, which read the window only there): the mask whose ops the rule rebuilds."""
    while slice_keeps_all(mask.get_node()):
        mask = mask.get_node().input_value(0)
    return mask


def _refusal(sdpa: ov.Node, ports: dict[int, str], caches: dict[str, int], found: dict[str, CacheNodes]) -> str:
    if set(ports) != {1, 2}:
        return "its K and V are not both trimmable caches"
    if caches[ports[1]] != caches[ports[2]]:
        return "its K and V caches keep different positions"
    if sdpa.get_input_size() <= MASK_PORT:
        return "it has no mask input (the blocked attention rebuilds the model's mask)"
    if not walkable(mask_source(sdpa.input_value(MASK_PORT))):
        return "its mask is not made of ops the mask walk knows (the blocked attention rebuilds the model's mask)"
    q = sdpa.get_input_partial_shape(0)
    if q.rank.is_dynamic or q.rank.get_length() != 4 or q[1].is_dynamic or q[3].is_dynamic:
        return "its query is not [batch, heads, rows, head size] with static heads and head size"
    if (runs := runs_for(q[1].get_length(), caches[ports[1]])) > MAX_RUNS:
        return (f"its window ({caches[ports[1]] + 1} keys) and {q[1].get_length()} query heads would need {runs} "
                f"runs of blocks to hold the scores of a {REFERENCE_PROMPT:,}-token prompt under "
                f"{RUN_SCORES >> 20} MiB a run (at most {MAX_RUNS}): the blocked attention would hold more than the "
                "fused kernel below 16k and its runs would slow every decode step (Gemma 2 2B widths, 28 runs: "
                "1.19x / 1.12x peak memory at 4k / 8k, decode 1.2x)")
    for vid in (ports[1], ports[2]):
        nodes = found[vid]
        new = nodes.new.get_partial_shape()
        if nodes.axis != 2 or new.rank.get_length() != 4 or new[1].is_dynamic or new[3] != q[3]:
            return "its cache is not [batch, KV heads, positions, head size]"
        if q[1].get_length() % new[1].get_length():
            return "its query heads are not a multiple of its KV heads"
    return ""
