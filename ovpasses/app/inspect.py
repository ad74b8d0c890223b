"""``ovpass inspect`` on files: the report of an IR file, or of each IR of an export folder that holds
stateful attention (:func:`ovpasses.report.inspect.inspect_model` on each, read through the file layer)."""

from __future__ import annotations

import os
from pathlib import Path

from ovpasses.app.files.io import read_ir
from ovpasses.app.folder import stateful_irs
from ovpasses.options import RewriteOptions
from ovpasses.report.inspect import inspect_model


def inspect_path(source: Path, options: RewriteOptions | None = None) -> list[tuple[str | None, dict]]:
    """The report of an IR file (named None), or of each IR of an export folder that holds stateful
    attention (named by its file name)."""
    if not os.path.isdir(source):
        return [(None, inspect_model(read_ir(source), options))]
    return [(name, inspect_model(read_ir(source / name), options)) for name in stateful_irs(source)]
