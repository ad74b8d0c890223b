"""The inputs ``ovpass check`` feeds a model: a prefill and single-token decode steps, batch 1 (or the static batch
the IR fixes).

Decoder IRs from optimum-intel take some of these inputs, recognised by name:

| input | what is fed |
|---|---|
| ``input_ids`` | seeded random tokens below the vocabulary size |
| ``inputs_embeds`` | the embeddings of those tokens, through the export's text embedding IR when it is beside the model (``openvino_text_embeddings_model.xml``); else seeded normal values × 0.02 |
| ``per_layer_inputs`` | Gemma 3n / Gemma 4: through the per-layer embedding IR (``openvino_text_embeddings_per_layer_model.xml``) when it is there; else seeded normal values, the layer count and width taken from the model's static dims, the per-layer IR's output or the folder's ``config.json`` |
| ``token_type_ids`` | zeros (text tokens) |
| ``attention_mask`` | ones over past and current tokens |
| ``position_ids`` | past length onwards, ``[1, n]`` or ``[3, 1, n]`` (M-RoPE) |
| ``beam_idx`` | zeros |

Every other input gets seeded random data of its type (floats: standard normal; integers and
booleans: 0 or 1). Dims: ``--data-shape name[d0,d1,...]`` (benchmark_app's convention) fixes them for
every step, ``?`` or ``-1`` in it leaving one automatic; automatic dims are the model's static dims,
else 1 for dim 0 (the batch) and the step's token count for the others.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import openvino as ov

from ovpasses.errors import InputError, OvpassesError
from ovpasses.app.files import io
from ovpasses.units import size_text

log = logging.getLogger(__name__)

# LLM inputs recognised by name (a greedy loop can drive a model whose inputs are these alone)
LLM_INPUTS = ("input_ids", "attention_mask", "position_ids", "beam_idx")
TEXT_EMBEDDINGS = "openvino_text_embeddings_model.xml"
PER_LAYER_EMBEDDINGS = "openvino_text_embeddings_per_layer_model.xml"
EMBEDDING_SCALE = 0.02   # the usual initialiser scale: random embeddings of a plausible size

DataShapes = dict[str, list[int | None]]


class InputUnknownError(InputError):
    """An input's dims cannot be known from the model, its folder or ``--data-shape``: a check that guessed
    them would compare two models on inputs they were never made for."""


class InputTooLargeError(InputUnknownError):
    """An input's dims, as the model or ``--data-shape`` fixes them, make a value larger than
    :data:`MAX_INPUT_BYTES`: an IR with a damaged dim, which no check can run."""


MAX_INPUT_BYTES = 2**30   # one input of one step; an LLM's are kilobytes to megabytes


def parse_data_shape(text: str | None) -> DataShapes:
    """``"input_ids[1,8],per_layer_inputs[1,?,8,16]"`` -> ``{name: [1, 8], ...}``; ``?``/``-1`` -> None."""
    if not text or not text.strip():
        return {}
    shapes: DataShapes = {}
    item = re.compile(r"\s*([^\[\],\s][^\[\]]*?)\s*\[([^\]]*)\]\s*(?:,|$)")
    position = 0
    while position < len(text):
        match = item.match(text, position)
        if match is None:
            raise OvpassesError(f"--data-shape {text!r}: expected NAME[d0,d1,...] items separated by commas, "
                                "e.g. input_ids[1,8],per_layer_inputs[1,?,8,16] (? or -1 for an automatic dim)")
        name, dims = match.group(1), match.group(2)
        try:
            shapes[name] = [None if d.strip() in ("?", "-1") else _dim(d) for d in dims.split(",")] \
                if dims.strip() else []
        except ValueError:
            raise OvpassesError(f"--data-shape {text!r}: '{name}[{dims}]' has a dim that is not a number 0 or "
                                "more, ? or -1") from None
        position = match.end()
    return shapes


def _dim(text: str) -> int:
    value = int(text.strip())
    if value < 0:
        raise ValueError(text)
    return value


@dataclass
class Embedders:
    """The export's own embedding IRs beside a language model, compiled once; None where absent."""

    text: ov.CompiledModel | None = None
    per_layer: ov.CompiledModel | None = None
    files: list[str] = field(default_factory=list)

    @classmethod
    def beside(cls, folder: Path | None, core: ov.Core, device: str = "CPU") -> "Embedders":
        """The embedding IRs in ``folder``, read and compiled; :class:`~ovpasses.errors.InputError` naming
        the file when one is damaged or OpenVINO cannot compile it."""
        found = cls()
        if folder is None:
            return found
        for attr, name in (("text", TEXT_EMBEDDINGS), ("per_layer", PER_LAYER_EMBEDDINGS)):
            if os.path.lexists(folder / name):
                model = io.read_ir(folder / name, core)
                try:
                    setattr(found, attr, core.compile_model(model, device))
                except RuntimeError as exc:
                    raise InputError(f"{folder / name}: OpenVINO reads this embedding IR but cannot compile it "
                                     f"({_last_line(exc)}); the file is damaged, export the folder again") from None
                found.files.append(name)
        return found

    def run(self, which: str, ids: np.ndarray) -> np.ndarray:
        """The embeddings of ``ids`` through the ``text`` or ``per_layer`` IR."""
        compiled = getattr(self, which)
        try:
            return np.array(compiled({compiled.inputs[0]: ids})[compiled.outputs[0]], copy=True)
        except RuntimeError as exc:
            name = TEXT_EMBEDDINGS if which == "text" else PER_LAYER_EMBEDDINGS
            raise InputError(f"{name}: the embedding IR beside the model fails on token ids ({_last_line(exc)}); "
                             "the file is damaged, export the folder again") from None


