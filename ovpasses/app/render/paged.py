"""The paged path's part of the text a person reads: each paged-path warning as its sentence, and the
``--paged-heads pad`` section. Re-exported by :mod:`ovpasses.app.render.text`."""

from __future__ import annotations

from collections import Counter

from ovpasses.features.paged_heads.attention_head_padding import AttentionHeadPadding
from ovpasses.features.paged_heads.paged_path import PagedRisk, PagedWarning
from ovpasses.features.paged_heads.plan import PagedHeadsAction
from ovpasses.modes import OptionChoice, PagedHeads
from ovpasses.units import size_text


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
