"""sliding_window="bounded" (issue 22): a KV cache that only sliding-window attention reads keeps its last W-1
positions.

Exactness is claimed against the unmodified IR's greedy tokens (on an affected runtime, where the unmodified IR
cannot run, against ``rewrite()`` in the default mode) and, through ``testkit.matrix``, against
transformers' tokens in reference.json, on the tiny fixtures (window 16, so caches wrap within a few steps).
Structure is asserted on the rewritten graph.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from testkit.cli import unwrapped
from testkit.greedy import genai_chat
from testkit.matrix import grid_cell

import ovpasses
from ovpasses import OvpassesError
from ovpasses.app import cli
from ovpasses._ov import infer
from ovpasses.analysis.kv_sharing import BOUND_SUFFIX, analyze_kv_sharing
from ovpasses.features.sliding_window.caches import Refusal
from ovpasses.options import RewriteOptions, SlidingWindow
from ovpasses.features.sliding_window.sliding_window_cache_bounding import CHECK_SUFFIX, SlidingWindowKVCacheBounding
from ovpasses.plan.decisions import Action
from ovpasses.precision import EXACT_CPU_CONFIG
from ovpasses.plan.runtimes import FIRST_FIXED, installed_version
from ovpasses.app.render.text import summary_text
from testkit.graphs import StackSpec, build_stack, run_stack, stack_reference, stack_steps, step_feed

BOUNDED = Action.BOUNDED
BOUNDED_OPTIONS = RewriteOptions(sliding_window=SlidingWindow.BOUNDED)

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "gemma4"
TINY8 = FIXTURES / "tiny8"
WINDOW = 16
AFFECTED = installed_version() < FIRST_FIXED
AFFECTED_PYTHON = ROOT / ".venvs" / "ov-2026.0.0" / "bin" / "python"
needs_affected = pytest.mark.skipif(not AFFECTED_PYTHON.exists(),
                                    reason="needs .venvs/ov-2026.0.0 (bash tools/venv.sh ov 2026.0.0)")
SLIDING_VARIABLES = sorted(f"past_key_values.{layer}.{kind}present.{layer}.{kind}"
                           for layer in (0, 1, 2) for kind in ("key", "value"))


def read(folder: Path = TINY8, name: str = "openvino_model.xml") -> ov.Model:
    return ov.Core().read_model(folder / name)


def baseline() -> ov.Model:
    """The model the bounded one must equal: the unmodified IR (on an affected runtime it loses its state, so
    there the default rewrite, which only mends that)."""
    model = read()
    if AFFECTED:
        ovpasses.rewrite(model)
    return model


@functools.cache
def baseline_compiled() -> ov.CompiledModel:
    """:func:`baseline` compiled once per process; each :class:`Greedy` on it has an infer request (a state) of its
    own."""
    return ov.Core().compile_model(baseline(), "CPU", EXACT_CPU_CONFIG)


class Greedy:
    """Greedy decoding over ov.Core with the prompt in chunks, keeping each step's last logits."""

    def __init__(self, model: ov.Model | ov.CompiledModel, threads: int | None = None):
        if not isinstance(model, ov.CompiledModel):
            model = ov.Core().compile_model(model, "CPU", {**EXACT_CPU_CONFIG, **(
                {} if threads is None else {"INFERENCE_NUM_THREADS": threads})})
        self.request = model.create_infer_request()
        self.request.reset_state()
        self.past = 0

    def feed(self, ids: list[int]) -> np.ndarray:
        n = len(ids)
        # start_async and wait, as the library infers: a synchronous infer on one thread hides a failed inference
        infer(self.request, {"input_ids": np.array([ids], np.int64),
                             "attention_mask": np.ones((1, self.past + n), np.int64),
                             "position_ids": np.arange(self.past, self.past + n, dtype=np.int64)[None],
                             "beam_idx": np.zeros(1, np.int32)})
        self.past += n
        return self.request.get_output_tensor(0).data[0, -1].copy()

    def run(self, prompt: list[int], chunk: int, steps: int) -> tuple[list[int], np.ndarray]:
        for start in range(0, len(prompt), chunk):
            logits = self.feed(prompt[start:start + chunk])
        tokens, all_logits = [], []
        for _ in range(steps):
            all_logits.append(logits)
            tokens.append(int(np.argmax(logits)))
            logits = self.feed([tokens[-1]])
        return tokens, np.array(all_logits)

    def state_lengths(self) -> dict[str, int]:
        return {s.name: s.state.shape[2] for s in self.request.query_state()}

    def trim(self, count: int) -> None:
        """What openvino_genai's trim_kv_cache does: every state loses its last ``count`` positions."""
        for state in self.request.query_state():
            data = state.state.data
            state.state = ov.Tensor(np.ascontiguousarray(data[:, :, :data.shape[2] - count]))


@functools.cache
def baseline_run(prompt: tuple[int, ...], chunk: int, steps: int) -> tuple[list[int], np.ndarray]:
    """:meth:`Greedy.run` on :func:`baseline`, once per prompt, chunk and steps (every kv_sharing mode is
    compared with the same run)."""
    return Greedy(baseline_compiled()).run(list(prompt), chunk, steps)


def by_name(model: ov.Model) -> dict[str, ov.Node]:
    return {n.get_friendly_name(): n for n in model.get_ordered_ops()}


