"""The single-file flow of ``ovpass rewrite``: one IR (``.xml`` + ``.bin``) read, rewritten and written as one
artefact (the folder flow, beside it, is :mod:`ovpasses.app.folder`)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from ovpasses.app.files import io
from ovpasses.app.files.export_scan import refuse_without_attention
from ovpasses.options import RewriteOptions
from ovpasses.pipeline import rewrite
from ovpasses.summary import RewriteSummary

log = logging.getLogger(__name__)


def rewrite_file(source: str | os.PathLike, target: str | os.PathLike | None,
                 options: RewriteOptions | None = None, in_place: bool = False,
                 dry_run: bool = False) -> RewriteSummary:
    """Rewrite the IR at ``source`` and write it to ``target`` (with ``dry_run``, or ``target`` None, nothing
    is written; a ``target`` given is still checked).

    The input pair and the output path are checked before any work (:func:`~ovpasses.app.files.io.check_ir_file`,
    :func:`~ovpasses.app.files.io.check_output_path`; an output that is a file of the input pair is refused
    unless ``in_place``); the model is written by :func:`~ovpasses.app.files.io.write_ir`, the pair replaced
    whole or not at all. ``options``: what the rewrite does (:class:`RewriteOptions`; default: every pass, for
    the installed runtime)."""
    source = Path(source)
    io.check_ir_file(source)
    if target is not None:
        io.check_output_path(target)
        if not in_place:
            io.check_distinct_output(source, target)
    model = io.read_ir(source)
    refuse_without_attention(source)
    summary = rewrite(model, options=options)
    if target is not None and not dry_run and written(summary, in_place):
        replaced = replaces(target)
        io.write_ir(model, target, source=source)
        if replaced and not in_place and (export := io.export_folder_of(target, source)) is not None:
            log.warning("%s: replaced an IR of the export folder %s, whose config.json and other files stay as they "
                        "were; if IN is another model's IR, rewrite its folder instead (ovpass rewrite DIR -o NEW_DIR)",
                        target, export)
    return summary


def written(summary: RewriteSummary, in_place: bool) -> bool:
    """Whether :func:`rewrite_file` writes the pair (not on a dry run): a rewrite that changed nothing leaves an
    ``in_place`` input as it is; to another target the pair is written as read."""
    return summary.changed or not in_place


def replaces(target: str | os.PathLike) -> bool:
    """Whether writing the IR ``target`` replaces a pair (or a file of one) that is there."""
    return any(os.path.lexists(path) for path in io.ir_files(target))
