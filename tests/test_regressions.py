"""Regressions: each from the smallest graph that showed a bug, found by tests/test_properties.py."""

from __future__ import annotations

import gc
import itertools
import json
import os
import re
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

import ovpasses
from ovpasses import OvpassesError
from ovpasses.app import cli
from ovpasses.app.check import count_fused_sdpa
from ovpasses.app.render.text import summary_text
from ovpasses.features.sliding_window.first_prompt_plan import RT_BLOCKED
from ovpasses.passes.disable_stateful_sdpa_fusion import RT_BARRIER, is_fusion_barrier
from ovpasses.pipeline import PIPELINE_PASSES
from ovpasses.plan.decisions import Action
from ovpasses.precision import EXACT_CPU_CONFIG as CONFIG
from ovpasses.plan.runtimes import FIRST_FIXED, installed_version
from testkit.graphs import (
    LOOP_SDPA,
    STACK_OUTPUT,
    CacheLoopSpec,
    StackSpec,
    build_cache_loop,
    build_stack,
    cache_loop_reference,
    cache_loop_steps,
    run_cache_loop,
    run_stack,
    stack_reference,
    stack_steps,
    step_feed,
)
from testkit.matrix import apply_mode

BARRIER, DECOMPOSE, NATIVE, SHAPEOF, UNANALYSED = (Action.BARRIER, Action.DECOMPOSE, Action.NATIVE, Action.SHAPEOF,
                                                  Action.UNANALYSED)

AFFECTED = installed_version() < FIRST_FIXED


def assert_fails(compiled: ov.CompiledModel, spec: StackSpec, steps, error: str) -> None:
    """The plugin cannot run ``steps``: the inference raises ``error`` (run_stack waits for each inference, so on one
    core too: a synchronous infer there returned outputs with no tokens instead,
    :func:`test_plugin_sync_infer_on_one_thread_hides_the_error`), or, where it does not raise, gives no tokens."""
    try:
        outputs = run_stack(compiled, spec, steps)
    except RuntimeError as raised:
        assert error in str(raised), str(raised)[-500:]
        return
    assert [o.shape for o in outputs] != [s.inputs_embeds.shape for s in steps], "it runs: re-measure"


def assert_loses_state(compiled: ov.CompiledModel, spec: StackSpec, steps) -> None:
    assert_fails(compiled, spec, steps, "null input states")


def assert_matches_reference(got: list[np.ndarray], spec: StackSpec, steps, atol: float = 1e-5,
                             expected: list[np.ndarray] | None = None) -> None:
    """``got`` against the float64 reference (``expected``, else computed), ``atol`` scaled by max(1,
    max|reference|) (f32: see the tolerance note of tests/test_properties.py)."""
    expected = stack_reference(spec, steps) if expected is None else expected
    magnitude = max(1.0, max(float(np.abs(e).max()) for e in expected))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=0, atol=atol * magnitude)


def test_cache_shapeof_decomposition_without_beam_gather():
    """A ShapeOf on a cache Concat (here the 'shapeof' GQA broadcast) whose past is the ReadValue itself,
    with no Gather(beam_idx): the affected profile's rewrite must not raise."""
    spec = StackSpec(k_source=(0,), beam_gather=False)
    model = build_stack(spec)
    summary = ovpasses.rewrite(model, "2026.0")
    assert summary.changed
    concat = next(n for n in model.get_ordered_ops() if n.get_friendly_name() == "layers.0.self_attn.key_cache")
    assert not [t for t in concat.output(0).get_target_inputs() if t.get_node().get_type_name() == "ShapeOf"]


def test_duplicate_sdpa_friendly_names_raise_a_documented_error():
    model = build_stack(StackSpec(k_source=(0, 1)))
    for node in model.get_ordered_ops():
        if node.get_type_name() == "ScaledDotProductAttention":
            node.set_friendly_name("sdpa")
    with pytest.raises(OvpassesError, match="'sdpa'"):
        ovpasses.rewrite(model)


def test_second_rewrite_leaves_a_barrier_alone():
    """Found by the idempotence property: a second rewrite saw the barrier pass change nothing and sent
    the SDPAs already behind the first run's barrier to the decomposition fallback."""
    spec = StackSpec(k_source=(0, 0), kv_heads=4, beam_gather=False, dynamic_batch=False, borrow_path="own_concat")
    model = build_stack(spec)
    first = ovpasses.rewrite(model)
    assert set(first.actions.values()) == {BARRIER}
    second = ovpasses.rewrite(model)
    assert second.changed is False and second.actions == first.actions
    assert [n.get_friendly_name() for n in model.get_ordered_ops() if n.get_type_name() == "ScaledDotProductAttention"] \
        == [spec.sdpa_name(0), spec.sdpa_name(1)]


