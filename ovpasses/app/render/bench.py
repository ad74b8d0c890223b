"""``ovpass bench`` as text: one row per form and context, then the form to use, its command and, where the
program trims, the lines it adds; and the plot (``--plot``, matplotlib: the ``[bench]`` extra)."""

from __future__ import annotations



def _cell(value, spec: str = "") -> str:
    return "-" if value is None else format(value, spec)


def bench_text(report) -> str:
    """``report``: an :class:`ovpasses.app.bench.BenchReport` (rendering stands below the flows it renders)."""
    header = ("form", "context", "peak RSS MiB", "context MiB", "KV MiB", "prefill s", "decode ms", "fused", "tokens")
    rows = [header]
    for r in report.rows:
        if r.error or r.skipped:
            rows.append((r.form, f"{r.context:,}", f"FAILED: {r.error}" if r.error else f"skipped: {r.skipped}",
                         "", "", "", "", "", ""))
            continue
        decode = _cell(r.decode_ms, ".1f") + (f" ({r.decode_ms_range[0]:.1f}-{r.decode_ms_range[1]:.1f})"
                                               if r.decode_ms_range else "")
        rows.append((r.form, f"{r.context:,}", _cell(r.peak_rss_mib, ",.0f"), _cell(r.context_mib, ",.0f"),
                     _cell(r.kv_mib, ",.1f"), _cell(r.prefill_s, ".2f"), decode, _cell(r.fused),
                     "-" if r.tokens_equal is None else "equal" if r.tokens_equal else "DIFFER"))
    whole = [row for row in rows if not row[2].startswith(("FAILED", "skipped"))]   # the others span the columns
    widths = [max(len(row[i]) for row in (rows if i < 2 else whole)) for i in range(len(header))]
    rounds = max((r.rounds for r in report.rows), default=1)
    lines = [f"bench: {report.source}, client {report.client}, plugin defaults (tokens: compared under the exact "
             f"config on a short run)" + (f"; medians of {rounds} rounds, decode (fastest-slowest)" if rounds > 1 else "")]
    lines += ["  ".join(cell.ljust(w) if i < 2 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
              .rstrip() for row in rows]
    for form, why in report.skipped.items():
        lines.append(f"not measured: {form}: {why}")
    if report.interrupted:
        lines.append("interrupted: the rows above are the runs that finished")
    rec = report.recommended
    if rec is None:
        lines.append("recommended: nothing (" + ("no run finished" if not report.measured else
                     "the unmodified model did not run, and no form that ran is known to give its tokens") + ")")
    else:
        lines.append(f"recommended for {report.goal}, at {rec['context']:,} tokens: {rec['form']}: {rec['why']}")
        if rec["command"]:
            lines.append(f"  {rec['command']}")
        for line in rec["trimmer"] or ():
            lines.append(f"  {line}")
    return "\n".join(lines) + "\n"


def bench_plot(report, path: str) -> None:
    """Context memory and decode time against context, one line per form."""
    try:
        import matplotlib
    except ImportError:
        from ovpasses.errors import InputError
        raise InputError("--plot needs matplotlib: pip install 'ovpasses[bench]'") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (memory, decode) = plt.subplots(1, 2, figsize=(10, 4))
    for form in dict.fromkeys(r.form for r in report.rows):
        rows = sorted((r for r in report.rows if r.form == form and r.error is None), key=lambda r: r.context)
        memory.plot([r.context for r in rows], [r.context_mib for r in rows], marker="o", label=form)
        decode.plot([r.context for r in rows], [r.decode_ms for r in rows], marker="o", label=form)
    memory.set(xlabel="context (tokens)", ylabel="context memory (MiB)", title=f"{report.client}: memory")
    decode.set(xlabel="context (tokens)", ylabel="decode (ms / token)", title=f"{report.client}: decode")
    memory.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
