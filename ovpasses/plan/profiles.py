"""The runtime profile: what the pipeline changes for one OpenVINO release, from the facts of
:mod:`ovpasses.plan.runtimes` (each with the measurement that established it)."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ovpasses.errors import OvpassesError, UnsupportedRuntimeError
from ovpasses.plan.runtimes import (
    FIRST_FIXED,
    NEWEST_KNOWN,
    OLDEST_SUPPORTED,
    PAGED_CPU_IGNORES_WINDOW,
    PAGED_CPU_NEEDS_ONE_HEAD_SIZE,
    PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT,
    PAGED_IGNORES_CHUNK,
    PAGED_WINDOW_NEEDS_SLICE,
    UNFUSED_F16_STATE_FAILS,
    Version,
    installed_version,
    parse_release,
    version_string,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RuntimeProfile:
    """What the pipeline changes for one OpenVINO runtime."""

    version: Version
    name: str                      # "affected" (2025.2 - 2026.1) or "fixed" (2026.2 and newer)
    decompose_cache_shapeof: bool  # KVCacheShapeOfDecomposition on every cache Concat's ShapeOf
    slice_sliding_window_mask: bool = False      # SlidingWindowMaskSliceInsertion: the converter needs it
    paged_cpu_ignores_window: bool = False       # no rewrite gives paged CPU a sliding window
    paged_cpu_one_head_size: bool = False        # CPU PagedAttention wrong when layers' head sizes differ
    paged_cpu_one_query_head_count: bool = False  # ... when their query-head counts differ
    paged_ignores_chunk: bool = False            # the paged path attends across chunked attention's chunks
    unfused_f16_state_fails: bool = False        # CPU: an f16 state of dynamic batch fails out of the fused kernel

    @property
    def version_string(self) -> str:
        return version_string(self.version)


_warned_newer: set[Version] = set()


def profile_for(runtime: str | None = None) -> RuntimeProfile:
    """The profile of ``runtime`` (a release: ``"2026.0"``, ``"2026.4.1"``) or, when None, of the installed runtime.

    Raises :class:`UnsupportedRuntimeError` for a name that is not a release and for a release older than
    :data:`~ovpasses.plan.runtimes.OLDEST_SUPPORTED`; logs a warning (once per release) for one newer than every
    release the profiles were measured on, and applies the fixed profile to it.
    """
    if runtime is None:
        version = installed_version()
        if version < OLDEST_SUPPORTED:
            raise UnsupportedRuntimeError(
                f"the installed openvino {version_string(version)} is older than the oldest supported release "
                f"{version_string(OLDEST_SUPPORTED)}; install openvino>={version_string(OLDEST_SUPPORTED[:2])}")
    elif isinstance(runtime, str):
        version = parse_release(runtime)
        if version < OLDEST_SUPPORTED:
            raise UnsupportedRuntimeError(
                f"ovpasses prepares IRs for openvino {version_string(OLDEST_SUPPORTED[:2])} and newer; "
                f"{runtime.strip()} is older (releases before {version_string(OLDEST_SUPPORTED)} were not measured); "
                f"name a target of {version_string(OLDEST_SUPPORTED[:2])} or newer")
    else:
        raise OvpassesError(f"runtime must be a release name such as '2026.0' or '2026.4.1', or None for the "
                            f"installed openvino; got {type(runtime).__name__} {runtime!r}")
    name = "affected" if version < FIRST_FIXED else "fixed"
    paged = dict(slice_sliding_window_mask=_within(version, PAGED_WINDOW_NEEDS_SLICE),
                 paged_cpu_ignores_window=_within(version, PAGED_CPU_IGNORES_WINDOW),
                 paged_cpu_one_head_size=_within(version, PAGED_CPU_NEEDS_ONE_HEAD_SIZE),
                 paged_cpu_one_query_head_count=_within(version, PAGED_CPU_NEEDS_ONE_QUERY_HEAD_COUNT),
                 paged_ignores_chunk=_within(version, PAGED_IGNORES_CHUNK),
                 unfused_f16_state_fails=_within(version, UNFUSED_F16_STATE_FAILS))
    if version > NEWEST_KNOWN and version not in _warned_newer:
        _warned_newer.add(version)
        log.warning("openvino %s is newer than every release the profiles were measured on (newest %s); "
                    "applying the %s profile, as for %s and newer", version_string(version),
                    version_string(NEWEST_KNOWN), name, version_string(FIRST_FIXED[:2]))
    return RuntimeProfile(version, name, decompose_cache_shapeof=name == "affected", **paged)


def _within(version: tuple[int, int, int], span: tuple[tuple[int, int, int], tuple[int, int, int] | None]) -> bool:
    """``span`` is [first, end); an end of None: not fixed in any release measured."""
    return span[0] <= version and (span[1] is None or version < span[1])
