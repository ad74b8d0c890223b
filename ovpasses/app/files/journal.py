"""The journal of a commit (:mod:`ovpasses.app.files.commit`): what replaces what, with the identity of each
file or folder, so that recovery decides from evidence what an interrupted commit did.

``.ovpass-journal.json`` holds ``{"format": "ovpass.journal/2", "pid": ..., "entries": [...]}``; each entry
names a temporary, the final name it goes to, its kind, the identities (device, inode, size) of the
new artefact and of the one it replaces, and the backup name a filesystem without ``RENAME_EXCHANGE``
uses. It is written to a temporary name, fsynced and renamed into place.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from ovpasses.app.files.fsops import fsync_dir

JOURNAL_NAME = ".ovpass-journal.json"
JOURNAL_FORMAT = "ovpass.journal/2"


@dataclass(frozen=True)
class Identity:
    """What names one file or folder for as long as it exists: its device and inode, and a file's size."""

    dev: int
    ino: int
    size: int | None = None

    @classmethod
    def of(cls, path: Path) -> Identity | None:
        """The identity of what ``path`` names (a symbolic link itself, not its target); None if nothing."""
        try:
            st = os.lstat(path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return cls(st.st_dev, st.st_ino, None if stat.S_ISDIR(st.st_mode) else st.st_size)

    def to_list(self) -> list:
        return [self.dev, self.ino, self.size]


@dataclass
class Entry:
    """One replacement: ``temp`` becomes ``final`` (paths relative to the committed folder)."""

    temp: str
    final: str
    kind: str                    # "file" or "dir"
    new: Identity                # the prepared artefact, under ``temp`` until it is put in place
    old: Identity | None         # what ``final`` named when the commit began; None: a new name
    backup: str                  # where ``old`` is kept on a filesystem that cannot exchange names

    def to_dict(self) -> dict:
        return {"temp": self.temp, "final": self.final, "kind": self.kind, "new": self.new.to_list(),
                "old": None if self.old is None else self.old.to_list(), "backup": self.backup}

    @classmethod
    def from_dict(cls, data: dict) -> Entry:
        return cls(data["temp"], data["final"], data["kind"], Identity(*data["new"]),
                   None if data["old"] is None else Identity(*data["old"]), data["backup"])


def write(folder: Path, entries: list[Entry], temp: Path) -> None:
    """Write the journal of ``entries`` into ``folder`` through ``temp`` (fsync, rename, fsync the folder)."""
    try:
        with open(temp, "w") as handle:
            json.dump({"format": JOURNAL_FORMAT, "pid": os.getpid(),
                       "entries": [e.to_dict() for e in entries]}, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temp, folder / JOURNAL_NAME)
    finally:
        with contextlib.suppress(FileNotFoundError):
            temp.unlink()
    fsync_dir(folder)


def read(folder: Path) -> list[Entry]:
    """The entries of ``folder``'s journal; ValueError, KeyError or TypeError when it cannot be read."""
    data = json.loads((folder / JOURNAL_NAME).read_text())
    if data.get("format") != JOURNAL_FORMAT:
        raise ValueError(f"unknown format {data.get('format')!r}")
    return [Entry.from_dict(e) for e in data["entries"]]