def _last_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1][:200] if lines else type(exc).__name__


@dataclass
class InputSource:
    """Where the inputs of one model come from: its folder (configs, embedding IRs) and ``--data-shape``."""

    folder: Path | None = None
    data_shapes: DataShapes = field(default_factory=dict)
    embedders: Embedders = field(default_factory=Embedders)

    def config_value(self, *keys: str) -> int | None:
        """The first of ``keys`` in the folder's config.json, top level or under ``text_config``."""
        if self.folder is None or not (self.folder / "config.json").is_file():
            return None
        try:
            config = json.loads((self.folder / "config.json").read_text())
        except ValueError:
            return None
        scopes = [config] if isinstance(config, dict) else []
        scopes += [config["text_config"]] if scopes and isinstance(config.get("text_config"), dict) else []
        for scope in scopes:
            for key in keys:
                value = scope.get(key)
                if isinstance(value, int) and not isinstance(value, bool):
                    if value < 1:
                        raise InputError(f"{self.folder / 'config.json'}: {key} is {value}, not a positive number; "
                                         "the file is damaged, copy or export it again")
                    return value
        return None


def _static(pshape: ov.PartialShape, index: int) -> int | None:
    return pshape[index].get_length() if pshape.rank.is_static and pshape[index].is_static else None


def make_feeds(model: ov.Model, steps: int, prefill: int = 8, seed: int = 0,
               source: InputSource | None = None, prefill_chunk: int | None = None) -> list[dict[str, np.ndarray]]:
    """Inputs for a prefill of ``prefill`` tokens then ``steps`` single-token decode steps, batch 1 (or the IR's static
    batch).
    ``prefill_chunk`` splits the prefill into inferences of at most that many tokens (None: one).

    See the module's table. Raises :class:`OvpassesError` for a ``--data-shape`` name the model does
    not take, or a shape whose rank differs from the input's.
    """
    source = source or InputSource()
    all_names = {n for param in model.inputs for n in param.get_names()}
    unknown = sorted(set(source.data_shapes) - all_names)
    if unknown:
        raise OvpassesError(f"--data-shape names {', '.join(unknown)}, which the model does not take; its inputs: "
                            f"{', '.join(sorted(p.get_any_name() for p in model.inputs))}")
    _check_static_sizes(model)
    rng = np.random.default_rng(seed)
    last = model.outputs[0].get_partial_shape()
    vocab = (_static(last, last.rank.get_length() - 1) if last.rank.is_static else None) \
        or source.config_value("vocab_size") or 100
    feeds: list[dict[str, np.ndarray]] = []
    past = 0
    chunk = prefill if prefill_chunk is None else prefill_chunk
    for n in [min(chunk, prefill - start) for start in range(0, prefill, chunk)] + [1] * steps:
        ids = rng.integers(0, vocab, size=(1, n)).astype(np.int64)
        feed: dict[str, np.ndarray] = {}
        for param in model.inputs:
            names, pshape = param.get_names(), param.get_partial_shape()
            given = next((source.data_shapes[x] for x in sorted(names) if x in source.data_shapes), None)
            if given is not None and pshape.rank.is_static and len(given) != pshape.rank.get_length():
                raise OvpassesError(f"--data-shape {param.get_any_name()}: the input has rank "
                                    f"{pshape.rank.get_length()} ({pshape}), not {len(given)}")
            kind = next((k for k in KNOWN if k in names), None)
            dtype = param.get_element_type().to_dtype()
            value = _value(param.get_any_name(), kind, pshape, dtype, given, n, past, ids, vocab, rng, source)
            feed[param.get_any_name()] = np.asarray(value).astype(dtype)
        feeds.append(feed)
        past += n
    return feeds


