"""Why a path or an IR cannot be read, said in one line that names the file and what to do: the errors
(:class:`IRReadError`, :class:`NotAnIRError`), the IR version, the ``.bin`` beside the ``.xml``, names too long for
the filesystem, folders that cannot be entered, operations the installed OpenVINO does not know. Used by
:mod:`ovpasses.app.files.io`, which reads and writes the IRs.
"""

from __future__ import annotations

import contextlib
import os
import re
from pathlib import Path

from ovpasses.errors import InputError, OvpassesError
from ovpasses.features.old_runtimes.analysis import UnknownToInstalled
from ovpasses.plan.runtimes import IR_VERSIONS_READ, installed_version, ir_versions_known, version_string


def weights_path(xml_path: str | os.PathLike) -> Path:
    """The ``.bin`` OpenVINO reads next to ``xml_path``."""
    return Path(xml_path).with_suffix(".bin")


class IRReadError(InputError):
    """The file is missing, is not an OpenVINO IR, or its ``.xml``/``.bin`` pair is damaged."""


class NotAnIRError(IRReadError):
    """The file is XML, but not an OpenVINO IR (its root element is not ``<net>``)."""


def unknown_operations(unknown: UnknownToInstalled) -> str:
    """Why the installed OpenVINO cannot read an IR (operation versions it does not know), with the way to an
    IR it reads: ``ovpass rewrite --runtime INSTALLED`` under a release that reads the file."""
    path, shown = unknown.path, version_string(unknown.installed)
    ops = ", ".join(f"{t} ({v})" for t, v in unknown.ops)
    if any(first is None for first in unknown.first_readers):
        return (f"{path} holds {ops}, which openvino {shown} cannot read, and no release ovpasses has measured "
                "reads; run it on the runtime that exported it")
    newest = version_string(max(unknown.first_readers))
    return (f"{path} holds {ops}, which openvino {shown} cannot read ({newest} is the first release that reads "
            f"{'them' if len(unknown.ops) > 1 else 'it'}); under openvino {newest} or newer, 'ovpass rewrite "
            f"{path.parent} -o NEW_FOLDER --runtime {version_string(unknown.installed[:2])}' prepares a copy that "
            f"{shown} reads (docs/guides/default-rewrite.md)")


