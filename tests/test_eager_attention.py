"""SDPA recovery (issue 24): EagerAttentionToSDPA on synthetic eager attention of every form, the forms it
leaves alone and why, and the eager fixtures exported by tools/export_gemma4.py --attn-implementation eager.

The synthetic cases compare the recovered SDPA with a float64 reference from the SDPA-13 specification and
with the eager graph's own output (ov.Core, EXACT_CPU_CONFIG). The fixtures run in one worker process per
fixture and runtime (testkit.matrix, every mode on every path).
"""

import itertools
import json
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import pytest
from openvino.passes import Manager

import ovpasses
from ovpasses import EagerAttentionToSDPA
from ovpasses.features.sdpa_recovery.analysis import find_eager_attention
from ovpasses.precision import EXACT_CPU_CONFIG
from ovpasses.app.render.text import summary_text
from testkit.graphs import (
    EagerAttentionSpec,
    build_eager_attention,
    eager_attention_inputs,
    eager_attention_reference,
    round_to_bf16,
)
from testkit.matrix import grid_in, lost_its_state

ROOT = Path(__file__).resolve().parent.parent
NEWEST = Path(sys.executable)
AFFECTED = ROOT / ".venvs" / "ov-2026.0.0" / "bin" / "python"
# eager fixture -> its SDPA export (same layout), and the exclusive caches the CPU plugin fuses once recovered
# (layers 0-1 of tiny8's layout, 0-12 of E2B's), as in the SDPA exports (tests/test_runtimes.py)
EAGER_FIXTURES = {"gemma4/tiny8e": "gemma4/tiny8", "gemma3n/tiny8e": "gemma3n/tiny8", "gemma4/e2b35e8": "gemma4/e2b35",
                  "gemma4/vlm8e": "gemma4/vlm8"}
FUSED = {"gemma4/tiny8e": 2, "gemma3n/tiny8e": 2, "gemma4/e2b35e8": 13, "gemma4/vlm8e": 2}
# e2b35e8 (35 layers, int8 weights: checked against its own tokens) costs ~50 s a runtime: slow tier
SLOW_FIXTURES = ("gemma4/e2b35e8",)
# Gemma 3n's ErfInv: 2026.2 and newer; the VLM's language model is checked on the newest runtime
AFFECTED_FIXTURES = [pytest.param(f, marks=pytest.mark.slow) if f in SLOW_FIXTURES else f
                     for f in EAGER_FIXTURES if "gemma3n" not in f and "vlm" not in f]
# the newest runtime's three clients: the VLM's language model (Gemma 4's text layers, as tiny8e's) in the slow
# tier too; its recovery stays in the default run (test_eager_fixture_recovers_one_sdpa_per_layer)
CELL_FIXTURES = [pytest.param(f, marks=pytest.mark.slow) if f in (*SLOW_FIXTURES, "gemma4/vlm8e") else f
                 for f in EAGER_FIXTURES]


def language_model(folder: Path) -> Path:
    """The stateful IR of an export folder: an image-text-to-text export's language model, else the model."""
    vlm = folder / "openvino_language_model.xml"
    return vlm if vlm.exists() else folder / "openvino_model.xml"

# as tests/test_sdpa_decomposition.py: f32 summation order; f16/bf16 four output ulps at magnitude 2
TOL = {"f32": 1e-5, "f16": 4 * 2.0**-9, "bf16": 4 * 2.0**-6}


def _recoverable():
    base = EagerAttentionSpec()
    yield base.with_(scale_at="none")
    for at, op in itertools.product(["q", "k", "scores"], ["multiply", "divide"]):
        yield base.with_(scale_at=at, scale_op=op)
    for op, dtype in itertools.product(["multiply", "divide"], ["f32", "f16"]):   # K^T scaled after its Transpose
        yield base.with_(scale_at="kT", scale_op=op, k_transpose="transpose", dtype=dtype)
    for mask, k_transpose, kv_heads in itertools.product(["none", "float", "select", "select_fill"],
                                                         ["transpose_b", "transpose"], [None, 2]):
        yield base.with_(mask=mask, k_transpose=k_transpose, kv_heads=kv_heads)
    for dtype, mask in itertools.product(["f16", "bf16"], ["float", "select"]):
        yield base.with_(dtype=dtype, mask=mask, kv_heads=2)
    yield base.with_(softmax_opset=1, scale_at="none")


