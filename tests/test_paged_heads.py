"""``--paged-heads pad`` (issue 23): one KV-head count and one head size for every cache and layer, so that
the CPU PagedAttention of openvino 2025.2 - 2026.2 (one executor per model, keyed by precision only) runs
every layer with the right kernel.

Numbers against the float64 reference of :func:`heads_stack_reference` on synthetic stacks with the
Gemma 4 layouts (E2B/E4B: one KV head, head sizes differing, KV-shared borrowers; 26B/31B: sliding 4 KV
heads x 8, full 1 x 16 with K = V, adjacent full layers), through the stateful model and the real
PagedAttention converter and kernel (newest runtime here; 2026.0 in .venvs/ov-2026.0.0). The Gemma 4
fixture e2b35 through openvino_genai's continuous batching on 2026.0 (``testkit.matrix``,
mode ``paged-pad``).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import openvino as ov
import pytest

from testkit.cli import CliResult, run_main, unwrapped
from testkit.matrix import cell_in, cells_in
from hypothesis import assume, given, settings

from ovpasses.app.render.text import summary_text
import ovpasses
from ovpasses.analysis.kv_sharing import analyze_kv_sharing
from ovpasses.features.paged_heads.analysis import HeadsRefusal, analyze_paged_heads
from ovpasses.modes import OptionChoice, PagedHeads
from ovpasses.features.paged_heads.plan import PagedHeadsAction
from ovpasses.features.paged_heads.paged_path import PagedRisk
from ovpasses.app.render.text import paged_warning_text
from ovpasses.features.paged_heads.attention_head_padding import AttentionHeadPadding
from ovpasses.precision import EXACT_CPU_CONFIG
from testkit.graphs import HeadsStackSpec, build_heads_stack, heads_stack_reference, run_heads_stack
from testkit.paged import heads_stack_paged_outputs
from testkit.strategies import heads_stack_specs, register_profiles

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "gemma4"
NEWEST = Path(sys.executable)
AFFECTED = ROOT / ".venvs" / "ov-2026.0.0" / "bin" / "python"
PROFILE = register_profiles()   # the ci profile: no deadline (compiling takes tens of ms with a long tail)
# a drawn layout costs four compiles and two paged conversions: the ci profile draws 10 of them (its 50 took a
# half-minute of the default run), another profile (thorough, or a count of one's own) its own number
LAYOUT_SETTINGS = settings(max_examples=10 if PROFILE == "ci" else settings.default.max_examples)
needs_affected = pytest.mark.skipif(not AFFECTED.exists(),
                                    reason="needs .venvs/ov-2026.0.0 (bash tools/venv.sh ov 2026.0.0)")


def venv_python(version: str) -> Path:
    return ROOT / ".venvs" / f"ov-{version}" / "bin" / "python"


def runtime_venv(version: str):
    """``version`` as a pytest param, skipped where .venvs/ov-VERSION is missing (2026.0.0 is in the default
    run; tools/venv.sh ov VERSION makes the others)."""
    return pytest.param(version, marks=pytest.mark.skipif(
        not venv_python(version).exists(), reason=f"needs .venvs/ov-{version} (bash tools/venv.sh ov {version})"))


TOKENS, PREFILL = [5, 17, 33, 2, 60, 41, 9, 28, 50, 11], 6
# f32 through stacks whose outputs reach O(100) against float64: summation order only, relative to the
# largest output (measured on 2026.4.1, padded or not, stateful or paged: at most 2e-5 over the specs here
# and the drawn ones at scale 0.5 or 1/sqrt(D); 5e-4 for some drawn K = V stacks at scale 1, unpadded too)
RELATIVE = 1e-4

# E2B/E4B: one KV head; "sliding" layers head size 8, "full" 16; layers 2 and 3 borrow 0's and 1's caches
E2B_LIKE = HeadsStackSpec(((4, 1, 8), (4, 1, 16), (4, 1, 8), (4, 1, 16)), kv_source=(0, 1, 0, 1))
# 26B/31B: sliding 4 KV heads x 8, full 1 x 16 with V = the raw K projection, two full layers adjacent
LARGE_LIKE = HeadsStackSpec(((8, 4, 8), (8, 1, 16), (8, 1, 16), (8, 4, 8)), k_eq_v=(1, 2), hidden=16)
# no scale input: the specification's 1/sqrt(E) of the original head size must survive the padding
NO_SCALE = HeadsStackSpec(((4, 2, 8), (4, 1, 16)), scale=None)
SPECS = {"e2b-like": E2B_LIKE, "large-like": LARGE_LIKE, "no-scale": NO_SCALE}


def error(got: np.ndarray, reference: np.ndarray) -> float:
    """Largest difference relative to the largest reference output (NaN: inf)."""
    return float(np.nan_to_num(np.abs(got - reference), nan=np.inf).max() / max(1.0, np.abs(reference).max()))


def padded(spec: HeadsStackSpec, runtime: str | None = None):
    model = build_heads_stack(spec)
    return model, ovpasses.rewrite(model, runtime, paged_heads="pad")


def sdpa_by_layer(model: ov.Model) -> list[ov.Node]:
    return [n for n in model.get_ordered_ops() if n.get_type_name() == "ScaledDotProductAttention"]


def constant(output: ov.Output) -> list:
    node = output.get_node()
    assert node.get_type_name() == "Constant", node
    return node.get_data().reshape(-1).tolist()


# --------------------------------------------------------------------------------------- numbers

@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS)
def test_padded_stack_matches_the_float64_reference_stateful_and_paged(spec):
    reference = heads_stack_reference(spec, TOKENS)
    model, summary = padded(spec)
    assert summary.paged_heads.action == PagedHeadsAction.PADDED
    stateful = run_heads_stack(ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG), TOKENS, PREFILL)
    assert error(stateful, reference) < RELATIVE
    paged = heads_stack_paged_outputs(spec, TOKENS, PREFILL, EXACT_CPU_CONFIG, model=padded(spec)[0])
    assert error(paged, reference) < RELATIVE


@LAYOUT_SETTINGS
@given(heads_stack_specs())
def test_padding_keeps_every_drawn_layout_exact(spec):
    """Some drawn stacks are sharp enough that float32 itself strays 1e-4 from float64 (measured: 1.2e-4
    padded, the same order unpadded); the padded model may not stray more than twice as far as the
    unpadded one on the same path (summation order over the zero columns), nor past RELATIVE. A padding
    defect (a head read from the wrong KV head, a scale from the padded size) strays by O(1).

    Stacks whose float64 logits pass 100 are left out: there float32 rounding is amplified step by step
    (measured: a stack with logits of 280 strayed 3.0e-4 unpadded and 7.4e-4 padded, the padded kernel
    summing in another order), so neither error says anything about the padding. About 80% of the drawn
    stacks stay (measured on 40 draws)."""
    reference = heads_stack_reference(spec, TOKENS)
    assume(np.abs(reference).max() < 100)
    model, summary = padded(spec)
    target = summary.paged_heads.plan.target
    assert {(v.get_info().data_shape[1].get_length(), v.get_info().data_shape[3].get_length())
            for v in model.get_variables()} == {target}
    stateful = run_heads_stack(ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG), TOKENS, PREFILL)
    unpadded = run_heads_stack(ov.Core().compile_model(build_heads_stack(spec), "CPU", EXACT_CPU_CONFIG), TOKENS,
                               PREFILL)
    assert error(stateful, reference) < max(RELATIVE, 2 * error(unpadded, reference))
    # a copy: the paged conversion changes the model in place (compiling it above did not)
    paged = heads_stack_paged_outputs(spec, TOKENS, PREFILL, EXACT_CPU_CONFIG, model=model.clone())
    paged_unpadded = heads_stack_paged_outputs(spec, TOKENS, PREFILL, EXACT_CPU_CONFIG)   # right on 2026.3+
    assert error(paged, reference) < max(RELATIVE, 2 * error(paged_unpadded, reference))


# --------------------------------------------------------------------------------------- structure

@pytest.mark.parametrize("spec", SPECS.values(), ids=SPECS)
def test_padded_layers_read_padded_queries_and_slice_their_outputs(spec):
    model, summary = padded(spec)
    kv_target, head_target = summary.paged_heads.plan.target
    assert (kv_target, head_target) == (max(kv for _, kv, _ in spec.layers), max(d for _, _, d in spec.layers))
    for variable in model.get_variables():
        shape = variable.get_info().data_shape
        assert (shape[1].get_length(), shape[3].get_length()) == (kv_target, head_target)
    for (heads, kv_heads, head), sdpa in zip(spec.layers, sdpa_by_layer(model), strict=True):
        # the scale: the layer's own, or 1/sqrt(original head size) made explicit
        assert constant(sdpa.input_value(4)) == pytest.approx([spec.scale or 1 / np.sqrt(head)])
        query = sdpa.input_value(0).get_node()
        for port in (1, 2):
            # expanded to the query heads, or (one KV head, UnfusedSDPAExpandRewrite elided its expand) the cache's
            assert list(sdpa.get_input_partial_shape(port))[1].get_length() in (heads, 1 if kv_target == 1 else heads)
            assert sdpa.get_input_partial_shape(port)[3].get_length() == head_target
        (consumer,) = [t.get_node() for t in sdpa.output(0).get_target_inputs()]
        if head == head_target:
            assert query.get_type_name() != "Pad" and consumer.get_type_name() == "Transpose"
            continue
        assert query.get_type_name() == "Pad" and query.get_attributes()["pad_mode"] == "constant"
        assert constant(query.input_value(2)) == [0, 0, 0, head_target - head]
        assert consumer.get_type_name() == "Slice"
        assert [constant(consumer.input_value(i)) for i in (1, 2, 3, 4)] == [[0], [head], [1], [3]]


def test_k_equal_v_layers_store_one_projection_in_both_caches():
    model, _ = padded(LARGE_LIKE)
    stored = {}
    for node in model.get_ordered_ops():
        if node.get_type_name() == "Assign":
            concat = node.input_value(0).get_node()
            new = concat.input_value(1).get_node()
            while new.get_type_name() in ("Pad", "Gather"):   # what the padding put on the new positions
                new = new.input_value(0).get_node()
            stored[node.get_attributes()["variable_id"]] = new
    for layer in LARGE_LIKE.k_eq_v:
        key, value = (stored[f"past_key_values.{layer}.{kind}present.{layer}.{kind}"] for kind in ("key", "value"))
        assert key is value
    assert stored["past_key_values.0.keypresent.0.key"] is not stored["past_key_values.0.valuepresent.0.value"]


def test_padding_is_idempotent_in_memory_and_read_back(tmp_path):
    model, first = padded(E2B_LIKE)
    assert [p.name for p in first.passes if p.changed and p.name == AttentionHeadPadding.NAME]
    again = ovpasses.rewrite(model, paged_heads="pad")
    assert again.paged_heads.action == PagedHeadsAction.UNIFORM and not again.changed
    ov.save_model(model, tmp_path / "m.xml", compress_to_fp16=False)
    read_back = ov.Core().read_model(tmp_path / "m.xml")
    summary = ovpasses.rewrite(read_back, paged_heads="pad")
    assert summary.paged_heads.action == PagedHeadsAction.UNIFORM and not summary.changed
    reference = heads_stack_reference(E2B_LIKE, TOKENS)
    stateful = run_heads_stack(ov.Core().compile_model(read_back, "CPU", EXACT_CPU_CONFIG), TOKENS, PREFILL)
    assert error(stateful, reference) < RELATIVE


def test_query_heads_that_no_kv_head_count_groups_refuse_the_model():
    spec = HeadsStackSpec(((4, 4, 8), (2, 2, 16)))
    model, summary = padded(spec, "2026.0")
    step = summary.paged_heads
    assert step.action == PagedHeadsAction.REFUSED and not summary.changed
    (refusal,) = step.plan.refusals
    assert refusal.reason == HeadsRefusal.NOT_GROUPED and refusal.where == "layer 1"
    (warning,) = [w for w in summary.warnings if w.risk == PagedRisk.PADDING_REFUSED]
    assert warning.refusal == refusal and warning.option == OptionChoice("paged_heads", PagedHeads.PAD)
    assert paged_warning_text(warning).startswith("--paged-heads pad could not pad this model")
    assert {tuple(v.get_info().data_shape)[3].get_length() for v in model.get_variables()} == {8, 16}


def test_without_the_pass_selected_nothing_is_padded_and_the_plan_says_so():
    model = build_heads_stack(E2B_LIKE)
    passes = [name for name in ovpasses.pipeline.PIPELINE_PASSES if name != AttentionHeadPadding.NAME]
    summary = ovpasses.rewrite(model, "2026.0", passes=passes, paged_heads="pad")
    assert summary.paged_heads.action == PagedHeadsAction.NOT_SELECTED
    assert summary.paged_heads.plan.padded == ["past_key_values.0.keypresent.0.key",
                                               "past_key_values.0.valuepresent.0.value"]
    assert {v.get_info().data_shape[3].get_length() for v in model.get_variables()} == {8, 16}
    assert "paged heads: not applied (pass AttentionHeadPadding not selected)" in summary_text(summary)


def test_keep_changes_nothing_and_plans():
    model = build_heads_stack(E2B_LIKE)
    summary = ovpasses.rewrite(model, "2026.0")
    assert summary.paged_heads.action == PagedHeadsAction.KEPT and summary.paged_heads.plan.padded
    assert {v.get_info().data_shape[3].get_length() for v in model.get_variables()} == {8, 16}


# --------------------------------------------------------------------------------------- the fixture

@pytest.mark.parametrize("fixture, options", [
    ("e2b35", {"kv_sharing": "unshare"}), ("tiny8", {"sliding_window": "bounded"}),
    ("tiny8", {"kv_sharing": "unshare", "sliding_window": "bounded"})], ids=["unshare", "bounded", "both"])
def test_padding_composes_with_unsharing_and_bounding(fixture, options):
    """The stateful path of the padded IR with the other opt-in rewrites: transformers' 20 tokens (tiny8:
    12 + 20 tokens, past its window of 16, so a bounded cache really drops positions)."""
    from testkit.greedy import greedy_generate

    reference = json.loads((FIXTURES / fixture / "reference.json").read_text())
    model = ov.Core().read_model(FIXTURES / fixture / "openvino_model.xml")
    summary = ovpasses.rewrite(model, paged_heads="pad", **options)
    assert summary.paged_heads.action == PagedHeadsAction.PADDED
    compiled = ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG)
    assert greedy_generate(compiled, reference["prompt_ids"], 20) == reference["generated_ids"]


def test_e2b35_plan_and_its_cost():
    """15 owner layers (12 sliding head size 8, 3 full 16; one KV head): the 24 sliding caches grow to 16,
    and the 28 layers that read them (12 owners, 16 borrowers) change."""
    model = ov.Core().read_model(FIXTURES / "e2b35" / "openvino_model.xml")
    plan = analyze_paged_heads(model, analyze_kv_sharing(model))
    assert plan.target == (1, 16) and len(plan.padded) == 24 and len(plan.changed_layers) == 28
    assert plan.layouts() == "1x16 in 6 caches, 1x8 in 24 caches"
    assert (plan.bytes_per_token(), plan.bytes_per_token(padded=True)) == (1152, 1920)   # f32: 4 bytes


@pytest.mark.parametrize("fixture, window", [("e2b35", 512), ("tiny8", 16)])
def test_on_runtimes_that_lose_the_window_padding_leaves_one_line_saying_from_where(fixture, window):
    """2025.2 - 2025.4: the padding mends the head layouts; what is left is the window, said in one line
    with the context from which the tokens go wrong (measured in the runtime matrix on 2025.2.0: e2b35
    padded gives transformers' tokens, its 512 window not reached; tiny8 goes wrong past its 16)."""
    model = ov.Core().read_model(FIXTURES / fixture / "openvino_model.xml")
    summary = ovpasses.rewrite(model, "2025.2", paged_heads="pad")
    assert summary.paged_heads.action == PagedHeadsAction.PADDED
    assert [w.risk for w in summary.warnings] == [PagedRisk.IGNORES_WINDOW]
    (warning,) = map(paged_warning_text, summary.warnings)
    assert "ignores sliding windows" in warning and f"outgrow the window ({window})" in warning


def ovpass(*args) -> CliResult:
    return run_main(*args)   # in this process: a process of its own adds nothing here


def test_cli_says_what_padding_costs_and_where_it_is_needed():
    xml = FIXTURES / "e2b35" / "openvino_model.xml"
    padded_run = ovpass("rewrite", xml, "--dry-run", "--runtime", "2026.0", "--paged-heads", "pad")
    assert padded_run.returncode == 0, padded_run.stderr
    assert ("paged heads: pad: 24 caches padded to 1x16 (KV heads x head size; were 1x16 in 6 caches, 1x8 in 24 "
            "caches)\n  KV cache per token (batch 1) 1.1 KiB -> 1.9 KiB (1.67x)") in "\n".join(unwrapped(padded_run.stdout))
    assert "mixes up layers" not in padded_run.stdout
    inspected = ovpass("inspect", xml, "--runtime", "2026.0")
    assert "  --paged-heads pad would make every cache 1x16: KV cache per token (batch 1) 1.1 KiB -> 1.9 KiB (1.67x)" \
        in unwrapped(inspected.stdout)
    assert "paged heads" not in ovpass("inspect", xml, "--runtime", "2026.4.1").stdout   # not needed there
    (warning,) = [line for line in unwrapped(inspected.stdout) if "mixes up layers whose head size" in line]
    assert "--paged-heads pad" in warning and 'ATTENTION_BACKEND="SDPA"' in warning and "2026.3 or newer" in warning
    newest = ovpass("rewrite", xml, "--dry-run", "--runtime", "2026.4.1", "--paged-heads", "pad", "--format", "json")
    data = json.loads(newest.stdout)
    assert data["paged_heads"]["action"] == "padded" and not data["paged_heads"]["needed"]
    assert any(w.startswith("--paged-heads pad is not needed on openvino 2026.4.1") for w in data["warnings"])


def cell(python: Path, fixture: str | Path, mode: str, path: str, prompt: str = "default") -> dict:
    return cell_in(python, fixture if isinstance(fixture, Path) else FIXTURES / fixture, mode, path, prompt)


@needs_affected
@pytest.mark.slow   # the same backend as test_affected_continuous_batching_pipeline_decodes_e2b35_once_padded's
def test_affected_genai_paged_decodes_e2b35_once_padded():
    """openvino_genai's continuous batching on 2026.0: as rewritten today, wrong from the 2nd token; padded,
    transformers' 20 tokens."""
    before = cell(AFFECTED, "e2b35", "rewritten", "paged")
    assert before["runtime"].startswith("2026.0") and before["status"] == "wrong tokens", before
    after = cell(AFFECTED, "e2b35", "paged-pad", "paged")
    assert after["runtime"].startswith("2026.0") and after["status"] == "ok", after


@needs_affected
# the stateful path padded on 2026.0 is a26's too (test_affected_genai_decodes_a26_once_padded): e2b35's in the slow tier
@pytest.mark.parametrize("path", ["core", pytest.param("stateful", marks=pytest.mark.slow)])
def test_affected_stateful_path_stays_at_reference_once_padded(path):
    result = cell(AFFECTED, "e2b35", "paged-pad", path)
    assert result["status"] == "ok", result
    if path == "core":
        assert result["fused_sdpa"] == 13   # every exclusive cache still fused (as rewritten without padding)


@needs_affected
@pytest.mark.parametrize("fixture, prompt", [("tiny8", "default"), ("tiny8u", "long")])
def test_affected_genai_paged_keeps_the_window_once_padded(fixture, prompt):
    """Past the window (16): the padding keeps the sliding-window Slice that the 2026.0 converter reads."""
    assert cell(AFFECTED, fixture, "paged-pad", "paged", prompt)["status"] == "ok"


def test_a26_has_the_26b_31b_layout():
    """The a26 fixture (transformers' Gemma4ForCausalLM with attention_k_eq_v and num_global_key_value_heads,
    exported by optimum-intel): sliding layers 4 KV heads x 8, full layers 1 x 16 whose V is the raw k_proj
    output, layers 2 and 3 adjacent full layers, no KV sharing; padded to 4 x 16."""
    reference = json.loads((FIXTURES / "a26" / "reference.json").read_text())
    layers = reference["kv_sharing"]["layers"]
    assert "".join("f" if layer["attention_type"] == "full_attention" else "s" for layer in layers) == "ssffsssf"
    assert {(layer["attention_type"], layer["num_kv_heads"], layer["head_dim"], layer["v_from_k_proj"], layer["kv"])
            for layer in layers} == {("sliding_attention", 4, 8, False, "own"), ("full_attention", 1, 16, True, "own")}
    model = ov.Core().read_model(FIXTURES / "a26" / "openvino_model.xml")
    plan = analyze_paged_heads(model, analyze_kv_sharing(model))
    assert plan.layouts() == "1x16 in 6 caches, 4x8 in 10 caches" and plan.target == (4, 16)
    assert len(plan.padded) == 16 and len(plan.changed_layers) == 8
    assert (plan.bytes_per_token(), plan.bytes_per_token(padded=True)) == (1664, 4096)   # f32


@pytest.mark.parametrize("version", [runtime_venv(v) for v in ("2026.0.0", "2026.1.0")])
# the long prompt (past the window) in the default run, the short one in the slow tier
@pytest.mark.parametrize("prompt", [pytest.param("default", marks=pytest.mark.slow), "long"])
def test_affected_genai_decodes_a26_once_padded(prompt, version):
    """The 26B/31B layout exported, on 2026.0 (and 2026.1 where its venv is): as rewritten today the paged path is wrong within its first
    3 tokens (mostly from the first); padded, LLMPipeline with a SchedulerConfig and ContinuousBatchingPipeline give transformers' 20
    tokens (after 12 prompt tokens and after 28, past the window of 16), and the stateful path and ov.Core
    (all 8 SDPAs fused) stay at reference."""
    python = venv_python(version)
    before = cell(python, "a26", "rewritten", "paged", prompt)
    assert before["runtime"].startswith(version) and before["status"] == "wrong tokens", before
    # from the first token in 16 of 16 lone runs; once, in a test run, from the 3rd: the mixed-up kernel reads
    # memory laid out for another layer, whose contents vary
    assert before["first_mismatch"] <= 2
    after = cells_in(python, FIXTURES / "a26", "paged-pad", ["paged", "batching", "stateful", "core"], prompt)
    assert {path: c["status"] for path, c in after.items()} == dict.fromkeys(after, "ok"), after
    assert after["core"]["runtime"].startswith(version) and after["core"]["fused_sdpa"] == 8


@pytest.mark.parametrize("mode", ["rewritten", "paged-pad"])
def test_newest_genai_decodes_a26_padded_or_not(mode):
    """2026.3 and newer key the PagedAttention executor by head size and KV heads: right either way."""
    cells = cells_in(NEWEST, FIXTURES / "a26", mode, ["paged", "stateful"], "long")
    assert cells["paged"]["runtime"] >= "2026.3" and cells["paged"]["status"] == cells["stateful"]["status"] == "ok"


AFFECTED_CONTINUOUS_BATCHING = """
import json, os, shutil, tempfile, numpy as np, openvino as ov, openvino_genai as genai, ovpasses
from pathlib import Path
from ovpasses.precision import EXACT_CPU_CONFIG
fixture, mode = Path("tests/fixtures/gemma4/e2b35"), %r
reference = json.loads((fixture / "reference.json").read_text())
tmp = tempfile.mkdtemp()   # no tokenizer: token ids in, token ids out
for name in ("config.json", "generation_config.json"):
    shutil.copy(fixture / name, Path(tmp) / name)
model = ov.Core().read_model(fixture / "openvino_model.xml")
ovpasses.rewrite(model, paged_heads=mode)
ov.save_model(model, Path(tmp) / "openvino_model.xml", compress_to_fp16=False)
pipe = genai.ContinuousBatchingPipeline(tmp, genai.SchedulerConfig(), "CPU", EXACT_CPU_CONFIG)
config = genai.GenerationConfig()
config.max_new_tokens = config.min_new_tokens = len(reference["generated_ids"])
config.do_sample = False
result = pipe.generate([ov.Tensor(np.array([reference["prompt_ids"]], np.int64))], [config])
print(json.dumps({"runtime": ov.get_version(), "tokens": [int(t) for t in result[0].m_generation_ids[0]],
                  "expected": reference["generated_ids"]}), flush=True)
shutil.rmtree(tmp)
os._exit(0)   # genai 2026.0 - 2026.2 segfaults now and then when a pipeline is destroyed (measured after the print)
"""


@needs_affected
def test_affected_continuous_batching_pipeline_decodes_e2b35_once_padded():
    """openvino_genai.ContinuousBatchingPipeline itself (what OpenVINO Model Server runs) on 2026.0, one
    process per IR: the unpadded one may corrupt the heap (a crash is as wrong as wrong tokens)."""
    def run(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(AFFECTED), "-c", AFFECTED_CONTINUOUS_BATCHING % mode], capture_output=True,
                              text=True, timeout=600, cwd=ROOT)

    keep = run("keep")
    assert keep.returncode != 0 or (lambda o: o["tokens"] != o["expected"])(json.loads(keep.stdout.splitlines()[-1]))
    pad = run("pad")
    assert pad.returncode == 0, pad.stderr[-2000:]
    out = json.loads(pad.stdout.splitlines()[-1])
    assert out["runtime"].startswith("2026.0") and len(out["expected"]) == 20 and out["tokens"] == out["expected"]


