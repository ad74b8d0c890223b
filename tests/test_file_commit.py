"""The file layer never loses or mixes a user's IR: commits, crashes, failures and concurrent writers.

Faults are real: ``strace`` kills the ``ovpass`` process (SIGKILL at the entry of a system call, so
that call never runs) or makes a call fail, at each step of a commit. After any of them the target
holds the old pair or the new pair, whole, or an interrupted commit that the next ovpass command on
that folder finishes or undoes, saying so. Linux only; skipped where strace or ptrace is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ovpasses import commit, io

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "gemma4" / "tiny8"
OVPASS = Path(sys.executable).with_name("ovpass")
STRACE = shutil.which("strace")
MUTATING = "link,linkat,rename,renameat,renameat2,unlink,unlinkat,mkdir,mkdirat,rmdir"
ENV = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")


def _ptrace_works() -> bool:
    if STRACE is None:
        return False
    return subprocess.run([STRACE, "-o", "/dev/null", "true"], capture_output=True).returncode == 0


needs_strace = pytest.mark.skipif(not _ptrace_works(), reason="strace is missing or ptrace is not permitted here; "
                                                             "fault injection needs both (apt-get install strace)")
pytestmark = pytest.mark.skipif(not OVPASS.exists(), reason=f"console script not installed at {OVPASS}")


def ovpass(*args, strace: list[str] | None = None, **kwargs) -> subprocess.CompletedProcess:
    command = [str(OVPASS), *map(str, args)]
    if strace is not None:
        command = [STRACE, "-f", "-qq", *strace, *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=ENV, **kwargs)


def pair(xml: Path) -> tuple[bytes, bytes]:
    return xml.read_bytes(), io.weights_path(xml).read_bytes()


def names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture(scope="module")
def ir_versions(tmp_path_factory) -> dict:
    """The input IR, and the bytes of the two pairs a rewrite into ``out.xml`` may leave: old and new."""
    root = tmp_path_factory.mktemp("versions")
    source = root / "in" / "m.xml"
    source.parent.mkdir()
    for suffix in (".xml", ".bin"):
        shutil.copy(FIXTURE / f"openvino_model{suffix}", source.with_suffix(suffix))
    ref = root / "ref"
    ref.mkdir()
    assert ovpass("rewrite", source, "-o", ref / "old.xml", "--runtime", "2026.4").returncode == 0
    assert ovpass("rewrite", source, "-o", ref / "new.xml", "--runtime", "2026.0").returncode == 0
    old, new = pair(ref / "old.xml"), pair(ref / "new.xml")
    assert old[0] != new[0], "the two versions must differ for a mixed pair to be visible"
    return {"source": source, "old": old, "new": new, "old_xml": ref / "old.xml"}


@pytest.fixture
def out(tmp_path, ir_versions) -> Path:
    """A folder holding the old pair as ``out.xml`` / ``out.bin``."""
    folder = tmp_path / "out"
    folder.mkdir()
    for suffix in (".xml", ".bin"):
        shutil.copy(ir_versions["old_xml"].with_suffix(suffix), folder / f"out{suffix}")
    return folder / "out.xml"


def traced_steps(args: list, folder: Path) -> list[tuple[str, int, str]]:
    """The file-system changes ``ovpass *args`` makes in ``folder``: (syscall, its n-th call, line)."""
    log = folder.parent / "trace.txt"
    result = ovpass(*args, strace=["-o", str(log), "-e", f"trace={MUTATING}"])
    assert result.returncode == 0, result.stderr
    counts: dict[str, int] = {}
    steps = []
    for line in log.read_text().splitlines():
        match = re.match(r"\d+\s+(\w+)\((.*)", line)
        if match is None or "resumed>" in line:
            continue
        syscall = match.group(1)
        counts[syscall] = counts.get(syscall, 0) + 1
        if str(folder) in match.group(2):
            steps.append((syscall, counts[syscall], line))
    log.unlink()
    return steps


# --------------------------------------------------------------------------------------- kill at every step

@needs_strace
def test_a_kill_at_any_step_leaves_the_old_or_the_new_pair(out, ir_versions):
    """Kill the writer before each file-system change of its commit; then the next command recovers."""
    args = ["rewrite", ir_versions["source"], "-o", out, "--runtime", "2026.0"]
    steps = traced_steps(args, out.parent)
    renames = [s for s in steps if s[0].startswith("rename")]
    assert len(renames) >= 3 and len(steps) >= 6, steps   # journal, .bin, .xml at least
    outcomes = set()
    for syscall, nth, line in steps:
        shutil.rmtree(out.parent)
        out.parent.mkdir()
        for suffix in (".xml", ".bin"):
            shutil.copy(ir_versions["old_xml"].with_suffix(suffix), out.with_suffix(suffix))
        killed = ovpass(*args, strace=["-o", "/dev/null", "-e", f"trace={syscall}",
                                       "-e", f"inject={syscall}:signal=KILL:when={nth}"])
        assert killed.returncode in (-9, 137), (line, killed.returncode, killed.stderr)
        pending = (out.parent / commit.JOURNAL_NAME).exists()
        if not pending and out.exists():   # no journal: already one whole pair
            assert pair(out) in (ir_versions["old"], ir_versions["new"]), line
        after = ovpass("inspect", out, "--format", "json")
        assert after.returncode == 0, (line, after.stderr)
        if pending:
            assert "interrupted ovpass commit" in after.stderr, (line, after.stderr)
        assert names(out.parent) == ["out.bin", "out.xml"], (line, names(out.parent))
        state = pair(out)
        assert state in (ir_versions["old"], ir_versions["new"]), f"mixed pair after a kill at {line}"
        outcomes.add("old" if state == ir_versions["old"] else "new")
    assert outcomes == {"old", "new"}, "the kills must fall both before and after the commit point"


# --------------------------------------------------------------------------------------- a failing rename

@needs_strace
@pytest.mark.parametrize("in_place", [False, True], ids=["to -o", "--in-place"])
def test_a_failing_xml_rename_restores_the_previous_pair(out, ir_versions, in_place):
    """The .bin is already replaced when the .xml rename fails (an immutable file, a sticky folder)."""
    if in_place:
        args = ["rewrite", out, "--in-place", "--runtime", "2026.0"]
    else:
        args = ["rewrite", ir_versions["source"], "-o", out, "--runtime", "2026.0"]
    steps = traced_steps(list(args), out.parent)
    for suffix in (".xml", ".bin"):   # the traced run replaced it: put the old pair back
        shutil.copy(ir_versions["old_xml"].with_suffix(suffix), out.with_suffix(suffix))
    syscall, nth, line = next(s for s in steps if s[0].startswith("rename") and s[2].rstrip().split("=")[0]
                              .rstrip().endswith(f'{out}")'))
    result = ovpass(*args, strace=["-o", "/dev/null", "-e", f"trace={syscall}",
                                   "-e", f"inject={syscall}:error=EPERM:when={nth}"])
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("ovpass: error: ") and result.stderr.count("\n") == 1, result.stderr
    assert "Operation not permitted" in result.stderr and "restored" in result.stderr
    assert pair(out) == ir_versions["old"]
    assert names(out.parent) == ["out.bin", "out.xml"]


# --------------------------------------------------------------------------------------- stale temporaries

@needs_strace
def test_temporaries_of_a_killed_run_are_removed_by_the_next_run(out, ir_versions):
    # killed at its first fsync: both temporaries are written in full, nothing is committed yet
    killed = ovpass("rewrite", ir_versions["source"], "-o", out, "--runtime", "2026.0",
                    strace=["-o", "/dev/null", "-e", "trace=fsync", "-e", "inject=fsync:signal=KILL:when=1"])
    assert killed.returncode in (-9, 137), killed.stderr
    leftovers = [n for n in names(out.parent) if n.startswith(commit.TEMP_PREFIX)]
    assert len(leftovers) == 2 and pair(out) == ir_versions["old"]
    size = sum((out.parent / n).stat().st_size for n in leftovers)
    assert size >= len(ir_versions["new"][1])   # the whole .bin was left behind

    again = ovpass("inspect", out)
    assert again.returncode == 0 and "removed 2 leftover file(s) of interrupted ovpass runs" in again.stderr
    assert names(out.parent) == ["out.bin", "out.xml"]


def test_temporaries_of_a_live_process_are_kept(tmp_path):
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        mine = tmp_path / f"{commit.TEMP_PREFIX}{live.pid}-abc.xml"
        mine.write_bytes(b"in progress")
        with commit.folder_lock(tmp_path):
            pass
        assert mine.exists()
    finally:
        live.kill()
        live.wait()
    with commit.folder_lock(tmp_path):
        pass
    assert not mine.exists()
    assert names(tmp_path) == []   # the lock file is gone too


# --------------------------------------------------------------------------------------- concurrency

@needs_strace
def test_concurrent_writers_and_a_reader_never_mix_pairs(out, ir_versions, tmp_path):
    """Writer A stops for 3 s between its .bin and .xml renames; writer B and reader C come meanwhile."""
    args_a = ["rewrite", ir_versions["source"], "-o", out, "--runtime", "2026.0"]
    steps = traced_steps(list(args_a), out.parent)
    syscall, nth, _ = next(s for s in steps if s[0].startswith("rename")
                           and s[2].rstrip().split("=")[0].rstrip().endswith(f'{io.weights_path(out)}")'))
    for suffix in (".xml", ".bin"):
        shutil.copy(ir_versions["old_xml"].with_suffix(suffix), out.with_suffix(suffix))
    a = subprocess.Popen([STRACE, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}",
                          "-e", f"inject={syscall}:delay_exit=3000000:when={nth}", str(OVPASS), *map(str, args_a)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and io.weights_path(out).read_bytes() == ir_versions["old"][1] \
            and not (out.parent / commit.JOURNAL_NAME).exists():
        time.sleep(0.02)
    assert (out.parent / commit.JOURNAL_NAME).exists(), "writer A never reached its commit"
    # A holds the lock with its .bin replaced and its .xml not yet
    reader_out = tmp_path / "read"
    reader_out.mkdir()
    b = subprocess.Popen([str(OVPASS), "rewrite", ir_versions["source"], "-o", str(out), "--runtime", "2026.4"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    c = subprocess.Popen([str(OVPASS), "rewrite", str(out), "-o", str(reader_out / "c.xml"), "--runtime", "2026.4"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV)
    results = {name: (p.wait(timeout=120), p.stderr.read()) for name, p in (("A", a), ("B", b), ("C", c))}
    assert all(code == 0 for code, _ in results.values()), results
    assert pair(out) in (ir_versions["old"], ir_versions["new"])   # whole: B's (= old bytes) or A's
    assert pair(reader_out / "c.xml") in (ir_versions["old"], ir_versions["new"]), "the reader saw a mixed pair"
    assert names(out.parent) == ["out.bin", "out.xml"]


# --------------------------------------------------------------------------------------- the commit itself

def _prepare(folder: Path, contents: dict[str, bytes | dict]) -> list[tuple[Path, Path]]:
    """Temporaries for ``contents`` (file bytes, or a dict for a folder) and the finals they replace."""
    replacements = []
    for final, content in contents.items():
        temp = folder / commit.temp_name()
        if isinstance(content, dict):
            temp.mkdir()
            for name, data in content.items():
                (temp / name).write_bytes(data)
        else:
            temp.write_bytes(content)
        replacements.append((temp, folder / final))
    return replacements


def test_replace_all_puts_files_and_folders_in_place(tmp_path):
    (tmp_path / "a").write_bytes(b"old a")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_bytes(b"old x")
    with commit.folder_lock(tmp_path):
        commit.replace_all(tmp_path, _prepare(tmp_path, {"a": b"new a", "b": b"new b", "d": {"y": b"new y"}}))
    assert names(tmp_path) == ["a", "b", "d"]
    assert (tmp_path / "a").read_bytes() == b"new a" and (tmp_path / "b").read_bytes() == b"new b"
    assert names(tmp_path / "d") == ["y"]


def test_replace_all_changes_nothing_when_one_target_cannot_be_replaced(tmp_path):
    (tmp_path / "a").write_bytes(b"old a")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_bytes(b"old x")
    (tmp_path / "e").mkdir()                      # a non-empty folder cannot be replaced by a file
    (tmp_path / "e" / "keep").write_bytes(b"keep")
    replacements = _prepare(tmp_path, {"a": b"new a", "d": {"y": b"new y"}, "n": b"new n", "e": b"file"})
    with commit.folder_lock(tmp_path), pytest.raises(commit.CommitError, match="nothing was changed"):
        commit.replace_all(tmp_path, replacements)
    assert names(tmp_path) == ["a", "d", "e"]
    assert (tmp_path / "a").read_bytes() == b"old a" and names(tmp_path / "d") == ["x"]
    assert names(tmp_path / "e") == ["keep"]


@needs_strace
def test_a_kill_at_any_step_of_a_folder_commit_is_recovered(tmp_path):
    """The same guarantee for a folder replaced with a file beside it (folder mode's commit)."""
    script = (
        "import sys; from pathlib import Path; from ovpasses import commit\n"
        "root = Path(sys.argv[1])\n"
        "reps = []\n"
        "for final, content in (('exp', {'m.xml': b'new xml', 'm.bin': b'new bin'}), ('note', b'new note')):\n"
        "    temp = root / commit.temp_name()\n"
        "    if isinstance(content, dict):\n"
        "        temp.mkdir()\n"
        "        [(temp / n).write_bytes(d) for n, d in content.items()]\n"
        "    else:\n"
        "        temp.write_bytes(content)\n"
        "    reps.append((temp, root / final))\n"
        "with commit.folder_lock(root):\n"
        "    commit.replace_all(root, reps)\n")
    root = tmp_path / "root"

    def reset() -> None:
        shutil.rmtree(root, ignore_errors=True)
        (root / "exp").mkdir(parents=True)
        (root / "exp" / "m.xml").write_bytes(b"old xml")
        (root / "exp" / "m.bin").write_bytes(b"old bin")
        (root / "note").write_bytes(b"old note")

    def state() -> tuple:
        return (names(root), (root / "exp" / "m.xml").read_bytes(), (root / "exp" / "m.bin").read_bytes(),
                (root / "note").read_bytes())

    old = (["exp", "note"], b"old xml", b"old bin", b"old note")
    new = (["exp", "note"], b"new xml", b"new bin", b"new note")
    reset()
    log = tmp_path / "trace.txt"
    run = [sys.executable, "-c", script, str(root)]
    assert subprocess.run([STRACE, "-f", "-qq", "-o", str(log), "-e", f"trace={MUTATING}", *run], env=ENV).returncode == 0
    assert state() == new
    counts: dict[str, int] = {}
    steps = []
    for line in log.read_text().splitlines():
        match = re.match(r"\d+\s+(\w+)\((.*)", line)
        if match and "resumed>" not in line:
            counts[match.group(1)] = counts.get(match.group(1), 0) + 1
            if str(root) in match.group(2):
                steps.append((match.group(1), counts[match.group(1)], line))
    outcomes = set()
    for syscall, nth, line in steps:
        reset()
        killed = subprocess.run([STRACE, "-f", "-qq", "-o", "/dev/null", "-e", f"trace={syscall}", "-e",
                                 f"inject={syscall}:signal=KILL:when={nth}", *run], env=ENV)
        assert killed.returncode in (-9, 137), line
        with commit.folder_lock(root):
            pass
        assert state() in (old, new), f"after a kill at {line}: {state()}"
        outcomes.add(state() == new)
    assert outcomes == {False, True}


def test_an_unreadable_journal_stops_everything(tmp_path):
    (tmp_path / commit.JOURNAL_NAME).write_text("{not json")
    with pytest.raises(commit.CommitError, match="cannot be read"):
        with commit.folder_lock(tmp_path):
            pass
    assert (tmp_path / commit.JOURNAL_NAME).exists()


def test_the_journal_records_what_replaces_what(tmp_path):
    """A journal left by a killed run is plain JSON that says what it was doing."""
    (tmp_path / "a").write_bytes(b"old")
    replacements = _prepare(tmp_path, {"a": b"new"})
    entry = commit.Entry(replacements[0][0].name, "a", "file", None)
    commit._write_journal(tmp_path, [entry], "committing")
    data = json.loads((tmp_path / commit.JOURNAL_NAME).read_text())
    assert data["format"] == commit.JOURNAL_FORMAT and data["entries"][0]["final"] == "a"
    with commit.folder_lock(tmp_path):   # its temporary was never renamed: undone
        pass
    assert names(tmp_path) == ["a"] and (tmp_path / "a").read_bytes() == b"old"