# issue 14, item 5: `ovpass rewrite --in-place` added a second barrier on every run. The barrier was
# recognised by its runtime-info key only, which OpenVINO's IR writer does not serialise.
ROUND_TRIP = StackSpec(k_source=(0, 0), kv_heads=4, beam_gather=False, dynamic_batch=False,
                       borrow_path="own_concat")
RUNTIMES = pytest.mark.parametrize("runtime", [None, "2026.0"], ids=["installed", "affected_profile"])


def ir_bytes(xml: Path) -> bytes:
    return xml.read_bytes() + b"\0" + xml.with_suffix(".bin").read_bytes()


def save(model: ov.Model, xml: Path) -> bytes:
    """Save ``model`` as the CLI does and return the bytes of the two files."""
    ov.save_model(model, str(xml), compress_to_fp16=False)
    return ir_bytes(xml)


def assert_one_barrier_per_input(model: ov.Model, sdpa_names: list[str]) -> None:
    """Each named SDPA reads K and V straight from a barrier Reshape whose own input is no barrier."""
    sdpa = {n.get_friendly_name(): n for n in model.get_ordered_ops()
            if n.get_type_name() == "ScaledDotProductAttention"}
    for name in sdpa_names:
        for port, suffix in ((1, "key"), (2, "value")):
            barrier = sdpa[name].input_value(port).get_node()
            assert barrier.get_friendly_name() == f"{name}/{suffix}_fusion_barrier"
            assert is_fusion_barrier(barrier)
            assert not is_fusion_barrier(barrier.input_value(0).get_node()), f"{name}: a barrier behind a barrier"


@RUNTIMES
def test_barrier_read_back_from_a_file_is_recognised(runtime, tmp_path):
    model = build_stack(ROUND_TRIP)
    first = ovpasses.rewrite(model, runtime)
    assert set(first.actions.values()) == {BARRIER}
    saved = save(model, tmp_path / "once.xml")

    read_back = ov.Core().read_model(tmp_path / "once.xml")
    second = ovpasses.rewrite(read_back, runtime)
    assert second.changed is False, str(second)
    assert second.actions == first.actions
    assert_one_barrier_per_input(read_back, list(first.actions))
    assert save(read_back, tmp_path / "twice.xml") == saved


@RUNTIMES
def test_rewrite_in_place_five_times_is_a_fixed_point(runtime, tmp_path, capsys):
    """The command of the report: the second and later runs change nothing and rewrite the files to
    the same bytes."""
    xml = tmp_path / "model.xml"
    save(build_stack(ROUND_TRIP), xml)
    args = ["rewrite", str(xml), "--in-place", "--format", "json"] + (["--runtime", runtime] if runtime else [])
    states = []
    for _ in range(5):
        capsys.readouterr()
        assert cli.main(args) == 0
        summary = json.loads(capsys.readouterr().out)
        model = ov.Core().read_model(xml)
        states.append((summary["changed"], len(model.get_ordered_ops()), ir_bytes(xml)))
    assert [changed for changed, _, _ in states] == [True, False, False, False, False]
    assert len({(count, data) for _, count, data in states}) == 1
    assert_one_barrier_per_input(model, [ROUND_TRIP.sdpa_name(0), ROUND_TRIP.sdpa_name(1)])


def test_a_reshape_of_the_barrier_form_under_another_name_is_no_barrier():
    """An exporter's own no-op Reshape before K is not taken for a barrier: nothing says that it keeps
    the SDPA out of fusion, so the rewrite still puts its own barrier there."""
    model = build_stack(ROUND_TRIP)
    ovpasses.rewrite(model)
    for node in model.get_ordered_ops():
        if node.get_friendly_name().endswith("_fusion_barrier"):
            del node.get_rt_info()[RT_BARRIER]
            node.set_friendly_name(node.get_friendly_name().replace("_fusion_barrier", "_reshape"))
    assert not any(map(is_fusion_barrier, model.get_ordered_ops()))
    assert ovpasses.rewrite(model).changed
    assert_one_barrier_per_input(model, [ROUND_TRIP.sdpa_name(0), ROUND_TRIP.sdpa_name(1)])

