"""SlidingWindowKVCacheBounding: a KV cache that only sliding-window attention reads keeps its last W-1 positions.

Why: a sliding-window layer (Gemma 3n, Gemma 4: window ``W``; key ``k`` is seen from query ``q`` when
``k > q - W``) never looks further back than ``W - 1`` positions from the next token, yet the exported
stateful model stores its whole history, so its KV state and the time to copy and attend it grow with
the context. This pass makes the Assign store only the last ``keep = W - 1 + margin`` positions; the
SDPA still attends ``Concat(past, new)``, so a prefill chunk longer than ``W`` stays exact (as
transformers' ``DynamicSlidingWindowLayer`` does). Which caches, their window and the reference cache
come from :func:`ovpasses.features.sliding_window.caches.analyze_sliding_window_caches` (plain data).

For each bounded cache ``v`` (``k_cache_BHkvSD``; ``T`` positions stored unbounded, ``P = min(T, keep)``
bounded; ``n`` new tokens; ``ref`` a cache left whole)::

    Before:
      ReadValue(v) -> Gather(beam) -> Concat(past, new) ---------------------------------> Assign(v)
                          |                |   k_cache_BHkvS(T+n)D
                       ShapeOf          ShapeOf                  Unsqueeze -> Broadcast(target [.., T+n, ..]) -> Reshape
                          |                |                                       |
                     past length T    [B, Hkv, T+n, D]                     SDPA(Q, K, V, mask [B, 1, n, T+n])

    After:
      ReadValue(v) -> Gather(beam) -> Concat(past, new) -> Slice(last keep, sequence axis) -> Assign(v)
                                           |   k_cache_BHkvS(P+n)D
      ScatterUpdate(ShapeOf(past), seq, ShapeOf(ref past)[seq])         = the shape unbounded: [.., T, ..]
      ScatterUpdate(ShapeOf(new), seq, ShapeOf(ref past)[seq] + n)      = [B, Hkv, T+n, D]
                                 Unsqueeze -> Broadcast(target with 1 at seq, bidirectional) -> Reshape
                                                                            |
            SDPA(Q, K, V, Slice(mask, start -(P+n), key axis) [B, 1, n, P+n])

* What the exporter derives from the cache's length (past length, positions, masks, other layers'
  GQA target shapes) reads the ShapeOf nodes; each now computes the shape the cache would have had
  unbounded, from the reference cache's length, so every such value is what it was. A model whose
  every cache is bounded (every layer sliding: Mistral, Phi-3) has no reference; there
  ``ShapeOf(ref past)[seq]`` is ``ShapeOf(attention_mask)[1] - ShapeOf(input_ids)[1]``: the mask is
  [B, past + n] wherever the model runs statefully.
* The layer's own GQA Broadcast gets its sequence length from its data: a 1 in the target's sequence
  element and bidirectional mode give the input's length; the other elements are what they were
  (a valid numpy broadcast is the same bidirectional broadcast). Where the cache has one KV head
  (``[B, 1, S, D]``, as Gemma 4 E2B), every SDPA that reads a cache, bounded or not, reads it without the
  expand (``Unsqueeze -> Broadcast -> Reshape``): the SDPA broadcasts it over the query heads itself
  (:func:`~ovpasses.passes.gqa_expand.elide_single_head_expand` says why). With several KV heads the expand
  stays; in front of every SDPA the plugin's stateful kernel does not take (``plan.unfused_readers``) its
  Broadcast becomes ``Broadcast(u, ShapeOf(u) * [1, 1, rep, 1, 1], numpy)``, ``u`` the Unsqueeze: the same
  values, and a Broadcast the plugin runs itself instead of a Multiply by a broadcast of ones
  (:func:`~ovpasses.passes.gqa_expand.numpy_expand`).
* The bounded cache holds the last ``P`` positions, so its keys are the last ``P + n`` columns of the
  mask: ``Slice(mask, -(P+n), end)`` on the key axis. The columns dropped are keys
  ``k <= T - W``: no query ``q >= T`` sees them.
* A client that trims every state by ``N`` positions (openvino_genai's chat rollback,
  ``trim_kv_cache``) leaves a bounded cache ``N`` positions short. With ``N <= margin`` it still holds
  the ``W - 1`` the mask needs; beyond that, the Slice's start is computed through a Concat of
  mismatched shapes that fails the inference (``.../lost_positions_check``) when the cache holds fewer
  than ``min(T, W - 1)`` positions: the model never decodes from a cache that lost positions the mask
  needs.

The bounded layers leave the CPU plugin's stateful SDPA kernel (its pattern allows nothing between
Concat and Assign). A second run finds each bounded cache by its Slice (friendly name ending in
:data:`~ovpasses.features.sliding_window.caches.BOUND_SUFFIX`) and changes nothing.
"""

