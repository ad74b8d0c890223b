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
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from ovpasses.app.bench.advice import command, recommend  # noqa: F401 - command: re-exported
from ovpasses.app.bench.estimate import Estimate, attention, estimate, query_heads
from ovpasses.app.bench.forms import CLIENT_FORMS, CLIENTS, FORMS, TRIMMED
from ovpasses.app.bench.worker import TRIM_EVERY
from ovpasses.app.files import io
from ovpasses.errors import InputError
from ovpasses.options import RewriteOptions
from ovpasses.precision import EXACT_CPU_CONFIG

SCHEMA = "ovpass.bench/1"
SHORT_CONTEXT, SHORT_STEPS = 96, 16           # the exact run that compares tokens (past the widest window: below)


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
    rounds: int = 1                     # the runs its figures are the medians of (--rounds)
    decode_ms_range: list[float] | None = None   # the fastest and the slowest of those runs' decode medians

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


def forms_that_apply(source: Path, client: str, contexts: Sequence[int] = (), chunk: int = 0,
                     only: Collection[str] | None = None) -> Applicable:
    """The forms of ``client`` that change the model at ``source`` (an export folder, or its IR), why the others
    are left, the sliding windows those runs found, and each form's estimate at ``contexts`` fed in ``chunk``
    tokens (0: whole), so that nothing runs the pipeline twice for them. ``only``: judge these forms alone (one
    pipeline run each; the others are neither measured nor skipped)."""
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

    unmodified = io.read_ir(xml)   # what OpenVINO cannot read is refused in one line, as the rewrite refuses it
    heads = query_heads(unmodified)
    forms, skipped, window, keep = ["unmodified"], {}, None, None
    for form in CLIENT_FORMS[client][1:]:
        if only is not None and form not in only:
            continue
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
          available: Callable[[], float | None] = available_mib, rounds: int = 1) -> BenchReport:
    """Measure every form of ``client`` that changes the model at ``source`` (an export folder) at each of
    ``contexts``, the prompt whole (``chunk`` 0) or in chunks, ``steps`` decode steps; then recommend one.
    A form whose estimate exceeds ``available()`` MiB (asked before each run) is skipped at that context.
    ``rounds``: every form is run that many times, the forms taking turns (a load that comes and goes falls on
    each alike), and a row holds the medians of its runs with the range of their decode."""
    if client not in CLIENTS:
        raise InputError(f"--client must be one of {', '.join(CLIENTS)}, not {client!r}")
    if goal not in ("memory", "speed"):
        raise InputError(f"--goal must be memory or speed, not {goal!r}")
    if not contexts or min(contexts) < 1 or chunk < 0 or steps < 1 or rounds < 1:
        raise InputError("bench needs contexts of 1 token or more, --chunk 0 (whole) or more, --steps 1 or more and "
                         "--rounds 1 or more")
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
        measured: dict[tuple[str, int], list[dict]] = {}
        done: dict[tuple[str, int], BenchRow] = {}   # a skipped run's row, or the row of the runs made so far
        turns = [(turn, form, context) for turn in range(1, rounds + 1) for form, context in runs]
        try:
            for index, (turn, form, context) in enumerate(turns, 1):
                if (form, context) in done and done[form, context].skipped:   # skipped in an earlier round
                    continue
                need, free = applicable.estimates.get((form, context)), available()
                line = (f"bench: [{index}/{len(turns)}] {form}, {context:,} tokens"
                        f"{f' in chunks of {chunk:,}' if chunk else ' whole'}"
                        f"{f', round {turn} of {rounds}' if rounds > 1 else ''} ({time.monotonic() - started:.0f} s)")
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
                    done[form, context] = row
                    continue
                progress(line)
                measured.setdefault((form, context), []).append(run_worker(job, timeout))
                if form not in short:
                    short[form] = exact_tokens(job)
                done[form, context] = _row(form, context, chunk, estimate_mib, measured[form, context], short)
        except KeyboardInterrupt:
            report.interrupted = True
        report.rows = [done[run] for run in runs if run in done]
    report.recommended = recommend(report, goal)
    return report


def _row(form: str, context: int, chunk: int, estimate_mib: float | None, results: list[dict],
         short: dict[str, list[int] | str]) -> BenchRow:
    """The row of a form's runs at a context: each figure the median of the runs that gave it (a failed run gives
    none; the row fails where every run failed), the range of their decode, and whether its tokens are the
    unmodified model's on the short exact run."""
    ok = [r for r in results if "error" not in r or r["error"] is None]
    if not ok:
        row = BenchRow(form, context, chunk, estimate_mib=estimate_mib, error=results[-1].get("error"),
                       rounds=len(results))
    else:
        figures = {k: _median([r[k] for r in ok if r.get(k) is not None], low=k == "fused") for k in (
            "peak_rss_mib", "context_mib", "kv_mib", "prefill_s", "decode_ms", "fused")}
        decode = [r["decode_ms"] for r in ok if r.get("decode_ms") is not None]
        row = BenchRow(form, context, chunk, estimate_mib=estimate_mib, rounds=len(ok), **figures,
                       decode_ms_range=[min(decode), max(decode)] if len(decode) > 1 else None)
    base = short.get("unmodified")
    failed = next((t for t in (short.get(form), base) if isinstance(t, str)), None)
    row.tokens_equal = None if failed or base is None or form not in short else short[form] == base
    row.tokens_error = failed
    return row


def _median(values: list, low: bool = False):
    """The median of ``values`` (None where there are none); ``low``: one of them (a count: fused SDPAs)."""
    if not values:
        return None
    return statistics.median_low(values) if low else statistics.median(values)


def parts(need: Estimate) -> str:
    return (f"weights {need.weights / 2**20:,.0f}, KV caches {need.kv / 2**20:,.0f}, attention scores "
            f"{need.scores / 2**20:,.0f}")


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
