"""SharedKVCacheDetection / analyze_kv_sharing against the builder's layouts and the exported
fixtures' ground truth (issue 3)."""

import json
import re
from pathlib import Path

import openvino as ov
import pytest
from openvino import opset13 as ops
from openvino.passes import Manager

import networkx as nx

from ovpasses.analysis import RT_OWNER_OF, RT_STATUS, RT_VARIABLES, KVSharingAnalysis, analyze_kv_sharing
from ovpasses.analysis.kv_sharing import layer_indices
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection
from testkit.graphs import (
    LOOP_NAME,
    LOOP_SDPA,
    CacheLoopSpec,
    StackSpec,
    build_cache_loop,
    build_stack,
    sharing_layout,
)

LAYOUTS = {
    "all_exclusive": dict(k_source=(0, 1, 2, 3)),
    "two_owners_two_borrowers": dict(k_source=(0, 1, 0, 1)),
    "gemma_8_4": dict(k_source=sharing_layout(8, 4)),
    "one_owner_three_borrowers": dict(k_source=(0, 1, 0, 0, 0)),
    "split_kv_sharing": dict(k_source=(0, 1, 0, 1), v_source=(0, 1, 1, 0)),
    "k_shared_v_own": dict(k_source=(0, 1, 0), v_source=(0, 1, 2)),
    "stateless_layer": dict(k_source=(0, None, 0, 3)),
}
VARIANTS = {
    "plain": dict(),
    "bshd_transpose": dict(layout="BSHD"),
    "gqa_bidirectional": dict(gqa_form="bidirectional"),
    "no_gqa": dict(kv_heads=4),
    "f16_cache_convert": dict(cache_type="f16"),
    "no_beam_gather": dict(beam_gather=False),
    "past_length_concat": dict(past_length_from=(0,), past_length_at="concat"),
    "past_length_gather": dict(past_length_from=(0,), past_length_at="gather"),
    "past_length_readvalue": dict(past_length_from=(0,), past_length_at="readvalue"),
    "mask_and_prescaled": dict(mask="bool", scale="prescaled"),
    "borrow_own_concat": dict(borrow_path="own_concat"),
    "borrow_own_concat_bshd_f16_cache": dict(borrow_path="own_concat", layout="BSHD", cache_type="f16"),
}
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "gemma4"


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_detection_equals_layout(layout, variant):
    spec = StackSpec(**LAYOUTS[layout], **VARIANTS[variant])
    analysis = analyze_kv_sharing(build_stack(spec))
    assert {name: info.status for name, info in analysis.sdpa.items()} == spec.expected_status()
    assert {vid: list(cache.sdpa) for vid, cache in analysis.caches.items()} == spec.readers()
    for vid, cache in analysis.caches.items():
        layer = int(vid.split(".")[1])
        assert cache.owner == spec.sdpa_name(layer), "the owner is the layer whose Concat feeds the Assign"
        assert set(cache.borrowers) == set(cache.sdpa) - {cache.owner}
        # a borrower that builds its own Gather/Concat on the owner's ReadValue is off the Assign's path
        expected_off_path = set(cache.borrowers) if spec.borrow_path == "own_concat" else set()
        assert set(cache.off_path_readers) == expected_off_path
    assert analysis.unhandled == []


@pytest.mark.parametrize("fixture", ["tiny8", "e2b35"])
def test_detection_on_fixture_equals_export_config(fixture):
    """The exported Gemma 4 IRs against the ground truth written from the model config at export time
    (reference.json: which layer owns a cache, which layer each borrower reads)."""
    truth = json.loads((FIXTURES / fixture / "reference.json").read_text())["kv_sharing"]
    source = {entry["layer"]: entry["kv_source_layer"] for entry in truth["layers"]}
    readers: dict[int, list[int]] = {}
    for layer, src in sorted(source.items()):
        readers.setdefault(src, []).append(layer)
    assert sorted(readers) == truth["cache_owners"]
    assert {str(layer): src for layer, src in source.items() if src != layer} == truth["borrowers"]

    analysis = analyze_kv_sharing(ov.Core().read_model(FIXTURES / fixture / "openvino_model.xml"))

    def layer_of(sdpa_name: str) -> int:
        return int(re.search(r"\blayers\.(\d+)\.", sdpa_name)[1])

    by_layer = {layer_of(name): info for name, info in analysis.sdpa.items()}
    assert sorted(by_layer) == sorted(source), "one SDPA per decoder layer"
    assert all(info.layer == layer for layer, info in by_layer.items())
    assert {layer: info.status for layer, info in by_layer.items()} == {
        layer: "shared" if len(readers[src]) > 1 else "exclusive" for layer, src in source.items()}
    for entry in truth["layers"]:
        variables = by_layer[entry["layer"]].kv_variables
        # variable ids are "<input name><output name>", e.g. past_key_values.2.keypresent.2.key
        assert sorted(re.match(r"past_key_values\.\d+\.(?:key|value)", v)[0] for v in variables) == \
            sorted(entry["ir_cache_inputs"])
    assert len(analysis.caches) == 2 * len(readers)
    for vid, cache in analysis.caches.items():
        owner = int(re.match(r"past_key_values\.(\d+)\.", vid)[1])
        assert layer_of(cache.owner) == owner
        assert sorted(map(layer_of, cache.borrowers)) == readers[owner][1:]
        assert cache.off_path_readers == ()
    assert analysis.unhandled == []


