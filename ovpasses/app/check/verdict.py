"""The verdict of ``ovpass check``: how each model fared (:class:`RunResult`), two runs' outputs compared
element by element (:func:`compare_outputs`), and what that comparison means (:func:`decide`): OK, FIXED,
WORSE or INCONCLUSIVE, with its sentence."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from ovpasses.precision import Precision


@dataclass
class RunResult:
    """How one model fared: whether it compiled and how many steps it ran, with the outputs it gave."""

    label: str
    compiled: bool = False
    steps_run: int = 0
    steps_total: int = 0
    error: str | None = None
    fused_sdpa: int | None = None
    # friendly names of the model's SDPA nodes that the compiled model fused (fused_sdpa_names)
    fused_sdpa_names: list[str] | None = None
    # SDPAs whose fusion differs from the prediction (RewriteSummary.fusion), one line each
    fusion_disagreements: list[str] = field(default_factory=list)
    compile_seconds: float | None = None
    # what the compiled model computes in (ovpasses.precision); None: not compiled, or not read
    precision: Precision | None = None
    # with the library's trimmer (sliding_window="trimmable"): per trimmed state, the positions it held right
    # after each trim that cut it (read back from the request), and the inferences (0-based) after which one cut
    trimmed_held: dict[str, list[int]] | None = None
    trimmed_after: list[int] = field(default_factory=list)
    outputs: list[list[np.ndarray]] = field(default_factory=list, repr=False)

    @property
    def ran(self) -> bool:
        return self.compiled and self.error is None and self.steps_run == self.steps_total

    def to_dict(self) -> dict:
        data = asdict(self)
        data.pop("outputs")
        data["ran"] = self.ran
        return data


@dataclass
class Comparison:
    """The outputs of two runs over the steps both completed, element by element.

    NaN in both at the same place, and the same infinity in both, agree. Elsewhere an element is
    *compared* when it is finite in both; a non-finite value in only one of them is counted on that side.
    """

    steps: int = 0                      # steps both runs completed, compared
    compared: int = 0                   # elements finite in both
    max_abs_diff: float | None = None   # over the compared elements
    max_abs_diff_output: str | None = None
    scale: float = 0.0                  # max |original| over its finite elements
    nonfinite_same: int = 0             # NaN in both, or the same infinity in both
    nonfinite_only_original: int = 0    # non-finite in the original where the rewritten differs
    nonfinite_only_rewritten: int = 0   # non-finite in the rewritten where the original differs
    shapes_differ: list[str] = field(default_factory=list)


def compare_outputs(original: list[list[np.ndarray]], rewritten: list[list[np.ndarray]],
                    names: list[str]) -> Comparison:
    """Compare the per-step outputs of two runs (the steps both have). Pure: arrays in, counts out."""
    result = Comparison(steps=min(len(original), len(rewritten)))
    for step_a, step_b in zip(original, rewritten):
        for name, a, b in zip(names, step_a, step_b):
            if a.shape != b.shape:
                if name not in result.shapes_differ:
                    result.shapes_differ.append(name)
                continue
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            fin_a, fin_b = np.isfinite(a64), np.isfinite(b64)
            same = ~fin_a & ~fin_b & ((np.isnan(a64) & np.isnan(b64)) | (a64 == b64))
            both = fin_a & fin_b
            result.nonfinite_same += int(same.sum())
            result.nonfinite_only_rewritten += int((~fin_b & ~same).sum())
            result.nonfinite_only_original += int((~fin_a & fin_b).sum())
            result.compared += int(both.sum())
            if fin_a.any():
                result.scale = max(result.scale, float(np.abs(a64[fin_a]).max()))
            if both.any():
                diff = float(np.abs(a64[both] - b64[both]).max())
                if result.max_abs_diff is None or diff > result.max_abs_diff:
                    result.max_abs_diff, result.max_abs_diff_output = diff, name
    return result


# verdict codes; the CLI's exit code follows them (ok/fixed 0, worse 1, inconclusive 4)
OK, FIXED, WORSE, INCONCLUSIVE = "ok", "fixed", "worse", "inconclusive"


def reduced_precision(*runs: RunResult) -> Precision | None:
    """The precision of the first of ``runs`` that computed in less than f32 (:attr:`Precision.exact`);
    None when each computed exactly, or did not say."""
    return next((r.precision for r in runs if r.precision is not None and not r.precision.exact), None)


def cannot_decide(comparison: Comparison, tolerance: float, precision: Precision, against: str = "the outputs") -> str:
    """Why value differences beyond ``tolerance`` at ``precision`` are no verdict, and the tolerance they need."""
    needed = comparison.max_abs_diff
    relative = f", rtol {needed / comparison.scale:.2g}" if comparison.scale else ""
    return (f"INCONCLUSIVE: {against} differ by up to {needed:.3g}, beyond the tolerance {tolerance:.3g}, but "
            f"the models ran at {precision.describe()}, at which equivalent graphs round differently: this "
            f"precision cannot tell a correct rewrite from a wrong one (it would need a tolerance of "
            f"{needed:.3g}{relative}); --precision exact decides")


def decide(original: RunResult, rewritten: RunResult, comparison: Comparison, tolerance: float) -> tuple[str, str]:
    """The verdict code and its sentence. A check that compared nothing is never OK.

    Values that differ beyond ``tolerance`` are WORSE when both runs computed exactly, and INCONCLUSIVE
    (saying the tolerance it would need) when either ran at a reduced precision (:func:`reduced_precision`):
    there a correct rewrite differs too. Failures, NaN and shapes decide at any precision.
    """
    steps = f"{comparison.steps} step{'s' if comparison.steps != 1 else ''}"
    if comparison.shapes_differ:
        return WORSE, f"WORSE: the rewritten model's output shapes differ ({', '.join(comparison.shapes_differ)})"
    if comparison.nonfinite_only_rewritten:
        return WORSE, (f"WORSE: the rewritten model gives NaN or infinity in {comparison.nonfinite_only_rewritten} "
                       "places where the original does not")
    differ = comparison.max_abs_diff is not None and comparison.max_abs_diff > tolerance
    reduced = reduced_precision(original, rewritten)
    if differ and reduced is None:
        return WORSE, "WORSE: the outputs differ beyond the tolerance"
    if original.ran and not rewritten.ran:
        return WORSE, "WORSE: the original runs and the rewritten model does not"
    if not original.ran and not rewritten.ran and rewritten.steps_run < original.steps_run:
        return WORSE, (f"WORSE: the rewritten model fails at inference {rewritten.steps_run + 1}, before the "
                       f"original (at {original.steps_run + 1})")
    if differ:
        return INCONCLUSIVE, cannot_decide(comparison, tolerance, reduced)
    if rewritten.ran and not original.ran:
        also = f"; their outputs agree on the {steps} both ran" if comparison.compared else ""
        return FIXED, f"FIXED: the original fails and the rewritten model runs{also}"
    if not rewritten.ran:
        if original.steps_run == rewritten.steps_run == 0:
            return INCONCLUSIVE, "INCONCLUSIVE: neither model ran a step on the inputs made"
        also = f"; their outputs agree on the {steps} both ran" if comparison.steps else ""
        return INCONCLUSIVE, (f"INCONCLUSIVE: both models fail (the original at inference {original.steps_run + 1}, "
                              f"the rewritten at {rewritten.steps_run + 1}){also}")
    if comparison.compared == 0:
        return INCONCLUSIVE, ("INCONCLUSIVE: both run, but no output value is finite in both (NaN or infinity in "
                              "the same places): nothing could be compared")
    same = f" (NaN or infinity in the same {comparison.nonfinite_same} places of both)" \
        if comparison.nonfinite_same else ""
    if comparison.nonfinite_only_original:
        return FIXED, (f"FIXED: the original gives NaN or infinity in {comparison.nonfinite_only_original} places "
                       f"where the rewritten model gives finite values; elsewhere they agree within the "
                       f"tolerance{same}")
    return OK, f"OK: both run and their outputs agree within the tolerance{same}"


def fusion_kept(code: str, verdict: str, original: RunResult, rewritten: RunResult,
                intended: set[str]) -> tuple[str, str]:
    """An OK verdict weighed against the fused SDPA kernels: a rewritten model that fuses fewer of the SDPAs
    the original fuses runs a slower path, and is WORSE unless the rewrite takes those out of the fusion
    on purpose (``intended``: the SDPAs its plan expects the plugin no longer to fuse, for the runtime it
    targets or the mode asked for), which the verdict then says. Other verdicts, and runs whose fused
    kernels were not read, are returned as they are."""
    if code != OK or original.fused_sdpa_names is None or rewritten.fused_sdpa_names is None:
        return code, verdict
    lost = sorted(set(original.fused_sdpa_names) - set(rewritten.fused_sdpa_names))
    if not lost:
        return code, verdict
    of = f"{len(lost)} of the {len(original.fused_sdpa_names)} SDPAs the original fuses"
    unintended = [n for n in lost if n not in intended]
    if unintended:
        shown = ", ".join(unintended[:3]) + (f" and {len(unintended) - 3} more" if len(unintended) > 3 else "")
        return WORSE, (f"WORSE: the outputs agree, but the rewritten model runs {of} outside the fused kernel "
                       f"({shown}), which the rewrite did not mean to do: a slower path")
    return OK, (f"{verdict}; the rewritten model runs {of} outside the fused kernel, as the rewrite means to for "
                "the runtime and mode asked for")
