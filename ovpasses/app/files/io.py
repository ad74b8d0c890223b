"""Reading and writing OpenVINO IR files (``.xml`` + ``.bin``) safely.

* :func:`read_ir` checks that the file is an IR before OpenVINO sees it (other frontends that try a
  file that is not an IR print noise of their own) and turns OpenVINO's reader errors into
  :class:`IRReadError` messages that say what is wrong and what to do.
* :func:`write_ir` writes to temporary names in the target folder and puts the pair in place with
  :func:`ovpasses.app.files.commit.replace_all`: the ``.xml`` and ``.bin`` are replaced together or not at all,
  and writing over the IR the model was read from is safe (``read_model`` memory-maps the ``.bin``;
  overwriting that file in place would crash the reader).
* :func:`check_output_path` and :func:`shared_file` refuse an output that would replace a file of
  the input pair (``-o m.XML`` writes its weights to ``m.bin``), a hard link or a symbolic link to it.
"""

from __future__ import annotations

import codecs
import contextlib
import errno
import logging
import os
import shutil
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from xml.parsers.expat import errors as expat_errors

import openvino as ov

from ovpasses import ir_xml
from ovpasses.app.files import commit
from ovpasses.app.files.read_checks import (  # noqa: F401 - the read errors and weights_path, re-exported
    IRReadError, NotAnIRError, check_ir_version, check_lengths, check_reachable, check_weights_file, last_line,
    shown_path, unknown_operations, weights_path)
from ovpasses.features.old_runtimes.analysis import installed_cannot_read
from ovpasses.errors import OutputError
from ovpasses.units import size_text

log = logging.getLogger(__name__)



class IRWriteError(OutputError):
    """The IR could not be written where it was asked to go."""


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


GIVE_INPUT = "give the path of an OpenVINO IR .xml file or of an export folder"


def export_folder_of(target: str | os.PathLike, source: str | os.PathLike) -> Path | None:
    """The folder of IR ``target`` when it is an export folder (it holds a ``config.json``) other than
    ``source``'s: writing ``target`` there leaves that export's configuration describing another model."""
    folder, theirs = Path(target).parent, Path(source).parent
    if not (folder / "config.json").is_file() or _same_file(folder, theirs):
        return None
    return folder


def check_ir_file(path: str | os.PathLike) -> Path:
    """Raise :class:`IRReadError` unless ``path`` is a readable IR ``.xml`` that OpenVINO can read.

    Checks, before OpenVINO sees the file (its other frontends print noise of their own on a file the
    IR frontend refuses): that the path can be reached and is a file, that its XML root element is
    ``<net>`` with a ``version`` the installed OpenVINO reads (:data:`ovpasses.plan.runtimes.IR_VERSIONS_READ`),
    and that the ``.bin`` beside it, if there is one, is a readable file. Reads only up to the root
    element, so it is cheap for large IRs.
    """
    path = Path(path)
    check_reachable(path, GIVE_INPUT)
    if not path.is_file():
        raise IRReadError(f"{shown_path(path)}: not a file; give the path of an OpenVINO IR .xml file")
    if path.suffix.lower() == ".bin":
        raise IRReadError(f"{path}: that is the weights file of an IR; give its .xml ({path.with_suffix('.xml').name})")
    try:
        first: list[tuple[str, str | None]] = []

        def opening(tag: str, attributes: dict[str, str]) -> None:
            first.append((tag, attributes.get("version")))
            raise ir_xml.StopWalk

        with xml_errors(path):
            ir_xml.walk_start_tags(path, opening)
        root, version = first[0] if first else (None, None)
    except OSError as exc:
        raise IRReadError(f"{path}: cannot be read ({exc.strerror}); check its permissions") from None
    if root != "net":
        raise NotAnIRError(f"{path}: XML, but not an OpenVINO IR (root element <{root}>, expected <net>); "
                           "give the path of an IR .xml file written by OpenVINO")
    check_ir_version(path, version)
    check_weights_file(path)
    return path


@contextlib.contextmanager
def xml_errors(path: str | os.PathLike) -> Iterator[None]:
    """Turn what Python's XML parser raises while reading ``path`` into :class:`IRReadError` naming the file
    and what to do: every walk over an IR's XML (here, in the folder flows, in the op-version reader) runs
    inside it, so that a damaged file is one line, not an internal error."""
    try:
        yield
    except ET.ParseError as exc:
        path = Path(path)
        if path.stat().st_size == 0:
            raise IRReadError(f"{path}: the file is empty; give the path of an OpenVINO IR .xml file") from None
        if exc.code in _TRUNCATION_CODES:
            raise IRReadError(f"{path}: the XML ends early ({exc}); the file is truncated, copy or export "
                              "it again") from None
        if exc.position == (1, 0):
            raise IRReadError(f"{path}: not an XML file ({exc}); give the path of an OpenVINO IR .xml file") from None
        raise IRReadError(f"{path}: malformed XML ({exc}); the file is damaged, copy or export it again") from None