RECOVERABLE = list(_recoverable())

# what is not exactly SDPA, and the words of the reason
REFUSED = [
    (EagerAttentionSpec(refuse="softcap"), "softcap"),
    (EagerAttentionSpec(refuse="dropout"), "between the Softmax and MatMul(probs, V)"),
    (EagerAttentionSpec(refuse="axis"), "not the last (key) axis"),
    (EagerAttentionSpec(refuse="weights_output"), "used elsewhere"),
    (EagerAttentionSpec(mask="select_finite"), "not -inf"),
    (EagerAttentionSpec(k_transpose="pretransposed"), "untransposed"),
]


def _id(spec: EagerAttentionSpec) -> str:
    return (f"{spec.dtype}-scale_{spec.scale_at}_{spec.scale_op}-mask_{spec.mask}-{spec.k_transpose}"
            f"-kv{spec.n_kv_heads}-softmax{spec.softmax_opset}-{spec.refuse}")


def recover(model: ov.Model) -> EagerAttentionToSDPA:
    manager = Manager()
    recovery = EagerAttentionToSDPA()
    manager.register_pass(recovery)
    manager.run_passes(model)
    return recovery


def ops_of(model: ov.Model, type_name: str) -> list[ov.Node]:
    return [n for n in model.get_ordered_ops() if n.get_type_name() == type_name]


def run(core, model: ov.Model, inputs) -> np.ndarray:
    return core.compile_model(model, "CPU", EXACT_CPU_CONFIG)(inputs)[0].astype(np.float64)


def in_type(value: float, dtype: str) -> float:
    if dtype == "f16":
        return float(np.float16(value))
    return float(round_to_bf16(np.float64(value))) if dtype == "bf16" else float(np.float32(value))


def expected_scale(spec: EagerAttentionSpec) -> float:
    """The graph's scale Constant (in the model's type); for a Divide its reciprocal, rounded once to that type."""
    if spec.scale_at != "scores":
        return 1.0
    s = in_type(spec.scale_value, spec.dtype)
    return in_type(s if spec.scale_op == "multiply" else 1.0 / s, spec.dtype)


@pytest.mark.parametrize("spec", RECOVERABLE, ids=_id)
def test_recovered_sdpa_computes_the_eager_subgraph(core, spec):
    model = build_eager_attention(spec)
    inputs = eager_attention_inputs(spec, seed=11)
    eager = run(core, model, inputs)
    (found,) = find_eager_attention(model)
    assert found.recoverable and found.reason == "", found

    recovery = recover(model)
    assert recovery.changed == ["attention"] and recovery.refused == {}
    assert not ops_of(model, "Softmax")
    (sdpa,) = ops_of(model, "ScaledDotProductAttention")
    assert sdpa.get_friendly_name() == "attention" and not sdpa.get_attributes()["causal"]
    # the scale is an explicit Constant read from the graph (1.0 where the scores are not scaled)
    scale = sdpa.input_value(4).get_node()
    if scale.get_type_name() == "Convert":   # a bf16 Constant is written as Convert(f32 Constant)
        scale = scale.input_value(0).get_node()
    assert scale.get_type_name() == "Constant"
    assert in_type(float(scale.get_data()), spec.dtype) == expected_scale(spec)
    # a scale on Q or K stays where the eager graph had it: SDPA reads the scaled tensor
    q_source = sdpa.input_value(0).get_node().get_type_name()
    assert q_source == ({"multiply": "Multiply", "divide": "Divide"}[spec.scale_op] if spec.scale_at == "q"
                        else "Parameter" if spec.dtype != "bf16" else "Convert")
    if spec.scale_at == "kT":   # a scale after K's Transpose moves onto K, which SDPA transposes
        assert sdpa.input_value(1).get_node().get_type_name() == {"multiply": "Multiply", "divide": "Divide"}[spec.scale_op]
    mask = sdpa.input_value(3).get_node()
    if spec.mask == "float":   # the eager graph's own mask tensor
        assert mask.get_type_name() in ("Parameter", "Convert")
    elif spec.mask.startswith("select"):
        assert mask.get_type_name() == "Select"
    if spec.kv_heads:          # the GQA expand stays between the input and the SDPA
        assert sdpa.input_value(2).get_node().get_friendly_name() == "v_gqa"

    recovered = run(core, model, inputs)
    reference = eager_attention_reference(spec, inputs)
    assert np.abs(recovered - reference).max() <= TOL[spec.dtype]
    assert np.abs(recovered - eager).max() <= TOL[spec.dtype]


