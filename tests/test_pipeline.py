"""ovpasses.compile_model and the pipeline's plan on CPU, and the GPU path where an Intel GPU is present."""

import json

import openvino as ov
import pytest

import ovpasses
from ovpasses import DeviceNotAvailableError, OvpassesError
from ovpasses.pipeline import PASSES, PIPELINE_PASSES, STEPS
from ovpasses.plan.decisions import Action
from ovpasses.report import schemas
from ovpasses.precision import EXACT_CPU_CONFIG as CONFIG
from ovpasses.app.render.text import summary_text
from testkit.graphs import StackSpec, build_stack, run_stack, stack_steps

from test_regressions import assert_matches_reference  # noqa: E402  (tests/ is on sys.path)

BARRIER, NATIVE, NATIVE_UNFUSED, STATELESS = Action.BARRIER, Action.NATIVE, Action.NATIVE_UNFUSED, Action.STATELESS

HAS_GPU = any(d.startswith("GPU") for d in ov.Core().available_devices)
# f32 through the whole graph: see the tolerance note in test_properties.py
SPEC = StackSpec(k_source=(0, 1, 1, None), kv_heads=4, borrow_path="own_concat", mask="float")
STACK_STEPS = stack_steps(SPEC)


def test_compile_model_cpu_rewrites_a_clone():
    model = build_stack(SPEC)
    before = [n.get_type_name() for n in model.get_ordered_ops()]
    compiled = ovpasses.compile_model(model, "CPU", CONFIG)
    assert [n.get_type_name() for n in model.get_ordered_ops()] == before, "the caller's model must not change"
    assert_matches_reference(run_stack(compiled, SPEC, STACK_STEPS), SPEC, STACK_STEPS)


def test_plan_per_sdpa():
    summary = ovpasses.rewrite(build_stack(SPEC))
    assert summary.actions == {SPEC.sdpa_name(0): NATIVE, SPEC.sdpa_name(1): BARRIER,
                               SPEC.sdpa_name(2): BARRIER, SPEC.sdpa_name(3): STATELESS}
    shared_concat = ovpasses.rewrite(build_stack(SPEC.with_(borrow_path="concat")))
    assert shared_concat.actions[SPEC.sdpa_name(1)] == NATIVE_UNFUSED and not shared_concat.changed


def test_passes_table_follows_the_pipeline():
    assert tuple(PASSES) == PIPELINE_PASSES
    with pytest.raises(OvpassesError, match="unknown pass NoSuchPass"):
        ovpasses.rewrite(build_stack(SPEC), passes=["NoSuchPass"])


@pytest.mark.parametrize("passes, ran", [
    ("DisableStatefulSDPAFusion", ["SharedKVCacheDetection", "DisableStatefulSDPAFusion"]),
    (" SharedKVCacheDetection , DisableStatefulSDPAFusion ", ["SharedKVCacheDetection", "DisableStatefulSDPAFusion"]),
    (["DisableStatefulSDPAFusion"], ["SharedKVCacheDetection", "DisableStatefulSDPAFusion"]),
    (("SharedKVCacheDetection",), ["SharedKVCacheDetection"]),
])
def test_passes_take_one_name_a_comma_list_or_names(passes, ran):
    summary = ovpasses.rewrite(build_stack(SPEC), passes=passes)
    assert [p.name for p in summary.passes] == ran  # the analysis is always reported first


@pytest.mark.parametrize("passes, message", [
    ("SomePass", "unknown pass SomePass; valid names: EagerAttentionToSDPA, SharedKVCacheDetection, "),
    ("DisableStatefulSDPAFusion,SomePass", "unknown pass SomePass; "),
    ("", "names no pass"),
    (" , ", "names no pass"),
    ([], "names no pass"),
    (3, "passes must be None, a pass name, a string 'A,B' or a list of pass names; got int 3"),
    ([3], "got list [3]"),
    (b"SomePass", "got bytes"),
])
def test_bad_passes_say_what_is_expected(passes, message):
    with pytest.raises(OvpassesError) as raised:
        ovpasses.rewrite(build_stack(SPEC), passes=passes)
    assert message in str(raised.value)
    assert "S, o, m" not in str(raised.value)  # a string is a name, not a list of characters


