"""The folder flow of ``ovpass rewrite``: the pipeline over every IR of an optimum-intel export, the folder as
one artefact (the single-file flow, beside it, is :mod:`ovpasses.app.ir_file`).

Users hold folders, not single IRs: ``optimum-cli export openvino --task text-generation-with-past``
writes ``openvino_model.xml``; ``--task image-text-to-text`` writes ``openvino_language_model.xml``
beside text, per-layer and vision embedding IRs; both add tokenizer and detokenizer IRs, configs and
processor files. :func:`rewrite_folder` rewrites each IR that holds stateful attention (a ReadValue
and a ScaledDotProductAttention, or a Softmax: eager attention), copies every other file byte for byte, and puts the new folder in
place with :func:`ovpasses.app.files.commit.replace_all`: a new ``-o`` appears whole, an empty one is
filled under its lock, and ``--in-place`` swaps the folder with its rewritten copy (see
:func:`rewrite_folder` and docs/file-guarantees.md).

Which IRs hold stateful attention is read from the XML's layer types, without building the model:
the tokenizer IRs need openvino_tokenizers' extension to be read at all.

For a named target (``--runtime 2026.0``), every IR is made readable there: the rewritten IRs by the
pipeline itself, and an IR without stateful attention that holds an operation the target cannot read
(from its XML's layer versions) by :func:`ovpasses.features.old_runtimes.plan.lower_op_versions` alone. An operation
that cannot be replaced refuses the whole folder, naming the file. Tokenizer IRs converted by a newer
openvino_tokenizers than the target's are copied as they are, with a warning: openvino_genai releases
before it crash when they load them (:data:`ovpasses.plan.runtimes.TOKENIZERS_CRASH_OLDER_GENAI`).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import shutil
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

from ovpasses import ir_xml
from ovpasses.modes import Mode
from ovpasses.features.old_runtimes.analysis import unreadable_versions
from ovpasses.app.files import commit, io
from ovpasses.app.files.export_scan import FolderError, FolderTargetError, _check_link, export_family, scan_export
from ovpasses.app.render.text import op_action_text, summary_text, with_warning_texts
from ovpasses.errors import OvpassesError, UnreadableOperationError
from ovpasses.features.old_runtimes.plan import OpVersionAction, lower_op_versions
from ovpasses.options import RewriteOptions
from ovpasses.pipeline import rewrite
from ovpasses.report import schemas
from ovpasses.summary import RewriteSummary
from ovpasses.plan.runtimes import TOKENIZERS_CRASH_OLDER_GENAI, Version, parse_release, version_string

log = logging.getLogger(__name__)

@dataclass
class FolderModel:
    """One IR of the folder and what the pipeline did to it (None: copied as it is, or, with
    ``op_versions``, only the operations the target cannot read replaced)."""

    file: str
    summary: RewriteSummary | None
    seconds: float = 0.0
    op_versions: list[OpVersionAction] = field(default_factory=list)

    def to_dict(self) -> dict:
        data = {"file": self.file, "rewritten": self.summary is not None, "seconds": round(self.seconds, 3)}
        if self.summary is not None:
            data["summary"] = with_warning_texts(self.summary.to_dict())
            data["changed"] = self.summary.changed
        elif self.op_versions:
            data["unreadable_ops"] = [a.to_dict() for a in self.op_versions]
            data["changed"] = True
        return data


@dataclass
class FolderSummary:
    """What :func:`rewrite_folder` did: per IR with stateful attention its summary, the rest copied."""

    source: str
    target: str | None
    models: list[FolderModel] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)
    family: str | None = None   # export_family: whose measurements the text quotes

    @property
    def changed(self) -> bool:
        return any(m.summary is not None and m.summary.changed or bool(m.op_versions) for m in self.models)

    def to_dict(self) -> dict:
        return {"schema": schemas.REWRITE_FOLDER, "input": self.source, "output": self.target,
                "changed": self.changed, "models": [m.to_dict() for m in self.models], "copied": list(self.copied)}

    def __str__(self) -> str:
        lines = []
        for model in self.models:
            if model.summary is not None:
                lines.append(f"{model.file}:")
                lines += [f"  {line}" for line in summary_text(model.summary, self.family).splitlines()]
            for item in model.op_versions:
                lines.append(f"{model.file}: cannot be read as exported: {item.op.describe()}: {op_action_text(item)}")
        rest = [m.file for m in self.models if m.summary is None and not m.op_versions] + self.copied
        listed = f" ({', '.join(rest[:6])}{', ...' if len(rest) > 6 else ''})" if rest else ""
        lines.append(f"copied unchanged: {len(rest)} file(s){listed}")
        return "\n".join(lines)


def check_folder_target(source: Path, target: Path, in_place: bool) -> None:
    """Raise :class:`FolderError` unless ``target`` can take the rewritten copy of folder ``source``."""
    if not source.is_dir():
        raise FolderError(f"{source}: not a folder")
    if in_place:
        return
    src, dst = source.resolve(), target.resolve()
    if dst == src:
        raise FolderTargetError(f"{target} is the input folder; choose another -o, or pass --in-place to overwrite it")
    if src in dst.parents:
        raise FolderTargetError(f"{target} is inside the input folder {source}; choose an -o outside it")
    if dst in src.parents:
        raise FolderTargetError(f"{target} holds the input folder {source}; choose another -o")
    if target.exists() or target.is_symlink():
        if not target.is_dir() or target.is_symlink():
            raise FolderTargetError(f"{target} exists and is not a folder; -o must name a new or empty folder")
        _check_empty(target)
        if not os.access(target, os.W_OK | os.X_OK):
            raise FolderTargetError(f"{target}: the folder is not writable; choose another -o")
        return
    if not target.parent.is_dir():
        raise FolderTargetError(f"{target}: the folder {target.parent} does not exist; create it first")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise FolderTargetError(f"{target}: the folder {target.parent} is not writable; choose another -o")


def _check_empty(target: Path, staging: Path | None = None) -> None:
    """Raise :class:`FolderError` unless ``target`` holds nothing but ovpass's own files."""
    others = sorted(p.name for p in target.iterdir() if p != staging and not commit.is_own_name(p.name))
    if others:
        raise FolderTargetError(f"{target} exists and is not empty ({', '.join(others[:3])}"
                                f"{', ...' if len(others) > 3 else ''}); -o must name a new or empty folder "
                                "(or pass --in-place to rewrite the input folder)")


