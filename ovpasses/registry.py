"""The features the library runs, composed in one place.

Each feature hands what it contributes in one :class:`~ovpasses.plan.feature.Feature` value (its facts, its
section of the plan, its steps, what it requires of the options, its summary section); the core below this module
knows none of them by name. Adding a feature is its folder under ``ovpasses/features/`` and one line in
:data:`FEATURES`. The order of :data:`FEATURES` is the order of the plan's sections (a later feature may read an
earlier one's by name) and, within a phase, of the steps.
"""

from __future__ import annotations

from ovpasses.features.old_runtimes.registration import FEATURE as old_runtimes
from ovpasses.features.paged_heads.registration import FEATURE as paged_heads
from ovpasses.features.sdpa_recovery.registration import FEATURE as sdpa_recovery
from ovpasses.features.sliding_window.registration import FEATURE as sliding_window
from ovpasses.features.unfused_expands.registration import FEATURE as unfused_expands
from ovpasses.features.unsharing.registration import FEATURE as unsharing
from ovpasses.plan.decisions import Action
from ovpasses.plan.feature import Feature, Step
from ovpasses.plan.targets import CORE

FEATURES: tuple[Feature, ...] = (
    sdpa_recovery,     # IRs exported with eager attention get their SDPAs
    CORE,              # detection, the fusion barrier and what it cannot take, the cache ShapeOf
    unsharing,         # kv_sharing="unshare"
    sliding_window,    # the masks for the paged path; sliding_window="bounded" | "trimmable"; first_prompt
    paged_heads,       # paged_heads="pad"; the paged path's warnings (read the sliding windows' section)
    unfused_expands,   # the GQA expands of the SDPAs the plugin does not fuse
    old_runtimes,      # operations an older target cannot read
)

# The pipeline, in the order it runs: every feature's steps by phase, in the order of FEATURES within a phase.
STEPS: tuple[Step, ...] = tuple(sorted((step for feature in FEATURES for step in feature.steps),
                                       key=lambda step: step.phase))
# Every pass, in the order the pipeline runs them: the names RewriteOptions(passes=...) takes.
PIPELINE_ORDER: tuple[type, ...] = tuple(step.rule for step in STEPS)
PASS_NAMES: tuple[str, ...] = tuple(rule.NAME for rule in PIPELINE_ORDER)
# What the features require of the options as a whole, run when a RewriteOptions is made.
CHECKS = tuple(check for feature in FEATURES for check in feature.checks)
# The rule (pass NAME) that carries each changing SDPA action out (each rule declares its ACTION).
RULE_OF: dict[Action, str] = {Action(rule.ACTION): rule.NAME for rule in PIPELINE_ORDER
                              if rule.ACTION in {action.value for action in Action}}