def last_line(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    meaningful = [ln for ln in lines if not re.match(r"(Exception from|Check ')", ln)]
    return (meaningful or lines or ["unknown error"])[-1]


# ------------------------------------------------------------------ reading: why a path or an IR cannot be read

def check_ir_version(path: Path, version: str | None) -> None:
    """Refuse an IR version the installed OpenVINO does not read (measured: see ovpasses.plan.runtimes)."""
    try:
        installed = installed_version()
    except OvpassesError:   # a local build's version string: OpenVINO itself will judge the file
        return
    reads = " and ".join(map(str, IR_VERSIONS_READ))
    what = f"the installed openvino {version_string(installed)} reads IR versions {reads}"
    if version is None:
        raise IRReadError(f"{path}: <net> has no version attribute; {what}: export the IR again with OpenVINO "
                          "(ovc or openvino.save_model)")
    if not version.strip().isdigit():
        raise IRReadError(f"{path}: <net version=\"{version}\"> is not an IR version number; {what}: the file is "
                          "damaged or not written by OpenVINO, export the IR again")
    number = int(version)
    if number in IR_VERSIONS_READ or not ir_versions_known(installed):
        return
    if number > max(IR_VERSIONS_READ):
        raise IRReadError(f"{path}: IR version {number} is newer than this openvino reads: {what}; upgrade "
                          "openvino, or export the IR with this one")
    raise IRReadError(f"{path}: IR version {number} is too old: {what}; convert the original model again with "
                      "this openvino (ovc or openvino.save_model)")


def check_weights_file(path: Path) -> None:
    """The ``.bin`` beside ``path`` may be absent (OpenVINO decides whether the IR needs one, and
    :func:`_explain_read_error` words its error); if present it must be a file this process can read."""
    weights = weights_path(path)
    what = f"the weights file of {path.name}"
    if not os.path.lexists(weights):
        return
    check_reachable(weights, f"{what} must be readable beside it")
    if weights.is_dir():
        raise IRReadError(f"{weights}: {what} is a folder, not a file; move the folder away and put the IR's "
                          ".bin in its place")
    if not weights.is_file():
        raise IRReadError(f"{weights}: {what} is not a regular file; put the IR's .bin in its place")
    try:
        with open(weights, "rb"):
            pass
    except OSError as exc:
        raise IRReadError(f"{weights}: {what} cannot be read ({exc.strerror}); check its permissions") from None


def check_lengths(path: Path, error: type[OvpassesError] = IRReadError) -> None:
    """Raise ``error`` when a name in ``path`` or the whole path is longer than the system allows."""
    shown = shown_path(path)
    name_max = pathconf(path, "PC_NAME_MAX", 255)
    long_name = next((part for part in path.parts if len(os.fsencode(part)) > name_max), None)
    if long_name is not None:
        raise error(f"{shown}: the name {shown_path(Path(long_name), 40)} is {len(os.fsencode(long_name))} bytes, "
                    f"longer than the {name_max} bytes the filesystem allows for one name; choose a shorter one")
    path_max = pathconf(path, "PC_PATH_MAX", 4096)
    if len(os.fsencode(str(path))) >= path_max:
        raise error(f"{shown}: the path is {len(os.fsencode(str(path)))} bytes, longer than the "
                    f"{path_max - 1} bytes the system allows; use a shorter path, or a shorter relative path")


def check_reachable(path: Path, todo: str, error: type[OvpassesError] = IRReadError) -> None:
    """Raise ``error`` with one line naming why ``path`` cannot be reached (a name or a path longer
    than the system allows, a missing folder or file, a file where a folder should be, a folder this
    user cannot search), followed by ``todo``."""
    shown = shown_path(path)
    check_lengths(path, error)
    try:
        os.stat(path)
    except FileNotFoundError:
        missing = next((f for f in ancestors(path) if not os.path.lexists(f)), None)
        where = f" (the folder {shown_path(missing)} does not exist)" if missing is not None else ""
        raise error(f"{shown}: no such file or folder{where}; {todo}") from None
    except NotADirectoryError:
        blocker = next((f for f in ancestors(path) if os.path.lexists(f) and not os.path.isdir(f)), path.parent)
        raise error(f"{shown}: {shown_path(blocker)} is a file, not a folder; {todo}") from None
    except PermissionError:
        start = [] if path.is_absolute() else [Path.cwd()]   # a relative path is searched from there
        folder = next((f for f in start + ancestors(path) if not os.access(f, os.X_OK)), None)
        if folder is None:
            raise error(f"{shown}: permission denied; check the permissions of its folders") from None
        raise error(f"{shown}: no permission to enter the folder {shown_path(folder)}; ask for search (x) "
                    f"permission on it, or {todo}") from None
    except OSError as exc:   # a loop of symbolic links, an I/O error: the system's words
        raise error(f"{shown}: cannot be reached ({exc.strerror or exc}); {todo}") from None


def ancestors(path: Path) -> list[Path]:
    """The folders named on the way to ``path``, outermost first (``a``, ``a/b`` for ``a/b/c``)."""
    return [folder for folder in reversed(path.parents) if folder != Path(".")]


def pathconf(path: Path, name: str, default: int) -> int:
    """``os.pathconf`` of the innermost existing folder on the way to ``path``."""
    for folder in [*reversed(ancestors(path)), Path(".")]:
        with contextlib.suppress(OSError, ValueError):
            return os.pathconf(folder, name)
    return default


def shown_path(path: Path, width: int = 120) -> str:
    """``path`` for a one-line message: shortened in the middle when longer than ``width`` characters."""
    text = str(path)
    if len(text) <= width:
        return text
    half = (width - 1) // 2
    return f"{text[:half]}…{text[-half:]}"
