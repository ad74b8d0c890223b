"""``ovpass bench``: every form of a model that pays for a client, measured on this machine, and the one to use.

A *form* is what ``ovpass rewrite`` writes with a set of flags (:data:`FORMS`): ``unmodified`` (the export as
it is), ``default`` (no flag), ``bounded``, ``trimmable`` (the program trims the sliding caches with
:class:`~ovpasses.SlidingWindowTrimmer`), ``trimmable+blocked`` (a long first prompt fed whole runs the sliding
layers in query blocks) and ``unshare``. A form is measured where it changes the model and the client can run
it (:data:`CLIENT_FORMS`: genai cannot call the trimmer, so it gets ``trimmable`` only born trimmed, through
``trimmable+blocked``; its paged path converts the states away, so only the default rewrite matters there).

Each form and context is run in a fresh process (:mod:`ovpasses.app.bench.worker`) at the plugin's defaults,
then once more, short, under the exact config (:data:`ovpasses.precision.EXACT_CPU_CONFIG`) so that its tokens
can be compared with the unmodified model's. A form whose estimated memory at a context
(:mod:`ovpasses.app.bench.estimate`) exceeds what this machine has available is skipped there, with its
estimate. :func:`recommend` picks the form for ``--goal``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ovpasses.app.bench.estimate import Estimate, attention, estimate, query_heads
from ovpasses.app.bench.worker import TRIM_EVERY
from ovpasses.errors import InputError
from ovpasses.options import RewriteOptions
from ovpasses.precision import EXACT_CPU_CONFIG

SCHEMA = "ovpass.bench/1"
CLIENTS = ("core", "optimum", "genai", "genai-paged")
# form -> the options ``ovpass rewrite`` takes for it (None: the export as it is) and its flags
FORMS: dict[str, tuple[dict | None, tuple[str, ...]]] = {
    "unmodified": (None, ()),
    "default": ({}, ()),
    "bounded": ({"sliding_window": "bounded"}, ("--sliding-window", "bounded")),
    "trimmable": ({"sliding_window": "trimmable"}, ("--sliding-window", "trimmable")),
    "trimmable+blocked": ({"sliding_window": "trimmable", "first_prompt": "blocked"},
                          ("--sliding-window", "trimmable", "--first-prompt", "blocked")),
    "unshare": ({"kv_sharing": "unshare"}, ("--kv-sharing", "unshare")),
}
CLIENT_FORMS = {
    "core": ("unmodified", "default", "bounded", "trimmable", "trimmable+blocked", "unshare"),
    "optimum": ("unmodified", "default", "bounded", "trimmable", "trimmable+blocked", "unshare"),
    "genai": ("unmodified", "default", "bounded", "trimmable+blocked", "unshare"),
    "genai-paged": ("unmodified", "default"),
}
TRIMMED = {"trimmable", "trimmable+blocked"}   # forms whose program runs the trimmer (core, optimum)
SHORT_CONTEXT, SHORT_STEPS = 96, 16           # the exact run that compares tokens (past the widest window: below)
# "no slower": within 10 % of the unmodified model's step. Two runs of one form on a loaded 2-core machine differed
# by more than 5 %, which flipped the advice between runs (benchmarks/records/2026-12-06-bench-vs-script.md)
DECODE_SLACK = 1.10


@dataclass
class BenchRow:
    form: str
    context: int
    chunk: int
    peak_rss_mib: float | None = None
    context_mib: float | None = None
    kv_mib: float | None = None
    prefill_s: float | None = None
    decode_ms: float | None = None
    fused: int | None = None
    tokens_equal: bool | None = None
    error: str | None = None
    tokens_error: str | None = None   # why the tokens could not be compared
    estimate_mib: float | None = None   # what the form was estimated to hold (weights, KV, scores) before it ran
    skipped: str | None = None          # why it was not run: its estimate exceeds the memory available

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class BenchReport:
    source: str
    client: str
    goal: str
    rows: list[BenchRow] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)   # form -> why it was not measured
    recommended: dict | None = None
    interrupted: bool = False

    @property
    def measured(self) -> bool:
        """Whether any run finished (a skipped or failed row is none)."""
        return any(r.error is None and r.skipped is None for r in self.rows)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "source": self.source, "client": self.client, "goal": self.goal,
                "rows": [r.to_dict() for r in self.rows], "skipped": dict(self.skipped),
                "recommended": self.recommended, "interrupted": self.interrupted}


def check_client(client: str) -> None:
    """:class:`InputError` where the client's package is not installed here."""
    if client.startswith("genai"):
        try:
            import openvino_genai  # noqa: F401
        except ImportError:
            raise InputError(f"--client {client} runs openvino_genai, which is not installed: pip install "
                             "'ovpasses[genai]'") from None