@RUNTIMES
@pytest.mark.parametrize("loop_reads", ["concat", "past", "readvalue"])
def test_cache_read_by_a_loop_is_left_alone(runtime, loop_reads, tmp_path):
    """Issue 14, item 14: the SDPA whose cache a Loop body also reads is not exclusive, so the rewrite
    leaves the graph as it is, and the graph compiles and runs on CPU as the unmodified one does, both
    equal to the float64 reference (measured: the plugin does not fuse this SDPA)."""
    spec = CacheLoopSpec(loop_reads=loop_reads)
    steps = cache_loop_steps(spec)
    model = build_cache_loop(spec)
    unmodified = save(model, tmp_path / "original.xml")
    summary = ovpasses.rewrite(model, runtime)
    assert summary.actions == {LOOP_SDPA: UNANALYSED} and summary.changed is False
    assert save(model, tmp_path / "rewritten.xml") == unmodified

    core = ov.Core()
    before = run_cache_loop(core.compile_model(core.read_model(tmp_path / "original.xml"), "CPU", CONFIG), steps)
    after = run_cache_loop(core.compile_model(model, "CPU", CONFIG), steps)
    reference = cache_loop_reference(spec, steps)
    magnitude = max(1.0, max(float(np.abs(r[name]).max()) for r in reference for name in r))
    for b, a, r in zip(before, after, reference):
        for name in r:
            np.testing.assert_array_equal(a[name], b[name])
            np.testing.assert_allclose(a[name], r[name], rtol=0, atol=1e-5 * magnitude)

# Graphs that crash unmodified on openvino 2026.0 ("... has null input states" at the first decode):
# an exclusive cache fused with Gather(beam_idx), whose Concat also feeds a ShapeOf.
AFFECTED_CRASHES = {
    "one_layer_no_gqa_past_length": StackSpec(k_source=(0,), kv_heads=4, past_length_from=(0,)),
    "bidirectional_gqa_past_length": StackSpec(k_source=(0, 1, 2), gqa_form="bidirectional",
                                               past_length_from=(0,)),
}


@pytest.mark.skipif(not AFFECTED, reason="needs an affected runtime (2025.2 - 2026.1); "
                                         "tests/test_properties.py runs this file under 2026.0")
@pytest.mark.parametrize("spec", AFFECTED_CRASHES.values(), ids=AFFECTED_CRASHES.keys())
def test_affected_runtime_crash_is_fixed(spec):
    steps = stack_steps(spec)
    core = ov.Core()
    assert_loses_state(core.compile_model(build_stack(spec), "CPU", CONFIG), spec, steps)
    model = build_stack(spec)
    ovpasses.rewrite(model)
    got = run_stack(core.compile_model(model, "CPU", CONFIG), spec, steps)
    assert_matches_reference(got, spec, steps)


# Graphs that crash unmodified on openvino 2026.0.0 *and* 2026.4.1 ("null input states"): a borrower
# reads its owner's cache through its own Gather/Concat on the owner's ReadValue (off the Assign's
# path), so the plugin fuses the owner into a stateful kernel and the borrower's ReadValue is left
# without state. Chosen in forms the plugin fuses (Gather(beam_idx), no GQA or the bidirectional
# broadcast), so the fused count is checked too: every SDPA planned native stays fused.
OFF_PATH_CRASHES = {
    "no_gqa_off_path_borrower": StackSpec(k_source=(0, 1, 1), kv_heads=4, borrow_path="own_concat"),
    "bshd_off_path_borrower": StackSpec(k_source=(0, 1, 1), kv_heads=4, layout="BSHD", borrow_path="own_concat"),
    "gemma_bidirectional_past_length_off_path": StackSpec(k_source=(0, 1, 0, 1), gqa_form="bidirectional",
                                                          past_length_from=(0,), borrow_path="own_concat"),
}
WITHOUT_BARRIER = [p for p in PIPELINE_PASSES if p != "DisableStatefulSDPAFusion"]


