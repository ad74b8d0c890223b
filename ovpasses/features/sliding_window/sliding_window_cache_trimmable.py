"""TrimmableSlidingWindowKVCache: a KV cache that only sliding-window attention reads stays exact when the
calling program cuts it back to its last positions, and stays inside the CPU plugin's stateful SDPA kernel.

Why: :class:`~ovpasses.passes.SlidingWindowKVCacheBounding` stores only the last ``W - 1`` positions through a
Slice between the Concat and the Assign, which takes the layer out of the plugin's fused stateful kernel (its
pattern allows nothing between ReadValue, Gather, Concat and Assign): the bounded layers then run decomposed
attention on bf16 double-buffered states, which at wide attention (Gemma 3's 8 x 256 heads) is slower and holds
more memory than the fused kernel's u8 cache (``benchmarks/records/2026-11-26-bounded-vs-native.md``). This pass
leaves each sliding cache's chain as it is (the kernel still fuses it and still owns its cache) and makes the
rest of the model independent of how many positions the cache holds, so that a program may trim the state
(:class:`ovpasses.features.sliding_window.trim.SlidingWindowTrimmer`, through ``set_state``) every K steps:

* every ShapeOf on the chain or the Concat (past length, positions, masks, other layers' GQA target shapes)
  computes the shape the cache would have had untrimmed, from the *reference* cache (one that keeps the whole
  context) read through a ShapeOf on its Gather, which the fused pattern allows;
* the layer's own GQA Broadcast takes its sequence length from its own input (a 1 in its target's sequence
  element, bidirectional), as the bounding does;
* the sliding layers' mask holds the last ``P + n`` key columns, ``P`` the positions the cache holds now
  (``ShapeOf(Gather)``, not a ShapeOf on the Concat) and ``n`` the new ones; with an untrimmed cache ``P = T`` and
  it is the whole mask. Those columns are built from the mask's inputs (its key index and padding sliced to
  ``[T - P, T + n)``, :mod:`~ovpasses.features.sliding_window.mask_columns`), not sliced out of the whole mask
  after its Select: the whole ``[n, T + n]`` sliding mask is never computed. Not at windows of
  :data:`SLICED_FROM` (4,096) positions or more beside full-attention layers: there the columns are a Slice of
  the exported mask, which the CPU plugin was measured to hold less of (:func:`narrowed_mask`). A cache trimmed
  below
  ``min(T, W - 1)`` fails the inference (the bounding's ``lost_positions_check``), never decodes from positions
  the mask needs.

Per trimmable cache ``v`` (``k_cache_BHkvSD``; ``T`` positions seen, ``P <= T`` held; ``n`` new)::

    Before and after, untouched (fused by the plugin):
      ReadValue(v) -> Gather(beam) -> Concat(past, new) -> Assign(v)
                                          \\-> [Unsqueeze -> Broadcast -> Reshape] -> SDPA(Q, K, V, mask)
    Before:  mask [B, 1, n, T+n];  ShapeOf(Gather | Concat) -> past length T, positions, masks
    After:   ShapeOf(..) -> ScatterUpdate(shape, seq, ShapeOf(ref Gather)[seq] (+ n))       (= T, T+n as before)
             mask's inputs -> Slice(columns [T - P, T + n)) -> the mask's ops    [B, 1, n, P+n],
             P = ShapeOf(Gather)[seq]   (a mask of other ops: Slice of the whole mask, as before)

With nobody trimming, ``P = T`` and every value is what it was: the form is the unmodified model's, so a client
that does not trim (openvino_genai, paged or stateful) gets exactly the native behaviour. Each cache made
trimmable records its variable id and the positions a trimmer must keep (``W - 1 + margin``) in the model's
runtime info under :data:`RT_TRIMMABLE`, and its sequence axis under
:data:`~ovpasses.features.sliding_window.caches.RT_TRIMMABLE_AXES` (both kept when the IR is saved), where the
trimmer reads them.
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino.passes import ModelPass

from ovpasses.analysis.cache_chain import find_cache_chains, variable_id
from ovpasses.features.sliding_window.cache_nodes import CacheRefusal, cache_nodes
from ovpasses.features.sliding_window.caches import (
    RT_TRIMMABLE,
    RT_TRIMMABLE_AXES,
    SlidingWindowCaches,
    trimmable_caches,
    trimmable_key,
)
from ovpasses.errors import PassInvariantError
from ovpasses.features.sliding_window.masks import MASK_PORT
from ovpasses.modes import OptionChoice, SlidingWindow
from ovpasses.features.sliding_window.sliding_window_cache_bounding import (
    SlidingWindowKVCacheBounding,
    failing_check,
    own_length_broadcasts,
    slice_mask,
    unbounded_shapes,
)
from ovpasses.rules import Rule, RulePlan

log = logging.getLogger(__name__)

RT_NODE = "ovpasses_sliding_window_trimmable"         # on each node the pass makes: the variable it serves

# Which key columns the sliding layers read, measured fed whole (openvino 2026.4.1, plugin defaults, peak RSS
# against the unmodified model, 2k / 4k / 8k / 16k; benchmarks/records/2026-11-27-wide-windows-amx.md). Both forms
# compute the same values; the CPU plugin groups its tensors by lifetime and holds each group at its largest member
# (runtime notes), and which form it holds less of was measured, not derived. Built from the mask's inputs:
# Gemma 3 4B widths (window 1,024), 16k 0.960x against 1.030x sliced; Mistral 7B (4,096, every layer sliding: no
# cache keeps the whole context) 0.985x / 0.977x / 0.954x / 0.943x against 0.972x / 0.962x / 0.974x / 1.022x.
# Sliced out of the exported mask, at windows of 4,096 beside full-attention layers: EXAONE 4 32B widths 0.992x /
# 0.986x / 0.979x / 0.959x against 1.007x / 1.006x / 1.005x / 0.990x built; Command R7B 1.006x / 1.003x / 0.997x /
# 1.023x against 1.010x / 1.016x / 1.026x / 1.028x; Gemma 2 2B 0.983x / 0.972x / 0.962x / 0.958x against 0.997x /
# 0.999x / 0.986x / 0.960x. The prompt helper's chunks hold the same either way (EXAONE 4 widths, 16k: 2,900 MiB).
SLICED_FROM = 4096


def narrowed_mask(window: int, whole_context_cache: bool) -> bool:
    """Whether the trimmable form builds a sliding layer's key columns from the mask's inputs (True) or slices
    them out of the exported mask (False): sliced at a window of :data:`SLICED_FROM` or more in a model where a
    cache keeps the whole context (full-attention layers beside the sliding ones), as measured. Pure."""
    return window < SLICED_FROM or not whole_context_cache


def _i64(values) -> ov.Node:
    return ops.constant(np.asarray(values, np.int64).reshape(-1))


class TrimmableSlidingWindowKVCache(Rule, ModelPass):
    """Make the caches ``plan.bounded`` names trimmable by the calling program (a :class:`SlidingWindowCaches` of
    this model), re-sourcing lengths from ``plan.reference``. ``self.changed`` lists the variable ids changed."""

    NAME = "TrimmableSlidingWindowKVCache"
    ACTION = "trimmable"   # the SDPA action (plan.decisions.Action) it carries out
    REANALYSES = True
    CHANGES_CACHES = True
    ONLY_WITH = OptionChoice("sliding_window", SlidingWindow.TRIMMABLE)   # the option that turns it on
    DESCRIPTION = ("caches only sliding-window attention reads stay fused and exact when the program trims them to "
                   "their last W-1 positions")

    @classmethod
    def from_plan(cls, part: RulePlan) -> TrimmableSlidingWindowKVCache:
        """The caches the plan makes trimmable (:class:`~ovpasses.features.sliding_window.caches.SlidingWindowCaches`)."""
        return cls(part.data)

    def __init__(self, plan: SlidingWindowCaches) -> None:
        ModelPass.__init__(self)
        self.plan = plan
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}

    def run_on_model(self, model: ov.Model) -> bool:
        if not self.plan.bounded:
            return False
        wanted = set(self.plan.bounded) | ({self.plan.reference} if self.plan.reference is not None else set())
        chains = find_cache_chains(model, wanted, f"{self.NAME}.cache_chain")
        missing = sorted(wanted - set(chains))
        if missing:
            raise PassInvariantError(f"{self.NAME}: the plan names cache {', '.join(missing)}, and the model has "
                                     "no cache chain of it")
        # as the bounding reads it: a full cache's ShapeOf on its Gather (fusion allows it), or, where every cache
        # is sliding, the attention_mask's length less the new tokens
        past_length = SlidingWindowKVCacheBounding._past_length(self, model, chains)
        keep: dict[str, int] = {}
        axes: dict[str, int] = {}
        # per mask, the K caches of the SDPAs that read it: (sdpa, nodes, window, held)
        readers: dict[ov.Output, list[tuple[ov.Node, object, int, ov.Node]]] = {}
        for vid, bounded in self.plan.bounded.items():
            nodes = cache_nodes(*chains[vid])
            if isinstance(nodes, CacheRefusal):
                raise PassInvariantError(f"{self.NAME}: cache {vid} no longer takes the rewrite: {nodes.message}")
            made = unbounded_shapes(nodes, past_length.output(0))
            made += own_length_broadcasts(nodes, self.NAME)
            held = ops.gather(ops.shape_of(nodes.chain[-1].output(0), "i64"), _i64([nodes.axis]), _i64([0]))
            made.append(held)
            for sdpa, port in nodes.readers:
                if port == 1:
                    if sdpa.get_input_size() <= MASK_PORT:
                        raise PassInvariantError(f"{self.NAME}: SDPA '{sdpa.get_friendly_name()}' has no mask")
                    readers.setdefault(sdpa.input_value(MASK_PORT), []).append((sdpa, nodes, bounded.window, held))
            for node in made:
                node.get_rt_info()[RT_NODE] = vid
            keep[vid] = bounded.keep
            axes[vid] = nodes.axis
            self.changed.append(vid)
            log.debug("%s: %s trimmable to its last %d positions (window %d)", self.NAME, vid, bounded.keep,
                      bounded.window)
        # one Slice per mask, read by every SDPA of that mask: a Slice per layer made the plugin hold several
        # copies of a whole prompt's mask (measured at Gemma 3 widths, an 8,192-token prompt whole: peak RSS
        # 3,550 MiB against the unmodified model's 3,349; one shared Slice: 3,346). The Slice's columns are the
        # first cache's; every other cache must hold as many positions (the trimmer cuts them together), or the
        # inference fails (failing_check), never reads a mask of another length.
        masks: dict[tuple[ov.Output, str], ov.Output] = {}
        # the columns are counted from the cache of the group's first SDPA in the model's order: another's new K
        # may be computed from the first one's output (a layer that owns its K and borrows its V reads the mask
        # of the layer it borrows from), and a mask of the first layer counted from it made a cycle
        position = {node: index for index, node in enumerate(model.get_ordered_ops())
                    if node.get_type_name() == "ScaledDotProductAttention"} if any(
                        len(group) > 1 for group in readers.values()) else {}
        for mask, group in readers.items():
            group.sort(key=lambda reader: position.get(reader[0], 0))
            sdpa, nodes, window, held = group[0]
            new = ops.gather(ops.shape_of(nodes.new, "i64"), _i64([nodes.axis]), _i64([0]))
            key_length = ops.add(held, new)
            checks = tuple(failing_check(ops.convert(ops.not_equal(other, held), ov.Type.i64))
                           for _, _, _, other in group[1:])
            # the mask's columns T + n, known without the mask: the sliding layers' columns are built from the
            # mask's inputs at [n, P + n] (mask_columns), never as a Slice of the whole [n, T + n] mask (which
            # at 16k whole held the whole mask and its copy together: +275 MiB peak RSS at Gemma 3 widths)
            columns = ops.add(past_length.output(0), new)
            made = [new, key_length, columns, *checks]
            made += slice_mask(self.NAME, sdpa, nodes, window, past_length.output(0), masks, key_length, checks,
                               columns=columns, narrow=narrowed_mask(max(w for _, _, w, _ in group),
                                                                     self.plan.reference is not None))
            sliced = sdpa.input_value(MASK_PORT)
            for other, _, _, _ in group[1:]:
                other.input(MASK_PORT).replace_source_output(sliced)
            for node in made:
                node.get_rt_info()[RT_NODE] = variable_id(nodes.read_value)
        for vid, positions in keep.items():
            model.set_rt_info(str(positions), [RT_TRIMMABLE, trimmable_key(vid)])
            model.set_rt_info(str(axes[vid]), [RT_TRIMMABLE_AXES, trimmable_key(vid)])
        model.validate_nodes_and_infer_types()
        return True


__all__ = ["RT_TRIMMABLE", "SLICED_FROM", "TrimmableSlidingWindowKVCache", "narrowed_mask", "trimmable_caches",
           "variable_id"]
