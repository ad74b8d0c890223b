"""One form of a model, measured in a process of its own (``python -m ovpasses.app.bench.worker JOB``): what
``ovpass bench`` asks of each form, so that each one's memory is its own.

The job (JSON on the command line) names the export folder (for genai, the form's own folder; for ov.Core
and optimum-intel the export and the form's rewrite ``options``, applied here in memory), the client, the
context, the prompt's chunk (0: whole), the decode steps and the config (``{}``: plugin defaults). The worker compiles the model as
the client does, fills a fresh request with a prompt of ``context`` token ids (seeded, the same for every
form), decodes ``steps`` greedy tokens one by one and prints one JSON line:

* ``peak_rss_mib``: the process's peak RSS over its whole life (``ru_maxrss``: the model, its compilation
  and the request), what a user's process of that form needs;
* ``context_mib``: the request's peak RSS over the RSS of the compiled model before it, after a warm-up
  inference of 16 tokens (a first inference keeps 380-700 MiB at the width models whatever the context:
  benchmarks/records/2026-12-06-bench-vs-script.md; ``/proc/self/clear_refs`` resets the high-water mark): the
  KV caches, the prompt's activations, the plugin's blocks;
* ``kv_mib``: the KV caches as the CPU plugin holds them after the prompt
  (:func:`ovpasses.analysis.kv_memory.model_kv_bytes_held` with the compiled model's precisions; a trimmed
  cache at what it holds), None for genai's paged path (its cache is the scheduler's);
* ``prefill_s``, ``decode_ms`` (the median step; genai: its TTFT and TPOT), ``fused`` (fused SDPA kernels;
  None through genai), ``tokens`` (the greedy tokens).

``core`` and ``optimum`` run the IR through ov.Core (optimum-intel feeds the prompt whole and then one token,
as this does with chunk 0); forms whose sliding caches the program trims run the library's
:class:`~ovpasses.features.sliding_window.trim.SlidingWindowTrimmer` after each chunk and every 32 steps.
``genai`` and ``genai-paged`` run openvino_genai's ``LLMPipeline`` on the folder (stateful with
``ATTENTION_BACKEND="SDPA"``, or with a ``SchedulerConfig``).
"""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from pathlib import Path

import numpy as np

TRIM_EVERY = 32   # decode steps between trims, as the trimmable guide's programs


def rss_kib(field: str) -> int | None:
    """``VmRSS`` or ``VmHWM`` of this process, in KiB (None where /proc does not say)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak() -> bool:
    """Reset the RSS high-water mark (``VmHWM``) to the RSS now."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def prompt_ids(context: int, vocab: int, seed: int = 0) -> np.ndarray:
    """The prompt every form is fed: ``context`` seeded token ids, past the special tokens."""
    return np.random.default_rng(seed).integers(4, max(vocab, 5), context)


def _mib(kib: int | None) -> float | None:
    return None if kib is None else round(kib / 1024, 1)


def feeder(request, names: set[str]):
    """``feed(ids)``: one inference on the next ids (batch 1), the inputs the IR has among input_ids,
    attention_mask, position_ids and beam_idx; returns the last position's logits. Each inference is started and
    waited for (``ovpasses._ov.infer``), as a synchronous infer on one thread hides a failed one."""
    from ovpasses._ov import infer   # noqa: PLC0415 - imports openvino, which the worker imports once it runs a form

    past = 0

    def feed(ids) -> np.ndarray:
        nonlocal past
        n = len(ids)
        inputs = {"input_ids": np.asarray(ids, np.int64)[None]}
        if "attention_mask" in names:
            inputs["attention_mask"] = np.ones((1, past + n), np.int64)
        if "position_ids" in names:
            inputs["position_ids"] = np.arange(past, past + n, dtype=np.int64)[None]
        if "beam_idx" in names:
            inputs["beam_idx"] = np.zeros(1, np.int32)
        infer(request, inputs)
        past += n
        return np.array(request.get_output_tensor(0).data[0, -1], np.float32, copy=True)

    return feed