@pytest.mark.parametrize("passes", [None, WITHOUT_BARRIER], ids=["barrier", "decomposition_fallback"])
@pytest.mark.parametrize("spec", OFF_PATH_CRASHES.values(), ids=OFF_PATH_CRASHES.keys())
def test_off_path_borrower_crash_is_fixed(spec, passes):
    steps = stack_steps(spec)
    core = ov.Core()
    assert_loses_state(core.compile_model(build_stack(spec), "CPU", CONFIG), spec, steps)
    model = build_stack(spec)
    summary = ovpasses.rewrite(model, passes=passes)
    kept_out = {name for cache in summary.analysis.caches.values() if cache.off_path_readers for name in cache.sdpa}
    assert kept_out and {summary.actions[name] for name in kept_out} == {BARRIER if passes is None else DECOMPOSE}
    # one record per planned node: the barrier's, and where it was left out, the decomposition's that took it over
    records = {(r.rule, r.node): r.status.value for r in summary.records}
    expected = {("DisableStatefulSDPAFusion", n): "applied" if passes is None else "not_selected" for n in kept_out}
    if passes is not None:
        expected.update({("ScaledDotProductAttentionDecomposition", n): "applied" for n in kept_out})
    assert records == expected
    compiled = core.compile_model(model, "CPU", CONFIG)
    assert count_fused_sdpa(compiled) == sum(a in (NATIVE, SHAPEOF) for a in summary.actions.values())
    got = run_stack(compiled, spec, steps)
    assert_matches_reference(got, spec, steps)


@pytest.mark.skipif(installed_version() < (2026, 1, 0), reason="measured on 2026.1.0 - 2026.4.1 (2026.0.0 runs this "
                                                                "graph)")
def test_plugin_cannot_run_unfused_f16_cache():
    """A CPU plugin defect the property tests met on 2026.4.1, kept so that a fix shows up: an f16 model
    whose cache the plugin does not fuse fails ("Can not clone with new dims"), whatever keeps it
    unfused. With an off-path borrower the unmodified graph loses its state instead, so ovpasses can
    trade one failure for the other only; tests/test_properties.py accepts that case after checking it
    with plugin_cannot_run_unfused(). With a static batch it runs (measured 2026-12-07 on 2026.1.0 - 2026.4.1;
    the runtime profile's ``unfused_f16_state_fails``, which keeps the bounding off such caches). If this test
    fails, the plugin was fixed: drop that allowance and end the profile's span."""
    spec = StackSpec(k_source=(0, 0), kv_heads=4, cache_type="f16", dtype="f16", borrow_path="own_concat")
    steps = stack_steps(spec, 2, 1)
    core = ov.Core()
    assert_loses_state(core.compile_model(build_stack(spec), "CPU", CONFIG), spec, steps)
    model = build_stack(spec)
    ovpasses.rewrite(model)
    assert_fails(core.compile_model(model, "CPU", CONFIG), spec, steps, "Can not clone with new dims")
    unshared = spec.with_(k_source=(0,), borrow_path="concat")
    decomposed = apply_mode(build_stack(unshared), "decomposed")
    assert_fails(core.compile_model(decomposed, "CPU", CONFIG), unshared, stack_steps(unshared, 2, 1),
                 "Can not clone with new dims")
    static = unshared.with_(dynamic_batch=False)
    steps = stack_steps(static, 2, 1)
    assert_matches_reference(run_stack(core.compile_model(apply_mode(build_stack(static), "decomposed"), "CPU", CONFIG),
                                       static, steps), static, steps, atol=4 * 2.0**-10)


def _threads() -> int:
    return int(re.search(r"Threads:\s+(\d+)", Path("/proc/self/status").read_text())[1])


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="counts threads through /proc")
def test_plugin_leaks_a_thread_per_failing_inference():
    """A CPU plugin defect (2026.0.0 and 2026.4.1) that cut the first thorough property run short: each
    inference that raises leaves a thread behind, and after some thousands pthread_create fails
    ("Resource temporarily unavailable"). tests/test_properties.py::run fails on that error instead of
    counting it as a graph the plugin cannot run. If this test fails, the plugin was fixed (the graph
    runs, or a failing inference no longer leaves a thread): drop that allowance."""
    spec = StackSpec(k_source=(0,), kv_heads=4, scale="explicit")   # the fused kernel rejects the scalar mask
    steps = stack_steps(spec, 2, 1)
    core = ov.Core()
    with pytest.raises(RuntimeError, match="do not match"):   # it raises at all here (else: re-measure)
        run_stack(core.compile_model(build_stack(spec), "CPU", CONFIG), spec, steps)
    before = _threads()
    for _ in range(10):
        with pytest.raises(RuntimeError, match="do not match"):
            run_stack(core.compile_model(build_stack(spec), "CPU", CONFIG), spec, steps)
    gc.collect()
    assert _threads() - before >= 10


