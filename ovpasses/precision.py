"""The precision a device computes in: the one exact CPU configuration, and what a compiled model really used.

:data:`EXACT_CPU_CONFIG` is the only place the exact configuration is written; the side-by-side check,
the openvino_genai check, the tests, tools and benchmarks import it. :func:`compiled_precision` reads
back what a compiled model computes in, so that a comparison knows whether it can decide.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import openvino as ov

# Compile properties under which the CPU plugin computes in f32, keeps the KV cache in f32 and leaves
# activations unquantized. Its defaults differ on each count, and each changes logits more than a
# rewrite does (measured 2026-11-23 on this machine's Xeon with avx512_bf16, openvino 2026.0.0 and
# 2026.4.1; docs/cli.md, `ovpass check`):
# * INFERENCE_PRECISION_HINT: bf16 on CPUs with avx512_bf16/AMX. Unsharing the KV caches (a correct
#   rewrite) moves the fixtures' logits by 0.007-0.013 at bf16, against 4e-7 at f32.
# * KV_CACHE_PRECISION: f16 by default (read back from the compiled model).
# * DYNAMIC_QUANTIZATION_GROUP_SIZE: 32 by default, at any inference precision: the plugin quantizes the
#   activations of every MatMul whose weights are compressed (NNCF's int8/int4) to 8 bits in groups
#   of 32, so a rounding difference of 1e-7 upstream can flip a quantization step. The e2b35 fixture
#   compressed to int4 and unshared, prefill 100: logits differ by 2.5e-3 with it, 3.9e-7 with 0.
EXACT_CPU_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}


@dataclass(frozen=True)
class Precision:
    """What a compiled model computes in, as the plugin reports it; None where the plugin has no such property."""

    inference: str | None = None            # "f32", "bf16", "f16"
    kv_cache: str | None = None
    dynamic_quantization_group_size: int | None = None

    @property
    def exact(self) -> bool:
        """f32 inference, an f32 (or no) KV cache setting and no dynamic quantization of activations."""
        return (self.inference == "f32" and self.kv_cache in ("f32", None)
                and self.dynamic_quantization_group_size in (0, None))

    def describe(self) -> str:
        """``"bf16 inference, f16 KV cache, activations quantized in groups of 32"``: what is not exact."""
        parts = [f"{self.inference or 'unknown'} inference"]
        if self.kv_cache is not None:
            parts.append(f"{self.kv_cache} KV cache")
        if self.dynamic_quantization_group_size:
            parts.append(f"activations of compressed-weight MatMuls quantized in groups of "
                         f"{self.dynamic_quantization_group_size}")
        return ", ".join(parts)


def compiled_precision(compiled: ov.CompiledModel) -> Precision:
    """The precision ``compiled`` computes in, read from its properties."""
    values = {}
    for key in EXACT_CPU_CONFIG:
        try:
            value = compiled.get_property(key)
        except RuntimeError:   # the device has no such property
            values[key] = None
            continue
        values[key] = value.get_type_name() if isinstance(value, ov.Type) else int(value) \
            if key == "DYNAMIC_QUANTIZATION_GROUP_SIZE" else str(value)
    return Precision(values["INFERENCE_PRECISION_HINT"], values["KV_CACHE_PRECISION"],
                     values["DYNAMIC_QUANTIZATION_GROUP_SIZE"])


def round_to_bf16(x: np.ndarray) -> np.ndarray:
    """Round float64 values to bfloat16 (round to nearest even), returned as float64."""
    f = np.asarray(x, np.float64).astype(np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    return rounded.view(np.float32).astype(np.float64)