def test_plan_bounds_the_caches_only_sliding_layers_read():
    """tiny8 (`sssf sssf`, borrowers 4-6 -> layer 2, 7 -> 3): layers 0-2's caches are read by sliding layers
    only and are bounded to W-1 = 15 positions; layer 3's (read by the full layers 3 and 7) is the reference."""
    model = read()
    summary = ovpasses.rewrite(model, sliding_window="bounded")
    caches = summary.sliding_window_caches
    assert sorted(caches.bounded) == SLIDING_VARIABLES
    assert {(b.window, b.keep, b.sequence_axis) for b in caches.bounded.values()} == {(WINDOW, WINDOW - 1, 2)}
    assert caches.reference.startswith("past_key_values.3.")
    assert {vid: r.reason for vid, r in caches.refused.items()} == {
        f"past_key_values.3.{k}present.3.{k}": Refusal.FULL_ATTENTION for k in ("key", "value")}
    readers = {n for b in caches.bounded.values() for n in b.readers}
    assert {summary.analysis.layer(n) for n in readers} == {0, 1, 2, 4, 5, 6}
    assert all(summary.actions[n] == BOUNDED for n in readers)
    assert [p.changed for p in summary.passes if p.name == SlidingWindowKVCacheBounding.NAME] == [SLIDING_VARIABLES]
    data = summary.to_dict()
    assert data["sliding_window"] == "bounded" and len(data["sliding_window_caches"]["bounded"]) == 6

    nodes = by_name(model)
    sinks = {str(s.get_attributes()["variable_id"]): s for s in model.get_sinks()}
    for vid in SLIDING_VARIABLES:
        window = sinks[vid].input_value(0).get_node()     # Assign(Slice(Concat, -15, end, axis 2))
        assert window.get_type_name() == "Slice" and window.get_friendly_name().endswith(BOUND_SUFFIX)
        assert window.input_value(0).get_node().get_type_name() == "Concat"
        assert [int(window.input_value(i).get_node().get_data()[0]) for i in (1, 3, 4)] == [-(WINDOW - 1), 1, 2]
    for vid in ("past_key_values.3.keypresent.3.key",):
        assert sinks[vid].input_value(0).get_node().get_type_name() == "Concat", "the full cache is left whole"
    for name in readers:   # the bounded SDPAs read one Slice of the sliding-window Select
        mask = nodes[name].input_value(3).get_node()
        assert mask.get_type_name() == "Slice" and mask.input_value(0).get_node().get_type_name() == "Select"
    after = analyze_kv_sharing(model)
    assert sorted(v for v, c in after.caches.items() if c.bounded) == SLIDING_VARIABLES
    assert {c.owner for c in after.caches.values()} == {c.owner for c in summary.analysis.caches.values()}


def test_fusion_prediction_says_bounded_layers_leave_the_kernel():
    """The plugin fuses no bounded cache (its pattern allows nothing between Concat and Assign; the exclusive
    layers 0 and 1 were fused before) and, on tiny8, no shared one: nothing fused, as predicted."""
    model = read()
    summary = ovpasses.rewrite(model, sliding_window="bounded")
    fusion = summary.fusion()
    compiled = ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG)
    from ovpasses.app.check import count_fused_sdpa
    assert count_fused_sdpa(compiled) == sum(v.expected for v in fusion.values()) == 0
    exclusive = {n for n in fusion if summary.analysis.layer(n) in (0, 1)}   # the others: a shared Concat first
    assert all("is bounded" in fusion[n].reason for n in exclusive) and len(exclusive) == 2


PROMPTS = [(12, 100), (40, 100), (40, 7), (5, 1)]   # (prompt length, prefill chunk): shorter and longer than W
# every prompt in the default run, the caches kept or unshared in turn; the other half in the slow tier
GREEDY_CASES = [pytest.param(n, c, sharing, id=f"prompt{n}-chunk{c}-{sharing}",
                             marks=[pytest.mark.slow] if (i + (sharing == "unshare")) % 2 else [])
                for i, (n, c) in enumerate(PROMPTS) for sharing in ("keep", "unshare")]


@pytest.mark.parametrize("length,chunk,kv_sharing", GREEDY_CASES)
def test_greedy_tokens_equal_the_unmodified_model(length, chunk, kv_sharing):
    """50 tokens past prompts shorter and longer than W, prefill whole or in chunks (7: chunks that do not
    divide W; 1: token by token): the decode runs past W three to five times. Tokens equal the baseline's;
    logits within 1e-4 of its (f32); every bounded state holds at most W-1 positions."""
    prompt = [int(t) for t in np.random.default_rng(length + chunk).integers(4, 500, length)]
    expected, expected_logits = baseline_run(tuple(prompt), chunk, 50)
    model = read()
    ovpasses.rewrite(model, kv_sharing=kv_sharing, sliding_window="bounded")
    greedy = Greedy(model)
    tokens, logits = greedy.run(prompt, chunk, 50)
    assert tokens == expected
    np.testing.assert_allclose(logits, expected_logits, rtol=0, atol=1e-4 * max(1.0, np.abs(expected_logits).max()))
    lengths = greedy.state_lengths()
    total = length + 50   # run() feeds every token it picks
    assert sorted({n for v, n in lengths.items() if v.split("/")[0] in SLIDING_VARIABLES}) == [WINDOW - 1]
    assert {n for v, n in lengths.items() if v.split("/")[0] not in SLIDING_VARIABLES} == {total}


@pytest.mark.parametrize("dynamic_batch", [True, False])
@pytest.mark.parametrize("runtime", [None, "2026.0"])
def test_an_f16_state_of_dynamic_batch_stays_whole_where_the_plugin_cannot_run_it_unfused(runtime, dynamic_batch):
    """Found 2026-12-07 by a sweep of the sliding-window modes over f16 stacks: the CPU plugin of 2026.1 and newer
    cannot run an f16 state of dynamic batch out of its fused kernel ("Can not clone with new dims":
    test_regressions.py::test_plugin_cannot_run_unfused_f16_cache), and the bounding takes caches out of it, so the
    bounded model failed at its first inference where the unmodified one decodes. On those profiles such caches
    stay whole, said with the reason; the 2026.0 profile and a static batch bound them. The model decodes as the
    unmodified one on the installed runtime wherever its profile is this one's."""
    spec = StackSpec(k_source=(0, 1), v_source=(0, 1), heads=4, kv_heads=2, head_dim=8, gqa_form="bidirectional",
                     cache_type="f16", dtype="f16",
                     dynamic_batch=dynamic_batch, mask="sliding", window=3, mask_form="bitwise")
    model = build_stack(spec)
    summary = ovpasses.rewrite(model, runtime, sliding_window="bounded")
    caches = summary.sliding_window_caches
    kept_fused = runtime is None and dynamic_batch and installed_version() >= (2026, 1, 0)
    if kept_fused:
        assert not caches.bounded and {r.reason for r in caches.refused.values()} == {Refusal.UNFUSED_F16_STATE}
        assert "an f16 cache whose batch size is dynamic: this runtime's CPU plugin cannot run it outside its fused " \
               "kernel" in " ".join(summary_text(summary).split())
    else:
        assert len(caches.bounded) == 4 and not caches.refused
    if runtime is None:
        steps = stack_steps(spec, 5, 3)
        got = run_stack(ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG), spec, steps)
        expected = run_stack(ov.Core().compile_model(build_stack(spec), "CPU", EXACT_CPU_CONFIG), spec, steps)
        for g, e in zip(got, expected):
            np.testing.assert_allclose(g, e, rtol=0, atol=4 * 2.0**-10 * max(1.0, float(np.abs(e).max())))


