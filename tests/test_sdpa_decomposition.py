"""ScaledDotProductAttentionDecomposition against the SDPA-13 specification (issue 2)."""

import itertools

import numpy as np
import openvino as ov
import pytest
from openvino.passes import Manager

from ovpasses import ScaledDotProductAttentionDecomposition
from ovpasses.precision import EXACT_CPU_CONFIG as F32
from ovpasses.plan.runtimes import installed_version
from testkit.graphs import AttentionSpec, attention_inputs, attention_reference, build_attention


# Absolute tolerances. f32: the 1e-5 (outputs are O(1), f32 eps is 1.2e-7, so this leaves
# room for summation order only). f16 / bf16: the output itself is stored in that type, so one rounding
# of an O(2) value is up to 2 * 2^-11 (f16) / 2 * 2^-8 (bf16); inputs pre-scaled in that type add the
# same again. Four output ulps at magnitude 2.
TOL = {"f32": 1e-5, "f16": 4 * 2.0**-9, "bf16": 4 * 2.0**-6}

# Runtimes whose CPU ScaledDotProductAttention is measured wrong for boolean masks (static shapes).
RUNTIMES_WITH_WRONG_BOOL_MASK_SDPA = {(2025, 2)}

MASKS = [("none", "full"), ("bool", "full"), ("bool", "heads"), ("bool", "matrix"),
         ("float", "full"), ("float", "heads"), ("float", "matrix"), ("float", "scalar")]
SCALES = ["none", "explicit", "prescaled"]


def _specs():
    """(spec, whether the default run compiles it): every mask, scale and causal flag together, and with each of
    them every shape form (static or dynamic, kv_heads or not) once, (dynamic, kv_heads) taken in turn over the
    48 triples; the slow tier compiles the whole product (192). In f16 and bf16, three masks with every scale and
    causal flag, the two types taken in turn over the 18 (the slow tier both). The structural tests take every
    spec."""
    for (m, (mask, mshape)), (s, scale), causal, dynamic, kv_heads in itertools.product(
            enumerate(MASKS), enumerate(SCALES), [False, True], [False, True], [None, 2]):
        turn = (m + s + causal) % 4 == 2 * dynamic + (kv_heads is not None)
        yield AttentionSpec(mask=mask, mask_shape=mshape, scale=scale, causal=causal, dynamic=dynamic,
                            kv_heads=kv_heads), turn
    for (d, dtype), (m, (mask, mshape)), (s, scale), causal in itertools.product(
            enumerate(["f16", "bf16"]), enumerate([("none", "full"), ("bool", "heads"), ("float", "full")]),
            enumerate(SCALES), [False, True]):
        yield AttentionSpec(dtype=dtype, mask=mask, mask_shape=mshape, scale=scale, causal=causal), \
            (m + s + causal) % 2 == d
    # head dim that makes 1/sqrt(E) inexact, and a V head dim unlike K's
    yield AttentionSpec(head_dim=12, v_head_dim=6, q_len=1, kv_len=9), True


COMPILED = [pytest.param(spec, marks=[] if default else [pytest.mark.slow]) for spec, default in _specs()]
SPECS = [param.values[0] for param in COMPILED]


def _id(spec: AttentionSpec) -> str:
    return (f"{spec.dtype}-mask_{spec.mask}_{spec.mask_shape}-scale_{spec.scale}-causal{int(spec.causal)}"
            f"-{'dyn' if spec.dynamic else 'static'}-kv{spec.n_kv_heads}-E{spec.head_dim}")


def decompose(model: ov.Model, **kwargs) -> ScaledDotProductAttentionDecomposition:
    manager = Manager()
    decomposition = ScaledDotProductAttentionDecomposition(**kwargs)
    manager.register_pass(decomposition)
    manager.run_passes(model)
    return decomposition


def ops_of(model: ov.Model, type_name: str) -> list[ov.Node]:
    return [n for n in model.get_ordered_ops() if n.get_type_name() == type_name]


def scores_chain(model: ov.Model):
    """From the Softmax walk up to (MatMul(Q, K^T), scale Multiply, bias Add or None)."""
    (softmax,) = ops_of(model, "Softmax")
    node = softmax.input_value(0).get_node()
    add = None
    if node.get_type_name() == "Add":
        add, node = node, node.input_value(0).get_node()
    assert node.get_type_name() == "Multiply", "the scale Multiply must stand right before bias/Softmax"
    multiply = node
    qk = multiply.input_value(0).get_node()
    assert qk.get_type_name() == "MatMul"
    return qk, multiply, add


@pytest.mark.parametrize("spec", COMPILED, ids=_id)
def test_matches_reference_and_unmodified(core, spec):
    model = build_attention(spec)
    inputs = attention_inputs(spec, seed=7)
    expected = attention_reference(spec, inputs)
    unmodified = core.compile_model(model.clone(), "CPU", F32)(inputs)["attention"]

    decompose(model)
    assert not ops_of(model, "ScaledDotProductAttention")
    got = core.compile_model(model, "CPU", F32)(inputs)["attention"]

    tol = TOL[spec.dtype]
    np.testing.assert_allclose(got, expected, rtol=0, atol=tol)
    if spec.mask == "bool" and not spec.causal and installed_version()[:2] in RUNTIMES_WITH_WRONG_BOOL_MASK_SDPA:
        # measured: the plugin's own SDPA differs from the specification here (3.16 max, NaNs),
        # while the decomposition above matched the float64 reference
        assert np.abs(unmodified.astype(np.float64) - expected).max() > tol or np.isnan(unmodified).any()
        pytest.xfail("this runtime's CPU SDPA mishandles boolean masks; the decomposition is right")
    np.testing.assert_allclose(got, unmodified, rtol=0, atol=tol)