@dataclass(frozen=True)
class Applicable:
    """What :func:`forms_that_apply` learnt of a model for a client, from one pipeline run per form."""

    forms: list[str]             # the forms measured, "unmodified" first
    skipped: dict[str, str]      # form -> why it is not measured
    window: int                  # the widest sliding window (0: none): the exact run goes past it
    keep: int | None = None      # the most positions a trimmed cache keeps (None: no trimmable form)
    # (form, context) -> what the form holds there, fed as asked (None: not known; empty: no contexts asked)
    estimates: dict[tuple[str, int], Estimate | None] = field(default_factory=dict)


def decoder_xml(source: Path) -> Path:
    """The decoder IR of ``source``: an export folder's ``openvino_model.xml``, or the ``.xml`` given."""
    return source if source.suffix == ".xml" else source / "openvino_model.xml"


def forms_that_apply(source: Path, client: str, contexts: Sequence[int] = (), chunk: int = 0) -> Applicable:
    """The forms of ``client`` that change the model at ``source`` (an export folder, or its IR), why the others
    are left, the sliding windows those runs found, and each form's estimate at ``contexts`` fed in ``chunk``
    tokens (0: whole), so that nothing runs the pipeline twice for them."""
    import openvino as ov

    from ovpasses.analysis.kv_memory import held_precision, model_kv_bytes_held
    from ovpasses.features.sliding_window.caches import trimmable_caches
    from ovpasses.pipeline import run_pipeline

    xml = decoder_xml(source)
    bin_path = xml.with_suffix(".bin")
    weights = bin_path.stat().st_size if bin_path.exists() else 0
    estimates: dict[tuple[str, int], Estimate | None] = {}

    def estimate_at(form: str, model, layers, trims: dict[str, int]) -> None:
        """Per context: the form's weights, its KV caches as held when its prompt ends (a cache the program trims
        after each chunk at most its keep and a chunk more), its prompt's scores (genai's paged path: its own
        kernel, no scores counted)."""
        precision = held_precision(model) if contexts else None
        for context in contexts:
            positions = {vid: min(context, keep + max(chunk, TRIM_EVERY)) for vid, keep in trims.items()} \
                if chunk else None
            kv = model_kv_bytes_held(model, context, precision, positions or None)
            estimates[form, context] = estimate(weights, kv, () if client == "genai-paged" else layers, context,
                                                chunk)

    unmodified = ov.Core().read_model(xml)
    heads = query_heads(unmodified)
    forms, skipped, window, keep = ["unmodified"], {}, None, None
    for form in CLIENT_FORMS[client][1:]:
        options, _ = FORMS[form]
        model = ov.Core().read_model(xml)
        summary = run_pipeline(model, RewriteOptions(**options))
        if form == "default":   # its run holds the unmodified model's verdicts too
            estimate_at("unmodified", unmodified, attention(summary, heads, unmodified=True), {})
            del unmodified
        caches = summary.sliding_window_caches
        if options.get("sliding_window") is not None:   # a sliding-window run saw every sliding cache
            window = max(window or 0, max((b.window for b in caches.bounded.values()), default=0)
                         if caches is not None else 0)
        if form == "default":
            why = None if summary.changed else "the default rewrite changes nothing on this model"
        elif form == "bounded":
            why = None if caches is not None and caches.bounded else "no cache is read by sliding-window layers only"
        elif form == "trimmable":
            kept = trimmable_caches(model)
            keep = max(kept.values()) if kept else None
            why = None if kept else "no cache is read by sliding-window layers only"
        elif form == "trimmable+blocked":
            blocked = any(p.name == "BlockedFirstPrompt" and p.changed for p in summary.passes)
            why = None if blocked else "no sliding layer takes the blocked first prompt (windows too wide, or none)"
        else:
            why = None if summary.analysis.shared_cache_count else "no cache is shared"
        if why is None:
            forms.append(form)
            trims = trimmable_caches(model) if form in TRIMMED and not client.startswith("genai") else {}
            estimate_at(form, model, attention(summary, heads), trims)
        else:
            skipped[form] = why
    return Applicable(forms, skipped, widest_window(source) if window is None else window, keep, estimates)


