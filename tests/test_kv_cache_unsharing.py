"""kv_sharing="unshare" (issue 12): each borrower of a shared KV cache gets a cache of its own.

Structure is asserted on the rewritten graph; numbers against the float64 reference of the builder.
The property over generated stacks is in tests/test_properties.py, the fixtures on the runtimes in
tests/test_runtimes.py.
"""

from __future__ import annotations

import json

import numpy as np
import openvino as ov
import pytest

import ovpasses
from ovpasses import OvpassesError, analyze_kv_sharing
from ovpasses.app import cli
from ovpasses.app.folder import rewrite_folder
from ovpasses.options import KVSharing, RewriteOptions
from ovpasses.features.unsharing.plan import NO_INITIALISER, SCALAR_MASK, SUBGRAPH_READER, borrower_labels, plan_unsharing
from ovpasses.features.unsharing.shared_kv_cache_unsharing import SharedKVCacheUnsharing
from ovpasses.plan.decisions import Action
from ovpasses.app.check import count_fused_sdpa
from ovpasses.app.render.text import summary_text
from testkit.graphs import (
    CacheLoopSpec,
    StackSpec,
    build_cache_loop,
    build_stack,
    run_stack,
    stack_reference,
    stack_steps,
)

from test_regressions import AFFECTED, CONFIG, assert_fails, assert_matches_reference  # noqa: E402  (tests/ is on sys.path)

NATIVE, UNSHARED = Action.NATIVE, Action.UNSHARED

TINY8 = "tests/fixtures/gemma4/tiny8"

# layers 1 and 3 borrow layer 0's caches, layer 2 owns its own: 2 borrowers x (K, V) = 4 copies
SPEC = StackSpec(k_source=(0, 0, 2, 0), gqa_form="bidirectional")


def by_name(model: ov.Model) -> dict[str, ov.Node]:
    return {n.get_friendly_name(): n for n in model.get_ordered_ops()}


def upstream(output: ov.Output, type_name: str) -> ov.Node:
    """The first node of ``type_name`` on the input-0 chain above ``output`` (the data path of a cache)."""
    node = output.get_node()
    while node.get_type_name() != type_name:
        node = node.input_value(0).get_node()
    return node


def assign_of(variable_id: str, model: ov.Model) -> ov.Node:
    return next(s for s in model.get_sinks() if str(s.get_attributes()["variable_id"]) == variable_id)


def stored_value(assign: ov.Node) -> ov.Output:
    """What an Assign stores, through the Convert to the cache's element type."""
    value = assign.input_value(0)
    while value.get_node().get_type_name() == "Convert":
        value = value.get_node().input_value(0)
    return value


@pytest.mark.parametrize("borrow_path", ["concat", "own_concat"])
@pytest.mark.parametrize("variant", [{}, {"layout": "BSHD"}, {"dtype": "f16", "cache_type": "f16"},
                                     {"beam_gather": False}, {"kv_heads": 4}, {"gqa_form": "shapeof"}],
                         ids=["BHSD", "BSHD", "f16", "no-beam", "no-gqa", "shapeof-gqa"])
def test_each_borrower_reads_a_cache_of_its_own(borrow_path, variant):
    spec = SPEC.with_(borrow_path=borrow_path, **variant)
    model = build_stack(spec)
    before = by_name(model)
    owner_concat = {kind: before[f"layers.0.self_attn.{kind}_cache"] for kind in ("key", "value")}
    owner_reads = {port: before[spec.sdpa_name(0)].input_value(port) for port in (1, 2)}
    summary = ovpasses.rewrite(model, kv_sharing="unshare")

    assert sorted(u.variable_id for u in summary.unshared) == sorted(
        f"past_key_values.0.{kind}/layers.{i}" for kind in ("key", "value") for i in (1, 3))
    variables = {v.get_info().variable_id: v.get_info() for v in model.get_variables()}
    nodes = by_name(model)
    for port, kind in ((1, "key"), (2, "value")):
        assert nodes[spec.sdpa_name(0)].input_value(port) == owner_reads[port], "the owner's path is left alone"
        owner_rv = upstream(owner_concat[kind].input_value(0), "ReadValue")
        for layer in (1, 3):
            vid = f"past_key_values.0.{kind}/layers.{layer}"
            # the borrower's K/V path (Transpose, GQA broadcast) reads a Concat that is not the owner's ...
            concat = upstream(nodes[spec.sdpa_name(layer)].input_value(port), "Concat")
            assert concat != owner_concat[kind]
            # ... of the past of its own variable, with the owner's Gather(beam_idx) form, and the owner's new K/V
            assert concat.input_value(1) == owner_concat[kind].input_value(1)
            past = concat.input_value(0).get_node()
            if spec.beam_gather:
                assert past.get_type_name() == "Gather" and past.input_value(1).get_node().get_friendly_name() == "beam_idx"
            rv = upstream(concat.input_value(0), "ReadValue")
            assert rv.get_attributes()["variable_id"] == vid
            assert [rv.input_value(i) for i in range(rv.get_input_size())] == \
                   [owner_rv.input_value(i) for i in range(owner_rv.get_input_size())], "the same initialiser"
            assert (variables[vid].data_shape, variables[vid].data_type) == \
                   (variables[f"past_key_values.0.{kind}"].data_shape, variables[f"past_key_values.0.{kind}"].data_type)
            assert stored_value(assign_of(vid, model)) == concat.output(0)
            assert assign_of(vid, model).input_value(0).get_element_type() == variables[vid].data_type

    after = analyze_kv_sharing(model)
    assert after.shared_sdpa == [] and after.unhandled == []
    assert after.caches["past_key_values.0.key/layers.3"].owner == spec.sdpa_name(3)
    assert {n: summary.actions[n] for n in (spec.sdpa_name(1), spec.sdpa_name(3))} == \
           {spec.sdpa_name(1): UNSHARED, spec.sdpa_name(3): UNSHARED}


