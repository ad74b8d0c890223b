"""Folder mode: ``ovpass rewrite EXPORT_DIR -o FIXED_DIR`` and ``--in-place`` on an optimum-intel export.

The export is the tiny8 fixture folder (an optimum-intel text-generation-with-past export: the
language model, tokenizer and detokenizer IRs, configs). Every IR with stateful attention is
rewritten, every other file is copied byte for byte, and the target folder is replaced whole.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import openvino as ov
import pytest

from ovpasses import commit
from ovpasses.folder import holds_stateful_attention, ir_files_in, rewrite_folder

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "gemma4" / "tiny8"
OVPASS = Path(sys.executable).with_name("ovpass")
STRACE = shutil.which("strace")
AFFECTED = "2026.0"

pytestmark = pytest.mark.skipif(not OVPASS.exists(), reason=f"console script not installed at {OVPASS}")


def ovpass(*args, strace: list[str] | None = None, exe: Path = OVPASS) -> subprocess.CompletedProcess:
    command = [str(exe), *map(str, args)]
    if strace is not None:
        command = [STRACE, "-f", "-qq", "-o", "/dev/null", *strace, *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=180,
                          env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"))


def tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def export(tmp_path) -> Path:
    folder = tmp_path / "export"
    shutil.copytree(FIXTURE, folder)
    (folder / "extra").mkdir()   # a sub-folder, copied as it is
    (folder / "extra" / "notes.txt").write_text("kept")
    return folder


def test_only_irs_with_stateful_attention_are_rewritten(export):
    irs = [p.name for p in ir_files_in(export)]
    assert irs == ["openvino_detokenizer.xml", "openvino_model.xml", "openvino_tokenizer.xml"]
    assert [name for name in irs if holds_stateful_attention(export / name)] == ["openvino_model.xml"]


def test_rewrite_a_folder_to_a_new_folder(export, tmp_path):
    before = tree(export)
    fixed = tmp_path / "fixed"
    result = ovpass("rewrite", export, "-o", fixed, "--runtime", AFFECTED, "--format", "json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["schema"] == "ovpass.rewrite-folder/1" and summary["changed"]
    rewritten = [m for m in summary["models"] if m["rewritten"]]
    assert [m["file"] for m in rewritten] == ["openvino_model.xml"] and rewritten[0]["changed"]
    assert sorted(m["file"] for m in summary["models"] if not m["rewritten"]) == [
        "openvino_detokenizer.xml", "openvino_tokenizer.xml"]
    assert tree(export) == before                              # the input is untouched
    after = tree(fixed)
    assert sorted(after) == sorted(before)
    assert [name for name in after if after[name] != before[name]] == ["openvino_model.xml"]
    assert sorted(os.listdir(tmp_path)) == ["export", "fixed"]   # no temporary folder left
    # the rewritten IR is the one 'ovpass rewrite FILE' writes
    single = tmp_path / "single" / "m.xml"
    single.parent.mkdir()
    assert ovpass("rewrite", export / "openvino_model.xml", "-o", single, "--runtime", AFFECTED).returncode == 0
    assert after["openvino_model.xml"] == single.read_bytes()
    assert after["openvino_model.bin"] == single.with_suffix(".bin").read_bytes()


def test_text_summary_and_dry_run(export, tmp_path):
    before = tree(export)
    result = ovpass("rewrite", export, "--dry-run", "--runtime", AFFECTED)
    assert result.returncode == 0, result.stderr
    assert "openvino_model.xml:" in result.stdout and "KVCacheShapeOfDecomposition: 1 changed" in result.stdout
    assert "copied unchanged: 10 file(s)" in result.stdout and "dry run: nothing written" in result.stdout
    assert tree(export) == before and sorted(os.listdir(tmp_path)) == ["export"]


def test_an_empty_target_folder_is_filled(export, tmp_path):
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    assert ovpass("rewrite", export, "-o", fixed).returncode == 0
    assert sorted(tree(fixed)) == sorted(tree(export))


def test_in_place_replaces_the_folder_and_is_idempotent(export, tmp_path):
    before = tree(export)
    first = ovpass("rewrite", export, "--in-place", "--runtime", AFFECTED, "--format", "json")
    assert first.returncode == 0, first.stderr and json.loads(first.stdout)["changed"]
    after = tree(export)
    assert [name for name in after if after[name] != before[name]] == ["openvino_model.xml"]
    again = ovpass("rewrite", export, "--in-place", "--runtime", AFFECTED, "--format", "json")
    assert again.returncode == 0 and not json.loads(again.stdout)["changed"]
    assert tree(export) == after
    assert sorted(os.listdir(tmp_path)) == ["export"]


@pytest.mark.parametrize("target, message", [
    (lambda export: export, "is the input folder"),
    (lambda export: export / "inside", "inside the input folder"),
    (lambda export: export.parent, "holds the input folder"),
    (lambda export: export / "config.json", "inside the input folder"),
    (lambda export: export.parent / "no" / "such", "does not exist"),
])
def test_refused_folder_targets(export, target, message):
    before = tree(export.parent)
    result = ovpass("rewrite", export, "-o", target(export))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stderr.count("\n") == 1
    assert tree(export.parent) == before


def test_a_non_empty_target_is_refused(export, tmp_path):
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    (fixed / "mine.txt").write_text("user data")
    result = ovpass("rewrite", export, "-o", fixed)
    assert result.returncode == 2 and "is not empty" in result.stderr
    assert tree(fixed) == {"mine.txt": b"user data"}


def test_a_folder_without_stateful_attention_is_refused(tmp_path):
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("openvino_tokenizer.xml", "openvino_tokenizer.bin"):
        shutil.copy(FIXTURE / name, folder / name)
    result = ovpass("rewrite", folder, "-o", tmp_path / "out")
    assert result.returncode == 2 and "no IR in this folder holds stateful attention" in result.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.skipif(STRACE is None, reason="strace is missing: the rename cannot be made to fail")
@pytest.mark.parametrize("in_place", [False, True], ids=["to -o", "--in-place"])
def test_a_failing_commit_changes_nothing(export, tmp_path, in_place):
    """The last rename of the commit (the new folder into place) fails: the old folder stays whole."""
    fixed = tmp_path / "fixed"
    if not in_place:
        fixed.mkdir()   # an empty target folder: it is replaced, like the input folder with --in-place
    target = export if in_place else fixed
    before = tree(target)
    args = ["rewrite", export, *(["--in-place"] if in_place else ["-o", fixed]), "--runtime", AFFECTED]
    # renames of the commit: the journal, the old folder to its backup, the new folder into place
    nth = 3
    result = ovpass(*args, strace=["-e", "trace=rename", "-e", f"inject=rename:error=EIO:when={nth}"])
    assert result.returncode == 2, result.stderr
    assert "restored" in result.stderr and "Input/output error" in result.stderr
    assert tree(target) == before
    assert sorted(os.listdir(tmp_path)) == (["export"] if in_place else ["export", "fixed"])


def test_rewrite_folder_as_a_library_call(export, tmp_path):
    summary = rewrite_folder(export, tmp_path / "lib", runtime=AFFECTED)
    assert summary.changed and [m.file for m in summary.models if m.summary] == ["openvino_model.xml"]
    model = ov.Core().read_model(tmp_path / "lib" / "openvino_model.xml")
    assert [p.get_names() for p in model.inputs] == [p.get_names() for p in
                                                     ov.Core().read_model(export / "openvino_model.xml").inputs]
    assert not any(name.startswith(".ovpass") for name in os.listdir(tmp_path / "lib"))
    assert commit.LOCK_NAME not in os.listdir(tmp_path)


# --------------------------------------------------------------------------------------- inspect and check

VLM = REPO / "tests" / "fixtures" / "gemma4" / "vlm8"
AFFECTED_OVPASS = REPO / ".venvs" / "ov-2026.0.0" / "bin" / "ovpass"
needs_affected = pytest.mark.skipif(not AFFECTED_OVPASS.exists(),
                                    reason=f"needs {AFFECTED_OVPASS} (bash tools/venv.sh ov 2026.0.0)")


def test_inspect_a_folder_reports_each_language_model(export):
    result = ovpass("inspect", export, "--format", "json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "ovpass.inspect-folder/1"
    assert [m["file"] for m in data["models"]] == ["openvino_model.xml"]
    assert data["models"][0]["report"]["schema"] == "ovpass.inspect/1"
    text = ovpass("inspect", VLM)
    assert text.returncode == 0 and text.stdout.startswith("== openvino_language_model.xml ==")


def test_check_the_vlm_language_model_through_the_export_embeddings():
    """The language model takes inputs_embeds and per_layer_inputs: the folder's embedding IRs make them."""
    result = ovpass("check", VLM, "--steps", "2", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["schema"] == "ovpass.check-folder/1" and data["verdict_code"] == "ok"
    (model,) = data["models"]
    assert model["file"] == "openvino_language_model.xml" and model["verdict_code"] == "ok"
    assert model["inputs_from"] == ["openvino_text_embeddings_model.xml", "openvino_text_embeddings_per_layer_model.xml"]
    assert model["original"]["ran"] and model["rewritten"]["ran"] and model["values_compared"] > 0


@needs_affected
def test_check_says_fixed_on_2026_0_against_the_decomposed_reference():
    """On 2026.0 the unmodified VLM language model loses its state; the rewrite fixes it, and the fix
    agrees with the same IR with every SDPA decomposed."""
    result = ovpass("check", VLM / "openvino_language_model.xml", "--steps", "2", "--format", "json",
                    exe=AFFECTED_OVPASS)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["verdict_code"] == "fixed" and data["runtime"].startswith("2026.0")
    assert "null input states" in data["original"]["error"]
    assert data["rewritten"]["ran"] and data["reference"]["ran"] and data["reference"]["fused_sdpa"] == 0
    assert data["reference_max_abs_diff"] <= data["reference_tolerance"]
    assert "agrees with the decomposed reference" in data["verdict"]


def test_without_the_embedding_irs_check_is_inconclusive_not_ok(tmp_path):
    """The IR alone: per_layer_inputs' layer count is dynamic and nothing beside the IR says it. Filling
    it with the token count (as check once did) ran nothing; guessing is refused: INCONCLUSIVE, exit 4."""
    for suffix in (".xml", ".bin"):
        shutil.copy(VLM / f"openvino_language_model{suffix}", tmp_path / f"lm{suffix}")
    result = ovpass("check", tmp_path / "lm.xml", "--steps", "1", "--format", "json")
    assert result.returncode == 4, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["verdict_code"] == "inconclusive" and not data["original"]["compiled"]
    assert "cannot make per_layer_inputs: its layer count is dynamic" in data["verdict"]
    assert "--data-shape per_layer_inputs[1,?,LAYERS,WIDTH]" in data["verdict"]
    # --data-shape supplies what the folder would have: the check runs
    fixed = ovpass("check", tmp_path / "lm.xml", "--steps", "1", "--data-shape", "per_layer_inputs[1,?,8,16]")
    assert fixed.returncode == 0 and "verdict: OK" in fixed.stdout, fixed.stdout + fixed.stderr


def test_a_dynamic_rank_input_is_inconclusive(tmp_path):
    from openvino import opset13 as ops
    x = ops.parameter(ov.PartialShape.dynamic(), ov.Type.f32, name="x")
    model = ov.Model([ops.reshape(x, ops.constant([2, -1]), False)], [x], "dynamic_rank")
    ov.save_model(model, tmp_path / "dyn.xml")
    result = ovpass("check", tmp_path / "dyn.xml", "--steps", "0", "--prefill", "3")
    assert result.returncode == 4 and "INCONCLUSIVE" in result.stdout, result.stdout + result.stderr


@pytest.mark.parametrize("spec, message", [
    ("per_layer_inputs[1,?,8]", "has rank 4"),
    ("nonsense[1]", "names nonsense, which the model does not take"),
    ("per_layer_inputs[1,x]", "not a number"),
    ("per_layer_inputs(1,2)", "expected NAME[d0,d1,...]"),
])
def test_bad_data_shapes_are_usage_errors(spec, message):
    result = ovpass("check", VLM / "openvino_language_model.xml", "--data-shape", spec)
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr


def test_genai_needs_a_folder():
    result = ovpass("check", VLM / "openvino_language_model.xml", "--genai")
    assert result.returncode == 2 and "--genai runs openvino_genai on an export folder" in result.stderr


def _without_tokenizer(source: Path, target: Path) -> Path:
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("openvino_tokenizer.*", "openvino_detokenizer.*"))
    return target