# expat's codes for a document that stops early
_TRUNCATION_CODES = {expat_errors.codes[expat_errors.XML_ERROR_NO_ELEMENTS],
                     expat_errors.codes[expat_errors.XML_ERROR_UNCLOSED_TOKEN]}


@dataclass(frozen=True)
class IRScan:
    """What one walk over an IR's XML tells without building the model: the ``type`` of every layer
    (bodies of sub-graphs included) and the end of the last constant's bytes in the ``.bin``."""

    types: frozenset[str]
    weights_end: int


def scan_ir(path: str | os.PathLike) -> IRScan:
    """Walk the XML of the IR at ``path`` (which :func:`check_ir_file` accepted) and check that its ``.bin``
    holds every constant the XML places in it; :class:`IRReadError` naming the file otherwise.

    For the IRs ovpass does not build (tokenizers need openvino_tokenizers' extension to be read at all)
    this is the only check, and for those it reads it says precisely what OpenVINO's reader words as an
    exception: a constant's ``offset`` or ``size`` that is not a byte count, a ``.bin`` that is missing
    or shorter than the XML says.
    """
    path = Path(path)
    types: set[str] = set()
    end = 0
    layer: dict[str, str] | None = None

    def opening(tag: str, attributes: dict[str, str]) -> None:
        nonlocal layer, end
        if tag == "layer":
            layer = attributes
            types.add(attributes.get("type", ""))
        elif tag == "data" and layer is not None and layer.get("type") == "Const":
            offset, size = (_byte_count(path, layer, attributes, key) for key in ("offset", "size"))
            if offset is not None and size is not None:
                end = max(end, offset + size)

    with xml_errors(path):
        ir_xml.walk_start_tags(path, opening)
    _check_weights_hold(path, end)
    return IRScan(frozenset(types), end)


def _byte_count(path: Path, layer: dict[str, str], data: dict[str, str], key: str) -> int | None:
    text = data.get(key)
    if text is None:   # a constant written inline, or without data: OpenVINO's reader judges it
        return None
    if not text.strip().isdigit():
        raise IRReadError(f"{path}: the constant {shown_path(Path(layer.get('name', '?')), 60)} has {key}=\"{text[:20]}\", "
                          "not a byte count; the file is damaged, copy or export the IR again")
    return int(text)


def _check_weights_hold(path: Path, end: int) -> None:
    """The ``.bin`` beside ``path`` holds ``end`` bytes or more (none needed when ``end`` is 0)."""
    weights = weights_path(path)
    if end == 0:
        return
    if not os.path.lexists(weights):
        raise IRReadError(f"{path}: its weights file {weights.name} is missing; keep the .bin beside the .xml "
                          "with the same name")
    check_weights_file(path)
    size = weights.stat().st_size
    if size < end:
        raise IRReadError(f"{path}: its weights file {weights.name} is shorter than the XML expects ("
                          f"{size_text(size)}, the XML places constants up to {size_text(end)}: truncated, or from "
                          "another export); copy or export the .xml/.bin pair again")


def read_ir(path: str | os.PathLike, core: ov.Core | None = None) -> ov.Model:
    """Read the IR at ``path`` (and the ``.bin`` next to it) or raise :class:`IRReadError`."""
    core = core or ov.Core()
    path = Path(path)
    try:
        # under the locks of every ovpass writer of this pair (its folder's, and the parent's where the
        # folder is committed whole), after recovering what an interrupted commit left: never a pair
        # that an ovpass writer is replacing at this moment
        with commit.reading(path.parent):
            path = check_ir_file(path)
            _check_utf8(path)
            model = core.read_model(str(path))
    except RuntimeError as exc:
        raise IRReadError(_explain_read_error(path, str(exc))) from exc
    try:   # what the reader does not check (found by the fuzz test: an Assign on a variable of another shape)
        model.validate_nodes_and_infer_types()
    except RuntimeError as exc:
        raise IRReadError(f"{path}: OpenVINO reads this IR but its graph does not validate ({last_line(str(exc))}); "
                          "the file is damaged, copy or export it again") from None
    return model