def widest_window(source: Path) -> int:
    """The widest sliding window of the model at ``source`` (0: none), where no form's run has said it."""
    import openvino as ov

    from ovpasses.pipeline import run_pipeline

    caches = run_pipeline(ov.Core().read_model(decoder_xml(source)),
                          RewriteOptions(sliding_window="bounded")).sliding_window_caches
    return max((b.window for b in caches.bounded.values()), default=0) if caches is not None else 0


def available_mib() -> float | None:
    """``MemAvailable`` of this machine, in MiB (None where /proc does not say)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def run_worker(job: dict, timeout: float) -> dict:
    """One measurement in a fresh process; its result, or ``{"error": ...}``. Ctrl-C kills it and propagates."""
    proc = subprocess.Popen([sys.executable, "-m", "ovpasses.app.bench.worker", json.dumps(job)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"error": f"timed out after {timeout:.0f} s"}
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    lines = [line for line in out.splitlines() if line.startswith("{")]
    if proc.returncode == 0 and lines:
        return json.loads(lines[-1])
    if proc.returncode < 0:
        return {"error": f"the process was killed (signal {-proc.returncode}"
                         + (": out of memory?)" if -proc.returncode == signal.SIGKILL else ")")}
    tail = [line.strip() for line in err.splitlines() if line.strip()]
    return {"error": tail[-1][:300] if tail else f"exit {proc.returncode}"}


def too_big(need: Estimate | None, available: float | None) -> bool:
    """Whether an estimate exceeds the memory available (not where either is unknown)."""
    return need is not None and available is not None and need.mib > available


def bench(source: Path, client: str, contexts: list[int], chunk: int = 0, steps: int = 32, goal: str = "memory",
          progress: Callable[[str], None] = lambda message: None, timeout: float = 3600,
          available: Callable[[], float | None] = available_mib) -> BenchReport:
    """Measure every form of ``client`` that changes the model at ``source`` (an export folder) at each of
    ``contexts``, the prompt whole (``chunk`` 0) or in chunks, ``steps`` decode steps; then recommend one.
    A form whose estimate exceeds ``available()`` MiB (asked before each run) is skipped at that context."""
    if client not in CLIENTS:
        raise InputError(f"--client must be one of {', '.join(CLIENTS)}, not {client!r}")
    if goal not in ("memory", "speed"):
        raise InputError(f"--goal must be memory or speed, not {goal!r}")
    if not contexts or min(contexts) < 1 or chunk < 0 or steps < 1:
        raise InputError("bench needs contexts of 1 token or more, --chunk 0 (whole) or more and --steps 1 or more")
    if client.startswith("genai") and chunk:
        raise InputError(f"--client {client} feeds the prompt whole (openvino_genai does): drop --chunk")
    check_client(client)
    source = Path(source)
    if not (source / "openvino_model.xml").exists():
        raise InputError(f"{source}: bench measures an export folder with openvino_model.xml (optimum-cli export "
                         "openvino), which this is not")
    applicable = forms_that_apply(source, client, contexts, chunk)
    forms, skipped = applicable.forms, applicable.skipped
    runs = [(form, context) for context in contexts for form in forms]
    free = available()
    if all(too_big(applicable.estimates.get(run), free) for run in runs):
        form, context = min(runs, key=lambda run: applicable.estimates[run].mib)
        need = applicable.estimates[form, context]
        raise InputError(f"no form fits: the least, {form} at {context:,} tokens, needs about {need.mib:,.0f} MiB "
                         f"({parts(need)}); this machine has {free:,.0f} MiB available: give a shorter --context")
    report = BenchReport(str(source), client, goal, skipped=skipped)
    short_context = max(SHORT_CONTEXT, applicable.window + SHORT_STEPS)
    with tempfile.TemporaryDirectory(prefix="ovpass-bench-") as tmp:
        folders = {form: source for form in forms}
        if client.startswith("genai"):   # genai reads a folder; the other clients' workers rewrite in memory
            from ovpasses.app.folder import rewrite_folder
            for form in forms[1:]:
                folders[form] = Path(tmp) / form.replace("+", "-")
                rewrite_folder(source, folders[form], RewriteOptions(**FORMS[form][0]))
        short: dict[str, list[int] | str] = {}

        def exact_tokens(job: dict) -> list[int] | str:
            """The form's tokens on the short run under the exact config, or why there are none."""
            exact_job = dict(job, context=short_context, steps=SHORT_STEPS, config=dict(EXACT_CPU_CONFIG),
                             chunk=min(chunk, short_context // 2) if chunk else 0)
            exact = run_worker(exact_job, timeout)
            if "tokens" not in exact:   # once more: a run was measured failing once and not again
                exact = run_worker(exact_job, timeout)
            return exact["tokens"] if "tokens" in exact else f"the exact run failed: {exact['error']}"

        started = time.monotonic()
        try:
            for index, (form, context) in enumerate(runs, 1):
                need, free = applicable.estimates.get((form, context)), available()
                line = (f"bench: [{index}/{len(runs)}] {form}, {context:,} tokens"
                        f"{f' in chunks of {chunk:,}' if chunk else ' whole'} ({time.monotonic() - started:.0f} s)")
                job = {"folder": str(folders[form]), "client": client, "context": context, "chunk": chunk,
                       "steps": steps, "config": {}, "trim": form in TRIMMED and not client.startswith("genai"),
                       "options": None if client.startswith("genai") else FORMS[form][0]}
                estimate_mib = None if need is None else round(need.mib, 1)
                if too_big(need, free):
                    row = BenchRow(form, context, chunk, estimate_mib=estimate_mib,
                                   skipped=f"needs about {need.mib:,.0f} MiB, {free:,.0f} MiB available")
                    progress(f"{line}: skipped, {row.skipped} ({parts(need)})")
                    if form == "unmodified" and form not in short:   # still the tokens the others are held to
                        short[form] = exact_tokens(job)
                    report.rows.append(row)
                    continue
                progress(line)
                result = run_worker(job, timeout)
                if form not in short:
                    short[form] = exact_tokens(job)
                row = BenchRow(form, context, chunk, estimate_mib=estimate_mib, **{k: result.get(k) for k in (
                    "peak_rss_mib", "context_mib", "kv_mib", "prefill_s", "decode_ms", "fused", "error")})
                base = short.get("unmodified")
                failed = next((t for t in (short[form], base) if isinstance(t, str)), None)
                row.tokens_equal = None if failed or base is None else short[form] == base
                row.tokens_error = failed
                report.rows.append(row)
        except KeyboardInterrupt:
            report.interrupted = True
    report.recommended = recommend(report, goal)
    return report


def parts(need: Estimate) -> str:
    return (f"weights {need.weights / 2**20:,.0f}, KV caches {need.kv / 2**20:,.0f}, attention scores "
            f"{need.scores / 2**20:,.0f}")


def recommend(report: BenchReport, goal: str) -> dict | None:
    """The form to use at the longest context measured, and why, in one line (None: nothing ran). ``memory``: the
    least context memory among forms that give the unmodified model's tokens and decode no slower (within
    :data:`DECODE_SLACK`), or says that the tokens could not be compared; ``speed``: the fastest decode among those that hold no more context memory."""
    done = [r for r in report.rows if r.error is None and r.context_mib is not None and r.decode_ms is not None]
    if not done:
        return None
    context = max(r.context for r in done)
    at = {r.form: r for r in done if r.context == context}
    base = at.get("unmodified")
    if base is None:
        return None
    fit = [r for r in at.values() if r.form == "unmodified" or r.tokens_equal]
    unknown = next((r.tokens_error for r in at.values() if r.tokens_error), None)
    if len(fit) == 1 and unknown:
        return {"form": "unmodified", "context": context, "command": None, "trimmer": None,
                "why": f"the forms' tokens could not be compared with the unmodified model's ({unknown}): "
                       "run ovpass bench again"}
    if goal == "memory":
        fit = [r for r in fit if r.decode_ms <= base.decode_ms * DECODE_SLACK]
        best = min(fit, key=lambda r: (r.context_mib, r.decode_ms))
        why = (f"{best.context_mib:,.0f} MiB of context memory against {base.context_mib:,.0f} unmodified "
               f"({best.context_mib / base.context_mib:.2f}x), decode {best.decode_ms / base.decode_ms:.2f}x, the same "
               f"tokens" if best is not base else
               "no form holds less context memory and decodes as fast with the same tokens: keep the model as it is")
    else:
        fit = [r for r in fit if r.context_mib <= base.context_mib]
        best = min(fit, key=lambda r: (r.decode_ms, r.context_mib))
        why = (f"decode {best.decode_ms:.1f} ms a token against {base.decode_ms:.1f} unmodified "
               f"({best.decode_ms / base.decode_ms:.2f}x), context memory {best.context_mib / base.context_mib:.2f}x, "
               f"the same tokens" if best is not base else
               "no form decodes faster without holding more context memory: keep the model as it is")
    return {"form": best.form, "context": context, "why": why,
            "command": None if best.form == "unmodified" else command(report.source, report.client, best.form),
            "trimmer": trimmer_lines(report.client) if best.form in TRIMMED and not report.client.startswith("genai")
            else None}


def command(source: str, client: str, form: str) -> str:
    flags = " ".join(FORMS[form][1])
    target = f"{source.rstrip('/')}-{form.replace('+', '-')}"
    return f"ovpass rewrite {source} -o {target}" + (f" {flags}" if flags else "")


def trimmer_lines(client: str) -> list[str]:
    """The lines a program adds to trim the sliding caches (:class:`~ovpasses.SlidingWindowTrimmer`)."""
    if client == "optimum":
        return ["from ovpasses import SlidingWindowTrimmer",
                "model = OVModelForCausalLM.from_pretrained(REWRITTEN_FOLDER, compile=True)",
                "SlidingWindowTrimmer.attach(model, every=32)   # then model.generate(...) as before"]
    return ["from ovpasses import SlidingWindowTrimmer",
            "trimmer = SlidingWindowTrimmer.for_model(model, request, every=32)",
            "trimmer.trim()   # after each prompt chunk; trimmer.step() after each generated token"]


def load(path: str | os.PathLike) -> dict:
    """A bench JSON (``ovpass bench --format json``), checked to be one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise InputError(f"{path}: not a bench report ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InputError(f"{path}: not a bench report (schema {SCHEMA}: ovpass bench --format json writes one)")
    return data


__all__ = ["CLIENTS", "FORMS", "SCHEMA", "BenchReport", "BenchRow", "bench", "command", "load", "recommend"]