def test_every_layer_fuses_and_decodes_like_the_reference():
    """The builder's form the plugin fuses (GQA by a bidirectional broadcast): keep fuses no layer of this
    stack (every cache is shared), unshare fuses all four, and both match the float64 reference."""
    spec = SPEC
    steps = stack_steps(spec, 5, 3)
    fused = {}
    for mode in ("keep", "unshare"):
        model = build_stack(spec)
        ovpasses.rewrite(model, kv_sharing=mode)
        compiled = ov.Core().compile_model(model, "CPU", CONFIG)
        fused[mode] = count_fused_sdpa(compiled)
        assert_matches_reference(run_stack(compiled, spec, steps), spec, steps)
    assert fused == {"keep": 1, "unshare": spec.num_layers}


def test_off_path_borrowers_need_no_barrier_once_unshared():
    """A borrower with its own Gather/Concat on its owner's ReadValue loses the state of the fused owner
    (keep puts the fusion barrier on every reader); with a cache of its own nothing needs the barrier
    and every layer fuses."""
    spec = SPEC.with_(borrow_path="own_concat")
    model = build_stack(spec)
    summary = ovpasses.rewrite(model, kv_sharing="unshare")
    assert set(summary.actions.values()) == {NATIVE, UNSHARED}
    assert [p.name for p in summary.passes if p.changed] == [SharedKVCacheUnsharing.NAME]
    compiled = ov.Core().compile_model(model, "CPU", CONFIG)
    assert count_fused_sdpa(compiled) == spec.num_layers
    steps = stack_steps(spec, 4, 3)
    assert_matches_reference(run_stack(compiled, spec, steps), spec, steps)


F16 = StackSpec(k_source=(0, 1, 0, 1), gqa_form="bidirectional", dtype="f16", cache_type="f16")


def test_f16_model_with_shared_caches():
    """A runtime note of docs/runtimes.md: 2026.4.1 cannot run an f16 model whose cache the plugin does not fuse.
    keep leaves the shared caches unfused, so this f16 stack fails there; unshare lets the plugin fuse
    every cache and it runs and matches the reference (4 f16 ulps, as in test_properties.py). Where the
    plugin does not fuse the builder's form (GQA through a ShapeOf), unshared caches stay unfused and
    2026.4.1 still fails. 2026.0.0 runs all of them."""
    steps = stack_steps(F16, 3, 2)
    expected = stack_reference(F16, steps)
    tol = 4 * 2.0**-10 * max(1.0, max(float(np.abs(e).max()) for e in expected))
    core = ov.Core()

    keep = build_stack(F16)
    ovpasses.rewrite(keep)
    if not AFFECTED:
        assert_fails(core.compile_model(keep, "CPU", CONFIG), F16, steps, "Can not clone with new dims")
    unshared = build_stack(F16)
    ovpasses.rewrite(unshared, kv_sharing="unshare")
    compiled = core.compile_model(unshared, "CPU", CONFIG)
    assert count_fused_sdpa(compiled) == F16.num_layers
    got = run_stack(compiled, F16, steps)
    assert max(float(np.abs(g - e).max()) for g, e in zip(got, expected)) <= tol

    not_fused = F16.with_(gqa_form="shapeof")
    model = build_stack(not_fused)
    ovpasses.rewrite(model, kv_sharing="unshare")
    compiled = core.compile_model(model, "CPU", CONFIG)
    assert count_fused_sdpa(compiled) == 0
    if not AFFECTED:
        assert_fails(compiled, not_fused, steps, "Can not clone with new dims")


