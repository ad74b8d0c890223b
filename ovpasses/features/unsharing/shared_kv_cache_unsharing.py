"""SharedKVCacheUnsharing: give each borrower of a shared KV cache a cache of its own.

Why: the CPU plugin fuses ReadValue -> [Convert] -> [Gather(beam_idx)] -> Concat(past, new) ->
[GQA broadcast] -> SDPA with its Assign into one stateful kernel only when that cache has one reader.
In a KV-shared decoder (Gemma 3n, Gemma 4) the borrowers read their owner's Concat, so neither the
owner nor any borrower is fused: every decode step copies the whole cache through Gather and Concat
and runs attention decomposed. This pass trades memory for that: each borrower gets its own variable
that it fills with the same values the owner stores (the owner's new K/V every step), so every cache
has one reader and the plugin can fuse every layer. The model stays the same function of its
inputs; the extra state costs ``bytes_per_token`` per new variable (see :class:`UnsharedCache`).

The graph it is about, for a cache variable ``v`` with owner layer ``o`` and borrower layer ``b``
(``k_cache_BHkvSD`` is the cache in [batch, KV heads, sequence, head size]; BSHD caches alike)::

    Before:
      ReadValue(v) -> [Convert] -> [Gather(beam_idx)] -> Concat(past, new_o) -> [Convert] -> Assign(v)
                                                             |  k_cache_BHkvSD
                                              [Transpose] [Unsqueeze -> Broadcast -> Reshape]
                                                   |                     |
                                              SDPA o (K)            SDPA b (K)

    After:
      ReadValue(v)    -> [Convert] -> [Gather(beam_idx)] -> Concat(past, new_o)   -> [Convert] -> Assign(v)
                                                                 |  -> ... -> SDPA o (K)
      ReadValue(v/b)  -> [Convert] -> [Gather(beam_idx)] -> Concat(past_b, new_o) -> [Convert] -> Assign(v/b)
        (initialiser of ReadValue(v))                            |  -> ... -> SDPA b (K)   (copies of b's path)

The variable ``v/b`` has the same shape and element type as ``v``; its ReadValue takes the same
initialiser input, and it is appended to every step with the owner's new K/V, so it holds what ``v``
holds. A borrower that builds its own Gather/Concat on the owner's ReadValue (off the Assign's path)
is handled alike: its path is copied onto ``ReadValue(v/b)`` and its Concat is stored by
``Assign(v/b)``.

What is copied (the borrower's *cone*) is defined from the graph: the nodes on data paths from the
owner's ReadValue to the borrower's K or V port, where a data path does not cross an SDPA, a ShapeOf,
an Assign or a Result (the KV-sharing analysis' definition of reading a cache). Inputs of the cone
from outside it (beam_idx, the owner's new K/V, constants, shapes computed by a ShapeOf) are shared
with the owner, never copied. Exactly one node of the cone must match the cache pattern
``ReadValue -> [Convert] -> [Gather] -> Concat(past, new)``: it is what the new Assign stores.

A cache stays shared where a copy would turn a model that runs into one the CPU plugin cannot run
(its ReadValue has no initialiser, :data:`NO_INITIALISER`; a reader takes a scalar mask,
:data:`SCALAR_MASK`), and where a sub-graph operation reads it.

Which caches and borrowers to unshare is data the pass consumes
(:func:`~ovpasses.features.unsharing.plan.plan_unsharing` makes it from a
:class:`~ovpasses.analysis.KVSharingAnalysis`). The new variable's id is ``<cache variable>/<borrower label>``
(:func:`borrower_labels`): deterministic, and a second run finds no shared cache and changes nothing, also on a model read back from its IR files.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

import openvino as ov
from openvino import opset13 as ops
from openvino.passes import Matcher, ModelPass
from openvino.utils.node_factory import NodeFactory

from ovpasses.modes import KVSharing, OptionChoice
from ovpasses._ov import KEY_PORT, SDPA_TYPE, VALUE_PORT, copy_runtime_info
from ovpasses.analysis.cache_chain import cache_chain_pattern, variable_id
from ovpasses.analysis.kv_sharing import SHAPE_ONLY, STOP
from ovpasses.errors import PassInvariantError
from ovpasses.features.unsharing.plan import (  # noqa: F401 - the reasons, as the pass reports them
    NO_CACHE_CONCAT,
    NO_INITIALISER,
    NO_OWNER,
    SCALAR_MASK,
    SEVERAL_CACHE_CONCATS,
    SEVERAL_READ_VALUES,
    SUBGRAPH_READER,
    UnsharedCache,
    UnsharingPlan,
    borrower_labels,
    plan_unsharing,
)
from ovpasses.rules import NOT_MATCHED, Planned, Rule, RulePlan, Status

log = logging.getLogger(__name__)

RT_UNSHARED = "ovpasses_unshared_from"   # on each node the pass makes: the variable it copies

class SharedKVCacheUnsharing(Rule, ModelPass):
    """Give each borrower in ``targets`` (cache variable id -> borrower SDPA friendly names, usually
    :func:`plan_unsharing`'s) a KV cache variable of its own.

    A ModelPass, not a MatcherPass: it adds variables and sinks to the model, which a matcher callback
    cannot reach. It still finds the caches with a pattern (:func:`~ovpasses.analysis.cache_chain.cache_chain_pattern`) and reads them
    through the pattern value map. ``changed`` lists the variables it added (``caches``: what each copies and costs); ``refused`` says, per
    ``"<variable> for <borrower>"`` (or per variable, when the reason holds for the whole cache), why a
    planned copy was not made (the model is then left as it was for that borrower).
    """

    NAME = "SharedKVCacheUnsharing"
    ACTION = "unshared"   # the SDPA action (plan.decisions.Action) it carries out
    REANALYSES = True
    CHANGES_CACHES = True
    ONLY_WITH = OptionChoice("kv_sharing", KVSharing.UNSHARE)   # the option that turns it on
    DESCRIPTION = ("gives each borrower of a shared cache a cache of its own, so every SDPA "
                   "can fuse")

    @classmethod
    def from_plan(cls, part: RulePlan) -> SharedKVCacheUnsharing:
        """The plan's targets (:class:`~ovpasses.features.unsharing.plan.UnsharingPlan`)."""
        return cls(part.data.targets)

    def __init__(self, targets: Mapping[str, Sequence[str]]) -> None:
        ModelPass.__init__(self)
        self.targets = {vid: tuple(borrowers) for vid, borrowers in targets.items() if borrowers}
        self.changed: list[str] = []
        self.caches: list[UnsharedCache] = []
        self.refused: dict[str, str] = {}

    def outcome(self, planned: Planned) -> tuple[Status, str]:
        """A planned borrower (``marks``: the cache it borrows) is applied when it reads a copy of its own now."""
        vid = planned.changed_names[0]
        if any(c.borrower == planned.node and c.source_variable == vid for c in self.caches):
            return Status.APPLIED, planned.reason
        reason = self.refused.get(f"{vid} for {planned.node}", self.refused.get(vid, NOT_MATCHED))
        return Status.REFUSED, reason

    def run_on_model(self, model: ov.Model) -> bool:
        if not self.targets:
            return False
        ordered = model.get_ordered_ops()
        order = {node: index for index, node in enumerate(ordered)}
        chain = cache_chain_pattern(self.targets)
        matcher = Matcher(chain.concat, f"{self.NAME}.cache_chain")
        concats: dict[str, list[ov.Node]] = {}     # variable id -> its cache Concats (owner's, off-path ones)
        read_values: dict[str, list[ov.Node]] = {}
        sdpa: dict[str, ov.Node] = {}
        for node in ordered:
            type_name = node.get_type_name()
            if type_name == "Concat" and matcher.match(node.output(0)):
                rv = matcher.get_pattern_value_map()[chain.read_value].get_node()
                concats.setdefault(variable_id(rv), []).append(node)
            elif type_name == "ReadValue":
                read_values.setdefault(variable_id(node), []).append(node)
            elif type_name == SDPA_TYPE:
                sdpa[node.get_friendly_name()] = node
        infos = {var.get_info().variable_id: var.get_info() for var in model.get_variables()}
        labels = borrower_labels(sdpa)

        new_variables, new_sinks = [], []
        for vid, borrowers in self.targets.items():
            rvs = read_values.get(vid, [])
            if len(rvs) != 1:
                self.refused[vid] = SEVERAL_READ_VALUES if rvs else "the model has no ReadValue of it"
                continue
            rv = rvs[0]
            if rv.get_input_size() == 0:
                self.refused[vid] = NO_INITIALISER
                continue
            region = _cache_region(rv)
            if any(_scalar_mask(reader) for reader in _readers(region)):
                self.refused[vid] = SCALAR_MASK
                continue
            for borrower in borrowers:
                node = sdpa.get(borrower)
                if node is None:
                    raise PassInvariantError(f"{self.NAME}: the plan names SDPA '{borrower}' as a borrower of "
                                             f"'{vid}', and the model has no SDPA of that name")
                ports = tuple(p for p in (KEY_PORT, VALUE_PORT) if node.input_value(p).get_node() in region)
                cone = _cone(node, ports, region, rv)
                cache_concats = [c for c in concats.get(vid, []) if c in cone]
                if len(cache_concats) != 1:
                    self.refused[f"{vid} for {borrower}"] = SEVERAL_CACHE_CONCATS if cache_concats else NO_CACHE_CONCAT
                    continue
                new_vid = f"{vid}/{labels[borrower]}"
                if new_vid in infos:
                    raise PassInvariantError(f"{self.NAME}: variable '{new_vid}' (the copy of '{vid}' for "
                                             f"'{borrower}') already exists in the model")
                made = self._unshare(rv, infos[vid], new_vid, node, ports, sorted(cone, key=order.__getitem__),
                                     cache_concats[0], labels[borrower])
                if made is None:
                    continue
                variable, assign, record = made
                infos[new_vid] = variable.get_info()
                new_variables.append(variable)
                new_sinks.append(assign)
                self.caches.append(record)
                self.changed.append(record.variable_id)
                log.debug("%s: %s reads %s, a copy of %s", self.NAME, borrower, new_vid, vid)
        if not new_sinks:
            return False
        model.add_variables(new_variables)
        model.add_sinks(new_sinks)
        model.validate_nodes_and_infer_types()
        return True

    def _unshare(self, rv: ov.Node, info, new_vid: str, borrower: ov.Node, ports: tuple[int, ...],
                 cone: list[ov.Node], cache_concat: ov.Node, label: str):
        """Build ``ReadValue(new_vid)``, copies of ``cone`` on it and ``Assign(new_vid)``; re-point the
        borrower's ``ports``. Returns (variable, assign, record), or None (reason in ``refused``) when a
        node of the cone cannot be copied."""
        from openvino.op.util import Variable, VariableInfo

        vid = info.variable_id
        new_info = VariableInfo()
        new_info.data_shape = info.data_shape
        new_info.data_type = info.data_type
        new_info.variable_id = new_vid
        variable = Variable(new_info)
        past_rv = ops.read_value(rv.input_value(0), variable)   # the same initialiser input as the owner's
        copies: dict[tuple[ov.Node, int], ov.Output] = {(rv, 0): past_rv.output(0)}
        made = [past_rv]
        try:
            for node in cone:
                inputs = [copies.get((src.get_node(), src.get_index()), src)
                          for src in (node.input_value(i) for i in range(node.get_input_size()))]
                copy = _factory(node.get_type_info().version_id).create(node.get_type_name(), inputs,
                                                                        node.get_attributes())
                made.append(copy)
                for index in range(node.get_output_size()):
                    copies[(node, index)] = copy.output(index)
        except Exception as error:  # noqa: BLE001 - a node OpenVINO's factory cannot rebuild: leave it shared
            self.refused[f"{vid} for {borrower.get_friendly_name()}"] = (
                f"cannot copy {node.get_type_name()} '{node.get_friendly_name()}' of its path: "
                f"{str(error).strip().splitlines()[-1] if str(error).strip() else type(error).__name__}")
            made.clear()
            copies.clear()
            return None
        # the copy's Concat(past, owner's new K/V), in the owner's layout ([B, Hkv, S, D] or [B, S, Hkv, D])
        cache_copy = copies[(cache_concat, 0)]
        stored = cache_copy.get_node()
        if cache_copy.get_element_type() != info.data_type:
            stored = ops.convert(cache_copy, info.data_type)
            made.append(stored)
        assign = ops.assign(stored, variable)
        made.append(assign)

        copy_runtime_info(rv, made[0])
        for node, copy in zip(cone, made[1:]):
            copy_runtime_info(node, copy)
            copy.set_friendly_name(f"{node.get_friendly_name()}/{label}")
        owner_assign = _assign_of(cache_concat)
        if owner_assign is not None:
            copy_runtime_info(owner_assign, made[len(cone) + 1:])
        made[0].set_friendly_name(f"{rv.get_friendly_name()}/{label}")
        for node in made[len(cone) + 1:]:
            node.set_friendly_name(f"{cache_concat.get_friendly_name()}/{label}/{node.get_type_name().lower()}")
        for node in made:
            node.get_rt_info()[RT_UNSHARED] = vid
        for port in ports:
            source = borrower.input_value(port)
            borrower.input(port).replace_source_output(copies[(source.get_node(), source.get_index())])

        axis = cache_concat.get_attributes()["axis"]
        pshape = cache_concat.get_output_partial_shape(0)
        rank = pshape.rank.get_length()
        axis %= rank
        size = info.data_type.size
        for dim_index in range(1, rank):   # dim 0 is the batch: counted as 1
            if dim_index == axis:
                continue
            dim = pshape[dim_index]
            size = size * dim.get_length() if size is not None and dim.is_static else None
        record = UnsharedCache(variable_id=new_vid, source_variable=vid, borrower=borrower.get_friendly_name(),
                               ports=ports, element_type=info.data_type.get_type_name(),
                               shape=str(info.data_shape), sequence_axis=axis, bytes_per_token=size)
        return variable, assign, record


_FACTORIES: dict[str, NodeFactory] = {}


def _factory(opset: str) -> NodeFactory:
    """OpenVINO's factory of ``opset``'s operations, which builds a node from its type name, inputs and
    the attribute dictionary ``get_attributes()`` returns: a copy of any cone node with new inputs."""
    if opset not in _FACTORIES:
        _FACTORIES[opset] = NodeFactory(opset)
    return _FACTORIES[opset]



def _cache_region(rv: ov.Node) -> set[ov.Node]:
    """Every node that the ReadValue's data reaches over data edges, not entering an SDPA, a ShapeOf,
    an Assign or a Result (they read the cache, or only its shape, and end a path). Iterative."""
    region = {rv}
    pending = [rv]
    while pending:
        node = pending.pop()
        for output in node.outputs():
            for target in output.get_target_inputs():
                consumer = target.get_node()
                type_name = consumer.get_type_name()
                if type_name == SDPA_TYPE or type_name in SHAPE_ONLY or type_name in STOP or consumer in region:
                    continue
                region.add(consumer)
                pending.append(consumer)
    return region


def _readers(region: set[ov.Node]) -> list[ov.Node]:
    """The SDPAs that read a node of ``region`` as K or V."""
    return [target.get_node() for node in region for output in node.outputs()
            for target in output.get_target_inputs()
            if target.get_node().get_type_name() == SDPA_TYPE and target.get_index() in (KEY_PORT, VALUE_PORT)]


def _scalar_mask(sdpa: ov.Node) -> bool:
    rank = sdpa.get_input_partial_shape(3).rank if sdpa.get_input_size() > 3 else None
    return rank is not None and rank.is_static and rank.get_length() == 0


def _cone(sdpa: ov.Node, ports: Sequence[int], region: set[ov.Node], rv: ov.Node) -> set[ov.Node]:
    """The nodes of ``region`` on a path from ``rv`` into ``ports`` of ``sdpa`` (``rv`` excluded)."""
    cone: set[ov.Node] = set()
    pending = [sdpa.input_value(port).get_node() for port in ports]
    while pending:
        node = pending.pop()
        if node == rv or node in cone or node not in region:
            continue
        cone.add(node)
        pending.extend(node.input_value(i).get_node() for i in range(node.get_input_size()))
    return cone


def _assign_of(concat: ov.Node) -> ov.Node | None:
    """The Assign that stores ``concat`` (directly or through Converts), if any."""
    pending = [concat]
    while pending:
        for target in pending.pop().output(0).get_target_inputs():
            node = target.get_node()
            if node.get_type_name() == "Assign":
                return node
            if node.get_type_name() == "Convert":
                pending.append(node)
    return None