AFFECTED_GENAI_STACK = """
import json, os, shutil, tempfile, numpy as np, openvino as ov, openvino_genai as genai, ovpasses
from pathlib import Path
from ovpasses.precision import EXACT_CPU_CONFIG
from testkit.graphs import HeadsStackSpec, build_heads_stack, heads_stack_greedy
spec, prompt, steps = HeadsStackSpec(*%r, kv_source=%r, k_eq_v=%r, hidden=%r, seed=%r, scale=%r), %r, 12
mode, path = %r, %r
expected, margin = heads_stack_greedy(spec, prompt, steps)
tmp = tempfile.mkdtemp()
(Path(tmp) / "config.json").write_text(json.dumps({"model_type": "llama", "vocab_size": spec.hidden}))
(Path(tmp) / "generation_config.json").write_text(json.dumps({"eos_token_id": spec.vocab}))
model = build_heads_stack(spec)
ovpasses.rewrite(model, paged_heads=mode)
ov.save_model(model, Path(tmp) / "openvino_model.xml", compress_to_fp16=False)
kwargs = {"ATTENTION_BACKEND": "SDPA"} if path == "stateful" else {"scheduler_config": genai.SchedulerConfig()}
pipe = genai.LLMPipeline(tmp, "CPU", **kwargs, **EXACT_CPU_CONFIG)
config = genai.GenerationConfig()
config.max_new_tokens = config.min_new_tokens = steps
config.do_sample = False
ids = np.array([prompt], np.int64)
result = pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), config)
print(json.dumps({"runtime": ov.get_version(), "expected": expected, "margin": margin,
                  "tokens": [int(t) for t in result.tokens[0]]}), flush=True)
shutil.rmtree(tmp)
os._exit(0)   # genai 2026.0 - 2026.2 segfaults now and then when a pipeline is destroyed (measured after the print)
"""
# the 26B/31B layout with no scale input; after [5, 1, 3, 2, 6, 4] its greedy tokens take 4 values, the smallest
# top-1/top-2 margin 1.47, far above what float32 moves (RELATIVE of the largest output)
GENAI_LARGE = HeadsStackSpec(LARGE_LIKE.layers, k_eq_v=LARGE_LIKE.k_eq_v, hidden=16, seed=3, scale=None)


