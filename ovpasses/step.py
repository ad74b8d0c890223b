"""One step of a run: a pass on the nodes the plan gave it, timed, with what it changed.

Every pass follows one protocol: ``NAME`` (what ``passes=`` names), ``DESCRIPTION`` (one line for
``ovpass passes``), and after it ran, ``changed``: the friendly names (or variable ids) of what it changed,
in the order it changed them.
"""

from __future__ import annotations

import time
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
    start = time.perf_counter()
    pass_ = pass_class(*args)
    manager = Manager()
    manager.register_pass(pass_)
    manager.run_passes(model)
    return pass_, PassReport(pass_class.NAME, list(pass_.changed), time.perf_counter() - start)
