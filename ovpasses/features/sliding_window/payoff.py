"""When a sliding-window mode pays, for the model at hand: from its plan and from what the benchmarks measured.

Two facts decide it:

* **KV memory**: a bounded or trimmed cache holds at most ``keep`` positions (``W - 1`` plus the margin), the
  unmodified one every position: the mode holds less KV from a context of ``keep + 1`` positions (a trimmable
  cache: right after a trim; between trims it holds up to ``every - 1`` more).
* **Time**: whether every cache the mode touches is in the CPU plugin's fused stateful kernel as exported. The
  bounding takes a cache out of the kernel (decomposed attention over at most W positions on a plain state).
  Where the plugin fused every such cache natively, that was measured slower to decode than native at Gemma 3
  4B widths (1.26-1.37x at 2k); where the native path left some sliding layers unfused, attending over the whole
  context (Gemma 4 E2B's shared caches), far faster (0.10x at 8k and 16k). The trimmable form keeps the caches
  in the fused kernel; it was measured faster to decode than native from 2,048 positions on (Gemma 4 E2B: 0.13x
  at 32k, with the unfused layers' GQA expands rebuilt). :data:`MEASURED` holds those rows with their records.

A third fact says what the mode cannot do alone: fed whole, the trimmable form is the unmodified model until its
first trim, and where sliding layers read *shared* caches the plugin runs them outside its kernel and holds a whole
prompt's scores (Gemma 4 E2B widths, 16k fed whole: out of 23.5 GiB). ``kv_sharing="unshare"`` fuses them;
:data:`UNSHARED_WHOLE` holds what that measured.

:func:`payoff` returns the typed answer; the sentences are the application's.
"""

from __future__ import annotations

from dataclasses import dataclass

from ovpasses._strenum import StrEnum
from ovpasses.features.sliding_window.caches import SlidingWindowCaches
from ovpasses.modes import SlidingWindow


EPYC = "AMD EPYC, 2 cores, no AMX"      # the machine of every record before 2026-11-27-prefill-score-budget.md
XEON_AMX = "Intel Xeon, 2 cores, AMX"   # the tiled first-prompt kernel has AMX there, the decode kernel has not


@dataclass(frozen=True)
class Measured:
    """One measured ratio against the unmodified IR (plugin defaults, openvino 2026.4.1, CPU plugin on ``cpu``),
    with its record."""

    mode: SlidingWindow
    widths: str           # the attention widths of the model measured
    natively_fused: bool  # whether the plugin fused every sliding cache of the unmodified IR
    context: int
    prompt: str           # "whole", "chunks of 1,000", "states set" (decode only)
    decode: float         # decode ms/token median, x the unmodified
    record: str           # benchmarks/records/...
    window: int           # the sliding window of the model measured
    cpu: str = EPYC

    @property
    def family(self) -> str:
        """The model family measured, as its export's ``config.json`` names it (:data:`FAMILIES`)."""
        return FAMILIES[self.widths]

    def to_dict(self) -> dict:
        return {"mode": self.mode.value, "widths": self.widths, "family": self.family,
                "natively_fused": self.natively_fused, "context": self.context, "prompt": self.prompt,
                "decode": self.decode, "record": self.record, "window": self.window, "cpu": self.cpu}


# The family of each widths measured: the ``model_type`` of its Hugging Face config, less a ``_text`` suffix
# (what :func:`family_of` makes of a config), so that a report quotes only the user's own family's rows.
FAMILIES: dict[str, str] = {
    "Gemma 4 E2B": "gemma4", "Gemma 3 4B": "gemma3", "gpt-oss-20b": "gpt_oss", "Command R7B": "cohere2",
    "EXAONE 4 32B": "exaone4", "Gemma 2 2B": "gemma2",
}


def family_of(model_type: str | None) -> str | None:
    """The family a config's ``model_type`` names (``gemma3_text`` -> ``gemma3``), as :data:`FAMILIES` spells it."""
    if not isinstance(model_type, str) or not model_type:
        return None
    return model_type[:-len("_text")] if model_type.endswith("_text") else model_type


