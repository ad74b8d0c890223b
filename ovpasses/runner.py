"""What the ``ovpass`` commands do, as importable library code: run the pipeline (optionally restricted
to some passes), report the KV-sharing map, and run an original and a rewritten model side by side.

Everything here reads the same objects the passes use (:class:`~ovpasses.analysis.KVSharingAnalysis`,
:func:`~ovpasses.pipeline.plan`, :class:`~ovpasses.pipeline.RewriteSummary`); the CLI only formats.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field

import numpy as np
import openvino as ov

from ovpasses.errors import DeviceNotAvailableError, OvpassesError
from ovpasses.passes import (
    DisableStatefulSDPAFusion,
    KVCacheShapeOfDecomposition,
    ScaledDotProductAttentionDecomposition,
    SharedKVCacheDetection,
    SharedKVCacheUnsharing,
)
from ovpasses.pipeline import rewrite, selected_passes

log = logging.getLogger(__name__)

# Compile properties under which the CPU plugin computes in f32 with an f32 KV cache. By default it
# runs bf16 on CPUs with avx512_bf16/AMX and keeps the KV cache in f16, which changes logits far more
# than any rewrite does and flips near-tied greedy picks of small random models.
EXACT_CPU_CONFIG = {"INFERENCE_PRECISION_HINT": "f32", "KV_CACHE_PRECISION": "f32"}

# The passes of the pipeline, in the order it runs them, with what each does in one line.
PASSES: dict[str, tuple[type, str]] = {
    SharedKVCacheDetection.NAME: (
        SharedKVCacheDetection,
        "analysis only: records per SDPA which KV caches it reads and whether another SDPA reads them too"),
    SharedKVCacheUnsharing.NAME: (
        SharedKVCacheUnsharing,
        "--kv-sharing unshare only: gives each borrower of a shared cache a cache of its own, so every SDPA can fuse"),
    DisableStatefulSDPAFusion.NAME: (
        DisableStatefulSDPAFusion,
        "keeps SDPAs that read a cache off its Assign path out of the CPU stateful SDPA fusion (no-op Reshape)"),
    ScaledDotProductAttentionDecomposition.NAME: (
        ScaledDotProductAttentionDecomposition,
        "decomposes those SDPAs the barrier cannot take (K/V without a static rank-4 shape) into MatMul/Softmax"),
    KVCacheShapeOfDecomposition.NAME: (
        KVCacheShapeOfDecomposition,
        "affected runtimes (2025.2 - 2026.1): computes a cache Concat's ShapeOf from the Concat inputs"),
}

# LLM inputs recognised by name; every other parameter gets seeded random data of its shape and type
LLM_INPUTS = ("input_ids", "attention_mask", "position_ids", "beam_idx")


# ---------------------------------------------------------------------------------------------- rewrite

def parse_passes(spec: str | Iterable[str] | None) -> frozenset[str] | None:
    """``"A,B"`` (or a list) to a set of pass names; raises with the valid names on an unknown one."""
    if spec is None:
        return None
    names = [n.strip() for n in (spec.split(",") if isinstance(spec, str) else spec)]
    names = [n for n in names if n]
    if not names:
        raise OvpassesError(f"--passes names no pass; valid names: {', '.join(PASSES)}")
    try:
        return selected_passes(names)
    except OvpassesError as error:
        raise OvpassesError(f"{error} (see 'ovpass passes')") from None


# ---------------------------------------------------------------------------------------------- inspect

def inspect_model(model: ov.Model, runtime: str | None = None, kv_sharing: str = "keep") -> dict:
    """The KV-sharing map of ``model`` and what ``ovpass rewrite`` would do to each SDPA on ``runtime``.

    Runs the pipeline on a clone (the actions are the ones the rewrite really takes, including the
    fallback to decomposition); ``model`` is not changed. The result follows the schema documented in
    README.md (``"schema": "ovpass.inspect/1"``). ``kv_sharing`` is :func:`~ovpasses.pipeline.rewrite`'s;
    the report says which mode it planned for and, with ``unshare``, the caches it would add and their cost.
    """
    summary = rewrite(model.clone(), runtime, kv_sharing=kv_sharing)
    data = summary.analysis.to_dict()
    for sdpa in data["sdpa"]:
        sdpa["action"] = summary.actions[sdpa["name"]]
    return {
        "schema": "ovpass.inspect/1",
        "runtime": summary.profile.version_string,
        "profile": summary.profile.name,
        "detected": summary.analysis.status_counts(),
        "variables": sorted(data["variables"], key=lambda v: v["variable_id"]),
        "sdpa": data["sdpa"],
        "unhandled": data["unhandled"],
        "kv_sharing": summary.kv_sharing,
        "unshared": [asdict(u) for u in summary.unshared],
        "kept_shared": dict(summary.kept_shared),
        "extra_cache_bytes_per_token": summary.extra_cache_bytes_per_token,
    }


def inspect_dot(report: dict) -> str:
    """Graphviz text of an :func:`inspect_model` report: caches (boxes) -> SDPAs (ellipses), the owner's
    edge solid, borrowers' edges dashed, each labelled with the ports read (K, V); sub-graph operations
    that read a cache unanalysed are components on dotted edges."""
    def q(text: str) -> str:  # a DOT string; a literal backslash-n in ``text`` stays a line break
        return '"' + str(text).replace('"', '\\"') + '"'

    colors = {"exclusive": "palegreen", "shared": "lightsalmon", "stateless": "lightgrey"}
    lines = ["digraph kv_sharing {", "  rankdir=LR;",
             f"  label={q('KV sharing, runtime ' + report['runtime'] + ' (' + report['profile'] + ' profile)')};",
             "  node [fontname=Helvetica, fontsize=10];"]
    for sdpa in report["sdpa"]:
        label = f"{sdpa['name']}\\n{sdpa['status']}\\n{sdpa['action']}"
        lines.append(f"  {q('sdpa:' + sdpa['name'])} [shape=ellipse, style=filled, "
                     f"fillcolor={colors.get(sdpa['status'], 'white')}, label={q(label)}];")
    for var in report["variables"]:
        shape = "box3d" if var["shared"] else "box"
        lines.append(f"  {q('var:' + var['variable_id'])} [shape={shape}, label={q(var['variable_id'])}];")
        for name in var["sdpa"]:
            ports = "".join(p for p, readers in (("K", var["key_readers"]), ("V", var["value_readers"]))
                            if name in readers)
            role = "owner" if name == var["owner"] else "borrower"
            style = "solid" if role == "owner" else "dashed"
            lines.append(f"  {q('var:' + var['variable_id'])} -> {q('sdpa:' + name)} "
                         f"[style={style}, label={q(role + ' ' + ports)}];")
        for op in var["unanalysed_readers"]:
            label = f"{op}\\nnot analysed"
            lines.append(f"  {q('op:' + op)} [shape=component, label={q(label)}];")
            lines.append(f"  {q('var:' + var['variable_id'])} -> {q('op:' + op)} [style=dotted];")
    lines.append("}")
    return "\n".join(lines) + "\n"


def inspect_text(report: dict) -> str:
    counts = report["detected"]
    lines = [f"runtime {report['runtime']} ({report['profile']} profile)",
             f"{len(report['variables'])} caches ({sum(v['shared'] for v in report['variables'])} shared); "
             f"SDPA exclusive={counts['exclusive']} shared={counts['shared']} stateless={counts['stateless']}",
             "", "SDPA (topological order):"]
    width = max((len(s["name"]) for s in report["sdpa"]), default=4)
    for s in report["sdpa"]:
        lines.append(f"  {s['name']:<{width}}  {s['status']:<9}  caches: {', '.join(s['kv_variables']) or '-'}")
        lines.append(f"  {'':<{width}}  action: {s['action']}")
    shared = [v for v in report["variables"] if v["shared"]]
    if shared:
        lines += ["", "shared caches:"]
        for v in shared:
            line = f"  {v['variable_id']}: owner {v['owner'] or '-'}; borrowers {', '.join(v['borrowers']) or '-'}"
            if v["unanalysed_readers"]:
                line += f"; also read by {', '.join(v['unanalysed_readers'])} (not analysed)"
            lines.append(line)
    if report.get("kv_sharing", "keep") != "keep":
        extra = report["extra_cache_bytes_per_token"]
        lines += ["", f"kv sharing: {report['kv_sharing']}: {len(report['unshared'])} caches added, "
                      f"{'unknown' if extra is None else extra} bytes per token of context (batch 1)"]
        lines += [f"  {u['variable_id']}: for {u['borrower']}, {u['bytes_per_token']} bytes/token"
                  for u in report["unshared"]]
        lines += [f"  kept shared: {cache}: {reason}" for cache, reason in report["kept_shared"].items()]
    for message in report["unhandled"]:
        lines.append(f"not handled: {message}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- check

def count_layer_type(compiled: ov.CompiledModel, layer_type: str) -> int:
    """Number of nodes of ``compiled.get_runtime_model()`` whose rt_info layerType is ``layer_type``."""
    count = 0
    for node in compiled.get_runtime_model().get_ordered_ops():
        rt = node.get_rt_info()
        if "layerType" in rt and rt["layerType"].astype(str) == layer_type:
            count += 1
    return count


def count_fused_sdpa(compiled: ov.CompiledModel) -> int:
    """Number of fused ScaledDotProductAttention kernels in the compiled (runtime) model."""
    return count_layer_type(compiled, "ScaledDotProductAttention")


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


def make_feeds(model: ov.Model, steps: int, prefill: int = 8, seed: int = 0) -> list[dict[str, np.ndarray]]:
    """Inputs for a prefill of ``prefill`` tokens then ``steps`` single-token decode steps, batch 1.

    ``input_ids`` are seeded random tokens below the vocabulary size (the static last dim of the first
    output, else 100); ``attention_mask`` is ones over past + current tokens; ``position_ids`` count
    from the past length; ``beam_idx`` is zeros. Any other parameter gets seeded random data of its
    type (floats: standard normal; integers and booleans: 0 or 1) and shape: static dims as they are,
    a dynamic dim 0 is the batch (1), any other dynamic dim is the step's token count.
    """
    rng = np.random.default_rng(seed)
    last = model.outputs[0].get_partial_shape()
    vocab = last[last.rank.get_length() - 1].get_length() if last.rank.is_static and last[-1].is_static else 100
    feeds: list[dict[str, np.ndarray]] = []
    past = 0
    for n in [prefill] + [1] * steps:
        feed: dict[str, np.ndarray] = {}
        for param in model.inputs:
            names = param.get_names()
            pshape = param.get_partial_shape()
            rank = pshape.rank.get_length() if pshape.rank.is_static else 2
            dtype = param.get_element_type().to_dtype()
            name = next((n_ for n_ in LLM_INPUTS if n_ in names), None)
            key = param.get_any_name()
            if name == "input_ids":
                value = rng.integers(0, vocab, size=(1, n))
            elif name == "attention_mask":
                value = np.ones((1, past + n))
            elif name == "position_ids":
                # [batch, seq], or [3, batch, seq] for M-RoPE
                shape = (3, 1, n) if rank == 3 else (1,) * (rank - 1) + (n,)
                value = np.broadcast_to(np.arange(past, past + n), shape).copy()
            elif name == "beam_idx":
                value = np.zeros((1,))
            else:
                shape = [d.get_length() if d.is_static else (1 if i == 0 else n) for i, d in enumerate(pshape)] \
                    if pshape.rank.is_static else [1, n]
                if np.issubdtype(dtype, np.floating):
                    value = rng.standard_normal(shape)
                else:
                    value = rng.integers(0, 2, size=shape)
            feed[key] = np.asarray(value).astype(dtype)
        feeds.append(feed)
        past += n
    return feeds


@dataclass
class RunResult:
    """How one model fared: whether it compiled and how many steps it ran, with the outputs it gave."""

    label: str
    compiled: bool = False
    steps_run: int = 0
    steps_total: int = 0
    error: str | None = None
    fused_sdpa: int | None = None
    compile_seconds: float | None = None
    outputs: list[list[np.ndarray]] = field(default_factory=list, repr=False)

    @property
    def ran(self) -> bool:
        return self.compiled and self.error is None and self.steps_run == self.steps_total

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("outputs")
        data["ran"] = self.ran
        return data


def run_steps(core: ov.Core, model: ov.Model, device: str, config: dict, feeds: list[dict[str, np.ndarray]],
              label: str) -> RunResult:
    """Compile ``model`` and run ``feeds`` through one infer request from a reset state.

    Exceptions from compiling or inferring are caught and recorded: a model that fails is a result.
    """
    result = RunResult(label, steps_total=len(feeds))
    try:
        start = time.perf_counter()
        compiled = core.compile_model(model, device, config)
        result.compile_seconds = round(time.perf_counter() - start, 3)
        result.compiled = True
        result.fused_sdpa = count_fused_sdpa(compiled)
        request = compiled.create_infer_request()
        request.reset_state()
        for feed in feeds:
            request.infer(feed)
            result.outputs.append([np.array(request.get_output_tensor(i).data, copy=True)
                                   for i in range(len(compiled.outputs))])
            result.steps_run += 1
    except Exception as exc:  # noqa: BLE001 - any runtime failure is what this reports
        result.error = _one_line(str(exc)) or type(exc).__name__
        log.debug("%s failed", label, exc_info=True)
    return result


@dataclass
class CheckReport:
    """``ovpass check``: the original and the rewritten model on the same inputs."""

    runtime: str
    profile: str
    device: str
    config: dict
    steps: int
    prefill: int
    atol: float
    rtol: float
    changed: bool
    original: RunResult
    rewritten: RunResult
    max_abs_diff: float | None = None      # over all outputs and steps, when both ran
    max_abs_diff_output: str | None = None
    tolerance: float | None = None         # atol + rtol * max |original output|
    outputs_equal: bool | None = None
    verdict: str = ""
    ok: bool = False

    def to_dict(self) -> dict:
        data = {k: v for k, v in asdict(self).items() if k not in ("original", "rewritten")}
        data["original"] = self.original.to_dict()
        data["rewritten"] = self.rewritten.to_dict()
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        def line(r: RunResult) -> str:
            if not r.compiled:
                return f"{r.label:<9}: compile FAILED: {r.error}"
            head = f"{r.label:<9}: compiled (fused SDPA {r.fused_sdpa}), "
            if r.ran:
                return head + f"ran {r.steps_total} inferences"
            return head + f"FAILED at inference {r.steps_run + 1}/{r.steps_total}: {r.error}"

        lines = [f"runtime {self.runtime} ({self.profile} profile), device {self.device} "
                 f"{json.dumps(self.config) if self.config else '(device defaults)'}",
                 f"inputs: prefill {self.prefill} tokens + {self.steps} decode steps; rewrite changed the model: "
                 f"{'yes' if self.changed else 'no'}",
                 line(self.original), line(self.rewritten)]
        if self.max_abs_diff is not None:
            lines.append(f"max |original - rewritten| = {self.max_abs_diff:.3g} (output {self.max_abs_diff_output}); "
                         f"tolerance {self.tolerance:.3g} = atol {self.atol:g} + rtol {self.rtol:g} * max|original|")
        lines.append(f"verdict: {self.verdict}")
        return "\n".join(lines)


def check_model(model: ov.Model, device: str = "CPU", steps: int = 3, runtime: str | None = None,
                config: dict | None = None, passes: frozenset[str] | None = None, prefill: int = 8,
                atol: float = 1e-4, rtol: float = 1e-4, seed: int = 0, core: ov.Core | None = None,
                kv_sharing: str = "keep") -> CheckReport:
    """Compile ``model`` and a rewritten clone on ``device``; run both on the same prefill + decode inputs.

    ``config`` defaults to :data:`EXACT_CPU_CONFIG` on CPU and to the device defaults elsewhere.
    The rewritten model is *at least as good* (``ok``) when it runs whenever the original runs and,
    when both run, every output of every step agrees within ``atol + rtol * max|original|``.
    """
    core = core or ov.Core()
    family = device.split(".")[0].split(":")[0].upper()
    if not any(d == device or d.split(".")[0] == family for d in core.available_devices):
        raise DeviceNotAvailableError(f"device '{device}' is not available here; OpenVINO sees: "
                                      f"{', '.join(core.available_devices) or 'no devices'}")
    if config is None:
        config = dict(EXACT_CPU_CONFIG) if family == "CPU" else {}
    feeds = make_feeds(model, steps, prefill, seed)
    rewritten_model = model.clone()
    summary = rewrite(rewritten_model, runtime, passes, kv_sharing=kv_sharing)
    original = run_steps(core, model, device, config, feeds, "original")
    rewritten = run_steps(core, rewritten_model, device, config, feeds, "rewritten")
    report = CheckReport(summary.profile.version_string, summary.profile.name, device, config, steps, prefill,
                         atol, rtol, summary.changed, original, rewritten)
    if original.ran and rewritten.ran:
        names = [o.get_any_name() if o.get_names() else f"output {i}" for i, o in enumerate(model.outputs)]
        worst, worst_name, scale, same_shapes = 0.0, names[0] if names else "-", 0.0, True
        for step_a, step_b in zip(original.outputs, rewritten.outputs):
            for name, a, b in zip(names, step_a, step_b):
                if a.shape != b.shape:
                    same_shapes = False
                    continue
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                scale = max(scale, float(np.max(np.abs(a64), initial=0.0)))
                diff = float(np.max(np.abs(a64 - b64), initial=0.0))
                if not diff <= worst:  # NaN counts as the worst difference
                    worst, worst_name = diff, name
        report.max_abs_diff, report.max_abs_diff_output = worst, worst_name
        report.tolerance = atol + rtol * scale
        report.outputs_equal = same_shapes and worst <= report.tolerance
        report.ok = report.outputs_equal
        report.verdict = ("OK: both run and their outputs agree within the tolerance" if report.ok else
                          "WORSE: the outputs differ beyond the tolerance" if same_shapes else
                          "WORSE: the rewritten model's output shapes differ")
    elif original.ran:
        report.verdict = "WORSE: the original runs and the rewritten model does not"
    elif rewritten.ran:
        report.ok = True
        report.verdict = "OK (fixed): the original fails and the rewritten model runs"
    else:
        report.ok = True
        report.verdict = "OK (no better): neither model runs"
    return report


def _one_line(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("Exception from", "Check '"))]
    return " ".join(keep or lines)[:500]
