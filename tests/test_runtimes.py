"""The Gemma 4 fixtures and a synthetic regression on the newest and on an affected runtime (issues 3,
11), the Gemma 3n fixture prepared under the newest runtime for older ones (issue 10), and the
fixtures with unshared KV caches (issue 12).

Each case runs in a subprocess under the runtime's own virtual environment (.venvs/dev for the
newest, .venvs/ov-2026.0.0 for the affected one; tools/test.sh creates both; 2025.2.0 and 2026.1.0
run where their venvs exist), through ``python -m testkit.matrix``.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.matrix import cell_in, grid_cell, grid_in, lost_its_state

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "gemma4"
GEMMA3N = ROOT / "tests" / "fixtures" / "gemma3n" / "tiny8"
NEWEST = Path(sys.executable)
AFFECTED = ROOT / ".venvs" / "ov-2026.0.0" / "bin" / "python"
# fused stateful SDPA kernels on native 2026.4.1 (the exclusive caches: layers 0-1, and 0-12)
NATIVE_FUSED = {"tiny8": 2, "e2b35": 13, "tiny8u": 2}
# tiny8u has one head size: the CPU PagedAttention of 2026.0 - 2026.2 can run it (tests/test_paged.py),
# so its paged tokens show whether the window and the KV sharing come through the conversion
PAGED_FIXTURE, PAGED_WINDOW = "tiny8u", 16
PROMPTS = ["default", "long"]   # 12 and 28 tokens
UNSHARE_FIXTURES = ["tiny8", "e2b35"]   # every layer fused once unshared
GEMMA3N_FUSED = 2   # its exclusive caches: layers 0 and 1 (tiny8's layout)

needs_affected = pytest.mark.skipif(not AFFECTED.exists(), reason="needs .venvs/ov-2026.0.0 (bash tools/venv.sh ov 2026.0.0)")


def cell(python: Path, fixture: str | Path, mode: str, path: str, prompt: str = "default") -> dict:
    return cell_in(python, fixture if isinstance(fixture, Path) else FIXTURES / fixture, mode, path, prompt)


NEWEST_PATHS, AFFECTED_PATHS = ("core", "stateful", "paged"), ("core", "stateful")


def path_of_grid(python: Path, fixture: str, mode: str, path: str, paths: tuple[str, ...]) -> dict:
    """``path`` from one process that runs ``mode`` on every path of ``paths`` for ``fixture`` (each test
    using it is an xdist group, so that one worker runs that process once); for cells expected to pass."""
    return grid_cell(python, FIXTURES / fixture, mode, path, modes=(mode,), paths=paths)


@pytest.mark.xdist_group("runtimes-newest-rewritten")
@pytest.mark.parametrize("fixture", NATIVE_FUSED)
@pytest.mark.parametrize("path", NEWEST_PATHS)
def test_newest_rewritten_decodes_like_transformers(fixture, path):
    result = path_of_grid(NEWEST, fixture, "rewritten", path, NEWEST_PATHS)
    assert result["status"] == "ok", result
    if path == "core":
        assert result["fused_sdpa"] == NATIVE_FUSED[fixture]


@pytest.mark.parametrize("fixture", NATIVE_FUSED)
def test_newest_unmodified_is_native_baseline(fixture):
    result = cell(NEWEST, fixture, "unmodified", "core")
    assert result["status"] == "ok" and result["fused_sdpa"] == NATIVE_FUSED[fixture], result


@needs_affected
@pytest.mark.parametrize("fixture", NATIVE_FUSED)
def test_affected_unmodified_crashes(fixture):
    """The bug the project exists for, still there on 2026.0: if this starts passing, re-measure."""
    result = cell(AFFECTED, fixture, "unmodified", "core")
    assert result["runtime"].startswith("2026.0")
    assert lost_its_state(result), result


@needs_affected
def test_affected_unmodified_on_one_core_gives_empty_logits_without_an_error():
    """A runtime defect pinned (docs/runtimes.md): on one core (a one-CPU container, or a process pinned to one), 2026.0
    does not raise "null input states" on the shared cache: the inference returns logits of shape (0, 0, vocab),
    and greedy decoding fails on them in Python, not in the plugin. The rewrite mends that too."""
    cells = {c["mode"]: c for c in grid_in(AFFECTED, FIXTURES / "tiny8", ["unmodified", "rewritten"], ["core"],
                                           one_core=True)}
    unmodified = cells["unmodified"]
    assert unmodified["runtime"].startswith("2026.0")
    assert unmodified["status"] == "failed" and "size 0" in unmodified["error"], unmodified
    assert "null input states" not in unmodified["error"]
    assert cells["rewritten"]["status"] == "ok", cells["rewritten"]


@needs_affected
@pytest.mark.xdist_group("runtimes-affected-rewritten")
@pytest.mark.parametrize("fixture", NATIVE_FUSED)
@pytest.mark.parametrize("path", AFFECTED_PATHS)
def test_affected_rewritten_decodes_with_every_exclusive_cache_fused(fixture, path):
    result = path_of_grid(AFFECTED, fixture, "rewritten", path, AFFECTED_PATHS)
    assert result["status"] == "ok", result
    if path == "core":
        # not only "native minus the caches with extra consumers": every exclusive cache stays fused
        assert result["fused_sdpa"] == NATIVE_FUSED[fixture]


@pytest.mark.parametrize("prompt", PROMPTS)
def test_newest_paged_decodes_past_the_window(prompt):
    result = cell(NEWEST, PAGED_FIXTURE, "rewritten", "paged", prompt)
    assert result["status"] == "ok", result


@needs_affected
@pytest.mark.parametrize("prompt", PROMPTS)
def test_affected_rewritten_paged_decodes_past_the_window(prompt):
    """2026.0's paged converter gets the window from SlidingWindowMaskSliceInsertion's Slice; the borrowers'
    caches of their own (the converter's doing on 2026.0) hold their owners' K/V and decode right."""
    result = cell(AFFECTED, PAGED_FIXTURE, "rewritten", "paged", prompt)
    assert result["runtime"].startswith("2026.0") and result["status"] == "ok", result


@needs_affected
def test_affected_unmodified_paged_misses_the_window():
    """Without the Slice the window is 0 (none): right while the sequence fits the window, wrong after.
    If this starts passing, re-measure PAGED_WINDOW_NEEDS_SLICE."""
    result = cell(AFFECTED, PAGED_FIXTURE, "unmodified", "paged")
    prompt_length = len(json.loads((FIXTURES / PAGED_FIXTURE / "reference.json").read_text())["prompt_ids"])
    assert result["status"] == "wrong tokens" and result["first_mismatch"] >= PAGED_WINDOW - prompt_length, result


def attention_layers(fixture: str) -> int:
    """The fixture's decoder layers, each with one attention (transformers' config in reference.json)."""
    return json.loads((FIXTURES / fixture / "reference.json").read_text())["config"]["num_hidden_layers"]


@pytest.mark.xdist_group("runtimes-newest-unshared")
@pytest.mark.parametrize("fixture", UNSHARE_FIXTURES)
@pytest.mark.parametrize("path", NEWEST_PATHS)
def test_newest_unshared_fuses_every_layer_and_decodes_like_transformers(fixture, path):
    """kv_sharing="unshare" (issue 12): every borrower reads a cache of its own, so the plugin fuses
    every attention layer, and ov.Core, genai stateful (SDPA backend) and genai paged still give
    transformers' tokens."""
    result = path_of_grid(NEWEST, fixture, "unshared", path, NEWEST_PATHS)
    assert result["status"] == "ok", result
    if path == "core":
        assert result["fused_sdpa"] == attention_layers(fixture) > NATIVE_FUSED[fixture]