from __future__ import annotations

import logging

import numpy as np
import openvino as ov
from openvino import opset8
from openvino import opset13 as ops
from openvino.passes import ModelPass

from ovpasses.modes import OptionChoice, SlidingWindow
from ovpasses._ov import SDPA_TYPE, constant_values, copy_runtime_info
from ovpasses.analysis.cache_chain import find_cache_chains, variable_id
from ovpasses.analysis.kv_sharing import BOUND_SUFFIX
from ovpasses.features.sliding_window.cache_nodes import CacheNodes, CacheRefusal, cache_nodes
from ovpasses.features.sliding_window.caches import SlidingWindowCaches
from ovpasses.errors import PassInvariantError
from ovpasses.features.sliding_window.masks import MASK_PORT
from ovpasses.passes.gqa_expand import elide_single_head_expand, numpy_expand
from ovpasses.features.sliding_window.mask_columns import narrow_key_columns
from ovpasses.rules import Rule, RulePlan

log = logging.getLogger(__name__)

RT_BOUNDED = "ovpasses_sliding_window_bound"   # on each node the pass makes: the variable it bounds
KEYS_SUFFIX = "/sliding_window_keys"
CHECK_SUFFIX = "/lost_positions_check"
INT64_MAX = np.iinfo(np.int64).max


def _i64(values) -> ov.Node:
    return ops.constant(np.asarray(values, np.int64).reshape(-1))