def test_one_head_caches_reach_the_sdpa_without_the_gqa_expand():
    """e2b35 (one KV head, 8 query heads, W = 512): every SDPA, bounded or full, reads K and V straight from
    its cache Concat, ``[B, 1, S, D]``, and broadcasts them itself. A 600-token prompt in chunks of 256 and 30
    tokens: tokens equal the unmodified model's, logits within 1e-4 (f32). Unshared first, the full layers'
    exclusive caches still fuse (the plugin's kernel takes one KV head as it is)."""
    e2b35 = FIXTURES / "e2b35"
    model = read(e2b35)
    summary = ovpasses.rewrite(model, sliding_window="bounded")
    caches = summary.sliding_window_caches
    readers = {name for b in caches.bounded.values() for name in b.readers}
    assert len(readers) == 28
    assert {tuple(n.input_value(port).get_node().get_type_name() for port in (1, 2))   # as exported: the expand
            for n in read(e2b35).get_ordered_ops() if n.get_type_name() == "ScaledDotProductAttention"} == \
        {("Reshape", "Reshape")}
    for sdpa in (n for n in model.get_ordered_ops() if n.get_type_name() == "ScaledDotProductAttention"):
        sources = [sdpa.input_value(port).get_node() for port in (1, 2)]
        assert [s.get_type_name() for s in sources] == ["Concat", "Concat"], sdpa.get_friendly_name()
        assert all(s.get_output_partial_shape(0)[1].get_length() == 1 for s in sources)
        assert sdpa.get_input_partial_shape(0)[1].get_length() == 8
    from ovpasses.app.check import count_fused_sdpa
    unshared = read(e2b35)
    ovpasses.rewrite(unshared, kv_sharing="unshare", sliding_window="bounded")
    assert count_fused_sdpa(ov.Core().compile_model(unshared, "CPU", EXACT_CPU_CONFIG)) == 7
    prompt = [int(t) for t in np.random.default_rng(1).integers(4, 250, 600)]
    expected, expected_logits = Greedy(read(e2b35)).run(prompt, 256, 30)
    greedy = Greedy(model)
    tokens, logits = greedy.run(prompt, 256, 30)
    assert tokens == expected
    np.testing.assert_allclose(logits, expected_logits, rtol=0, atol=1e-4 * max(1.0, np.abs(expected_logits).max()))
    assert min(greedy.state_lengths().values()) == 511


@pytest.mark.parametrize("kv_sharing", ["keep", "unshare"])
def test_several_kv_head_expands_broadcast_in_numpy_mode_bit_for_bit(kv_sharing, monkeypatch):
    """tiny8 has 2 KV heads and 4 query heads: the GQA expand stays. Every expand in front of an SDPA that reads a
    bounded or shared cache becomes ``Broadcast(u, ShapeOf(u) * [1, 1, 2, 1, 1], numpy)``; an exclusive full
    cache (unshared) keeps the exported expand, and the plugin's stateful kernel still takes those layers (2).
    A prompt of 40 in chunks of 7 and 30 tokens: logits bit-identical to the bounded model with the exported
    (bidirectional) expands; the tokens against the unmodified model are test_greedy_tokens_equal_the_unmodified_model's."""
    from ovpasses.app.check import count_fused_sdpa
    from ovpasses.features.sliding_window import sliding_window_cache_bounding as bounding

    model = read()
    summary = ovpasses.rewrite(model, kv_sharing=kv_sharing, sliding_window="bounded")
    bounded_readers = {n for b in summary.sliding_window_caches.bounded.values() for n in b.readers}
    modes = {}
    for sdpa in (n for n in model.get_ordered_ops() if n.get_type_name() == "ScaledDotProductAttention"):
        for port in (1, 2):
            reshape = sdpa.input_value(port).get_node()
            broadcast = reshape.input_value(0).get_node()
            unsqueeze = broadcast.input_value(0).get_node()
            assert (reshape.get_type_name(), broadcast.get_type_name(), unsqueeze.get_type_name()) == \
                ("Reshape", "Broadcast", "Unsqueeze"), sdpa.get_friendly_name()
            modes.setdefault(broadcast.get_attributes()["mode"], set()).add(sdpa.get_friendly_name())
            if broadcast.get_attributes()["mode"] == "numpy":
                target = broadcast.input_value(1).get_node()
                assert target.get_type_name() == "Multiply"
                assert target.input_value(0).get_node().input_value(0).get_node() is unsqueeze
                assert list(target.input_value(1).get_node().get_data()) == [1, 1, 2, 1, 1]
    assert bounded_readers <= modes["numpy"]
    fused = count_fused_sdpa(ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG))
    if kv_sharing == "unshare":
        assert {summary.analysis.layer(n) for n in modes["bidirectional"]} == {3, 7} and fused == 2
    else:
        assert "bidirectional" not in modes and fused == 0
    prompt = [int(t) for t in np.random.default_rng(3).integers(4, 500, 40)]
    tokens, logits = Greedy(model).run(prompt, 7, 30)
    monkeypatch.setattr(bounding, "numpy_expand", lambda sdpa, port: False)
    exported = read()
    ovpasses.rewrite(exported, kv_sharing=kv_sharing, sliding_window="bounded",   # neither numpy rebuild
                     passes=[p for p in ovpasses.pipeline.PIPELINE_PASSES if p != "UnfusedSDPAExpandRewrite"])
    assert {b.get_attributes()["mode"] for n in exported.get_ordered_ops() if n.get_type_name() == "ScaledDotProductAttention"
            for b in (n.input_value(port).get_node().input_value(0).get_node() for port in (1, 2))} == {"bidirectional"}
    expected_tokens, expected_logits = Greedy(exported).run(prompt, 7, 30)
    assert tokens == expected_tokens
    np.testing.assert_array_equal(logits, expected_logits)


