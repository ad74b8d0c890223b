"""The inspect report: the KV-sharing map of a model, what the rewrite does to each SDPA and whether the CPU
plugin is expected to fuse it, as plain data (the ``ovpass.inspect/3`` schema).

The report reads the same objects the passes use (:class:`~ovpasses.analysis.KVSharingAnalysis` and the
:class:`~ovpasses.summary.RewriteSummary` of a rewrite on a clone, with the plan's reasons, the fusion
prediction and the sharing lint). Its text and Graphviz formats are the application's
(:mod:`ovpasses.app.render.inspect`), and so is reading IR files and folders (:mod:`ovpasses.app.inspect`).
"""

from __future__ import annotations

import os

import openvino as ov

from ovpasses.modes import SlidingWindow
from ovpasses.options import RewriteOptions
from ovpasses.pipeline import run_pipeline
from ovpasses.report import schemas
from ovpasses.summary import RewriteSummary

SUMMARY_FIELDS = ("sliding_window_masks", "warnings", "lint", "unreadable_ops", "readable", "kv_sharing", "unshared",
                  "kept_shared", "extra_cache_bytes_per_token", "sliding_window", "sliding_window_caches", "paged_heads",
                  "eager_attention", "sliding_window_payoff", "first_prompt")


KV_BYTES_CONTEXT = 8192   # the context at which the report gives the KV-cache bytes


def inspect_model(model: ov.Model, options: RewriteOptions | None = None) -> dict:
    """The KV-sharing map of ``model`` and what ``ovpass rewrite`` would do to each SDPA with ``options``
    (default: every pass, the installed runtime), and the operations the target runtime cannot read as
    exported with what the rewrite does about each.

    Runs the pipeline on a clone (the actions are the ones the rewrite really takes, including the
    fallback to decomposition and the refusal of an operation it cannot replace); ``model`` is not
    changed. The result follows the schema documented in docs/cli.md (``"schema": "ovpass.inspect/3"``,
    :data:`ovpasses.report.schemas.INSPECT`).
    Per SDPA, ``fusion`` is whether the CPU plugin is expected to fuse it into its stateful kernel in the
    model as the rewrite leaves it, and ``fusion_unmodified`` the same for the model as it is, each with
    its reason. With ``sliding_window=bounded``, per SDPA ``window`` (None: full attention) and
    ``cache_bounded``, and ``kv_bytes``: KV-cache bytes per token and at :data:`KV_BYTES_CONTEXT` tokens
    of context (batch 1), as exported and as bounded.
    """
    return inspect_summary(run_pipeline(model.clone(), options))


def inspect_summary(summary: RewriteSummary) -> dict:
    """The :func:`inspect_model` report of a pipeline run's summary (``ovpass.inspect/3``)."""
    caches = summary.sliding_window_caches
    data = summary.analysis.to_dict()
    fusion, unmodified = summary.fusion(), summary.fusion(unmodified=True)
    for sdpa in data["sdpa"]:
        name = sdpa["name"]
        sdpa["action"] = summary.decisions[name].action.value
        sdpa["not_applied"] = summary.decisions[name].not_applied
        sdpa["reason"] = summary.reasons[name]
        sdpa["kind"] = summary.kinds[name].to_dict()
        sdpa["fusion"] = fusion[name].to_dict()
        sdpa["fusion_unmodified"] = unmodified[name].to_dict()
        if caches is not None:
            sdpa["window"] = caches.windows.get(name)
            sdpa["cache_bounded"] = any(name in b.readers for b in caches.bounded.values())
    extra = {}
    if caches is not None:
        extra["kv_bytes"] = {"context": KV_BYTES_CONTEXT, "per_token": caches.kv_bytes(1, bounded=False),
                             "full": caches.kv_bytes(KV_BYTES_CONTEXT, bounded=False),
                             "bounded": caches.kv_bytes(KV_BYTES_CONTEXT),
                             "held": caches.held_at(KV_BYTES_CONTEXT,
                                                    trimmable=summary.sliding_window is SlidingWindow.TRIMMABLE)}
    return {
        "schema": schemas.INSPECT,
        "runtime": summary.profile.version_string,
        "profile": summary.profile.name,
        "detected": summary.analysis.status_counts(),
        "fused_expected": sum(v.expected for v in fusion.values()),
        "fused_expected_unmodified": sum(v.expected for v in unmodified.values()),
        "variables": sorted(data["variables"], key=lambda v: v["variable_id"]),
        "sdpa": data["sdpa"],
        "unhandled": data["unhandled"],
        "states": data["states"],
        # as in the rewrite's summary: one source for the fields both reports carry
        **{key: value for key, value in summary.to_dict().items() if key in SUMMARY_FIELDS},
        **extra,
    }


def folder_report(source: str | os.PathLike, reports: list[tuple[str | None, dict]],
                  skipped: list[dict] | None = None) -> dict:
    """A folder's reports as one (schema :data:`ovpasses.report.schemas.INSPECT_FOLDER`), with the folder's
    other ``.xml`` files and why each was not inspected (``{"file", "reason"}``)."""
    return {"schema": schemas.INSPECT_FOLDER, "folder": os.fspath(source),
            "models": [{"file": name, "report": report} for name, report in reports], "skipped": skipped or []}
