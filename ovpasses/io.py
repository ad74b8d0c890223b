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
    """Raise :class:`IRReadError` unless ``path`` is a readable file whose XML root element is ``<net>``.

    Reads only up to the root element, so it is cheap for large IRs.
    """
    path = Path(path)
    if not path.exists():
        raise IRReadError(f"{path}: no such file; give the path of an OpenVINO IR .xml file")
    if not path.is_file():
        raise IRReadError(f"{path}: not a file; give the path of an OpenVINO IR .xml file")
    try:
        with open(path, "rb") as handle:
            for _event, element in ET.iterparse(handle, events=("start",)):
                root = element.tag
                break
            else:
                root = None
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