@pytest.mark.parametrize("spec, words", REFUSED, ids=[_id(s) for s, _ in REFUSED])
def test_what_is_not_sdpa_is_left_alone_with_a_reason(spec, words):
    model = build_eager_attention(spec)
    before = [(n.get_type_name(), n.get_friendly_name()) for n in model.get_ordered_ops()]
    (found,) = find_eager_attention(model)
    assert not found.recoverable and words in found.reason, found

    recovery = recover(model)
    assert recovery.changed == []
    assert [(n.get_type_name(), n.get_friendly_name()) for n in model.get_ordered_ops()] == before
    # a match the predicate refused says so with the analysis' own reason
    assert recovery.refused in ({}, {"attention": found.reason})


def test_the_pipeline_reports_what_it_left_eager():
    model = build_eager_attention(EagerAttentionSpec(refuse="softcap"))
    summary = ovpasses.rewrite(model)
    (entry,) = summary.to_dict()["eager_attention"]
    assert entry["recovered"] is False and "softcap" in entry["reason"]
    assert "left eager: attention: softcap" in summary_text(summary)


def test_passes_can_leave_the_recovery_out():
    model = build_eager_attention(EagerAttentionSpec())
    summary = ovpasses.rewrite(model, passes="SharedKVCacheDetection")
    assert not ops_of(model, "ScaledDotProductAttention") and len(ops_of(model, "Softmax")) == 1
    (entry,) = summary.to_dict()["eager_attention"]
    assert entry["recoverable"] and not entry["recovered"] and entry["not_applied"] == "EagerAttentionToSDPA"


@pytest.mark.parametrize("fixture", EAGER_FIXTURES)
def test_eager_fixture_recovers_one_sdpa_per_layer(core, fixture):
    folder = ROOT / "tests" / "fixtures" / fixture
    layers = json.loads((folder / "reference.json").read_text())["settings"]["num_hidden_layers"]
    model = core.read_model(language_model(folder))
    assert not ops_of(model, "ScaledDotProductAttention") and len(ops_of(model, "Softmax")) == layers
    summary = ovpasses.rewrite(model)
    assert len(summary.recovered) == layers == len(summary.eager_attention)
    sdpas = ops_of(model, "ScaledDotProductAttention")
    assert len(sdpas) == layers and not ops_of(model, "Softmax")
    # the same KV-sharing map and plan as the SDPA export of the same model
    twin = core.read_model(language_model(ROOT / "tests" / "fixtures" / EAGER_FIXTURES[fixture]))
    twin_summary = ovpasses.rewrite(twin)
    assert summary.analysis.status_counts() == twin_summary.analysis.status_counts()
    assert sorted(d.action.value for d in summary.decisions.values()) == \
        sorted(d.action.value for d in twin_summary.decisions.values())
    # the GQA expand (Unsqueeze -> Broadcast -> Reshape) stays before K and V, except where the plugin does not
    # fuse the SDPA and UnfusedSDPAExpandRewrite elided it (one KV head: the SDPA reads the cache's Concat)
    elided = {r.node for r in summary.records if r.rule == "UnfusedSDPAExpandRewrite" and r.status.value == "applied"}
    for sdpa in sdpas:
        allowed = {"Reshape", "Concat"} if sdpa.get_friendly_name() in elided else {"Reshape"}
        for port in (1, 2):
            assert sdpa.input_value(port).get_node().get_type_name() in allowed, sdpa.get_friendly_name()


