"""SharedKVCacheDetection: record on each SDPA whether it reads a KV cache that other SDPAs read.

A ModelPass over :func:`ovpasses.analysis.analyze_kv_sharing` (see there for the walk and the
graph it is about). It changes no node or edge; it writes the verdict into each SDPA's runtime
info so that later passes can match on it in their patterns, and keeps the analysis for reports.

    Before:                                   After (runtime info only):
      ReadValue(v0) -> Gather -> Concat -+-> SDPA layer 0      ovpasses_kv_status   = "shared"
                                         +-> SDPA layer 3      ovpasses_kv_variables = "v0,..."
                                         +-> ShapeOf           ovpasses_kv_owner_of = "v0" (layer 0)
"""

from __future__ import annotations

import logging

import openvino as ov
from openvino.passes import ModelPass

from ovpasses.analysis.kv_sharing import (
    RT_OWNER_OF,
    RT_STATUS,
    RT_VARIABLES,
    KVSharingAnalysis,
    analyze_kv_sharing,
)
from ovpasses.rules import Rule, RulePlan

log = logging.getLogger(__name__)


class SharedKVCacheDetection(Rule, ModelPass):
    """Detect SDPAs that share a KV cache; the result is in ``self.analysis`` and in runtime info."""

    NAME = "SharedKVCacheDetection"
    WHOLE_MODEL = True  # an analysis of the whole model (it hands its analysis on as the run's facts)
    DESCRIPTION = "analysis only: records per SDPA which KV caches it reads and whether another SDPA reads them too"

    @classmethod
    def from_plan(cls, part: RulePlan) -> SharedKVCacheDetection:
        """The whole model: nothing is planned for an analysis."""
        return cls()

    def __init__(self) -> None:
        ModelPass.__init__(self)
        self.changed: list[str] = []   # an analysis: it changes nothing but the SDPAs' runtime info
        self.refused: dict[str, str] = {}
        self.analysis: KVSharingAnalysis | None = None
        self.sdpa_nodes: dict[str, ov.Node] = {}   # friendly name -> SDPA node of the model last run on
        self.ordered: list[ov.Node] | None = None

    def run_on_model(self, model: ov.Model) -> bool:
        ordered = model.get_ordered_ops()
        analysis = analyze_kv_sharing(model, ordered)
        self.sdpa_nodes = analysis.sdpa_nodes(ordered)
        for name, node in self.sdpa_nodes.items():
            info = analysis.sdpa[name]
            rt = node.get_rt_info()
            rt[RT_STATUS] = info.status
            rt[RT_VARIABLES] = ",".join(info.kv_variables)
            rt[RT_OWNER_OF] = ",".join(info.owner_of)
        counts = analysis.status_counts()
        log.info("%s: %d caches, SDPA exclusive=%d shared=%d stateless=%d", self.NAME, len(analysis.caches),
                 counts["exclusive"], counts["shared"], counts["stateless"])
        self.analysis = analysis
        self.ordered = ordered   # the nodes the analysis indexes (handed on with it as the run's facts)
        return False
