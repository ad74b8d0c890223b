"""BlockedFirstPrompt: a first prompt fed whole runs each trimmable sliding layer's attention in query blocks, and
its cache is born holding only the positions a trim keeps (``first_prompt="blocked"``, with
``sliding_window="trimmable"``; issue 32).

Why: fed whole, the trimmable form is the unmodified model. The CPU plugin's fused kernel computes a first prompt's
whole ``n x n`` square in every layer (no window skipping) and its cache keeps every position, so a long prompt fed
whole (as openvino_genai's stateful pipeline and optimum-intel feed it) costs a sliding layer what it costs a full
one. Here, on a first prompt (the layer's cache empty, batch 1, more new tokens than the ``keep`` positions a trim
keeps), the fused SDPA gets only the last ``keep`` rows of Q and of the new K/V, with the rows and columns of its
mask built from the mask's inputs, so that its cache is born trimmed and it computes ``keep x keep`` pairs; the
layer's rows come from a blocked attention over the new K/V: query blocks of ``bq`` rows, block ``b`` against its
``keep + bq`` keys, ``O(n * W)`` pairs. Measured fed whole (with the release points every trimmable IR has:
:mod:`~ovpasses.features.sliding_window.release_points`) at Gemma 3 4B widths: 4k / 16k / 32k peak RSS 0.992x /
0.79x / 0.63x, prefill 0.8x / 0.31x / 0.21x, decode 0.87-0.95x / 0.59x / 0.35x of the unmodified model; at gpt-oss
widths 4k / 16k / 32k 0.986x / 0.90x / 0.83x; below 4k it does not pay (2k: 0.5-2% more, decode 6-9% slower: the
runs' nodes) (``benchmarks/records/2026-11-27-release-points.md``,
``benchmarks/records/2026-11-27-blocked-wide-windows.md``,
``benchmarks/records/2026-11-27-blocked-first-prompt-rank5.md``; the first form:
``benchmarks/records/2026-11-27-blocked-first-prompt.md``; the prototype it was built from:
``benchmarks/records/2026-11-27-fast-first-prompt-prototype.md``).

Per trimmable sliding SDPA (``keep`` = the positions its cache keeps, ``n`` new rows, ``P`` the positions its
cache holds; ``fast = P == 0 and n > keep and batch == 1``, ``s = fast * (n - keep)``, ``n_b = fast * n``)::

    Before:  Q [1,H,n,D] ------------------------------------------------> SDPA(Q, K, V, mask) -> out
             new K/V [1,Hkv,n,D] -> Concat(past, new) -> Assign / [expand] -^        ^- mask [1,1,n,P+n]
    After:   Slice(Q, s:) ------------------------------------------------> SDPA(Q', K, V, mask') -> fused
             Slice(new, s:) -> Concat(past, ..) -> Assign / [expand] ---------^       ^- mask's ops on
                                                                                       leaves sliced at s:
             Q[:n_b], new K/V[:n_b] -> R runs of blocks b: rows [b*bq, b*bq + bq) against keys b*bq - keep ..
                                       b*bq + bq - 1, gathered; rank 5, nothing transposed or expanded:
                                       Q [Hkv, G, blocks, bq, D], K/V [Hkv, 1, blocks, kspan, D], the mask's
                                       ops on leaves gathered at the blocks' rows and keys [1, 1, blocks, bq,
                                       kspan]; the SDPA broadcasts them over the G query heads ------------> rk
             out = Slice(Concat(r1 .. rR, fused), rows [0, n))

Off the fast path (a decode step, a chunk after a past, batch > 1) ``s = 0`` and ``n_b = 0``: the fused SDPA sees
what it saw before and every blocked tensor has 0 rows, so the result is the unmodified model's. The blocked
attention's mask is the model's own (its ops rebuilt on gathered leaves, keys outside ``[0, n)`` masked), so the
window, causality and padding come from the model: the key span only has to cover the window (``keep >= W - 1``).
The runs execute one after another (each run's bounds wait for the previous run's output, the first run's for the
layer's Q: the plugin runs independent branches side by side, and holds their memory together). The blocks' key
indices and mask are built once per mask and shared by the layers that read it, packed in three tensors that each
layer's runs gather from: with dynamic shapes the CPU plugin groups tensors by lifetime and holds a group for every
tensor that lives from the first layer to the last (runtime notes): the first form (per-run masks and bounds built
once for all layers, K/V windows transposed, masks tiled per query head) held 154 MiB more context memory at Gemma 3
4B widths, 4k fed whole (record 2026-11-27-blocked-first-prompt-rank5.md).

Each blocked layer's output ends in a Slice with a computed stop, a sync point of the CPU plugin; every other SDPA
(the full-attention layers) gets one from :mod:`~ovpasses.features.sliding_window.release_points` (the runs are
sync points too, and what is alive across them is kept to the next one: runtime notes).

A paged client (openvino_genai continuous batching, OVMS) cannot load this form: openvino's SDPA-to-PagedAttention
conversion removes the beam_idx and attention_mask inputs, which the blocked attention still reads (``undeclared
parameters``; the rewrite's summary says so).
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

import numpy as np
import openvino as ov
from openvino import opset8
from openvino import opset13 as ops
from openvino.passes import ModelPass
from openvino.utils.node_factory import NodeFactory

from ovpasses._ov import MASK_PORT, SCALE_PORT, SINK_PORT, is_sdpa
from ovpasses.analysis.cache_chain import find_cache_chains
from ovpasses.errors import PassInvariantError
from ovpasses.features.sliding_window.cache_nodes import cache_nodes
from ovpasses.features.sliding_window.first_prompt_plan import (  # noqa: F401 - the plan's names, re-exported
    BLOCK_ROWS, MAX_RUNS, RT_BLOCKED, RT_NODE, RUN_SCORES, BlockedLayer, BlockedPlan, mask_source, plan_blocked, runs_for)
from ovpasses.features.sliding_window.mask_columns import narrow_axis, rebuild_on_leaves
from ovpasses.modes import FirstPrompt, OptionChoice
from ovpasses.rules import Rule, RulePlan

log = logging.getLogger(__name__)

OPEN_END = np.iinfo(np.int32).max


# The rule's constants, shared within one rewrite (each Constant is a node the compiled model holds: sharing them
# made it 11 MiB smaller at Gemma 3 4B widths)
_SHARED: ContextVar[dict | None] = ContextVar("blocked_first_prompt_constants", default=None)


def _constant(value: np.ndarray) -> ov.Node:
    shared = _SHARED.get()
    if shared is None:
        return ops.constant(value)
    key = (value.dtype.str, value.shape, value.tobytes())
    if key not in shared:
        shared[key] = ops.constant(value)
    return shared[key]


def _i64(values) -> ov.Node:
    return _constant(np.asarray(values, np.int64).reshape(-1))


def _scalar(value: int) -> ov.Node:
    return _constant(np.array(value, np.int64))


def _dim(output, axis: int) -> ov.Node:
    return ops.gather(ops.shape_of(output, "i64"), _i64([axis]), _i64([0]))


class _Band:
    """What every layer of one mask and keep shares, built once: the blocks' key indices ``kidx`` [nb, kspan], the
    mask ``[1, 1, nb, bq, kspan]`` and the runs' block bounds ``[runs + 1]`` (three tensors: the plugin holds a
    group of its dynamic memory for each tensor that lives from the first layer to the last, so the band is
    packed, and each layer's runs gather from it)."""

    def __init__(self, n_b: ov.Node, keep: int, rows: int, runs: int, mask: ov.Output, made: list[ov.Node]) -> None:
        bq = min(rows, keep + 1)
        self.bq, self.kspan, self.runs = bq, keep + bq, runs
        self.n_b = n_b
        self.nb = nb = ops.divide(ops.add(n_b, _i64([bq - 1])), _i64([bq]))     # ceil(n_b / bq)
        self.pad = ops.subtract(ops.multiply(nb, _i64([bq])), n_b)
        per_run = ops.divide(ops.add(nb, _i64([runs - 1])), _i64([runs]))
        self.bounds = ops.minimum(ops.multiply(per_run, _i64(np.arange(runs + 1))), nb)   # run r: [b_r, b_r+1)
        last = ops.maximum(ops.subtract(n_b, _i64([1])), _i64([0]))
        blocks = ops.range(_scalar(0), ops.squeeze(nb, _i64([0])), _scalar(1), "i64")
        first_row = ops.multiply(ops.unsqueeze(blocks, _i64([1])), _i64([bq]))                    # [nb, 1]
        qpos = ops.add(first_row, _i64(np.arange(bq)).output(0))                                   # [nb, bq]
        kabs = ops.add(ops.subtract(first_row, _i64([keep])), _i64(np.arange(self.kspan)).output(0))  # [nb, ks]
        self.kidx = ops.minimum(ops.maximum(kabs, _i64([0])), last)
        self.mask = self._mask(mask, qpos, kabs, last, made)
        made += [nb, self.pad, per_run, self.bounds, last, blocks, first_row, qpos, kabs, self.kidx]

    def _mask(self, mask: ov.Output, qpos: ov.Node, kabs: ov.Node, last: ov.Node,
              made: list[ov.Node]) -> ov.Output:
        """The model's mask at rows ``qpos`` [nb, bq] and keys ``kabs`` [nb, kspan] (absolute positions; keys
        outside ``[0, n_b)`` masked): ``[1, 1, nb, bq, kspan]``, which every query head broadcasts."""
        built = _rebuilt(mask, lambda output, into: _gathered_leaf(output, qpos, kabs, into), made)
        valid = ops.logical_and(ops.greater_equal(kabs, _i64([0])), ops.less_equal(kabs, last))   # [nb, kspan]
        valid = ops.unsqueeze(valid, _i64([1, 2]))                                                 # [nb,1,1,ks]
        if built.get_element_type() == ov.Type.boolean:
            out = ops.logical_and(built, valid)
        else:
            lowest = ops.constant(np.array(np.finfo(np.float32).min, np.float32))
            out = ops.select(valid, built, ops.convert_like(lowest, built))
        # [nb, 1, r, ks] with r = bq (or 1: rows broadcast) -> [1, 1, nb, bq, kspan]
        rows = ops.broadcast(out, ops.concat([_dim(qpos, 0), _i64([1]), _dim(qpos, 1), _dim(kabs, 1)], 0),
                             broadcast_spec="BIDIRECTIONAL")
        five = ops.reshape(rows, _i64([1, 1, -1, self.bq, self.kspan]), False)
        made += [valid, out, rows, five]
        return five.output(0)