def test_plugin_loop_of_no_iteration_returns_its_previous_output():
    """A CPU plugin defect (2025.2.0, 2026.0.0, 2026.4.1) met by the fast-first-prompt prototype
    (benchmarks/records/2026-11-27-fast-first-prompt-prototype.md): a Loop whose trip count is 0 returns the
    concatenated output of its previous inference instead of an empty one. A form that loops over a prompt's
    blocks must slice that output to the rows it means. If this test fails, the plugin was fixed: say so in
    docs/runtimes.md."""
    from openvino import opset13 as ops

    x = ops.parameter([1, -1, 4], ov.Type.f32, name="x")
    trips = ops.parameter([], ov.Type.i64, name="trips")
    row = ops.parameter([1, 1, 4], ov.Type.f32, name="row")
    doubled = ops.multiply(row, ops.constant(np.float32(2)))
    body = ov.Model([doubled.output(0), ops.constant(True).output(0)],
                    [ops.parameter([1], ov.Type.i64, name="iteration"), row], "body")
    loop = ops.loop(trips, ops.constant(True))
    loop.set_function(body)
    loop.set_special_body_ports([0, 1])
    loop.set_sliced_input(row, x.output(0), 0, 1, 1, -1, 1)
    model = ov.Model([loop.get_concatenated_slices(doubled.output(0), 0, 1, 1, -1, 1)], [x, trips])
    request = ov.Core().compile_model(model, "CPU", CONFIG).create_infer_request()
    request.infer({"x": np.ones((1, 3, 4), np.float32), "trips": np.int64(3)})
    assert list(request.get_output_tensor(0).shape) == [1, 3, 4]
    assert np.array_equal(request.get_output_tensor(0).data, np.full((1, 3, 4), 2, np.float32))
    request.infer({"x": np.ones((1, 0, 4), np.float32), "trips": np.int64(0)})
    assert list(request.get_output_tensor(0).shape) == [1, 3, 4]    # the specification: [1, 0, 4]


def test_plugin_sync_infer_on_one_thread_hides_the_error():
    """A CPU plugin defect (2025.2.0, 2026.0.0, 2026.4.1; found 2026-12-07 when the test workers were pinned to one core
    each): compiled for one inference thread (``INFERENCE_NUM_THREADS=1``, or a process whose affinity holds one
    CPU), a synchronous ``infer`` whose inference fails returns without an error, its outputs the previous
    inference's; ``start_async`` and ``wait`` raise it, as ``infer`` does on two threads. The failure here is the
    bounded cache's lost-positions check (a Concat of mismatched shapes, a shape-inference error); a scatter out of
    range (a kernel's error) behaves alike. The library infers through ``ovpasses._ov.infer`` (start_async and wait)
    for that reason. If this test fails, the plugin was fixed: say so in docs/runtimes.md."""
    from ovpasses._ov import infer
    from testkit.graphs import failing_check_model

    model = failing_check_model()

    def feeds(flag, values):
        return {"lost": np.array([flag], np.int64), "x": np.array(values, np.float32)}

    for threads in (1, 2):   # on a one-CPU process the plugin compiles one thread for both
        compiled = ov.Core().compile_model(model, "CPU", {**CONFIG, "INFERENCE_NUM_THREADS": threads})
        threads = compiled.get_property("INFERENCE_NUM_THREADS")
        request = compiled.create_infer_request()
        request.infer(feeds(0, [1.0]))
        assert request.get_output_tensor(0).data.tolist() == [1.0]
        with pytest.raises(RuntimeError, match="Concat"):
            infer(request, feeds(1, [5.0, 6.0]))
        if threads == 1:
            request.infer(feeds(1, [5.0, 6.0]))              # no error: the previous inference's output
            assert request.get_output_tensor(0).data.tolist() == [1.0]
        else:
            with pytest.raises(RuntimeError, match="Concat"):
                request.infer(feeds(1, [5.0, 6.0]))
        infer(request, feeds(0, [7.0, 8.0]))
        assert request.get_output_tensor(0).data.tolist() == [7.0, 8.0]


