"""Reading and writing OpenVINO IR files (``.xml`` + ``.bin``) safely.

* :func:`read_ir` checks that the file is an IR before OpenVINO sees it (other frontends that try a
  file that is not an IR print noise of their own) and turns OpenVINO's reader errors into
  :class:`IRReadError` messages that say what is wrong and what to do.
* :func:`write_ir` writes to temporary names in the target folder and puts the pair in place with
  :func:`ovpasses.commit.replace_all`: the ``.xml`` and ``.bin`` are replaced together or not at all,
  and writing over the IR the model was read from is safe (``read_model`` memory-maps the ``.bin``;
  overwriting that file in place would crash the reader).
* :func:`check_output_path` and :func:`shared_file` refuse an output that would replace a file of
  the input pair (``-o m.XML`` writes its weights to ``m.bin``), a hard link or a symbolic link to it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import re
import shutil
import stat
import xml.etree.ElementTree as ET
from pathlib import Path

import openvino as ov

from ovpasses import commit
from ovpasses.errors import OvpassesError

log = logging.getLogger(__name__)

TEMP_PREFIX = commit.TEMP_PREFIX


class IRReadError(OvpassesError):
    """The file is missing, is not an OpenVINO IR, or its ``.xml``/``.bin`` pair is damaged."""


class IRWriteError(OvpassesError):
    """The IR could not be written where it was asked to go."""


def weights_path(xml_path: str | os.PathLike) -> Path:
    """The ``.bin`` OpenVINO reads next to ``xml_path``."""
    return Path(xml_path).with_suffix(".bin")


def ir_files(xml_path: str | os.PathLike) -> tuple[Path, Path]:
    """The two files of the IR at ``xml_path``: the ``.xml`` and the ``.bin`` OpenVINO reads with it."""
    return Path(xml_path), weights_path(xml_path)


def _same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file: the same inode when both exist (hard links, symbolic links and
    a filesystem that folds case included), else the same path once resolved."""
    with contextlib.suppress(OSError):
        if os.path.lexists(a) and os.path.lexists(b):
            return os.path.samefile(a, b)
    return a.resolve() == b.resolve()


def shared_file(a: str | os.PathLike, b: str | os.PathLike) -> tuple[Path, Path] | None:
    """The first pair of files, one of IR ``a`` and one of IR ``b``, that are the same file, or None."""
    for x in ir_files(a):
        for y in ir_files(b):
            if _same_file(x, y):
                return x, y
    return None


def same_ir(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    """Whether two ``.xml`` paths name the same IR: both its files are the same files."""
    return all(_same_file(x, y) for x, y in zip(ir_files(a), ir_files(b)))


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
    core = core or ov.Core()
    path = Path(path)
    try:
        # under the folder's lock, after recovering an interrupted commit there: never a pair that an
        # ovpass writer is replacing at this moment
        with commit.folder_lock(path.parent, write=False) if path.parent.is_dir() else contextlib.nullcontext():
            path = check_ir_file(path)
            return core.read_model(str(path))
    except RuntimeError as exc:
        raise IRReadError(_explain_read_error(path, str(exc))) from exc


def check_output_path(path: str | os.PathLike) -> Path:
    """Raise :class:`IRWriteError` unless ``path`` is an ``.xml`` path whose pair can be written.

    Checks the suffix, the folder (exists, is a folder, can be searched and written), the length of
    the names against the filesystem's limits, and that neither target is a folder.
    """
    path = Path(path)
    if path.suffix.lower() != ".xml":
        raise IRWriteError(f"{path}: the output must be an .xml path (its weights go to the .bin beside it)")
    folder = path.parent
    _check_reachable_folder(path, folder)
    _check_name_lengths(path)
    for target in ir_files(path):
        try:
            is_dir = target.is_dir()
        except OSError as exc:
            raise IRWriteError(_path_error(target, exc)) from None
        if is_dir:
            raise IRWriteError(f"{path}: {target.name} is a folder; choose another output path")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise IRWriteError(f"{path}: the folder {folder} is not writable; choose another output path")
    return path


def check_distinct_output(source: str | os.PathLike, target: str | os.PathLike) -> None:
    """Raise :class:`IRWriteError` when writing IR ``target`` would replace a file of IR ``source``."""
    shared = shared_file(target, source)
    if shared is None:
        return
    out_file, in_file = shared
    if out_file.suffix.lower() == ".xml" and in_file.suffix.lower() == ".xml" and same_ir(target, source):
        raise IRWriteError(f"{target} is the input; choose another -o, or pass --in-place to overwrite it")
    raise IRWriteError(f"{target}: its {'weights' if out_file.suffix == '.bin' else 'XML'} would go to "
                       f"{out_file}, which is the input's {in_file.name}; choose another -o (the .bin of "
                       "X.xml is X.bin, whatever the case of .xml)")


def save_ir(model: ov.Model, path: Path, mode_from: Path | None = None) -> None:
    """Serialise ``model`` to ``path`` and the ``.bin`` beside it, as they are (no fp16 compression).

    Both files get the permission bits of the files at ``mode_from`` (the ones they will replace or
    stand in for), else those of a new file. A model without constants still gets an (empty) ``.bin``.
    """
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))  # can files be made here?
    ov.save_model(model, str(path), compress_to_fp16=False)
    if not weights_path(path).exists():
        weights_path(path).touch()
    for made, like in ((path, mode_from), (weights_path(path), mode_from and weights_path(mode_from))):
        os.chmod(made, _file_mode(like))