@pytest.mark.parametrize("source", [str, lambda path: path])  # a str and a PathLike, as OpenVINO takes
@pytest.mark.parametrize("device", ["CPU", "cpu", " Cpu "])
def test_compile_model_takes_a_path_and_any_case_of_device(tmp_path, source, device):
    path = tmp_path / "stack.xml"
    ov.save_model(build_stack(SPEC), path, compress_to_fp16=False)
    compiled = ovpasses.compile_model(source(path), device, CONFIG)
    assert compiled.get_property("EXECUTION_DEVICES") == ["CPU"]
    assert_matches_reference(run_stack(compiled, SPEC, STACK_STEPS), SPEC, STACK_STEPS)


@pytest.mark.parametrize("device", ["CPU.0", "cpu.1", "GPU.7"])
def test_compile_model_refuses_a_device_openvino_does_not_list(device):
    available = ov.Core().available_devices
    if device.upper() in available:
        pytest.skip(f"{device} is present here")
    with pytest.raises(DeviceNotAvailableError, match=rf"device '{device}' is not available here; OpenVINO sees: "
                                                      rf"{', '.join(available)}"):
        ovpasses.compile_model(build_stack(SPEC), device)


def test_compile_model_refuses_what_is_not_a_model():
    with pytest.raises(OvpassesError, match="takes an openvino.Model or the path of an IR .xml file, not int"):
        ovpasses.compile_model(3)


@pytest.mark.parametrize("device", ["NPU", "TEMPLATE"])
def test_compile_model_refuses_other_plugins(device):
    with pytest.raises(OvpassesError, match="CPU and GPU"):
        ovpasses.compile_model(build_stack(SPEC), device)


@pytest.mark.skipif(HAS_GPU, reason="an Intel GPU is present: test_compile_model_gpu runs instead")
def test_compile_model_gpu_without_a_gpu_is_a_clear_error():
    with pytest.raises(DeviceNotAvailableError, match=r"device 'GPU' is not available here; OpenVINO sees: .*CPU"):
        ovpasses.compile_model(build_stack(SPEC), "GPU")


@pytest.mark.skipif(not HAS_GPU, reason="no Intel GPU here (OpenVINO lists: "
                    f"{', '.join(ov.Core().available_devices)}); the GPU plugin needs an Intel GPU and its driver")
def test_compile_model_gpu():
    # f32 on GPU: its kernels reorder sums and use fast exp in Softmax; not measured here (no Intel GPU)
    compiled = ovpasses.compile_model(build_stack(SPEC), "GPU", {"INFERENCE_PRECISION_HINT": "f32"})
    assert_matches_reference(run_stack(compiled, SPEC, STACK_STEPS), SPEC, STACK_STEPS, atol=1e-4)


def test_reasons_come_with_the_plan_and_reprs_are_short():
    summary = ovpasses.rewrite(build_stack(SPEC))
    # layer 2 reads layer 1's K cache through a Gather/Concat of its own: both are kept out of fusion
    shared_k = "layer 1's K cache is also read off the Assign's path by layer 2 (its own Gather/Concat on the ReadValue)"
    expected = {SPEC.sdpa_name(0): "exclusive cache", SPEC.sdpa_name(1): shared_k, SPEC.sdpa_name(2): shared_k,
                SPEC.sdpa_name(3): "reads no cache"}
    assert summary.reasons == expected
    # the JSON report: each SDPA's action value beside its reason, as written out by hand
    data = json.loads(json.dumps(summary.to_dict()))
    assert data["reasons"] == expected
    assert data["actions"] == {SPEC.sdpa_name(0): "native", SPEC.sdpa_name(1): "barrier",
                               SPEC.sdpa_name(2): "barrier", SPEC.sdpa_name(3): "stateless"}
    # issue 15: repr() was a one-line dump of whole dataclasses
    assert repr(summary).startswith("RewriteSummary(runtime ") and len(repr(summary)) < 150
    assert "CacheInfo" not in repr(summary) and "SDPAInfo" not in repr(summary.analysis)
    assert repr(summary.analysis) == ("KVSharingAnalysis(4 caches (2 shared), 4 SDPA: exclusive=1 shared=2 "
                                      "stateless=1, unhandled=0)")


