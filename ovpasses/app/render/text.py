"""The text a person reads: the sentence of each typed decision, and a rewrite summary as lines.

The decisions themselves are enum values (:mod:`ovpasses.plan.decisions`); this is the one place where they
become sentences. Nothing reads these sentences back.
"""

from __future__ import annotations

import textwrap
from collections import Counter
from typing import TYPE_CHECKING

from ovpasses.rules import Status
from ovpasses.analysis.kv_memory import QUANTIZED
from ovpasses.features.sliding_window.caches import HELD_CONTEXT, REFUSALS, Refusal
from ovpasses.features.sliding_window.plan import MaskAction
from ovpasses.analysis.stateful_fusion import Fusion, FusionVerdict
from ovpasses.errors import InvalidOptionError, UnreadableOperationError
from ovpasses.features.old_runtimes.plan import refusal_message
from ovpasses.modes import FirstPrompt, KVSharing, OptionChoice, PagedHeads, SlidingWindow
from ovpasses.features.paged_heads.plan import PagedHeadsAction
from ovpasses.features.paged_heads.attention_head_padding import AttentionHeadPadding
from ovpasses.features.paged_heads.paged_path import PagedRisk, PagedWarning
from ovpasses.plan.decisions import Action, Lowered
from ovpasses.plan.runtimes import OPSETS_MEASURED_ON, version_string
from ovpasses.units import size_text  # noqa: F401 - the renderers' size formatter, re-exported

if TYPE_CHECKING:
    from ovpasses.features.old_runtimes.plan import OpVersionAction
    from ovpasses.summary import RewriteSummary

ACTION_TEXT = {
    Action.NATIVE: "none: fused natively",
    Action.NATIVE_UNFUSED: "none: the plugin leaves this shared cache unfused",
    Action.UNANALYSED: "none: a sub-graph operation (not analysed) also reads this cache; left as it is",
    Action.STATELESS: "none: reads no cache",
    Action.SHAPEOF: "cache ShapeOf computed from the Concat inputs, so the plugin can fuse it",
    Action.BARRIER: "kept out of stateful fusion (no-op Reshape on K/V)",
    Action.DECOMPOSE: "decomposed (scale after MatMul(Q,K^T)): no other way to keep it out of fusion",
    Action.UNSHARED: "reads a KV cache of its own (unshared), so the plugin can fuse it",
    Action.BOUNDED: "reads a bounded sliding-window cache (its last W-1 positions); not fused",
    Action.TRIMMABLE: "reads a sliding-window cache the program may trim to its last W-1 positions; still fused",
}

MASK_ACTION_TEXT = {
    MaskAction.SLICE: "Slice inserted: the paged converter reads the window from it",
    MaskAction.SLICED_ALREADY: "none: read through a Slice already; the paged converter reads the window",
    MaskAction.NATIVE: "nothing to do: openvino_genai's paged path on this runtime reads this window as exported",
    MaskAction.IGNORED: "none: this runtime's CPU PagedAttention ignores sliding windows (see the warning)",
}


FUSION_TEXT = {
    Fusion.FUSED: "fused: ",
    Fusion.FUSED_AFTER_REWRITE: "fused after rewrite: ",
    Fusion.FUSED_STATE_LOST: "fused, but ",
    Fusion.NOT_FUSED: "not fused: ",
}
# what a table whose own column says fused or not still has to say before the reason
FUSION_WHY = {Fusion.FUSED_AFTER_REWRITE: "after rewrite: ", Fusion.FUSED_STATE_LOST: "fused, but "}


def fusion_text(verdict: FusionVerdict | dict) -> str:
    """A fusion verdict (a :class:`FusionVerdict` or its dict) as one sentence: the verdict, then why."""
    outcome, reason = (verdict["outcome"], verdict["reason"]) if isinstance(verdict, dict) else \
        (verdict.outcome, verdict.reason)
    return FUSION_TEXT[Fusion(outcome)] + reason


def fusion_why(verdict: dict) -> str:
    """Why, for a table whose own column says whether the SDPA is fused (a verdict's dict)."""
    return FUSION_WHY.get(Fusion(verdict["outcome"]), "") + verdict["reason"]


def planned(text: str, not_applied: str | None) -> str:
    """A planned action's sentence, or, when ``passes=`` left its pass out, what was not applied."""
    return text if not_applied is None else f"not applied (pass {not_applied} not selected); planned: {text}"


