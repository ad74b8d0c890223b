"""Run a stateful LLM IR the way openvino_genai's continuous batching does, with ``ov.Core`` alone.

openvino_genai converts the model with ``SDPAToPagedAttention`` when it loads it (what
``openvino._offline_transformations.paged_attention_transformation`` runs) and then feeds the
PagedAttention inputs itself. This module does the same for one sequence, so that a test can look at
what the converter made (:func:`to_paged`, :func:`paged_attention_inputs`) and at the numbers the
plugin's PagedAttention computes (:class:`PagedSequence`), without genai's scheduler in between.

The inputs, from openvino's PagedAttention specification, for a sequence of ``past`` cached tokens
and ``n`` new ones: ``input_ids`` and ``position_ids`` [n]; ``past_lens`` [1] = past;
``subsequence_begins`` [2] = [0, n]; ``block_indices`` [blocks] and ``block_indices_begins`` [2] =
[0, blocks], the cache blocks that hold the ``past + n`` tokens; ``max_context_len`` = past + n; and
per layer ``key_cache.i`` / ``value_cache.i``, allocated here with the shape the compiled model asks
for (``[blocks, Hkv, block size, head size]`` on CPU since 2026.0; older releases lay it out otherwise
and are not supported here).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov

PA_TYPE = "PagedAttentionExtension"
PA_KEY_CACHE, PA_VALUE_CACHE, PA_SCALE, PA_SLIDING_WINDOW = 3, 4, 9, 10


def to_paged(model: ov.Model) -> ov.Model:
    """Convert ``model`` in place as openvino_genai does for continuous batching; return it."""
    from openvino._offline_transformations import paged_attention_transformation

    paged_attention_transformation(model, False, False)   # positional: the keywords differ by release
    return model


def _evaluate(output: ov.Output):
    """The value of a constant-foldable ``output`` (a sliding_window sub-graph, for example)."""
    node = output.get_node()
    if node.get_type_name() == "Constant":
        return node.get_data().tolist()
    from openvino import opset13

    compiled = ov.Core().compile_model(ov.Model([opset13.result(output)], [], "value"), "CPU")
    return compiled({})[0].tolist()


@dataclass(frozen=True)
class PagedAttentionInputs:
    """What the converter gave one PagedAttention node."""

    name: str
    key_cache: str
    value_cache: str
    scale: float
    sliding_window: int


def paged_attention_inputs(model: ov.Model) -> list[PagedAttentionInputs]:
    """Per PagedAttention node of a converted ``model``, in topological order: its caches, scale and
    sliding window (sub-graphs evaluated)."""
    out = []
    for node in model.get_ordered_ops():
        if node.get_type_name() == PA_TYPE:
            out.append(PagedAttentionInputs(
                node.get_friendly_name(),
                node.input_value(PA_KEY_CACHE).get_node().get_friendly_name(),
                node.input_value(PA_VALUE_CACHE).get_node().get_friendly_name(),
                float(_evaluate(node.input_value(PA_SCALE))), int(_evaluate(node.input_value(PA_SLIDING_WINDOW)))))
    return out


class PagedSequence:
    """One sequence through a compiled PagedAttention model: :meth:`feed` new tokens, get their outputs."""

    def __init__(self, compiled: ov.CompiledModel, blocks: int = 8) -> None:
        self.compiled = compiled
        self.request = compiled.create_infer_request()
        self.caches = {}
        for port in compiled.inputs:
            name = port.get_any_name()
            if name.startswith(("key_cache.", "value_cache.")):
                dims = list(port.get_partial_shape())
                if len(dims) != 4 or not all(d.is_static for d in dims[1:]):
                    raise ValueError(f"{name}: cache shape {port.get_partial_shape()} is not [blocks, Hkv, "
                                     "block size, head size] (openvino older than 2026.0?)")
                self.caches[name] = np.zeros([blocks] + [d.get_length() for d in dims[1:]],
                                             port.get_element_type().to_dtype())
        self.block_size = next(iter(self.caches.values())).shape[2]
        self.blocks = blocks
        self.past = 0

    def feed(self, tokens: list[int]) -> np.ndarray:
        """Outputs (first model output, one row per new token) for ``tokens`` appended to the sequence."""
        n, total = len(tokens), self.past + len(tokens)
        used = -(-total // self.block_size)
        if used > self.blocks:
            raise ValueError(f"{total} tokens need {used} cache blocks; PagedSequence has {self.blocks}")
        feed = {"input_ids": np.array(tokens, np.int64), "position_ids": np.arange(self.past, total, dtype=np.int64),
                "past_lens": np.array([self.past], np.int32), "subsequence_begins": np.array([0, n], np.int32),
                "block_indices": np.arange(used, dtype=np.int32), "block_indices_begins": np.array([0, used], np.int32),
                "max_context_len": np.array(total, np.int32)}
        feed.update({name: ov.Tensor(cache, shared_memory=True) for name, cache in self.caches.items()})
        result = self.request.infer(feed)
        self.past = total
        out = result[self.compiled.output(0)]
        return np.array(out, copy=True).reshape(n, -1)


def paged_greedy(compiled: ov.CompiledModel, prompt: list[int], steps: int) -> list[int]:
    """Greedy tokens from a compiled PagedAttention LLM (first output: logits)."""
    sequence = PagedSequence(compiled, blocks=-(-(len(prompt) + steps) // 16) + 1)
    tokens, out = list(prompt), []
    while len(out) < steps:
        logits = sequence.feed(tokens[sequence.past:])
        out.append(int(np.argmax(logits[-1])))
        tokens.append(out[-1])
    return out


def heads_stack_paged_outputs(spec, tokens: list[int], prefill: int, config: dict | None = None,
                              model: ov.Model | None = None) -> np.ndarray:
    """Outputs of :func:`testkit.graphs.build_heads_stack` (or of ``model``, that stack rewritten)
    converted to PagedAttention, for ``tokens``: a prefill of the first ``prefill``, then one token at a
    time; one row per token."""
    from testkit.graphs import build_heads_stack

    model = build_heads_stack(spec) if model is None else model
    compiled = ov.Core().compile_model(to_paged(model), "CPU", config or {})
    sequence = PagedSequence(compiled)
    return np.concatenate([sequence.feed(tokens[:prefill])] + [sequence.feed([t]) for t in tokens[prefill:]])