class Symlinks(Mode):
    """What a folder rewrite does with a symbolic link of the source folder."""

    COPY = "copy", "copy the file it points to, as cp -L (a Hugging Face cache snapshot is made of links)"
    KEEP = "keep", "keep a link that still points to the same file from the output folder"


def rewrite_folder(source: str | os.PathLike, target: str | os.PathLike | None,
                   options: RewriteOptions | None = None, in_place: bool = False,
                   symlinks: Symlinks | str = Symlinks.COPY) -> FolderSummary:
    """Rewrite every IR of ``source`` that holds stateful attention and write the folder to ``target``.

    ``target`` None is a dry run (everything runs, nothing is written); ``in_place`` replaces
    ``source`` itself. An IR without stateful attention that holds an operation the target runtime
    cannot read gets only those operations replaced (:func:`~ovpasses.features.old_runtimes.plan.lower_op_versions`).
    Files other than those IRs are copied byte for byte, sub-folders included; ovpass's own lock,
    journal and temporary files are not copied. A symbolic link is copied as the file or folder it
    points to (``symlinks="copy"``, as ``cp -L``: a Hugging Face cache snapshot is made of links into
    ``../../blobs``); with ``symlinks="keep"`` a link that still points to the same file from the
    target stays a link. A link that points nowhere is an error, naming it.
    :class:`UnreadableOperationError`, naming the file, when an IR holds an operation the target
    cannot read and ovpasses cannot replace. ``options`` (:class:`RewriteOptions`; default: every pass, for the
    installed runtime) apply to each IR rewritten (in an image-text-to-text export that is the language model:
    the embedding IRs hold no stateful attention).

    Where the folder goes: ``-o`` a new folder is created with ``mkdir``'s mode and appears whole
    (``RENAME_NOREPLACE``: one created meanwhile by another process is left alone and the rewrite
    fails); an existing empty folder (a mount point, say) keeps its mode, owner and ACLs and is
    filled under its lock; ``in_place`` swaps the folder with its rewritten copy, which takes its
    mode and owner.
    """
    try:
        symlinks = Symlinks(symlinks)
    except ValueError:
        raise OvpassesError(f"symlinks={symlinks!r}: expected one of {', '.join(m.value for m in Symlinks)}") from None
    source = Path(source)
    destination = source if in_place else (Path(target) if target is not None else None)
    if destination is not None:
        check_folder_target(source, destination, in_place)
    elif not source.is_dir():
        raise FolderError(f"{source}: not a folder")
    checked = None if destination is None else commit.Identity.of(destination)
    summary = FolderSummary(str(source), None if destination is None else str(destination),
                            family=export_family(source))
    scan = scan_export(source)
    if destination is not None and not in_place and destination.suffix.lower() in (".xml", ".bin") \
            and not destination.is_dir():   # an export folder into an IR file's name: refused, as the reverse is
        raise FolderTargetError(f"{destination} names an IR file, but {source} is an export folder, rewritten into "
                                f"a folder: -o must name a new or empty folder")
    irs, stateful = set(scan.irs), list(scan.stateful)
    options = options or RewriteOptions()
    target = options.runtime.version
    _warn_newer_tokenizers(source, sorted(irs), target)

    fill = checked is not None and not in_place
    source_id = commit.Identity.of(source)   # an in-place commit by another process swaps the folder
    staging = None if destination is None else (destination if fill else destination.parent) / commit.temp_name()
    try:
        if staging is not None:
            staging.mkdir()
        done: set[str] = set()
        for index, name in enumerate(stateful, 1):
            log.info("rewriting %s (%d/%d)", name, index, len(stateful))
            start = time.perf_counter()
            model = io.read_ir(source / name)
            try:
                result = rewrite(model, options=options)
            except UnreadableOperationError as exc:
                raise UnreadableOperationError(f"{source / name}: {exc}", target=exc.target, refused=exc.refused,
                                               path=source / name) from None
            if staging is not None:
                _save(model, staging / name, source / name)
            summary.models.append(FolderModel(name, result, time.perf_counter() - start))
            done |= {name, io.weights_path(Path(name)).name}
        # IRs without stateful attention that hold an operation the target cannot read: only that changes
        for name in sorted(irs - set(stateful)):
            with io.xml_errors(source / name):
                unreadable = unreadable_versions(source / name, target)
            if not unreadable:
                continue
            start = time.perf_counter()
            model = io.read_ir(source / name)
            lowering = lower_op_versions(model, target, options.passes)
            if lowering.refused:
                raise lowering.error(source / name)
            if staging is not None:
                _save(model, staging / name, source / name)
            summary.models.append(FolderModel(name, None, time.perf_counter() - start, lowering.actions))
            done |= {name, io.weights_path(Path(name)).name}
        for entry in sorted(source.iterdir()):
            if entry.name in done or commit.is_own_name(entry.name):
                continue
            if entry.name in irs:
                summary.models.append(FolderModel(entry.name, None))
            else:
                summary.copied.append(entry.name)
            _check_link(entry)
            if staging is not None:
                _copy(entry, staging / entry.name, symlinks)
        if staging is not None:
            _commit(source, destination, checked, staging, in_place, fill, source_id)
    except commit.TargetCreatedError as exc:
        raise FolderTargetError(f"{destination}: {exc}") from None
    except OSError as exc:
        raise FolderTargetError(f"{destination}: cannot be written ({exc.strerror or exc}"
                          f"{f': {exc.filename}' if exc.filename else ''}); nothing was changed") from exc
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return summary