class SlidingWindowKVCacheBounding(Rule, ModelPass):
    """Bound the caches ``plan.bounded`` names (a :class:`SlidingWindowCaches` of this model), re-sourcing
    lengths from ``plan.reference`` (or, with none, from the lengths of ``plan.context_inputs``). ``self.changed`` lists the variable ids changed.

    A ModelPass: one rewrite spans a cache's chain, its GQA path, its readers' masks and the reference
    cache elsewhere in the graph. It finds each chain with the analysis' pattern
    (:func:`~ovpasses.analysis.cache_chain.cache_chain_pattern`) and trusts the analysis for what the pattern cannot say (the path
    from the Concat); a cache whose graph no longer matches the plan raises.
    """

    NAME = "SlidingWindowKVCacheBounding"
    ACTION = "bounded"   # the SDPA action (plan.decisions.Action) it carries out
    REANALYSES = True
    CHANGES_CACHES = True
    ONLY_WITH = OptionChoice("sliding_window", SlidingWindow.BOUNDED)   # the option that turns it on
    DESCRIPTION = ("caches only sliding-window attention reads keep their last W-1 "
                   "positions")

    @classmethod
    def from_plan(cls, part: RulePlan) -> SlidingWindowKVCacheBounding:
        """The caches the plan bounds (:class:`~ovpasses.features.sliding_window.caches.SlidingWindowCaches`)."""
        return cls(part.data)

    def __init__(self, plan: SlidingWindowCaches) -> None:
        ModelPass.__init__(self)
        self.plan = plan
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}
        self.gqa_elided = 0   # SDPA inputs that now read a one-head cache without the GQA expand
        self.gqa_numpy = 0    # GQA expands of several KV heads now broadcast in numpy mode from their own input

    def run_on_model(self, model: ov.Model) -> bool:
        if not self.plan.bounded:
            return False
        wanted = set(self.plan.bounded) | ({self.plan.reference} if self.plan.reference is not None else set())
        chains = find_cache_chains(model, wanted, f"{self.NAME}.cache_chain")
        missing = sorted(wanted - set(chains))
        if missing:
            raise PassInvariantError(f"{self.NAME}: the plan names cache {', '.join(missing)}, and the model has "
                                     "no cache chain of it")
        past_length = self._past_length(model, chains)
        masks: dict[tuple[ov.Output, str], ov.Output] = {}   # (mask, K variable) -> its keys' columns
        # before the bounding rebuilds any expand: every SDPA that reads a one-head cache drops its expand
        readers = set(self.plan.windows)
        for sdpa in model.get_ordered_ops():
            if sdpa.get_friendly_name() in readers and sdpa.get_type_name() == SDPA_TYPE:
                self.gqa_elided += sum(elide_single_head_expand(sdpa, port) for port in (1, 2))
        for vid, bounded in self.plan.bounded.items():
            nodes = cache_nodes(*chains[vid])
            if isinstance(nodes, CacheRefusal):
                raise PassInvariantError(f"{self.NAME}: cache {vid} no longer takes the bounding: {nodes.message}")
            made = self._bound(nodes, bounded.keep, past_length.output(0))
            for sdpa, port in nodes.readers:
                if port == 1:
                    made += self._slice_mask(sdpa, nodes, bounded.window, past_length.output(0), masks)
            for node in made:
                node.get_rt_info()[RT_BOUNDED] = vid
            self.changed.append(vid)
            log.debug("%s: %s keeps its last %d positions (window %d)", self.NAME, vid, bounded.keep, bounded.window)
        # after the bounding (whose analysis refuses a ShapeOf past a cache's Concat): the expands that remain
        unfused = set(self.plan.unfused_readers)
        for sdpa in model.get_ordered_ops():
            if sdpa.get_friendly_name() in unfused and sdpa.get_type_name() == SDPA_TYPE:
                self.gqa_numpy += sum(numpy_expand(sdpa, port) for port in (1, 2))
        model.validate_nodes_and_infer_types()
        return True

    def _past_length(self, model: ov.Model, chains: dict) -> ov.Node:
        """The past length [1] (i64) as the model was exported: from the reference cache's past, or, where every
        cache is bounded, the context input's length less the new tokens (a bounded cache's new positions)."""
        if self.plan.reference is not None:
            ref_concat = chains[self.plan.reference][0]
            ref_axis = ref_concat.get_attributes()["axis"] % ref_concat.get_output_partial_shape(0).rank.get_length()
            # Gather(ShapeOf(past), scalar axis): the form of the exporters' past length, which openvino's
            # PagedAttention converter recognises and replaces (another form keeps reading a state it removes)
            past_length_scalar = ops.gather(ops.shape_of(ref_concat.input_value(0), "i64"),
                                            ops.constant(np.int64(ref_axis)), ops.constant(np.int64(0)))
            past_length = ops.unsqueeze(past_length_scalar, _i64([0]))
            past_length.set_friendly_name(f"{ref_concat.get_friendly_name()}/past_length")
            return past_length
        ports = {name: next((p for p in model.inputs if name in p.get_names()), None) for name in self.plan.context_inputs}
        if None in ports.values():
            raise PassInvariantError(f"{self.NAME}: the plan reads the context length from inputs "
                                     f"{', '.join(self.plan.context_inputs)}, and the model lacks one")
        # only what feeds the masks, the positions and the GQA shapes reads it: openvino's PagedAttention
        # converter drops them with the masks, and then the attention_mask input, as it does the exported mask's
        context, tokens = (ops.gather(ops.shape_of(ports[name], "i64"), _i64([1]), _i64([0]))
                           for name in self.plan.context_inputs)
        past_length = ops.subtract(context, tokens)
        past_length.set_friendly_name(f"{self.plan.context_inputs[0]}/past_length")
        return past_length

    def _bound(self, nodes: CacheNodes, keep: int, past_length: ov.Output) -> list[ov.Node]:
        made = unbounded_shapes(nodes, past_length)
        # the stored value: the last `keep` positions
        stored = nodes.stored.get_source_output()
        window = opset8.slice(stored, _i64([-keep]), _i64([INT64_MAX]), _i64([1]), _i64([nodes.axis]))
        window.set_friendly_name(nodes.concat.get_friendly_name() + BOUND_SUFFIX)
        copy_runtime_info(nodes.assign, window)
        nodes.stored.replace_source_output(window.output(0))
        made.append(window)
        return made + own_length_broadcasts(nodes, self.NAME)

    def _slice_mask(self, sdpa: ov.Node, nodes: CacheNodes, window: int, past_length: ov.Output,
                    masks: dict[tuple[ov.Output, str], ov.Output]) -> list[ov.Node]:
        return slice_mask(self.NAME, sdpa, nodes, window, past_length, masks,
                          ops.gather(ops.shape_of(nodes.concat, "i64"), _i64([nodes.axis]), _i64([0])))


