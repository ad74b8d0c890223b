"""ovpasses.check: the verdict of a side-by-side run, from the outputs and the runs' fates, and the
checks on check_model's arguments. The CLI's exit codes for the same verdicts are in test_cli.py."""

from __future__ import annotations

import numpy as np
import pytest

from ovpasses import OvpassesError
from ovpasses.check import FIXED, INCONCLUSIVE, OK, WORSE, RunResult, check_model, compare_outputs, decide
from ovpasses.testing.graphs import StackSpec, build_stack

NAN, INF = float("nan"), float("inf")
TOLERANCE = 1e-4


def run(outputs: list[list[float]] | None, steps_total: int = 1, fails_at: int | None = None) -> RunResult:
    """A run that gave ``outputs`` (one output per step) and, if ``fails_at``, failed at that step (0-based)."""
    steps = [[np.asarray(o, np.float32)] for o in (outputs or [])]
    result = RunResult("r", compiled=True, steps_run=len(steps), steps_total=steps_total, outputs=steps)
    if fails_at is not None:
        result.error = "failed"
    return result


def verdict(original: RunResult, rewritten: RunResult) -> tuple[str, str]:
    return decide(original, rewritten, compare_outputs(original.outputs, rewritten.outputs, ["out"]), TOLERANCE)


@pytest.mark.parametrize("original, rewritten, code, says", [
    ([1.0, 2.0], [1.0, 2.0], OK, "OK: both run and their outputs agree within the tolerance"),
    ([1.0, NAN], [1.0, NAN], OK, "NaN or infinity in the same 1 places of both"),
    ([INF, -INF, 1.0], [INF, -INF, 1.0], OK, "agree within the tolerance"),
    ([1.0, 2.0], [1.0, NAN], WORSE, "WORSE: the rewritten model gives NaN or infinity in 1 places where the original"),
    ([1.0, 2.0], [1.0, INF], WORSE, "gives NaN or infinity in 1 places"),
    ([INF, 1.0], [-INF, 1.0], WORSE, "gives NaN or infinity in 1 places"),
    ([NAN, 1.0], [INF, 1.0], WORSE, "gives NaN or infinity in 1 places"),
    ([NAN, 1.0], [3.0, 1.0], FIXED, "FIXED: the original gives NaN or infinity in 1 places where the rewritten model "
                                    "gives finite values"),
    ([1.0, 2.0], [1.0, 2.1], WORSE, "WORSE: the outputs differ beyond the tolerance"),
    ([NAN, NAN], [NAN, NAN], INCONCLUSIVE, "INCONCLUSIVE: both run, but no output value is finite in both"),
    ([], [], INCONCLUSIVE, "nothing could be compared"),
])
def test_verdict_on_outputs(original, rewritten, code, says):
    got = verdict(run([original]), run([rewritten]))
    assert got[0] == code and says in got[1], got


def test_tolerance_grows_with_the_largest_finite_original_value():
    # |diff| 0.5 against atol 1e-4 + rtol 1e-4 * 1e4: within; the NaN does not make the scale NaN
    original, rewritten = run([[1e4, 0.0, NAN]]), run([[1e4 - 0.5, 0.0, NAN]])
    comparison = compare_outputs(original.outputs, rewritten.outputs, ["out"])
    assert comparison.scale == 1e4 and comparison.max_abs_diff == 0.5
    assert decide(original, rewritten, comparison, 1e-4 + 1e-4 * comparison.scale)[0] == OK


def test_output_shapes_that_differ_are_worse():
    original = RunResult("o", compiled=True, steps_run=1, steps_total=1, outputs=[[np.zeros((1, 2))]])
    rewritten = RunResult("r", compiled=True, steps_run=1, steps_total=1, outputs=[[np.zeros((1, 3))]])
    assert verdict(original, rewritten) == (WORSE, "WORSE: the rewritten model's output shapes differ (out)")


@pytest.mark.parametrize("original, rewritten, code, says", [
    (run([], 2, fails_at=0), run([[1.0], [2.0]], 2), FIXED, "FIXED: the original fails and the rewritten model runs"),
    (run([[1.0]], 2, fails_at=1), run([[1.0], [2.0]], 2), FIXED, "their outputs agree on the 1 step both ran"),
    (run([[1.0]], 2, fails_at=1), run([[9.0], [2.0]], 2), WORSE, "differ beyond the tolerance"),
    (run([[1.0], [2.0]], 2), run([[1.0]], 2, fails_at=1), WORSE, "the original runs and the rewritten model does not"),
    (run([], 2, fails_at=0), run([], 2, fails_at=0), INCONCLUSIVE,
     "INCONCLUSIVE: neither model ran a step on the inputs made"),
    (run([[1.0]], 3, fails_at=1), run([[1.0]], 3, fails_at=1), INCONCLUSIVE,
     "INCONCLUSIVE: both models fail (the original at inference 2, the rewritten at 2)"),
    (run([[1.0], [2.0]], 3, fails_at=2), run([[1.0]], 3, fails_at=1), WORSE,
     "the rewritten model fails at inference 2, before the original (at 3)"),
])
def test_verdict_on_runs(original, rewritten, code, says):
    got = verdict(original, rewritten)
    assert got[0] == code and says in got[1], got


@pytest.mark.parametrize("argument", ["atol", "rtol"])
@pytest.mark.parametrize("value", [NAN, INF, -INF, -1.0, -1e-9, "0.1", None, True])
def test_check_model_refuses_a_tolerance_that_is_not_finite_and_non_negative(argument, value):
    with pytest.raises(OvpassesError, match=f"{argument} must be a finite number, 0 or more"):
        check_model(build_stack(StackSpec()), **{argument: value})
