"""KV-cache memory as the CPU plugin holds it, not as the IR declares it. Changes nothing.

The IR declares every cache state f32 (optimum-intel's exports), and ``query_state()`` hands it back so; what the
CPU plugin keeps differs by how it runs the cache:

* a cache its stateful SDPA kernel takes (*fused*: ``ReadValue -> [Gather] -> Concat -> Assign`` with nothing
  between) is held by the kernel in ``KEY_CACHE_PRECISION`` / ``VALUE_CACHE_PRECISION``: ``u8`` by default on
  x86 (the plugin's ``config.h``), with a scale and a zero point (f32) per position and KV head beside it (group
  size 0: one group per head), one buffer grown in place; an IR's ``rt_info`` ``runtime_options`` can name
  ``KV_CACHE_PRECISION`` (optimum-intel 2.2.0 writes ``f16`` into every export), and the config overrides both;
* any other cache (a bounded one, a shared one the kernel does not take) is a plain ReadValue/Assign state in
  its consumer's precision, the inference precision (``bf16`` under plugin defaults on CPUs with avx512_bf16
  or AMX, ``f32`` in the exact config), and double buffered (the plugin's ``VariableStateDoubleBuffer``: the
  state read and the state written).

Confirmed on 2026.4.1 (this machine: avx512_bf16, no AMX) by compiling with the defaults and reading the
compiled model's properties: ``KV_CACHE_PRECISION`` u8 for an IR without ``runtime_options``, f16 for an
optimum-intel export, ``INFERENCE_PRECISION_HINT`` bf16; the runtime model's ``MemoryInput`` of a bounded
cache is bf16 (f32 in the exact config). :func:`held_precision` reads the same properties from the Core and the
IR without compiling; ``tests/test_sliding_window_bounding.py`` checks it against a compiled model.
"""

from __future__ import annotations

from dataclasses import dataclass

import openvino as ov

DEVICE = "CPU"
QUANTIZED = ("u8", "i8", "u4", "i4")
PARAM_BYTES = 4   # a scale or a zero point (f32)


BITS = {"u1": 1, "u4": 4, "i4": 4, "u8": 8, "i8": 8, "f8e4m3": 8, "f8e5m2": 8, "f16": 16, "bf16": 16, "i16": 16,
        "f32": 32, "i32": 32, "f64": 64, "i64": 64}


def _name(value) -> str:
    """An element type (an ov.Type, or a string as configs and rt_info give it: "f16", "u8") as its short name."""
    text = value.get_type_name() if isinstance(value, ov.Type) else str(value).strip().lower()
    return {"float16": "f16", "bfloat16": "bf16", "float32": "f32", "uint8_t": "u8", "int8_t": "i8"}.get(text, text)


def _bits(name: str) -> int:
    return BITS[name]