def _check_static_sizes(model: ov.Model) -> None:
    """:class:`InputTooLargeError` when the dims an input has in the IR make it larger than
    :data:`MAX_INPUT_BYTES` whatever its dynamic dims are: compiling such a model takes memory by the
    gigabyte (measured: a static attention_mask of 2**28 tokens, 4 GiB for tiny8), so it is not run."""
    for param in model.inputs:
        pshape = param.get_partial_shape()
        if pshape.rank.is_dynamic:
            continue
        least = math.prod(d.get_length() if d.is_static else 1 for d in pshape)
        size = least * param.get_element_type().size
        if size > MAX_INPUT_BYTES:
            raise InputTooLargeError(f"input {param.get_any_name()} is {pshape} in the IR, at least {size_text(size)}, "
                                     f"more than {size_text(MAX_INPUT_BYTES)} (a damaged dim?): not run; export the "
                                     "IR again")


KNOWN = ("input_ids", "attention_mask", "position_ids", "beam_idx", "token_type_ids", "inputs_embeds",
         "per_layer_inputs")


def _shape(pshape: ov.PartialShape, given: list[int | None] | None, n: int) -> list[int]:
    """The shape of one step's input: given dims, else static dims, else 1 (dim 0) or the token count."""
    rank = pshape.rank.get_length() if pshape.rank.is_static else (len(given) if given else 2)
    dims = []
    for i in range(rank):
        fixed = given[i] if given is not None and i < len(given) else None
        static = _static(pshape, i) if pshape.rank.is_static else None
        dims.append(fixed if fixed is not None else static if static is not None else (1 if i == 0 else n))
    return dims


def _needed(kind: str, what: str, value: int | None, form: str) -> int:
    if value is None:
        raise InputUnknownError(f"cannot make {kind}: its {what} is dynamic in the IR and neither the export's "
                                f"embedding IRs nor a config.json are beside it; check the export folder, or give "
                                f"--data-shape {kind}{form}")
    return value


def _value(name: str, kind: str | None, pshape: ov.PartialShape, dtype: np.dtype, given: list[int | None] | None, n: int,
           past: int, ids: np.ndarray, vocab: int, rng: np.random.Generator, source: InputSource) -> np.ndarray:
    """One step's value of an input: recognised kinds as the module's table says, others random."""
    rank = pshape.rank.get_length() if pshape.rank.is_static else None
    if given is None:   # the shape a recognised input has in an LLM, where the model leaves it open; the batch is
        # the model's where the IR fixes it (a model reshaped to a static batch), else 1
        at = 1 if kind == "position_ids" and rank == 3 else 0
        batch = (_static(pshape, at) if rank is not None and rank > at else None) or 1
        if kind in ("input_ids", "token_type_ids"):
            given = [batch, n]
        elif kind == "attention_mask":
            given = [batch, past + n]
        elif kind == "position_ids":
            given = [3, batch, n] if rank == 3 else [batch, n]   # [3, batch, seq] for M-RoPE
        elif kind == "beam_idx":
            given = [batch]
        elif kind == "inputs_embeds" and rank == 3:
            if source.embedders.text is not None:
                return source.embedders.run("text", ids)
            given = [batch, n, _needed(kind, "width", _static(pshape, 2) or source.config_value("hidden_size"),
                                       "[1,?,WIDTH]")]
        elif kind == "per_layer_inputs" and rank == 4:
            if source.embedders.per_layer is not None:
                return source.embedders.run("per_layer", ids)
            given = [batch, n,
                     _needed(kind, "layer count", _static(pshape, 2) or source.config_value("num_hidden_layers"),
                             "[1,?,LAYERS,WIDTH]"),
                     _needed(kind, "width", _static(pshape, 3) or source.config_value("hidden_size_per_layer_input"),
                             "[1,?,LAYERS,WIDTH]")]
    shape = _shape(pshape, given, n)
    size = math.prod(shape) * np.dtype(dtype).itemsize
    if size > MAX_INPUT_BYTES:
        raise InputTooLargeError(f"cannot make input {name}: its shape {shape} takes {size_text(size)}, "
                                 f"more than {size_text(MAX_INPUT_BYTES)} (a damaged dim in the IR?); give "
                                 f"--data-shape, or export the IR again")
    if kind == "input_ids":
        return ids if shape == list(ids.shape) else rng.integers(0, vocab, size=shape)
    if kind == "attention_mask":
        return np.ones(shape)
    if kind == "position_ids":
        return np.broadcast_to(np.arange(past, past + shape[-1]), shape).copy()
    if kind in ("beam_idx", "token_type_ids"):
        return np.zeros(shape)
    if kind in ("inputs_embeds", "per_layer_inputs"):
        return rng.standard_normal(shape) * EMBEDDING_SCALE
    return rng.standard_normal(shape) if np.issubdtype(dtype, np.floating) else rng.integers(0, 2, size=shape)
