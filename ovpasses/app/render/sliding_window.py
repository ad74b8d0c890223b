"""The sliding-window part of the text a person reads: KV memory as held, the blocked first prompt, when a mode
pays on the model (its measured rows), which clients get what. Re-exported by :mod:`ovpasses.app.render.text`."""

from __future__ import annotations

from ovpasses.analysis.kv_memory import QUANTIZED
from ovpasses.units import size_text


def bytes_or_unknown(count: int | None) -> str:
    return "an unknown number of bytes (a dynamic head dimension)" if count is None else size_text(count)


def held_bytes_text(held: dict) -> str:
    """The bytes of one entry of ``SlidingWindowCaches.held_at``: as exported -> bounded, or, for trimmable caches
    (held whole until the program trims them), whole until trimmed, after a trim, and per position between trims."""
    if "trimmed" not in held:
        return f"{size_text(held['full'])} -> {size_text(held['bounded'])}"
    per = "?" if held["per_position"] is None else size_text(held["per_position"])
    return (f"{size_text(held['untrimmed'])} whole until the program trims (a client that never trims, or a prompt "
            f"fed whole until the trim after it), {size_text(held['trimmed'])} right after a trim, + {per} per "
            f"position gained between trims (at most one less than the steps between trims, plus a prefill chunk)")


# whose process holds what each configuration of ``SlidingWindowCaches.held_at`` says
HELD_BY = {
    "plugin defaults": "what your program holds when it compiles for CPU with no config (ov.Core, optimum-intel, "
                       "openvino_genai)",
    "exact": "what ovpass check holds (its exact config)",
    "given": "under the config given",
}


def held_text(held: dict) -> str:
    """How a configuration holds the caches (an entry of ``SlidingWindowCaches.held_at``), in words: whose
    process holds it, and in which element types."""
    fused = held["key"] if held["key"] == held["value"] else f"K {held['key']}, V {held['value']}"
    scales = " + scale and zero point" if held["key"] in QUANTIZED else ""
    who = HELD_BY.get(held["config"], held["config"])
    source = {"IR runtime_options": ", as the IR's runtime options ask", "config": ", as the config asks"}.get(
        held["source"], "")
    return (f"{who}: caches in the fused kernel {fused}{scales}{source}; the others {held['plain']}, held twice "
            f"(the plugin keeps a state's old and new value)")


def past_length_source(caches) -> str:
    """Where the bounding reads the past length from (a :class:`SlidingWindowCaches` that bounds a cache)."""
    if caches.reference is not None:
        return caches.reference
    context, tokens = caches.context_inputs
    return f"the {context} input's length less {tokens}'"


TRIMMABLE_CLIENTS = {
    "ov.Core / optimum-intel with ovpasses.features.sliding_window.trim": (
        "each sliding cache cut to its last window - 1 (+ margin) positions every few steps and after each prefill chunk, "
        "still in the plugin's fused kernel: less KV memory and faster decode once the context passes the window"),
    "openvino_genai (stateful or paged), or a program that does not trim": (
        "nothing trims: the model computes as unmodified (same tokens, caches and kernels; the layers the plugin "
        "does not fuse read their caches without the GQA expand's copies), a sync point after each SDPA lets "
        "the CPU plugin free what the layer read, and the masks are not expanded before the SDPAs: a little less "
        "peak memory for a prompt fed whole (benchmarks/records/2026-11-27-mask-expand.md)"),
}


# who gets what from first_prompt="blocked" (measured: benchmarks/records/2026-11-27-blocked-first-prompt.md)
BLOCKED_CLIENTS = {
    "ov.Core, optimum-intel, openvino_genai stateful": (
        "a first prompt longer than the caches keep, fed whole, runs the sliding layers in query blocks and their "
        "caches are born trimmed; later steps and chunks run as trimmable"),
    "openvino_genai paged (continuous batching, ATTENTION_BACKEND=PA, OVMS)": (
        "cannot load this IR: openvino's PagedAttention conversion removes inputs the blocked attention reads; "
        "rewrite without the blocked first prompt for paged clients (LLMPipeline's default falls back to stateful)"),
}


BLOCKED_PAYS = ("measured fed whole at Gemma 3 4B widths: 4k / 16k / 32k peak RSS 0.992x / 0.79x / 0.63x, prefill "
                "0.8x / 0.31x / 0.21x, decode 0.87-0.95x / 0.59x / 0.35x of the unmodified model; gpt-oss-20b widths "
                "4k / 16k / 32k peak 0.986x / 0.90x / 0.83x, prefill 0.77x / 0.58-0.61x / 0.54x; below 4k it does not "
                "pay (2k: 0.5-2% more memory, decode 6-9% slower: keep --first-prompt fused for short prompts) "
                "(benchmarks/records/2026-11-27-release-points.md, "
                "benchmarks/records/2026-11-27-blocked-wide-windows.md)")


