"""AttentionHeadPadding: every KV cache and attention layer gets one KV-head count and one head size, exactly.

Why: openvino_genai's continuous batching (and OpenVINO Model Server) turns each SDPA into a
PagedAttention node, and the CPU PagedAttention of openvino 2025.2 - 2026.2 caches one executor per
model keyed by precision only: layers whose KV heads or head size differ from the first's run its
kernels and decode garbage (Gemma 4 E2B/E4B: head sizes 256 and 512; 26B/31B: 16 KV heads x 256 and
4 x 512). With one layout there is one executor, and it is the right one. The layout comes from
:func:`ovpasses.features.paged_heads.analysis.analyze_paged_heads` (``Hkv*`` KV heads, head size ``D*``).

For each cache that is not ``Hkv* x D*`` (``k_cache_BHkvSD``; ``r = Hkv* / Hkv``; ``g = H / Hkv*`` for a
reader with ``H`` query heads, ``E`` its Q/K head size, ``Ev`` its V head size)::

    Before:
      ReadValue(v, init [B,Hkv,0,D]) -> Gather(beam) -> Concat(past, k_new_BHkvLD) -> Assign(v)
                                                           |       |
                                        ShapeOf -> [B,Hkv,S,D]     Unsqueeze -> Broadcast -> Reshape [B,H,S,D]
                                                                          |
                                  q_BHLE ------------------------------> SDPA(q, k, v, mask, scale) -> out_BHLEv

    After:
      ReadValue(v [?,Hkv*,?,D*], heads(init)) -> Gather(beam) -> Concat(past, heads(k_new_BHkvLD)) -> Assign(v)
                                                           |       |
           ShapeOf * [1,0,1,0] + [0,Hkv,0,D] -> [B,Hkv,S,D]       Unsqueeze(2) -> Broadcast([1,1,g,1,1],
                                                                   bidirectional) -> Reshape([0,H,-1,D*])
                                                                          |
      Pad(q_BHLE, end [0,0,0,D*-E]) ----------------------------> SDPA(q, k, v, mask, scale or 1/sqrt(E))
                                                                   -> Slice(out_BHLD*, [0, Ev), axis 3) -> ...

    heads(x_BHkvLD) = Pad(Gather(x, repeat(arange(Hkv), r), axis 1), end [0,0,0,D*-D])   (only what is needed)

* Padded K columns are zero, so ``Q Kᵀ`` over ``D*`` is ``Q Kᵀ`` over ``D``; padded V columns are zero,
  so the output's columns past ``Ev`` are zero and the Slice drops them. The scale is the SDPA's own;
  an SDPA without one gets ``1/sqrt(E)`` explicitly (the specification's default from the original
  Q, never from the padded one), and a scalar zero mask when it had none.
* Repeating KV heads in order keeps each query head on the same KV head (see the analysis module).
* What the exporter derives from the cache's shape (ShapeOf on the chain or the Concat: past length,
  other layers' GQA targets) gets the shape it had: the static ``Hkv`` and ``D`` put back.
* The GQA path of each reader is rebuilt from the Concat (one per query-head count and type: readers
  of one cache share it, as the exporter's borrowers did); its sequence length comes from its data.
* The variable's shape becomes ``[?, Hkv*, ?, D*]``: the stateful model's state and the paged caches
  the converter makes grow by ``Hkv* D* / (Hkv D)`` for this cache (see ``PagedHeads.bytes_per_token``).

Order matters: SDPAs without a scale are replaced first, while every shape is still consistent (a node
validates its inputs when it is made); a replaced SDPA stays a consumer of its inputs until it is freed,
so readers are then taken by friendly name. A second run finds every cache in one layout and changes
nothing (the analysis plans nothing). A ModelPass: one rewrite spans a cache chain, its variable, its
ShapeOf nodes and every reader.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import openvino as ov
from openvino import opset8
from openvino import opset13 as ops
from openvino.passes import ModelPass

from ovpasses import modes
from ovpasses._ov import KEY_PORT, MASK_PORT, SCALE_PORT, SDPA_TYPE, VALUE_PORT, copy_runtime_info
from ovpasses.analysis.cache_chain import find_cache_chains
from ovpasses.features.paged_heads.analysis import PagedHeads, padding_nodes
from ovpasses.errors import PassInvariantError
from ovpasses.rules import Rule, RulePlan

log = logging.getLogger(__name__)

RT_PADDED = "ovpasses_paged_heads"   # on each node the pass makes: "Hkv*xD*"
SUFFIX = "/paged_heads"


def _i64(values) -> ov.Node:
    return ops.constant(np.asarray(values, np.int64).reshape(-1))


class AttentionHeadPadding(Rule, ModelPass):
    """Pad the caches ``plan.padded`` names (a :class:`PagedHeads` of this model) to ``plan.target`` and
    rewrite their readers. ``self.changed`` lists the variable ids changed, ``self.layers`` the SDPAs."""

    NAME = "AttentionHeadPadding"
    REANALYSES = True   # the padded SDPAs are new nodes with other head counts
    ONLY_WITH = modes.OptionChoice("paged_heads", modes.PagedHeads.PAD)   # the option that turns it on
    DESCRIPTION = ("every KV cache and attention layer gets one KV-head count and head size "
                   "(paged CPU)")

    @classmethod
    def from_plan(cls, part: RulePlan) -> AttentionHeadPadding:
        """The padding plan of the step (:class:`~ovpasses.features.paged_heads.plan.PagedHeadsStep`)."""
        return cls(part.data.plan)

    def __init__(self, plan: PagedHeads) -> None:
        ModelPass.__init__(self)
        self.plan = plan
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}
        self.layers: list[str] = []

    def run_on_model(self, model: ov.Model) -> bool:
        wanted = self.plan.padded
        if not wanted:
            return False
        kv_heads, head_size = self.plan.target
        tag = f"{kv_heads}x{head_size}"
        chains = find_cache_chains(model, set(wanted), f"{self.NAME}.cache_chain")
        missing = sorted(set(wanted) - set(chains))
        if missing:
            raise PassInvariantError(f"{self.NAME}: the plan names cache {', '.join(missing)}, and the model has "
                                     "no cache chain of it")
        variables = {v.get_info().variable_id: v for v in model.get_variables()}
        made: list[ov.Node] = []
        # first, while every shape is still consistent: a scale for each changed SDPA without one
        changed = set(self.plan.changed_layers)
        for node in model.get_ordered_ops():
            if node.get_type_name() == SDPA_TYPE and node.get_friendly_name() in changed \
                    and node.get_input_size() <= SCALE_PORT:
                made += self._explicit_scale(node, self.plan.layers[node.get_friendly_name()].head_size)
        # an SDPA replaced above stays a consumer of its inputs until it is freed: readers are taken by name
        live = {n.get_friendly_name(): n for n in model.get_ordered_ops() if n.get_type_name() == SDPA_TYPE}
        expansions: dict[tuple, ov.Output] = {}
        readers: dict[str, ov.Node] = {}
        for vid in wanted:
            nodes = padding_nodes(*chains[vid])
            if isinstance(nodes, str):
                raise PassInvariantError(f"{self.NAME}: cache {vid} no longer takes the padding: {nodes}")
            layout = self.plan.caches[vid]
            made += self._pad_cache(nodes, layout.kv_heads, layout.head_size, variables[vid])
            for name, port in sorted({(sdpa.get_friendly_name(), port) for sdpa, port in nodes.readers}):
                made += self._rebuild_path(live[name], port, nodes.concat, expansions)
                readers[name] = live[name]
            self.changed.append(vid)
        for name, sdpa in readers.items():
            made += self._pad_query_and_slice(sdpa, self.plan.layers[name])
            self.layers.append(name)
        for node in made:
            node.get_rt_info()[RT_PADDED] = tag
        model.validate_nodes_and_infer_types()
        log.debug("%s: %d caches to %s, %d layers", self.NAME, len(self.changed), tag, len(self.layers))
        return True

    def _heads(self, x: ov.Output, kv_heads: int, head_size: int, name: str) -> tuple[ov.Output, list[ov.Node]]:
        """``x_BHkvLD`` in the target layout: KV heads repeated in order, then the head zero-padded."""
        target_heads, target_size = self.plan.target
        made = []
        if target_heads != kv_heads:
            indices = _i64(np.repeat(np.arange(kv_heads), target_heads // kv_heads))
            x = ops.gather(x, indices, ops.constant(np.int64(1))).output(0)
            x.get_node().set_friendly_name(f"{name}/kv_heads")
            made.append(x.get_node())
        if target_size != head_size:
            x = ops.pad(x, _i64([0, 0, 0, 0]), _i64([0, 0, 0, target_size - head_size]), "constant").output(0)
            x.get_node().set_friendly_name(f"{name}/head_size")
            made.append(x.get_node())
        return x, made

    def _pad_cache(self, nodes, kv_heads: int, head_size: int, variable) -> list[ov.Node]:
        made: list[ov.Node] = []
        concat_name = nodes.concat.get_friendly_name()
        # what the exporter reads from the cache's shape: the shape it had
        for shape_of in nodes.shape_ofs:
            dtype = shape_of.get_output_element_type(0).to_dtype()
            targets = list(shape_of.output(0).get_target_inputs())
            kept = ops.multiply(shape_of, ops.constant(np.array([1, 0, 1, 0], dtype)))
            original = ops.add(kept, ops.constant(np.array([0, kv_heads, 0, head_size], dtype)))
            original.set_friendly_name(shape_of.get_friendly_name() + SUFFIX)
            copy_runtime_info(shape_of, [kept, original])
            for target in targets:
                target.replace_source_output(original.output(0))
            made += [kept, original]
        # the new positions, and the initial value of the state
        new, nodes_made = self._heads(nodes.new, kv_heads, head_size, f"{concat_name}{SUFFIX}/new")
        copy_runtime_info(nodes.concat, nodes_made)
        nodes.concat.input(1).replace_source_output(new)
        made += nodes_made
        if nodes.read_value.get_input_size():
            init, nodes_made = self._heads(nodes.read_value.input_value(0), kv_heads, head_size,
                                           f"{nodes.read_value.get_friendly_name()}{SUFFIX}/init")
            copy_runtime_info(nodes.read_value, nodes_made)
            nodes.read_value.input(0).replace_source_output(init)
            made += nodes_made
        info = variable.get_info()
        dims = list(info.data_shape)
        dims[1], dims[3] = ov.Dimension(self.plan.target[0]), ov.Dimension(self.plan.target[1])
        info.data_shape = ov.PartialShape(dims)
        variable.update(info)
        return made

    def _rebuild_path(self, sdpa: ov.Node, port: int, concat: ov.Node,
                      expansions: dict[tuple, ov.Output]) -> list[ov.Node]:
        """K or V of ``sdpa`` from the padded Concat: ``g = H / Hkv*`` query heads per KV head."""
        target_heads, target_size = self.plan.target
        q_heads = self.plan.layers[sdpa.get_friendly_name()].q_heads
        element = sdpa.get_input_element_type(port)
        key = (concat.get_friendly_name(), q_heads, element)
        if key not in expansions:
            out, made = concat.output(0), []
            if q_heads != target_heads:
                unsqueezed = ops.unsqueeze(out, _i64([2]))
                broadcast = ops.broadcast(unsqueezed, _i64([1, 1, q_heads // target_heads, 1, 1]),
                                          broadcast_spec="BIDIRECTIONAL")
                reshaped = ops.reshape(broadcast, _i64([0, q_heads, -1, target_size]), special_zero=True)
                made += [unsqueezed, broadcast, reshaped]
                out = reshaped.output(0)
            if out.get_element_type() != element:
                converted = ops.convert(out, element)
                made.append(converted)
                out = converted.output(0)
            for index, node in enumerate(made):
                node.set_friendly_name(f"{concat.get_friendly_name()}{SUFFIX}/heads_{q_heads}/{index}")
            copy_runtime_info(sdpa.input_value(port).get_node(), made)
            expansions[key] = out
        else:
            made = []
        sdpa.input(port).replace_source_output(expansions[key])
        return made

    def _explicit_scale(self, sdpa: ov.Node, head_size: int) -> list[ov.Node]:
        """``sdpa`` with the specification's default scale, 1/sqrt(E) of the original Q, as an input: a
        padded Q would change the default."""
        element = sdpa.get_input_element_type(0)
        scale = ops.constant(np.array(1 / math.sqrt(head_size), element.to_dtype()))
        made: list[ov.Node] = [scale]
        if sdpa.get_input_size() > MASK_PORT:
            mask = sdpa.input_value(MASK_PORT)
        else:   # the specification allows a scalar zero: no mask
            mask = ops.constant(np.array(0, element.to_dtype())).output(0)
            made.append(mask.get_node())
        replacement = ops.scaled_dot_product_attention(sdpa.input_value(0), sdpa.input_value(KEY_PORT),
                                                       sdpa.input_value(VALUE_PORT), mask, scale,
                                                       causal=sdpa.get_attributes()["causal"])
        replacement.set_friendly_name(sdpa.get_friendly_name())
        made.append(replacement)
        copy_runtime_info(sdpa, made)
        sdpa.output(0).replace(replacement.output(0))
        return made

    def _pad_query_and_slice(self, sdpa: ov.Node, layer) -> list[ov.Node]:
        """Q padded to the target head size and the output sliced back to ``Ev``."""
        target_size = self.plan.target[1]
        name = sdpa.get_friendly_name()
        made: list[ov.Node] = []
        if layer.head_size != target_size:
            padded = ops.pad(sdpa.input_value(0), _i64([0, 0, 0, 0]), _i64([0, 0, 0, target_size - layer.head_size]),
                             "constant")
            padded.set_friendly_name(f"{name}{SUFFIX}/query")
            copy_runtime_info(sdpa, padded)
            sdpa.input(0).replace_source_output(padded.output(0))
            made.append(padded)
        if layer.v_head_size != target_size:
            targets = list(sdpa.output(0).get_target_inputs())
            sliced = opset8.slice(sdpa.output(0), _i64([0]), _i64([layer.v_head_size]), _i64([1]), _i64([3]))
            sliced.set_friendly_name(f"{name}{SUFFIX}/output")
            copy_runtime_info(sdpa, sliced)
            for target in targets:
                target.replace_source_output(sliced.output(0))
            made.append(sliced)
        return made
