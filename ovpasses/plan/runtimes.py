"""Facts about OpenVINO releases that ovpasses acts on, as data, each with the measurement behind it.

The pipeline chooses its profile from :data:`OLDEST_SUPPORTED` and :data:`FIRST_FIXED`
(:func:`ovpasses.plan.profiles.profile_for`), the IR reader checks an IR's version against
:data:`IR_VERSIONS_READ` before OpenVINO sees the file (:func:`ovpasses.app.files.io.check_ir_file`), and the
operation-version analysis asks :func:`reads_op` which operations a target runtime reads
(:mod:`ovpasses.features.old_runtimes.analysis`). Nothing else compares version numbers; a new measurement
changes this module, not the passes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import openvino as ov

from ovpasses.errors import UnsupportedRuntimeError

Version = tuple[int, int, int]


@dataclass(frozen=True)
class Release:
    """One OpenVINO release, and what the unmodified Gemma 4 fixtures do on it."""

    version: Version
    # the unmodified fixtures fail at the first inference with "... has null input states";
    # None: this release was not in the runtime matrix
    shared_kv_failure: bool | None
    note: str = ""

    @property
    def version_string(self) -> str:
        return version_string(self.version)


# Measured with ``python tools/runtime_matrix.py`` (2026-11-21; CPU, f32 inference and f32 KV cache;
# fixtures tiny8 and e2b35, unmodified and rewritten, 20 greedy tokens against transformers' own
# generate): docs/runtimes.md (its first table), benchmarks/results/runtime_matrix.json.
RELEASES: tuple[Release, ...] = (
    Release((2025, 2, 0), True),
    Release((2025, 3, 0), None, "not in the runtime matrix; between 2025.2.0 and 2025.4.1, which both fail"),
    Release((2025, 4, 1), True),
    Release((2026, 0, 0), True),
    Release((2026, 1, 0), True),
    Release((2026, 2, 1), False, "e2b35 segfaults at the first inference, rewritten or not"),
    Release((2026, 3, 1), False),
    Release((2026, 4, 1), False),
)

# The oldest release measured. Older releases were not measured and are refused (the package needs
# openvino>=2025.2).
OLDEST_SUPPORTED: Version = (2025, 2, 0)
# The first minor release whose plugin fuses the fixtures' exclusive caches without losing their state
# (2026.2.1 measured; 2026.2.0 not). Releases from OLDEST_SUPPORTED up to this one get the "affected"
# profile, this one and newer the "fixed" profile.
FIRST_FIXED: Version = (2026, 2, 0)
NEWEST_KNOWN: Version = RELEASES[-1].version

# openvino_genai's paged path (continuous batching: SDPAToPagedAttention when the model is loaded, then
# the plugin's PagedAttention), per release, as [first, end) ranges. Measured 2026-11-22 on CPU with f32 inference and an f32 KV cache.
#
# The converter sets sliding_window = 0 for transformers 5's Gemma 4 mask (a BitwiseAnd chain ending
# in Select, without the Slice its gpt-oss pattern needs) and reads the window once a no-op Slice
# follows the Select: paged_attention_transformation on tiny8 gives every PagedAttention a
# sliding_window of 0 on 2025.2.0 - 2026.2.1; with the Slice, 16 on the sliding layers on 2025.4.1 -
# 2026.2.1 and still 0 on 2025.2.0. 2026.3.1 and 2026.4.1 give 16 without it. End to end (openvino_genai,
# tiny8u: one head size) paged tokens leave transformers' at the 7th and, with the Slice, equal them
# on 2026.0.0 - 2026.2.1 for prompts of 12 and 28 tokens.
PAGED_WINDOW_NEEDS_SLICE: tuple[Version, Version | None] = ((2026, 0, 0), (2026, 3, 0))
# ... but the CPU PagedAttention of these releases ignores the window: on 2025.4.1 tiny8u's paged
# tokens with the window read (16) are those without it (0), wrong from the 7th. (The CPU kernel
# honours sliding_window from 2026.0, openvino PR #33035.)
PAGED_CPU_IGNORES_WINDOW: tuple[Version, Version | None] = ((2025, 2, 0), (2026, 0, 0))
# The CPU PagedAttention keeps one executor for every layer of a model, cached by a key that leaves
# out part of the head layout, so a layer whose layout differs from the first's runs kernels made for
# another: garbage, NaN or heap corruption. Until 2026.2 the key is the precision only; openvino PR
# #36363 (in 2026.3) adds head size and KV heads, not query heads. Measured with
# testkit.paged on two-layer stacks without sharing or masks, against a float64 reference:
# head sizes 16 and 32 (4 query heads), or 8 and 16 (8 query heads): wrong on 2026.0.0, 2026.1.0 and
# 2026.2.1, right on 2026.3.1 and 2026.4.1; 4 and 8 query heads (head size 16): wrong on all of these;
# 2 and 1 KV heads: right on all; one layout: right on all. On 2025.2.0 and 2025.4.1 (the same
# precision-only key in their sources; their CPU cache layout is not the one testkit.paged
# feeds) e2b35 (head sizes 8 and 16) is wrong from the first token through openvino_genai, its window
# (512) not reached. None: not fixed in any release measured (2026.4.1 the newest).
PAGED_CPU_NEEDS_ONE_HEAD_SIZE: tuple[Version, Version | None] = ((2025, 2, 0), (2026, 3, 0))
# The SDPA-to-PagedAttention conversion drops the chunked-attention mask (Llama 4's attention_chunk_size) and
# nothing in PagedAttention takes a chunk (its inputs carry a sliding window, no chunk): on 2025.4.1, 2026.0.0
# and 2026.4.1 openvino_genai's paged path decodes tests/fixtures/llama4/tiny4 (chunk 8) as transformers does
# without chunking (its reference.json ``unchunked_reference``), from the 4th token after a 6-token prompt and
# the 1st after a 24-token one; the stateful path keeps the chunk (measured 2026-12-06, EXACT_CPU_CONFIG, the
# folder without its tokenizer IRs for the older genai). 2025.2 - 2025.3 not measured, taken as the same.
# None: no release measured fixes it.
PAGED_IGNORES_CHUNK: tuple[Version, Version | None] = ((2025, 2, 0), None)
PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT: tuple[Version, Version | None] = ((2025, 2, 0), None)
# The CPU plugin cannot run an f16 state (ReadValue f16 -> [Gather] -> Concat f16) whose batch is dynamic out of its
# fused kernel: the first inference fails with "Can not clone with new dims" (a static batch runs). Measured
# 2026-12-07 on a one-layer testkit stack (cache and model f16, batch dynamic, sliding-window mask, prefill 2 and a
# step), bounded or its SDPA decomposed, under EXACT_CPU_CONFIG and plugin defaults: 2026.1.0, 2026.2.1, 2026.3.1 and
# 2026.4.1 fail; 2025.2.0 and 2026.0.0 run it (2025.4.1 not measured, taken as them). The bounding takes caches
# out of the kernel, so it leaves such a cache whole there. None: no release measured fixes it.
UNFUSED_F16_STATE_FAILS: tuple[Version, Version | None] = ((2026, 1, 0), None)

# IR versions (the ``version`` attribute of the root ``<net>``) that ``Core.read_model`` reads.
# Measured (2026-11-22) on openvino 2026.0.0 and 2026.4.1: a one-Add model written by ov.save_model
# (version="11"), its version attribute edited to 1, 5, 6, 7, 9, 10, 11, 12, 13, "abc", "", "10.5",
# "-1" and removed. Both read 10 and 11 only. 9, 12, 13 and a missing attribute fail with "Unable to read
# the model ... Available frontends: ..." after the TensorFlow frontend printed parse errors of its own;
# "abc" and "" fail with "stoll"; "10.5" and "-1" with "... is not an unsigned 64 bit integer".
# ov.save_model writes 11 on both.
# Measured again (2026-11-22, ``python tools/opset_facts.py``, benchmarks/results/opset_facts.json) on
# every release of the runtime matrix, with the versions 1, 5-13: each reads 10 and 11 and writes 11.
IR_VERSIONS_READ: tuple[int, ...] = (10, 11)
IR_VERSIONS_MEASURED_ON: tuple[Version, ...] = (
    (2025, 2, 0), (2025, 4, 1), (2026, 0, 0), (2026, 1, 0), (2026, 2, 1), (2026, 3, 1), (2026, 4, 1))

# Which operation versions each release's IR reader reads. An IR file names each layer's operation by
# type and opset, ``<layer type="ErfInv" version="opset17">``: the opset of the operation's version
# (ov::op::v17::ErfInv is written as opset17, v0 operations as opset1). A release refuses an opset it
# does not know ("Cannot create ErfInv layer ... from unsupported opset: opset17") and an operation its
# opset does not hold ("Opset opset16 doesn't contain the operation with type: OneHot").
#
# Measured 2026-11-22 with ``python tools/opset_facts.py`` (benchmarks/results/opset_facts.json), in
# each runtime venv: the highest ``openvino.opsetN`` module (16 on 2025.2.0 - 2026.1.0, 17 on 2026.2.1 -
# 2026.4.1), the opsets whose Parameter its reader reads (the same), and ``Core.read_model`` of a
# one-layer IR ``<layer type=T version=opsetK>`` -> Result for each of the 237 (type, opsetK) pairs that
# 2026.4.1 registers and reads; and IR files saved by 2026.4.1 with an ErfInv (opset17), a OneHot
# (opset16) and an AvgPool (opset16), read by each release. Every pair not below is read by every
# measured release.
#
# (type, opset) -> the first measured release that reads it. Releases before it refuse it.
OPS_FIRST_READ: dict[tuple[str, str], Version] = {
    ("AvgPool", "opset16"): (2025, 4, 1),        # AvgPool-16 (dilations); 2025.2's opset16 lacks it
    ("OneHot", "opset16"): (2025, 4, 1),         # OneHot-16 (negative_indices_mode); likewise
    ("ErfInv", "opset17"): (2026, 2, 1),         # Gemma 3n's activation sparsity exports it
    ("GroupedMatMul", "opset17"): (2026, 3, 1),
    ("RGBtoNV12", "opset17"): (2026, 4, 1),
    ("BGRtoNV12", "opset17"): (2026, 4, 1),
}
# The highest opset whose operations a release reads; an opset above it is unknown to that release.
HIGHEST_OPSET: dict[Version, int] = {
    (2025, 2, 0): 16, (2025, 4, 1): 16, (2026, 0, 0): 16, (2026, 1, 0): 16,
    (2026, 2, 1): 17, (2026, 3, 1): 17, (2026, 4, 1): 17,
}
OPSETS_MEASURED_ON: tuple[Version, ...] = tuple(HIGHEST_OPSET)

# openvino_genai cannot load a tokenizer that a newer openvino_tokenizers converted: it segfaults.
# Measured 2026-11-22: ``openvino_genai.Tokenizer(tests/fixtures/gemma3n/tiny8)`` (converted by
# openvino_tokenizers 2026.4.1) in each runtime venv: 2025.2.0, 2025.4.1, 2026.0.0, 2026.1.0, 2026.2.1
# and 2026.3.1 segfault, 2026.4.1 loads it. ``ovpass rewrite DIR --runtime OLD`` warns about such a folder.
TOKENIZERS_CRASH_OLDER_GENAI: bool = True

_RELEASE = re.compile(r"(\d{4})\.(\d+)(?:\.(\d+))?(?:-\S*)?")


def version_string(version: Version) -> str:
    return ".".join(map(str, version))


def installed_version() -> Version:
    """The installed OpenVINO's version, from ``openvino.get_version()`` (``2026.4.1-22982-...``)."""
    text = ov.get_version()
    match = _RELEASE.match(text)   # a local build may append more than "-BUILD"
    if match is None:
        raise UnsupportedRuntimeError(f"cannot read a release from the installed openvino's version {text!r}; "
                                      "name the target with runtime='YEAR.MINOR' (--runtime)")
    return _version(match)