def _rebuilt(mask: ov.Output, leaf, made: list[ov.Node]) -> ov.Output:
    """``mask``'s ops rebuilt on ``leaf``'s outputs for its leaves (:func:`rebuild_on_leaves`); the plan took only
    masks the walk can rebuild (:func:`walkable`: leaves of static rank, which both leaf rules take)."""
    rebuilt = rebuild_on_leaves(mask, leaf)
    if rebuilt is None:
        raise PassInvariantError(f"BlockedFirstPrompt: the mask '{mask.get_node().get_friendly_name()}' is not made of "
                                 "ops the mask walk knows")
    made += rebuilt[1]
    return rebuilt[0]


def _gathered_leaf(leaf: ov.Output, qpos: ov.Node, kabs: ov.Node, made: list[ov.Node]) -> ov.Output | None:
    """A mask leaf at rows ``qpos`` [m, bq] (axis -2) and keys ``kabs`` [m, kspan] (axis -1), batch 1: ``[m, 1, bq |
    1, kspan | 1]``. An axis that is 1 is read as it is (a broadcast axis: also one that is 1 at run time, through
    indices clamped to the leaf's own length); axes before the last two are read at index 0 (batch 1, one mask
    per head)."""
    shape = leaf.get_partial_shape()
    if shape.rank.is_dynamic:
        return None
    rank = shape.rank.get_length()
    if rank == 0:
        return leaf
    x = leaf
    if rank == 1:
        x = ops.unsqueeze(x, _i64([0])).output(0)
        made.append(x.get_node())
    for _ in range(max(rank - 2, 0)):                      # [.., r, c] -> [r, c]
        node = ops.gather(x, _scalar(0), _scalar(0))
        made.append(node)
        x = node.output(0)
    rows_one = shape.rank.get_length() < 2 or (shape[-2].is_static and shape[-2].get_length() == 1)
    cols_one = shape[-1].is_static and shape[-1].get_length() == 1

    def clamped(index: ov.Node, axis: int) -> ov.Node:
        node = ops.minimum(ops.maximum(index, _i64([0])), ops.subtract(_dim(x, axis), _i64([1])))
        made.append(node)
        return node

    if rows_one and cols_one:
        node = ops.unsqueeze(x, _i64([0]))                                    # [1, 1, 1]
    elif rows_one:     # [1, c] -> [c] -> [m, kspan] -> [m, 1, kspan]
        flat = ops.squeeze(x, _i64([0]))
        node = ops.unsqueeze(ops.gather(flat, clamped(kabs, 1), _scalar(0)), _i64([1]))
        made.append(flat)
    else:              # [r, c] -> [m, bq, c] -> (keys per block) [m, bq, kspan]
        node = ops.gather(x, clamped(qpos, 0), _scalar(0))
        if not cols_one:
            made.append(node)
            node = ops.gather(node, clamped(kabs, 1), _scalar(2), 1)
    made.append(node)
    out = ops.unsqueeze(node, _i64([1]))                                      # [m | 1, 1, bq | 1, kspan | 1]
    made.append(out)
    return out.output(0)


