"""Filesystem operations the commit is built from: renameat2 (exchange, no-replace), hard links where the
filesystem has them, removal, fsync of files, trees and folders, and the message of an OSError."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import shutil
from pathlib import Path

AT_FDCWD = -100
RENAME_NOREPLACE = 1
RENAME_EXCHANGE = 2
try:   # glibc 2.28+ and musl name it; elsewhere (macOS, Windows) the journalled fallback runs
    _renameat2_fn = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
except (OSError, TypeError):
    _renameat2_fn = None


def renameat2(source: Path, target: Path, flags: int) -> bool:
    """``renameat2(source, target, flags)``; False where the system or the filesystem does not support
    ``flags`` (nothing was renamed then), :class:`OSError` for any other failure."""
    if _renameat2_fn is None:
        return False
    if _renameat2_fn(AT_FDCWD, os.fsencode(source), AT_FDCWD, os.fsencode(target), flags) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(code, os.strerror(code), str(source), None, str(target))


def hard_link(source: Path, link: Path) -> bool:
    try:
        os.link(source, link, follow_symlinks=False)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.EXDEV, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        return False
    return True


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def fsync_tree(path: Path) -> None:
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


def fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):  # some filesystems cannot fsync a directory; the renames stand
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def os_message(folder: Path, exc: OSError, what: str) -> str:
    target = f" ({exc.filename})" if exc.filename else ""
    return f"{folder}: {what}{target}: {exc.strerror or exc}"