def action_text(action: Action | str, not_applied: str | None = None) -> str:
    return planned(ACTION_TEXT[Action(action)], not_applied)


def mask_action_text(action: MaskAction | str, not_applied: str | None = None) -> str:
    return planned(MASK_ACTION_TEXT[MaskAction(action)], not_applied)


def op_action_text(item: OpVersionAction | dict) -> str:
    """What became of an operation the target cannot read (an :class:`OpVersionAction` or its dict), as a
    sentence."""
    action, reason, pass_name = ((item["action"], item["reason"], item["pass"]) if isinstance(item, dict) else
                                 (item.action, item.reason, item.pass_name))
    action = Lowered(action)
    if action == Lowered.CONSTANT_FOLDED:
        return f"constant-folded: {reason} ({pass_name})"
    if action == Lowered.CONVERTED:
        return f"converted to {reason} ({pass_name})"
    if action == Lowered.REPLACED:
        return "replaced"
    return f"refused: {reason}"


WIDTH = 100   # the widest line of text output


def fit(text: str, width: int = WIDTH, hanging: int = 4) -> str:
    """``text`` with every line wider than ``width`` wrapped at spaces, its continuation lines indented
    ``hanging`` more than the line's own indent. A word wider than the room left (a long node name) stays
    whole, on a line of its own: a name is for copying."""
    out = []
    for line in text.split("\n"):
        if len(line) <= width:
            out.append(line)
            continue
        indent = " " * (len(line) - len(line.lstrip(" ")))
        out += textwrap.wrap(line.strip(" "), width, initial_indent=indent, subsequent_indent=indent + " " * hanging,
                             break_long_words=False, break_on_hyphens=False) or [line]
    return "\n".join(out)


def _bytes(count: int | None) -> str:
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


def eager_lines(entries: list[dict]) -> list[str]:
    """The eager attention subgraphs found (``RewriteSummary.eager_to_dicts()``), how many are SDPAs now,
    and why each other one is left eager."""
    if not entries:
        return []
    recovered = sum(e["recovered"] for e in entries)
    not_applied = {e["not_applied"] for e in entries if e["not_applied"]}
    lines = [f"eager attention: {len(entries)} subgraphs, {recovered} recovered as ScaledDotProductAttention"
             + (f" (not applied: {', '.join(sorted(not_applied))} not selected)" if not_applied else "")]
    lines += [f"  left eager: {e['name']}: {e['reason']}" for e in entries if not e["recoverable"]]
    return lines


# who gets what from sliding_window="trimmable" (measured: benchmarks/records/2026-11-26-bounded-vs-native.md)
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


PROFILE_TEXT = {
    "fixed": "fixed profile: its CPU plugin keeps the state of the caches it fuses",
    "affected": "affected profile: its CPU plugin can lose the state of a cache it fuses; the rewrite works around it",
}


def profile_text(name: str) -> str:
    """What a runtime profile's name means to a user."""
    return PROFILE_TEXT.get(name, f"{name} profile")


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
OWN_REFUSAL_LINES = frozenset({"SharedKVCacheUnsharing", "ErfInvConstantFolding", "ConvertOneHot16ToOneHot1",
                               "SlidingWindowKVCacheBounding", "TrimmableSlidingWindowKVCache",
                               "BlockedFirstPrompt"})


STATE_KINDS = {"scan": "carried through a scan Loop", "conv": "convolution", "recurrent": "recurrent",
               "unread": "read by nothing"}


def states_text(states: list[dict]) -> str | None:
    """``"3 states that are not KV caches (2 convolution, 1 carried through a scan Loop): left as they are"``
    (entries of ``KVSharingAnalysis.to_dict()["states"]``); None where there are none."""
    if not states:
        return None
    counts: dict[str, int] = {}
    for state in states:
        counts[state["kind"]] = counts.get(state["kind"], 0) + 1
    kinds = ", ".join(f"{n} {STATE_KINDS[kind]}" for kind, n in counts.items())
    many = len(states) > 1
    return (f"{len(states)} state{'s that are not KV caches' if many else ' that is not a KV cache'} ({kinds}): "
            f"left as {'they are' if many else 'it is'}")


