"""What a rewrite is asked to do: one typed value, :class:`RewriteOptions`, validated once where it is made.

Every entry point (:func:`ovpasses.rewrite`, :func:`ovpasses.compile_model`, the inspect report, the check,
the folder flow, the CLI) takes a :class:`RewriteOptions`; nothing below them sees a mode as a bare string.
A mode is an enum (:class:`KVSharing`, :class:`SlidingWindow`, :class:`PagedHeads`, in :mod:`ovpasses.modes`)
whose members carry a one-line description; the runtime is parsed once into its :class:`~ovpasses.plan.profiles.RuntimeProfile`,
and ``passes`` into the set of pass names it selects.

Adding a value to a mode is one member in :mod:`ovpasses.modes` (with its description) and the code that carries it
out in its feature's home; what a feature requires of the options as a whole is its registered check
(:data:`ovpasses.registry.CHECKS`), and the pass names ``passes=`` takes are the registry's. The CLI's choices and
help are made from the members (:data:`MODES`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import get_type_hints

from ovpasses.errors import InvalidOptionError, UnknownPassError
from ovpasses.modes import FirstPrompt, KVSharing, Mode, OptionChoice, PagedHeads, SlidingWindow  # noqa: F401 - re-exported
from ovpasses.plan.profiles import RuntimeProfile, profile_for
from ovpasses.registry import CHECKS, PASS_NAMES  # noqa: F401 - PASS_NAMES: the names passes= takes, re-exported


@dataclass(frozen=True)
class RewriteOptions:
    """What a rewrite does, validated when it is made (an :class:`InvalidOptionError` says what is expected).

    ``runtime``: the release to prepare the IR for, given as a release name (``"2026.0"``, ``"2026.4.1"``), a
    :class:`RuntimeProfile` or None (the installed runtime), and held as its profile.
    ``passes``: the passes to run, given as None (all), one name, ``"A,B"`` or names, and held as the set of
    names (:func:`parse_passes`). A mode may be given as its enum member or its value (``"unshare"``).
    ``sliding_window_margin``: with ``sliding_window=bounded``, positions a bounded cache keeps beyond its
    window, so that a client may take that many back.
    """

    runtime: RuntimeProfile = None   # type: ignore[assignment] - None and a name are parsed at construction
    passes: frozenset[str] = None    # type: ignore[assignment] - likewise: None is every pass
    kv_sharing: KVSharing = KVSharing.KEEP
    sliding_window: SlidingWindow = SlidingWindow.FULL
    paged_heads: PagedHeads = PagedHeads.KEEP
    first_prompt: FirstPrompt = FirstPrompt.FUSED
    sliding_window_margin: int = field(default=0)

    def __post_init__(self) -> None:
        if not isinstance(self.runtime, RuntimeProfile):
            object.__setattr__(self, "runtime", profile_for(self.runtime))
        object.__setattr__(self, "passes", parse_passes(self.passes))
        for name, kind in MODES.items():
            object.__setattr__(self, name, parse_mode(name, kind, getattr(self, name)))
        margin = self.sliding_window_margin
        if not isinstance(margin, int) or isinstance(margin, bool) or margin < 0:
            raise InvalidOptionError(f"sliding_window_margin must be a whole number of positions >= 0, not "
                                     f"{margin!r}")
        for check in CHECKS:   # what a feature requires of the options as a whole
            check(self)

    @property
    def profile(self) -> RuntimeProfile:
        """The runtime profile the rewrite applies (``runtime``, parsed)."""
        return self.runtime

    def selects(self, pass_name: str) -> bool:
        return pass_name in self.passes


def parse_mode(name: str, kind: type[Mode], value) -> Mode:
    """``value`` (a member of ``kind`` or its value) as the member; :class:`InvalidOptionError` naming the
    valid values otherwise."""
    try:
        return kind(value)
    except ValueError:
        raise InvalidOptionError(f"{name} must be one of {', '.join(m.value for m in kind)}, not {value!r}") from None


def parse_passes(passes: str | Iterable[str] | None) -> frozenset[str]:
    """The pass names ``passes`` selects: all when None, else one name (``"A"``), a comma-separated
    string (``"A,B"``, as ``--passes`` takes it) or an iterable of names. Raises :class:`UnknownPassError`
    naming the valid names on an unknown or missing name, and saying what is expected on another type."""
    if passes is None:
        return frozenset(PASS_NAMES)
    if isinstance(passes, str):
        names = passes.split(",")
    elif isinstance(passes, Iterable) and not isinstance(passes, (bytes, bytearray)):
        names = list(passes)
    else:
        names = None
    valid = ", ".join(PASS_NAMES)
    if names is None or not all(isinstance(n, str) for n in names):
        raise UnknownPassError(f"passes must be None, a pass name, a string 'A,B' or a list of pass names; got "
                               f"{type(passes).__name__} {passes!r}; valid names: {valid}")
    selected = frozenset(n.strip() for n in names if n.strip())
    if not selected:
        raise UnknownPassError(f"passes {passes!r} names no pass; valid names: {valid}")
    unknown = sorted(selected - set(PASS_NAMES))
    if unknown:
        raise UnknownPassError(f"unknown pass{'es' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                               f"valid names: {valid}")
    return selected


# The fields of RewriteOptions that are modes, with their enum (the CLI makes one choice option of each).
MODES: dict[str, type[Mode]] = {name: kind for name, kind in get_type_hints(RewriteOptions).items()
                                if isinstance(kind, type) and issubclass(kind, Mode)}


def options_from(options: RewriteOptions | None, **keywords) -> RewriteOptions:
    """``options``, or the :class:`RewriteOptions` of the keywords that :func:`ovpasses.rewrite` took before it
    took ``options`` (``runtime``, ``passes``, ``kv_sharing``, ...; a keyword of None is not given). Giving
    both is an :class:`InvalidOptionError`: one of them would be silently ignored."""
    given = {name: value for name, value in keywords.items() if value is not None}
    if options is None:
        return RewriteOptions(**given)
    if not isinstance(options, RewriteOptions):
        raise InvalidOptionError(f"options must be a RewriteOptions, not {type(options).__name__}")
    if given:
        raise InvalidOptionError(f"give the options either as options= or as keywords, not both (got options= and "
                                 f"{', '.join(sorted(given))}=)")
    return options