@pytest.mark.parametrize("margin, threads", [(0, None), (4, None), (0, 1)])
def test_a_rollback_past_the_margin_fails_the_inference(margin, threads):
    """openvino_genai's trim_kv_cache takes N positions from every state. Up to the margin the bounded model
    still decodes exactly; one more and the inference raises at the lost-positions check (never a wrong
    token). Before the window is full nothing is lost, and a rollback of any length stays exact. On one
    inference thread too, where the error reaches a caller that waits for the inference (``start_async`` and
    ``wait``; a synchronous ``infer`` there loses it: ``test_plugin_sync_infer_on_one_thread_hides_the_error``)."""
    prompt = list(range(10, 50))
    for count in (margin, margin + 1):
        reference = Greedy(baseline_compiled())
        reference.feed(prompt)
        reference.trim(count)
        expected = reference.feed([60, 61])
        model = read()
        ovpasses.rewrite(model, sliding_window="bounded", sliding_window_margin=margin)
        bounded = Greedy(model, threads)
        bounded.feed(prompt)
        bounded.trim(count)
        if count <= margin:
            np.testing.assert_allclose(bounded.feed([60, 61]), expected, rtol=0, atol=1e-4)
        else:
            with pytest.raises(RuntimeError, match=CHECK_SUFFIX.strip("/")):
                bounded.feed([60, 61])
    short = read()
    ovpasses.rewrite(short, sliding_window="bounded")
    bounded, reference = Greedy(short), Greedy(baseline_compiled())
    for greedy in (bounded, reference):
        greedy.feed(list(range(10, 20)))   # 10 < W-1 positions: the bounded cache holds them all
        greedy.trim(6)
    np.testing.assert_allclose(bounded.feed([60]), reference.feed([60]), rtol=0, atol=1e-4)


def test_second_run_changes_nothing_also_from_files(tmp_path):
    model = read()
    ovpasses.rewrite(model, sliding_window="bounded")
    again = ovpasses.rewrite(model, sliding_window="bounded")
    assert not again.changed and not again.sliding_window_caches.bounded
    assert {r.reason for r in again.sliding_window_caches.refused.values()} == {Refusal.ALREADY_BOUNDED,
                                                                              Refusal.FULL_ATTENTION}
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)
    assert not ovpasses.rewrite(read(tmp_path, "m.xml"), sliding_window="bounded").changed


def test_a_model_without_sliding_layers_is_left_as_it_is():
    model = build_stack(StackSpec(k_source=(0, 1, 0, 1), mask="float"))
    summary = ovpasses.rewrite(model, sliding_window="bounded")
    assert not summary.sliding_window_caches.bounded
    assert SlidingWindowKVCacheBounding.NAME not in [p.name for p in summary.passes]
    assert {r.reason for r in summary.sliding_window_caches.refused.values()} == {Refusal.FULL_ATTENTION}
    assert "sliding window: bounded: this model has no sliding-window layer: --sliding-window has no effect" \
        in summary_text(summary).splitlines()
    assert "not bounded" not in summary_text(summary)


# every layer sliding (Mistral and Phi-3 configs with sliding_window): no cache keeps the whole context
ALL_SLIDING = StackSpec(k_source=(0, 1, 2), mask="sliding", window=4, gqa_form="bidirectional")


@pytest.mark.parametrize("spec", [ALL_SLIDING, ALL_SLIDING.with_(kv_heads=4, past_length_from=(0,),
                                                                 past_length_at="gather"),
                                  ALL_SLIDING.with_(mask_form="distance")],
                         ids=["gqa", "past-length-output", "distance-mask"])
@pytest.mark.parametrize("prefill,chunk", [(3, None), (9, None), (9, 2)], ids=["short", "long", "chunked"])
def test_an_all_sliding_stack_is_bounded_and_equals_the_reference(spec, prefill, chunk):
    """Every cache is bounded, so none gives the past length: it is read from attention_mask's length less
    the new tokens'. Outputs of prompts shorter and longer than W = 4 (whole and in chunks of 2), then 8 decode
    steps, equal the float64 reference (the masks' positions, and in the second graph an output, read the first
    cache's past length); every cache holds W - 1 positions after the last step."""
    model = build_stack(spec)
    summary = ovpasses.rewrite(model, sliding_window="bounded")
    caches = summary.sliding_window_caches
    assert sorted(caches.bounded) == sorted(spec.variables()) and not caches.refused
    assert caches.reference is None and caches.context_inputs == ("attention_mask", "inputs_embeds")
    assert "past length from the attention_mask input's length less inputs_embeds'" in summary_text(summary)
    steps = stack_steps(spec, prefill, 8, chunk=chunk)
    compiled = ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG)
    request = compiled.create_infer_request()
    got = []
    for step in steps:
        request.infer(step_feed(spec, step))
        got.append(request.get_tensor("hidden_out").data.copy())
    expected = stack_reference(spec, steps)
    magnitude = max(1.0, max(float(np.abs(e).max()) for e in expected))
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-5 * magnitude)
    assert {s.name: s.state.shape[2] for s in request.query_state()} == {v: spec.window - 1 for v in spec.variables()}


def test_a_full_layer_stays_the_reference_where_there_is_one():
    """One full layer among sliding ones: its cache is left whole and gives the past length, as before."""
    spec = ALL_SLIDING.with_(full_layers=(1,))
    model = build_stack(spec)
    caches = ovpasses.rewrite(model, sliding_window="bounded").sliding_window_caches
    assert caches.reference == "past_key_values.1.key" and caches.context_inputs is None
    assert sorted(caches.bounded) == [v for v in spec.variables() if ".1." not in v]
    steps = stack_steps(spec, 9, 6)
    got = run_stack(ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG), spec, steps)
    for g, e in zip(got, stack_reference(spec, steps)):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-5 * max(1.0, float(np.abs(e).max())))


def test_an_all_sliding_model_without_an_attention_mask_is_refused_in_one_line():
    """Without attention_mask nothing gives the context's length: nothing is bounded, and the summary says so
    in one line (not one per cache)."""
    model = build_stack(ALL_SLIDING)
    model.input("attention_mask").get_tensor().set_names({"padding"})
    summary = ovpasses.rewrite(model, sliding_window="bounded")
    assert not summary.changed and not summary.sliding_window_caches.bounded
    assert {r.reason for r in summary.sliding_window_caches.refused.values()} == {Refusal.NO_FULL_CACHE}
    assert summary.to_dict()["no_effect"] == {"sliding_window": {"no_full_cache": 6}}
    lines = [line for line in summary_text(summary).splitlines() if "bounded" in line]
    assert lines == ["sliding window: bounded: changed nothing: 6 caches: no cache keeps the whole context and the "
                     "model has no attention_mask and input_ids (or inputs_embeds) inputs: nothing would give the "
                     "past length, the positions and the masks"]


