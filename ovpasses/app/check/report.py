"""What ``ovpass check`` found for one IR: :class:`CheckReport` (the two runs, the comparison, the verdict and
its reasons, as text and JSON) and the lines of what the trimmer did (:func:`trimmed_lines`). Made by
:func:`ovpasses.app.check.side_by_side.check_model`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from ovpasses.app.check.verdict import INCONCLUSIVE, RunResult, reduced_precision
from ovpasses.modes import SlidingWindow


@dataclass
class CheckReport:
    """``ovpass check``: the original and the rewritten model on the same inputs.

    ``runtime``/``target`` is the release whose profile the rewrite applied; ``ran_on`` is the installed
    OpenVINO, which ran both models. ``target_exercised`` is False when they differ: the check then says
    nothing about how the models run on the target.
    """

    runtime: str
    profile: str
    device: str
    config: dict
    steps: int
    prefill: int
    atol: float
    rtol: float
    changed: bool
    original: RunResult
    rewritten: RunResult
    ran_on: str = ""
    target: str = ""
    target_exercised: bool = True
    max_abs_diff: float | None = None      # over the elements finite in both, all outputs and steps both ran
    max_abs_diff_output: str | None = None
    tolerance: float | None = None         # atol + rtol * max |original output|
    outputs_equal: bool | None = None      # None: no step to compare
    steps_compared: int = 0
    values_compared: int = 0
    nonfinite_same: int = 0
    nonfinite_only_original: int = 0
    nonfinite_only_rewritten: int = 0
    verdict: str = ""
    verdict_code: str = INCONCLUSIVE
    ok: bool = False                       # the verdict is ok or fixed
    # where the original fails: the same IR with every SDPA decomposed, and how the rewritten model compares
    reference: RunResult | None = None
    reference_max_abs_diff: float | None = None
    reference_tolerance: float | None = None
    inputs_from: list[str] = field(default_factory=list)   # the export's embedding IRs that made inputs
    prefill_chunk: int | None = None       # the prefill in inferences of at most this many tokens (None: one)
    sliding_window: SlidingWindow = SlidingWindow.FULL   # the rewrite's
    # with sliding_window="bounded": the fewest and the most positions a bounded cache keeps (None: none
    # bounded); a context (prefill + steps) that never exceeds the most leaves a bounded cache whole
    bounded_keep: int | None = None
    bounded_keep_max: int | None = None
    prefill_chosen: bool = False           # the prefill was picked by the check (past the bound), not given

    @property
    def trimming(self) -> bool:
        """The rewrite made trimmable caches, and the rewritten model ran with the library's trimmer."""
        return self.sliding_window is SlidingWindow.TRIMMABLE and self.bounded_keep is not None

    @property
    def bounding_exercised(self) -> bool | None:
        """Whether every bounded cache dropped positions before a step that was compared (None: no cache
        bounded): the last inference reads a past of ``prefill + steps - 1`` positions, beyond the most any
        bounded cache keeps. For trimmable caches, whether the trimmer cut them before an inference that was
        compared (what the rewritten model ran, not what the context would allow)."""
        if self.bounded_keep_max is None:
            return None
        if self.trimming:
            return any(index < self.steps_compared - 1 for index in self.rewritten.trimmed_after)
        return self.prefill + self.steps > self.bounded_keep_max + 1

    def to_dict(self) -> dict:
        data = {k: v for k, v in asdict(self).items() if k not in ("original", "rewritten", "reference")}
        data["bounding_exercised"] = self.bounding_exercised
        data["original"] = self.original.to_dict()
        data["rewritten"] = self.rewritten.to_dict()
        data["reference"] = self.reference.to_dict() if self.reference is not None else None
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    def __str__(self) -> str:
        def line(r: RunResult) -> str:
            if not r.compiled:
                return f"{r.label:<9}: compile FAILED: {r.error}"
            head = f"{r.label:<9}: compiled (fused SDPA {r.fused_sdpa}), "
            if r.ran:
                return head + f"ran {r.steps_total} inferences"
            return head + f"FAILED at inference {r.steps_run + 1}/{r.steps_total}: {r.error}"

        config = json.dumps(self.config) if self.config else "(device defaults)"
        if self.target_exercised:
            head = [f"runtime {self.runtime} ({self.profile} profile), device {self.device} {config}"]
        else:
            head = [f"target runtime {self.target} ({self.profile} profile); both models ran on the installed "
                    f"openvino {self.ran_on}: the target runtime was not exercised",
                    f"device {self.device} {config}"]
        reduced = reduced_precision(*(r for r in (self.original, self.rewritten, self.reference) if r is not None))
        if reduced is not None:
            head.append(f"computed in {reduced.describe()} (read back from the compiled model): differences of "
                        f"rounding are expected")
        made = f" (embeddings through {', '.join(self.inputs_from)})" if self.inputs_from else ""
        chunked = f" in chunks of {self.prefill_chunk}" if self.prefill_chunk is not None else ""
        lines = head + [f"inputs: prefill {self.prefill} tokens{chunked} + {self.steps} decode steps{made}; rewrite "
                        f"changed the model: {'yes' if self.changed else 'no'}"]
        if self.trimming:
            lines += trimmed_lines(self)
        elif self.sliding_window is not SlidingWindow.FULL:
            if self.bounded_keep is None:
                lines.append(f"sliding window {self.sliding_window}: no cache bounded")
            elif self.bounding_exercised:
                chosen = " (the prefill picked past it)" if self.prefill_chosen else ""
                lines.append(f"sliding window {self.sliding_window}: bounded caches keep {self.bounded_keep} to "
                             f"{self.bounded_keep_max} positions; the context ({self.prefill + self.steps} tokens) "
                             f"exceeds that{chosen}, so the comparison covers steps that read a bounded cache")
            else:
                lines.append(f"sliding window {self.sliding_window}: bounded caches keep {self.bounded_keep} to "
                             f"{self.bounded_keep_max} positions and the context ({self.prefill + self.steps} tokens) "
                             f"never exceeds that: the bounding was not exercised; give --prefill beyond "
                             f"{self.bounded_keep_max} (or leave --prefill out) to compare it")
        lines += [line(self.original), line(self.rewritten)]
        if self.reference is not None:
            lines.append(line(self.reference) + " (every SDPA decomposed by the specification)")
            if self.reference_max_abs_diff is not None:
                lines.append(f"max |reference - rewritten| = {self.reference_max_abs_diff:.3g}; tolerance "
                             f"{self.reference_tolerance:.3g}")
        if self.max_abs_diff is not None:
            lines.append(f"max |original - rewritten| = {self.max_abs_diff:.3g} (output {self.max_abs_diff_output}); "
                         f"tolerance {self.tolerance:.3g} = atol {self.atol:g} + rtol {self.rtol:g} * max|original|")
        if self.nonfinite_same or self.nonfinite_only_original or self.nonfinite_only_rewritten:
            lines.append(f"NaN or infinity: {self.nonfinite_same} places in both (they agree), "
                         f"{self.nonfinite_only_original} only in the original, "
                         f"{self.nonfinite_only_rewritten} only in the rewritten")
        for r in (self.original, self.rewritten):
            if r.fusion_disagreements:
                count = len(r.fusion_disagreements)
                lines.append(f"{r.label}: {count} SDPA{'s' if count > 1 else ''} fused otherwise than predicted:")
                lines += [f"  {line}" for line in r.fusion_disagreements]
        lines.append(f"verdict: {self.verdict}")
        return "\n".join(lines)