@pytest.mark.parametrize("runtime", [None, "2026.0"])
def test_trimmable_after_the_mask_slice_with_k_owned_and_v_borrowed(runtime):
    """Found 2026-12-06 by the hybrid property sweep: with the 2026.0 - 2026.2 profiles (the mask Slice for the paged
    converter runs first, so both layers read one mask) the trimmable rewrite of a layer that owns its K cache but
    borrows its V counted the mask's columns from that layer's cache, whose new K is computed from the first layer's
    output, which reads the mask: a cycle ('Loop detected during topological sort'). The columns are counted from the
    cache of the first layer that reads the mask now. Trimmed to its keep after every step (a prefill of 9 tokens
    in chunks of 3, then 6 steps, window 4), the model decodes the float64 reference."""
    spec = StackSpec(k_source=(0, 1), v_source=(0, 0), mask="sliding", kv_heads=4)
    model = build_stack(spec)
    summary = ovpasses.rewrite(model, runtime, sliding_window="trimmable")
    assert set(summary.sliding_window_caches.bounded) == set(spec.variables())
    steps = stack_steps(spec, prefill=9, decode=6, chunk=3)
    compiled = ov.Core().compile_model(model, "CPU", CONFIG)
    request = compiled.create_infer_request()
    trimmer = ovpasses.SlidingWindowTrimmer.for_model(model, request)
    got = run_stack(compiled, spec, steps, request, after_step=trimmer.trim)
    assert trimmer.trims > 0 and {s.name: s.state.shape[2] for s in request.query_state()} == trimmer.keep
    assert_matches_reference(got, spec, steps)


def test_blocked_first_prompt_of_an_unshared_borrower_before_a_sliding_owner():
    """Found 2026-12-08 by property 10 (test_sliding_window_rewrites_keep_the_outputs) in a default test run: a full
    layer 0, a sliding layer 1 owning its K, a sliding layer 2 reading layer 0's K; unshared, trimmable, the first
    prompt blocked. The plan listed layer 2 (its K cache made by the unsharing) before layer 1, and the blocked first
    prompt built the gate both read from layer 2's query, which layer 1's output feeds: 'Loop detected during
    topological sort'. The layers are taken in the model's order now. A first prompt of 6 (past the keep: the blocked
    path) and 3 steps, trimmed after each, decode the float64 reference."""
    spec = StackSpec(k_source=(0, 1, 0), kv_heads=4, gqa_form="bidirectional", beam_gather=False, mask="sliding",
                     window=2, full_layers=(0,), dynamic_batch=False)
    model = build_stack(spec)
    summary = ovpasses.rewrite(model, sliding_window="trimmable", kv_sharing="unshare", first_prompt="blocked")
    blocked = set(model.get_rt_info(RT_BLOCKED).astype(str).split(","))
    assert blocked == {"layers.1.self_attn.sdpa", "layers.2.self_attn.sdpa"}, summary_text(summary)
    steps = stack_steps(spec, prefill=6, decode=3)
    compiled = ov.Core().compile_model(model, "CPU", CONFIG)
    request = compiled.create_infer_request()
    trimmer = ovpasses.SlidingWindowTrimmer.for_model(model, request)
    got = run_stack(compiled, spec, steps, request, after_step=trimmer.trim)
    assert trimmer.trims > 0
    assert_matches_reference(got, spec, steps)


def kv_layouts(layers: int):
    """Every way ``layers`` layers can own or borrow one kind of cache: layer i reads layer ``k[i] <= i``'s, and
    a layer read by another owns its own."""
    for sources in itertools.product(*(range(layer + 1) for layer in range(layers))):
        if all(sources[source] == source for source in sources):
            yield sources