@needs_affected
@pytest.mark.parametrize("fixture", UNSHARE_FIXTURES)
def test_affected_unshared_fuses_every_layer_and_decodes_like_transformers(fixture):
    result = cell(AFFECTED, fixture, "unshared", "core")
    assert result["runtime"].startswith("2026.0")
    assert result["status"] == "ok" and result["fused_sdpa"] == attention_layers(fixture), result


SYNTHETIC = """
import json, numpy as np, openvino as ov, ovpasses
from testkit.graphs import StackSpec, build_stack, run_stack, stack_reference, stack_steps
from ovpasses.app.check import count_fused_sdpa
from ovpasses.precision import EXACT_CPU_CONFIG
spec = StackSpec(k_source=(0, 1, 2, 3), gqa_form="bidirectional", past_length_from=(0,), past_length_at="concat")
steps = stack_steps(spec)
reference = stack_reference(spec, steps)
out = {}
for mode in ("unmodified", "rewritten"):
    model = build_stack(spec)
    if mode == "rewritten":
        ovpasses.rewrite(model)
    compiled = ov.Core().compile_model(model, "CPU", EXACT_CPU_CONFIG)
    try:
        got = run_stack(compiled, spec, steps)
        out[mode] = {"fused": count_fused_sdpa(compiled),
                     "max_abs_diff": max(float(np.abs(g - r).max()) for g, r in zip(got, reference))}
    except Exception as exc:
        out[mode] = {"fused": count_fused_sdpa(compiled), "error": str(exc)}
print(json.dumps(out))
"""