def test_every_step_follows_the_rule_protocol():
    """Each step's rule has a NAME, a one-line DESCRIPTION, says whether it REANALYSES, is built from its part of
    the plan, and once run lists what it changed in ``changed`` and what it refused in ``refused``; the summary
    carries one record per planned node."""
    from ovpasses.rules import Rule, RulePlan

    assert list(PASSES) == [step.rule.NAME for step in STEPS]
    for step in STEPS:
        assert issubclass(step.rule, Rule) and isinstance(step.rule.REANALYSES, bool)
        assert step.rule.DESCRIPTION and "\n" not in step.rule.DESCRIPTION
        assert step.rule.from_plan.__func__ is not None
    summary = ovpasses.rewrite(build_stack(SPEC))
    barrier = next(p for p in summary.passes if p.name == "DisableStatefulSDPAFusion")
    assert barrier.changed == [SPEC.sdpa_name(1), SPEC.sdpa_name(2)]
    assert [(r.rule, r.node, r.status.value) for r in summary.records] == [
        ("DisableStatefulSDPAFusion", SPEC.sdpa_name(1), "applied"),
        ("DisableStatefulSDPAFusion", SPEC.sdpa_name(2), "applied")]
    assert summary.to_dict()["records"][0] == {"rule": "DisableStatefulSDPAFusion", "node": SPEC.sdpa_name(1),
                                               "status": "applied", "reason": summary.reasons[SPEC.sdpa_name(1)]}
    # a pass built from a part of the plan takes only its planned nodes
    from ovpasses.passes import DisableStatefulSDPAFusion
    model = build_stack(SPEC)
    part = RulePlan(DisableStatefulSDPAFusion.NAME, tuple(
        r.planned for r in summary.records if r.node == SPEC.sdpa_name(2)))
    rule = DisableStatefulSDPAFusion.from_plan(part)
    from openvino.passes import Manager
    manager = Manager()
    manager.register_pass(rule)
    manager.run_passes(model)
    assert rule.changed == [SPEC.sdpa_name(2)] and rule.refused == {}


def test_json_carries_enum_values_and_what_was_not_applied():
    """No sentence in the JSON: an action is an Action value, and a step left out by passes= is named apart."""
    summary = ovpasses.rewrite(build_stack(SPEC), passes="SharedKVCacheDetection")
    data = summary.to_dict()
    assert data["schema"] == schemas.REWRITE
    assert data["actions"] == {SPEC.sdpa_name(0): "native", SPEC.sdpa_name(1): "barrier",
                               SPEC.sdpa_name(2): "barrier", SPEC.sdpa_name(3): "stateless"}
    assert data["not_applied"] == {"DisableStatefulSDPAFusion": [SPEC.sdpa_name(1), SPEC.sdpa_name(2)]}
    assert "not applied (DisableStatefulSDPAFusion not selected): layers 1, 2; planned: kept out of stateful " \
           "fusion (no-op Reshape on K/V)" in summary_text(summary)


