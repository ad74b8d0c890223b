"""What an export folder holds, read from its files without building a model (the tokenizer IRs need
openvino_tokenizers' extension to be read at all): which IRs hold stateful attention (what ``ovpass`` works on),
which files it skips and why, and every damaged file a client would read refused before any work
(:func:`scan_export`). The folder flows (:mod:`ovpasses.app.folder`, the inspect report, the check) read it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from ovpasses.app.files import commit, io
from ovpasses.errors import ErrorCode, InputError
from ovpasses.features.sliding_window.payoff import family_of

# an IR with a state and attention: SDPA, or a Softmax (eager attention, which EagerAttentionToSDPA recovers)
STATEFUL = "ReadValue"
ATTENTION = {"ScaledDotProductAttention", "SoftMax"}   # the IR's layer types (Softmax is "SoftMax" there)


class FolderError(InputError):
    """A folder cannot be read, or one of its files is damaged."""


class FolderTargetError(FolderError):
    """The target folder cannot take the result."""

    code = ErrorCode.OUTPUT


class Skipped(str, Enum):
    """Why a file of an export folder that looks like an IR is not worked on."""

    NO_STATEFUL_ATTENTION = "no_stateful_attention"   # an IR without ReadValue and attention (tokenizer, embeddings)
    NOT_AN_IR = "not_an_ir"                           # an .xml whose root element is not <net>


@dataclass(frozen=True)
class ExportScan:
    """What an export folder holds, read from its files without building a model: its IR ``.xml`` names,
    those that hold stateful attention (what ``ovpass`` works on), and each other ``.xml`` with why it is
    not worked on. :func:`scan_export` makes one, or refuses a damaged folder."""

    folder: Path
    irs: tuple[str, ...]
    stateful: tuple[str, ...]
    skipped: tuple[tuple[str, Skipped], ...]

    def skipped_dicts(self) -> list[dict]:
        return [{"file": name, "reason": reason.value} for name, reason in self.skipped]


def scan_export(folder: str | os.PathLike) -> ExportScan:
    """Read what ``folder`` holds; :class:`~ovpasses.app.files.io.IRReadError` or :class:`FolderError` naming the
    file when one is damaged: an IR whose XML is malformed or truncated or whose ``.bin`` is missing or
    shorter than the XML says (:func:`~ovpasses.app.files.io.scan_ir`, every IR of the folder: a client reads
    them all), an ``.xml`` that is a folder, the ``.bin`` of an IR whose ``.xml`` is missing, a JSON file
    that does not parse, a ``config.json`` that is not a JSON object. :class:`FolderError` when no IR
    holds stateful attention."""
    folder = Path(folder)
    irs, stateful, skipped, states_only = [], [], [], []
    entries = sorted(folder.iterdir())
    names = {entry.name for entry in entries}
    for path in entries:
        suffix = path.suffix.lower()
        if commit.is_own_name(path.name):
            continue
        _check_link(path)
        if suffix == ".xml":
            if path.is_dir():
                raise FolderError(f"{path}: a folder where the export has an IR .xml file; move it away and copy "
                                  "the export again")
            try:
                io.check_ir_file(path)
            except io.NotAnIRError:
                skipped.append((path.name, Skipped.NOT_AN_IR))
                continue
            types = io.scan_ir(path).types
            irs.append(path.name)
            if _stateful_attention(types):
                stateful.append(path.name)
            else:
                skipped.append((path.name, Skipped.NO_STATEFUL_ATTENTION))
                if _states_without_attention(types):
                    states_only.append(path.name)
        elif suffix == ".bin" and path.name.startswith("openvino_") and path.with_suffix(".xml").name not in names:
            raise FolderError(f"{path}: the weights of an IR whose {path.with_suffix('.xml').name} is missing; "
                              "copy or export the folder again")
        elif suffix == ".json":
            _check_json(path)
    if not stateful:
        if states_only:
            raise FolderError(f"{folder / states_only[0]}: {NO_ATTENTION}")
        raise FolderError(f"{folder}: no IR in this folder holds stateful attention (ReadValue and "
                          f"ScaledDotProductAttention or Softmax); IRs found: {', '.join(irs) or 'none'}")
    return ExportScan(folder, tuple(irs), tuple(stateful), tuple(skipped))


def export_family(folder: str | os.PathLike) -> str | None:
    """The model family of an export folder: its ``config.json``'s ``model_type`` (a vision-language export's
    ``text_config``'s where it names one), as :func:`~ovpasses.features.sliding_window.payoff.family_of` spells
    it; None where the folder has no readable config naming one. The reports quote the measurements of this
    family only."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict):
        return None
    text = config.get("text_config")
    model_type = text.get("model_type") if isinstance(text, dict) and text.get("model_type") else config.get("model_type")
    return family_of(model_type)