def _commit(source: Path, destination: Path, checked: commit.Identity | None, staging: Path, in_place: bool,
            fill: bool, source_id: commit.Identity | None) -> None:
    """Put the prepared folder ``staging`` in place (see :func:`rewrite_folder` for the three ways);
    ``checked`` is what ``destination`` was when it was checked, ``source_id`` what ``source`` was
    when reading it began: a source replaced meanwhile may have given files of two versions."""
    if commit.Identity.of(source) != source_id:
        raise FolderError(f"{source} was replaced by another process while ovpass read it (an --in-place "
                          "rewrite, say); nothing was written: run the rewrite again")
    if fill:
        with commit.folder_lock(destination):
            _check_empty(destination, staging)
            children = list(staging.iterdir())
            commit.replace_all(destination, [(child, destination / child.name) for child in children],
                               expected={destination / child.name: None for child in children})
        return
    if in_place:
        shutil.copystat(source, staging)   # mode, times and extended attributes (ACLs) of the folder
        st = source.stat()
        with contextlib.suppress(OSError):  # a user who is not root keeps their own ownership
            os.chown(staging, st.st_uid, st.st_gid)
    with commit.folder_lock(destination.parent):
        commit.replace_all(destination.parent, [(staging, destination)], expected={destination: checked})


def _save(model, target: Path, source: Path) -> None:
    """Save a model of the folder into the staging folder; a model OpenVINO's serializer refuses is the
    input's damage (:func:`~ovpasses.app.files.io.unserializable`), a full device the target's."""
    try:
        io.save_ir(model, target, mode_from=source)
    except RuntimeError as exc:
        if io.device_full(target.parent, model):
            raise OSError(errno.ENOSPC, "no space left on the device") from exc
        raise io.IRReadError(io.unserializable(source, exc)) from None


