"""What a feature hands the registry: one :class:`Feature` value, the protocol by which the core runs a feature it
does not know by name.

A feature (a folder under ``ovpasses/features/``) contributes, each optional:

* ``facts``: named analyses of the model as it is, each ``facts -> value`` and run when a step first asks for it
  (``facts.masks``: :class:`~ovpasses.plan.targets.Facts` finds the name among the features' facts);
* ``plan``: its section of the frozen plan, ``(facts, plan so far) -> {name: value}``, made with the plan after
  detection (``plan.mask_actions``): a later feature reads an earlier one's section by name, as plain data,
  which is how features stay apart (the paged path's warnings read the sliding windows' ``windows``);
* ``steps``: its rules, each with the builder of its part of the plan and the :class:`Phase` it runs in;
* ``checks``: what it requires of the options as a whole (``options -> None``, raising
  :class:`~ovpasses.errors.InvalidOptionError`), run when a :class:`~ovpasses.options.RewriteOptions` is made;
* ``keeps``: facts of the last epoch its summary reads (plain data: the run keeps no node of the model);
* ``summary``: its section of :class:`~ovpasses.summary.RewriteSummary`, ``(run, model, options) -> {field: value}``
  from the run's parts, rules, records and kept facts;
* ``refuse``: ``summary -> exception | None``, the error :func:`ovpasses.rewrite` raises where the result cannot be
  used (an operation the target cannot read was left).

The registry (:mod:`ovpasses.registry`, the top of the library) composes the features in the order it lists them:
the pipeline's steps are theirs sorted by phase, stably. OpenVINO's CPU plugin builds its pipeline the same way
(``CPU_REGISTER_PASS_COMMON`` lines of passes that know nothing of the plugin), and onnxscript's ``RewriteRuleSet``
takes rules that know nothing of each other.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from types import MappingProxyType


class Phase(IntEnum):
    """Where a step runs in the pipeline. Steps of one phase run in the registry's order of their features."""

    RECOVER = 0    # make the IR look as exported with SDPA (before anything reads the SDPAs)
    DETECT = 1     # the analysis the plan is made from
    CACHES = 2     # change which caches exist or their layout; the plan is made again after
    FUSION = 3     # keep the plugin's stateful fusion off what it cannot take, or decompose it
    WINDOWS = 4    # the sliding windows' masks and caches
    EXPANDS = 5    # the GQA expands of the SDPAs left unfused (on the model as the rules above left it)
    FINISH = 6     # rules planned on the finished model (the first prompt, release points, mask expands)
    LOWER = 7      # operations the target runtime cannot read, replaced where exact


@dataclass(frozen=True)
class Step:
    """One step of the pipeline: a rule (pass), on its part of the plan (``part(facts, plan) -> RulePlan | None``).

    ``replan``: after the rule changed the model, the plan made again from the facts as they are then
    (``replan(plan, facts) -> plan``). ``plans``: the plan is first made after this step (detection)."""

    rule: type
    part: Callable
    phase: Phase
    replan: Callable | None = None
    plans: bool = False


@dataclass(frozen=True)
class Feature:
    """What one feature contributes (see the module's docstring); every field but ``name`` is optional."""

    name: str
    steps: tuple[Step, ...] = ()
    facts: Mapping[str, Callable] = field(default_factory=lambda: MappingProxyType({}))
    plan: Callable | None = None
    checks: tuple[Callable, ...] = ()
    keeps: tuple[str, ...] = ()
    summary: Callable | None = None
    refuse: Callable | None = None

    @property
    def passes(self) -> tuple[type, ...]:
        return tuple(step.rule for step in self.steps)