def summary_text(summary: RewriteSummary, family: str | None = None) -> str:
    """The rewrite summary as lines: what was detected, what each pass changed, what was not applied and
    how the model is left, the masks, the caches unshared or bounded, and every warning. ``family``: the
    export's model family, whose measurements the payoff quotes (:func:`payoff_lines`)."""
    counts = summary.analysis.status_counts()
    caches = summary.analysis.caches
    lines = [
        f"runtime {summary.profile.version_string} ({profile_text(summary.profile.name)})",
        f"detected: {len(caches)} caches ({summary.analysis.shared_cache_count} shared), "
        f"SDPA exclusive={counts['exclusive']} shared={counts['shared']} stateless={counts['stateless']}",
    ]
    states = states_text([s.to_dict() for s in summary.analysis.states.values()])
    if states:
        lines.append(states)
    for p in summary.passes:
        lines.append(f"{p.name}: {len(p.changed)} changed" + (f" ({', '.join(p.changed[:3])}"
                                                              f"{', ...' if len(p.changed) > 3 else ''})"
                                                              if p.changed else ""))
    for record in summary.records:   # the unsharing's and the lowering's refusals have their own lines below
        if record.status is Status.REFUSED and record.rule not in OWN_REFUSAL_LINES:
            handed = f"; handed to {record.planned.fallback}" if record.planned.fallback else ""
            lines.append(f"{record.rule} refused {record.node}: {record.reason}{handed}")
    lines += eager_lines(summary.eager_to_dicts())
    fusion = summary.fusion()
    for pass_, names in summary.not_applied().items():
        layers = ", ".join(str(summary.analysis.layer(n)) for n in names)
        lines.append(f"not applied ({pass_} not selected): layer{'s' if len(names) > 1 else ''} {layers}; "
                     f"planned: {action_text(summary.decisions[names[0]].action)}")
        for name in names:
            lines.append(f"  layer {summary.analysis.layer(name)} as left: {fusion_text(fusion[name])}")
    for mask in summary.masks:   # the Select's name is in to_dict()
        text = mask_action_text(summary.mask_actions[mask.select], summary.masks_not_applied.get(mask.select))
        lines.append(f"sliding-window mask (window {mask.window}, "
                     f"{len(mask.sdpa_direct) + len(mask.sdpa_sliced)} SDPA): {text}")
    no_effect = summary.no_effect()
    if "kv_sharing" in no_effect:
        lines.append(f"kv sharing: {summary.kv_sharing}: changed nothing: "
                     + ("no cache is shared" if "no_shared_cache" in no_effect["kv_sharing"] else
                        "every shared cache is kept shared (below)"))
    elif summary.kv_sharing is not KVSharing.KEEP:
        lines.append(f"kv sharing: {summary.kv_sharing}: {len(summary.unshared)} caches added, "
                     f"{_bytes(summary.extra_cache_bytes_per_token)} per token of context (batch 1)")
    for cache, reason in summary.kept_shared.items():
        lines.append(f"kept shared: {cache}: {reason}")
    bounded = summary.sliding_window_caches
    if "sliding_window" in no_effect and bounded is not None and not bounded.has_sliding_layer:
        lines.append(f"sliding window: {summary.sliding_window}: {NO_SLIDING_LAYER_TEXT}")
    elif "sliding_window" in no_effect:   # one line, whatever the number of caches
        reasons = "; ".join(f"{count} cache{'s' if count > 1 else ''}: {REFUSALS[Refusal(reason)]}"
                            for reason, count in no_effect["sliding_window"].items())
        lines.append(f"sliding window: {summary.sliding_window}: changed nothing: {reasons or 'the model has no cache'}")
    elif summary.sliding_window is not SlidingWindow.FULL and bounded is not None:
        verb = "trimmable by the program (ovpasses.features.sliding_window.trim)" \
            if summary.sliding_window is SlidingWindow.TRIMMABLE else "bounded"
        lines.append(f"sliding window: {summary.sliding_window}: {len(bounded.bounded)} caches {verb}"
                     + (f" (window {', '.join(map(str, sorted({b.window for b in bounded.bounded.values()})))}, "
                        f"past length from {past_length_source(bounded)})" if bounded.bounded else ""))
        whole = [vid for vid, refusal in bounded.refused.items() if refusal.reason is Refusal.FULL_ATTENTION]
        if whole:   # as it must be: a full-attention layer reads every position
            lines.append(f"  kept whole: {len(whole)} cache{'s' if len(whole) > 1 else ''} of full-attention layers, "
                         "which read every position")
        for vid, refusal in bounded.refused.items():
            if refusal.reason is not Refusal.FULL_ATTENTION:
                lines.append(f"  not {'trimmable' if summary.sliding_window is SlidingWindow.TRIMMABLE else 'bounded'}: "
                             f"{vid}: {refusal.message}")
        trimmable = summary.sliding_window is SlidingWindow.TRIMMABLE
        lines += [f"  KV held at {h['context']} tokens, {held_text(h)}: {held_bytes_text(h)}"
                  for h in bounded.held_at(HELD_CONTEXT, trimmable)]
        if (pays := summary.sliding_window_payoff) is not None:
            lines += ["  " + line for line in payoff_lines(pays.to_dict(), family)]
        if trimmable and bounded.bounded:
            lines += [f"  {client}: {benefit}" for client, benefit in TRIMMABLE_CLIENTS.items()]
    if summary.options.first_prompt is FirstPrompt.BLOCKED:
        lines += blocked_lines(summary.first_prompt_to_dict())
    lines += paged_heads_lines(summary.paged_heads.to_dict()) if summary.paged_heads else []
    for message in summary.analysis.unhandled:
        lines.append(f"not handled: {message}")
    for finding in summary.findings:
        lines.append(f"warning: KV sharing: {finding.message}")
    for warning in summary.warnings:
        lines.append(f"warning: {paged_warning_text(warning)}")
    measured = summary.profile.version in OPSETS_MEASURED_ON
    for item in summary.op_versions:
        verb = "cannot read" if measured else "is not known to read"   # between measured releases
        lines.append(f"{summary.profile.version_string} {verb} {item.op.describe()}: {op_action_text(item)}")
    return "\n".join(lines)


