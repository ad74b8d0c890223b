"""ErfInvConstantFolding: replace an ErfInv of a Constant by the Constant it computes.

Why: ErfInv is an opset17 operation, and openvino 2025.2 - 2026.1 cannot read an IR that holds one
(``Cannot create ErfInv layer ... from unsupported opset: opset17``; measured, see
:mod:`ovpasses.plan.runtimes`). Gemma 3n exports it for the activation sparsity of its first layers: the
threshold ``mean + std * sqrt(2) * erfinv(2p - 1)``, with the sparsity ``p`` a Constant, so the
exporter leaves ``ErfInv(Constant 2p - 1)`` in the IR. Folded here, the IR holds no opset17
operation and the value is the one the specification defines.

    Before:                                   After:
      Constant(x) -> [Convert] -> ErfInv        Constant(erfinv(x)) -> consumers
                                  -> consumers  (takes the ErfInv's friendly name and runtime info)

The input may reach the ErfInv through a Convert between floating-point types (the f16 decompression
of ``save_model(compress_to_fp16=True)``). Element types f16, f32 and f64 are folded; another type
(bf16, the f8 types) does not match. The pattern's predicate is :func:`refusal`: what it refuses, the
pass lists in ``refused`` with the reason, and the pipeline reports the ErfInv as one the target cannot
read, for that reason.

The value follows the ErfInv-17 specification: ``erfinv(x)`` is the ``y`` with ``erf(y) = x`` on
``(-1, 1)``; ``erfinv(0) = 0``, ``erfinv(1) = +inf``, ``erfinv(-1) = -inf``, NaN for ``|x| > 1`` (and
for NaN). :func:`erfinv` computes it in float64 by Newton's method on ``math.erf`` (``math.erfc`` where
``|x| > 0.5``, so that ``1 - |x|`` stays exact near the poles), then takes the float64 neighbour whose ``erf`` is
closest to ``|x|``; the result is rounded once to the element type.
"""

from __future__ import annotations

import logging
import math

import numpy as np
import openvino as ov
from openvino import opset13 as ops
from openvino.passes import AnyInput, Matcher, MatcherPass, WrapType

from ovpasses._ov import copy_runtime_info
from ovpasses.plan.decisions import Lowered
from ovpasses.step import refusing
from ovpasses.rules import NodePredicate, Rule, RulePlan

log = logging.getLogger(__name__)

FOLDED_TYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64}
_TWO_OVER_SQRT_PI = 2.0 / math.sqrt(math.pi)


def _erfinv_scalar(x: float) -> float:
    """erfinv of one float64 value (see :func:`erfinv`)."""
    if math.isnan(x) or abs(x) > 1.0:
        return math.nan
    if abs(x) == 1.0:
        return math.copysign(math.inf, x)
    if x == 0.0:
        return x                      # keeps the sign of -0.0, as erf(-0.0) = -0.0
    a = abs(x)
    # a starting point within about 0.2% (Winitzki's closed form for the inverse), then Newton's
    # method, which doubles the correct digits per step
    log1m = math.log1p(-a * a)
    b = 2.0 / (math.pi * 0.147) + log1m / 2.0
    y = math.sqrt(math.sqrt(b * b - log1m / 0.147) - b)
    tail = a > 0.5
    rest = 1.0 - a                    # exact for a in [0.5, 1] (Sterbenz)
    for _ in range(100):
        residual = (rest - math.erfc(y)) if tail else (math.erf(y) - a)   # erf(y) - a, in both forms
        step = residual / (_TWO_OVER_SQRT_PI * math.exp(-y * y))
        y_next = y - step
        if y_next == y or abs(step) <= 2 * math.ulp(y):
            y = y_next
            break
        y = y_next

    def distance(candidate: float) -> float:
        return abs((rest - math.erfc(candidate)) if tail else (math.erf(candidate) - a))

    # Newton stops within a couple of ulps; walk to the float64 whose erf is closest to |x| (the value the
    # specification's y with erf(y) = x rounds to; at x = 0.26826063744358486 the last step left 2 ulps)
    for _ in range(8):
        best = min((math.nextafter(y, 0.0), y, math.nextafter(y, math.inf)), key=distance)
        if best == y:
            break
        y = best
    return math.copysign(y, x)