def test_genai_check_of_a_text_export_without_tokenizer_irs_feeds_token_ids(tmp_path):
    """Issue 20 item 8: without openvino_tokenizer.xml, LLMPipeline could not encode the prompt, both
    runs failed and the check said INCONCLUSIVE. LLMPipeline takes token ids: the check feeds them
    (the config's bos_token_id, then seeded ids below vocab_size) and compares the tokens."""
    pytest.importorskip("openvino_genai", reason="openvino_genai is not installed in this environment")
    folder = _without_tokenizer(FIXTURE, tmp_path / "export")
    result = ovpass("check", folder, "--genai", "--steps", "1", "--format", "json")
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(result.stdout)
    assert data["verdict_code"] == "ok" and [g["path"] for g in data["genai"]] == ["stateful", "paged"]
    config = json.loads((FIXTURE / "config.json").read_text())
    for report in data["genai"]:
        original, rewritten = report["original"], report["rewritten"]
        assert report["verdict"] == "ok" and report["same_output"], report
        assert original["prompt_ids"] == rewritten["prompt_ids"] and len(original["prompt_ids"]) == 8
        assert original["prompt_ids"][0] == config["bos_token_id"]
        assert all(0 <= i < config["vocab_size"] for i in original["prompt_ids"])
        assert len(original["tokens"]) == 8 and original["tokens"] == rewritten["tokens"]