def test_the_plan_stays_as_made_and_the_rules_records_say_what_was_done():
    """The rules do not patch the plan: each records what it did per planned node, and the decisions are the
    plan with the records read in order, keeping the plan's reasons. A node the barrier refuses is handed to the
    decomposition; where that does not take it either, it keeps the barrier's action, not carried out."""
    import dataclasses
    from types import MappingProxyType

    from ovpasses.plan.decisions import Decision
    from ovpasses.plan.targets import RewritePlan, decisions_after
    from ovpasses.rules import Planned, RuleRecord, Status

    decisions = MappingProxyType({"a": Decision(BARRIER, "off path"), "b": Decision(NATIVE, "exclusive cache"),
                                  "c": Decision(BARRIER, "off path")})
    plan = RewritePlan(None, None, decisions, {}, ())
    a = Planned("a", "off path", "barrier", ("a",), fallback="ScaledDotProductAttentionDecomposition")
    a_handed = Planned("a", "off path", "decompose", ("a",), handed_from=("barrier", "DisableStatefulSDPAFusion"))
    c = Planned("c", "off path", "barrier", ("c",), fallback="ScaledDotProductAttentionDecomposition")
    c_handed = dataclasses.replace(a_handed, node="c", sdpas=("c",))
    b = Planned("b", "borrows v", "unshared", ("b",))
    records = [RuleRecord("DisableStatefulSDPAFusion", "a", Status.REFUSED, "rank 3", a),
               RuleRecord("DisableStatefulSDPAFusion", "c", Status.REFUSED, "rank 3", c),
               RuleRecord("ScaledDotProductAttentionDecomposition", "a", Status.APPLIED, "off path", a_handed),
               RuleRecord("ScaledDotProductAttentionDecomposition", "c", Status.NOT_SELECTED, "off path", c_handed),
               RuleRecord("SharedKVCacheUnsharing", "b", Status.NOT_SELECTED, "borrows v", b)]
    assert decisions_after(plan, records) == {
        "a": Decision(Action.DECOMPOSE, "off path"),
        "b": Decision(Action.UNSHARED, "exclusive cache", "SharedKVCacheUnsharing"),
        "c": Decision(BARRIER, "off path", "DisableStatefulSDPAFusion")}
    assert plan.decisions["a"] == Decision(BARRIER, "off path")
    with pytest.raises(TypeError):
        plan.decisions["a"] = Decision(NATIVE, "")
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.decisions = {}


def test_the_summary_is_built_by_keyword():
    from ovpasses import RewriteOptions, RewriteSummary

    summary = ovpasses.rewrite(build_stack(SPEC), options=RewriteOptions(runtime="2026.0"))
    assert summary.options.runtime == summary.profile and summary.kv_sharing.value == "keep"
    with pytest.raises(TypeError):
        RewriteSummary(summary.options, summary.analysis)


def test_a_rule_refuses_through_its_patterns_predicate_and_its_record_says_why():
    """apply_rule builds the rule from its part of the plan and records per planned node what it did: given an
    SDPA a barrier already keeps out, the barrier refuses it with the reason its pattern's predicate gave."""
    from ovpasses.passes import DisableStatefulSDPAFusion
    from ovpasses.plan.decisions import Action
    from ovpasses.registry import RULE_OF
    from ovpasses.rules import Planned, RulePlan, Status, apply_rule

    summary = ovpasses.rewrite(build_stack(SPEC))
    assert RULE_OF[summary.decisions[SPEC.sdpa_name(1)].action] == "DisableStatefulSDPAFusion"
    assert summary.decisions[SPEC.sdpa_name(0)].action not in RULE_OF and set(RULE_OF.values()) <= set(PASSES)
    assert set(RULE_OF) == {action for action in Action if action.changes}   # every changing action has its rule
    model = build_stack(SPEC)
    part = RulePlan(DisableStatefulSDPAFusion.NAME, (Planned(SPEC.sdpa_name(1), "off path", "barrier",
                                                             (SPEC.sdpa_name(1),)),))
    _rule, report, records = apply_rule(model, DisableStatefulSDPAFusion, part)
    assert report.changed == [SPEC.sdpa_name(1)] and records[0].status is Status.APPLIED
    _rule, report, records = apply_rule(model, DisableStatefulSDPAFusion, part)
    assert report.changed == [] and records[0].status is Status.REFUSED
    assert records[0].reason == "its K is behind a fusion barrier already"


def test_the_text_summary_says_what_a_rule_refused_and_where_it_went():
    import dataclasses

    from ovpasses.rules import Planned, RuleRecord, Status

    summary = ovpasses.rewrite(build_stack(SPEC))
    planned = Planned(SPEC.sdpa_name(1), "off path", "barrier", (SPEC.sdpa_name(1),),
                      fallback="ScaledDotProductAttentionDecomposition")
    refused = RuleRecord("DisableStatefulSDPAFusion", SPEC.sdpa_name(1), Status.REFUSED, "its K is rank 3", planned)
    text = summary_text(dataclasses.replace(summary, records=[refused]))
    assert (f"DisableStatefulSDPAFusion refused {SPEC.sdpa_name(1)}: its K is rank 3; handed to "
            "ScaledDotProductAttentionDecomposition") in text
    assert "refused" not in summary_text(summary)