def erfinv(x: np.ndarray) -> np.ndarray:
    """The inverse error function of each element of ``x``, in float64, per the ErfInv-17 specification."""
    values = np.asarray(x, np.float64)
    return np.array([_erfinv_scalar(float(v)) for v in values.ravel()], np.float64).reshape(values.shape)


def _constant_source(erfinv_node: ov.Node) -> ov.Node | None:
    """The Constant that ``erfinv_node`` reads, directly or through a Convert; None when it reads anything else."""
    source = erfinv_node.input_value(0).get_node()
    if source.get_type_name() == "Convert":
        source = source.input_value(0).get_node()
    return source if source.get_type_name() == "Constant" else None


def refusal(erfinv_node: ov.Node) -> str | None:
    """Why :class:`ErfInvConstantFolding` does not fold ``erfinv_node``, or None when it does: the predicate
    of its pattern, so that a report says why with the words of the decision."""
    constant = _constant_source(erfinv_node)
    if constant is None:
        return ("its input is not a Constant, and ErfInv has no exact decomposition into operations older "
                "than opset17")
    element_type = erfinv_node.get_output_element_type(0).get_type_name()
    if element_type not in FOLDED_TYPES:
        return f"its element type {element_type} is not one that {ErfInvConstantFolding.NAME} folds (f16, f32, f64)"
    if not constant.get_output_element_type(0).is_real():
        return (f"its input is a Constant of {constant.get_output_element_type(0).get_type_name()}, and "
                f"{ErfInvConstantFolding.NAME} folds floating-point Constants only")
    return None


class ErfInvConstantFolding(Rule, MatcherPass):
    """Replace each ErfInv whose input is a Constant (possibly through a float Convert) by its value.

    :param predicate: ``node -> bool`` choosing the ErfInv nodes to fold (default: all). ``refused``
        maps each chosen ErfInv that the pattern refused (friendly name) to :func:`refusal`'s reason.
    """

    NAME = "ErfInvConstantFolding"
    # no REANALYSES: as ConvertOneHot16ToOneHot1
    DESCRIPTION = "targets before 2026.2: replaces ErfInv (opset17) of a Constant by its value, computed in float64"
    OPS = (("ErfInv", "opset17"),)
    ACTION = Lowered.CONSTANT_FOLDED
    ACTION_REASON = "its input is a Constant"

    @classmethod
    def from_plan(cls, part: RulePlan) -> ErfInvConstantFolding:
        """The operations the target cannot read (the plan's predicate)."""
        return cls(part.data)

    def __init__(self, predicate: NodePredicate | None = None) -> None:
        MatcherPass.__init__(self)
        self.changed: list[str] = []
        self.refused: dict[str, str] = {}

        # the op exists from opset17 on: this pattern is only built where the runtime knows it, which
        # is the only place a model can hold one
        erfinv_node = WrapType("opset17.ErfInv", [AnyInput()], refusing(refusal, self.refused, predicate))

        def callback(matcher: Matcher) -> bool:
            node = matcher.get_pattern_value_map()[erfinv_node].get_node()
            data = _value(_constant_source(node))
            # a Convert between the Constant and the ErfInv is applied as the runtime would: numpy's
            # round-to-nearest-even cast to its destination type
            dtype = FOLDED_TYPES[node.get_output_element_type(0).get_type_name()]
            folded = ops.constant(erfinv(data.astype(dtype)).astype(dtype))
            name = node.get_friendly_name()
            folded.set_friendly_name(name)
            copy_runtime_info(node, folded)
            node.output(0).replace(folded.output(0))
            self.changed.append(name)
            log.debug("%s: %s folded to a Constant", self.NAME, name)
            return True

        self.register_matcher(Matcher(erfinv_node, self.NAME), callback)


def _value(constant: ov.Node) -> np.ndarray:
    """The data of a floating-point Constant, as numpy reads it (bf16 read through its bits)."""
    data = constant.get_data()
    if constant.get_output_element_type(0).get_type_name() == "bf16":
        bits = np.asarray(data).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32)
    return np.asarray(data)