def _check_utf8(path: Path, chunk: int = 1 << 20) -> None:
    """The XML is UTF-8 text throughout. OpenVINO's reader (pugixml) takes any bytes in a name or an
    attribute, and the first read of that name from Python then raises UnicodeDecodeError anywhere in the
    pipeline; this finds the byte first, at a cost of milliseconds where a full XML walk costs seconds."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = 0
    with open(path, "rb") as handle:
        while True:
            data = handle.read(chunk)
            start = offset - len(decoder.getstate()[0])   # the bytes of a character the last chunk cut
            try:
                decoder.decode(data, final=not data)
            except UnicodeDecodeError as exc:
                raise IRReadError(f"{path}: byte {start + exc.start} is not UTF-8 text (a damaged byte); the file "
                                  "is damaged, copy or export it again") from None
            if not data:
                return
            offset += len(data)


def check_output_path(path: str | os.PathLike) -> Path:
    """Raise :class:`IRWriteError` unless ``path`` is an ``.xml`` path whose pair can be written.

    Checks the suffix, the folder (exists, is a folder, can be searched and written), the length of
    the names against the filesystem's limits, and that neither target is a folder.
    """
    path = Path(path)
    if path.suffix.lower() != ".xml":
        raise IRWriteError(f"{path}: the output must be an .xml path (its weights go to the .bin beside it)")
    folder = path.parent
    for target in ir_files(path):
        check_lengths(target, IRWriteError)
    check_reachable(folder, "create the folder first or choose another output path", IRWriteError)
    if not folder.is_dir():
        raise IRWriteError(f"{path}: {shown_path(folder)} is a file, not a folder; choose another output path")
    for target in ir_files(path):
        if target.is_dir():
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


def write_ir(model: ov.Model, path: str | os.PathLike, source: str | os.PathLike | None = None) -> None:
    """Write ``model`` to ``path`` (``.xml``) and the ``.bin`` next to it, as one artefact. ``source``, the IR
    the model was read from, is named when OpenVINO's serializer refuses the model (its variables disagree
    with their readers, say): that is the input's damage, not the output's.

    Weights keep their element types (no fp16 compression). Both files are first written to
    temporary names in the target folder, then :func:`ovpasses.app.files.commit.replace_all` puts the pair in
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
        if isinstance(exc, RuntimeError) and source is not None and not device_full(folder, model):
            raise IRReadError(unserializable(source, exc)) from exc
        raise IRWriteError(_write_error(path, exc, model)) from exc
    finally:
        for leftover in (tmp_xml, tmp_bin):
            with contextlib.suppress(FileNotFoundError):
                leftover.unlink()


def unserializable(source: str | os.PathLike, exc: RuntimeError) -> str:
    """OpenVINO read the IR at ``source`` and the pipeline ran, but its serializer refuses the model: found by
    the fuzz test (a variable_id changed, two caches of different shapes on one variable)."""
    return (f"{source}: OpenVINO reads this IR but cannot write it back ({last_line(str(exc))}); the file is "
            "damaged, copy or export it again (nothing was written)")


def device_full(folder: Path, model: ov.Model) -> bool:
    """Whether the device of ``folder`` has less room than the model's IR needs (OpenVINO's serializer words a
    full device as an iostream error, without an errno)."""
    with contextlib.suppress(OSError):
        return shutil.disk_usage(folder).free < _ir_size_estimate(model)
    return False


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
        return (f"{path}: no space left on the device of {folder}: the IR needs about {size_text(needed)}"
                f"{f', {size_text(free)} are free' if free is not None else ''}; free space or choose another output "
                "folder (nothing was written)")
    if isinstance(exc, OSError):
        if exc.errno in (errno.ENOENT, errno.EROFS, errno.EACCES, errno.EPERM):  # e.g. -o /proc/x.xml
            return (f"{path}: cannot create files in {folder} ({exc.strerror}); choose another output folder "
                    "(nothing was written)")
        return f"{path}: cannot be written ({exc.strerror or exc}); check the folder's permissions and free space"
    return f"{path}: OpenVINO could not serialize the model: {last_line(str(exc))}"


def _ir_size_estimate(model: ov.Model) -> int:
    """Bytes the ``.bin`` takes: the constants' data, as ``save_model`` writes them uncompressed."""
    return sum(op.get_byte_size() for op in model.get_ops() if op.get_type_name() == "Constant")


def _file_mode(path: Path | None) -> int:
    """The permission bits a file written to ``path`` gets: those of the file it replaces, else 0o666 - umask."""
    if path is not None:
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            return path.stat().st_mode & 0o7777
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def _explain_read_error(path: Path, message: str) -> str:
    """Why OpenVINO could not read the IR at ``path``, from what ovpasses can tell on its own: the XML
    walked (malformed, a constant's bytes not in the ``.bin``: :func:`scan_ir` raises), then an operation
    version the installed OpenVINO does not know; else OpenVINO's own last line."""
    scan_ir(path)
    with xml_errors(path):
        unknown = installed_cannot_read(path)
    if unknown is not None:   # an operation version it does not know
        return unknown_operations(unknown)
    return (f"{path}: OpenVINO cannot read this IR ({last_line(message)}); the file is damaged or was not "
            "written by OpenVINO: copy or export it again")