@pytest.mark.parametrize("in_place", [False, True], ids=["output", "in-place"])
def test_cli_says_when_a_rewrite_changed_nothing(tmp_path, capsys, in_place):
    """A model without sliding layers: `--sliding-window bounded` changes nothing, and the CLI says so in one
    line instead of "wrote"; --in-place leaves the pair as it is, -o writes it as read."""
    source = tmp_path / "m.xml"
    ov.save_model(build_stack(StackSpec(k_source=(0, 1), mask="float")), source, compress_to_fp16=False)
    before = source.stat()
    target = source if in_place else tmp_path / "out.xml"
    argv = ["rewrite", str(source), "--sliding-window", "bounded"] + (["--in-place"] if in_place else ["-o", str(target)])
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "wrote" not in out and "sliding window: bounded: this model has no sliding-window layer: --sliding-window " \
        "has no effect" in unwrapped(out)
    assert unwrapped(out)[-1] == (f"nothing changed: {target} left as it is" if in_place else
                                    f"nothing changed: {target} and out.bin hold the input as read")
    if in_place:
        assert (source.stat().st_ino, source.stat().st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    else:
        assert target.read_bytes() == source.read_bytes()
    assert cli.main(argv + ["--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["changed"] is False and data["written"] is (not in_place)
    assert data["no_effect"] == {"sliding_window": {"full_attention": 4}}


def test_modes_are_checked():
    with pytest.raises(OvpassesError, match="sliding_window must be one of full, bounded, trimmable, not 'half'"):
        ovpasses.rewrite(read(), sliding_window="half")
    with pytest.raises(OvpassesError, match="sliding_window_margin must be"):
        ovpasses.rewrite(read(), sliding_window="bounded", sliding_window_margin=-1)


def test_cli_rewrite_file(tmp_path, capsys):
    target = tmp_path / "m.xml"
    assert cli.main(["rewrite", str(TINY8 / "openvino_model.xml"), "-o", str(target), "--sliding-window", "bounded",
                     "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sliding_window"] == "bounded" and data["changed"]
    assert sorted(b["variable_id"] for b in data["sliding_window_caches"]["bounded"]) == SLIDING_VARIABLES
    assert sorted(v for v, c in analyze_kv_sharing(read(tmp_path, "m.xml")).caches.items() if c.bounded) == \
        SLIDING_VARIABLES


def test_cli_rewrite_folder_bounds_the_decoder_and_copies_the_rest(tmp_path, capsys):
    """A text export folder: its decoder IR is bounded (keep W-1+margin), every other file is copied byte for
    byte, and the folder's IR decodes the tokens of the unmodified model past the window."""
    out = tmp_path / "out"
    assert cli.main(["rewrite", str(TINY8), "-o", str(out), "--sliding-window", "bounded",
                     "--sliding-window-margin", "3", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    [decoder] = [m for m in data["models"] if m["rewritten"]]
    caches = decoder["summary"]["sliding_window_caches"]
    assert decoder["file"] == "openvino_model.xml" and decoder["summary"]["sliding_window"] == "bounded"
    assert sorted(b["variable_id"] for b in caches["bounded"]) == SLIDING_VARIABLES
    assert {b["keep"] for b in caches["bounded"]} == {WINDOW - 1 + 3}
    for name in ("openvino_tokenizer.xml", "openvino_tokenizer.bin", "config.json", "reference.json"):
        assert (out / name).read_bytes() == (TINY8 / name).read_bytes(), name
    prompt = [int(t) for t in np.random.default_rng(7).integers(4, 500, 40)]
    expected, _ = Greedy(baseline_compiled()).run(prompt, 9, 30)
    greedy = Greedy(read(out))
    assert greedy.run(prompt, 9, 30)[0] == expected
    assert {n for v, n in greedy.state_lengths().items() if v.split("/")[0] in SLIDING_VARIABLES} == {WINDOW - 1 + 3}


def test_cli_rewrite_vlm_folder_bounds_only_the_language_model(tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["rewrite", str(FIXTURES / "vlm8"), "-o", str(out), "--sliding-window", "bounded",
                     "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [m["file"] for m in data["models"] if m["rewritten"]] == ["openvino_language_model.xml"]
    assert [m for m in data["models"] if m["rewritten"]][0]["summary"]["sliding_window_caches"]["bounded"]
    assert any(c.bounded for c in analyze_kv_sharing(read(out, "openvino_language_model.xml")).caches.values())
    for name in ("openvino_text_embeddings_model.xml", "openvino_text_embeddings_per_layer_model.bin",
                 "openvino_vision_embeddings_model.xml"):
        assert (out / name).read_bytes() == (FIXTURES / "vlm8" / name).read_bytes(), name


CHECKS = [("tiny8", None), ("tiny8", 7), ("vlm8", 16)]


@pytest.mark.parametrize("fixture,chunk", CHECKS, ids=[f"{f}-chunk{c}" for f, c in CHECKS])
def test_cli_check_compares_steps_that_read_a_bounded_cache(fixture, chunk, capsys):
    """``ovpass check --sliding-window bounded --prefill 40`` (W = 16): the decode steps, and with a chunked
    prefill the later chunks, read caches that hold 15 positions where the original's hold up to 45; every
    output of every step agrees (exact f32 config)."""
    argv = ["check", str(FIXTURES / fixture), "--sliding-window", "bounded", "--prefill", "40", "--steps", "5",
            "--format", "json"] + ([] if chunk is None else ["--prefill-chunk", str(chunk)])
    assert cli.main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    [report] = data["models"]
    assert report["verdict_code"] == "ok" and report["changed"] and report["config"] == EXACT_CPU_CONFIG
    assert report["bounded_keep"] == WINDOW - 1 and report["sliding_window"] == "bounded"
    assert report["steps_compared"] == 5 + (1 if chunk is None else -(-40 // chunk))
    assert report["values_compared"] > 0 and report["max_abs_diff"] is not None


def test_check_says_when_the_context_never_exceeds_the_bound_and_catches_a_bound_too_short(monkeypatch):
    """A context within W-1 drops nothing (the report says so); a bound shorter than W-1 (a broken plan, made
    here by shrinking the analysis' keep) fails the check as soon as a step needs a dropped position."""
    from dataclasses import replace

    from ovpasses.app.check import INCONCLUSIVE, WORSE, check_model
    from ovpasses.features.sliding_window import plan as targets   # where the pipeline plans the bounding

    short = check_model(read(), prefill=8, steps=3, options=BOUNDED_OPTIONS)
    assert not short.ok and short.verdict_code == INCONCLUSIVE and short.outputs_equal
    assert short.bounded_keep == WINDOW - 1 and short.bounding_exercised is False
    assert short.to_dict()["bounding_exercised"] is False
    assert "the bound was not exercised; give --prefill beyond 15" in short.verdict
    chosen = check_model(read(), steps=2, options=BOUNDED_OPTIONS)   # no prefill given: one past the bound
    assert chosen.ok and chosen.prefill == WINDOW - 1 + 2 and chosen.prefill_chosen and chosen.bounding_exercised
    assert "(the prefill picked past it)" in str(chosen)
    analyze = targets.analyze_sliding_window_caches

    def too_short(*args, **kwargs):
        plan = analyze(*args, **kwargs)
        plan.bounded = {v: replace(b, keep=b.keep - 4) for v, b in plan.bounded.items()}
        return plan

    monkeypatch.setattr(targets, "analyze_sliding_window_caches", too_short)
    broken = check_model(read(), prefill=20, steps=3, prefill_chunk=10, options=BOUNDED_OPTIONS)
    assert broken.bounded_keep == WINDOW - 5 and broken.bounding_exercised
    assert broken.verdict_code == WORSE and not broken.ok


def test_inspect_shows_windows_bounded_caches_and_kv_bytes(capsys):
    """tiny8's KV bytes per token (f32): 6 sliding caches of 2 heads x 16 and 2 full ones of 2 x 32;
    bounded, the sliding ones hold 15 positions whatever the context."""
    assert cli.main(["inspect", str(TINY8 / "openvino_model.xml"), "--sliding-window", "bounded",
                     "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    layers = {s["layer"]: (s["window"], s["cache_bounded"]) for s in report["sdpa"]}
    assert layers == {i: (None, False) if i in (3, 7) else (WINDOW, True) for i in range(8)}
    sliding, full = 6 * 2 * 16 * 4, 2 * 2 * 32 * 4
    held = report["kv_bytes"].pop("held")
    assert report["kv_bytes"] == {"context": 8192, "per_token": sliding + full, "full": (sliding + full) * 8192,
                                  "bounded": sliding * (WINDOW - 1) + full * 8192}
    # as held: layers 0-1's caches fused (f16 by the IR's runtime_options under defaults, f32 exact); layer 2's
    # (shared by 4-6) and 3's (shared by 7) plain states, double buffered, bf16 under defaults on this CPU
    # (the inference precision; f32 where the CPU has no bf16), f32 exact; bounded: every sliding cache plain
    plain = 2 if ov.Core().get_property("CPU", "INFERENCE_PRECISION_HINT") == ov.Type.bf16 else 4
    elements = {"fused": 4 * 2 * 16, "sliding plain": 2 * 2 * 16, "full plain": 2 * 2 * 32}
    assert [(h["config"], h["key"], h["source"]) for h in held] == [("plugin defaults", "f16", "IR runtime_options"),
                                                                    ("exact", "f32", "config")]
    for h, (fused_size, plain_size) in zip(held, [(2, plain), (4, 4)]):
        assert h["full"] == 8192 * (elements["fused"] * fused_size + 2 * plain_size * (
            elements["sliding plain"] + elements["full plain"]))
        assert h["bounded"] == 2 * plain_size * (6 * 2 * 16 * (WINDOW - 1) + elements["full plain"] * 8192)
    assert cli.main(["inspect", str(TINY8 / "openvino_model.xml"), "--sliding-window", "bounded"]) == 0
    out = capsys.readouterr().out
    assert "layer 0: window 16, cache bounded" in out
    assert "  held, what ovpass check holds (its exact config): caches in the fused kernel f32, as the config asks; " \
        "the others f32, held twice (the plugin keeps a state's old and new value): 16.0 MiB as exported, " \
        "8.0 MiB bounded" in unwrapped(out)


@pytest.mark.parametrize("config", [None, EXACT_CPU_CONFIG], ids=["defaults", "exact"])
@pytest.mark.parametrize("source", ["export", "synthetic"])
def test_held_precision_is_what_the_compiled_model_reports(config, source):
    """The precision the memory count assumes is the compiled model's: the fused caches' KEY/VALUE_CACHE_PRECISION
    (u8 by default on x86; f16 where the IR's runtime_options say so, as optimum-intel's do), and a bounded
    cache's plain state (its runtime MemoryInput) in the inference precision."""
    from ovpasses.analysis.kv_memory import held_precision
    model = read() if source == "export" else build_stack(ALL_SLIDING)
    expected = held_precision(model, config)
    assert (expected.key, expected.source) == (("f16", "IR runtime_options") if source == "export" else
                                               ("u8", "device")) if config is None else ("f32", "config")
    ovpasses.rewrite(model, sliding_window="bounded")
    compiled = ov.Core().compile_model(model, "CPU", config or {})
    assert compiled.get_property("KEY_CACHE_PRECISION").get_type_name() == expected.key
    assert compiled.get_property("VALUE_CACHE_PRECISION").get_type_name() == expected.value
    assert compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name() == expected.plain
    memory = {n.get_output_element_type(0) for n in compiled.get_runtime_model().get_ordered_ops()
              if n.get_rt_info()["layerType"].astype(str) == "MemoryInput"}
    assert {t.get_type_name() for t in memory} == {expected.plain}, "every cache is bounded: plain states"


# the all-sliding export (tests/fixtures/mistral/allsliding: MistralForCausalLM, 4 layers, every one sliding, W=8)
ALLSLIDING = ROOT / "tests" / "fixtures" / "mistral" / "allsliding"
ALLSLIDING_WINDOW = 8
ALLSLIDING_PROMPTS = [(5, 100), (30, 100), (30, 3), (12, 1)]


@pytest.mark.parametrize("length,chunk", ALLSLIDING_PROMPTS, ids=[f"prompt{n}-chunk{c}" for n, c in ALLSLIDING_PROMPTS])
def test_all_sliding_export_decodes_the_unmodified_tokens(length, chunk):
    """Every cache of the Mistral export is bounded to W-1 = 7 positions, the past length read from
    attention_mask less input_ids; 40 tokens past prompts shorter and longer than W (whole, in chunks of 3,
    token by token) equal the unmodified IR's, logits within 1e-4 (f32)."""
    model = read(ALLSLIDING)
    caches = ovpasses.rewrite(model, sliding_window="bounded").sliding_window_caches
    assert len(caches.bounded) == 8 and not caches.refused and caches.reference is None
    assert caches.context_inputs == ("attention_mask", "input_ids")
    prompt = [int(t) for t in np.random.default_rng(length + chunk).integers(4, 500, length)]
    expected, expected_logits = Greedy(read(ALLSLIDING)).run(prompt, chunk, 40)
    greedy = Greedy(model)
    tokens, logits = greedy.run(prompt, chunk, 40)
    assert tokens == expected
    np.testing.assert_allclose(logits, expected_logits, rtol=0, atol=1e-4 * max(1.0, np.abs(expected_logits).max()))
    assert set(greedy.state_lengths().values()) == {ALLSLIDING_WINDOW - 1}


def test_cli_check_of_the_all_sliding_folder_picks_a_prefill_past_the_bound(capsys):
    """``ovpass check DIR --sliding-window bounded`` without --prefill: 9 tokens (7 kept + 2), every decode
    step reads caches that dropped positions, OK; genai (stateful and paged) runs a prompt of those 9 tokens
    and says it went past the bound. With --prefill 1 the context stays within it (ov.Core 1 + 2 steps; genai
    1 + 8 tokens generated, the last never fed back): INCONCLUSIVE, on every path."""
    assert cli.main(["check", str(ALLSLIDING), "--sliding-window", "bounded", "--genai", "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    [report] = data["models"]
    assert report["verdict_code"] == "ok" and report["prefill"] == ALLSLIDING_WINDOW + 1 and report["prefill_chosen"]
    assert report["bounding_exercised"] is True and report["bounded_keep_max"] == ALLSLIDING_WINDOW - 1
    assert [(g["path"], g["verdict"], g["bounding_exercised"]) for g in data["genai"]] == \
        [("stateful", "ok", True), ("paged", "ok", True)]
    assert all(g["rewritten"]["prompt_ids"] and len(g["rewritten"]["prompt_ids"]) == ALLSLIDING_WINDOW + 1
               for g in data["genai"])
    assert cli.main(["check", str(ALLSLIDING), "--sliding-window", "bounded", "--genai", "--prefill", "1",
                     "--steps", "2"]) == 4
    out = capsys.readouterr().out
    assert "the bound was not exercised; give --prefill beyond 7" in out
    assert out.count("-> INCONCLUSIVE") == 2 and "folder verdict: INCONCLUSIVE" in out


# ---------------------------------------------------------------------------------------------- clients


def genai_folder(tmp_path: Path, sliding_window: str, margin: int = 0, fixture: str | Path = "tiny8u") -> Path:
    source = fixture if isinstance(fixture, Path) else FIXTURES / fixture
    folder = tmp_path / f"{source.name}-{sliding_window}-{margin}-{len(list(tmp_path.iterdir()))}"
    folder.mkdir()
    for name in ("config.json", "generation_config.json", "openvino_tokenizer.xml", "openvino_tokenizer.bin",
                 "openvino_detokenizer.xml", "openvino_detokenizer.bin"):
        shutil.copy(source / name, folder / name)
    model = read(source)
    ovpasses.rewrite(model, sliding_window=sliding_window, sliding_window_margin=margin)
    ov.save_model(model, folder / "openvino_model.xml", compress_to_fp16=False)
    return folder


# the fixtures have no chat template; this one renders every turn, so that genai's history is the cache's
CHAT_TEMPLATE = ("{% for m in messages %}{% if m['role'] == 'user' %}w5 {{ m['content'] }} w6{% else %} "
                 "{{ m['content'] }} w7 {% endif %}{% endfor %}{% if add_generation_prompt %} w8{% endif %}")
TURNS = ("w10 w11 w12 w13", "w20 w21 w22 w23 w24 w25 w26", "w30 w31")
ANSWER = 12


def chat(pipe, turns: tuple[str, ...] = TURNS, answer: int = ANSWER) -> list[list[int]]:
    """Each answer's token ids of ``pipe``'s greedy chat over ``turns`` (testkit.greedy.genai_chat)."""
    return genai_chat(pipe, turns, answer)


def llm_chat(folder: Path, **kwargs) -> list[list[int]]:
    import openvino_genai as genai
    pipe = genai.LLMPipeline(str(folder), "CPU", **kwargs, **EXACT_CPU_CONFIG)
    pipe.get_tokenizer().set_chat_template(CHAT_TEMPLATE)
    return chat(pipe)


@pytest.mark.skipif(AFFECTED, reason="measured on the newest runtime (tokenizers of 2026.4 crash genai 2026.0)")
def test_genai_stateful_chat_fails_loudly_or_keeps_a_margin(tmp_path):
    """openvino_genai's stateful chat (ATTENTION_BACKEND=SDPA) takes each answer back out of the cache and
    feeds it again as templated history (measured on 2026.4.1: it needs a margin of the answer's length,
    12 here; 11 fails). Without a margin the second turn raises at the lost-positions check; with one it
    equals the unmodified model's chat, turn by turn. The paged path (default) never sees the bound."""
    expected = llm_chat(genai_folder(tmp_path, "full"), ATTENTION_BACKEND="SDPA")
    with pytest.raises(RuntimeError, match="Argument shapes are inconsistent"):
        llm_chat(genai_folder(tmp_path, "bounded"), ATTENTION_BACKEND="SDPA")
    assert llm_chat(genai_folder(tmp_path, "bounded", ANSWER), ATTENTION_BACKEND="SDPA") == expected
    assert llm_chat(genai_folder(tmp_path, "bounded")) == llm_chat(genai_folder(tmp_path, "full"))


@pytest.mark.skipif(AFFECTED, reason="measured on the newest runtime (tokenizers of 2026.4 crash genai 2026.0)")
def test_genai_chat_on_the_all_sliding_export(tmp_path):
    """The all-sliding export, whose past length the bounding reads from attention_mask: openvino_genai's stateful
    chat trims the cache and the mask together, so with a margin of the answer's length (12) its three turns equal
    the unmodified folder's; with none it fails loudly (2026.4.1: genai's own trim check, the bounded cache holding
    7 positions); the paged chat equals the unmodified folder's with margin 0."""
    expected = llm_chat(genai_folder(tmp_path, "full", fixture=ALLSLIDING), ATTENTION_BACKEND="SDPA")
    assert llm_chat(genai_folder(tmp_path, "bounded", ANSWER, fixture=ALLSLIDING), ATTENTION_BACKEND="SDPA") == expected
    with pytest.raises(RuntimeError, match="trim_kv_cache|Argument shapes are inconsistent"):
        llm_chat(genai_folder(tmp_path, "bounded", fixture=ALLSLIDING), ATTENTION_BACKEND="SDPA")
    assert llm_chat(genai_folder(tmp_path, "bounded", fixture=ALLSLIDING)) == \
        llm_chat(genai_folder(tmp_path, "full", fixture=ALLSLIDING))


VLM_TURNS = ("w29 w157 w479 w499", "w217 w129 w235 w39 w37 w229 w119", "w40 w41", "w300 w301 w302")


@pytest.mark.skipif(AFFECTED, reason="measured on the newest runtime (tokenizers of 2026.4 crash genai 2026.0)")
def test_vlm_chat_equals_the_unmodified_folder(tmp_path, capsys):
    """VLMPipeline's multi-turn chat (start_chat, four turns of 12 tokens under Gemma 4's template, finish_chat;
    each turn's context passes W = 16, the chat's about 90 tokens) on a folder bounded with margin 0 gives the
    unmodified folder's answers, stateful and paged. Unlike LLMPipeline's, VLMPipeline's stateful chat takes
    nothing back out of the cache (measured on 2026.4.1: margin 0 is exact, nothing reaches the lost-positions
    check). Turn one's answer is the ov.Core greedy continuation of the templated prompt, so the chat is the
    one the template says."""
    import openvino_genai as genai

    from testkit.greedy import vlm_greedy
    vlm8 = FIXTURES / "vlm8"
    bounded = tmp_path / "bounded"
    assert cli.main(["rewrite", str(vlm8), "-o", str(bounded), "--sliding-window", "bounded"]) == 0
    capsys.readouterr()
    first_turn = [2, 4, 14, 29, 157, 479, 499, 5, 4, 15]   # <bos><|turn>user\n w29 w157 w479 w499<turn|>\n<|turn>model\n
    paths = {"stateful": {"ATTENTION_BACKEND": "SDPA"}, "paged": {"scheduler_config": genai.SchedulerConfig()}}
    for path, kwargs in paths.items():
        expected = chat(genai.VLMPipeline(str(vlm8), "CPU", **kwargs, **EXACT_CPU_CONFIG), VLM_TURNS)
        assert chat(genai.VLMPipeline(str(bounded), "CPU", **kwargs, **EXACT_CPU_CONFIG), VLM_TURNS) == expected, path
        if path == "stateful":
            assert expected[0] == vlm_greedy(vlm8, first_turn, ANSWER, "CPU", EXACT_CPU_CONFIG)[0]


RUNTIMES = [pytest.param(Path(sys.executable), id="newest"),
            pytest.param(AFFECTED_PYTHON, id="2026.0", marks=needs_affected)]
# (prompt, runtime): the long prompt (past the window in the prefill, and again while decoding) on both runtimes;
# the short one (the bound first reached while decoding) in the slow tier (a process of its own per cell group),
# as it stays on ov.Core in the default run (test_greedy_tokens_equal_the_unmodified_model, prompt 12)
PROMPT_RUNTIMES = [
    pytest.param(prompt, *runtime.values, id=f"{prompt}-{runtime.id}",
                 marks=[*runtime.marks, *([pytest.mark.slow] if prompt == "default" else [])])
    for prompt in ("default", "long") for runtime in RUNTIMES]


CLIENT_MODES, CLIENT_PATHS = ("bounded", "unshared-bounded"), ("core", "stateful", "paged")


# the cells of one runtime and prompt run in one process (tiny8u has one head size: no path of 2026.0 gets
# it wrong), and the group keeps them on one xdist worker
@pytest.mark.xdist_group("sliding-window-client-cells")
@pytest.mark.parametrize("mode", CLIENT_MODES)
@pytest.mark.parametrize("path", CLIENT_PATHS)
@pytest.mark.parametrize("prompt, python", PROMPT_RUNTIMES)   # 12 and 28 tokens, 20 generated: past W=16 2-3 times
def test_llm_clients_decode_like_transformers(python, mode, path, prompt):
    """ov.Core, genai stateful (SDPA backend) and genai paged (which never sees the bound: the converter
    removes the state, and still reads the window from the Slice(Select) the bounding leaves) on tiny8u."""
    result = grid_cell(python, FIXTURES / "tiny8u", mode, path, prompt, modes=CLIENT_MODES, paths=CLIENT_PATHS)
    assert result["status"] == "ok", result


@pytest.mark.xdist_group("sliding-window-allsliding-cells")
@pytest.mark.parametrize("path", CLIENT_PATHS)
@pytest.mark.parametrize("prompt, python", PROMPT_RUNTIMES)   # 6 and 24 tokens, 32 generated: past W=8 4-7 times
def test_all_sliding_clients_decode_like_transformers(python, path, prompt):
    """The all-sliding export bounded: ov.Core, genai stateful (SDPA backend) and genai paged (the converter
    drops the past length read from attention_mask with the masks) decode transformers' tokens."""
    result = grid_cell(python, ALLSLIDING, "bounded", path, prompt, modes=("bounded",), paths=CLIENT_PATHS)
    assert result["status"] == "ok", result


@pytest.mark.xdist_group("sliding-window-vlm-cells")
@pytest.mark.parametrize("path", CLIENT_PATHS)
def test_vlm_decodes_like_transformers(path):
    """The VLM export's language model: its exporter slices the mask to [0, past + n) itself; the bounding
    replaces that Slice by one on the Select (the paged converter reads the window only from Slice(Select))."""
    result = grid_cell(Path(sys.executable), FIXTURES / "vlm8", "bounded", path, modes=("bounded",),
                       paths=CLIENT_PATHS)
    assert result["status"] == "ok", result
