"""Export folders: the pipeline over every IR of an optimum-intel export, the folder as one artefact.

Users hold folders, not single IRs: ``optimum-cli export openvino --task text-generation-with-past``
writes ``openvino_model.xml``; ``--task image-text-to-text`` writes ``openvino_language_model.xml``
beside text, per-layer and vision embedding IRs; both add tokenizer and detokenizer IRs, configs and
processor files. :func:`rewrite_folder` rewrites each IR that holds stateful attention (a ReadValue
and a ScaledDotProductAttention), copies every other file byte for byte, and puts the new folder in
place with :func:`ovpasses.commit.replace_all`: a temporary folder beside the target is renamed into
place, so the target is the old folder or the new one, whole.

Which IRs hold stateful attention is read from the XML's layer types, without building the model:
the tokenizer IRs need openvino_tokenizers' extension to be read at all.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import openvino as ov

from ovpasses import commit, io
from ovpasses.errors import OvpassesError
from ovpasses.pipeline import RewriteSummary, rewrite

log = logging.getLogger(__name__)

STATEFUL_ATTENTION = {"ReadValue", "ScaledDotProductAttention"}


class FolderError(OvpassesError):
    """A folder cannot be read, or the target folder cannot take the result."""


def layer_types(xml_path: Path) -> set[str]:
    """The ``type`` of every ``<layer>`` of an IR, read from the XML (bodies of sub-graphs included)."""
    types: set[str] = set()
    with open(xml_path, "rb") as handle:
        for _event, element in ET.iterparse(handle, events=("start",)):
            if element.tag == "layer":
                types.add(element.get("type", ""))
    return types


def ir_files_in(folder: Path) -> list[Path]:
    """The IR ``.xml`` files directly in ``folder`` (root element ``<net>``), sorted by name."""
    found = []
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() == ".xml" and path.is_file():
            with contextlib.suppress(io.IRReadError):
                found.append(io.check_ir_file(path))
    return found


def holds_stateful_attention(xml_path: Path) -> bool:
    return STATEFUL_ATTENTION <= layer_types(xml_path)


@dataclass
class FolderModel:
    """One IR of the folder and what the pipeline did to it (None: copied as it is)."""

    file: str
    summary: RewriteSummary | None
    seconds: float = 0.0

    def to_dict(self) -> dict:
        data = {"file": self.file, "rewritten": self.summary is not None, "seconds": round(self.seconds, 3)}
        if self.summary is not None:
            data["summary"] = self.summary.to_dict()
            data["changed"] = self.summary.changed
        return data


@dataclass
class FolderSummary:
    """What :func:`rewrite_folder` did: per IR with stateful attention its summary, the rest copied."""

    source: str
    target: str | None
    models: list[FolderModel] = field(default_factory=list)
    copied: list[str] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(m.summary is not None and m.summary.changed for m in self.models)

    def to_dict(self) -> dict:
        return {"schema": "ovpass.rewrite-folder/1", "input": self.source, "output": self.target,
                "changed": self.changed, "models": [m.to_dict() for m in self.models], "copied": list(self.copied)}

    def __str__(self) -> str:
        lines = []
        for model in self.models:
            if model.summary is None:
                continue
            lines.append(f"{model.file}:")
            lines += [f"  {line}" for line in str(model.summary).splitlines()]
        rest = [m.file for m in self.models if m.summary is None] + self.copied
        lines.append(f"copied unchanged: {len(rest)} file(s)" + (f" ({', '.join(rest[:6])}"
                                                                 f"{', ...' if len(rest) > 6 else ''})" if rest else ""))
        return "\n".join(lines)


def check_folder_target(source: Path, target: Path, in_place: bool) -> None:
    """Raise :class:`FolderError` unless ``target`` can take the rewritten copy of folder ``source``."""
    if not source.is_dir():
        raise FolderError(f"{source}: not a folder")
    if in_place:
        return
    src, dst = source.resolve(), target.resolve()
    if dst == src:
        raise FolderError(f"{target} is the input folder; choose another -o, or pass --in-place to overwrite it")
    if src in dst.parents:
        raise FolderError(f"{target} is inside the input folder {source}; choose an -o outside it")
    if dst in src.parents:
        raise FolderError(f"{target} holds the input folder {source}; choose another -o")
    if target.exists() or target.is_symlink():
        if not target.is_dir() or target.is_symlink():
            raise FolderError(f"{target} exists and is not a folder; -o must name a new or empty folder")
        if any(target.iterdir()):
            raise FolderError(f"{target} exists and is not empty; -o must name a new or empty folder "
                              "(or pass --in-place to rewrite the input folder)")
    if not target.parent.is_dir():
        raise FolderError(f"{target}: the folder {target.parent} does not exist; create it first")
    if not os.access(target.parent, os.W_OK | os.X_OK):
        raise FolderError(f"{target}: the folder {target.parent} is not writable; choose another -o")


def rewrite_folder(source: str | os.PathLike, target: str | os.PathLike | None, runtime: str | None = None,
                   passes=None, in_place: bool = False, kv_sharing: str = "keep") -> FolderSummary:
    """Rewrite every IR of ``source`` that holds stateful attention and write the folder to ``target``.

    ``target`` None is a dry run (everything runs, nothing is written); ``in_place`` replaces
    ``source`` itself. Files other than those IRs are copied byte for byte, sub-folders included;
    ovpass's own lock, journal and temporary files are not copied. ``kv_sharing`` is
    :func:`~ovpasses.pipeline.rewrite`'s.
    """
    source = Path(source)
    destination = source if in_place else (Path(target) if target is not None else None)
    if destination is not None:
        check_folder_target(source, destination, in_place)
    elif not source.is_dir():
        raise FolderError(f"{source}: not a folder")
    summary = FolderSummary(str(source), None if destination is None else str(destination))
    irs = {p.name for p in ir_files_in(source)}
    stateful = [name for name in sorted(irs) if holds_stateful_attention(source / name)]
    if not stateful:
        raise FolderError(f"{source}: no IR in this folder holds stateful attention (ReadValue and "
                          f"ScaledDotProductAttention); IRs found: {', '.join(sorted(irs)) or 'none'}")

    staging = None if destination is None else destination.parent / commit.temp_name()
    try:
        if staging is not None:
            staging.mkdir()
        done: set[str] = set()
        for index, name in enumerate(stateful, 1):
            log.info("rewriting %s (%d/%d)", name, index, len(stateful))
            start = time.perf_counter()
            model = io.read_ir(source / name)
            result = rewrite(model, runtime, passes, kv_sharing=kv_sharing)
            if staging is not None:
                io.save_ir(model, staging / name, mode_from=source / name)
            summary.models.append(FolderModel(name, result, time.perf_counter() - start))
            done |= {name, io.weights_path(Path(name)).name}
        for entry in sorted(source.iterdir()):
            if entry.name in done or entry.name.startswith((commit.TEMP_PREFIX, commit.BACKUP_PREFIX)) \
                    or entry.name in (commit.LOCK_NAME, commit.JOURNAL_NAME):
                continue
            if entry.name in irs:
                summary.models.append(FolderModel(entry.name, None))
            else:
                summary.copied.append(entry.name)
            if staging is not None:
                _copy(entry, staging / entry.name)
        if staging is not None:
            shutil.copymode(source, staging)
            with commit.folder_lock(destination.parent):
                commit.replace_all(destination.parent, [(staging, destination)])
    except OSError as exc:
        raise FolderError(f"{destination}: cannot be written ({exc.strerror or exc}"
                          f"{f': {exc.filename}' if exc.filename else ''}); nothing was changed") from exc
    finally:
        if staging is not None and staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return summary


def _copy(entry: Path, target: Path) -> None:
    """Copy a file, a symbolic link (as a link) or a folder, keeping bytes, modes and times."""
    if entry.is_symlink():
        os.symlink(os.readlink(entry), target)
    elif entry.is_dir():
        shutil.copytree(entry, target, symlinks=True)
    else:
        shutil.copy2(entry, target)


def read_folder_model(folder: Path, name: str) -> ov.Model:
    return io.read_ir(folder / name)