def test_cache_memory_per_token():
    """bytes per token of each copy: element size x the dims other than batch and sequence."""
    for spec, each in ((SPEC, 2 * 8 * 4), (SPEC.with_(dtype="f16", cache_type="f16", layout="BSHD"), 2 * 8 * 2),
                       (SPEC.with_(kv_heads=4, head_dim=4, dynamic_batch=False, batch=2), 4 * 4 * 4)):
        summary = ovpasses.rewrite(build_stack(spec), kv_sharing="unshare")
        assert [u.bytes_per_token for u in summary.unshared] == [each] * 4
        data = summary.to_dict()
        assert data["kv_sharing"] == "unshare" and data["extra_cache_bytes_per_token"] == 4 * each
        assert len(data["unshared"]) == 4 and data["kept_shared"] == {}
    keep = ovpasses.rewrite(build_stack(SPEC)).to_dict()
    assert (keep["kv_sharing"], keep["unshared"], keep["extra_cache_bytes_per_token"]) == ("keep", [], 0)


def test_cache_without_initialiser_stays_shared():
    """The builder gives a cache whose element type differs from the model's a ReadValue without an
    initialiser (and a Convert). Measured on 2026.0.0 and 2026.4.1: the CPU plugin compiles such a cache
    while it is shared (unfused) and fails to compile it once it is exclusive. A copy would be
    exclusive, so unshare leaves the cache shared, says why, and the model still runs."""
    core = ov.Core()
    exclusive = StackSpec(k_source=(0, 1), kv_heads=4, cache_type="f16")
    with pytest.raises(RuntimeError, match="contains less parent edges"):
        core.compile_model(build_stack(exclusive), "CPU", CONFIG)

    spec = SPEC.with_(k_source=(0, 0, 0), cache_type="f16")   # every cache shared: keep runs it
    model = build_stack(spec)
    summary = ovpasses.rewrite(model, kv_sharing="unshare")
    # no cache copied; what changes is the shared readers' GQA expands (UnfusedSDPAExpandRewrite), nothing else
    assert {r.rule for r in summary.records if r.status.value == "applied"} <= {"UnfusedSDPAExpandRewrite"}
    assert summary.kept_shared == {f"past_key_values.0.{kind}": NO_INITIALISER for kind in ("key", "value")}
    steps = stack_steps(spec, 3, 2)
    assert_matches_reference(run_stack(core.compile_model(model, "CPU", CONFIG), spec, steps), spec, steps,
                             atol=4 * 2.0**-10)


def test_cache_read_with_a_scalar_mask_stays_shared():
    """The builder passes a scalar 0 as the mask where an SDPA has a scale and no mask. Measured on
    2026.0.0 and 2026.4.1: the fused stateful SDPA rejects a rank-0 mask, so an exclusive cache read
    that way fails at the first inference, while the shared one runs unfused. Unshare leaves it shared."""
    core = ov.Core()
    exclusive = StackSpec(k_source=(0, 1), kv_heads=4, scale="explicit")
    assert_fails(core.compile_model(build_stack(exclusive), "CPU", CONFIG), exclusive, stack_steps(exclusive, 2, 1),
                 "attention_mask do not match q and k")

    spec = SPEC.with_(k_source=(0, 0, 0), scale="explicit")
    model = build_stack(spec)
    summary = ovpasses.rewrite(model, kv_sharing="unshare")
    assert {r.rule for r in summary.records if r.status.value == "applied"} <= {"UnfusedSDPAExpandRewrite"}
    assert summary.kept_shared == {f"past_key_values.0.{kind}": SCALAR_MASK for kind in ("key", "value")}
    steps = stack_steps(spec, 3, 2)
    assert_matches_reference(run_stack(core.compile_model(model, "CPU", CONFIG), spec, steps), spec, steps)
    with_mask = spec.with_(mask="float")   # a rank-4 mask: unshared and fused
    model = build_stack(with_mask)
    assert len(ovpasses.rewrite(model, kv_sharing="unshare").unshared) == 4
    assert count_fused_sdpa(core.compile_model(model, "CPU", CONFIG)) == with_mask.num_layers