def test_genai_check_of_an_image_text_export_without_tokenizer_irs_says_why_it_cannot(tmp_path):
    """VLMPipeline takes text only (openvino_genai 2026.4.1: no generate overload takes ids, and without
    a tokenizer it fails with 'Tokenizer::encode is not available'): INCONCLUSIVE, saying so."""
    pytest.importorskip("openvino_genai", reason="openvino_genai is not installed in this environment")
    folder = _without_tokenizer(VLM, tmp_path / "vlm")
    result = ovpass("check", folder, "--genai", "--steps", "1", "--format", "json")
    assert result.returncode == 4, result.stdout + result.stderr
    for report in json.loads(result.stdout)["genai"]:
        assert report["verdict"] == "inconclusive"
        assert report["original"]["error"].startswith("VLMPipeline takes text only and the folder has no "
                                                      "openvino_tokenizer.xml")


# ------------------------------------------------------------------------------------------ --runtime OLD

GEMMA3N = REPO / "tests" / "fixtures" / "gemma3n" / "tiny8"


def test_a_gemma3n_folder_for_an_older_runtime(tmp_path):
    """The language model loses its ErfInv (opset17); tokenizer IRs are copied, with one warning that
    genai 2026.0 cannot load them."""
    fixed = tmp_path / "fixed"
    result = ovpass("rewrite", GEMMA3N, "-o", fixed, "--runtime", AFFECTED, "--format", "json")
    assert result.returncode == 0, result.stderr
    [warning] = result.stderr.splitlines()
    assert warning.startswith("ovpass: warning: openvino_detokenizer.xml, openvino_tokenizer.xml: converted by "
                              "openvino_tokenizers 2026.4.1, which openvino_genai 2026.0 cannot load")
    summary = json.loads(result.stdout)
    [model] = [m for m in summary["models"] if m["rewritten"]]
    assert model["file"] == "openvino_model.xml" and model["summary"]["readable"]
    assert [op["type"] for op in model["summary"]["unreadable_ops"]] == ["ErfInv"]
    assert 'version="opset17"' not in (fixed / "openvino_model.xml").read_text()
    before, after = tree(GEMMA3N), tree(fixed)
    assert [name for name in after if after[name] != before[name]] == ["openvino_model.bin", "openvino_model.xml"]
    # the newest runtime needs nothing changed beyond the KV plan, and no warning
    native = ovpass("rewrite", GEMMA3N, "-o", tmp_path / "native")
    assert native.returncode == 0 and native.stderr == ""
    assert 'type="ErfInv"' in (tmp_path / "native" / "openvino_model.xml").read_text()


