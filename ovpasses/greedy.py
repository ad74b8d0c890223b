"""One greedy decoding loop over a compiled stateful LLM IR (optimum-intel's inputs), batch 1."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import openvino as ov

from ovpasses.check_inputs import LLM_INPUTS
from ovpasses.errors import OvpassesError


def greedy_generate(compiled: ov.CompiledModel, prompt_ids: Iterable[int], max_new_tokens: int,
                    eos_token_id: int | None = None) -> list[int]:
    """Greedy-decode ``max_new_tokens`` tokens (batch 1) from a stateful optimum-intel decoder IR.

    The inputs must be ``input_ids`` and a subset of ``attention_mask``, ``position_ids`` and
    ``beam_idx``; the first output is ``logits [batch, seq, vocab]``. The first call feeds the whole
    prompt, each later call one token. Stops early only if ``eos_token_id`` is given and generated.
    """
    names = {name for port in compiled.inputs for name in port.get_names()}
    unknown = names - set(LLM_INPUTS)
    if unknown or "input_ids" not in names:
        raise OvpassesError(f"greedy decoding needs input_ids and a subset of {', '.join(LLM_INPUTS[1:])}; "
                            f"the model has {', '.join(sorted(names))}")
    request = compiled.create_infer_request()
    request.reset_state()
    step_ids = np.array([[int(t) for t in prompt_ids]], np.int64)
    past = 0
    out: list[int] = []
    for _ in range(max_new_tokens):
        n = step_ids.shape[1]
        feed = {"input_ids": step_ids}
        if "attention_mask" in names:
            feed["attention_mask"] = np.ones((1, past + n), np.int64)
        if "position_ids" in names:
            feed["position_ids"] = np.arange(past, past + n, dtype=np.int64)[None, :]
        if "beam_idx" in names:
            feed["beam_idx"] = np.zeros((1,), np.int32)
        request.infer(feed)
        token = int(np.argmax(request.get_output_tensor(0).data[0, -1]))
        out.append(token)
        past += n
        if eos_token_id is not None and token == eos_token_id:
            break
        step_ids = np.array([[token]], np.int64)
    return out