_E2B = "benchmarks/records/2026-11-25-sliding-window-real-widths.md"
_NATIVE = "benchmarks/records/2026-11-26-bounded-vs-native.md"
_NATIVE_2 = "benchmarks/records/2026-11-26-bounded-vs-native-2.md"
_NATIVE_3 = "benchmarks/records/2026-11-26-gpt-oss-prefill.md"
_FAMILIES = "benchmarks/records/2026-11-27-cohere2-exaone4-widths.md"
_BUDGET = "benchmarks/records/2026-11-27-prefill-score-budget.md"
_AMX_GAPS = "benchmarks/records/2026-11-27-amx-gaps.md"
_DECODE_GROUPS = "benchmarks/records/2026-11-27-decode-and-groups.md"
MEASURED: tuple[Measured, ...] = (
    Measured(SlidingWindow.BOUNDED, "Gemma 4 E2B", False, 2048, "chunks of 1,000", 0.49, _E2B, 512),
    Measured(SlidingWindow.BOUNDED, "Gemma 4 E2B", False, 8192, "chunks of 1,000", 0.10, _E2B, 512),
    Measured(SlidingWindow.BOUNDED, "Gemma 4 E2B", False, 16384, "chunks of 1,000", 0.10, _E2B, 512),
    Measured(SlidingWindow.BOUNDED, "Gemma 3 4B", True, 2048, "chunks of 1,000", 1.26, _NATIVE, 1024),
    Measured(SlidingWindow.BOUNDED, "Gemma 3 4B", True, 2048, "whole", 1.37, _NATIVE, 1024),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 3 4B", True, 2048, "whole", 0.71, _NATIVE, 1024),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 3 4B", True, 8192, "states set", 0.56, _NATIVE, 1024),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 3 4B", True, 16384, "states set", 0.50, _NATIVE, 1024),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 3 4B", True, 32768, "states set", 0.42, _NATIVE, 1024),
    Measured(SlidingWindow.TRIMMABLE, "gpt-oss-20b", True, 2048, "states set", 0.53, _NATIVE, 128),
    Measured(SlidingWindow.TRIMMABLE, "gpt-oss-20b", True, 16384, "states set", 0.78, _NATIVE, 128),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 3 4B", True, 16384, "whole", 0.50, _NATIVE_2, 1024),
    Measured(SlidingWindow.TRIMMABLE, "gpt-oss-20b", True, 4096, "whole", 0.76, _NATIVE_2, 128),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", False, 4096, "whole", 0.80, _NATIVE_2, 512),
    # with UnfusedSDPAExpandRewrite (the rows above are before it)
    Measured(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", False, 16384, "chunks of 1,000", 0.16, _NATIVE_3, 512),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", False, 32768, "chunks of 1,000", 0.13, _NATIVE_3, 512),
    # windows of 4,096 (3 sliding layers to 1 full), the helper against the unmodified model fed the same chunks
    Measured(SlidingWindow.TRIMMABLE, "Command R7B", True, 16384, "chunks of 1,000", 0.55, _FAMILIES, 4096),
    Measured(SlidingWindow.TRIMMABLE, "EXAONE 4 32B", True, 16384, "chunks of 1,000", 0.93, _FAMILIES, 4096),
    Measured(SlidingWindow.TRIMMABLE, "EXAONE 4 32B", True, 16384, "chunks of up to 1,000 under the score budget",
             0.73, _BUDGET, 4096, XEON_AMX),
    # a 16k prompt fed whole and trimmed after it, both forms stepped in turn in one process (four rounds)
    Measured(SlidingWindow.TRIMMABLE, "Gemma 2 2B", True, 16384, "whole, trimmed after it", 0.797, _DECODE_GROUPS,
             4096, XEON_AMX),
    # E2B widths on the AMX machine, each form in a fresh process (benchmarks/sliding_window.py)
    Measured(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", False, 2048, "whole", 0.67, _AMX_GAPS, 512, XEON_AMX),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", False, 2048, "chunks of 1,000", 0.54, _AMX_GAPS, 512, XEON_AMX),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", False, 8192, "whole", 0.37, _AMX_GAPS, 512, XEON_AMX),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", False, 8192, "chunks of 1,000", 0.28, _AMX_GAPS, 512, XEON_AMX),
    Measured(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", False, 16384, "chunks of 1,000", 0.18, _AMX_GAPS, 512, XEON_AMX),
)


@dataclass(frozen=True)
class MeasuredUnshared:
    """A prompt fed whole to a model whose sliding layers read shared caches, rewritten with
    ``kv_sharing="unshare"`` and ``mode`` (every layer in the plugin's fused kernel), against the unmodified IR:
    peak RSS and context memory (the request's peak over the RSS before it) as ratios, or, where the unmodified
    model ran out of memory, ``peak_mib`` of the form alone and ``memory_gib`` of the machine it ran out of."""

    mode: SlidingWindow
    widths: str
    context: int
    record: str
    peak: float | None = None
    context_memory: float | None = None
    peak_mib: int | None = None
    memory_gib: float | None = None
    cpu: str = XEON_AMX

    @property
    def family(self) -> str:
        return FAMILIES[self.widths]

    def to_dict(self) -> dict:
        return {"mode": self.mode.value, "widths": self.widths, "family": self.family, "context": self.context,
                "record": self.record,
                "peak": self.peak, "context_memory": self.context_memory, "peak_mib": self.peak_mib,
                "memory_gib": self.memory_gib, "cpu": self.cpu}