def trimmed_lines(report: CheckReport) -> list[str]:
    """What the trimmer did in a check of trimmable caches: how many positions each trimmed cache held after
    its trims, or that nothing was trimmed, and whether a compared step read a trimmed cache."""
    run = report.rewritten
    head = (f"sliding window trimmable: the rewritten model ran with the library's trimmer (SlidingWindowTrimmer, "
            f"a trim after every inference); trimmable caches keep {report.bounded_keep}"
            + (f" to {report.bounded_keep_max}" if report.bounded_keep_max != report.bounded_keep else "")
            + " positions")
    held = {name: counts for name, counts in (run.trimmed_held or {}).items() if counts}
    if not held:
        return [head, f"  nothing was trimmed: the context ({report.prefill + report.steps} tokens) never exceeded "
                      f"what a trimmable cache keeps, so the comparison says nothing of trimmed caches; give "
                      f"--prefill beyond {report.bounded_keep_max}"]
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, counts in held.items():
        groups.setdefault(tuple(counts), []).append(name)
    lines = [head]
    for counts, names in groups.items():
        lines.append(f"  {len(names)} cache{'s' if len(names) > 1 else ''} held {', '.join(map(str, counts))} "
                     f"positions after {'its' if len(names) == 1 else 'their'} {len(counts)} trim"
                     f"{'s' if len(counts) > 1 else ''} (the original's held the whole context, up to "
                     f"{report.prefill + report.steps - 1}): {', '.join(names)}")
    if report.bounding_exercised:
        lines.append(f"  the comparison covers {report.steps_compared - 1 - run.trimmed_after[0]} inferences that "
                     f"read trimmed caches")
    else:
        lines.append("  no compared inference came after a trim: the comparison says nothing of trimmed caches")
    return lines
