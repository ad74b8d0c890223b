"""Which plain SDPAs does the CPU plugin keep as its own kernel in a stateful model? (issue 32; runtime notes)

Each variant is a model with one fused stateful SDPA (ReadValue -> Gather(beam_idx) -> Concat -> SDPA, as every
exported LLM has) and one plain SDPA of the variant's form; prints, per variant, the attention node types of the
compiled model's runtime graph (``ScaledDotProductAttention`` once: the stateful one; ``MatMul`` / ``Softmax``: the
plain one decomposed)::

    python benchmarks/probes/sdpa_kept.py
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import openvino as ov
from openvino import opset13 as ops

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: the modules shared with the benchmarks
from common import stateful_sdpa_beside  # noqa: E402  (a module of benchmarks/)


def _i64(values) -> ov.Node:
    return ops.constant(np.asarray(values, np.int64).reshape(-1))


def _with_stateful(outputs: list, params: list) -> ov.Model:
    fused, sinks, extra = stateful_sdpa_beside()
    return ov.Model(outputs + [fused], sinks, params + extra)


def _plain(mask: str, scale: bool, causal: bool) -> ov.Model:
    q, k = (ops.parameter([-1, 4, -1, 64], ov.Type.f32, name=n) for n in "qk")
    params, ins = [q, k], [q, k, k]
    if mask != "none":
        m = ops.parameter([-1, 1, -1, -1], ov.Type.f32 if mask == "f32" else ov.Type.boolean, name="m")
        params.append(m)
        ins.append(m)
    if scale:
        if len(ins) == 3:
            ins.append(ops.constant(np.float32(0)))
        ins.append(ops.constant(np.float32(0.125)))
    return _with_stateful([ops.scaled_dot_product_attention(*ins, causal=causal).output(0)], params)


def _reshape_transpose() -> ov.Model:
    """The form of the plugin's SDPAFuseTransposeReshape: [B, L, H*S] -> Reshape -> Transpose -> SDPA(Q, K, V)."""
    x = [ops.parameter([1, -1, 256], ov.Type.f32, name=n) for n in "qkv"]
    t = [ops.transpose(ops.reshape(p, _i64([0, 0, 4, 64]), True), _i64([0, 2, 1, 3])) for p in x]
    s = ops.scaled_dot_product_attention(*t, causal=True)
    out = ops.reshape(ops.transpose(s, _i64([0, 2, 1, 3])), _i64([0, 0, 256]), True)
    return _with_stateful([out.output(0)], x)


def _rank5() -> ov.Model:
    """Q [m, Hkv, G, L, D] against K/V [m, Hkv, 1, S, D] and a mask [m, 1, 1, L, S] (the blocked form's layout)."""
    q = ops.parameter([-1, 4, 2, -1, 64], ov.Type.f32, name="q")
    k = ops.parameter([-1, 4, 1, -1, 64], ov.Type.f32, name="k")
    m = ops.parameter([-1, 1, 1, -1, -1], ov.Type.f32, name="m")
    s = ops.scaled_dot_product_attention(q, k, k, m, ops.constant(np.float32(0.125)), causal=False)
    return _with_stateful([s.output(0)], [q, k, m])


def main() -> None:
    variants = {f"plain, mask {mask}, scale {scale}, causal {causal}": _plain(mask, scale, causal)
                for mask, scale, causal in (("none", False, False), ("none", False, True), ("f32", False, False),
                                            ("bool", False, False), ("f32", True, False), ("none", True, False))}
    variants["Reshape -> Transpose -> SDPA(Q, K, V), causal"] = _reshape_transpose()
    variants["rank 5, K/V and mask broadcast over the query heads"] = _rank5()
    core = ov.Core()
    for name, model in variants.items():
        types = sorted(op.get_rt_info()["layerType"].astype(str)
                       for op in core.compile_model(model, "CPU").get_runtime_model().get_ops())
        kinds = [t for t in types if t in ("ScaledDotProductAttention", "MatMul", "Softmax", "Subgraph")]
        print(json.dumps(dict(variant=name, openvino=ov.get_version(), attention_nodes=kinds)))


if __name__ == "__main__":
    main()
