"""Bounded sliding-window caches: KV state, prefill and decode time, peak RSS and fused SDPA count,
unmodified / rewritten (the default rewrite) / bounded / trimmable / unshared / unshared + bounded / unshared +
trimmable side by side (issues 22 and 32).

    .venvs/dev/bin/python benchmarks/sliding_window.py [--model tests/fixtures/gemma4/e2b35]
        [--context 2048 [8192 ...]] [--chunk 512 [0 ...]] [--decode 32] [--rounds 3] [--config default [exact]]
        [--forms unmodified,bounded,trimmable,...] [--margin N] [--every K] [--name NAME]

``--chunk 0`` feeds the prompt whole (as optimum-intel and openvino_genai's stateful path feed it); several
``--chunk`` values measure each. The ``trimmable`` forms (``rewrite(sliding_window="trimmable")``) run with the
library's trimmer (:class:`ovpasses.features.sliding_window.trim.SlidingWindowTrimmer`): after each prefill chunk and every
``--every`` decode steps, inside the timed region (``decode_ms_mean`` shows what the trims cost on average; the
median step has none). ``kv_held_bytes`` counts each state at the positions it holds after the prefill (a
trimmed cache: its keep).

Per config (``default``: the CPU plugin as a user gets it, no properties; ``exact``:
:data:`ovpasses.precision.EXACT_CPU_CONFIG`), per context, prompt form and round, each form in turn
(interleaved, so that load on the machine spreads over all of them) is compiled in a fresh process and measured
once there: a fresh request is filled with a ``--context``-token prompt in ``--chunk``-token chunks (prefill time), then
``--decode`` greedy tokens are decoded one by one (median ms per token). State is the bytes of every
state as ``query_state()`` returns them (``get_byte_size``: the IR's declared type, f32) after the prefill and
after the decode; ``kv_held_bytes`` is the KV cache as the CPU plugin holds it after the prefill
(:func:`ovpasses.analysis.kv_memory.model_kv_bytes_held` with the compiled model's own precisions: a fused
cache in KEY/VALUE_CACHE_PRECISION, u8 plus scales by default on x86, f16 where the IR's runtime_options say
so; every other state in the inference precision, double buffered), the figure forms are compared by. Each form is compiled and measured in a worker process of its own
(this script with ``--worker FORM``, fed one JSON line per measurement), so its memory is its own:
``peak_rss_mib`` is the worker's high-water mark during that measurement (reset before it through
``/proc/self/clear_refs``: the form's weights and that request), ``peak_rss_rise_mib`` its rise above the
RSS before the request was made, and ``process_peak_rss_mib`` the worker's ``ru_maxrss`` (its whole life,
compilation included). Each form's greedy tokens and last-step logits are compared with the unmodified
form's of the same round (``max_logit_diff`` over the steps whose tokens agree so far).

The record is rewritten after every measurement (``"complete": false`` until the end), so a cut-off
run keeps what it measured. The default name is ``sliding_window-<model folder>-<first context>``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from common import ROOT, markdown_table, progress, stateful_feeder, write_record  # noqa: E402  (sibling module)

from ovpasses.app.bench.worker import reset_peak, rss_kib  # the RSS readings ovpass bench takes
from ovpasses.units import size_text

FORMS = {"unmodified": None, "rewritten": ("keep", "full"), "bounded": ("keep", "bounded"), "trimmable": ("keep", "trimmable"),
         "unshared": ("unshare", "full"), "unshared+bounded": ("unshare", "bounded"),
         "unshared+trimmable": ("unshare", "trimmable")}


def configs() -> dict[str, dict]:
    from ovpasses.precision import EXACT_CPU_CONFIG
    return {"default": {}, "exact": dict(EXACT_CPU_CONFIG)}


def compile_form(model_dir: Path, name: str, config: dict, margin: int):
    """``name``'s form of the model compiled with ``config`` and warmed up: (compiled, fused SDPA count, precisions,
    the form's model)."""
    import openvino as ov

    import ovpasses
    from ovpasses._ov import infer   # start_async and wait: one inference thread hides a failed one from infer()
    from ovpasses.app.check import count_fused_sdpa
    core = ov.Core()
    model = core.read_model(model_dir / "openvino_model.xml")
    form = FORMS[name]
    if form is not None:
        ovpasses.rewrite(model, kv_sharing=form[0], sliding_window=form[1],
                         sliding_window_margin=margin if form[1] != "full" else 0)
    compiled = core.compile_model(model, "CPU", config)
    warm = compiled.create_infer_request()   # first inferences allocate; not part of any measurement
    warm.reset_state()
    for past, n in ((0, 16), (16, 1)):
        infer(warm, {"input_ids": np.full((1, n), 5, np.int64), "attention_mask": np.ones((1, past + n), np.int64),
                     "position_ids": np.arange(past, past + n, dtype=np.int64)[None],
                     "beam_idx": np.zeros(1, np.int32)})
    del warm
    precision = {key: _type_name(compiled.get_property(key)) for key in ("INFERENCE_PRECISION_HINT", "KV_CACHE_PRECISION")}
    return compiled, count_fused_sdpa(compiled), precision, model


