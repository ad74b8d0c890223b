"""Reading and writing OpenVINO IR files (``.xml`` + ``.bin``) safely.

* :func:`read_ir` checks that the file is an IR before OpenVINO sees it (other frontends that try a
  file that is not an IR print noise of their own) and turns OpenVINO's reader errors into
  :class:`IRReadError` messages that say what is wrong and what to do.
* :func:`write_ir` writes to temporary names in the target folder and renames both files into place:
  a failure never leaves a partial IR, and writing over the IR the model was read from is safe
  (``read_model`` memory-maps the ``.bin``; overwriting that file in place would crash the reader).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import openvino as ov

from ovpasses.errors import OvpassesError
from ovpasses.runtimes import IR_VERSIONS_READ, installed_version, ir_versions_known, version_string

log = logging.getLogger(__name__)

TEMP_PREFIX = ".ovpass-tmp-"


class IRReadError(OvpassesError):
    """The file is missing, is not an OpenVINO IR, or its ``.xml``/``.bin`` pair is damaged."""


class IRWriteError(OvpassesError):
    """The IR could not be written where it was asked to go."""


def weights_path(xml_path: str | os.PathLike) -> Path:
    """The ``.bin`` OpenVINO reads next to ``xml_path``."""
    return Path(xml_path).with_suffix(".bin")


def same_ir(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two ``.xml`` paths name the same IR (same file, or the same path once resolved)."""
    a, b = Path(a), Path(b)
    with contextlib.suppress(OSError):
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def check_ir_file(path: str | os.PathLike) -> Path:
    """Raise :class:`IRReadError` unless ``path`` is a readable IR ``.xml`` that OpenVINO can read.

    Checks, before OpenVINO sees the file (its other frontends print noise of their own on a file the
    IR frontend refuses): that the path can be reached and is a file, that its XML root element is
    ``<net>`` with a ``version`` the installed OpenVINO reads (:data:`ovpasses.runtimes.IR_VERSIONS_READ`),
    and that the ``.bin`` beside it, if there is one, is a readable file. Reads only up to the root
    element, so it is cheap for large IRs.
    """
    path = Path(path)
    _check_reachable(path, "give the path of an OpenVINO IR .xml file")
    if not path.is_file():
        raise IRReadError(f"{_shown(path)}: not a file; give the path of an OpenVINO IR .xml file")
    try:
        with open(path, "rb") as handle:
            for _event, element in ET.iterparse(handle, events=("start",)):
                root, version = element.tag, element.get("version")
                break
            else:
                root = version = None
    except ET.ParseError as exc:
        if path.stat().st_size == 0:
            raise IRReadError(f"{path}: the file is empty; give the path of an OpenVINO IR .xml file") from None
        if _is_truncation(exc):
            raise IRReadError(f"{path}: the XML ends early ({exc}); the file is truncated, copy or export "
                              "it again") from None
        raise IRReadError(f"{path}: not an XML file ({exc}); give the path of an OpenVINO IR .xml file") from None
    except OSError as exc:
        raise IRReadError(f"{path}: cannot be read ({exc.strerror}); check its permissions") from None
    if root != "net":
        raise IRReadError(f"{path}: XML, but not an OpenVINO IR (root element <{root}>, expected <net>); "
                          "give the path of an IR .xml file written by OpenVINO")
    _check_ir_version(path, version)
    _check_weights_file(path)
    return path


def read_ir(path: str | os.PathLike, core: ov.Core | None = None) -> ov.Model:
    """Read the IR at ``path`` (and the ``.bin`` next to it) or raise :class:`IRReadError`."""
    path = check_ir_file(path)
    core = core or ov.Core()
    try:
        return core.read_model(str(path))
    except RuntimeError as exc:
        raise IRReadError(_explain_read_error(path, str(exc))) from exc


def check_output_path(path: str | os.PathLike) -> Path:
    """Raise :class:`IRWriteError` unless ``path`` is an ``.xml`` path in an existing, writable folder."""
    path = Path(path)
    if path.suffix.lower() != ".xml":
        raise IRWriteError(f"{path}: the output must be an .xml path (its weights go to the .bin beside it)")
    folder = path.parent
    if not folder.is_dir():
        raise IRWriteError(f"{path}: the folder {folder} does not exist; create it first")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise IRWriteError(f"{path}: the folder {folder} is not writable; choose another output path")
    if path.is_dir() or weights_path(path).is_dir():
        raise IRWriteError(f"{path}: a folder has that name; choose another output path")
    return path