# Fed whole, the layers that read a shared cache run outside the fused kernel, and the CPU plugin holds their scores
# whole (runtime notes): the trimmable form fed whole is the unmodified model (E2B widths 8k: 0.981x peak RSS).
# Unshared, every layer is fused and its first prompt tiled.
UNSHARED_WHOLE: tuple[MeasuredUnshared, ...] = (
    MeasuredUnshared(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", 2048, _AMX_GAPS, peak=0.945, context_memory=0.648),
    MeasuredUnshared(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", 4096, _AMX_GAPS, peak=0.825, context_memory=0.482),
    MeasuredUnshared(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", 8192, _AMX_GAPS, peak=0.577, context_memory=0.322),
    MeasuredUnshared(SlidingWindow.TRIMMABLE, "Gemma 4 E2B", 16384, _AMX_GAPS, peak_mib=9470, memory_gib=23.5),
)


class Advice(StrEnum):
    """What the payoff says about the mode asked for, on this model (the JSON carries the value)."""

    PAYS = "pays"                            # measured faster where the model's layers stand as they do here
    PREFER_TRIMMABLE = "prefer_trimmable"    # bounded, on caches the plugin fuses natively: trimmable keeps them


@dataclass(frozen=True)
class Payoff:
    """When ``mode`` pays on one model: less KV from ``kv_from`` positions of context; ``natively_fused`` of the
    ``caches`` caches it changes are in the plugin's fused kernel as exported; the advice; the measured rows of
    models whose sliding caches stood as this one's (all fused natively, or not)."""

    mode: SlidingWindow
    kv_from: int | None
    caches: int
    natively_fused: int
    advice: Advice
    measured: tuple[Measured, ...]
    shared_caches: int = 0                       # caches the model leaves shared: kv_sharing="unshare" fuses them
    unshared_whole: tuple[MeasuredUnshared, ...] = ()   # what unsharing measured fed whole (when shared_caches)
    window: int | None = None                    # the rows were measured at this model's window (None: other windows)

    @property
    def decode_from(self) -> int | None:
        """The smallest context at which a row that applies measured decode faster than native."""
        faster = [m.context for m in self.measured if m.decode < 1.0]
        return min(faster) if faster else None

    def to_dict(self) -> dict:
        return {"mode": self.mode.value, "kv_from": self.kv_from, "caches": self.caches,
                "natively_fused": self.natively_fused, "advice": self.advice.value, "decode_from": self.decode_from,
                "measured": [m.to_dict() for m in self.measured], "shared_caches": self.shared_caches,
                "unshared_whole": [m.to_dict() for m in self.unshared_whole], "window": self.window}


def payoff(caches: SlidingWindowCaches, mode: SlidingWindow, shared_caches: int = 0) -> Payoff | None:
    """When ``mode`` pays on the model ``caches`` planned (None: the mode changes no cache). Pure.

    The bounding is advised against (:data:`Advice.PREFER_TRIMMABLE`) where the plugin fuses every cache it would
    bound: measured slower to decode than the fused kernel. The rows that apply are the mode's rows of models
    whose sliding caches stood as this model's do (all fused natively, or not), measured at this model's window
    (its widest) where any was, else at other windows at contexts past this one (a cache holds no less before the
    context passes its window: a row at 2,048 positions says nothing of a window of 4,096); the rows behind the
    advice against bounding are kept whatever their window (what leaving the kernel costs). ``shared_caches``: the
    caches the rewrite leaves shared that ``kv_sharing="unshare"`` would give each reader (0 once unshared); the
    payoff then carries the mode's rows of :data:`UNSHARED_WHOLE`."""
    if mode is SlidingWindow.FULL or not caches.bounded:
        return None
    fused = sum(vid in caches.fused_caches for vid in caches.bounded)
    natively_fused = fused == len(caches.bounded)
    advice = Advice.PREFER_TRIMMABLE if mode is SlidingWindow.BOUNDED and natively_fused else Advice.PAYS
    rows = tuple(m for m in MEASURED if m.mode is mode and m.natively_fused == natively_fused)
    window = max(b.window for b in caches.bounded.values())
    same = tuple(m for m in rows if m.window == window)
    # no cache holds less before the context passes its window: rows of other windows count from there on; what
    # leaving the fused kernel costs (the advice against bounding) is the kernel's, whatever the window
    rows = same or (rows if advice is Advice.PREFER_TRIMMABLE else tuple(m for m in rows if m.context > window))
    unshared = tuple(m for m in UNSHARED_WHOLE if m.mode is mode) if shared_caches else ()
    return Payoff(mode, min(b.keep for b in caches.bounded.values()) + 1, len(caches.bounded), fused, advice, rows,
                  shared_caches, unshared, window if same else None)
