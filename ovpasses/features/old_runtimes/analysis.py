"""Which operations of a model a target runtime cannot read from an IR file: an analysis that changes nothing.

An IR file names each layer's operation by type and opset, ``<layer type="ErfInv" version="opset17">``:
the ``version_id`` of the operation's type info, which is what :func:`op_version` returns for a node. A
runtime that does not know that opset, or whose opset does not hold that type, refuses the whole file
(``Cannot create ErfInv layer ... from unsupported opset: opset17``). Which release reads which
operation version is data in :mod:`ovpasses.plan.runtimes` (:func:`~ovpasses.plan.runtimes.reads_op`), measured
with ``tools/opset_facts.py``.

Bodies of sub-graph operations (Loop, TensorIterator, If) are serialised into the same file, so they
are walked too: an operation the target cannot read makes the file unreadable wherever it is, and
``UnreadableOp.where`` says which body it is in. The walk is iterative (a stack of bodies), each
node visited once.

Operations whose version is not an opset (``extension``: openvino_tokenizers' operations, which a
runtime reads when the extension is loaded) are not judged. Only the types that some measured release
does not read in some version are looked at closely (:func:`~ovpasses.plan.runtimes.op_types_to_check`;
every type when the installed runtime is newer than every measured one): reading a node's version
costs about 2 µs, its type name a fraction of that.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

import openvino as ov

from ovpasses import ir_xml
from ovpasses.analysis.subgraphs import SUBGRAPH_OPS, bodies
from ovpasses.errors import UnsupportedRuntimeError
from ovpasses.plan.runtimes import (
    Version,
    first_release_reading,
    installed_version,
    op_types_to_check,
    reads_op,
    version_string,
)

_OPSET = re.compile(r"opset\d+")


def op_version(node: ov.Node) -> str:
    """The version an IR file gives ``node``'s operation (``opset17`` for ErfInv-17)."""
    return node.get_type_info().version_id


@dataclass(frozen=True)
class UnreadableOp:
    """One operation of the model that the target runtime cannot read."""

    name: str                          # friendly name
    type: str
    opset: str
    first_read: Version | None         # the first measured release that reads it; None: none measured does
    constant_inputs: bool              # every input is a Constant (possibly through a Convert)
    element_type: str                  # of output 0 ("f32")
    where: str = ""                    # "" in the model itself, else the sub-graph body that holds it

    @property
    def first_read_string(self) -> str | None:
        return None if self.first_read is None else version_string(self.first_read)

    def describe(self) -> str:
        where = f" in {self.where}" if self.where else ""
        return f"{self.type} ({self.opset}) '{self.name}'{where}"

    def to_dict(self) -> dict:
        return {"name": self.name, "type": self.type, "opset": self.opset, "first_read": self.first_read_string,
                "constant_inputs": self.constant_inputs, "element_type": self.element_type, "where": self.where}


@dataclass
class OpVersionAnalysis:
    """The result of :func:`analyze_op_versions`: the operations ``target`` cannot read, in topological
    order (bodies after the model's own operations)."""

    target: Version
    unreadable: list[UnreadableOp] = field(default_factory=list)

    @property
    def readable(self) -> bool:
        return not self.unreadable

    def versions(self) -> set[tuple[str, str]]:
        return {(op.type, op.opset) for op in self.unreadable}


def _constant_input(output: ov.Output) -> bool:
    node = output.get_node()
    if node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    return node.get_type_name() == "Constant"


def analyze_op_versions(model: ov.Model, target: Version) -> OpVersionAnalysis:
    """The operations of ``model`` (bodies included) that release ``target`` cannot read from an IR file."""
    analysis = OpVersionAnalysis(target)
    suspects = op_types_to_check()
    pending: list[tuple[ov.Model, str]] = [(model, "")]
    while pending:
        graph, where = pending.pop(0)
        for node in graph.get_ordered_ops():
            type_name = node.get_type_name()
            if suspects is not None and type_name not in suspects and type_name not in SUBGRAPH_OPS:
                continue
            opset = op_version(node)
            if not reads_op(target, type_name, opset):
                analysis.unreadable.append(UnreadableOp(
                    node.get_friendly_name(), type_name, opset, first_release_reading(type_name, opset),
                    all(_constant_input(v) for v in node.input_values()),
                    node.get_output_element_type(0).get_type_name() if node.get_output_size() else "", where))
            if type_name in SUBGRAPH_OPS:
                inner = bodies(node)
                for index, body in enumerate(inner):
                    label = f"{type_name} '{node.get_friendly_name()}'"
                    pending.append((body, f"{'body' if len(inner) == 1 else f'body {index}'} of {label}"
                                          + (f" ({where})" if where else "")))
    return analysis


def layer_versions(xml_path: str | Path) -> set[tuple[str, str]]:
    """The (type, version) of every ``<layer>`` of an IR file, bodies included, read from the XML alone
    (without building the model: tokenizer IRs need openvino_tokenizers to be read at all)."""
    versions: set[tuple[str, str]] = set()

    def opening(tag: str, attributes: dict[str, str]) -> None:
        if tag == "layer":
            versions.add((attributes.get("type", ""), attributes.get("version", "")))

    ir_xml.walk_start_tags(xml_path, opening)
    return versions


def unreadable_versions(xml_path: str | Path, target: Version) -> set[tuple[str, str]]:
    """The operation versions of an IR file that release ``target`` cannot read (from the XML alone)."""
    return {(t, v) for t, v in layer_versions(xml_path) if _OPSET.fullmatch(v) and not reads_op(target, t, v)}


@dataclass(frozen=True)
class UnknownToInstalled:
    """Operation versions of an IR file that the installed OpenVINO does not know (from the XML alone), with
    the first measured release that reads each (None: no measured release reads it)."""

    path: Path
    installed: Version
    ops: tuple[tuple[str, str], ...]               # (type, opset), sorted
    first_readers: tuple[Version | None, ...]      # per op


def installed_cannot_read(xml_path: str | Path) -> UnknownToInstalled | None:
    """The operation versions of the IR file ``xml_path`` that the installed OpenVINO does not know, or None
    when it reads every one, or its version cannot be told (a local build). Facts only: ``ovpass`` says what
    to do about them."""
    try:
        installed = installed_version()
    except UnsupportedRuntimeError:
        return None
    found = tuple(sorted(unreadable_versions(xml_path, installed)))
    if not found:
        return None
    return UnknownToInstalled(Path(xml_path), installed, found, tuple(first_release_reading(t, v) for t, v in found))
