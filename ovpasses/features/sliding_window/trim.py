"""Trim the sliding-window KV caches of a model rewritten with ``sliding_window="trimmable"``, from the program
that runs it.

``rewrite(model, sliding_window="trimmable")`` leaves each sliding-window cache inside the CPU plugin's fused
stateful SDPA kernel and makes the model exact whatever number ``P >= min(T, W - 1)`` of most recent positions the
cache holds (:class:`~ovpasses.passes.TrimmableSlidingWindowKVCache`). The runtime never drops positions by
itself: the program does, through this helper, which cuts each such state back to its last ``keep`` positions
(``W - 1`` plus the rewrite's margin) with ``query_state`` / ``set_state``. Trimming every ``every`` steps holds
at most ``keep + every - 1`` positions between trims (plus a prefill chunk): larger ``every`` copies less often.

With ov.Core::

    import openvino as ov, ovpasses
    from ovpasses.features.sliding_window.trim import SlidingWindowTrimmer

    core = ov.Core()
    model = core.read_model("openvino_model.xml")
    ovpasses.rewrite(model, sliding_window="trimmable")
    request = core.compile_model(model, "CPU").create_infer_request()
    trimmer = SlidingWindowTrimmer.for_model(model, request, every=64)
    for chunk in prompt_chunks:                # input_ids, attention_mask, position_ids, beam_idx as usual:
        request.infer(inputs_for(chunk))       # the positions stay absolute, the mask the whole context's
        trimmer.trim()                         # after each prefill chunk: back to the last keep positions
    # or, for a program that has the whole prompt's inputs: trimmer.prefill(inputs_for(prompt), chunk=1024)
    while decoding:
        request.infer(inputs_for(next_token))
        trimmer.step()                         # trims once every `every` calls

With optimum-intel (``OVModelForCausalLM`` keeps its request in ``.request`` once compiled, its model in
``.model``; it counts the past length itself, so a trimmed state does not disturb its inputs)::

    from optimum.intel import OVModelForCausalLM
    ov_model = OVModelForCausalLM.from_pretrained("rewritten_folder", compile=True)   # an IR rewritten as above
    SlidingWindowTrimmer.attach(ov_model, every=64)   # trims after every forward call, every 64 calls
    ov_model.generate(**inputs, max_new_tokens=512)
    # prefill_chunk=1024: generate feeds a long prompt in chunks, trimmed after each (transformers' chunked prefill)

A prompt fed whole is held whole until the trim after it: to keep the sliding caches small during a long prompt,
feed it in chunks (:meth:`SlidingWindowTrimmer.prefill`, or ``attach(..., prefill_chunk=N)``).

Not for a client that rolls the cache back (openvino_genai's chat history, speculative decoding): a trimmed
cache cannot give back positions it no longer holds beyond the margin; openvino_genai does not run this helper,
so with it the model behaves as unmodified. A step past what a cache holds fails the inference; on one inference
thread a synchronous ``request.infer`` does not raise that (openvino 2025.2 - 2026.4: docs/runtimes.md), so
a program that may run there starts each inference and waits for it (``request.start_async(inputs)``,
``request.wait()``), as :meth:`SlidingWindowTrimmer.prefill` does.
"""

from __future__ import annotations

import ctypes
import functools
import ctypes.util
import logging
import math
from collections.abc import Mapping

import numpy as np
import openvino as ov

from ovpasses._ov import QUERY_PORT, infer, is_sdpa
from ovpasses.errors import OvpassesError
from ovpasses.features.sliding_window.caches import trimmable_axes, trimmable_caches

log = logging.getLogger(__name__)

SEQUENCE_AXIS = 2   # [batch, KV heads, sequence, head size]: the layout optimum-intel's stateful exports write
M_MMAP_THRESHOLD = -3   # glibc mallopt parameter
MMAP_THRESHOLD = 1 << 20
# A chunk fed after a past runs the CPU plugin's single-token kernel, which holds its f32 scores for all the chunk's
# rows at once: query heads x rows x keys x 4 bytes, as large as a full layer's keys (2.4 GiB for 1,000 rows at 40
# heads and 16k keys). :meth:`SlidingWindowTrimmer.prefill` shortens such chunks to keep it under SCORE_BUDGET, at
# least MIN_ROWS rows (record 2026-11-27-prefill-score-budget.md).
SCORE_BUDGET = 256 << 20
MIN_ROWS = 128