def failing_check(flag: ov.Node) -> ov.Node:
    """Zeros of shape [2, 1] that fail the inference when ``flag`` (i64 [1]) is 1: the Concat of a [1, 1] and a
    [1, 2] tensor on axis 0 (measured on 2026.0.0 and 2026.4.1: the CPU plugin checks Concat's shapes at run
    time; it does not check a Reshape's element count or an Add's broadcast)."""
    zeros = ops.broadcast(_i64(0), ops.concat([_i64([1]), ops.add(flag, _i64([1]))], 0))
    return ops.concat([ops.broadcast(_i64(0), _i64([1, 1])), zeros], 0)


def slice_mask(pass_name: str, sdpa: ov.Node, nodes: CacheNodes, window: int, past_length: ov.Output,
               masks: dict[tuple[ov.Output, str], ov.Output], key_length: ov.Node,
               extra_checks: tuple[ov.Node, ...] = (), columns: ov.Node | None = None,
               narrow: bool = True) -> list[ov.Node]:
    """Give ``sdpa`` (which reads ``nodes``' cache as K) the mask columns of its keys: the last ``key_length``
    (P+n: the positions the cache holds and the new ones). ``extra_checks`` (:func:`failing_check` nodes) are
    added to the columns' start, so that the inference runs them. ``columns``, the mask's column count
    computed without the mask (T+n), builds the columns from the mask's inputs
    (:func:`~ovpasses.features.sliding_window.mask_columns.narrow_key_columns`), so that the whole mask is
    never computed for these readers; without it, with ``narrow`` False, or for a mask the walk does not know, the
    columns are a Slice of the whole mask. Returns the nodes made."""
    if sdpa.get_input_size() <= MASK_PORT:
        raise PassInvariantError(f"{pass_name}: SDPA '{sdpa.get_friendly_name()}' has no mask; the plan "
                                 "bounds only caches read under a sliding-window mask")
    mask = sdpa.input_value(MASK_PORT)
    key = (mask, variable_id(nodes.read_value))
    if key in masks:
        sdpa.input(MASK_PORT).replace_source_output(masks[key])
        return []
    # one Slice on the Select: openvino's PagedAttention converter reads the window only from
    # Slice(Select) at the SDPA (measured: 2026.0.0 with SlidingWindowMaskSliceInsertion's Slice, 2026.4.1
    # with the Slice the VLM export writes; a Slice on that Slice loses the window)
    source, stop = mask, None
    if (columns_slice := _columns_slice(mask.get_node())) is not None:
        source, stop = columns_slice.input_value(0), columns_slice.input_value(2)
    name = f"{nodes.concat.get_friendly_name()}"
    axis = _i64([nodes.axis])
    from_states = columns is not None
    if columns is None:
        columns = ops.gather(ops.shape_of(source, "i64"), _i64([-1]), _i64([0]))
    end = columns if stop is None else ops.minimum(ops.convert(stop, ov.Type.i64), columns)
    # positions the mask needs from the past: min(T, W-1); the cache holds `held`. Fewer: the check fails the
    # inference, so no step runs on a cache that lost them
    held = ops.gather(ops.shape_of(nodes.chain[-1].output(0), "i64"), axis, _i64([0]))
    needed = ops.minimum(past_length, _i64([window - 1]))
    lost = ops.convert(ops.less(held, needed), ov.Type.i64)
    check = failing_check(lost)
    check.set_friendly_name(name + CHECK_SUFFIX)
    if from_states and stop is None:
        # the columns [T - P, T + n): from the past length and the positions held alone, both known from the
        # states before any layer runs, so that the mask is built where the exported one was (a start computed
        # from the new keys' length waits for layer 0's K projection)
        start, end = ops.subtract(past_length, held), None
    else:
        start = ops.subtract(end, key_length)
    for each in (check, *extra_checks):
        start = ops.add(ops.reduce_sum(each, _i64([0]), keep_dims=False), start)
    narrowed = narrow_key_columns(source, start.output(0), None if end is None else end.output(0)) \
        if from_states and narrow else None
    if narrowed is None:
        # a mask the walk does not know: its columns [start, T + n) sliced out of it (end None: the narrowing
        # wanted every column from start, which the Slice needs as the mask's column count)
        keys = opset8.slice(source, start, columns if end is None else end, _i64([1]), _i64([-1]))
        built: list[ov.Node] = []
    else:
        keys, built = narrowed[0].get_node(), narrowed[1]
        if columns_slice is not None:
            # the mask was Slice(Select): keep that form (a Slice of every column) for openvino's
            # PagedAttention converter of 2026.0 - 2026.2, which reads the window only there
            keys = opset8.slice(narrowed[0], _i64([0]), _i64([INT64_MAX]), _i64([1]), _i64([-1]))
            built.append(keys)
    keys.set_friendly_name(name + KEYS_SUFFIX)
    made = [key_length, columns, *([] if end is None else [end]), held, needed, lost, check, start, keys, *built]
    copy_runtime_info(mask.get_node(), made)
    masks[key] = keys.output(0)
    sdpa.input(MASK_PORT).replace_source_output(keys.output(0))
    return made