def error_text(error: Exception) -> str:
    """What ``ovpass`` says of an error: an operation the target cannot read names its ``--runtime`` option, an
    option that needs another names both as flags; any other error says its own message."""
    if isinstance(error, UnreadableOperationError) and error.refused:
        message = refusal_message(error.target, error.refused, lambda _release: "--runtime")
        return message if error.path is None else f"{error.path}: {message}"
    if isinstance(error, InvalidOptionError) and error.needs is not None:   # the CLI speaks in its flags
        return (f"{option_flag(error.choice)} needs {option_flag(error.needs)}"
                + (f", not {option_flag(error.given)}" if error.given is not None else ""))
    return str(error)


def option_flag(choice: OptionChoice) -> str:
    """An option set to a value as ``ovpass`` spells it: ``--paged-heads pad``."""
    return f"--{choice.option.replace('_', '-')} {choice.value}"


def option_keyword(choice: OptionChoice) -> str:
    """... and as :func:`ovpasses.rewrite` takes it: ``paged_heads='pad'``."""
    return f"{choice.option}='{choice.value}'"


def _cost(before: int | None, after: int | None) -> str:
    if not before or not after:
        return "KV bytes per token unknown (a dynamic dimension)"
    return f"KV cache per token (batch 1) {size_text(before)} -> {size_text(after)} ({after / before:.2f}x)"