@pytest.mark.slow   # 174 rewrites, compiles and runs of each mode: about a minute
@pytest.mark.parametrize("sliding_window", ["trimmable", "bounded", "trimmable+blocked"])
def test_every_kv_layout_of_two_and_three_layers_decodes_the_reference(sliding_window):
    """Where the K/V-layout regression above came from, swept: every layout of K and V owned or borrowed apart on
    two and three sliding layers, under the installed, the 2026.0 and the 2025.2 profiles, caches kept shared or
    unshared: the rewritten model, trimmed after every step where trimmable (a prefill of 9 in chunks of 3, then 4
    steps, window 4), decodes the float64 reference. Before the mend 17 of these cases (all trimmable, on the
    2026.0 profile) made a cycle. ``trimmable+blocked``: the first prompt blocked, the prefill of 9 in one call (past
    the keep of 3: the blocked path), layer 0 a full layer (the loop of
    test_blocked_first_prompt_of_an_unshared_borrower_before_a_sliding_owner needs one)."""
    core = ov.Core()
    failed = []
    mode, _, first_prompt = sliding_window.partition("+")
    for layers, runtime, kv_sharing in itertools.product((2, 3), (None, "2026.0", "2025.2"), ("keep", "unshare")):
        for k_source, v_source in itertools.product(kv_layouts(layers), repeat=2):
            spec = StackSpec(k_source=k_source, v_source=v_source, mask="sliding", kv_heads=4,
                             full_layers=(0,) if first_prompt else ())
            case = (k_source, v_source, runtime, kv_sharing)
            model = build_stack(spec)
            try:
                summary = ovpasses.rewrite(model, runtime, sliding_window=mode, kv_sharing=kv_sharing,
                                           first_prompt=first_prompt or "fused")
            except RuntimeError as error:
                failed.append((*case, str(error).strip().splitlines()[-1]))
                continue
            steps = stack_steps(spec, prefill=9, decode=4, chunk=None if first_prompt else 3)
            compiled = core.compile_model(model, "CPU", CONFIG)
            request = compiled.create_infer_request()
            trimmed = mode == "trimmable" and summary.sliding_window_caches.bounded   # none: layer 1 reads layer 0's
            trimmer = ovpasses.SlidingWindowTrimmer.for_model(model, request) if trimmed else None
            got = run_stack(compiled, spec, steps, request, after_step=trimmer.trim if trimmer is not None else None)
            try:
                assert_matches_reference(got, spec, steps)
            except AssertionError as error:
                failed.append((*case, str(error).strip().splitlines()[-1]))
    assert not failed, failed


def test_a_trimmer_cuts_each_cache_on_its_own_sequence_axis(tmp_path):
    """Found by a sweep of the sliding-window modes over drawn stacks (session 28): the trimmer cut every cache on
    axis 2, which in a ``[batch, sequence, KV heads, head size]`` (BSHD) cache holds the heads ('Can not clone with
    new dims'). The rewrite records each trimmable cache's sequence axis in the model's runtime info (kept in the
    IR), and the trimmer cuts there: trimmed after every step, the stack read back from its files decodes the
    float64 reference, each cache held at its keep on axis 1; so does the prompt fed through the trimmer's
    prefill."""
    from ovpasses.features.sliding_window.caches import trimmable_axes

    spec = StackSpec(k_source=(0, 1), layout="BSHD", mask="sliding", window=2, kv_heads=4)   # no GQA ShapeOf
    model = build_stack(spec)
    ovpasses.rewrite(model, sliding_window="trimmable")
    assert trimmable_axes(model) == {vid: 1 for vid in spec.variables()}
    ov.save_model(model, tmp_path / "model.xml", compress_to_fp16=False)
    read = ov.Core().read_model(tmp_path / "model.xml")
    assert trimmable_axes(read) == trimmable_axes(model)
    steps = stack_steps(spec, prefill=5, decode=4, chunk=2)
    compiled = ov.Core().compile_model(read, "CPU", CONFIG)
    request = compiled.create_infer_request()
    trimmer = ovpasses.SlidingWindowTrimmer.for_model(read, request)
    got = run_stack(compiled, spec, steps, request, after_step=trimmer.trim)
    assert trimmer.trims > 0
    assert {state.name: state.state.shape[1] for state in request.query_state()} == trimmer.keep
    assert_matches_reference(got, spec, steps)
    # the prompt through the trimmer's prefill (chunks of 2, a trim after each), then the decode steps
    whole = stack_steps(spec, prefill=5, decode=4)
    request = ov.Core().compile_model(read, "CPU", CONFIG).create_infer_request()
    trimmer = ovpasses.SlidingWindowTrimmer.for_model(read, request)
    trimmer.prefill(step_feed(spec, whole[0]), chunk=2)
    got = [np.array(request.get_tensor(STACK_OUTPUT).data, copy=True)]
    for step in whole[1:]:
        request.infer(step_feed(spec, step))
        got.append(np.array(request.get_tensor(STACK_OUTPUT).data, copy=True))
        trimmer.step()
    expected = stack_reference(spec, whole)
    expected[0] = expected[0][:, -got[0].shape[1]:]   # prefill leaves the last chunk's outputs in the request
    assert {state.name: state.state.shape[1] for state in request.query_state()} == trimmer.keep
    assert_matches_reference(got, spec, whole, expected=expected)