def _tokenizers_version(xml_path: Path) -> Version | None:
    """The openvino_tokenizers release that converted a tokenizer IR (its ``openvino_tokenizers_version``
    runtime info, ``2026.4.1.0-738-...``), or None when the IR does not say."""
    found: list[str] = []

    def opening(tag: str, attributes: dict[str, str]) -> None:
        if tag == "openvino_tokenizers_version":
            found.append(attributes.get("value", ""))
            raise ir_xml.StopWalk

    with contextlib.suppress(ET.ParseError, OSError, OvpassesError):
        ir_xml.walk_start_tags(xml_path, opening)
        if found:
            return parse_release(".".join(found[0].split("-")[0].split(".")[:3]))
    return None


def _warn_newer_tokenizers(source: Path, irs: list[str], target: Version) -> None:
    """One warning naming the tokenizer IRs of ``source`` that a release newer than ``target`` converted."""
    newer = {}
    for name in irs:
        converted = _tokenizers_version(source / name)
        if converted is not None and converted[:2] > target[:2]:
            newer[name] = converted
    if newer and TOKENIZERS_CRASH_OLDER_GENAI:
        log.warning("%s: converted by openvino_tokenizers %s, which openvino_genai %s cannot load (measured: genai "
                    "releases older than the converter segfault; ovpasses.plan.runtimes); they are copied as they are: "
                    "convert the tokenizer again with openvino_tokenizers %s, or give genai token ids",
                    ", ".join(newer), ", ".join(sorted({version_string(v) for v in newer.values()})),
                    version_string(target[:2]), version_string(target[:2]))


def _copy(entry: Path, target: Path, symlinks: Symlinks = Symlinks.COPY) -> None:
    """Copy a file or a folder, keeping bytes, modes and times; a symbolic link as what it points to,
    or (``symlinks="keep"``) as a link where it points to the same file from ``target``."""
    if entry.is_symlink():
        link = os.readlink(entry)
        if symlinks is Symlinks.KEEP and (target.parent / link).resolve() == entry.resolve():   # an absolute link too
            os.symlink(link, target)
            return
    if entry.is_dir():
        shutil.copytree(entry, target)
    else:
        shutil.copy2(entry, target)
