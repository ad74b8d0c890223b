"""``ovpass rewrite --for CLIENT``: the form that pays for a client, from the user's own bench run
(``--from-bench FILE``) or, without one, from the records, with the reason in one line.

Without a bench run the choice is the records' summary (the guides quote their figures):

* ``core`` and ``optimum`` (a program that can call :class:`~ovpasses.SlidingWindowTrimmer`): ``trimmable``
  where the model has caches read by sliding-window layers only and the context passes their window: every
  layer stays in the fused kernel, the trimmed caches hold the window (docs/guides/sliding-window-trimmable.md);
* ``genai`` (stateful; it cannot trim): ``trimmable+blocked`` where the blocked first prompt applies and the
  context is 4,096 tokens or more (below 4k it was measured not to pay: docs/guides/first-prompt-blocked.md);
* ``genai-paged``: the default rewrite (the paged path converts the caches away);
* otherwise the default rewrite, saying that nothing measured pays and that ``ovpass bench`` measures it.
"""

from __future__ import annotations

from pathlib import Path

from ovpasses.app.bench.advice import recommend, trimmer_lines
from ovpasses.app.bench.forms import FORMS, TRIMMED
from ovpasses.app.bench.run import BenchReport, BenchRow, forms_that_apply, load
from ovpasses.errors import InputError

BLOCKED_PAYS_FROM = 4096   # tokens: the blocked first prompt measured paying from 4k (first-prompt-blocked guide)


def from_bench(path: str, client: str, context: int | None) -> tuple[str, str]:
    """The form a bench report recommends for ``client`` (at ``context`` where given), and why."""
    data = load(path)
    if data["client"] != client:
        raise InputError(f"{path} measured --client {data['client']}, not {client}: run ovpass bench with "
                         f"--client {client}")
    report = BenchReport(data["source"], client, data.get("goal", "memory"),
                         rows=[BenchRow(**row) for row in data["rows"] if context is None or row["context"] == context])
    if context is not None and not report.rows:
        contexts = sorted({row["context"] for row in data["rows"]})
        raise InputError(f"{path} measured no context of {context:,} tokens (it has {', '.join(map(str, contexts))})")
    rec = recommend(report, report.goal)
    if rec is None:
        raise InputError(f"{path}: no run of that bench finished: nothing to choose from")
    if rec["form"] == "unmodified":   # the default rewrite changes only what breaks on the runtime
        return "default", f"ovpass bench at {rec['context']:,} tokens: {rec['why']}; the default rewrite only"
    return rec["form"], f"ovpass bench at {rec['context']:,} tokens: {rec['why']}"


# the one form the records weigh for each client (the others get the default rewrite)
WEIGHED = {"core": "trimmable", "optimum": "trimmable", "genai": "trimmable+blocked"}


def from_records(source: Path, client: str, context: int | None) -> tuple[str, str]:
    """The form the records advise for ``client`` on the model at ``source``, and why: the pipeline runs for the
    form the records weigh for the client alone, not for every form bench measures."""
    weighed = WEIGHED.get(client)
    applicable = forms_that_apply(source, client, only=(weighed,)) if weighed else None
    forms, keep = (applicable.forms, applicable.keep) if applicable else ([], None)
    if client in ("core", "optimum") and "trimmable" in forms and (context is None or context > keep + 1):
        return "trimmable", (f"the records: trimmed by your program, the sliding caches hold their window "
                             f"({keep + 1:,}) and every layer stays fused; ovpass bench measures it here")
    if client == "genai" and "trimmable+blocked" in forms and (context or 0) >= BLOCKED_PAYS_FROM:
        return "trimmable+blocked", ("the records: a first prompt of 4k tokens or more fed whole is held less and "
                                     "prefilled faster; ovpass bench measures it here")
    return "default", ("nothing in the records pays for this client" + (" at this context" if context else "") +
                       ": the default rewrite only; ovpass bench measures every form here")


def choose(source: Path, client: str, context: int | None = None, bench_file: str | None = None) -> tuple[str, str]:
    """The form ``rewrite --for`` applies and the reason, in one line."""
    return from_bench(bench_file, client, context) if bench_file else from_records(Path(source), client, context)


def form_options(form: str) -> dict:
    """The rewrite options of ``form`` (unmodified: the default rewrite's, which changes only what breaks)."""
    return dict(FORMS[form][0] or {})


def trimmer_note(client: str, form: str) -> list[str]:
    return trimmer_lines(client) if form in TRIMMED and client in ("core", "optimum") else []