def parse_release(text: str) -> Version:
    """A release named ``YEAR.MINOR`` or ``YEAR.MINOR.PATCH`` (optionally followed by ``-BUILD``, as
    ``openvino.get_version()`` prints it) to a version tuple; anything else raises
    :class:`UnsupportedRuntimeError`."""
    match = _RELEASE.fullmatch(text.strip()) if isinstance(text, str) else None
    if match is None:
        raise UnsupportedRuntimeError(
            f"{text!r} is not an OpenVINO release; name one by its version, YEAR.MINOR[.PATCH], e.g. 2026.0 or "
            f"2026.4.1 (known releases: {', '.join(r.version_string for r in RELEASES)})")
    return _version(match)


def _version(match: re.Match) -> Version:
    return int(match.group(1)), int(match.group(2)), int(match.group(3) or 0)


def known_release(version: Version) -> Release | None:
    return next((r for r in RELEASES if r.version == version), None)


def ir_versions_known(runtime: Version) -> bool:
    """Whether :data:`IR_VERSIONS_READ` is known to hold for ``runtime``: measured on two releases and
    taken for every supported one up to the newest known; a newer runtime may read other versions."""
    return OLDEST_SUPPORTED <= runtime <= NEWEST_KNOWN


_OPSET = re.compile(r"opset(\d+)")


