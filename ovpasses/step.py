"""One step of a run: a pass on the nodes the plan gave it, timed, with what it changed.

Every pass follows one protocol: ``NAME`` (what ``passes=`` names), ``DESCRIPTION`` (one line for
``ovpass passes``), and after it ran, ``changed``: the friendly names (or variable ids) of what it changed,
in the order it changed them. A pass that refuses some of the nodes it was given says why in
``refused`` (friendly name or variable id -> reason), and where it is a MatcherPass the reason comes from
the predicate of its pattern (:func:`refusing`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import openvino as ov
from openvino.passes import Manager


@dataclass
class PassReport:
    """One step of a run: the pass, what it changed (its ``changed``) and how long it took."""

    name: str
    changed: list[str]
    seconds: float


def run_step(model: ov.Model, pass_class: type, args: tuple = ()) -> tuple[object, PassReport]:
    """Run ``pass_class(*args)`` on ``model`` in place; return the pass and its report."""
    return run_built(model, lambda: pass_class(*args))


def run_built(model: ov.Model, build: Callable[[], object], validate: bool = True) -> tuple[object, PassReport]:
    """Build a pass (``build()``), run it on ``model`` in place, and time both; return the pass and its report.
    ``validate``: OpenVINO's manager validates the whole model after a pass that changed it (False: the pass
    validated what it changed itself)."""
    start = time.perf_counter()
    pass_ = build()
    manager = Manager()
    manager.set_per_pass_validation(validate)
    manager.register_pass(pass_)
    manager.run_passes(model)
    return pass_, PassReport(pass_.NAME, list(pass_.changed), time.perf_counter() - start)


def refusing(refusal: Callable[[ov.Node], str | None], refused: dict[str, str],
             chosen: Callable[[ov.Node], bool] | None = None) -> Callable[[ov.Output], bool]:
    """The predicate of a pattern, made from ``refusal`` (node -> why the pass does not take it, or None):
    true for a node that is ``chosen`` (default: every node) and not refused. The reason of each chosen
    node it refuses goes into ``refused`` under the node's friendly name, so that what a report says is
    what the pattern decided."""
    def accepts(output: ov.Output) -> bool:
        node = output.get_node()
        if chosen is not None and not chosen(node):
            return False
        reason = refusal(node)
        if reason is not None:
            refused[node.get_friendly_name()] = reason
        return reason is None

    return accepts
