"""The modes of a rewrite, as enums: what :class:`~ovpasses.options.RewriteOptions` holds and what the JSON
reports spell. A member carries a one-line description (the CLI's help is made from it).

:class:`OptionChoice` names one option and one of its values, as data: the library says "the option
``paged_heads=pad`` mends this" with it, and the application renders it as a flag (``--paged-heads pad``) or
a keyword.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Mode(str, enum.Enum):
    """A mode's value (what the CLI and the JSON reports spell) and a one-line description of it."""

    def __new__(cls, value: str, description: str = ""):
        member = str.__new__(cls, value)
        member._value_ = value
        member.description = description
        return member

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


class KVSharing(Mode):
    """What the rewrite does with KV caches that several SDPAs read."""

    KEEP = "keep", "shared KV caches stay shared"
    UNSHARE = "unshare", ("give each borrower a cache of its own, so the plugin fuses every layer, at extra cache "
                          "memory per token")


class SlidingWindow(Mode):
    """What the rewrite does with KV caches that only sliding-window attention reads."""

    FULL = "full", "every KV cache holds the whole context"
    BOUNDED = "bounded", ("a cache that only sliding-window attention reads keeps its last W-1 positions (the "
                          "stateful path: ov.Core, optimum-intel, openvino_genai with ATTENTION_BACKEND=SDPA)")
    TRIMMABLE = "trimmable", ("such caches stay in the plugin's fused kernel and stay exact when the program trims "
                              "them to their last W-1 positions (ovpasses.features.sliding_window.trim: ov.Core and "
                              "optimum-intel programs); a client that does not trim (openvino_genai) runs the "
                              "model as unmodified")


class FirstPrompt(Mode):
    """How a first prompt fed whole runs the sliding layers whose caches are trimmable."""

    FUSED = "fused", "in the plugin's fused kernel, as exported (each sliding layer computes the whole prompt's square)"
    BLOCKED = "blocked", ("with the trimmable sliding-window mode: a first prompt longer than the window runs the sliding "
                          "layers' attention in query blocks and their caches are born trimmed (faster and leaner long "
                          "prompts fed whole: ov.Core, optimum-intel, openvino_genai stateful; not paged clients)")


class PagedHeads(Mode):
    """Whether the rewrite gives every KV cache and attention layer one head layout (for paged attention)."""

    KEEP = "keep"
    PAD = "pad", ("every KV cache and attention layer gets one KV-head count and head size (zero padding, "
                  "repeated KV heads), which the CPU PagedAttention of openvino 2025.2 - 2026.2 needs "
                  "(continuous batching, OVMS), at more KV memory per token")


@dataclass(frozen=True)
class OptionChoice:
    """One option of :class:`~ovpasses.options.RewriteOptions` (its field name) set to one value."""

    option: str
    value: Mode
