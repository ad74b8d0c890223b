"""Folder mode: ``ovpass rewrite EXPORT_DIR -o FIXED_DIR`` and ``--in-place`` on an optimum-intel export.

The export is the tiny8 fixture folder (an optimum-intel text-generation-with-past export: the
language model, tokenizer and detokenizer IRs, configs). Every IR with stateful attention is
rewritten, every other file is copied byte for byte, and the target folder is replaced whole.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import openvino as ov
import pytest

from ovpasses.app.files import commit
from ovpasses.app.files.export_scan import holds_stateful_attention, ir_files_in
from ovpasses.app.folder import rewrite_folder
from ovpasses.options import RewriteOptions
from ovpasses.report import schemas
from testkit.cli import run_main

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "gemma4" / "tiny8"
OVPASS = Path(sys.executable).with_name("ovpass")
STRACE = shutil.which("strace")
AFFECTED = "2026.0"
# in CI (tools/test.sh installs strace) a missing strace fails the tests that need it instead of skipping them
needs_strace = pytest.mark.skipif(STRACE is None and not os.environ.get("CI"),
                                  reason="strace is missing: the faults and races cannot be staged (apt-get install strace)")

# the console script is needed: without it these tests fail (tests/test_cli.py says why)


def ovpass(*args, strace: list[str] | None = None, exe: Path = OVPASS, process: bool = False):
    """``ovpass ARGS``: in this process (``testkit.cli.run_main``), unless it runs under strace,
    ``exe`` is another runtime's console script, or ``process`` asks for a fresh process (then a
    ``subprocess.CompletedProcess``, read the same way)."""
    if strace is None and exe == OVPASS and not process:
        return run_main(*args)
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
    # two fresh processes: OpenVINO names a new node by a counter of its process (Constant_1279898), so the
    # bytes of two rewrites are equal only from equal starts
    result = ovpass("rewrite", export, "-o", fixed, "--runtime", AFFECTED, "--format", "json", process=True)
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert summary["schema"] == schemas.REWRITE_FOLDER and summary["changed"]
    rewritten = [m for m in summary["models"] if m["rewritten"]]
    assert [m["file"] for m in rewritten] == ["openvino_model.xml"] and rewritten[0]["changed"]
    assert sorted(m["file"] for m in summary["models"] if not m["rewritten"]) == [
        "openvino_detokenizer.xml", "openvino_tokenizer.xml"]
    assert tree(export) == before                              # the input is untouched
    after = tree(fixed)
    assert sorted(after) == sorted(before)
    assert [name for name in after if after[name] != before[name]] == ["openvino_model.bin", "openvino_model.xml"]   # the .bin: the elided GQA expands' shape Constants
    assert sorted(os.listdir(tmp_path)) == ["export", "fixed"]   # no temporary folder left
    # the rewritten IR is the one 'ovpass rewrite FILE' writes
    single = tmp_path / "single" / "m.xml"
    single.parent.mkdir()
    assert ovpass("rewrite", export / "openvino_model.xml", "-o", single, "--runtime", AFFECTED,
                  process=True).returncode == 0
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
    assert [name for name in after if after[name] != before[name]] == ["openvino_model.bin", "openvino_model.xml"]   # the .bin: the elided GQA expands' shape Constants
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


@needs_strace
@pytest.mark.parametrize("in_place", [False, True], ids=["to -o", "--in-place"])
def test_a_failing_commit_changes_nothing(export, tmp_path, in_place):
    """The last rename of the commit (the last entry put in place) fails: the old folder stays whole."""
    fixed = tmp_path / "fixed"
    if not in_place:
        fixed.mkdir()   # an empty target folder: it is filled, one rename per file
    target = export if in_place else fixed
    before = tree(target)
    args = ["rewrite", export, *(["--in-place"] if in_place else ["-o", fixed]), "--runtime", AFFECTED]
    scratch = tmp_path / "scratch"   # the same run on a copy, to count the commit's renames
    shutil.copytree(tmp_path, scratch, ignore=shutil.ignore_patterns("scratch"))
    log = tmp_path / "trace.txt"
    traced = ovpass(*[str(a).replace(str(tmp_path), str(scratch)) for a in args],
                    strace=["-o", str(log), "-e", "trace=renameat2"])
    assert traced.returncode == 0, traced.stderr
    nth = sum(1 for line in log.read_text().splitlines() if "renameat2(" in line and str(scratch) in line)
    log.unlink()
    shutil.rmtree(scratch)
    assert nth >= 1
    result = ovpass(*args, strace=["-e", "trace=renameat2", "-e", f"inject=renameat2:error=EIO:when={nth}"])
    assert result.returncode == 2, result.stderr
    assert "restored" in result.stderr and "Input/output error" in result.stderr
    assert tree(target) == before
    assert sorted(os.listdir(tmp_path)) == (["export"] if in_place else ["export", "fixed"])


# --------------------------------------------------------------------------------------- what a new user hits

def _hf_snapshot(root: Path) -> Path:
    """A Hugging Face cache layout: ``snapshots/<rev>/<name>`` are relative links into ``../../blobs``."""
    blobs, snapshot = root / "blobs", root / "snapshots" / "abc123"
    blobs.mkdir(parents=True)
    snapshot.mkdir(parents=True)
    for index, source in enumerate(sorted(p for p in FIXTURE.iterdir() if p.is_file())):
        shutil.copy(source, blobs / f"blob{index}")
        (snapshot / source.name).symlink_to(Path("..") / ".." / "blobs" / f"blob{index}")
    return snapshot


@pytest.mark.parametrize("symlinks", [None, "keep"])
def test_a_hugging_face_snapshot_is_copied_as_files(tmp_path, symlinks):
    """Every file of a snapshot is a relative link: -o at another depth gets the files (cp -L); with
    --symlinks keep, links that would dangle there are copied too."""
    snapshot = _hf_snapshot(tmp_path / "hub")
    (tmp_path / "deeper" / "still").mkdir(parents=True)
    out = tmp_path / "deeper" / "still" / "out"
    result = ovpass("rewrite", snapshot, "-o", out, *(["--symlinks", symlinks] if symlinks else []))
    assert result.returncode == 0, result.stderr
    assert not [p.name for p in out.iterdir() if p.is_symlink()]
    expected = {p.name: p.read_bytes() for p in snapshot.iterdir()}
    got = {p.name: p.read_bytes() for p in out.iterdir()}
    assert sorted(got) == sorted(expected)
    assert [n for n in got if got[n] != expected[n]] == ["openvino_model.bin", "openvino_model.xml"]   # the .bin: the elided GQA expands' shape Constants
    assert ovpass("check", out, "--steps", "1").returncode == 0


def test_keep_keeps_a_link_that_stays_valid(export, tmp_path):
    extra = tmp_path / "shared-notes.txt"
    extra.write_text("shared")
    (export / "notes.txt").symlink_to(extra)                     # absolute: valid from anywhere
    result = ovpass("rewrite", export, "-o", tmp_path / "out", "--symlinks", "keep")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "notes.txt").is_symlink()
    assert os.readlink(tmp_path / "out" / "notes.txt") == str(extra)


def test_a_dangling_link_is_named_and_check_refuses_it(export, tmp_path):
    (export / "tokenizer.json").unlink()
    (export / "tokenizer.json").symlink_to("../../blobs/gone")
    result = ovpass("rewrite", export, "-o", tmp_path / "out")
    assert result.returncode == 2 and "tokenizer.json" in result.stderr and "does not exist" in result.stderr
    assert result.stderr.count("\n") == 1 and not (tmp_path / "out").exists()
    checked = ovpass("check", export, "--steps", "1")
    assert checked.returncode == 2, checked.stderr
    assert "tokenizer.json" in checked.stderr and "cannot be read" in checked.stderr


def test_an_existing_target_keeps_its_mode_and_a_new_one_gets_the_umask(export, tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(private, 0o700)
    assert ovpass("rewrite", export, "-o", private).returncode == 0
    assert private.stat().st_mode & 0o7777 == 0o700 and (private / "openvino_model.xml").exists()
    made = tmp_path / "made"
    result = subprocess.run(["sh", "-c", f'umask 027 && exec "{OVPASS}" rewrite "{export}" -o "{made}"'],
                            capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stderr
    assert made.stat().st_mode & 0o7777 == 0o750


def test_an_empty_mount_point_is_filled(export, tmp_path):
    mount = tmp_path / "mnt"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)], capture_output=True,
                             text=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip()}); needs root")
    try:
        result = ovpass("rewrite", export, "-o", mount)
        assert result.returncode == 0, result.stderr
        assert sorted(tree(mount)) == sorted(tree(export)) and not any(n.startswith(".ovpass") for n in os.listdir(mount))
    finally:
        subprocess.run(["umount", str(mount)], check=True)


AT_FIRST_FSYNC = ["-e", "trace=fsync", "-e", "inject=fsync:signal=STOP:when=1"]


def paused_rewrite(log: Path, stop: list[str], *args) -> subprocess.Popen:
    """``ovpass rewrite ARGS`` under strace, which stops it (SIGSTOP) at the system call that ``stop`` (strace's
    filter and its ``inject=...:signal=STOP``) names, when that call returns (:data:`AT_FIRST_FSYNC`: the
    commit's first step, the rewritten folder written and checked, nothing committed yet). It stays stopped
    until :func:`resume`; ``log`` is strace's, which :func:`paused` reads."""
    return subprocess.Popen([STRACE, "-f", "-qq", "-o", str(log), *stop, str(OVPASS), "rewrite", *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def lock_opens_before_commit(log: Path, lock: Path, *args) -> int:
    """How often ``ovpass rewrite ARGS`` opens ``lock`` before its commit's first fsync (a run of its own,
    traced): the last of those opens is the commit's, which takes the lock."""
    run = subprocess.run([STRACE, "-f", "-qq", "-o", str(log), "-e", "trace=openat,fsync", str(OVPASS), "rewrite",
                          *map(str, args)], capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stderr
    lines = log.read_text().splitlines()
    before = lines[:next(i for i, line in enumerate(lines) if "fsync(" in line)]
    return sum("openat(" in line and f'"{lock}"' in line for line in before)


def paused(log: Path) -> bool:
    return log.exists() and "--- stopped by SIGSTOP ---" in log.read_text()


def _ovpass_of(run: subprocess.Popen) -> list[int]:
    """The process that strace (``run``) started, if it still runs."""
    children = Path(f"/proc/{run.pid}/task/{run.pid}/children")
    return [int(pid) for pid in children.read_text().split()] if children.exists() else []


def resume(run: subprocess.Popen) -> None:
    """SIGCONT to the ovpass process that strace (``run``) started."""
    (ovpass_pid,) = _ovpass_of(run)
    os.kill(ovpass_pid, signal.SIGCONT)


def wait_until(condition, runs: list[subprocess.Popen], what: str, seconds: float = 120) -> None:
    """Poll ``condition``; fail after ``seconds`` or when one of ``runs`` ends first, killing them (the
    stopped ovpass processes first: they hold the pipes that the failure message reads)."""
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline or any(run.poll() is not None for run in runs):
            for run in runs:
                for pid in _ovpass_of(run):
                    os.kill(pid, signal.SIGKILL)
                run.kill()
            pytest.fail(f"{what}: not within {seconds:.0f} s, or an ovpass run ended first: "
                        f"{[(run.wait(), run.stderr.read()) for run in runs]}")
        time.sleep(0.01)


@needs_strace
@pytest.mark.parametrize("existing", [False, True], ids=["new -o", "empty -o"])
def test_a_target_made_by_another_process_meanwhile_is_left_alone(export, tmp_path, tmp_path_factory, existing):
    """Another process creates OUT, or a file of the rewrite's in the empty OUT, after ovpass checked it.

    ovpass is stopped after the commit's first fsync (the rewritten folder is written, it has been checked
    under the lock, nothing is committed yet), and the other process comes meanwhile. (The stop replaced a
    2 s delay of that fsync and a 0.8 s sleep of this test's, which a loaded machine could outrun.)"""
    out = tmp_path / "out"
    if existing:
        out.mkdir()
    log = tmp_path_factory.mktemp("trace") / "rewrite.trace"
    rewrite = paused_rewrite(log, AT_FIRST_FSYNC, export, "-o", out)
    wait_until(lambda: paused(log), [rewrite], "ovpass stopped at its first fsync")
    out.mkdir(exist_ok=True)
    (out / "config.json").write_text("another process")
    resume(rewrite)
    code, stderr = rewrite.wait(timeout=120), rewrite.stderr.read()
    assert code == 2, (stderr, tree(out).get("config.json"), sorted(os.listdir(out)))
    assert stderr.startswith("ovpass: error: ") and stderr.count("\n") == 1, stderr
    assert "by another process after ovpass checked it" in stderr and str(out) in stderr
    assert tree(out) == {"config.json": b"another process"}
    assert sorted(os.listdir(tmp_path)) == ["export", "out"]


@needs_strace
def test_two_rewrites_into_one_new_folder_one_fails(export, tmp_path, tmp_path_factory):
    """Both check that OUT is new, both prepare, then both commit: one wins, the other says so.

    The first is stopped where it opens its commit's lock file, before it takes the lock (it has found OUT
    new and prepared); the second runs meanwhile, finds OUT new, prepares and commits; then the first goes
    on. (This replaced a 1.5 s delay of each one's first fsync, which a start delayed on a loaded machine
    outran: the late one, waiting for the lock that the other held to commit, then found OUT already there.
    Stopping both where they open the lock is no cure: a run that meets the other's lock polls it, opens
    it again, and may stop before its check.)"""
    out, lock = tmp_path / "out", tmp_path / commit.LOCK_NAME
    logs = tmp_path_factory.mktemp("trace")
    first, second = AFFECTED, "2026.4"
    args = {runtime: [export, "-o", out, "--runtime", runtime, "--format", "json"] for runtime in (first, second)}
    # a traced run of the first alone: which of its opens of the lock file is its commit's
    opens = lock_opens_before_commit(logs / "probe.trace", lock, *args[first])
    shutil.rmtree(out)
    runs = {first: paused_rewrite(logs / "first.trace", ["-P", str(lock), "-e", "trace=openat",
                                                         "-e", f"inject=openat:signal=STOP:when={opens}"],
                                  *args[first])}
    wait_until(lambda: paused(logs / "first.trace"), list(runs.values()), "the first ovpass stopped before its commit")
    runs[second] = subprocess.Popen([str(OVPASS), "rewrite", *map(str, args[second])], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)
    runs[second].wait(timeout=120)
    resume(runs[first])
    results = {runtime: (p.wait(timeout=120), p.stdout.read(), p.stderr.read()) for runtime, p in runs.items()}
    codes = sorted(code for code, _, _ in results.values())
    assert codes == [0, 2], results
    winner = next(runtime for runtime, (code, _, _) in results.items() if code == 0)
    loser = next(r for r in results if r != winner)
    assert "another process" in results[loser][2] and str(out) in results[loser][2]
    alone = tmp_path / "alone"
    assert ovpass("rewrite", export, "-o", alone, "--runtime", winner, process=True).returncode == 0
    assert tree(out) == tree(alone)   # a fresh process, as the winner's: node names count up per process
    assert sorted(os.listdir(tmp_path)) == ["alone", "export", "out"]


def test_rewrite_folder_as_a_library_call(export, tmp_path):
    summary = rewrite_folder(export, tmp_path / "lib", RewriteOptions(runtime=AFFECTED))
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
    assert data["schema"] == schemas.INSPECT_FOLDER
    assert [m["file"] for m in data["models"]] == ["openvino_model.xml"]
    assert data["models"][0]["report"]["schema"] == schemas.INSPECT
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
    from testkit.graphs import build_newer_ops
    ov.save_model(build_newer_ops(spec), export / "openvino_extra_model.xml", compress_to_fp16=False)
    return export / "openvino_extra_model.xml"


def test_an_ir_without_stateful_attention_gets_only_its_unreadable_ops_replaced(export, tmp_path):
    from testkit.graphs import NewerOpsSpec
    extra = _with_extra_ir(export, NewerOpsSpec(erfinv="none", one_hot="normalize"))
    summary = rewrite_folder(export, tmp_path / "old", RewriteOptions(runtime="2025.2"))
    [lowered] = [m for m in summary.models if m.op_versions]
    assert lowered.file == extra.name and lowered.summary is None and summary.changed
    assert [(a.op.type, a.handled) for a in lowered.op_versions] == [("OneHot", True)]
    assert 'version="opset16"' not in (tmp_path / "old" / extra.name).read_text()
    assert "cannot be read as exported: OneHot (opset16) 'one_hot'" in str(summary)
    # 2025.4.1 reads OneHot-16: the IR is copied byte for byte
    newer = rewrite_folder(export, tmp_path / "newer", RewriteOptions(runtime="2025.4.1"))
    assert not any(m.op_versions for m in newer.models)
    assert (tmp_path / "newer" / extra.name).read_bytes() == extra.read_bytes()


def test_an_op_that_cannot_be_replaced_refuses_the_folder_naming_the_file(export, tmp_path):
    from testkit.graphs import NewerOpsSpec
    extra = _with_extra_ir(export, NewerOpsSpec(erfinv="parameter"))
    result = ovpass("rewrite", export, "-o", tmp_path / "out", "--runtime", AFFECTED)
    assert result.returncode == 2
    [error] = [line for line in result.stderr.splitlines() if line.startswith("ovpass: error:")]
    assert error.startswith(f"ovpass: error: {extra}: openvino 2026.0.0 cannot read 1 operation of this model")
    assert "ErfInv (opset17)" in error and "its input is not a Constant" in error
    assert "2026.2.1 is the first release" in error and error.endswith("or newer (--runtime), or run it there")
    assert sorted(os.listdir(tmp_path)) == ["export"]