def _with_extra_ir(export: Path, spec) -> Path:
    from ovpasses.testing.graphs import build_newer_ops
    ov.save_model(build_newer_ops(spec), export / "openvino_extra_model.xml", compress_to_fp16=False)
    return export / "openvino_extra_model.xml"


def test_an_ir_without_stateful_attention_gets_only_its_unreadable_ops_replaced(export, tmp_path):
    from ovpasses.testing.graphs import NewerOpsSpec
    extra = _with_extra_ir(export, NewerOpsSpec(erfinv="none", one_hot="normalize"))
    summary = rewrite_folder(export, tmp_path / "old", runtime="2025.2")
    [lowered] = [m for m in summary.models if m.op_versions]
    assert lowered.file == extra.name and lowered.summary is None and summary.changed
    assert [(a.op.type, a.handled) for a in lowered.op_versions] == [("OneHot", True)]
    assert 'version="opset16"' not in (tmp_path / "old" / extra.name).read_text()
    assert "cannot be read as exported: OneHot (opset16) 'one_hot'" in str(summary)
    # 2025.4.1 reads OneHot-16: the IR is copied byte for byte
    newer = rewrite_folder(export, tmp_path / "newer", runtime="2025.4.1")
    assert not any(m.op_versions for m in newer.models)
    assert (tmp_path / "newer" / extra.name).read_bytes() == extra.read_bytes()


def test_an_op_that_cannot_be_replaced_refuses_the_folder_naming_the_file(export, tmp_path):
    from ovpasses.testing.graphs import NewerOpsSpec
    extra = _with_extra_ir(export, NewerOpsSpec(erfinv="parameter"))
    result = ovpass("rewrite", export, "-o", tmp_path / "out", "--runtime", AFFECTED)
    assert result.returncode == 2
    [error] = [line for line in result.stderr.splitlines() if line.startswith("ovpass: error:")]
    assert error.startswith(f"ovpass: error: {extra}: openvino 2026.0.0 cannot read 1 operation of this model")
    assert "ErfInv (opset17)" in error and "its input is not a Constant" in error
    assert "2026.2.1 is the first release" in error
    assert sorted(os.listdir(tmp_path)) == ["export"]