def blocked_lines(first_prompt: dict) -> list[str]:
    """What first_prompt="blocked" did (the reports' ``first_prompt``), as lines."""
    blocked = first_prompt["blocked"]
    lines = [f"first prompt: blocked: {len(blocked)} sliding layers run a long first prompt in query blocks, their "
             "caches born trimmed" if blocked else "first prompt: blocked: changed nothing (no trimmable sliding "
             "layer takes it, or an earlier run made it so)"]
    lines += [f"  not blocked: {name}: {reason}" for name, reason in first_prompt["refused"].items()]
    if blocked:
        lines.append(f"  pays: {BLOCKED_PAYS}")
        lines += [f"  {client}: {benefit}" for client, benefit in BLOCKED_CLIENTS.items()]
    return lines


NO_SLIDING_LAYER_TEXT = "this model has no sliding-window layer: --sliding-window has no effect"
BENCH_HINT = "measure it on your machine: ovpass bench DIR"


def payoff_lines(payoff: dict, family: str | None = None) -> list[str]:
    """When a sliding-window mode pays (``sliding_window_payoff`` of the reports), as lines. Only the rows
    measured on ``family`` (the export's, :func:`ovpasses.app.folder.export_family`) are quoted: another
    family's figures say nothing of this one; without any, the lines point to ``ovpass bench``."""
    lines = [f"pays from: less KV than unmodified once the context passes {payoff['kv_from'] - 1} positions"
             + (" (right after a trim)" if payoff["mode"] == "trimmable" else "")]
    rows = [r for r in payoff["measured"] if family is not None and r.get("family") == family]
    unmeasured = (f"decode time: not measured on {'this family' if family is None else family} models; "
                  f"{BENCH_HINT}")
    if payoff["advice"] == "prefer_trimmable":
        measured = (" (measured " + ", ".join(f"{r['decode']:.2f}x at {r['context']:,} ({r['prompt']}, "
                                              f"{r['widths']} widths)" for r in rows) + ")") if rows else ""
        lines.append(f"{'slower' if rows else 'likely slower'} to decode here: the CPU plugin fuses all "
                     f"{payoff['caches']} of these caches as exported, and the bounding takes them out of its kernel"
                     f"{measured}; --sliding-window "
                     "trimmable keeps them fused and bounds them from ov.Core and optimum-intel programs")
        if not rows:
            lines.append(unmeasured)
    else:
        faster = [r for r in rows if r["decode"] < 1.0]
        if faster:
            best = min(faster, key=lambda r: r["decode"])
            at = f" with windows of {payoff['window']:,}" if payoff["window"] else ""
            lines.append(f"decode measured faster than native from {min(r['context'] for r in faster):,} "
                         f"positions at {best['widths']} widths{at} (down to {best['decode']:.2f}x at "
                         f"{best['context']:,}; {best['record']})")
        else:
            lines.append(unmeasured)
    unshared = [r for r in payoff["unshared_whole"] if family is not None and r.get("family") == family]
    if payoff["shared_caches"]:
        lines.append(f"fed whole: the layers that read the {payoff['shared_caches']} shared caches run outside the "
                     "CPU plugin's fused kernel, which holds their scores whole (this form fed whole holds what the "
                     "unmodified model holds); --kv-sharing unshare fuses every layer"
                     + (" (measured fed whole with it, " + _unshared_whole(unshared) + f"; {unshared[0]['record']})"
                        if unshared else ""))
    return lines


def _unshared_whole(rows: list[dict]) -> str:
    """The rows of ``unshared_whole`` as one clause per widths measured, in their order."""
    by_widths: dict[str, list[str]] = {}
    for row in rows:
        figure = (f"peak RSS {row['peak']:.3f}x, context memory {row['context_memory']:.2f}x of unmodified"
                  if row["peak"] is not None else
                  f"{row['peak_mib']:,} MiB peak RSS, where the unmodified model ran out of {row['memory_gib']} GiB")
        by_widths.setdefault(row["widths"], []).append(f"{row['context']:,} positions {figure}")
    return "; ".join(f"{widths} widths: " + "; ".join(parts) for widths, parts in by_widths.items())


# rules whose refusals the summary text says in their own section (kept shared, unreadable operations, caches)