def serve(model_dir: Path, form: str, config_name: str, margin: int, every: int) -> int:
    """The worker: compile ``form``, print ``{"fused_sdpa", "precision"}``, then per JSON line on stdin
    (``context``, ``chunk``, ``decode``, ``vocab``, ``logits_path``) measure, save the logits there and print
    the measurement with ``process_peak_rss_mib`` (``ru_maxrss``). Only these lines go to stdout."""
    import resource
    import sys

    from ovpasses.analysis.kv_memory import compiled_held_precision, model_kv_bytes_held

    compiled, fused, precision, model = compile_form(model_dir, form, configs()[config_name], margin)
    held = compiled_held_precision(compiled, config_name)
    precision["held"] = held.to_dict()
    print(json.dumps({"fused_sdpa": fused, "precision": precision}), flush=True)
    trimmable = None
    if form.endswith("trimmable"):
        from ovpasses.features.sliding_window.trim import trimmable_caches
        trimmable = trimmable_caches(model)
    for line in sys.stdin:
        ask = json.loads(line)
        result = measure(compiled, ask["context"], ask["chunk"], ask["decode"], ask["vocab"], trimmable, every)
        result["kv_held_bytes"] = model_kv_bytes_held(model, ask["context"], held, result.pop("positions"))
        np.save(ask["logits_path"], result.pop("logits"))
        result["process_peak_rss_mib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
        print(json.dumps(result), flush=True)
    return 0


class FormWorker:
    """One form in a worker process of its own (``serve``); :meth:`measure` asks it for one measurement."""

    def __init__(self, model_dir: Path, form: str, config_name: str, margin: int, scratch: Path, every: int = 1):
        import subprocess
        import sys

        self.form, self.scratch = form, scratch
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--worker", form, "--model",
                                      str(model_dir), "--config", config_name, "--margin", str(margin),
                                      "--every", str(every)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        hello = self._reply()
        self.fused, self.precision = hello["fused_sdpa"], hello["precision"]

    def _reply(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {self.form} worker died (exit {self.proc.wait()})")
        return json.loads(line)

    def measure(self, context: int, chunk: int, decode: int, vocab: int) -> dict:
        logits_path = self.scratch / f"{self.form}.npy"
        self.proc.stdin.write(json.dumps({"context": context, "chunk": chunk, "decode": decode, "vocab": vocab,
                                          "logits_path": str(logits_path)}) + "\n")
        self.proc.stdin.flush()
        result = self._reply()
        result["logits"] = np.load(logits_path)
        return result

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def _type_name(value) -> str:
    return value.to_string() if hasattr(value, "to_string") else str(value)


def measure(compiled, context: int, chunk: int, decode: int, vocab: int, trimmable: dict | None = None,
            every: int = 1) -> dict:
    """One measurement on a fresh request; ``chunk`` 0 feeds the prompt whole; ``trimmable`` (variable id ->
    positions kept) trims those states after each prefill chunk and every ``every`` decode steps."""
    rss_before = rss_kib("VmRSS")
    peak_reset = reset_peak()
    request = compiled.create_infer_request()
    request.reset_state()
    prompt = np.random.default_rng(0).integers(4, vocab, context)
    feed = stateful_feeder(request)
    trimmer = None
    if trimmable:
        from ovpasses.features.sliding_window.trim import SlidingWindowTrimmer
        trimmer = SlidingWindowTrimmer(request, trimmable, every)
    chunk = chunk or context

    start = time.perf_counter()
    for begin in range(0, context, chunk):
        logits = feed(prompt[begin:begin + chunk])
        if trimmer:
            trimmer.trim()
    prefill = time.perf_counter() - start
    peak_prefill = rss_kib("VmHWM")
    states = [(s.name, s.state) for s in request.query_state()]
    state_prefill = sum(t.get_byte_size() for _, t in states)
    positions = {name: t.shape[2] for name, t in states}   # what each state holds after the prefill
    del states
    steps, tokens, all_logits = [], [], []
    for _ in range(decode):
        tokens.append(int(np.argmax(logits)))
        all_logits.append(logits)
        start = time.perf_counter()
        logits = feed([tokens[-1]])
        if trimmer:
            trimmer.step()
        steps.append(time.perf_counter() - start)
    state_end = sum(s.state.get_byte_size() for s in request.query_state())
    peak = rss_kib("VmHWM")
    del request
    return {"prefill_s": prefill, "decode_ms": 1000 * statistics.median(steps),
            "decode_ms_mean": 1000 * statistics.fmean(steps),
            "decode_ms_min": 1000 * min(steps), "state_bytes": state_prefill, "state_bytes_end": state_end,
            "positions": positions, "trims": trimmer.trims if trimmer else 0,
            "peak_rss_prefill_mib": None if peak_prefill is None else round(peak_prefill / 1024, 1),
            "peak_rss_mib": None if peak is None else round(peak / 1024, 1),
            "peak_rss_rise_mib": None if peak is None or rss_before is None or not peak_reset
            else round((peak - rss_before) / 1024, 1),
            "tokens": tokens, "logits": np.array(all_logits)}


def agreement(run: dict, reference: dict) -> dict:
    """Tokens equal to the reference's, and the largest logit difference over the steps whose tokens agree so far."""
    same = 0
    while same < min(len(run["tokens"]), len(reference["tokens"])) and run["tokens"][same] == reference["tokens"][same]:
        same += 1
    steps = same + 1 if same < len(run["tokens"]) else same   # step `same` had equal inputs, so compare it too
    diff = float(np.abs(run["logits"][:steps] - reference["logits"][:steps]).max()) if steps else None
    return {"tokens_equal": same == len(run["tokens"]), "tokens_agreeing": same, "max_logit_diff": diff,
            "max_abs_logit": float(np.abs(reference["logits"][:steps]).max()) if steps else None}


def summarise(runs: dict, fused: dict) -> list[dict]:
    rows = []
    base = runs["unmodified"]
    base_prefill = statistics.median(r["prefill_s"] for r in base)
    base_decode = statistics.median(r["decode_ms"] for r in base)
    base_state = base[0]["state_bytes"]
    base_held = base[0].get("kv_held_bytes")
    for name, measured in runs.items():
        if not measured:
            continue
        prefill = statistics.median(r["prefill_s"] for r in measured)
        decode = statistics.median(r["decode_ms"] for r in measured)
        state = measured[0]["state_bytes"]
        agree = [agreement(r, b) for r, b in zip(measured, base)]
        held = measured[0].get("kv_held_bytes")
        rows.append({"form": name, "fused_sdpa": fused[name], "kv_held_bytes": held,
                     "kv_held_x": round(held / base_held, 3) if held is not None and base_held else None,
                     "state_bytes": state,
                     "state_x": round(state / base_state, 3), "state_bytes_end": measured[0]["state_bytes_end"],
                     "prefill_s": round(prefill, 3), "prefill_x": round(prefill / base_prefill, 3),
                     "decode_ms": round(decode, 2), "decode_x": round(decode / base_decode, 3),
                     "decode_ms_mean": round(statistics.median(r["decode_ms_mean"] for r in measured), 2),
                     "trims": measured[0]["trims"],
                     "decode_ms_each_round": [round(r["decode_ms"], 2) for r in measured],
                     "prefill_s_each_round": [round(r["prefill_s"], 3) for r in measured],
                     "peak_rss_mib": max(r["peak_rss_mib"] or 0 for r in measured),
                     "peak_rss_rise_mib": max(r["peak_rss_rise_mib"] or 0 for r in measured),
                     "peak_rss_x": _ratio(max(r["peak_rss_mib"] or 0 for r in measured),
                                          max(r["peak_rss_mib"] or 0 for r in base)),
                     "context_memory_x": _ratio(max(r["peak_rss_rise_mib"] or 0 for r in measured),
                                                max(r["peak_rss_rise_mib"] or 0 for r in base)),
                     "process_peak_rss_mib": max(r["process_peak_rss_mib"] for r in measured),
                     "tokens_equal_unmodified": all(a["tokens_equal"] for a in agree),
                     "max_logit_diff": max((a["max_logit_diff"] or 0.0) for a in agree),
                     "max_abs_logit": max((a["max_abs_logit"] or 0.0) for a in agree)})
    return rows


def _ratio(a, b):
    return round(a / b, 3) if a and b else None


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", "--fixture", type=Path, default=ROOT / "tests" / "fixtures" / "gemma4" / "e2b35",
                        help="a text export folder (openvino_model.xml, config.json)")
    parser.add_argument("--context", type=int, nargs="+", default=[2048])
    parser.add_argument("--chunk", type=int, nargs="+", default=[512], help="prefill chunk sizes; 0: the prompt whole")
    parser.add_argument("--decode", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--config", nargs="+", choices=("default", "exact"), default=["default"])
    parser.add_argument("--forms", default=",".join(FORMS), help=f"comma-separated, among {', '.join(FORMS)}")
    parser.add_argument("--margin", type=int, default=0, help="sliding_window_margin of the bounded and trimmable forms")
    parser.add_argument("--every", type=int, default=1, help="the trimmable forms trim every K decode steps")
    parser.add_argument("--name", help="record name (default sliding_window-<model folder>-<first context>)")
    parser.add_argument("--export-command", help="how the model was exported (recorded)")
    parser.add_argument("--worker", choices=FORMS, help=argparse.SUPPRESS)   # one form's process (serve)
    args = parser.parse_args(argv)
    if args.worker:
        return serve(args.model, args.worker, args.config[0], args.margin, args.every)
    forms = args.forms.split(",")
    if forms[0] != "unmodified" or not set(forms) <= set(FORMS):
        parser.error(f"--forms must start with unmodified and name only {', '.join(FORMS)}")
    config_json = json.loads((args.model / "config.json").read_text())
    text_config = config_json.get("text_config") or config_json
    vocab = text_config.get("vocab_size") or 256
    name = args.name or f"sliding_window-{args.model.name}-{args.context[0]}"
    model_path = args.model.resolve()
    try:
        model_label = str(model_path.relative_to(ROOT))
    except ValueError:
        model_label = str(model_path)
    widths = {k: text_config.get(k) for k in ("hidden_size", "intermediate_size", "num_hidden_layers",
                                              "num_kv_shared_layers", "num_attention_heads", "num_key_value_heads",
                                              "head_dim", "global_head_dim", "sliding_window", "vocab_size")}
    results: list[dict] = []
    compiled_precision: dict[str, dict] = {}

    def save(complete: bool) -> None:
        write_record(name, [row for result in results for row in result["rows"]], complete=complete,
                     model=model_label, widths=widths, export_command=args.export_command,
                     contexts=args.context, chunk=args.chunk, decode=args.decode, rounds=args.rounds,
                     margin=args.margin, every=args.every, compiled_precision=compiled_precision,
                     state_note="kv_held_bytes: the KV cache as the CPU plugin holds it after the prefill "
                                "(fused caches in the compiled model's KEY/VALUE_CACHE_PRECISION, with scales when "
                                "quantized; every other state in its INFERENCE_PRECISION_HINT, double buffered: "
                                "compiled_precision[config][form].held); state_bytes: as query_state() returns "
                                "the states (the IR's declared type, f32)", configs={c: configs()[c] or "CPU plugin defaults (no properties)"
                                                  for c in args.config},
                     measured="per config, context, chunk (0: whole prompt) and round, each form in turn, "
                              "compiled in a fresh process and measured once there: prefill of the whole context "
                              "in chunks, then greedy decode steps (median ms); state = sum of get_byte_size over "
                              "the states after the prefill; kv_held = as the plugin holds them; peak RSS = the "
                              "process' VmHWM reset before the request, context memory (peak_rss_rise) = that "
                              "peak minus the RSS before the request, process peak RSS = its ru_maxrss "
                              "(compilation included)", results=results)

    for config_name in args.config:
        compiled_precision[config_name] = {}
        with tempfile.TemporaryDirectory(prefix="sliding-window-") as scratch:
            for context in args.context:
                for chunk in args.chunk:
                    runs: dict[str, list[dict]] = {f: [] for f in forms}
                    fused: dict[str, int] = {}
                    result = {"config": config_name, "context": context, "chunk": chunk or "whole", "rows": []}
                    results.append(result)
                    for round_ in range(args.rounds):
                        for form in forms:
                            progress(f"{config_name} context {context} chunk {chunk or 'whole'} round "
                                     f"{round_ + 1}/{args.rounds}: {form} (load {_load()})")
                            worker = FormWorker(args.model, form, config_name, args.margin, Path(scratch), args.every)
                            try:
                                fused[form] = worker.fused
                                compiled_precision[config_name][form] = worker.precision
                                m = worker.measure(context, chunk, args.decode, vocab)
                            finally:
                                worker.close()
                            m["load"] = _load()
                            runs[form].append(m)
                            progress(f"  prefill {m['prefill_s']:.2f} s, decode {m['decode_ms']:.1f} ms "
                                     f"(mean {m['decode_ms_mean']:.1f}), KV held {(m['kv_held_bytes'] or 0) / 2**20:.1f} "
                                     f"MiB, peak RSS {m['peak_rss_mib']} MiB (context {m['peak_rss_rise_mib']} MiB)")
                            result["rows"] = [dict(row, config=config_name, context=context, chunk=chunk or "whole",
                                                   load=[r["load"] for r in runs[row["form"]]])
                                              for row in summarise(runs, fused)]
                            save(False)
                    print(f"\n{config_name}, context {context}, chunk {chunk or 'whole'}:")
                    keys = ["form", "fused_sdpa", "kv_held_bytes", "kv_held_x", "prefill_s", "prefill_x", "decode_ms",
                            "decode_x", "decode_ms_mean", "peak_rss_mib", "peak_rss_x", "peak_rss_rise_mib",
                            "context_memory_x", "tokens_equal_unmodified", "max_logit_diff"]
                    print(markdown_table(keys, [[row[k] for k in keys] for row in result["rows"]]), flush=True)
    save(True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
