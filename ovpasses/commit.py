"""Replacing files and folders as one artefact: a lock, a journal and backups, as databases do.

An IR is two files (``.xml`` and ``.bin``) and an export is a folder; a reader must find either the
old artefact whole or the new one whole, never one file of each. :func:`replace_all` swaps a set of
prepared temporary files or folders into place in one folder:

1. Take the folder's lock (``.ovpass.lock``, through :mod:`filelock`) and finish or undo whatever an
   interrupted run left there (:func:`recover`): writers of one folder are serialised.
2. Keep every file being replaced: a hard link named ``.ovpass-backup-*`` (a copy where the
   filesystem has no hard links); a folder being replaced is renamed to its backup name in step 4.
3. Write the journal ``.ovpass-journal.json`` (temporary name, fsync, rename): what replaces what,
   and which backups exist.
4. Rename each temporary into place (``os.replace``), in order.
5. Delete the journal (the commit is complete) and the backups; release and delete the lock file.

Any error in step 4 undoes the renames already made (the backups go back) and raises; a process
killed in steps 2-5 leaves the journal, and the next ovpass command that locks the folder (readers
included) undoes the commit if some temporary had not been renamed yet, or finishes it if all had,
and says so. Every step of the undo is safe to interrupt and to run again.

What a reader outside ovpass can see: each rename is atomic, but two files cannot be renamed at once,
so between the renames of one commit (microseconds, no I/O between them) a reader that opens the
``.xml`` before and the ``.bin`` after can pair the old ``.xml`` with the new ``.bin``. ovpass's own
readers take the lock and never do.

Temporary files are named ``.ovpass-tmp-<pid>-<token>``: those of processes that no longer exist
are removed by the next run that locks the folder.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import secrets
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from filelock import FileLock, Timeout

from ovpasses.errors import OvpassesError

log = logging.getLogger(__name__)

LOCK_NAME = ".ovpass.lock"
JOURNAL_NAME = ".ovpass-journal.json"
TEMP_PREFIX = ".ovpass-tmp-"
BACKUP_PREFIX = ".ovpass-backup-"
JOURNAL_FORMAT = "ovpass.journal/1"
LOCK_TIMEOUT_S = 120.0


class CommitError(OvpassesError):
    """Files could not be put in place; the message says what was kept and what to do."""


@dataclass
class Entry:
    """One replacement: ``temp`` becomes ``final`` (names in the committed folder)."""

    temp: str
    final: str
    kind: str                  # "file" or "dir"
    backup: str | None = None  # where the replaced artefact is kept until the commit is complete


# ---------------------------------------------------------------------------------------------- names

def temp_name(suffix: str = "") -> str:
    """A name for a temporary file or folder that records this process, so stale ones can be removed."""
    return f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}{suffix}"


def _pid_in(name: str, prefix: str) -> int | None:
    """The process id recorded in a temporary or backup name (``<prefix><pid>-...``)."""
    head = name[len(prefix):].split("-", 1)[0]
    return int(head) if head.isdigit() else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


# ---------------------------------------------------------------------------------------------- lock

@contextlib.contextmanager
def folder_lock(folder: Path, *, write: bool = True) -> Iterator[bool]:
    """Hold ``folder``'s lock and recover what an interrupted run left there; yields whether it is held.

    A reader (``write=False``) of a folder it cannot write reads without the lock (no ovpass process
    of this user can commit there either), unless an interrupted commit is pending there, which it
    cannot undo: then it raises. The lock file is deleted before the lock is released (filelock
    re-checks that the file it locked still has a name, so this is race-free).
    """
    folder = Path(folder)
    lock_path = folder / LOCK_NAME
    if not write and not os.access(folder, os.W_OK | os.X_OK):
        # os.path.lexists is False where the folder cannot be searched: the reader then says why
        if os.path.lexists(folder / JOURNAL_NAME):
            raise CommitError(f"{folder}: an interrupted ovpass commit is pending here and this user cannot "
                              "write the folder to finish it; run any ovpass command on it as a user who can")
        yield False
        return
    lock = FileLock(lock_path, timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except Timeout:
        raise CommitError(f"{folder}: another ovpass process has held {LOCK_NAME} for {LOCK_TIMEOUT_S:.0f} s; "
                          "wait for it to finish and run again") from None
    except OSError as exc:
        raise CommitError(f"{folder}: cannot create the lock file {LOCK_NAME} ({exc.strerror or exc}); "
                          "check the folder's permissions") from None
    try:
        recover(folder)
        yield True
    finally:
        with contextlib.suppress(OSError):
            lock_path.unlink()
        lock.release()


# ---------------------------------------------------------------------------------------------- commit

def replace_all(folder: Path, replacements: Sequence[tuple[Path, Path]]) -> None:
    """Rename each prepared ``temp`` over its ``final`` (both in ``folder``), all or none.

    Call it holding :func:`folder_lock`. Temporaries are fsynced before anything is replaced; on
    failure the finals are as they were and the temporaries are removed.
    """
    folder = Path(folder)
    entries: list[Entry] = []
    for temp, final in replacements:
        temp, final = Path(temp), Path(final)
        if temp.parent != folder or final.parent != folder:
            raise ValueError(f"replace_all: {temp} and {final} must both be in {folder}")
        entries.append(Entry(temp.name, final.name, "dir" if temp.is_dir() else "file"))
    try:
        for entry in entries:
            _fsync_tree(folder / entry.temp)
        for index, entry in enumerate(entries):
            final = folder / entry.final
            if os.path.lexists(final):
                entry.backup = f"{BACKUP_PREFIX}{os.getpid()}-{index}"
                if entry.kind == "file":
                    _keep(final, folder / entry.backup)
        _write_journal(folder, entries, "committing")
    except OSError as exc:
        for entry in entries:
            if entry.backup and entry.kind == "file":
                with contextlib.suppress(OSError):
                    (folder / entry.backup).unlink()
        _discard(folder, entries)
        raise CommitError(f"{_os_message(folder, exc, 'could not prepare the replacement')}; nothing was "
                          "changed") from exc

    try:
        for entry in entries:
            final = folder / entry.final
            if entry.kind == "dir" and entry.backup:
                os.rename(final, folder / entry.backup)
            os.replace(folder / entry.temp, final)
        _fsync_dir(folder)
    except OSError as exc:
        try:
            _roll_back(folder, entries)
        except OSError as undo_exc:
            raise CommitError(
                f"{_os_message(folder, exc, 'could not put the new files in place')}; undoing that failed too "
                f"({undo_exc.strerror or undo_exc}): the previous files are kept as {BACKUP_PREFIX}* in {folder} "
                "and the next ovpass command on this folder restores them") from exc
        raise CommitError(f"{_os_message(folder, exc, 'could not put the new files in place')}; "
                          "the previous files were restored, nothing was changed") from exc
    _finish(folder, entries)


def _keep(final: Path, backup: Path) -> None:
    """Keep the file at ``final`` under ``backup``: a hard link, or a copy where links are not supported."""
    try:
        os.link(final, backup, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        shutil.copy2(final, backup, follow_symlinks=False)
        _fsync_tree(backup)


def _finish(folder: Path, entries: list[Entry]) -> None:
    """Every temporary is in place: the commit is complete once the journal is gone; then drop backups."""
    with contextlib.suppress(FileNotFoundError):
        (folder / JOURNAL_NAME).unlink()
    _fsync_dir(folder)
    for entry in entries:
        if entry.backup:
            _remove(folder / entry.backup)


def _roll_back(folder: Path, entries: list[Entry]) -> None:
    """Undo a commit. Every step can be interrupted and run again.

    First the replacements already made are undone (their temporaries no longer exist), then the
    temporaries still waiting are removed: while any of those exists, the journal reads as an
    unfinished commit and recovery undoes it, whatever state it records.
    """
    with contextlib.suppress(OSError):  # informative only: the order below is what keeps an undo safe
        _write_journal(folder, entries, "rolling-back")
    for entry in entries:
        temp, final = folder / entry.temp, folder / entry.final
        backup = folder / entry.backup if entry.backup else None
        if os.path.lexists(temp):
            continue
        if entry.kind == "dir":
            if os.path.lexists(final):
                os.rename(final, temp)           # back to its temporary name: removed below
            if backup is not None and os.path.lexists(backup):
                os.rename(backup, final)
        elif backup is not None:
            if os.path.lexists(backup):          # a missing backup was restored by an interrupted undo
                os.replace(backup, final)
        else:
            with contextlib.suppress(FileNotFoundError):
                final.unlink()                   # renamed where nothing was before
    for entry in entries:
        temp, final = folder / entry.temp, folder / entry.final
        backup = folder / entry.backup if entry.backup else None
        if backup is not None and os.path.lexists(backup):
            if entry.kind == "file" and os.path.lexists(final):
                backup.unlink()                  # the link to (or copy of) the file still in place
            elif not os.path.lexists(final):
                os.rename(backup, final)
        _remove(temp)
    _fsync_dir(folder)
    with contextlib.suppress(FileNotFoundError):
        (folder / JOURNAL_NAME).unlink()
    _fsync_dir(folder)


def _discard(folder: Path, entries: list[Entry]) -> None:
    for entry in entries:
        _remove(folder / entry.temp)
    with contextlib.suppress(FileNotFoundError):
        (folder / JOURNAL_NAME).unlink()


# ---------------------------------------------------------------------------------------------- recovery

def recover(folder: Path) -> list[str]:
    """Finish or undo an interrupted commit in ``folder`` and remove stale temporaries; call it locked.

    Returns (and logs as warnings) what it did, one sentence each.
    """
    folder = Path(folder)
    done: list[str] = []
    journal = folder / JOURNAL_NAME
    if journal.exists():
        try:
            data = json.loads(journal.read_text())
            if data.get("format") != JOURNAL_FORMAT:
                raise ValueError(f"unknown format {data.get('format')!r}")
            entries = [Entry(**e) for e in data["entries"]]
            state = data["state"]
        except (ValueError, KeyError, TypeError) as exc:
            raise CommitError(f"{journal}: the journal of an interrupted ovpass commit cannot be read ({exc}); "
                              f"nothing was changed. Check the files in {folder} (backups are {BACKUP_PREFIX}*) "
                              "and delete the journal by hand") from None
        names = ", ".join(e.final for e in entries)
        if state == "committing" and not any(os.path.lexists(folder / e.temp) for e in entries):
            _finish(folder, entries)
            done.append(f"{folder}: finished an interrupted ovpass commit: {names} are the new version")
        else:
            _roll_back(folder, entries)
            done.append(f"{folder}: undid an interrupted ovpass commit: {names} are as they were before it")
    stale = []
    for child in folder.iterdir():
        prefix = next((p for p in (TEMP_PREFIX, BACKUP_PREFIX) if child.name.startswith(p)), None)
        if prefix is not None:
            pid = _pid_in(child.name, prefix)
            if pid is not None and pid != os.getpid() and not _alive(pid):
                _remove(child)
                stale.append(child.name)
    if stale:
        done.append(f"{folder}: removed {len(stale)} leftover file(s) of interrupted ovpass runs "
                    f"({', '.join(sorted(stale)[:3])}{', ...' if len(stale) > 3 else ''})")
    for message in done:
        log.warning("%s", message)
    return done


# ---------------------------------------------------------------------------------------------- helpers

def _write_journal(folder: Path, entries: list[Entry], state: str) -> None:
    temp = folder / temp_name(".json")
    try:
        with open(temp, "w") as handle:
            json.dump({"format": JOURNAL_FORMAT, "pid": os.getpid(), "state": state,
                       "entries": [asdict(e) for e in entries]}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, folder / JOURNAL_NAME)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    _fsync_dir(folder)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _fsync_tree(path: Path) -> None:
    """Flush a file, or every file of a folder and the folders themselves, to the device."""
    paths = [path] if not path.is_dir() else [Path(root) / name for root, dirs, files in os.walk(path)
                                                 for name in files] + [Path(root) for root, _, _ in os.walk(path)]
    for item in paths:
        if item.is_symlink():
            continue
        fd = os.open(item, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory; the renames stand
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _os_message(folder: Path, exc: OSError, what: str) -> str:
    target = f" ({exc.filename})" if exc.filename else ""
    return f"{folder}: {what}{target}: {exc.strerror or exc}"