def paged_warning_text(warning: PagedWarning | dict) -> str:
    """A :class:`PagedWarning` (or its dict, as the reports carry it) as the sentence a person reads: what goes
    wrong where, and the ways out."""
    w = warning.to_dict() if isinstance(warning, PagedWarning) else warning
    where = (f"paged attention on CPU (openvino_genai with a SchedulerConfig, OpenVINO Model Server) on "
             f"openvino {w['runtime']}")
    stateful = 'use the stateful path (LLMPipeline(..., ATTENTION_BACKEND="SDPA"))'
    layouts = ", ".join(f"{layout} in {count} layer{'s' if count > 1 else ''}" for layout, count in w["layouts"])
    option = None if w["option"] is None else OptionChoice(w["option"]["option"], w["option"]["value"])
    fixed = None if w["fixed_in"] is None else ".".join(w["fixed_in"].split(".")[:2])
    risk = PagedRisk(w["risk"])
    if risk == PagedRisk.MIXED_HEAD_SIZES:
        newer = f"{stateful} or openvino {fixed} or newer" if fixed else stateful
        return (f"{where} gives wrong tokens with this model: its PagedAttention mixes up layers whose head size "
                f"differs, and these differ (heads x head size: {layouts}); ovpass rewrite "
                f"{option_flag(option)} ({option_keyword(option)}) gives every layer one, at more "
                f"KV memory; or {newer}")
    if risk == PagedRisk.MIXED_QUERY_HEADS:
        fixes = "no release measured fixes it" if fixed is None else f"openvino {fixed} fixes it"
        return (f"{where} gives wrong tokens with this model: its PagedAttention mixes up layers whose number of "
                f"query heads differs, and these differ (heads x head size: {layouts}); no rewrite changes that, "
                f"and {fixes}; {stateful}")
    if risk == PagedRisk.IGNORES_WINDOW:
        newer = f" or openvino {fixed} or newer" if fixed else ""
        return (f"{where} ignores sliding windows: tokens are wrong once prompt and output outgrow the window "
                f"({', '.join(map(str, w['windows']))}) of this model's sliding layers; no rewrite changes that; "
                f"{stateful}{newer}")
    if risk == PagedRisk.IGNORES_CHUNK:
        return (f"{where} ignores chunked attention: tokens are wrong once prompt and output outgrow a chunk "
                f"({', '.join(map(str, w['windows']))} positions) of this model's chunked layers (measured on openvino "
                f"2025.4.1, 2026.0.0 and 2026.4.1: the paged path decodes as if the model had no chunks); no rewrite changes "
                f"that; {stateful}")
    if risk == PagedRisk.PADDING_NOT_NEEDED:
        return (f"{option_flag(option)} is not needed on openvino {w['runtime']}: its CPU PagedAttention keys "
                f"its executors by head size and KV heads; the padding only costs memory "
                f"({_cost(*w['bytes_per_token'])})")
    return (f"{option_flag(option)} could not pad this model ({w['refusal']['message']}): the paged path "
            f"on openvino {w['runtime']} stays wrong where head layouts differ")


def with_warning_texts(data: dict) -> dict:
    """A report (``RewriteSummary.to_dict()``, an inspect report) as ``ovpass`` prints it in JSON: its paged-path
    warnings as their sentences."""
    return {**data, "warnings": [paged_warning_text(w) for w in data.get("warnings", [])]} \
        if "warnings" in data else data


def paged_heads_lines(data: dict) -> list[str]:
    """The report lines of a :meth:`~ovpasses.features.paged_heads.plan.PagedHeadsStep.to_dict` (rewrite and inspect print
    the same); none when there is nothing to say (one layout, or padding neither asked for nor needed by the
    runtime)."""
    target = "x".join(map(str, data["target"])) if data["target"] else None
    cost = _cost(data["bytes_per_token"], data["bytes_per_token_padded"])
    action = PagedHeadsAction(data["action"])
    if action == PagedHeadsAction.PADDED:
        return [f"paged heads: pad: {len(data['changed'])} caches padded to {target} (KV heads x head size; were "
                f"{data['layouts']})", f"  {cost}", f"  layers: {_layer_heads(data['layers'])}"]
    if action == PagedHeadsAction.REFUSED:
        return [f"paged heads: not padded: {r['message']}" for r in data["refusals"][:3]]
    if action == PagedHeadsAction.NOT_SELECTED:
        return [f"paged heads: not applied (pass {AttentionHeadPadding.NAME} not selected); planned: "
                f"{len(data['padded'])} caches to {target}"]
    if action == PagedHeadsAction.KEPT and data["padded"] and data["needed"]:
        pad = OptionChoice("paged_heads", PagedHeads.PAD)
        return [f"paged heads: {data['layouts']} (KV heads x head size)",
                f"  {option_flag(pad)} would make every cache {target}: {cost}",
                f"  layers: {_layer_heads(data['layers'])}"]
    return []


def _layer_heads(layers: list[dict]) -> str:
    """``"8 query heads on 1x8 in 28 layers, ..."``: the layers' heads as exported (query heads on KV heads x
    head size; ``/Ev`` where V's head size differs), grouped."""
    def one(layer: dict) -> str:
        v_size = "" if layer["v_head_size"] == layer["head_size"] else f"/{layer['v_head_size']}"
        return f"{layer['q_heads']} query heads on {layer['kv_heads']}x{layer['head_size']}{v_size}"

    counts = Counter(one(layer) for layer in layers)
    return ", ".join(f"{heads} in {n} layer{'s' if n > 1 else ''}" for heads, n in counts.items())
