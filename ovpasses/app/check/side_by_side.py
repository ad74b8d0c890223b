"""``ovpass check``: run an original and a rewritten model side by side on the same inputs and compare.

:func:`check_model` compiles both, runs a prefill and decode steps (:func:`ovpasses.app.check.inputs.make_feeds`)
through each (:func:`run_steps`) and returns a :class:`CheckReport` with the verdict. Where the original
cannot run, the rewritten model is compared with an independent reference that can: the same IR with
every SDPA decomposed by :class:`~ovpasses.passes.ScaledDotProductAttentionDecomposition` (the
specification's arithmetic), run on the same runtime. :func:`count_fused_sdpa` counts the runtime's
fused SDPA kernels in a compiled model.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Iterable

import numpy as np
import openvino as ov

from ovpasses._ov import SDPA_TYPE, infer
from ovpasses.app.check.inputs import InputSource, InputUnknownError, make_feeds  # noqa: F401 - make_feeds re-exported
from ovpasses.app.check.report import CheckReport, trimmed_lines  # noqa: F401 - re-exported
from ovpasses.app.check.verdict import FIXED, INCONCLUSIVE, OK, WORSE, Comparison, RunResult
from ovpasses.app.check.verdict import cannot_decide, compare_outputs, decide, fusion_kept, reduced_precision
from ovpasses.devices import resolve_device
from ovpasses.errors import OvpassesError
from ovpasses.features.sliding_window.trim import SlidingWindowTrimmer
from ovpasses.passes.sdpa_decomposition import ScaledDotProductAttentionDecomposition
from ovpasses.options import RewriteOptions, SlidingWindow
from ovpasses.pipeline import rewrite
from ovpasses.precision import EXACT_CPU_CONFIG, compiled_precision
from ovpasses.plan.runtimes import installed_version, version_string
from ovpasses.app.render.text import fusion_text
from ovpasses.step import run_step

log = logging.getLogger(__name__)

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


def fused_sdpa_names(compiled: ov.CompiledModel, sdpa_names: Iterable[str]) -> list[str]:
    """The names among ``sdpa_names`` (friendly names of the IR's SDPA nodes) that the compiled model fused
    into a ScaledDotProductAttention kernel: each runtime-model node of that layerType records the
    original layers it stands for in its rt_info ``originalLayersNames`` (comma-separated)."""
    wanted = set(sdpa_names)
    fused: set[str] = set()
    for node in compiled.get_runtime_model().get_ordered_ops():
        rt = node.get_rt_info()
        if "layerType" in rt and rt["layerType"].astype(str) == "ScaledDotProductAttention" \
                and "originalLayersNames" in rt:
            fused.update(n for n in rt["originalLayersNames"].astype(str).split(",") if n in wanted)
    return sorted(fused)


def fusion_disagreements(predicted: dict, fused: list[str] | None) -> list[str]:
    """One line per SDPA where ``fused`` (:func:`fused_sdpa_names`) differs from ``predicted`` (name ->
    :class:`~ovpasses.analysis.stateful_fusion.FusionVerdict`)."""
    if fused is None:
        return []
    got = set(fused)
    return [f"{name}: predicted {'fused' if verdict.expected else 'not fused'} ({fusion_text(verdict)}), "
            f"but the compiled model {'fused' if name in got else 'did not fuse'} it"
            for name, verdict in predicted.items() if verdict.expected != (name in got)]


def run_steps(core: ov.Core, model: ov.Model, device: str, config: dict, feeds: list[dict[str, np.ndarray]],
              label: str, trim: bool = False) -> RunResult:
    """Compile ``model`` and run ``feeds`` through one infer request from a reset state.

    ``trim``: ``model`` was rewritten with ``sliding_window="trimmable"``; the library's trimmer
    (:class:`~ovpasses.features.sliding_window.trim.SlidingWindowTrimmer`) cuts its sliding-window caches back
    to their keep after every inference, as a program that trims every step does, and the result records the
    positions each held after each trim that cut (``trimmed_held``, read back from the request) and after which
    inferences one cut (``trimmed_after``).
    Exceptions from compiling or inferring are caught and recorded: a model that fails is a result.
    """
    result = RunResult(label, steps_total=len(feeds))
    try:
        start = time.perf_counter()
        compiled = core.compile_model(model, device, config)
        result.compile_seconds = round(time.perf_counter() - start, 3)
        result.compiled = True
        result.precision = compiled_precision(compiled)
        result.fused_sdpa = count_fused_sdpa(compiled)
        result.fused_sdpa_names = fused_sdpa_names(
            compiled, (n.get_friendly_name() for n in model.get_ordered_ops() if n.get_type_name() == SDPA_TYPE))
        request = compiled.create_infer_request()
        request.reset_state()
        trimmer = SlidingWindowTrimmer.for_model(model, request, release_memory=False) if trim else None
        if trimmer is not None:
            result.trimmed_held = {name: [] for name in sorted(trimmer.keep)}
        for index, feed in enumerate(feeds):
            infer(request, feed)   # start_async and wait: an infer on one thread hides a failed inference
            result.outputs.append([np.array(request.get_output_tensor(i).data, copy=True)
                                   for i in range(len(compiled.outputs))])
            result.steps_run += 1
            if trimmer is not None and trimmer.trim():
                result.trimmed_after.append(index)
                for state in request.query_state():
                    if state.name in result.trimmed_held:
                        result.trimmed_held[state.name].append(int(state.state.shape[trimmer.axes[state.name]]))
    except Exception as exc:  # noqa: BLE001 - any runtime failure is what this reports
        result.error = _one_line(str(exc)) or type(exc).__name__
        log.debug("%s failed", label, exc_info=True)
    return result


def check_tolerance(name: str, value: float) -> float:
    """``value`` if it is a finite number, 0 or more; else :class:`OvpassesError` naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise OvpassesError(f"{name} must be a finite number, 0 or more; got {value!r}")
    return float(value)


def check_model(model: ov.Model, device: str = "CPU", steps: int = 3, options: RewriteOptions | None = None,
                config: dict | None = None, prefill: int | None = None, atol: float = 1e-4, rtol: float = 1e-4, seed: int = 0,
                core: ov.Core | None = None, source: InputSource | None = None,
                prefill_chunk: int | None = None) -> CheckReport:
    """Compile ``model`` and a rewritten clone on ``device``; run both on the same prefill + decode inputs.

    ``config`` defaults to :data:`EXACT_CPU_CONFIG` on CPU and to the device defaults elsewhere. Both
    run on the installed OpenVINO whatever runtime the rewrite targets (``options``, :class:`RewriteOptions`;
    default: every pass, for the installed runtime). The verdict
    (:func:`decide`) is ``ok`` when both run and every output of every step agrees within
    ``atol + rtol * max|original|`` (NaN in the same places, and equal infinities, agree); ``fixed`` when
    the rewritten model runs or gives finite values where the original does not and agrees elsewhere;
    ``worse`` when it fails, or gives NaN, where the original does not, or the outputs differ;
    ``inconclusive`` when nothing could be compared (neither ran a step, both fail, or no value is
    finite in both). ``ok`` is True for ok and fixed. A ``fixed`` verdict is checked against the same
    IR with every SDPA decomposed: it stays ``fixed`` only when the rewritten model agrees with it
    within the tolerance (or that reference fails too, which the verdict says), is ``inconclusive`` when
    no value is finite in both (NaN in both is no regression), else ``worse``. Where a compiled model
    computes in less than f32 (:func:`ovpasses.precision.compiled_precision`: bf16 inference, an f16 KV
    cache or dynamic quantization, as the CPU defaults are), values beyond the tolerance are
    ``inconclusive``, naming the tolerance they would need: a correct rewrite differs there too.
    ``source`` says where inputs come from (the export's folder, ``--data-shape``). A model padded by
    ``paged_heads=pad`` gives the original's outputs: the padding is exact. With
    ``sliding_window=bounded`` a ``prefill`` (plus ``steps``) beyond the window compares steps that read
    a bounded cache (the report says whether it did: ``bounding_exercised``), and ``prefill_chunk`` splits
    the prefill into inferences of at most that many tokens, so that later chunks read a bounded cache too.
    ``prefill`` None is :data:`DEFAULT_PREFILL` tokens, or, where a cache is bounded, :func:`bound_prefill`
    (past the most a bounded cache keeps). Where a cache is bounded and no compared step read it after it
    dropped positions, agreeing outputs are ``inconclusive``, not ``ok``: they say nothing of the bound.
    """
    atol, rtol = check_tolerance("atol", atol), check_tolerance("rtol", rtol)
    if steps < 0 or (prefill is not None and prefill < 1) or (prefill_chunk is not None and prefill_chunk < 1):
        raise OvpassesError(f"check_model needs steps >= 0, prefill >= 1 and prefill_chunk >= 1; got steps={steps}, "
                            f"prefill={prefill}, prefill_chunk={prefill_chunk}")
    core = core or ov.Core()
    device = resolve_device(device, core)
    if config is None:
        config = dict(EXACT_CPU_CONFIG) if device.split(".")[0] == "CPU" else {}
    options = options or RewriteOptions()
    rewritten_model = model.clone()
    summary = rewrite(rewritten_model, options=options)
    keeps = bounded_keeps(summary)
    trimming = options.sliding_window is SlidingWindow.TRIMMABLE and keeps is not None
    # the plan's fusion is the CPU plugin's: per SDPA, fused as the model was and as the rewrite leaves it
    cpu = device.split(".")[0] == "CPU"
    fusion_before, fusion_after = (summary.fusion(unmodified=True), summary.fusion()) if cpu else ({}, {})
    prefill_chosen = prefill is None
    if prefill is None:
        prefill = DEFAULT_PREFILL if keeps is None else bound_prefill(keeps[1])
    try:
        feeds = make_feeds(model, steps, prefill, seed, source, prefill_chunk)
    except InputUnknownError as exc:   # nothing can run on inputs nobody knows (or too large): inconclusive
        unknown = str(exc)
        chunks = -(-prefill // (prefill_chunk or prefill))
        original, rewritten = (RunResult(label, steps_total=steps + chunks, error=unknown)
                               for label in ("original", "rewritten"))
    else:
        unknown = None
        original = run_steps(core, model, device, config, feeds, "original")
        rewritten = run_steps(core, rewritten_model, device, config, feeds, "rewritten", trim=trimming)
        if cpu:
            original.fusion_disagreements = fusion_disagreements(fusion_before, original.fused_sdpa_names)
            rewritten.fusion_disagreements = fusion_disagreements(fusion_after, rewritten.fused_sdpa_names)
    installed = installed_version()
    names = [o.get_any_name() if o.get_names() else f"output {i}" for i, o in enumerate(model.outputs)]
    comparison = compare_outputs(original.outputs, rewritten.outputs, names)
    tolerance = atol + rtol * comparison.scale
    code, verdict = decide(original, rewritten, comparison, tolerance)
    if unknown is not None:
        code, verdict = INCONCLUSIVE, f"INCONCLUSIVE: no model was run: {unknown}"
    elif code == OK and trimming and not any(i < comparison.steps - 1 for i in rewritten.trimmed_after):
        code, verdict = INCONCLUSIVE, (f"INCONCLUSIVE: the outputs agree, but no compared inference read a trimmed "
                                       f"cache (the trimmer cut nothing before the last one): give --prefill beyond "
                                       f"{keeps[1]}")
    elif code == OK and not trimming and keeps is not None and prefill + steps <= keeps[1] + 1:
        code, verdict = INCONCLUSIVE, (f"INCONCLUSIVE: the outputs agree, but the context ({prefill + steps} tokens) "
                                       f"never exceeds what a bounded cache keeps ({keeps[1]} positions): the "
                                       f"bound was not exercised; give --prefill beyond {keeps[1]}")
    elif cpu:
        intended = {n for n, v in fusion_after.items()
                    if not v.expected and n in fusion_before and fusion_before[n].expected}
        code, verdict = fusion_kept(code, verdict, original, rewritten, intended)
    reference = reference_cmp = None
    if code == FIXED:   # as strong as what ran: compare with a reference that can run
        reference = run_steps(core, decomposed_reference(model), device, config, feeds, "reference")
        reference_cmp = compare_outputs(reference.outputs, rewritten.outputs, names)
        code, verdict = _against_reference(verdict, reference, rewritten, reference_cmp, atol + rtol * reference_cmp.scale)
    report = CheckReport(
        summary.profile.version_string, summary.profile.name, device, config, steps, prefill, atol, rtol,
        summary.changed, original, rewritten,
        ran_on=version_string(installed), target=summary.profile.version_string,
        target_exercised=summary.profile.version == installed,
        max_abs_diff=comparison.max_abs_diff, max_abs_diff_output=comparison.max_abs_diff_output,
        tolerance=tolerance if comparison.steps else None,
        outputs_equal=None if not comparison.steps else (
            not comparison.shapes_differ and not comparison.nonfinite_only_rewritten
            and not comparison.nonfinite_only_original
            and (comparison.max_abs_diff is None or comparison.max_abs_diff <= tolerance)),
        steps_compared=comparison.steps, values_compared=comparison.compared,
        nonfinite_same=comparison.nonfinite_same, nonfinite_only_original=comparison.nonfinite_only_original,
        nonfinite_only_rewritten=comparison.nonfinite_only_rewritten,
        verdict=verdict, verdict_code=code, ok=code in (OK, FIXED), reference=reference,
        inputs_from=list(source.embedders.files) if source is not None else [],
        prefill_chunk=prefill_chunk, sliding_window=options.sliding_window,
        bounded_keep=None if keeps is None else keeps[0], bounded_keep_max=None if keeps is None else keeps[1],
        prefill_chosen=prefill_chosen)
    if reference_cmp is not None and reference_cmp.max_abs_diff is not None:
        report.reference_max_abs_diff = reference_cmp.max_abs_diff
        report.reference_tolerance = atol + rtol * reference_cmp.scale
    return report


DEFAULT_PREFILL = 8   # tokens, where no cache is bounded


def bounded_keeps(summary) -> tuple[int, int] | None:
    """The fewest and the most positions a cache bounded by ``summary``'s rewrite keeps (None: none bounded)."""
    caches = summary.sliding_window_caches
    keeps = [b.keep for b in caches.bounded.values()] if caches is not None else []
    return (min(keeps), max(keeps)) if keeps else None


def bound_prefill(keep: int) -> int:
    """A prefill past a bound of ``keep`` positions: the prefill alone drops positions from every bounded
    cache, so that each decode step reads caches that hold ``keep`` where the original's hold the whole
    context."""
    return keep + 2


def decomposed_reference(model: ov.Model) -> ov.Model:
    """A clone of ``model`` with every SDPA decomposed: no stateful fusion, the specification's arithmetic."""
    clone = model.clone()
    run_step(clone, ScaledDotProductAttentionDecomposition)
    return clone


def _against_reference(verdict: str, reference: RunResult, rewritten: RunResult, comparison: Comparison,
                       tolerance: float) -> tuple[str, str]:
    """A FIXED verdict, made numeric against the decomposed reference (or said to be unverified).

    NaN where the reference has NaN too is no regression: where nothing is finite in both, nothing was
    compared and the verdict is INCONCLUSIVE, as :func:`decide` says for an original that runs."""
    if not reference.ran:
        return FIXED, f"{verdict}; not compared with a reference: the decomposed model fails too ({reference.error})"
    if comparison.shapes_differ:
        return WORSE, ("WORSE: the original fails; the rewritten model's output shapes differ from the decomposed "
                       f"reference's ({', '.join(comparison.shapes_differ)})")
    if comparison.nonfinite_only_rewritten:
        return WORSE, (f"WORSE: the original fails; the rewritten model gives NaN or infinity in "
                       f"{comparison.nonfinite_only_rewritten} places where the decomposed reference does not")
    if comparison.compared == 0:
        only = comparison.nonfinite_only_original
        return INCONCLUSIVE, (f"INCONCLUSIVE: the original fails and the rewritten model runs, but no output value "
                              f"is finite in both it and the decomposed reference (NaN or infinity in the same "
                              f"{comparison.nonfinite_same} places of both"
                              f"{f', and in {only} places of the reference only' if only else ''}): nothing could "
                              f"be compared")
    if comparison.max_abs_diff > tolerance:
        reduced = reduced_precision(reference, rewritten)
        if reduced is not None:
            return INCONCLUSIVE, cannot_decide(comparison, tolerance, reduced,
                                               "the original fails; the rewritten model and the decomposed reference")
        return WORSE, (f"WORSE: the original fails; the rewritten model runs but differs from the decomposed "
                       f"reference (max {comparison.max_abs_diff:.3g}, tolerance {tolerance:.3g})")
    return FIXED, (f"{verdict}; it agrees with the decomposed reference over {comparison.steps} steps "
                   f"(max {comparison.max_abs_diff:.3g}, tolerance {tolerance:.3g})")


def _one_line(message: str) -> str:
    lines = [ln.strip() for ln in message.splitlines() if ln.strip()]
    keep = [ln for ln in lines if not ln.startswith(("Exception from", "Check '"))]
    return " ".join(keep or lines)[:500]
