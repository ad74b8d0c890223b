"""What one run of the pipeline detected, decided and changed: :class:`RewriteSummary`, plain data.

Its decisions are typed (:mod:`ovpasses.plan.decisions`); :meth:`RewriteSummary.to_dict` carries their
enum values (schema :data:`ovpasses.report.schemas.REWRITE`). Its text is the application's to render
(:func:`ovpasses.app.render.text.summary_text`); the library carries no sentences of its own.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ovpasses.analysis.attention_kinds import AttentionKind
from ovpasses.features.sdpa_recovery.analysis import EagerAttention
from ovpasses.analysis.kv_sharing import KVSharingAnalysis
from ovpasses.analysis.sharing_lint import Finding
from ovpasses.features.sliding_window.caches import SlidingWindowCaches
from ovpasses.features.paged_heads.paged_path import PagedWarning
from ovpasses.features.paged_heads.plan import PagedHeadsStep
from ovpasses.features.sliding_window.masks import SlidingWindowMask
from ovpasses.features.sliding_window.payoff import Payoff, payoff
from ovpasses.features.sliding_window.plan import MaskAction
from ovpasses.analysis.stateful_fusion import Fusion, FusionVerdict, predict_fusion
from ovpasses.features.old_runtimes.plan import OpVersionAction
from ovpasses.options import RewriteOptions
from ovpasses.modes import KVSharing, SlidingWindow
from ovpasses.passes.disable_stateful_sdpa_fusion import DisableStatefulSDPAFusion
from ovpasses.passes.kv_cache_shapeof_decomposition import KVCacheShapeOfDecomposition
from ovpasses.features.unsharing.plan import UnsharedCache
from ovpasses.plan.decisions import Action, Decision
from ovpasses.plan.profiles import RuntimeProfile
from ovpasses.report import schemas
from ovpasses.rules import RuleRecord, Status
from ovpasses.step import PassReport


@dataclass(repr=False, kw_only=True)
class RewriteSummary:
    """What :func:`ovpasses.rewrite` detected and changed, and why (per SDPA its :class:`Decision`), with the
    options it ran with."""

    options: RewriteOptions
    analysis: KVSharingAnalysis
    decisions: dict[str, Decision] = field(default_factory=dict)
    passes: list[PassReport] = field(default_factory=list)
    masks: list[SlidingWindowMask] = field(default_factory=list)   # as found before the rewrite
    mask_actions: dict[str, MaskAction] = field(default_factory=dict)
    masks_not_applied: dict[str, str] = field(default_factory=dict)   # mask (Select) -> the pass not selected
    warnings: list[PagedWarning] = field(default_factory=list)   # what no rewrite mends on the paged path
    kinds: dict[str, AttentionKind] = field(default_factory=dict)   # per SDPA, its attention kind
    findings: list[Finding] = field(default_factory=list)            # the sharing lint's
    # operations the target could not read as exported (none for the installed runtime), and what was done
    op_versions: list[OpVersionAction] = field(default_factory=list)
    unshared: list[UnsharedCache] = field(default_factory=list)   # the variables kv_sharing="unshare" added
    kept_shared: dict[str, str] = field(default_factory=dict)     # cache (for a borrower) -> why not unshared
    # with kv_sharing="unshare": the analysis of the model as unsharing left it (``analysis`` is the input's)
    analysis_after: KVSharingAnalysis | None = None
    # with sliding_window="bounded": which caches are bounded, their windows, why the others are not
    sliding_window_caches: SlidingWindowCaches | None = None
    paged_heads: PagedHeadsStep | None = None   # the paged_heads step: the plan, what it padded, the cost
    eager_attention: list[EagerAttention] = field(default_factory=list)   # eager subgraphs found in the input
    recovered: list[str] = field(default_factory=list)        # ... that EagerAttentionToSDPA made SDPAs
    eager_not_applied: str | None = None                      # the recovery pass, when passes= left it out
    records: list[RuleRecord] = field(default_factory=list)   # per rule, per node it was given: what it did

    @property
    def profile(self) -> RuntimeProfile:
        """The runtime profile the rewrite applied."""
        return self.options.runtime

    @property
    def kv_sharing(self) -> KVSharing:
        return self.options.kv_sharing

    @property
    def sliding_window(self) -> SlidingWindow:
        return self.options.sliding_window

    @property
    def actions(self) -> dict[str, Action]:
        """Per SDPA, its planned action (see :meth:`not_applied` for those left out by ``passes=``)."""
        return {name: decision.action for name, decision in self.decisions.items()}

    @property
    def reasons(self) -> dict[str, str]:
        """Per SDPA, the plan's reason."""
        return {name: decision.reason for name, decision in self.decisions.items()}

    @property
    def changed(self) -> bool:
        return any(p.changed for p in self.passes)

    def __repr__(self) -> str:
        counts = self.analysis.status_counts()
        return (f"RewriteSummary(runtime {self.profile.version_string} {self.profile.name}, {len(self.decisions)} "
                f"SDPA: exclusive={counts['exclusive']} shared={counts['shared']} stateless={counts['stateless']}, "
                f"changed {sum(len(p.changed) for p in self.passes)} nodes)")

    def not_applied(self) -> dict[str, list[str]]:
        """Per pass that was not selected, the SDPAs it would have changed (in topological order)."""
        out: dict[str, list[str]] = {}
        for name, decision in self.decisions.items():
            if decision.not_applied:
                out.setdefault(decision.not_applied, []).append(name)
        return out

    def fusion(self, unmodified: bool = False) -> dict[str, FusionVerdict]:
        """Per SDPA, whether the CPU plugin is expected to fuse it into its stateful kernel, and why: in the
        model as the rewrite leaves it, or (``unmodified``) as it was before. See
        :func:`ovpasses.analysis.stateful_fusion.predict_fusion`."""
        inserted = {n for p in self.passes if p.name == DisableStatefulSDPAFusion.NAME for n in p.changed}
        shapeof_moved = any(p.changed for p in self.passes if p.name == KVCacheShapeOfDecomposition.NAME)
        after = self.analysis if unmodified or self.analysis_after is None else self.analysis_after
        verdicts = {}
        for name, decision in self.decisions.items():
            action = None if decision.not_applied else decision.action   # a step left out changed nothing
            analysis = after if name in after.sdpa else self.analysis   # a decomposed SDPA left the model
            barrier = action == Action.BARRIER and not (unmodified and name in inserted)
            verdicts[name] = predict_fusion(
                analysis, name, barrier=barrier, decomposed=action == Action.DECOMPOSE and not unmodified,
                shapeof_moved=action == Action.SHAPEOF and shapeof_moved and not unmodified,
                shapeof_loses_state=self.profile.decompose_cache_shapeof)
            if unmodified and name in self.recovered:   # measured: the plugin fuses no eager attention
                verdicts[name] = FusionVerdict(Fusion.NOT_FUSED, "eager attention in the IR as it is (no SDPA)")
        return verdicts

    @property
    def sliding_window_payoff(self) -> Payoff | None:
        """When the sliding-window mode asked for pays on this model (None: it changes no cache)."""
        caches = self.sliding_window_caches
        if caches is None:
            return None
        # the caches unsharing would give each reader: the input's shared ones, unless this rewrite unshared
        shared = 0 if self.kv_sharing is not KVSharing.KEEP else self.analysis.shared_cache_count
        return payoff(caches, self.sliding_window, shared)

    @property
    def readable(self) -> bool:
        """Whether the target runtime reads the rewritten model (every operation it could not read was replaced)."""
        return all(a.handled for a in self.op_versions)

    def no_effect(self) -> dict[str, dict[str, int]]:
        """Per opt-in mode asked for (``kv_sharing``, ``sliding_window``) that changed nothing: why, as the count
        of caches per typed reason (``sliding_window``: :class:`Refusal` values; ``kv_sharing``:
        ``no_shared_cache`` or ``kept_shared``). Empty when every mode asked for changed something."""
        out: dict[str, dict[str, int]] = {}
        caches = self.sliding_window_caches
        if self.sliding_window is not SlidingWindow.FULL and caches is not None and not caches.bounded:
            out["sliding_window"] = {reason.value: count for reason, count in caches.refusal_counts().items()}
        if self.kv_sharing is not KVSharing.KEEP and not self.unshared:
            out["kv_sharing"] = {"kept_shared": len(self.kept_shared)} if self.kept_shared else \
                {"no_shared_cache": len(self.analysis.caches)}
        return out

    @property
    def extra_cache_bytes_per_token(self) -> int | None:
        """KV-cache memory the unshared copies add per token of context at batch 1 (None: unknown)."""
        sizes = [u.bytes_per_token for u in self.unshared]
        return None if None in sizes else sum(sizes)

    def to_dict(self) -> dict:
        pays = self.sliding_window_payoff
        return {
            "schema": schemas.REWRITE,
            "runtime": self.profile.version_string,
            "profile": self.profile.name,
            "detected": self.analysis.status_counts(),
            "caches": len(self.analysis.caches),
            "shared_caches": self.analysis.shared_cache_count,
            "actions": {name: action.value for name, action in self.actions.items()},
            "not_applied": self.not_applied(),
            "reasons": self.reasons,
            "passes": [{"name": p.name, "changed": list(p.changed), "seconds": round(p.seconds, 6)}
                       for p in self.passes],
            "unhandled": list(self.analysis.unhandled),
            "sliding_window_masks": self.masks_to_dicts(),
            "warnings": [w.to_dict() for w in self.warnings],   # ovpass renders each as its sentence
            "lint": [f.to_dict() for f in self.findings],
            "unreadable_ops": [a.to_dict() for a in self.op_versions],
            "readable": self.readable,
            "kv_sharing": self.kv_sharing.value,
            "unshared": [asdict(u) for u in self.unshared],
            "kept_shared": dict(self.kept_shared),
            "extra_cache_bytes_per_token": self.extra_cache_bytes_per_token,
            "sliding_window": self.sliding_window.value,
            "sliding_window_caches": (None if self.sliding_window_caches is None
                                      else self.sliding_window_caches.to_dict(
                                          trimmable=self.sliding_window is SlidingWindow.TRIMMABLE)),
            "no_effect": self.no_effect(),
            "sliding_window_payoff": None if pays is None else pays.to_dict(),
            "paged_heads": None if self.paged_heads is None else self.paged_heads.to_dict(),
            "eager_attention": self.eager_to_dicts(),
            "first_prompt": self.first_prompt_to_dict(),
            "records": [r.to_dict() for r in self.records],
        }

    def first_prompt_to_dict(self) -> dict:
        """``first_prompt``: the mode, the SDPAs whose long first prompt runs in query blocks (BlockedFirstPrompt
        applied) and why the rule left the others (refused)."""
        records = [r for r in self.records if r.rule == "BlockedFirstPrompt"]
        return {"mode": self.options.first_prompt.value,
                "blocked": [r.node for r in records if r.status is Status.APPLIED],
                "refused": {r.node: r.reason for r in records if r.status is Status.REFUSED}}

    def eager_to_dicts(self) -> list[dict]:
        """Per eager attention subgraph found: what it is, whether it is an SDPA now, and why not."""
        return [dict(e.to_dict(), recovered=e.name in self.recovered, not_applied=self.eager_not_applied
                     if e.recoverable else None) for e in self.eager_attention]

    def masks_to_dicts(self) -> list[dict]:
        return [{"select": m.select, "window": m.window, "sdpa": sorted(m.sdpa_direct + m.sdpa_sliced),
                 "action": self.mask_actions[m.select].value, "not_applied": self.masks_not_applied.get(m.select)}
                for m in self.masks]
