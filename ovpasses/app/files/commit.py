"""Replacing files and folders as one artefact: a lock, a journal of identities, kernel swaps.

An IR is two files (``.xml`` and ``.bin``) and an export is a folder; a reader must find either the
old artefact whole or the new one whole, never one file of each. :func:`replace_all` puts a set of
prepared temporaries in place in one folder:

1. Take the folder's lock (``.ovpass.lock``, through :mod:`filelock`) and finish or undo whatever an
   interrupted run left there (:func:`recover`): writers of one folder are serialised, and readers
   (:func:`reading`) wait for a commit to end.
2. Record each entry's identities: the device, inode and (for a file) size of the new artefact and
   of the one it replaces, if any.
3. From here to the end SIGINT, SIGTERM and SIGHUP wait (:func:`ovpasses.app.files.signals.deferred`). Write
   the journal ``.ovpass-journal.json`` (temporary name, fsync, rename).
4. Put each entry in place: ``renameat2(RENAME_EXCHANGE)`` swaps the new artefact with the one it
   replaces in one step, ``renameat2(RENAME_NOREPLACE)`` creates a new name and fails if another
   process created it meanwhile. Where the filesystem has no ``renameat2`` (it answers EINVAL),
   the old artefact is first kept under a backup name (a hard link for a file, else a rename) and
   the new one renamed into place; a new name is then a hard link (a file) or a rename after a
   check (a folder: the one case where another process can slip in between).
5. Delete the journal (the commit is complete), then the old artefacts.

A failure in step 4 undoes the entries already in place and raises. A process killed in steps 3-5
leaves the journal, and the next ovpass command that locks the folder decides, for each entry, from
the identities it finds under the entry's names (never from a name being missing): the commit is
finished when every final name holds its new artefact, undone when some still holds its old one,
and left alone, with one line saying what was found, when a name holds neither. Nothing the journal
names is deleted while the journal exists, and every step of the recovery can be interrupted and
run again.

What a reader outside ovpass can see: each rename is atomic, but two files cannot be renamed at once,
so between the renames of one commit (microseconds, no I/O between them) a reader that opens the
``.xml`` before and the ``.bin`` after can pair the old ``.xml`` with the new ``.bin``. ovpass's own
readers take the lock and never do.

Temporary files are named ``.ovpass-tmp-<pid>-<token>``: those of processes that no longer exist
are removed by the next run that locks the folder, once no journal names them.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

from filelock import FileLock, Timeout

from ovpasses.app.files import journal, signals
from ovpasses.app.files.fsops import (
    RENAME_EXCHANGE,
    RENAME_NOREPLACE,
    fsync_dir,
    fsync_tree,
    hard_link,
    os_message,
    remove,
    renameat2,
)
from ovpasses.app.files.names import (  # noqa: F401 - part of this API
    BACKUP_PREFIX, LOCK_NAME, TEMP_PREFIX, _alive, _pid_in, is_own_name, temp_name)
from ovpasses.app.files.journal import JOURNAL_FORMAT, JOURNAL_NAME, Entry, Identity  # noqa: F401 - part of this API
from ovpasses.errors import OutputError

log = logging.getLogger(__name__)

LOCK_TIMEOUT_S = 120.0
#: how often a process waiting for a lock tries it again (filelock's default; a test of the race sets it lower)
LOCK_POLL_S = 0.05

#: the final names this process has committed (so a message after an interruption can say so)
COMMITTED: list[Path] = []


class CommitError(OutputError):
    """Files could not be put in place; the message says what was kept and what to do."""


class TargetCreatedError(CommitError):
    """A name the commit was to create was created by another process after the commit checked it."""


# ---------------------------------------------------------------------------------------------- lock

_held: dict[Path, int] = {}   # folders whose lock this process holds, and how often it took each


@contextlib.contextmanager
def folder_lock(folder: Path, *, write: bool = True) -> Iterator[bool]:
    """Hold ``folder``'s lock and recover what an interrupted run left there; yields whether it is held.

    A reader (``write=False``) of a folder it cannot write reads without the lock (no ovpass process
    of this user can commit there either), unless an interrupted commit is pending there, which it
    cannot undo: then it raises. A lock this process already holds is taken again at no cost. The
    lock file is deleted before the lock is released (filelock re-checks that the file it locked
    still has a name, so this is race-free).
    """
    folder = Path(os.path.abspath(folder))
    if folder in _held:
        _held[folder] += 1
        try:
            yield True
        finally:
            _held[folder] -= 1
        return
    lock_path = folder / LOCK_NAME
    if not write and not os.access(folder, os.W_OK | os.X_OK):
        _refuse_pending(folder)
        yield False
        return
    lock = FileLock(lock_path, timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire(poll_interval=LOCK_POLL_S)
    except Timeout:
        raise CommitError(f"{folder}: another ovpass process has held {LOCK_NAME} for {LOCK_TIMEOUT_S:.0f} s; "
                          "wait for it to finish and run again") from None
    except PermissionError:
        if write:
            raise CommitError(f"{folder}: cannot create the lock file {LOCK_NAME} (permission denied); "
                              "check the folder's permissions") from None
        _refuse_pending(folder)   # another user's lock in a shared folder: read as one who cannot write
        yield False
        return
    except OSError as exc:
        raise CommitError(f"{folder}: cannot create the lock file {LOCK_NAME} ({exc.strerror or exc}); "
                          "check the folder's permissions") from None
    _held[folder] = 1
    try:
        recover(folder)
        yield True
    finally:
        del _held[folder]
        with contextlib.suppress(OSError):
            lock_path.unlink()
        lock.release()


def _refuse_pending(folder: Path) -> None:
    # os.path.lexists is False where the folder cannot be searched: the reader then says why
    if os.path.lexists(folder / JOURNAL_NAME):
        raise CommitError(f"{folder}: an interrupted ovpass commit is pending here and this user cannot "
                          "write the folder to finish it; run any ovpass command on it as a user who can")


@contextlib.contextmanager
def reading(folder: Path) -> Iterator[None]:
    """Hold every lock a writer of ``folder``'s files takes: the folder's own, where a file is
    committed, and its parent's, where the folder itself is committed whole (an export folder); and
    so finish or undo what an interrupted commit left in either. Readers take them in that order."""
    folder = Path(os.path.abspath(folder))
    with contextlib.ExitStack() as stack:
        for each in (folder.parent, folder):
            if os.path.isdir(each):   # False for a folder that cannot be reached: the reader says why
                stack.enter_context(folder_lock(each, write=False))
        yield


def settle(path: Path) -> None:
    """Finish or undo any interrupted commit that concerns ``path`` (an IR file or a folder): one of the
    files beside it, or of the folder it is in, or of the folder itself, or of the files in it."""
    path = Path(os.path.abspath(path))
    with reading(path.parent):
        pass
    if os.path.isdir(path):   # decided after the recovery above, which may have put the folder back
        with folder_lock(path, write=False):
            pass


# ---------------------------------------------------------------------------------------------- commit

def replace_all(folder: Path, replacements: Sequence[tuple[Path, Path]],
                expected: dict[Path, Identity | None] | None = None) -> None:
    """Put each prepared ``temp`` in place of its ``final``, all or none.

    Each ``temp`` is in ``folder`` or below it; each ``final`` is directly in ``folder``. Call it
    holding :func:`folder_lock`. Temporaries are fsynced before anything is replaced. On failure the
    finals are as they were and the temporaries are removed. ``expected`` gives, for some finals,
    what the caller found there when it checked (None: nothing): a final that another process
    created or replaced since raises :class:`TargetCreatedError` and is left as it is.
    """
    folder = Path(folder)
    entries: list[Entry] = []
    try:
        for index, (temp, final) in enumerate(replacements):
            temp, final = Path(temp), Path(final)
            if final.parent != folder or folder not in temp.parents:
                raise ValueError(f"replace_all: {final} must be in {folder}, and {temp} in it or below it")
            new = Identity.of(temp)
            if new is None:
                raise ValueError(f"replace_all: {temp} does not exist")
            fsync_tree(temp)
            entries.append(Entry(str(temp.relative_to(folder)), final.name, "dir" if temp.is_dir() else "file",
                                 new, Identity.of(final), f"{BACKUP_PREFIX}{os.getpid()}-{index}"))
    except OSError as exc:
        _discard(folder, entries)
        raise CommitError(f"{os_message(folder, exc, 'could not prepare the replacement')}; nothing was "
                          "changed") from exc
    for entry in entries:
        checked = (expected or {}).get(folder / entry.final, entry.old)
        if entry.old != checked:
            _discard(folder, entries)
            raise TargetCreatedError(f"{folder / entry.final} was {'created' if checked is None else 'replaced'} "
                                     "by another process after ovpass checked it; it is left as it is, and nothing "
                                     "was written")

    with signals.deferred():
        try:
            _write_journal(folder, entries)
        except OSError as exc:
            _discard(folder, entries)
            raise CommitError(f"{os_message(folder, exc, 'could not write the journal')}; nothing was "
                              "changed") from exc
        try:
            for entry in entries:
                _put_in_place(folder, entry)
            fsync_dir(folder)
        except OSError as exc:
            _fail(folder, entries, exc)
        _forget(folder, entries)
        COMMITTED.extend(folder / entry.final for entry in entries)


def _fail(folder: Path, entries: list[Entry], exc: OSError) -> None:
    """Undo a commit whose step 4 failed, and raise the error that says so."""
    created = isinstance(exc, FileExistsError)
    what = (f"{exc.filename} was created or replaced by another process after ovpass checked it; it is left "
            "as it is"
            if created else os_message(folder, exc, "could not put the new files in place"))
    try:
        _undo(folder, entries)
    except (OSError, CommitError) as undo_exc:
        raise CommitError(f"{what}; undoing the commit failed too ({getattr(undo_exc, 'strerror', None) or undo_exc})"
                          f": the next ovpass command on {folder} finishes the undo") from exc
    if created:
        raise TargetCreatedError(f"{what}, and nothing was written") from exc
    raise CommitError(f"{what}; the previous files were restored, nothing was changed") from exc


def _put_in_place(folder: Path, entry: Entry) -> None:
    temp, final, backup = folder / entry.temp, folder / entry.final, folder / entry.backup
    if entry.old is None:
        if renameat2(temp, final, RENAME_NOREPLACE):
            return
        if entry.kind == "file":
            os.link(temp, final)      # fails with EEXIST, as RENAME_NOREPLACE does; temp is removed at the end
        elif os.path.lexists(final):
            raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(final))
        else:
            os.rename(temp, final)
        return
    if Identity.of(final) != entry.old:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(final))
    if (entry.kind == "dir") != (entry.old.size is None):   # as rename(2): a folder only by a folder
        raise IsADirectoryError(errno.EISDIR, "a folder and a file cannot replace each other", str(final))
    if renameat2(temp, final, RENAME_EXCHANGE):
        return
    if entry.kind == "file" and hard_link(final, backup):
        os.replace(temp, final)
    else:
        os.rename(final, backup)
        os.rename(temp, final)


# ---------------------------------------------------------------------------------------------- states

DONE, NOT_DONE = "done", "not done"


def _state(folder: Path, entry: Entry) -> str:
    """Whether ``entry``'s final name holds its new artefact (DONE) or its old one (NOT_DONE), from
    identities; :class:`CommitError` when it holds something else, which nothing here may touch."""
    at_final = Identity.of(folder / entry.final)
    if at_final == entry.new:
        return DONE
    if at_final == entry.old:   # the old artefact, or (old None) still nothing
        return NOT_DONE
    if at_final is None and Identity.of(folder / entry.backup) == entry.old:
        return NOT_DONE         # between the two renames of a filesystem without RENAME_EXCHANGE
    found = "nothing" if at_final is None else f"another file (inode {at_final.ino})"
    raise CommitError(
        f"{folder}: an interrupted ovpass commit cannot be finished or undone safely: {entry.final} holds "
        f"{found}, neither the version it had nor the one being written; nothing was changed. Keep the "
        f"version you want ({TEMP_PREFIX}* and {BACKUP_PREFIX}* hold the others, {JOURNAL_NAME} lists them) "
        "and delete the journal")


def _undo(folder: Path, entries: list[Entry]) -> None:
    """Give every final name its old artefact back, then forget the commit. Safe to interrupt and rerun."""
    states = [_state(folder, entry) for entry in entries]   # first prove every state, then touch anything
    for entry, state in reversed(list(zip(entries, states))):
        temp, final, backup = folder / entry.temp, folder / entry.final, folder / entry.backup
        if state == DONE:
            if entry.old is None:
                if Identity.of(temp) == entry.new:
                    final.unlink()                       # a hard link made where nothing was
                else:
                    os.rename(final, temp)
            elif Identity.of(temp) == entry.old:
                if not renameat2(temp, final, RENAME_EXCHANGE):
                    raise OSError(errno.EINVAL, "the filesystem no longer exchanges names", str(final))
            elif Identity.of(backup) == entry.old:
                if entry.kind == "file":
                    os.replace(backup, final)
                else:
                    os.rename(final, temp)
            else:
                raise CommitError(f"{folder}: an interrupted ovpass commit cannot be undone safely: the "
                                  f"previous {entry.final} is under none of the names the journal gives; "
                                  "nothing more was changed")
        if entry.old is not None and Identity.of(final) is None and Identity.of(backup) == entry.old:
            os.rename(backup, final)
    _forget(folder, entries)


def _forget(folder: Path, entries: list[Entry]) -> None:
    """Delete the journal, then the entries' temporary and backup names: once every final name holds
    the version that won (the old one after an undo, the new one after a finish), they hold the other."""
    fsync_dir(folder)
    with contextlib.suppress(FileNotFoundError):
        (folder / JOURNAL_NAME).unlink()
    fsync_dir(folder)
    for entry in entries:
        for name in (entry.temp, entry.backup):
            path = folder / name
            if Identity.of(path) is not None:
                remove(path)
    for top in {Path(entry.temp).parts[0] for entry in entries if len(Path(entry.temp).parts) > 1}:
        remove(folder / top)   # the staging folder that held the entries' temporaries


def _discard(folder: Path, entries: list[Entry]) -> None:
    for entry in entries:
        remove(folder / entry.temp)


# ---------------------------------------------------------------------------------------------- recovery

def recover(folder: Path) -> list[str]:
    """Finish or undo an interrupted commit in ``folder`` and remove stale temporaries; call it locked.

    Returns (and logs as warnings) what it did, one sentence each.
    """
    folder = Path(folder)
    done: list[str] = []
    if os.path.lexists(folder / JOURNAL_NAME):
        try:
            entries = journal.read(folder)
        except (ValueError, KeyError, TypeError) as exc:
            raise CommitError(f"{folder / JOURNAL_NAME}: the journal of an interrupted ovpass commit cannot be read ({exc}); "
                              f"nothing was changed. Check the files in {folder} (the previous versions are "
                              f"{BACKUP_PREFIX}* or {TEMP_PREFIX}*) and delete the journal by hand") from None
        names = ", ".join(e.final for e in entries)
        if all(_state(folder, entry) == DONE for entry in entries):
            _forget(folder, entries)
            done.append(f"{folder}: finished an interrupted ovpass commit: {names} are the new version")
        else:
            _undo(folder, entries)
            done.append(f"{folder}: undid an interrupted ovpass commit: {names} are as they were before it")
    stale = []
    for child in folder.iterdir():
        prefix = next((p for p in (TEMP_PREFIX, BACKUP_PREFIX) if child.name.startswith(p)), None)
        if prefix is not None:
            pid = _pid_in(child.name, prefix)
            if pid is not None and pid != os.getpid() and not _alive(pid):
                remove(child)
                stale.append(child.name)
    if stale:
        done.append(f"{folder}: removed {len(stale)} leftover file(s) of interrupted ovpass runs "
                    f"({', '.join(sorted(stale)[:3])}{', ...' if len(stale) > 3 else ''})")
    for message in done:
        log.warning("%s", message)
    return done


# ---------------------------------------------------------------------------------------------- helpers

def _write_journal(folder: Path, entries: list[Entry]) -> None:
    journal.write(folder, entries, folder / temp_name(".json"))