def write_ir(model: ov.Model, path: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` (``.xml``) and the ``.bin`` next to it, atomically per file.

    Weights keep their element types (no fp16 compression). Both files are first written to
    temporary names in the target folder, then renamed over the targets, the ``.bin`` first. On any
    failure the temporary files are removed and the targets are left as they were.
    """
    path = check_output_path(path)
    folder = path.parent
    fd, tmp_name = tempfile.mkstemp(prefix=TEMP_PREFIX, suffix=".xml", dir=folder)
    os.close(fd)
    tmp_xml = Path(tmp_name)
    tmp_bin = weights_path(tmp_xml)
    try:
        ov.save_model(model, str(tmp_xml), compress_to_fp16=False)
        if not tmp_bin.exists():  # a model without constants gets no .bin from save_model
            tmp_bin.touch()
        for tmp, final in ((tmp_xml, path), (tmp_bin, weights_path(path))):
            os.chmod(tmp, _file_mode(final))
        os.replace(tmp_bin, weights_path(path))
        os.replace(tmp_xml, path)
    except OSError as exc:
        raise IRWriteError(f"{path}: cannot be written ({exc.strerror or exc}); check the folder's "
                           "permissions and free space") from exc
    except RuntimeError as exc:
        raise IRWriteError(f"{path}: OpenVINO could not serialize the model: {_last_line(str(exc))}") from exc
    finally:
        for leftover in (tmp_xml, tmp_bin):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _file_mode(path: Path) -> int:
    """The permission bits a file written to ``path`` gets: those of the file it replaces, else 0o666 - umask."""
    with contextlib.suppress(FileNotFoundError):
        return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _is_truncation(exc: ET.ParseError) -> bool:
    return "no element found" in str(exc) or "unclosed token" in str(exc)


def _explain_read_error(path: Path, message: str) -> str:
    weights = weights_path(path)
    if "bin file cannot be found" in message or not weights.exists() and "weights" in message.lower():
        return (f"{path}: its weights file {weights.name} is missing; keep the .bin beside the .xml with the same "
                "name")
    if "Incorrect weights in bin file" in message:
        return (f"{path}: its weights file {weights.name} is shorter than the XML expects (truncated, or from "
                "another export); copy or export the .xml/.bin pair again")
    if "pugi" in message or "Error parsing" in message:
        return f"{path}: malformed IR XML ({_last_line(message)}); the file is damaged, export it again"
    return f"{path}: OpenVINO cannot read this IR: {_last_line(message)}"


def _last_line(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    meaningful = [ln for ln in lines if not re.match(r"(Exception from|Check ')", ln)]
    return (meaningful or lines or ["unknown error"])[-1]


# ------------------------------------------------------------------ reading: why a path or an IR cannot be read

def _check_ir_version(path: Path, version: str | None) -> None:
    """Refuse an IR version the installed OpenVINO does not read (measured: see ovpasses.runtimes)."""
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


def _check_weights_file(path: Path) -> None:
    """The ``.bin`` beside ``path`` may be absent (OpenVINO decides whether the IR needs one, and
    :func:`_explain_read_error` words its error); if present it must be a file this process can read."""
    weights = weights_path(path)
    what = f"the weights file of {path.name}"
    if not os.path.lexists(weights):
        return
    _check_reachable(weights, f"{what} must be readable beside it")
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


def _check_reachable(path: Path, todo: str) -> None:
    """Raise :class:`IRReadError` with one line naming why ``path`` cannot be reached (a name or a path
    longer than the system allows, a missing folder or file, a file where a folder should be, a folder
    this user cannot search), followed by ``todo``."""
    shown = _shown(path)
    name_max = _pathconf(path, "PC_NAME_MAX", 255)
    long_name = next((part for part in path.parts if len(os.fsencode(part)) > name_max), None)
    if long_name is not None:
        raise IRReadError(f"{shown}: the name {_shown(Path(long_name), 40)} is {len(os.fsencode(long_name))} bytes, "
                          f"longer than the {name_max} bytes the filesystem allows for one name; rename it")
    path_max = _pathconf(path, "PC_PATH_MAX", 4096)
    if len(os.fsencode(str(path))) >= path_max:
        raise IRReadError(f"{shown}: the path is {len(os.fsencode(str(path)))} bytes, longer than the "
                          f"{path_max - 1} bytes the system allows; move the IR to a shorter path, or give a "
                          "shorter relative path")
    try:
        os.stat(path)
    except FileNotFoundError:
        missing = next((f for f in _ancestors(path) if not os.path.lexists(f)), None)
        where = f" (the folder {_shown(missing)} does not exist)" if missing is not None else ""
        raise IRReadError(f"{shown}: no such file{where}; {todo}") from None
    except NotADirectoryError:
        blocker = next((f for f in _ancestors(path) if os.path.lexists(f) and not os.path.isdir(f)), path.parent)
        raise IRReadError(f"{shown}: {_shown(blocker)} is a file, not a folder; {todo}") from None
    except PermissionError:
        start = [] if path.is_absolute() else [Path.cwd()]   # a relative path is searched from there
        folder = next((f for f in start + _ancestors(path) if not os.access(f, os.X_OK)), None)
        if folder is None:
            raise IRReadError(f"{shown}: permission denied; check the permissions of its folders") from None
        raise IRReadError(f"{shown}: no permission to enter the folder {_shown(folder)}; ask for search (x) "
                          "permission on it, or copy the IR somewhere you can read") from None
    except OSError as exc:   # a loop of symbolic links, an I/O error: the system's words
        raise IRReadError(f"{shown}: cannot be reached ({exc.strerror or exc}); {todo}") from None


def _ancestors(path: Path) -> list[Path]:
    """The folders named on the way to ``path``, outermost first (``a``, ``a/b`` for ``a/b/c``)."""
    return [folder for folder in reversed(path.parents) if folder != Path(".")]


def _pathconf(path: Path, name: str, default: int) -> int:
    """``os.pathconf`` of the innermost existing folder on the way to ``path``."""
    for folder in [*reversed(_ancestors(path)), Path(".")]:
        with contextlib.suppress(OSError, ValueError):
            return os.pathconf(folder, name)
    return default


def _shown(path: Path, width: int = 120) -> str:
    """``path`` for a one-line message: shortened in the middle when longer than ``width`` characters."""
    text = str(path)
    if len(text) <= width:
        return text
    half = (width - 1) // 2
    return f"{text[:half]}…{text[-half:]}"