def test_shape_only_consumer_does_not_make_owner_shared():
    """A ShapeOf reading layer 0's cache reaches every later layer through the hidden state; it is not
    a read of the cache, so layer 0 stays exclusive (the naive forward walk gets this wrong)."""
    spec = StackSpec(k_source=(0, 1, 2, 3), past_length_from=(0,))
    analysis = analyze_kv_sharing(build_stack(spec))
    assert set(analysis.exclusive_sdpa) == {spec.sdpa_name(i) for i in range(4)}
    assert analysis.caches["past_key_values.0.key"].shape_consumers


def test_detection_pass_writes_runtime_info():
    spec = StackSpec(k_source=(0, 1, 0, None))
    model = build_stack(spec)
    detection = SharedKVCacheDetection()
    manager = Manager()
    manager.register_pass(detection)
    manager.run_passes(model)
    rt = {n.get_friendly_name(): n.get_rt_info() for n in model.get_ordered_ops()
          if n.get_type_name() == "ScaledDotProductAttention"}
    assert rt[spec.sdpa_name(0)][RT_STATUS].astype(str) == "shared"
    assert rt[spec.sdpa_name(0)][RT_OWNER_OF].astype(str) == "past_key_values.0.key,past_key_values.0.value"
    assert rt[spec.sdpa_name(2)][RT_OWNER_OF].astype(str) == ""
    assert rt[spec.sdpa_name(1)][RT_STATUS].astype(str) == "exclusive"
    assert rt[spec.sdpa_name(3)][RT_STATUS].astype(str) == "stateless"
    assert rt[spec.sdpa_name(2)][RT_VARIABLES].astype(str) == "past_key_values.0.key,past_key_values.0.value"
    assert detection.analysis.status_counts() == {"exclusive": 1, "shared": 2, "stateless": 1}


def test_networkx_graph():
    spec = StackSpec(k_source=(0, 1, 0, 1))
    g = analyze_kv_sharing(build_stack(spec)).graph()
    assert g.edges[("variable", "past_key_values.0.key"), ("sdpa", spec.sdpa_name(0))]["role"] == "owner"
    edge = g.edges[("variable", "past_key_values.0.key"), ("sdpa", spec.sdpa_name(2))]
    assert edge["role"] == "borrower" and edge["ports"] == (1,)
    assert g.nodes[("sdpa", spec.sdpa_name(3))]["status"] == "shared"


@pytest.mark.parametrize("loop_reads", ["concat", "past", "readvalue", "variable"])
def test_cache_read_by_a_loop_is_not_exclusive(loop_reads):
    """Issue 14, item 14: an SDPA whose cache a Loop body also reads was reported exclusive. The body is
    not analysed, so the Loop counts as one more reader: the cache is shared, the SDPA is not exclusive,
    and the unhandled message names the Loop, the cache and the SDPA."""
    spec = CacheLoopSpec(loop_reads=loop_reads)
    analysis = analyze_kv_sharing(build_cache_loop(spec))
    key, value = analysis.caches[spec.variable_id("key")], analysis.caches[spec.variable_id("value")]
    assert key.sdpa == (LOOP_SDPA,) and key.owner == LOOP_SDPA
    assert key.unanalysed_readers == (LOOP_NAME,) and key.shared
    assert value.unanalysed_readers == () and not value.shared
    assert analysis.sdpa[LOOP_SDPA].status == "shared"
    [message] = analysis.unhandled
    assert f"Loop '{LOOP_NAME}'" in message and spec.variable_id("key") in message and LOOP_SDPA in message
    assert spec.variable_id("value") not in message
    variable = next(v for v in analysis.to_dict()["variables"] if v["variable_id"] == spec.variable_id("key"))
    assert variable["unanalysed_readers"] == (LOOP_NAME,) and variable["shared"] is True
    assert analysis.graph().nodes[("variable", spec.variable_id("key"))]["shared"]


def test_analysis_round_trips_through_its_dictionary():
    """inspect's DOT output rebuilds the analysis' networkx graph from the JSON report."""
    analysis = analyze_kv_sharing(build_stack(StackSpec(k_source=(0, 1, 0, None), borrow_path="own_concat")))
    again = KVSharingAnalysis.from_dict(json.loads(json.dumps(analysis.to_dict())))
    assert again.caches == analysis.caches and again.sdpa == analysis.sdpa
    assert nx.utils.graphs_equal(again.graph(), analysis.graph())


def test_layer_index_falls_back_to_the_topological_position():
    assert layer_indices(["a.layers.3.sdpa", "b.layers.7.sdpa"]) == {"a.layers.3.sdpa": 3, "b.layers.7.sdpa": 7}
    assert layer_indices(["attn_a", "layers.1.x"]) == {"attn_a": 0, "layers.1.x": 1}
    assert layer_indices(["layers.1.x", "layers.1.y"]) == {"layers.1.x": 0, "layers.1.y": 1}
