"""What ``ovpass bench`` advises: the form for ``--goal`` read from the rows (:func:`recommend`, pure), the
command that writes it and, where the program trims, the lines it adds."""

from __future__ import annotations

from ovpasses.app.bench.forms import FORMS, TRIMMED

# "no slower": within 10 % of the unmodified model's step. Two runs of one form on a loaded 2-core machine differed
# by more than 5 %, which flipped the advice between runs (benchmarks/records/2026-12-06-bench-vs-script.md)
DECODE_SLACK = 1.10


def recommend(report, goal: str) -> dict | None:
    """The form to use at the longest context measured, and why, in one line (None: nothing ran, or nothing to compare
    with: :func:`_without_baseline` where the unmodified model did not run at that context). ``memory``: the
    least context memory among forms that give the unmodified model's tokens and decode no slower (within
    :data:`DECODE_SLACK`), or says that the tokens could not be compared; ``speed``: the fastest decode among those that hold no more context memory."""
    done = [r for r in report.rows if r.error is None and r.context_mib is not None and r.decode_ms is not None]
    if not done:
        return None
    context = max(r.context for r in done)
    at = {r.form: r for r in done if r.context == context}
    base = at.get("unmodified")
    if base is None:
        return _without_baseline(report, goal, context, at)
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
    return _advice(report, best.form, context, why)


def _without_baseline(report, goal: str, context: int, at: dict) -> dict | None:
    """Where the unmodified model did not run at ``context`` (skipped: it does not fit here; or failed) but forms did:
    among those that gave its tokens on the short run, the least context memory (``memory``) or the fastest decode
    (``speed``): what runs at that context on this machine. None where none of them did."""
    missing = next((r for r in report.rows if r.form == "unmodified" and r.context == context), None)
    fit = [r for r in at.values() if r.tokens_equal]
    if missing is None or not fit:
        return None
    best = min(fit, key=(lambda r: (r.context_mib, r.decode_ms)) if goal == "memory" else
               (lambda r: (r.decode_ms, r.context_mib)))
    reason = (f"skipped: {missing.skipped}" if missing.skipped else f"failed: {missing.error}" if missing.error
              else "it gave no figures")
    why = (f"the unmodified model does not run at {context:,} tokens here ({reason}); "
           + ("the only form that did" if len(at) == 1 else f"of the {len(fit)} forms that did with its tokens, the "
              + ("least context memory" if goal == "memory" else "fastest decode"))
           + f": {best.context_mib:,.0f} MiB of context memory, decode {best.decode_ms:.1f} ms a token, the same tokens"
           + ("; in chunks (--chunk) the unmodified model may fit" if not report.client.startswith("genai")
              and not best.chunk else ""))
    return _advice(report, best.form, context, why)


def _advice(report, form: str, context: int, why: str) -> dict:
    """The recommendation of ``form``: its command (none for the unmodified model) and, where the program trims,
    the lines that call the trimmer."""
    return {"form": form, "context": context, "why": why,
            "command": None if form == "unmodified" else command(report.source, report.client, form),
            "trimmer": trimmer_lines(report.client) if form in TRIMMED and not report.client.startswith("genai")
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