def unbounded_shapes(nodes: CacheNodes, past_length: ov.Output) -> list[ov.Node]:
    """Replace every ShapeOf on ``nodes``' chain or Concat by the shape the cache has unbounded: its sequence
    element ``past_length`` (on the chain) or ``past_length + n`` (on the Concat). Returns the nodes made."""
    made: list[ov.Node] = []
    axis = nodes.axis
    # every shape read from the chain or the Concat: the shape unbounded
    for shape_of in nodes.shape_ofs:
        source = shape_of.input_value(0)
        if source.get_node() is nodes.concat:
            base = ops.shape_of(nodes.new, "i64")
            length = ops.add(past_length, ops.gather(base, _i64([axis]), _i64([0])))
            made += [base, length]
        else:
            base = ops.shape_of(source, "i64")
            length = past_length
            made.append(base)
        shape = opset8.scatter_update(base, _i64([axis]), length, _i64([0]))
        made.append(shape)
        output_type = shape_of.get_output_element_type(0)
        if output_type != ov.Type.i64:
            shape = ops.convert(shape, output_type)
            made.append(shape)
        copy_runtime_info(shape_of, made)
        shape.set_friendly_name(shape_of.get_friendly_name())
        shape_of.output(0).replace(shape.output(0))
    return made


def own_length_broadcasts(nodes: CacheNodes, pass_name: str) -> list[ov.Node]:
    """Make each GQA Broadcast on ``nodes``' path take its sequence length from its own input (a 1 in its
    target's sequence element, bidirectional). Returns the nodes made."""
    made: list[ov.Node] = []
    # the GQA broadcast: its sequence length from its own input (one that no SDPA reads any more is dead)
    for broadcast, out_axis in nodes.broadcasts:
        if not broadcast.output(0).get_target_inputs():
            continue
        target = broadcast.input_value(1)
        length = target.get_partial_shape()[0].get_length()
        position = out_axis - (broadcast.get_output_partial_shape(0).rank.get_length() - length)
        constant = target.get_node().get_data() if target.get_node().get_type_name() == "Constant" else None
        if 0 <= position and constant is not None and int(constant.reshape(-1)[position]) == 1 \
                and broadcast.get_attributes()["mode"] == "bidirectional":
            continue   # takes its input's length already
        if not 0 <= position < length:
            raise PassInvariantError(f"{pass_name}: Broadcast '{broadcast.get_friendly_name()}' has no target "
                                     f"element for the sequence axis {out_axis}")
        one = ops.constant(np.array([1], target.get_element_type().to_dtype()))
        new_target = opset8.scatter_update(target, _i64([position]), one, _i64([0]))
        replacement = ops.broadcast(broadcast.input_value(0), new_target, broadcast_spec="BIDIRECTIONAL")
        copy_runtime_info(broadcast, [new_target, replacement])
        replacement.set_friendly_name(broadcast.get_friendly_name())
        broadcast.output(0).replace(replacement.output(0))
        made += [new_target, replacement]
    return made


def _columns_slice(node: ov.Node) -> ov.Node | None:
    """``node`` when it is ``Slice(mask, 0, stop, 1, last axis)`` (the columns ``[0, stop)`` of a mask, as
    SlidingWindowMaskSliceInsertion and some exporters write it), else None."""
    if node.get_type_name() != "Slice" or node.get_input_size() != 5:
        return None
    rank = node.get_input_partial_shape(0).rank
    values = [constant_values(node.input_value(i)) for i in (1, 3, 4)]
    if rank.is_dynamic or any(v is None for v in values):
        return None
    start, step, axes = values
    last = rank.get_length() - 1
    return node if list(start) == [0] and list(step) == [1] and [a % (last + 1) for a in axes] == [last] else None