@pytest.mark.parametrize("fixture", CELL_FIXTURES)
def test_newest_eager_fixture_decodes_like_transformers_once_recovered(fixture):
    """2026.4.1: the eager IR decodes on ov.Core and genai's stateful path but genai's paged path (its
    default backend) refuses it; recovered, every path gives transformers' tokens."""
    cells = grid_in(NEWEST, ROOT / "tests" / "fixtures" / fixture, ["unmodified", "rewritten"],
                     ["core", "stateful", "paged"])
    by = {(c["mode"], c["path"]): c for c in cells}
    assert by["unmodified", "core"]["status"] == "ok" and by["unmodified", "core"]["fused_sdpa"] == 0, by
    assert by["unmodified", "stateful"]["status"] == "ok", by
    paged = by["unmodified", "paged"]
    assert paged["status"] == "failed" and "No ScaledDotProductAttention operation observed" in paged["error"], paged
    for path in ("core", "stateful", "paged"):
        assert by["rewritten", path]["status"] == "ok", by["rewritten", path]
    assert by["rewritten", "core"]["fused_sdpa"] == FUSED[fixture]


@pytest.mark.skipif(not AFFECTED.exists(), reason="needs .venvs/ov-2026.0.0 (bash tools/venv.sh ov 2026.0.0)")
@pytest.mark.parametrize("fixture", AFFECTED_FIXTURES)
def test_affected_recovered_sdpas_need_the_plan(fixture):
    """2026.0: the eager IR decodes unfused; its recovered SDPAs alone crash the CPU plugin's stateful
    fusion like an SDPA export's ("null input states"); with the runtime plan they decode, exclusive caches
    fused."""
    cells = grid_in(AFFECTED, ROOT / "tests" / "fixtures" / fixture,
                     ["unmodified", "recovered", "rewritten"], ["core", "stateful"])
    by = {(c["mode"], c["path"]): c for c in cells}
    assert all(c["runtime"].startswith("2026.0") for c in cells)
    assert by["unmodified", "core"]["status"] == "ok" and by["unmodified", "core"]["fused_sdpa"] == 0, by
    assert by["unmodified", "stateful"]["status"] == "ok", by
    for path in ("core", "stateful"):
        assert lost_its_state(by["recovered", path]), by["recovered", path]
        assert by["rewritten", path]["status"] == "ok", by["rewritten", path]
    assert by["rewritten", "core"]["fused_sdpa"] == FUSED[fixture]


def test_inspect_lists_the_subgraphs_and_why_one_stays_eager():
    from ovpasses.app.render.inspect import inspect_text
    from ovpasses.report.inspect import inspect_model

    model = build_eager_attention(EagerAttentionSpec(refuse="softcap"))
    report = inspect_model(model)
    (entry,) = report["eager_attention"]
    assert not entry["recoverable"] and not entry["recovered"] and "softcap" in entry["reason"]
    text = inspect_text(report)
    assert "eager attention: 1 subgraphs, 0 recovered" in text and "left eager: attention: softcap" in text
    assert len(ops_of(model, "Softmax")) == 1   # inspect changes nothing

    report = inspect_model(build_eager_attention(EagerAttentionSpec()))
    assert [e["recovered"] for e in report["eager_attention"]] == [True]
    (sdpa,) = report["sdpa"]
    assert not sdpa["fusion_unmodified"]["expected"] and "eager attention" in sdpa["fusion_unmodified"]["reason"]


@pytest.mark.parametrize("fixture", EAGER_FIXTURES)
def test_an_eager_export_folder_is_rewritten(fixture):
    """ovpass rewrite DIR takes the IR with a state and a Softmax (and no SDPA), not the tokenizers nor (in
    the VLM) the vision model, whose attention is eager too but holds no state."""
    from ovpasses.app.files.export_scan import stateful_irs

    folder = ROOT / "tests" / "fixtures" / fixture
    assert stateful_irs(folder) == [language_model(folder).name]
