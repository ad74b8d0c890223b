"""Facts about OpenVINO releases that ovpasses acts on, as data, each with the measurement behind it.

The pipeline chooses its profile from :data:`OLDEST_SUPPORTED` and :data:`FIRST_FIXED`
(:func:`ovpasses.pipeline.profile_for`), and the IR reader checks an IR's version against
:data:`IR_VERSIONS_READ` before OpenVINO sees the file (:func:`ovpasses.io.check_ir_file`). Nothing
else compares version numbers; a new measurement changes this module, not the passes.
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
# generate): README "What the rewrite does on each runtime", benchmarks/results/runtime_matrix.json.
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

# IR versions (the ``version`` attribute of the root ``<net>``) that ``Core.read_model`` reads.
# Measured (2026-11-22) on openvino 2026.0.0 and 2026.4.1: a one-Add model written by ov.save_model
# (version="11"), its version attribute edited to 1, 5, 6, 7, 9, 10, 11, 12, 13, "abc", "", "10.5",
# "-1" and removed. Both read 10 and 11 only. 9, 12, 13 and a missing attribute fail with "Unable to read
# the model ... Available frontends: ..." after the TensorFlow frontend printed parse errors of its own;
# "abc" and "" fail with "stoll"; "10.5" and "-1" with "... is not an unsigned 64 bit integer".
# ov.save_model writes 11 on both.
IR_VERSIONS_READ: tuple[int, ...] = (10, 11)
IR_VERSIONS_MEASURED_ON: tuple[Version, ...] = ((2026, 0, 0), (2026, 4, 1))

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