@pytest.mark.parametrize("spec", SPECS, ids=_id)
def test_scale_applies_to_qk_output(spec):
    model = build_attention(spec)
    (sdpa,) = ops_of(model, "ScaledDotProductAttention")
    q_source = sdpa.input_value(0)
    k_source = sdpa.input_value(1)
    decompose(model)

    qk, multiply, add = scores_chain(model)
    assert qk.input_value(0) == q_source, "MatMul input 0 must be exactly the incoming Q output"
    assert qk.input_value(1) == k_source
    assert qk.get_attributes()["transpose_b"] is True and qk.get_attributes()["transpose_a"] is False
    assert multiply.input_value(0) == qk.output(0), "the scale Multiply must consume MatMul(Q, K^T)"
    # the builder passes a zero float mask when only a scale is given (opset13 has no other way)
    has_bias_input = spec.causal or spec.mask != "none" or spec.scale != "none"
    assert (add is not None) == has_bias_input
    if add is not None:
        assert add.input_value(0) == multiply.output(0), "the bias is added to the scaled scores"


def test_prescaled_q_is_not_scaled_again_structurally():
    """Regression: Q * s feeding SDPA(scale=s) decomposes to (Q*s) @ K^T * s, with s once on each side."""
    spec = AttentionSpec(scale="prescaled", scale_value=0.3)
    model = build_attention(spec)
    decompose(model)
    qk, multiply, _ = scores_chain(model)
    q_in = qk.input_value(0).get_node()
    assert q_in.get_friendly_name() == "q_prescaled" and q_in.get_type_name() == "Multiply"
    assert q_in.input_value(0).get_node().get_friendly_name() == "q", "Q must be scaled exactly once before"
    scale_node = multiply.input_value(1).get_node()
    assert scale_node.get_type_name() == "Constant"
    assert np.float32(scale_node.get_data()) == np.float32(0.3)
    # nothing else multiplies on the Q path or after the scores
    assert [n for n in ops_of(model, "Multiply") if n not in (q_in, multiply)] == []


def test_prescaled_q_numerically(core):
    """(Q*s) @ K^T * s in float64, not Q @ K^T * s, and not (Q*s) @ K^T."""
    spec = AttentionSpec(scale="prescaled", scale_value=0.3)
    model = build_attention(spec)
    inputs = attention_inputs(spec, seed=3)
    decompose(model)
    got = core.compile_model(model, "CPU", F32)(inputs)["attention"]
    from testkit.reference import sdpa_reference
    q = inputs["q"].astype(np.float64)
    s = np.float64(np.float32(0.3))
    twice = sdpa_reference(q * s, inputs["k"], inputs["v"], scale=s)
    once = sdpa_reference(q, inputs["k"], inputs["v"], scale=s)
    np.testing.assert_allclose(got, twice, rtol=0, atol=1e-5)
    assert np.abs(got - once).max() > 1e-2, "the reference must tell the two apart"


def test_keeps_names_and_runtime_info():
    model = build_attention(AttentionSpec(mask="bool", causal=False))
    (sdpa,) = ops_of(model, "ScaledDotProductAttention")
    sdpa.get_rt_info()["ovpasses_test_marker"] = "kept"
    decompose(model)
    result_source = model.get_results()[0].input_value(0)
    assert result_source.get_node().get_friendly_name() == "sdpa"
    assert result_source.get_node().get_type_name() == "MatMul"
    assert model.outputs[0].get_names() == {"attention"}
    new_nodes = [n for n in model.get_ordered_ops() if n.get_friendly_name().startswith("sdpa")]
    assert len(new_nodes) > 5
    for node in new_nodes:
        assert node.get_rt_info()["ovpasses_test_marker"].astype(str) == "kept", node.get_friendly_name()


def test_predicate_selects_nodes(core):
    spec = AttentionSpec()
    model = build_attention(spec)
    decomposition = decompose(model, predicate=lambda node: node.get_friendly_name() != "sdpa")
    assert len(ops_of(model, "ScaledDotProductAttention")) == 1
    assert decomposition.changed == []
    decomposition = decompose(model, predicate=lambda node: node.get_friendly_name() == "sdpa")
    assert decomposition.changed == ["sdpa"]
    assert not ops_of(model, "ScaledDotProductAttention")


def test_no_sdpa_is_a_no_op():
    spec = AttentionSpec()
    model = build_attention(spec)
    decompose(model)
    before = [(n.get_type_name(), n.get_friendly_name()) for n in model.get_ordered_ops()]
    second = decompose(model)
    assert second.changed == []
    assert [(n.get_type_name(), n.get_friendly_name()) for n in model.get_ordered_ops()] == before