def write_ir(model: ov.Model, path: str | os.PathLike) -> None:
    """Write ``model`` to ``path`` (``.xml``) and the ``.bin`` next to it, as one artefact.

    Weights keep their element types (no fp16 compression). Both files are first written to
    temporary names in the target folder, then :func:`ovpasses.commit.replace_all` puts the pair in
    place under the folder's lock, both or neither. On any failure the temporary files are removed
    and the targets are left as they were.
    """
    path = check_output_path(path)
    folder = path.parent
    tmp_xml = folder / commit.temp_name(".xml")
    tmp_bin = weights_path(tmp_xml)
    try:
        save_ir(model, tmp_xml, mode_from=path)
        with commit.folder_lock(folder):
            commit.replace_all(folder, [(tmp_bin, weights_path(path)), (tmp_xml, path)])
    except (OSError, RuntimeError) as exc:
        raise IRWriteError(_write_error(path, exc, model)) from exc
    finally:
        for leftover in (tmp_xml, tmp_bin):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def _write_error(path: Path, exc: Exception, model: ov.Model) -> str:
    """Why writing failed, in words: a full device says how much it needed, other errors their cause.

    OpenVINO's serializer reports a full device as ``basic_ios::clear: iostream error``, without an
    errno; a failure while the device's free space is below the IR's size is taken for that.
    """
    folder = path.parent
    full = isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT)
    needed, free = _ir_size_estimate(model), None
    with contextlib.suppress(OSError):
        free = shutil.disk_usage(folder).free
    if full or isinstance(exc, RuntimeError) and free is not None and free < needed:
        return (f"{path}: no space left on the device of {folder}: the IR needs about {_mib(needed)}"
                f"{f', {_mib(free)} are free' if free is not None else ''}; free space or choose another output "
                "folder (nothing was written)")
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOENT, errno.EROFS, errno.EACCES, errno.EPERM):  # e.g. -o /proc/x.xml
            return (f"{path}: cannot create files in {folder} ({exc.strerror}); choose another output folder "
                    "(nothing was written)")
        return f"{path}: cannot be written ({exc.strerror or exc}); check the folder's permissions and free space"
    return f"{path}: OpenVINO could not serialize the model: {_last_line(str(exc))}"


def _ir_size_estimate(model: ov.Model) -> int:
    """Bytes the ``.bin`` takes: the constants' data, as ``save_model`` writes them uncompressed."""
    return sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant")


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def _check_reachable_folder(path: Path, folder: Path) -> None:
    try:
        st = os.stat(folder)
    except OSError as exc:
        raise IRWriteError(f"{path}: {_path_error(folder, exc)}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise IRWriteError(f"{path}: {folder} is a file, not a folder; choose another output path")


def _check_name_lengths(path: Path) -> None:
    folder = path.parent
    with contextlib.suppress(OSError, ValueError):
        name_max = os.pathconf(folder, "PC_NAME_MAX")
        for target in ir_files(path):
            if len(os.fsencode(target.name)) > name_max:
                raise IRWriteError(f"{target}: the file name is {len(os.fsencode(target.name))} bytes, longer than "
                                   f"the {name_max} bytes the filesystem of {folder} allows; choose a shorter name")
        path_max = os.pathconf(folder, "PC_PATH_MAX")
        full = os.fsencode(os.path.abspath(path))
        if len(full) >= path_max:
            raise IRWriteError(f"{path}: the path is {len(full)} bytes, longer than the {path_max - 1} bytes the "
                               "system allows; choose a shorter path")


def _path_error(path: Path, exc: OSError) -> str:
    """What an OSError from reaching ``path`` means, in words (no errno numbers)."""
    if exc.errno == errno.ENOENT:
        return f"the folder {path} does not exist; create it first"
    if exc.errno == errno.ENOTDIR:
        part = next((p for p in reversed(path.parents) if p.exists() and not p.is_dir()), None)
        return f"{part or path} is a file, not a folder, so {path} cannot exist"
    if exc.errno in (errno.EACCES, errno.EPERM):
        return f"permission denied reaching {path}: a folder on the way cannot be searched by this user"
    if exc.errno == errno.ENAMETOOLONG:
        return f"the path {path} is longer than the filesystem allows; choose a shorter path"
    if exc.errno == errno.ELOOP:
        return f"the path {path} has a loop of symbolic links"
    return f"cannot reach {path}: {exc.strerror or exc}"


def _file_mode(path: Path | None) -> int:
    """The permission bits a file written to ``path`` gets: those of the file it replaces, else 0o666 - umask."""
    if path is not None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
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
