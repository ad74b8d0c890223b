"""The unfused expands' registration: one step, after the rules that decide which SDPAs the plugin fuses."""

from __future__ import annotations

from ovpasses.features.unfused_expands.plan import expand_part
from ovpasses.features.unfused_expands.unfused_sdpa_expands import UnfusedSDPAExpandRewrite
from ovpasses.plan.feature import Feature, Phase, Step

FEATURE = Feature("unfused_expands", steps=(Step(UnfusedSDPAExpandRewrite, expand_part, Phase.EXPANDS),))