def _fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at 1 MiB (process-wide), so that blocks of 1 MiB and more are returned to the
    system when freed. Why: reading a fused cache (``state.state``) converts it into a new f32 tensor, and glibc's
    default raises its threshold to the size of the largest block freed, after which such blocks stay in the heap:
    measured on 2026.4.1 at Gemma 3 widths (20 sliding states, 3,000 tokens in chunks of 1,000, plugin defaults),
    the trims left the process' peak RSS 184 MiB above the untrimmed one's (2,435 / 2,251 MiB); with the threshold
    fixed, 45 MiB below it (2,206 MiB).
    Returns whether glibc took it."""
    name = ctypes.util.find_library("c")
    try:
        return bool(name) and ctypes.CDLL(name).mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) == 1
    except (OSError, AttributeError):
        return False


class SlidingWindowTrimmer:
    """Cuts the named states of ``request`` back to their last ``keep[variable id]`` positions.

    ``every``: :meth:`step` trims on every ``every``-th call (1: every call). :meth:`trim` trims now. Each returns
    the number of states it cut. ``self.trims`` counts the states cut so far. The trimmer reads a state only when
    it holds more than its keep, which it knows from the request's ``attention_mask`` (the positions seen) and the
    positions seen at its last trim of that state.

    ``axis``: the states' sequence axis, one for all (2: ``[batch, KV heads, sequence, head size]``, as optimum-intel
    writes them) or per variable id (a missing id takes 2); :meth:`for_model` reads each cache's from the model.

    ``release_memory`` (default True) fixes glibc's mmap threshold for the whole process
    (:func:`_fix_mmap_threshold` says why and what it measured); False leaves malloc as it is, which trades memory
    for time: at Gemma 3 widths, a 16k prompt in chunks of 500 through :meth:`prefill`, 63.7 s and 2,871 MiB peak
    against 69.9-70.9 s and 2,421 MiB (``benchmarks/records/2026-11-26-gemma3-16k-prefill.md``)."""

    def __init__(self, request: ov.InferRequest, keep: Mapping[str, int], every: int = 1,
                 axis: int | Mapping[str, int] = SEQUENCE_AXIS, release_memory: bool = True,
                 query_heads: int | None = None) -> None:
        if not keep:
            raise OvpassesError("SlidingWindowTrimmer: no trimmable cache (rewrite the model with "
                                "sliding_window='trimmable' first)")
        if not isinstance(every, int) or every < 1:
            raise OvpassesError(f"SlidingWindowTrimmer: every must be a whole number >= 1, not {every!r}")
        self.request, self.keep, self.every = request, dict(keep), every
        self.axes = {vid: (axis.get(vid, SEQUENCE_AXIS) if isinstance(axis, Mapping) else axis) for vid in self.keep}
        self.axis = SEQUENCE_AXIS if isinstance(axis, Mapping) else axis   # 0.1.0's attribute: the axis given for all
        self.query_heads = query_heads   # the most query heads of an SDPA: what prefill's score budget needs
        self.calls = 0
        self.trims = 0
        self._trimmed_at: dict[str, int] = {}   # variable id -> positions seen when it was last cut to its keep
        if release_memory and _fix_mmap_threshold():
            log.info("SlidingWindowTrimmer: glibc's mmap threshold fixed at %d bytes (process-wide)", MMAP_THRESHOLD)

    @classmethod
    def for_model(cls, model: ov.Model, request: ov.InferRequest, every: int = 1,
                  release_memory: bool = True) -> SlidingWindowTrimmer:
        """A trimmer for ``request`` of ``model`` (rewritten with ``sliding_window="trimmable"``, or read from an
        IR so written: the caches and their keep are in its runtime info); ``release_memory`` as for the class."""
        return cls(request, trimmable_caches(model), every, axis=trimmable_axes(model), release_memory=release_memory,
                   query_heads=query_heads(model))

    @classmethod
    def attach(cls, ov_model, every: int = 1, prefill_chunk: int | None = None,
               score_budget: int | None = SCORE_BUDGET) -> SlidingWindowTrimmer:
        """Trim after ``forward`` calls of an optimum-intel ``OVModelForCausalLM`` (stateful, compiled): after each
        call that fed several tokens (a prompt), and every ``every`` calls otherwise. Wraps its ``forward``; the
        trimmer follows the request the model holds when each call ends.

        ``prefill_chunk``: ``generate`` feeds a prompt longer than that in chunks of ``prefill_chunk`` tokens,
        trimmed after each, so that the sliding caches never hold a whole prompt (a whole prompt is held whole
        until the trim after it). It is transformers' own chunked prefill (``GenerationConfig.prefill_chunk_size``,
        set on the model's generation config; ``generate`` is wrapped only to pass ``past_key_values=None``, the
        key transformers asks for before it chunks); the logits of the prompt's last position, all that greedy or
        sampled decoding reads, are the last chunk's. A ``generation_config`` passed to ``generate`` replaces the
        model's: set ``prefill_chunk_size`` in it. A direct ``forward`` call is not cut into chunks of ``prefill_chunk``
        (the score budget below still applies to it).

        ``score_budget`` (bytes; None: none), as for :meth:`prefill`: a ``forward`` call that feeds several tokens
        after a past (a chunk after the first, or a later turn's prompt) is fed to the model in pieces of the rows
        whose single-token kernel scores fit, trimmed after each; the call returns the last piece's output (its
        logits cover the last piece's positions, the last one the call's). A call with positional arguments other
        than ``input_ids``, or an input of the call's length it does not know how to split, is fed whole."""
        if getattr(ov_model, "request", None) is None:
            ov_model.compile()
        if not getattr(ov_model, "stateful", True) or getattr(ov_model, "request", None) is None:
            raise OvpassesError("SlidingWindowTrimmer.attach: the model is not a compiled stateful OVModelForCausalLM")
        heads = query_heads(ov_model.model)
        budget = _score_budget("SlidingWindowTrimmer.attach", heads, score_budget)
        trimmer = cls(ov_model.request, trimmable_caches(ov_model.model), every, axis=trimmable_axes(ov_model.model),
                      query_heads=heads)
        if prefill_chunk is not None:
            _chunk_generate(ov_model, prefill_chunk)
        forward = ov_model.forward

        @functools.wraps(forward)   # transformers' generate reads forward's signature
        def forward_and_trim(*args, **kwargs):
            pieces = _budget_pieces(args, kwargs, budget)
            for piece in pieces[:-1]:
                forward(**piece)
                trimmer.request = ov_model.request
                trimmer.trim()
            out = forward(*args, **kwargs) if len(pieces) == 1 else forward(**pieces[-1])
            trimmer.request = ov_model.request
            ids = kwargs.get("input_ids", args[0] if args else None)
            if ids is not None and len(getattr(ids, "shape", ())) == 2 and ids.shape[1] > 1:
                trimmer.trim()
            else:
                trimmer.step()
            return out

        ov_model.forward = forward_and_trim
        return trimmer

    def prefill(self, inputs: Mapping[str, np.ndarray], chunk: int, first: int | None = None,
                score_budget: int | None = SCORE_BUDGET) -> int:
        """Feed a prompt to the request (``inputs`` as for one ``request.infer`` of the whole prompt) in chunks of
        ``chunk`` tokens, trimming after each, so that the sliding caches never hold the whole prompt. The tokens'
        inputs (``input_ids``, ``inputs_embeds``, ``token_type_ids``: axis 1; ``position_ids``: the last axis) are
        split, ``attention_mask`` is cut to the past and the tokens fed so far, any other input (``beam_idx``) is
        given whole to each chunk. Afterwards the request's outputs are the last chunk's: its logits cover the last
        chunk's positions, the last one the prompt's (measured exact: tokens equal to the unmodified model fed the
        whole prompt, ``tests/test_sliding_window_trimmable.py``). Returns the number of chunks.

        ``first``: the first chunk's length (default ``chunk``). The CPU plugin runs a chunk into caches that hold no
        past through its tiled first-prompt kernel and every later chunk through its single-token kernel, at 3.5-6x
        the time per query-key pair (``docs/runtimes.md``): a longer first chunk takes more of the prompt the fast
        way and holds more memory while it runs (Gemma 3 4B widths, 16k, chunks of 500: a first chunk of 4,096
        took 0.89-0.94x the time and 1.3x the context memory of a first chunk of 500,
        ``benchmarks/records/2026-11-27-first-chunk.md``).

        ``score_budget`` (bytes; None: none): a chunk fed after a past (every chunk but a first one into empty
        caches) is cut shorter than ``chunk`` where the single-token kernel's f32 scores, query heads x rows x keys
        x 4 bytes with keys all the positions a full layer holds, would pass it (at least ``MIN_ROWS`` rows): the
        chunks shrink as the context grows. Measured at EXAONE 4 32B widths (40 query heads), 16k in chunks of
        1,000 against 250: 5,105 against 3,114 MiB peak, the same prefill time. Needs the query heads
        (:meth:`for_model` reads them; a trimmer made directly without ``query_heads`` feeds fixed chunks).

        For ov.Core programs. optimum-intel: :meth:`attach` with ``prefill_chunk``. openvino_genai never runs this
        helper: its stateful path feeds the prompt whole and holds it whole (the model computes as unmodified)."""
        for name, value in (("chunk", chunk), ("first", chunk if first is None else first)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise OvpassesError(f"SlidingWindowTrimmer.prefill: {name} must be a whole number >= 1, not {value!r}")
        tokens = next((name for name in ("input_ids", "inputs_embeds") if name in inputs), None)
        if tokens is None:
            raise OvpassesError("SlidingWindowTrimmer.prefill: the inputs have neither input_ids nor inputs_embeds")
        length = np.shape(inputs[tokens])[1]
        mask = inputs.get("attention_mask")
        past = 0 if mask is None else np.shape(mask)[-1] - length
        split_axis = {"input_ids": 1, "inputs_embeds": 1, "token_type_ids": 1, "position_ids": -1}
        for name, value in inputs.items():   # refuse an input of the prompt's length it would not know how to split
            if name not in split_axis and name != "attention_mask" and np.ndim(value) >= 2 and \
                    np.shape(value)[1] == length and length > 1:
                raise OvpassesError(f"SlidingWindowTrimmer.prefill: input {name!r} has the prompt's length "
                                    f"({length}); it is not known how to split it")
        budget = _score_budget("SlidingWindowTrimmer.prefill", self.query_heads, score_budget)
        bounds = chunk_bounds(length, chunk, first, past=past, score_budget=budget)
        count = 0
        for begin, end in zip(bounds, bounds[1:]):
            fed = {}
            for name, value in inputs.items():
                if name == "attention_mask":
                    fed[name] = np.asarray(value)[..., :past + end]
                elif name in split_axis:
                    index = [slice(None)] * np.ndim(value)
                    index[split_axis[name]] = slice(begin, end)
                    fed[name] = np.ascontiguousarray(np.asarray(value)[tuple(index)])
                else:
                    fed[name] = value
            infer(self.request, fed)
            self.trim()
            count += 1
        return count

    def mark_trimmed(self, seen: int) -> None:
        """Record that every trimmable state holds its keep after ``seen`` positions (a program that set the
        states itself, as ``benchmarks/probes/sliding_window_decode.py`` does), so that :meth:`trim` does not read them
        until they have grown past it."""
        self._trimmed_at = {vid: seen for vid in self.keep}

    def step(self) -> int:
        """Count one inference; trim on every ``every``-th."""
        self.calls += 1
        return self.trim() if self.calls % self.every == 0 else 0

    def _seen(self) -> int | None:
        """Positions the request has seen (its attention_mask's length), or None without that input."""
        try:
            return self.request.get_tensor("attention_mask").shape[-1]
        except RuntimeError:
            return None

    def trim(self) -> int:
        """Cut every trimmable state longer than its keep back to its last keep positions, now."""
        cut = 0
        seen = self._seen()
        for state in self.request.query_state():
            keep = self.keep.get(state.name)
            if keep is None:
                continue
            if seen is not None:
                last = self._trimmed_at.get(state.name)
                held = seen if last is None or last > seen else keep + seen - last   # a reset request starts over
                if held <= keep:
                    continue
            value = state.state
            axis = self.axes[state.name]
            length = value.shape[axis]
            if length <= keep:
                continue
            data = np.asarray(value.data)
            index = [slice(None)] * data.ndim
            index[axis] = slice(length - keep, length)
            kept = np.array(data[tuple(index)], order="C")   # a copy: the whole state is let go before it is set
            del value, data
            state.state = ov.Tensor(kept, shared_memory=True)   # set_state copies it in; no third copy on the way
            del kept
            if seen is not None:
                self._trimmed_at[state.name] = seen
            cut += 1
        self.trims += cut
        return cut


def chunk_bounds(length: int, chunk: int, first: int | None = None, past: int = 0,
                 score_budget: tuple[int, int] | None = None) -> list[int]:
    """The positions where a prompt of ``length`` tokens is cut: a first chunk of ``first`` (default ``chunk``)
    tokens, then chunks of ``chunk``; ``[0, 7, 14, 20]`` for 20 tokens by 7. Consecutive pairs are the chunks.

    ``score_budget`` = ``(query heads, bytes)``: a chunk that starts after ``past + begin > 0`` positions is cut to
    :func:`budget_rows` rows where that is fewer (the first chunk too when ``past > 0``)."""
    first = chunk if first is None else first
    if score_budget is None:
        return [0, *range(min(first, length), length, chunk), length] if length else [0]
    heads, budget = score_budget
    bounds = [0]
    while bounds[-1] < length:
        begin = bounds[-1]
        rows = first if begin == 0 else chunk
        if past + begin > 0:
            rows = budget_rows(past + begin, heads, rows, budget)
        bounds.append(min(length, begin + rows))
    return bounds


def _score_budget(where: str, heads: int | None, score_budget: int | None) -> tuple[int, int] | None:
    """``(query heads, bytes)`` for :func:`chunk_bounds`, or None without a budget or without the heads; refuses a
    budget that is not a whole number of bytes."""
    if score_budget is not None and (not isinstance(score_budget, int) or isinstance(score_budget, bool)
                                     or score_budget < 1):
        raise OvpassesError(f"{where}: score_budget must be a whole number of bytes >= 1 or None, not {score_budget!r}")
    return (heads, score_budget) if heads and score_budget else None


def _budget_pieces(args: tuple, kwargs: dict, budget: tuple[int, int] | None) -> list[dict]:
    """The keyword arguments of the ``forward`` calls that feed one call's tokens under ``budget`` (:func:`chunk_bounds`
    after the past the call's ``attention_mask`` says), or ``[kwargs]`` where the call is fed whole: no budget, no past
    (``past_key_values`` empty: a first call into reset caches), one token, positional arguments, no 2-D
    ``attention_mask``, or an input of the call's length other than the ones split here."""
    ids, mask = kwargs.get("input_ids"), kwargs.get("attention_mask")
    if budget is None or args or not kwargs.get("past_key_values") or ids is None or mask is None \
            or len(getattr(ids, "shape", ())) != 2 or len(getattr(mask, "shape", ())) != 2:
        return [kwargs]
    length = ids.shape[1]
    past = mask.shape[1] - length
    split = {"input_ids", "position_ids", "token_type_ids"}
    if length < 2 or past < 0 or any(name not in split | {"attention_mask"} and len(getattr(value, "shape", ())) >= 2
                                     and value.shape[1] == length for name, value in kwargs.items()):
        return [kwargs]
    bounds = chunk_bounds(length, length, past=past, score_budget=budget)
    if len(bounds) == 2:
        return [kwargs]
    pieces = []
    for begin, end in zip(bounds, bounds[1:]):
        piece = dict(kwargs, input_ids=ids[:, begin:end], attention_mask=mask[:, :past + end])
        for name in ("position_ids", "token_type_ids"):
            if kwargs.get(name) is not None:
                piece[name] = kwargs[name][..., begin:end]
        position = kwargs.get("cache_position")   # transformers' absolute positions of the call's tokens, 1-D
        if position is not None and len(getattr(position, "shape", ())) == 1 and position.shape[0] == length:
            piece["cache_position"] = position[begin:end]
        pieces.append(piece)
    return pieces


def budget_rows(keys_before: int, heads: int, chunk: int, budget: int) -> int:
    """The rows, at most ``chunk`` and at least ``min(chunk, MIN_ROWS)``, of a chunk fed after ``keys_before``
    positions whose single-token kernel scores, ``heads x rows x (keys_before + rows)`` f32, fit ``budget`` bytes."""
    pairs = budget / (4 * heads)
    rows = int((math.sqrt(keys_before * keys_before + 4 * pairs) - keys_before) / 2)
    return max(min(chunk, MIN_ROWS), min(chunk, rows))


def query_heads(model: ov.Model) -> int | None:
    """The most query heads an SDPA of ``model`` reads (``[batch, heads, rows, size]`` queries with a static heads
    dimension), or None where none says."""
    heads = []
    for node in model.get_ordered_ops():
        if not is_sdpa(node):
            continue
        shape = node.get_input_partial_shape(QUERY_PORT)
        if shape.rank.is_static and shape.rank.get_length() == 4 and shape[1].is_static:
            heads.append(shape[1].get_length())
    return max(heads) if heads else None


def _chunk_generate(ov_model, chunk: int) -> None:
    """Make ``ov_model.generate`` prefill in chunks of ``chunk`` tokens (transformers' ``prefill_chunk_size``)."""
    if not isinstance(chunk, int) or chunk < 1:
        raise OvpassesError(f"SlidingWindowTrimmer.attach: prefill_chunk must be a whole number >= 1, not {chunk!r}")
    config = getattr(ov_model, "generation_config", None)
    if config is None or not hasattr(config, "prefill_chunk_size"):
        raise OvpassesError("SlidingWindowTrimmer.attach: prefill_chunk needs transformers' chunked prefill "
                            "(GenerationConfig.prefill_chunk_size), which this transformers does not have")
    config.prefill_chunk_size = chunk
    generate = ov_model.generate

    @functools.wraps(generate)
    def generate_chunked(*args, **kwargs):
        kwargs.setdefault("past_key_values", None)   # transformers chunks only with the key present
        return generate(*args, **kwargs)

    ov_model.generate = generate_chunked


__all__ = ["SlidingWindowTrimmer", "budget_rows", "chunk_bounds", "query_heads"]
