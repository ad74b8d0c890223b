"""What the plan gives each step of the pipeline, and what each step's changes mean for the decisions.

A :class:`Targets` is three functions over the :class:`Run` (the state of one run of the pipeline):

* ``nodes(run, pass_class)``: the pass's constructor arguments (the nodes, or the plan, it works on), or
  None when it has nothing to do on this model and runtime;
* ``done(run, pass_)``: fold what the pass changed (its ``changed``) into the run;
* ``skipped(run, pass_class, args)``: ``passes=`` left the pass out: the decisions it would have carried
  out say so (:attr:`Decision.not_applied`), and the nodes are left as they are.

The list of steps, one line per pass, is :data:`ovpasses.pipeline.STEPS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import openvino as ov

from ovpasses.features.paged_heads.heads import attention_heads
from ovpasses.analysis.attention_kinds import AttentionKind, attention_kinds
from ovpasses.features.sdpa_recovery.analysis import EagerAttention, find_eager_attention
from ovpasses.analysis.kv_sharing import KVSharingAnalysis, analyze_kv_sharing
from ovpasses.features.old_runtimes.analysis import OpVersionAnalysis
from ovpasses.analysis.sharing_lint import Finding, lint_kv_sharing
from ovpasses.features.sliding_window.caches import SlidingWindowCaches, analyze_sliding_window_caches
from ovpasses.features.sliding_window.masks import (
    SlidingWindowMask,
    find_distance_window_masks,
    find_sliding_window_masks,
)
from ovpasses.features.sliding_window.plan import MaskAction, mask_plan, mask_windows
from ovpasses.options import KVSharing, PagedHeads, RewriteOptions, SlidingWindow
from ovpasses.features.old_runtimes.plan import lowering_target, unreadable_before
from ovpasses.features.paged_heads.paged_path import PagedWarning, paged_warnings
from ovpasses.features.paged_heads.plan import PagedHeadsAction, PagedHeadsStep, paged_heads_plan, sdpa_by_name
from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion, is_fusion_barrier
from ovpasses.features.unsharing.plan import UnsharedCache, plan_unsharing
from ovpasses.passes.shared_kv_detection import SharedKVCacheDetection
from ovpasses.plan.decisions import Action, Decision, plan_with_reasons
from ovpasses.plan.profiles import RuntimeProfile
from ovpasses.step import PassReport, run_step


@dataclass
class Run:
    """One run of the pipeline on one model: what was detected, what is planned, what changed."""

    model: ov.Model
    options: RewriteOptions
    passes: list[PassReport] = field(default_factory=list)
    detected: KVSharingAnalysis | None = None     # as the input was
    analysis: KVSharingAnalysis | None = None     # as the model is now
    sdpa_nodes: dict[str, ov.Node] = field(default_factory=dict)
    # the plan of the model as last analysed (frozen: a re-analysis makes a new one), and what the steps did to
    # its nodes since, in order; :attr:`decisions` is the plan with those records applied
    plan: Mapping[str, Decision] = field(default_factory=lambda: MappingProxyType({}))
    records: list[Carried] = field(default_factory=list)
    kinds: dict[str, AttentionKind] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    masks: list[SlidingWindowMask] = field(default_factory=list)
    mask_actions: dict[str, MaskAction] = field(default_factory=dict)
    masks_not_applied: dict[str, str] = field(default_factory=dict)
    warnings: list[PagedWarning] = field(default_factory=list)
    unshared: list[UnsharedCache] = field(default_factory=list)
    kept_shared: dict[str, str] = field(default_factory=dict)
    barrier: set[str] = field(default_factory=set)    # SDPAs planned for the barrier
    taken: set[str] = field(default_factory=set)      # ... that are kept out of fusion now
    caches: SlidingWindowCaches | None = None
    heads: PagedHeadsStep | None = None              # the paged_heads plan, and what the padding did
    op_before: OpVersionAnalysis | None = None
    op_looked: bool = False
    eager: list[EagerAttention] = field(default_factory=list)   # the eager attention subgraphs found
    recovered: list[str] = field(default_factory=list)         # ... that are SDPAs now
    eager_not_applied: str | None = None                       # the recovery pass, when passes= left it out
    op_refused: dict[str, dict[str, str]] = field(default_factory=dict)   # lowering pass -> its ``refused``

    @property
    def profile(self) -> RuntimeProfile:
        return self.options.runtime

    @property
    def selected(self) -> frozenset[str]:
        return self.options.passes

    def redetect(self) -> None:
        """The KV-sharing analysis of the model as it is now; through SharedKVCacheDetection (which also
        writes its verdict into the SDPAs' runtime info) when that pass is selected."""
        if SharedKVCacheDetection.NAME in self.selected:
            detection, _report = run_step(self.model, SharedKVCacheDetection)
            self.analysis, self.sdpa_nodes = detection.analysis, detection.sdpa_nodes
        else:
            ordered = self.model.get_ordered_ops()
            self.analysis = analyze_kv_sharing(self.model, ordered)
            self.sdpa_nodes = self.analysis.sdpa_nodes(ordered)

    def make_plan(self) -> None:
        """Plan on the model as it is now (pure: reads the analysis only)."""
        self.kinds = attention_kinds(self.sdpa_nodes)
        self.findings = lint_kv_sharing(self.detected, self.kinds)
        self.plan = MappingProxyType(plan_with_reasons(self.analysis, self.profile))
        self.records = []
        self.masks = find_sliding_window_masks(self.sdpa_nodes.values())
        self.mask_actions = mask_plan(self.masks, self.profile)
        self.warnings = paged_warnings(self.profile, self.analysis, attention_heads(self.sdpa_nodes),
                                       mask_windows(self.masks))

    @property
    def decisions(self) -> dict[str, Decision]:
        """Per SDPA, what the pipeline did (or, for a step ``passes=`` left out, would have done) and why: the
        plan, with what the steps recorded since. Computed; nothing changes the plan."""
        return carried_out(self.plan, self.records)

    def decide(self, names, action: Action, not_applied: str | None = None) -> None:
        """Record that a step carried ``action`` out on ``names`` (or, ``not_applied``: that the pass which
        carries it out was left out by ``passes=``)."""
        self.records.append(Carried(tuple(names), action, not_applied))

    def not_applied(self, action: Action, pass_name: str) -> None:
        self.decide([n for n, d in self.decisions.items() if d.action == action], action, pass_name)


@dataclass(frozen=True)
class Carried:
    """What one step did to nodes of the plan: ``action`` on ``nodes`` (SDPA friendly names); with
    ``not_applied`` (the pass), what it would have done had ``passes=`` named it."""

    nodes: tuple[str, ...]
    action: Action
    not_applied: str | None = None


def carried_out(plan: Mapping[str, Decision], records: list[Carried]) -> dict[str, Decision]:
    """The plan with ``records`` applied in order: a node a step took gets the step's action and keeps the plan's
    reason. Pure."""
    decisions = dict(plan)
    for record in records:
        for name in record.nodes:
            old = decisions.get(name)
            decisions[name] = Decision(record.action, old.reason if old else "", record.not_applied)
    return decisions


def _nothing(*_args) -> None:
    return None


@dataclass(frozen=True)
class Targets:
    nodes: Callable[[Run, type], tuple | None]
    done: Callable[[Run, object], None] = _nothing
    skipped: Callable[[Run, type, tuple], None] = _nothing


def by_name(names: set[str]) -> Callable[[ov.Node], bool]:
    """The predicate a pass takes: the SDPAs whose friendly names are ``names``."""
    return lambda node: node.get_friendly_name() in names


# --------------------------------------------------------------------------------- EagerAttentionToSDPA
def _eager(run: Run, _cls) -> tuple | None:
    """First: the SDPAs it recovers then go through detection and the plan like exported ones."""
    run.eager = find_eager_attention(run.model)
    names = {e.name for e in run.eager if e.recoverable}
    return (by_name(names),) if names else None


def _recovered(run: Run, recovery) -> None:
    run.recovered = list(recovery.changed)


def _eager_skipped(run: Run, cls, _args) -> None:
    run.eager_not_applied = cls.NAME


eager_recovery = Targets(_eager, _recovered, _eager_skipped)


# ------------------------------------------------------------------------------ SharedKVCacheDetection
def _detected(run: Run, detection) -> None:
    run.detected = run.analysis = detection.analysis
    run.sdpa_nodes = detection.sdpa_nodes
    run.make_plan()


def _detection_skipped(run: Run, cls, _args) -> None:
    """The analysis runs all the same (the plan needs it), without writing runtime info."""
    run.redetect()
    run.passes.append(PassReport(cls.NAME, [], 0.0))
    run.detected = run.analysis
    run.make_plan()


detection = Targets(lambda run, _cls: (), _detected, _detection_skipped)


# ------------------------------------------------------------------------------ SharedKVCacheUnsharing
def _unsharing(run: Run, _cls) -> tuple | None:
    if run.options.kv_sharing is not KVSharing.UNSHARE:
        return None
    planned = plan_unsharing(run.analysis)
    run.kept_shared = dict(planned.refused)
    return (planned.targets,) if planned.targets else None


def _unshared(run: Run, unshare) -> None:
    run.unshared = unshare.caches
    run.kept_shared.update(unshare.refused)
    if not unshare.caches:
        return
    run.redetect()   # the runtime info must describe the model as it is now, and the plan too
    run.make_plan()
    borrowers = {u.borrower for u in run.unshared}
    run.decide([n for n in borrowers if run.analysis.sdpa[n].status == "exclusive"
                and run.decisions[n].action == Action.NATIVE], Action.UNSHARED)


def _unsharing_skipped(run: Run, cls, args) -> None:
    run.decide({b for borrowers in args[0].values() for b in borrowers}, Action.UNSHARED, cls.NAME)


unsharing = Targets(_unsharing, _unshared, _unsharing_skipped)


# ------------------------------------------------------------------------------- AttentionHeadPadding
def _head_padding(run: Run, _cls) -> tuple | None:
    """Planned in every mode, so that the reports can name the option and its price where the runtime
    needs it; pads with ``paged_heads="pad"`` only."""
    run.heads = paged_heads_plan(run.model, run.analysis, run.options.paged_heads,
                                 run.profile.paged_cpu_one_head_size, run.profile.version)
    if run.options.paged_heads is not PagedHeads.PAD or run.heads.action != PagedHeadsAction.KEPT:
        run.warnings += run.heads.warnings()
        return None
    return (run.heads.plan,)


def _head_padded(run: Run, padding) -> None:
    run.heads = replace(run.heads, action=PagedHeadsAction.PADDED, changed=tuple(padding.changed))
    run.sdpa_nodes = sdpa_by_name(run.model, set(run.sdpa_nodes))   # an SDPA given a scale is a new node
    # the paged path's warnings, of the padded layers now
    run.warnings = paged_warnings(run.profile, run.analysis, attention_heads(run.sdpa_nodes),
                                  mask_windows(run.masks)) + run.heads.warnings()


def _head_padding_skipped(run: Run, _cls, _args) -> None:
    run.heads = replace(run.heads, action=PagedHeadsAction.NOT_SELECTED)


head_padding = Targets(_head_padding, _head_padded, _head_padding_skipped)


# --------------------------------------------------------- DisableStatefulSDPAFusion, SDPA decomposition
def _barrier(run: Run, _cls) -> tuple | None:
    run.barrier = {n for n, d in run.decisions.items() if d.action == Action.BARRIER}
    # an earlier run's barrier already keeps these out: neither a second barrier nor the fallback
    run.taken = {n for n in run.barrier
                 if all(is_fusion_barrier(run.sdpa_nodes[n].input_value(port).get_node()) for port in (1, 2))}
    rest = run.barrier - run.taken
    return (by_name(rest),) if rest else None


def _barrier_done(run: Run, barrier) -> None:
    run.taken.update(barrier.changed)


fusion_barrier = Targets(_barrier, _barrier_done)


def _decomposition(run: Run, _cls) -> tuple | None:
    # a K/V without a static rank-4 shape cannot take the barrier: decomposition is what is left
    rest = run.barrier - run.taken
    return (by_name(rest),) if rest else None


def _barriers_left(run: Run) -> None:
    run.decide(run.barrier - run.taken, Action.BARRIER, DisableStatefulSDPAFusion.NAME)


def _decomposed(run: Run, decomposition) -> None:
    run.decide(decomposition.changed, Action.DECOMPOSE)
    run.taken.update(decomposition.changed)
    _barriers_left(run)


decomposition = Targets(_decomposition, _decomposed, lambda run, _cls, _args: _barriers_left(run))


# ------------------------------------------------------------------------- KVCacheShapeOfDecomposition
cache_shapeof = Targets(lambda run, _cls: () if run.profile.decompose_cache_shapeof else None,
                        skipped=lambda run, cls, _args: run.not_applied(Action.SHAPEOF, cls.NAME))


# --------------------------------------------------------------------- SlidingWindowMaskSliceInsertion
def _masks_skipped(run: Run, cls, _args) -> None:
    run.masks_not_applied.update({m: cls.NAME for m, a in run.mask_actions.items() if a == MaskAction.SLICE})


mask_slice = Targets(lambda run, _cls: () if MaskAction.SLICE in run.mask_actions.values() else None,
                     skipped=_masks_skipped)


# ------------------------------------------------------------------------ SlidingWindowKVCacheBounding
def _bounding(run: Run, _cls) -> tuple | None:
    """Last: it plans (:func:`analyze_sliding_window_caches`) on the model as the other passes left it."""
    if run.options.sliding_window is not SlidingWindow.BOUNDED:
        return None
    return _plan_caches(run)


def _plan_caches(run: Run) -> tuple | None:
    ordered = run.model.get_ordered_ops()
    analysis = analyze_kv_sharing(run.model, ordered)
    sdpa_nodes = analysis.sdpa_nodes(ordered).values()
    run.caches = analyze_sliding_window_caches(run.model, analysis, find_sliding_window_masks(sdpa_nodes),
                                               run.options.sliding_window_margin, find_distance_window_masks(sdpa_nodes))
    return (run.caches,) if run.caches.bounded else None


def _readers(run: Run) -> list[str]:
    return [n for cache in run.caches.bounded.values() for n in cache.readers]


def _bounded(run: Run, _bounding) -> None:
    run.analysis = analyze_kv_sharing(run.model)
    run.decide(_readers(run), Action.BOUNDED)


cache_bounding = Targets(_bounding, _bounded,
                         lambda run, cls, _args: run.decide(_readers(run), Action.BOUNDED, cls.NAME))


# ----------------------------------------------------------------------- TrimmableSlidingWindowKVCache
def _trimming(run: Run, _cls) -> tuple | None:
    """Last, as the bounding: the same plan of which caches only sliding-window attention reads."""
    return _plan_caches(run) if run.options.sliding_window is SlidingWindow.TRIMMABLE else None


def _trimmed(run: Run, _pass) -> None:
    run.analysis = analyze_kv_sharing(run.model)
    run.decide(_readers(run), Action.TRIMMABLE)


cache_trimming = Targets(_trimming, _trimmed,
                         lambda run, cls, _args: run.decide(_readers(run), Action.TRIMMABLE, cls.NAME))


# ------------------------------------------------------------------ op-version lowering (last steps)
def _lowering(run: Run, cls) -> tuple | None:
    if not run.op_looked:   # before the first lowering pass: what the target cannot read
        run.op_before, run.op_looked = unreadable_before(run.model, run.profile.version), True
    nodes = lowering_target(cls, run.op_before, run.profile.version)
    return None if nodes is None else (nodes,)


def _lowered(run: Run, pass_) -> None:
    run.op_refused[pass_.NAME] = pass_.refused


lowering = Targets(_lowering, _lowered)
