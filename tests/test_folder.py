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


def ovpass(*args, strace: list[str] | None = None) -> subprocess.CompletedProcess:
    command = [str(OVPASS), *map(str, args)]
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
