"""Checks that the rewrite is right: the original and the rewritten model side by side on ov.Core
(:mod:`~ovpasses.app.check.side_by_side`) and the verdict (:mod:`~ovpasses.app.check.verdict`), the inputs they are fed (:mod:`~ovpasses.app.check.inputs`), the same
through openvino_genai (:mod:`~ovpasses.app.check.genai`) and over an export folder (:mod:`~ovpasses.app.check.folder`)."""

from ovpasses.app.check.inputs import make_feeds
from ovpasses.app.check.side_by_side import (
    CheckReport,
    check_model,
    check_tolerance,
    count_fused_sdpa,
    count_layer_type,
    fused_sdpa_names,
    fusion_disagreements,
    run_steps,
)
from ovpasses.app.check.verdict import (
    FIXED,
    INCONCLUSIVE,
    OK,
    WORSE,
    Comparison,
    RunResult,
    cannot_decide,
    compare_outputs,
    decide,
    reduced_precision,
)

__all__ = ["FIXED", "INCONCLUSIVE", "OK", "WORSE", "CheckReport", "Comparison", "RunResult", "cannot_decide",
           "check_model", "check_tolerance", "compare_outputs", "count_fused_sdpa", "count_layer_type", "decide",
           "fused_sdpa_names", "fusion_disagreements", "make_feeds", "reduced_precision", "run_steps"]
