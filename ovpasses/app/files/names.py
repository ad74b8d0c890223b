"""The names of ovpass's own files in a folder it writes: its lock, its temporary and backup files (which record
the process that made them, so that stale ones can be removed) and its journal's. :mod:`ovpasses.app.files.commit`
uses them; the folder flows skip them.
"""

from __future__ import annotations

import os
import secrets

from ovpasses.app.files.journal import JOURNAL_NAME

LOCK_NAME = ".ovpass.lock"
TEMP_PREFIX = ".ovpass-tmp-"
BACKUP_PREFIX = ".ovpass-backup-"


def temp_name(suffix: str = "") -> str:
    """A name for a temporary file or folder that records this process, so stale ones can be removed."""
    return f"{TEMP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}{suffix}"


def is_own_name(name: str) -> bool:
    """Whether ``name`` is one of ovpass's lock, journal, temporary or backup files."""
    return name in (LOCK_NAME, JOURNAL_NAME) or name.startswith((TEMP_PREFIX, BACKUP_PREFIX))


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