def test_cache_read_by_a_loop_stays_shared():
    """A cache whose data a Loop body reads is shared for the analysis (it cannot see into the body);
    nothing is known about how the body reads it, so it is not unshared, and the summary says why."""
    model = build_cache_loop(CacheLoopSpec())
    vid = CacheLoopSpec.variable_id("key")
    assert plan_unsharing(analyze_kv_sharing(model)).refused == {vid: SUBGRAPH_READER}
    summary = ovpasses.rewrite(model, kv_sharing="unshare")
    assert not summary.changed and summary.kept_shared == {vid: SUBGRAPH_READER}
    assert f"kept shared: {vid}: {SUBGRAPH_READER}" in summary_text(summary)


def test_unsharing_pass_not_selected_is_reported():
    model = build_stack(SPEC)
    summary = ovpasses.rewrite(model, passes=["SharedKVCacheDetection"], kv_sharing="unshare")
    assert not summary.changed and len(model.get_variables()) == 4
    assert summary.actions[SPEC.sdpa_name(1)] == UNSHARED and summary.actions[SPEC.sdpa_name(3)] == UNSHARED
    assert summary.not_applied() == {SharedKVCacheUnsharing.NAME: [SPEC.sdpa_name(1), SPEC.sdpa_name(3)]}


def test_unknown_mode_is_a_documented_error():
    with pytest.raises(OvpassesError, match=r"kv_sharing must be one of keep, unshare, not 'share'"):
        ovpasses.rewrite(build_stack(SPEC), kv_sharing="share")


def test_borrower_labels_are_short_and_unique():
    names = ["__module.model.layers.7.self_attn/aten::sdpa/ScaledDotProductAttention", "layers.12.self_attn.sdpa",
             "decoder.layer.3.attn", "a/layers.4/x", "b/layers.4/y", "attention"]
    assert borrower_labels(names) == {names[0]: "layers.7", names[1]: "layers.12", names[2]: "layer.3",
                                      names[3]: names[3], names[4]: names[4], names[5]: names[5]}


def test_cli_rewrite_twice_in_place_and_inspect(tmp_path, capsys):
    """Through files: the second --in-place run changes nothing, byte for byte; inspect reports the mode
    and what it costs."""
    target = tmp_path / "m.xml"
    assert cli.main(["rewrite", f"{TINY8}/openvino_model.xml", "-o", str(target), "--kv-sharing", "unshare",
                     "--format", "json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["kv_sharing"] == "unshare" and first["changed"] and len(first["unshared"]) == 8
    assert first["extra_cache_bytes_per_token"] == sum(u["bytes_per_token"] for u in first["unshared"]) > 0
    files = target.read_bytes(), target.with_suffix(".bin").read_bytes()
    assert cli.main(["rewrite", str(target), "--in-place", "--kv-sharing", "unshare", "--format", "json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert not second["changed"] and second["detected"]["shared"] == 0
    assert (target.read_bytes(), target.with_suffix(".bin").read_bytes()) == files

    assert cli.main(["inspect", f"{TINY8}/openvino_model.xml", "--kv-sharing", "unshare", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kv_sharing"] == "unshare"
    assert report["extra_cache_bytes_per_token"] == first["extra_cache_bytes_per_token"]
    assert {s["action"] for s in report["sdpa"] if s["status"] == "shared"} >= {UNSHARED}
    assert cli.main(["inspect", f"{TINY8}/openvino_model.xml", "--kv-sharing", "unshare"]) == 0
    assert "kv sharing: unshare: 8 caches added" in capsys.readouterr().out

    with pytest.raises(SystemExit) as exited:
        cli.main(["rewrite", f"{TINY8}/openvino_model.xml", "--dry-run", "--kv-sharing", "share"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("ovpass: error: argument --kv-sharing: invalid choice") and err.count("\n") == 1


def test_folder_rewrite_unshares(tmp_path):
    summary = rewrite_folder(TINY8, tmp_path / "out", RewriteOptions(kv_sharing=KVSharing.UNSHARE))
    (model,) = [m for m in summary.models if m.summary is not None]
    assert model.summary.kv_sharing == "unshare" and len(model.summary.unshared) == 8
    written = ov.Core().read_model(tmp_path / "out" / "openvino_model.xml")
    assert len(written.get_variables()) == 16 and analyze_kv_sharing(written).shared_sdpa == []


def test_fusion_prediction_follows_the_unshared_model():
    """The summary predicts fusion for the model as unsharing left it (every layer exclusive), and the
    compiled model agrees; the unmodified prediction stays that of the input."""
    import openvino as ov

    from ovpasses.app.check import check_model
    report = check_model(ov.Core().read_model(f"{TINY8}/openvino_model.xml"), steps=1,
                          options=RewriteOptions(kv_sharing=KVSharing.UNSHARE))
    assert report.rewritten.fused_sdpa == 8 and report.rewritten.fusion_disagreements == []
    assert report.original.fusion_disagreements == [] and report.original.fused_sdpa == 2