def first_release_reading(type_name: str, opset: str) -> Version | None:
    """The first measured release that reads operation ``type_name`` of ``opset`` (as an IR file names
    it); None when no measured release reads it (an opset newer than every measured release's)."""
    if (type_name, opset) in OPS_FIRST_READ:
        return OPS_FIRST_READ[(type_name, opset)]
    match = _OPSET.fullmatch(opset)
    number = int(match.group(1)) if match else 0
    return next((v for v, highest in HIGHEST_OPSET.items() if number <= highest), None)


def reads_op(runtime: Version, type_name: str, opset: str) -> bool:
    """Whether release ``runtime`` reads operation ``type_name`` of ``opset`` from an IR file.

    From the measurements above: a release between two measured ones is taken to read what the older
    of them reads (2025.3.0 as 2025.2.0, 2026.2.0 as 2026.1.0), the conservative side. A release newer
    than :data:`NEWEST_KNOWN` is taken to read everything (what it reads was not measured; the profile
    warns about it). Operations of a version that is not an opset (``extension``: openvino_tokenizers'
    operations, read when that extension is loaded) are not judged here: True.
    """
    if runtime > NEWEST_KNOWN or _OPSET.fullmatch(opset) is None:
        return True
    first = first_release_reading(type_name, opset)
    return first is not None and runtime >= first


def op_types_to_check() -> frozenset[str] | None:
    """The operation types whose versions :func:`reads_op` can find unreadable in a model that the
    installed runtime built: those of :data:`OPS_FIRST_READ`, since every other (type, opset) that a
    measured release registers is read by every measured release. None (check every operation) when the
    installed runtime is newer than every measured one, or its version cannot be read: it may hold
    operation versions that no release was measured on."""
    try:
        if installed_version() <= NEWEST_KNOWN:
            return _SUSPECT_TYPES
    except UnsupportedRuntimeError:
        pass
    return None


_SUSPECT_TYPES = frozenset(t for t, _ in OPS_FIRST_READ)