@dataclass(frozen=True)
class HeldPrecision:
    """How the CPU plugin holds KV caches under one configuration."""

    key: str            # element type of a fused cache's K ("u8", "f16", "f32", ...)
    value: str          # ... and of its V
    key_group: int      # quantization group size along the head (0: one group per head)
    value_group: int
    plain: str          # element type of a plain state (a cache the kernel does not take)
    config: str         # "plugin defaults", "exact" or "given": which configuration this is
    source: str         # where the fused caches' precision comes from: "device", "IR runtime_options", "config"

    def cache_bytes(self, kind: str, heads: int, head_size: int, positions: int, fused: bool) -> int:
        """Bytes held for one cache (``kind`` "key" or "value") of ``heads`` x ``head_size`` at ``positions``
        positions, batch 1: fused, in the kernel's precision (plus a scale and a zero point per group when
        quantized); plain, in :attr:`plain`, twice."""
        if not fused:
            return 2 * heads * head_size * positions * _bits(self.plain) // 8
        precision, group = (self.key, self.key_group) if kind == "key" else (self.value, self.value_group)
        size = heads * head_size * positions * _bits(precision) // 8
        if precision in QUANTIZED:
            groups = 1 if group in (0, None) or group >= head_size else -(-head_size // group)
            size += heads * positions * groups * 2 * PARAM_BYTES
        return size

    def describe(self) -> str:
        fused = self.key if self.key == self.value else f"K {self.key}, V {self.value}"
        scales = " with a scale and zero point per position and head" if self.key in QUANTIZED else ""
        return (f"{self.config}: fused caches {fused}{scales} ({self.source}), other states {self.plain} "
                f"double buffered")

    def to_dict(self) -> dict:
        return {"config": self.config, "key": self.key, "value": self.value, "key_group": self.key_group,
                "value_group": self.value_group, "plain": self.plain, "source": self.source}


def _runtime_options(model: ov.Model) -> dict[str, str]:
    """The IR's ``rt_info`` ``runtime_options`` (what optimum-intel writes for the plugin to apply)."""
    if not model.has_rt_info("runtime_options"):
        return {}
    return {str(k): v.astype(str) if hasattr(v, "astype") else str(v) for k, v in model.get_rt_info()["runtime_options"].items()}


def held_precision(model: ov.Model, config: dict | None = None, core: ov.Core | None = None,
                   label: str | None = None) -> HeldPrecision:
    """How the CPU plugin of the installed runtime would hold ``model``'s caches when compiled with ``config``
    (None or {}: plugin defaults): the device's defaults, then the IR's ``runtime_options``, then ``config``,
    as the plugin applies them."""
    core = core or ov.Core()
    config = dict(config or {})
    options = _runtime_options(model)

    def pick(name: str, fallback: str | None = None) -> tuple[str, str]:
        for source, values in (("config", config), ("IR runtime_options", options)):
            if name in values:
                return _name(values[name]), source
            if fallback is not None and fallback in values:
                return _name(values[fallback]), source
        return _name(core.get_property(DEVICE, name)), "device"

    key, key_source = pick("KEY_CACHE_PRECISION", "KV_CACHE_PRECISION")
    value, _ = pick("VALUE_CACHE_PRECISION", "KV_CACHE_PRECISION")
    plain, _ = pick("INFERENCE_PRECISION_HINT")

    def group(name: str) -> int:
        return int(config.get(name, options.get(name, core.get_property(DEVICE, name))))

    label = label or ("plugin defaults" if not config else "given")
    return HeldPrecision(key, value, group("KEY_CACHE_GROUP_SIZE"), group("VALUE_CACHE_GROUP_SIZE"), plain, label,
                         key_source)


def compiled_held_precision(compiled: ov.CompiledModel, label: str) -> HeldPrecision:
    """How ``compiled`` (a CPU compiled model) holds its caches, read back from its properties."""
    def get(name: str):
        return compiled.get_property(name)

    return HeldPrecision(_name(get("KEY_CACHE_PRECISION")), _name(get("VALUE_CACHE_PRECISION")),
                         int(get("KEY_CACHE_GROUP_SIZE")), int(get("VALUE_CACHE_GROUP_SIZE")),
                         _name(get("INFERENCE_PRECISION_HINT")), label, "compiled model")


def cache_shape(concat: ov.Node, axis: int) -> tuple[int, int] | None:
    """(KV heads, head size) of a cache Concat: the last dimension is the head, the others but the batch and the
    sequence the heads. None: a dynamic one."""
    pshape = concat.get_output_partial_shape(0)
    dims = [pshape[i] for i in range(1, pshape.rank.get_length()) if i != axis]
    if not dims or any(d.is_dynamic for d in dims):
        return None
    heads = 1
    for d in dims[:-1]:
        heads *= d.get_length()
    return heads, dims[-1].get_length()


def _bound_keep(assign: ov.Node) -> int | None:
    """The positions a bounded cache's Assign stores: the Slice (``.../sliding_window_bound``) start, negated."""
    node = assign.input_value(0).get_node()
    while node.get_type_name() == "Convert":
        node = node.input_value(0).get_node()
    start = node.input_value(1).get_node() if node.get_type_name() == "Slice" else None
    return -int(start.get_data().reshape(-1)[0]) if start is not None and start.get_type_name() == "Constant" else None


def model_kv_bytes_held(model: ov.Model, context: int, precision: HeldPrecision,
                        positions: dict[str, int] | None = None) -> int | None:
    """KV-cache bytes at batch 1 after ``context`` positions that the CPU plugin holds for ``model`` as it is
    (any form: unmodified, bounded, unshared) under ``precision``: a cache whose readers the plugin's stateful
    kernel is expected to take (:func:`~ovpasses.analysis.stateful_fusion.predict_fusion`) in the kernel's
    precision, every other one a plain state (a bounded one at most the positions its Assign stores). None:
    unknown (a dynamic dimension, a cache without a chain). ``positions`` (variable id -> positions the state
    holds, as ``query_state`` shows them) overrides the count for the caches it names: a trimmed cache."""
    from ovpasses.analysis.cache_chain import find_cache_chains
    from ovpasses.analysis.kv_sharing import analyze_kv_sharing
    from ovpasses.analysis.stateful_fusion import predict_fusion

    analysis = analyze_kv_sharing(model)
    chains = find_cache_chains(model, name="kv_memory.cache_chain")
    assigns = {str(sink.get_attributes()["variable_id"]): sink for sink in model.get_sinks()
               if sink.get_type_name() == "Assign"}
    fused = {name for name in analysis.sdpa if analysis.sdpa[name].kv_variables
             and predict_fusion(analysis, name).expected}
    total = 0
    for vid, cache in analysis.caches.items():
        if vid not in chains or vid not in assigns:
            return None
        concat = chains[vid][0]
        shape = cache_shape(concat, concat.get_attributes()["axis"] % concat.get_output_partial_shape(0).rank.get_length())
        if shape is None:
            return None
        kept = context
        if cache.bounded:
            keep = _bound_keep(assigns[vid])
            if keep is None:
                return None
            kept = min(context, keep)
        if positions is not None and vid in positions:
            kept = positions[vid]
        plugin_fused = bool(cache.sdpa) and set(cache.sdpa) <= fused and not cache.bounded
        total += precision.cache_bytes("key" if cache.key_readers else "value", *shape, kept, fused=plugin_fused)
    return total