def _sdpa(inputs: list[ov.Output]) -> ov.Node:
    # opset13's Python helper takes no sink input; the factory builds the op from its inputs (5 or 6)
    return NodeFactory("opset13").create("ScaledDotProductAttention", inputs, {"causal": False})


class BlockedFirstPrompt(Rule, ModelPass):
    """Give the SDPAs ``plan.layers`` names a blocked first prompt and born-trimmed caches (module docstring).
    ``self.changed`` lists the SDPAs changed; ``self.refused`` why the plan left the others."""

    NAME = "BlockedFirstPrompt"
    REANALYSES = False
    ONLY_WITH = OptionChoice("first_prompt", FirstPrompt.BLOCKED)
    DESCRIPTION = ("a first prompt fed whole runs the trimmable sliding layers' attention in query blocks and their "
                   "caches are born trimmed")

    @classmethod
    def from_plan(cls, part: RulePlan) -> BlockedFirstPrompt:
        return cls(part.data)

    def __init__(self, plan: BlockedPlan) -> None:
        ModelPass.__init__(self)
        self.plan = plan
        self.changed: list[str] = []
        self.refused: dict[str, str] = dict(plan.refused)

    def run_on_model(self, model: ov.Model) -> bool:
        if not self.plan.layers:
            return False
        token = _SHARED.set({})
        try:
            return self._rewrite(model)
        finally:
            _SHARED.reset(token)

    def _rewrite(self, model: ov.Model) -> bool:
        chains = find_cache_chains(model, {v for layer in self.plan.layers for v in (layer.k_cache, layer.v_cache)},
                                   f"{self.NAME}.cache_chain")
        sdpas = {node.get_friendly_name(): node for node in model.get_ordered_ops() if is_sdpa(node)}
        order = {name: index for index, name in enumerate(sdpas)}
        bands: dict[tuple, _Band] = {}
        gates: dict[int, tuple[ov.Node, ov.Node]] = {}
        fused_masks: dict[tuple, ov.Output] = {}
        # in the model's order: a gate (and a band) is built from the first layer that needs it and read by the later
        # ones; built from a later layer's query, an earlier layer reading it closes a loop (the plan may list a layer
        # whose cache the unsharing made before the layers in front of it)
        for layer in sorted(self.plan.layers, key=lambda layer: order.get(layer.sdpa, -1)):
            sdpa = sdpas.get(layer.sdpa)
            if sdpa is None or layer.k_cache not in chains or layer.v_cache not in chains:
                raise PassInvariantError(f"{self.NAME}: the plan names SDPA '{layer.sdpa}' and its caches, and the "
                                         "model has not got them")
            knodes, vnodes = (cache_nodes(*chains[v]) for v in (layer.k_cache, layer.v_cache))
            made: list[ov.Node] = []
            q = sdpa.input_value(0)
            heads, size = q.get_partial_shape()[1].get_length(), q.get_partial_shape()[3].get_length()
            kv_heads = knodes.new.get_partial_shape()[1].get_length()
            groups = heads // kv_heads
            sink = sdpa.input_value(SINK_PORT) if sdpa.get_input_size() > SINK_PORT else None
            if sdpa.get_input_size() > SCALE_PORT:
                scale = sdpa.input_value(SCALE_PORT)
            else:
                scale = ops.constant(np.array(size ** -0.5, np.float32)).output(0)
                scale = ops.convert_like(scale, q).output(0)
            if layer.keep not in gates:
                gates[layer.keep] = self._gate(q, knodes, layer.keep, made)
            start, n_b = gates[layer.keep]
            n = _dim(knodes.new, 2)
            made.append(n)
            # the fused SDPA: the last `keep` rows on the fast path (its cache is born trimmed), every row otherwise
            sdpa.input(0).replace_source_output(self._from(q, start, made))
            for nodes in (knodes, vnodes):
                nodes.concat.input(1).replace_source_output(self._from(nodes.new, start, made))
            mask = mask_source(sdpa.input_value(MASK_PORT))
            key = (mask.get_node().get_name(), mask.get_index(), layer.keep)
            if key not in fused_masks:
                fused_masks[key] = self._fused_mask(mask, start, made)
                if self.plan.slice_masks:   # as SlidingWindowMaskSliceInsertion leaves a mask: a second run adds none
                    keys = opset8.slice(fused_masks[key], _i64([0]), _i64([OPEN_END]), _i64([1]), _i64([-1]))
                    made.append(keys)
                    fused_masks[key] = keys.output(0)
            sdpa.input(MASK_PORT).replace_source_output(fused_masks[key])
            band_key = (mask.get_node().get_name(), mask.get_index(), layer.keep, layer.runs)
            if band_key not in bands:
                bands[band_key] = _Band(n_b, layer.keep, self.plan.block_rows, layer.runs, mask, made)
            blocked = self._blocked(q, knodes.new, vnodes.new, scale, sink, bands[band_key], heads, kv_heads, size,
                                    made)
            fused = sdpa.output(0)
            targets = list(fused.get_target_inputs())
            # the blocked rows come at the batch of the fused ones: 1 on the fast path, 0 rows of any batch off it
            out = opset8.slice(ops.concat([blocked, fused], 2), _i64([0]), n, _i64([1]), _i64([2]))
            out.set_friendly_name(f"{layer.sdpa}/blocked_first_prompt")
            made.append(out)
            for target in targets:
                target.replace_source_output(out.output(0))
            for node in made:
                node.get_rt_info()[RT_NODE] = layer.sdpa
            self.changed.append(layer.sdpa)
            log.debug("%s: %s gets a blocked first prompt (keep %d, %d query heads per KV head%s)", self.NAME,
                      layer.sdpa, layer.keep, groups, ", sinks" if sink is not None else "")
        model.set_rt_info(",".join(self.changed), RT_BLOCKED)
        model.validate_nodes_and_infer_types()
        return True

    @staticmethod
    def _gate(q: ov.Output, knodes, keep: int, made: list[ov.Node]) -> tuple[ov.Node, ov.Node]:
        """The fused SDPA's first row ``s`` and the blocked rows ``n_b`` (``fast``, i64 [1], is 1 on a first prompt
        of batch 1 and more than ``keep`` new rows). The past is the cache's own (a ShapeOf on its Gather, which the
        plugin's fused pattern allows)."""
        held = _dim(knodes.chain[-1].output(0), 2)
        n = _dim(knodes.new, 2)
        batch = _dim(q, 0)
        first = ops.logical_and(ops.equal(held, _i64([0])), ops.equal(batch, _i64([1])))
        fast = ops.convert(ops.logical_and(first, ops.greater(n, _i64([keep]))), ov.Type.i64)
        start = ops.multiply(fast, ops.subtract(n, _i64([keep])))
        n_b = ops.multiply(fast, n)
        made += [held, n, batch, first, fast, start, n_b]
        return start, n_b

    @staticmethod
    def _from(x: ov.Output, start: ov.Node, made: list[ov.Node]) -> ov.Output:
        node = opset8.slice(x, start, _i64([OPEN_END]), _i64([1]), _i64([2]))
        made.append(node)
        return node.output(0)

    @staticmethod
    def _fused_mask(mask: ov.Output, start: ov.Node, made: list[ov.Node]) -> ov.Output:
        """The mask's rows and key columns from ``start`` (on the fast path the past is empty, so the columns are
        the new rows'), built from its inputs."""
        def leaf(output: ov.Output, into: list[ov.Node]) -> ov.Output | None:
            rows = narrow_axis(output, -2, start.output(0), into)
            return None if rows is None else narrow_axis(rows, -1, start.output(0), into)
        return _rebuilt(mask, leaf, made)

    @staticmethod
    def _blocked(q: ov.Output, k: ov.Output, v: ov.Output, scale: ov.Output, sink: ov.Output | None, band: _Band,
                 heads: int, kv_heads: int, size: int, made: list[ov.Node]) -> ov.Output:
        """The first ``n_b`` rows of the layer's attention, padded to whole blocks ``[1, H, blocks * bq, D]``.
        Rank 5, so that nothing is transposed, tiled or expanded: Q ``[Hkv, G, blocks, bq, D]`` (a reshape of
        Q), a run's K/V windows ``[Hkv, 1, m, kspan, D]`` (one Gather each), the mask ``[1, 1, m, bq, kspan]``;
        the SDPA broadcasts them over the G query heads of a KV head. Per run: its bounds, a Range of its blocks,
        Gathers of Q, the key indices, the mask, K and V, the SDPA, its write and its wait (few nodes: each runs
        on empty tensors every decode step, and each costs the compiled model memory)."""
        groups = heads // kv_heads
        bq = band.bq

        def node(n: ov.Node) -> ov.Node:
            made.append(n)
            return n

        rows = node(opset8.slice(q, _i64([0]), band.n_b, _i64([1]), _i64([2])))
        qp = node(ops.pad(rows, _i64([0, 0, 0, 0]), node(ops.concat([_i64([0, 0]), band.pad, _i64([0])], 0)),
                          "constant"))
        # [1, H, nb*bq, D] -> [Hkv, G, nb, bq, D] (off the fast path, of any batch: 0 elements)
        blocks = node(ops.reshape(qp, _i64([kv_heads, groups, -1, bq, size]), False))
        # [Hkv, 1, n_b, D]: batch 1 on the fast path; off it (any batch) 0 rows
        k_heads, v_heads = (node(ops.reshape(node(opset8.slice(x, _i64([0]), band.n_b, _i64([1]), _i64([2]))),
                                             _i64([kv_heads, 1, -1, size]), False)) for x in (k, v))
        extra = [] if sink is None else [node(ops.reshape(sink, _i64([kv_heads, groups, 1, 1, 1]), False)).output(0)]
        # each run waits for the previous run's output, the first for the layer's Q: it reads its bounds from the
        # band's bounds concatenated with the shape of what it waits for (four nodes, no arithmetic)
        wait = node(ops.shape_of(rows, "i64"))
        # the runs write their rows into one buffer in place: the first run's rows padded with zeros to every
        # block, then a ScatterUpdate per run (no run's output outlives it)
        out = None
        for run in range(band.runs):
            # the run's blocks as indices: one Range, then Gathers (a node whose output shape is read from values is
            # a sync point of the plugin, which processes dynamic shapes sequentially below 10 nodes per sync point)
            bounds = node(ops.concat([band.bounds, wait], 0))
            lo, hi = (node(ops.gather(bounds, _scalar(r), _scalar(0))) for r in (run, run + 1))
            at = node(ops.range(lo, hi, _scalar(1), "i64"))                                # [m]
            qr = node(ops.gather(blocks, at, _scalar(2)))                                   # [Hkv, G, m, bq, D]
            idx = node(ops.gather(band.kidx, at, _scalar(0)))                               # [m, kspan]
            mr = node(ops.gather(band.mask, at, _scalar(2)))                                # [1, 1, m, bq, kspan]
            kr, vr = (node(ops.gather(x, idx, _scalar(2))) for x in (k_heads, v_heads))
            rows_r = node(_sdpa([qr.output(0), kr.output(0), vr.output(0), mr.output(0), scale] + extra))
            if out is None:   # run 0 starts at block 0: pad its rows to the last block
                rest = node(ops.subtract(band.nb, hi))
                out = node(ops.pad(rows_r, _i64([0, 0, 0, 0, 0]),
                                   node(ops.concat([_i64([0, 0]), rest, _i64([0, 0])], 0)), "constant"))
            else:
                out = node(ops.scatter_update(out, at, rows_r, _i64([2])))
            wait = node(ops.shape_of(out, "i64"))
        target = node(ops.concat([node(_dim(q, 0)), _i64([heads, -1, size])], 0))   # the fused rows' batch
        return node(ops.reshape(out, target, False)).output(0)


__all__ = ["BLOCK_ROWS", "MAX_RUNS", "RT_BLOCKED", "RUN_SCORES", "BlockedFirstPrompt", "BlockedLayer", "BlockedPlan",
           "mask_source", "plan_blocked", "runs_for"]