@needs_affected
def test_affected_genai_paged_decodes_the_large_layout_once_padded():
    """The 26B/31B layout (sliding 4 KV heads x 8, full 1 x 16 with K = V, adjacent full layers) through
    openvino_genai on 2026.0, its output read as logits: greedy tokens of the float64 reference."""
    spec = GENAI_LARGE

    def run(mode: str, path: str) -> subprocess.CompletedProcess:   # one process each: see above
        code = AFFECTED_GENAI_STACK % ((spec.layers,), spec.kv_source, spec.k_eq_v, spec.hidden, spec.seed,
                                       spec.scale, [5, 1, 3, 2, 6, 4], mode, path)
        proc = subprocess.run([str(AFFECTED), "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
        if proc.returncode == -signal.SIGSEGV and not proc.stdout:
            # genai 2026.0 segfaulted once in a clean-clone run (keep, stateful) before any output, and in
            # none of 24 runs of this test alone (2026-11-25): a crash that repeats still fails below
            warnings.warn(f"openvino_genai 2026.0 segfaulted before any output ({mode}, {path}); ran it again")
            proc = subprocess.run([str(AFFECTED), "-c", code], capture_output=True, text=True, timeout=600, cwd=ROOT)
        return proc

    for mode, path in (("pad", "paged"), ("pad", "stateful"), ("keep", "stateful")):
        proc = run(mode, path)
        assert proc.returncode == 0, f"{mode} {path}: {proc.stderr[-2000:]}"
        out = json.loads(proc.stdout.splitlines()[-1])
        assert out["runtime"].startswith("2026.0") and out["margin"] > 1 and len(set(out["expected"])) > 3
        assert out["tokens"] == out["expected"], (mode, path)
    keep = run("keep", "paged")
    assert keep.returncode != 0 or (lambda o: o["tokens"] != o["expected"])(json.loads(keep.stdout.splitlines()[-1]))


AFFECTED_STACK = """
import json, numpy as np, ovpasses
from ovpasses.precision import EXACT_CPU_CONFIG
from testkit.graphs import HeadsStackSpec, build_heads_stack, heads_stack_reference
from testkit.paged import heads_stack_paged_outputs
spec, tokens, pad = HeadsStackSpec(*%r, kv_source=%r, k_eq_v=%r, hidden=%r), %r, %r
model = build_heads_stack(spec)
if pad:
    ovpasses.rewrite(model, paged_heads="pad")
got = heads_stack_paged_outputs(spec, tokens, prefill=6, config=EXACT_CPU_CONFIG, model=model)
ref = heads_stack_reference(spec, tokens)
error = np.nan_to_num(np.abs(got - ref), nan=np.inf).max() / max(1.0, np.abs(ref).max())
print(json.dumps({"runtime": __import__("openvino").get_version(), "error": float(error)}))
"""


@pytest.mark.parametrize("version", [runtime_venv(v) for v in ("2026.0.0", "2026.1.0", "2026.2.1")])
@pytest.mark.parametrize("spec", [E2B_LIKE, LARGE_LIKE], ids=["e2b-like", "large-like"])
def test_affected_paged_attention_is_right_once_padded(spec, version):
    """The CPU PagedAttention of 2026.0 - 2026.2 on the Gemma 4 layouts: garbage (or a crash) as built, the
    float64 reference once padded. (2025.2 - 2025.4 lay their paged caches out otherwise: the runtime
    matrix covers them through openvino_genai.)"""
    def run(pad: bool) -> subprocess.CompletedProcess:
        code = AFFECTED_STACK % ((spec.layers,), spec.kv_source, spec.k_eq_v, spec.hidden, TOKENS, pad)
        return subprocess.run([str(venv_python(version)), "-c", code], capture_output=True, text=True,
                              timeout=300, cwd=ROOT)

    before = run(False)   # heap corruption may abort the process: as wrong as a wrong number
    assert before.returncode != 0 or json.loads(before.stdout.splitlines()[-1])["error"] > 1e-2, before.stdout
    after = run(True)
    assert after.returncode == 0, after.stderr[-2000:]
    out = json.loads(after.stdout.splitlines()[-1])
    assert out["runtime"].startswith(version) and out["error"] < RELATIVE