@needs_affected
def test_synthetic_shapeof_on_cache_concat_regression():
    """Smallest synthetic graph found that crashes unmodified on 2026.0: four exclusive caches, a
    past-length ShapeOf on layer 0's Concat. Rewritten, all four stay fused and match float64."""
    proc = subprocess.run([str(AFFECTED), "-c", SYNTHETIC], capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "null input states" in out["unmodified"]["error"]
    assert out["rewritten"]["fused"] == 4
    # f32 end to end, 4 layers of O(1) activations: summation order only
    assert out["rewritten"]["max_abs_diff"] < 1e-4


# ---------------------------------------------------------------- Gemma 3n: prepared under the newest runtime

def old_runtime(version: str, default: bool = False):
    """A parameter for an older runtime's venv: skipped where the venv is missing; 2026.0.0 is in the
    default run (tools/test.sh makes its venv), the others carry the ``matrix`` mark."""
    python = ROOT / ".venvs" / f"ov-{version}" / "bin" / "python"
    marks = [pytest.mark.skipif(not python.exists(),
                                reason=f"needs .venvs/ov-{version} (bash tools/venv.sh ov {version})")]
    return pytest.param(version, marks=marks if default else [*marks, pytest.mark.matrix], id=version)


OLD_RUNTIMES = [old_runtime("2026.0.0", default=True), old_runtime("2025.2.0"), old_runtime("2026.1.0")]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """Gemma 3n rewritten by this (newest) runtime for an older one: ``ovpass rewrite DIR -o DIR2
    --runtime VERSION``, once per version."""
    from ovpasses.app.folder import rewrite_folder
    from ovpasses.options import RewriteOptions
    folders: dict[str, Path] = {}

    def get(version: str) -> Path:
        if version not in folders:
            folder = tmp_path_factory.mktemp("prepared") / version
            rewrite_folder(GEMMA3N, folder, RewriteOptions(runtime=version))
            folders[version] = folder
        return folders[version]
    return get


@pytest.mark.parametrize("version", OLD_RUNTIMES)
def test_gemma3n_as_exported_cannot_be_read_by_an_older_runtime(version):
    result = cell(ROOT / ".venvs" / f"ov-{version}" / "bin" / "python", GEMMA3N, "unmodified", "core")
    assert result["runtime"] == version and result["status"] == "failed"
    assert "ErfInv" in result["error"] and "unsupported opset: opset17" in result["error"], result


@pytest.mark.parametrize("path", ["core", "stateful"])
@pytest.mark.parametrize("version", OLD_RUNTIMES)
def test_gemma3n_prepared_under_the_newest_decodes_on_the_older_runtime(prepared, version, path):
    """Rewritten here (2026.4.1) with --runtime VERSION, run under VERSION: transformers' 20 tokens through
    ov.Core with every exclusive cache fused, and through genai's stateful LLMPipeline (SDPA backend)."""
    result = cell(ROOT / ".venvs" / f"ov-{version}" / "bin" / "python", prepared(version), "unmodified", path)
    assert result["runtime"] == version and result["status"] == "ok", result
    if path == "core":
        assert result["fused_sdpa"] == GEMMA3N_FUSED


@pytest.mark.parametrize("path", ["core", "stateful"])
def test_gemma3n_on_the_newest_runtime(path):
    for mode in ("unmodified", "rewritten"):
        result = cell(NEWEST, GEMMA3N, mode, path)
        assert result["status"] == "ok", result
        if path == "core":
            assert result["fused_sdpa"] == GEMMA3N_FUSED


PAGED_MENDED = [old_runtime("2026.0.0", default=True), old_runtime("2026.1.0"), old_runtime("2026.2.1")]


@pytest.mark.parametrize("version", PAGED_MENDED)
def test_gemma3n_prepared_paged_decodes_where_native_paged_is_wrong(prepared, version):
    """Issue 11: continuous batching (PagedAttention) decodes Gemma 3n wrong on 2026.0 - 2026.2 natively
    (from the 8th token, past its sliding window of 16). Prepared (the window mask followed by a no-op
    Slice the old converter reads, one head size in every layer), it gives transformers' tokens."""
    python = ROOT / ".venvs" / f"ov-{version}" / "bin" / "python"
    result = cell(python, prepared(version), "unmodified", "paged")
    assert result["runtime"] == version and result["status"] == "ok", result


@pytest.mark.parametrize("version", ["2025.2", "2025.4"])
def test_gemma3n_paged_on_runtimes_whose_kernel_ignores_the_window_is_said(version):
    """Before 2026.0 the CPU PagedAttention ignores sliding windows: no rewrite mends that, so the
    rewrite says so and points to the stateful path (measured: WRONG from the 8th token on 2025.2.0 and
    2025.4.1, prepared or not; benchmarks/results/runtime_matrix_gemma3n.json)."""
    import openvino as ov

    from ovpasses import rewrite
    summary = rewrite(ov.Core().read_model(GEMMA3N / "openvino_model.xml"), runtime=version)
    from ovpasses.app.render.text import paged_warning_text
    warnings = [paged_warning_text(w) for w in summary.warnings]
    assert any("ignores sliding windows" in w and 'ATTENTION_BACKEND="SDPA"' in w for w in warnings), warnings


@needs_affected
def test_vlm_language_model_rewritten_decodes_on_an_affected_runtime():
    """The Gemma 4 VLM export (vlm8): unmodified, its language model loses its state on 2026.0; rewritten,
    driven through the export's own embedding IRs, it decodes transformers' tokens with every
    exclusive cache fused."""
    unmodified = cell(AFFECTED, "vlm8", "unmodified", "core")
    assert lost_its_state(unmodified), unmodified
    rewritten = cell(AFFECTED, "vlm8", "rewritten", "core")
    assert rewritten["status"] == "ok" and rewritten["fused_sdpa"] == 2, rewritten