def run_core(job: dict) -> dict:
    import openvino as ov

    from ovpasses.analysis.kv_memory import compiled_held_precision, model_kv_bytes_held
    from ovpasses.app.check import count_fused_sdpa
    from ovpasses.features.sliding_window.trim import SlidingWindowTrimmer, trimmable_caches

    core = ov.Core()
    model = core.read_model(Path(job["folder"]) / "openvino_model.xml")
    if job.get("options") is not None:   # the form, rewritten here in memory: no folder written per form
        from ovpasses.options import RewriteOptions
        from ovpasses.pipeline import rewrite

        rewrite(model, options=RewriteOptions(**job["options"]))
    compiled = core.compile_model(model, "CPU", job["config"])
    keep = trimmable_caches(model) if job["trim"] else {}
    names = {name for port in compiled.inputs for name in port.get_names()}
    vocab = compiled.outputs[0].get_partial_shape()[-1]
    vocab = vocab.get_length() if vocab.is_static else 1000
    warm = compiled.create_infer_request()   # a first inference holds memory it keeps (380-700 MiB at the width
    warm.reset_state()                       # models): not the context's, so it is spent before the baseline
    warm_feed = feeder(warm, names)
    warm_feed(prompt_ids(16, vocab, seed=1))
    warm_feed([5])
    del warm, warm_feed
    rss_compiled = rss_kib("VmRSS")
    peak_reset = reset_peak()
    request = compiled.create_infer_request()
    request.reset_state()
    feed = feeder(request, names)
    trimmer = SlidingWindowTrimmer.for_model(model, request, TRIM_EVERY) if keep else None
    prompt = prompt_ids(job["context"], vocab)
    chunk = job["chunk"] or len(prompt)
    start = time.perf_counter()
    for begin in range(0, len(prompt), chunk):
        logits = feed(prompt[begin:begin + chunk])
        if trimmer:
            trimmer.trim()
    prefill = time.perf_counter() - start
    positions = {s.name: s.state.shape[trimmer.axes[s.name]] for s in request.query_state() if s.name in keep}
    tokens, steps = [], []
    for _ in range(job["steps"]):
        tokens.append(int(np.argmax(logits)))
        start = time.perf_counter()
        logits = feed([tokens[-1]])
        if trimmer:
            trimmer.step()
        steps.append(time.perf_counter() - start)
    peak = rss_kib("VmHWM")
    held = model_kv_bytes_held(model, job["context"], compiled_held_precision(compiled, "bench"), positions or None)
    return {"prefill_s": round(prefill, 3), "decode_ms": round(1000 * statistics.median(steps), 2) if steps else None,
            "context_mib": _mib(peak - rss_compiled) if peak_reset and None not in (peak, rss_compiled) else None,
            "kv_mib": None if held is None else round(held / 2**20, 1), "fused": count_fused_sdpa(compiled),
            "tokens": tokens, "trimmed": positions}


def run_genai(job: dict) -> dict:
    import openvino as ov
    import openvino_genai as genai

    from ovpasses.analysis.kv_memory import held_precision, model_kv_bytes_held

    folder = Path(job["folder"])
    kwargs = {"ATTENTION_BACKEND": "SDPA"} if job["client"] == "genai" else \
        {"scheduler_config": genai.SchedulerConfig()}
    pipe = genai.LLMPipeline(str(folder), "CPU", **kwargs, **job["config"])
    config = genai.GenerationConfig()
    config.max_new_tokens = config.min_new_tokens = 1
    config.do_sample = False
    if pipe.get_generation_config().eos_token_id < 0:   # genai refuses a stop token of -1 (check --genai's note)
        config.eos_token_id = 0
    vocab = int(json.loads((folder / "config.json").read_text()).get("vocab_size", 1000)) \
        if (folder / "config.json").exists() else 1000
    warm = prompt_ids(16, vocab, seed=1)[None]   # the first inference's one-time cost, before the baseline
    pipe.generate(genai.TokenizedInputs(ov.Tensor(warm), ov.Tensor(np.ones_like(warm))), config)
    rss_compiled = rss_kib("VmRSS")
    peak_reset = reset_peak()
    config.max_new_tokens = config.min_new_tokens = max(job["steps"], 1)
    ids = prompt_ids(job["context"], vocab)[None]
    result = pipe.generate(genai.TokenizedInputs(ov.Tensor(ids), ov.Tensor(np.ones_like(ids))), config)
    peak = rss_kib("VmHWM")
    metrics = result.perf_metrics
    held = None
    if job["client"] == "genai":
        model = ov.Core().read_model(folder / "openvino_model.xml")
        held = model_kv_bytes_held(model, job["context"], held_precision(model, job["config"]))
    return {"prefill_s": round(metrics.get_ttft().mean / 1000, 3), "decode_ms": round(metrics.get_tpot().mean, 2),
            "context_mib": _mib(peak - rss_compiled) if peak_reset and None not in (peak, rss_compiled) else None,
            "kv_mib": None if held is None else round(held / 2**20, 1), "fused": None,
            "tokens": [int(t) for t in result.tokens[0]], "trimmed": {}}


def main(argv: list[str] | None = None) -> int:
    job = json.loads((argv or sys.argv[1:])[0])
    try:
        result = (run_genai if job["client"].startswith("genai") else run_core)(job)
    except Exception as exc:  # noqa: BLE001 - the parent reports it, one line
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        result = {"error": (lines[-1] if lines else type(exc).__name__)[:300]}
    result["peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