def _check_json(path: Path) -> None:
    """A JSON file of the export parses (a client reads them); ``config.json`` is an object."""
    if path.is_dir():
        raise FolderError(f"{path}: a folder where the export has a JSON file; move it away and copy the export "
                          "again")
    try:
        data = json.loads(path.read_bytes())
    except UnicodeDecodeError:
        raise FolderError(f"{path}: not UTF-8 text, so not JSON; the file is damaged, copy or export it "
                          "again") from None
    except json.JSONDecodeError as exc:
        raise FolderError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno} column {exc.colno}); the file "
                          "is damaged, copy or export it again") from None
    except OSError as exc:
        raise FolderError(f"{path}: cannot be read ({exc.strerror}); check its permissions") from None
    if path.name == "config.json" and not isinstance(data, dict):
        raise FolderError(f"{path}: a JSON {type(data).__name__}, not an object of settings; the file is damaged, "
                          "copy or export it again")


def ir_files_in(folder: Path) -> list[Path]:
    """The IR ``.xml`` files directly in ``folder`` (root element ``<net>``), sorted by name."""
    return [Path(folder) / name for name in scan_export(folder).irs]


def unreadable_files(folder: Path) -> list[str]:
    """The files of ``folder`` (sub-folders included) that cannot be opened for reading: a symbolic link
    that points nowhere, a file without read permission."""
    found = []
    for root, _dirs, files in os.walk(folder):
        for name in files:
            path = Path(root) / name
            if commit.is_own_name(name):
                continue
            try:
                with open(path, "rb"):
                    pass
            except OSError as exc:
                found.append(f"{path.relative_to(folder)} ({exc.strerror})")
    return sorted(found)


# one answer for a pure state-space model, given as its folder or as its .xml
NO_ATTENTION = ("this IR holds states (ReadValue) but no attention (ScaledDotProductAttention or Softmax): a "
                "state-space model without attention (Mamba, Falcon-Mamba) has no KV cache for ovpass to rewrite")


def _states_without_attention(types) -> bool:
    """States, no attention, and the weights' MatMuls of a decoder: a state-space LM (a tokenizer IR holds a
    ReadValue too, and no MatMul)."""
    return STATEFUL in types and "MatMul" in types and not ATTENTION & types


def _stateful_attention(types) -> bool:
    return STATEFUL in types and bool(ATTENTION & types)


def refuse_without_attention(xml_path: Path) -> bool:
    """:class:`FolderError`, as for its folder, where the IR at ``xml_path`` holds states but no attention; else
    whether it holds stateful attention (one walk of its XML answers both)."""
    types = io.scan_ir(xml_path).types
    if _states_without_attention(types):
        raise FolderError(f"{xml_path}: {NO_ATTENTION}")
    return _stateful_attention(types)


def holds_stateful_attention(xml_path: Path) -> bool:
    return _stateful_attention(io.scan_ir(xml_path).types)


def stateful_irs(folder: str | os.PathLike) -> list[str]:
    """The names of the IRs in ``folder`` that hold stateful attention; :class:`FolderError` if none do."""
    return list(scan_export(folder).stateful)


def _check_link(entry: Path) -> None:
    """:class:`FolderError` naming ``entry`` when it is a symbolic link that points nowhere."""
    if entry.is_symlink() and not os.path.exists(entry):
        raise FolderError(f"{entry}: a symbolic link to {os.readlink(entry)}, which does not exist; "
                          "copy or download that file again")
