"""Issue 15: the KV-sharing lint. Each defect on a synthetic graph built to have it (LayerKindsSpec, StackSpec),
and silence on every correct export fixture and on the correct synthetic layouts."""

import json
from pathlib import Path

import openvino as ov
import pytest

import ovpasses
from ovpasses.analysis import analyze_kv_sharing
from ovpasses.analysis.attention_kinds import attention_kinds
from ovpasses.analysis.sharing_lint import lint_kv_sharing
from ovpasses.app.render.text import summary_text
from testkit.graphs import LayerKindsSpec, StackSpec, build_layer_kinds, build_stack, sharing_layout

FIXTURES = Path(__file__).resolve().parent / "fixtures"
EXPORTS = {
    "gemma4/tiny8": "gemma4/tiny8/openvino_model.xml",
    "gemma4/e2b35": "gemma4/e2b35/openvino_model.xml",
    "gemma4/vlm8": "gemma4/vlm8/openvino_language_model.xml",
    "gemma3n/tiny8": "gemma3n/tiny8/openvino_model.xml",   # ErfInv: read on 2026.2 and newer
}


def lint(model: ov.Model):
    ordered = model.get_ordered_ops()
    analysis = analyze_kv_sharing(model, ordered)
    kinds = attention_kinds(analysis.sdpa_nodes(ordered))
    return analysis, kinds, lint_kv_sharing(analysis, kinds)


@pytest.mark.parametrize("export", EXPORTS)
def test_silent_on_every_correct_export(export):
    model = ov.Core().read_model(FIXTURES / EXPORTS[export])
    analysis, kinds, findings = lint(model)
    assert findings == []
    # the kinds the lint compares are the config's: sliding layers with their window, full layers
    config = json.loads((FIXTURES / EXPORTS[export]).with_name("config.json").read_text())
    config = config.get("text_config", config)
    expected = ["sliding" if t == "sliding_attention" else "full" for t in config["layer_types"]]
    by_layer = {analysis.layer(name): kind for name, kind in kinds.items()}
    assert [by_layer[i].mask for i in range(len(expected))] == expected
    assert {by_layer[i].window for i in range(len(expected)) if expected[i] == "sliding"} == {config["sliding_window"]}


@pytest.mark.parametrize("spec", [
    LayerKindsSpec(),
    LayerKindsSpec(k_source=(0, 1, 2, 3, 2, 3, 2, 3)),           # Gemma-style: borrowers of their own kind
    LayerKindsSpec(k_source=(0, 1, 0), window=(4, None, 4), head_dims=(4, 4, 4)),
], ids=["owners only", "gemma layout", "equal head sizes"])
def test_silent_on_correct_layer_kinds(spec):
    assert lint(build_layer_kinds(spec))[2] == []


@pytest.mark.parametrize("layout", [(0, 1, 0, 1), sharing_layout(8, 4), (0, None, 0, 3)])
def test_silent_on_correct_stacks(layout):
    assert lint(build_stack(StackSpec(k_source=layout)))[2] == []


def test_a_sliding_borrower_reading_a_full_cache():
    """The bug class of a fine-tuning framework's Gemma 4 fix: borrowers keyed by layer index read the
    cache of the other attention type."""
    spec = LayerKindsSpec(k_source=(0, 1, 1), window=(4, None, 4), head_dims=(8, 8, 8))
    [finding] = lint(build_layer_kinds(spec))[2]
    assert finding.code == "borrower_kind" and finding.layers == (2, 1)
    assert finding.message == "layer 2 (sliding 4) reads the cache of layer 1 (full): mask sliding (window 4) vs full"
    assert set(finding.variables) == {"past_key_values.1.key", "past_key_values.1.value"}


def test_a_borrower_with_another_window():
    spec = LayerKindsSpec(k_source=(0, 1, 0), window=(4, None, 8), head_dims=(4, 8, 4))
    [finding] = lint(build_layer_kinds(spec))[2]
    assert finding.message == ("layer 2 (sliding 8) reads the cache of layer 0 (sliding 4): "
                               "mask sliding (window 8) vs sliding (window 4)")


def test_k_and_v_from_different_layers_of_other_head_sizes():
    spec = LayerKindsSpec(k_source=(0, 1, 2), v_source=(0, 1, 1), window=(4, 4, 4), head_dims=(4, 8, 4))
    findings = {f.code: f for f in lint(build_layer_kinds(spec))[2]}
    assert set(findings) == {"borrower_kind", "kv_split"}
    assert findings["kv_split"].message == "layer 2 takes K from layer 2 and V from layer 1"
    assert findings["borrower_kind"].message == ("layer 2 (sliding 4) reads the cache of layer 1 (sliding 4): "
                                                 "head size 4 vs 8")


def test_k_and_v_from_different_layers_of_one_kind():
    findings = lint(build_stack(StackSpec(k_source=(0, 1, 0, 1), v_source=(0, 1, 1, 0))))[2]
    assert [(f.code, f.message) for f in findings] == [
        ("kv_split", "layer 2 takes K from layer 0 and V from layer 1"),
        ("kv_split", "layer 3 takes K from layer 1 and V from layer 0")]


def test_a_cache_no_assign_writes_read_by_two_kinds():
    spec = LayerKindsSpec(k_source=(0, 1, 1), window=(4, None, 4), head_dims=(4, 4, 4), unwritten=(1,))
    findings = {f.code: f for f in lint(build_layer_kinds(spec))[2]}
    assert set(findings) == {"mixed_kinds", "no_assign"}
    assert findings["mixed_kinds"].message == (
        "cache past_key_values.1.key, past_key_values.1.value (no owner) is read by SDPAs of different kinds: "
        "full (layer 1); sliding 4 (layer 2)")
    assert findings["no_assign"].message.startswith(
        "cache past_key_values.1.key, past_key_values.1.value is written by no Assign (read by layers 1, 2)")


def test_a_cache_no_assign_writes_read_by_one_kind():
    spec = LayerKindsSpec(k_source=(0, 1), window=(4, 4), head_dims=(4, 4), unwritten=(1,))
    [finding] = lint(build_layer_kinds(spec))[2]
    assert finding.code == "no_assign" and finding.layers == (1,)


def test_rewrite_summary_warns_and_inspect_reports_the_findings():
    model = build_layer_kinds(LayerKindsSpec(k_source=(0, 1, 1), window=(4, None, 4), head_dims=(8, 8, 8)))
    summary = ovpasses.rewrite(model)
    assert [f.code for f in summary.findings] == ["borrower_kind"]
    assert "warning: KV sharing: layer 2 (sliding 4) reads the cache of layer 1 (full)" in summary_text(summary)
    assert summary.to_dict()["lint"][0]["layers"] == [2, 1]
