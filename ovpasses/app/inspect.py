"""``ovpass inspect`` on files: the report of an IR file, or of each IR of an export folder that holds
stateful attention (:func:`ovpasses.report.inspect.inspect_model` on each, read through the file layer), and
what the folder holds that was not inspected."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ovpasses.app.files.io import read_ir
from ovpasses.app.files.export_scan import export_family, refuse_without_attention, scan_export
from ovpasses.options import RewriteOptions
from ovpasses.report.inspect import folder_report, inspect_model


@dataclass
class PathInspection:
    """The reports of an IR file (one, named None) or of each IR of an export folder that holds stateful
    attention (named by file), and the folder's other ``.xml`` files with why each was not inspected."""

    source: Path
    reports: list[tuple[str | None, dict]]
    skipped: list[dict] = field(default_factory=list)   # {"file", "reason": an app.files.export_scan.Skipped value}
    family: str | None = None   # the export's model family (export_family), whose measurements the text quotes

    @property
    def is_folder(self) -> bool:
        return self.reports[0][0] is not None

    def to_dict(self) -> dict:
        """The report of the file, or the folder's (``ovpass.inspect-folder/3``)."""
        return folder_report(self.source, self.reports, self.skipped) if self.is_folder else self.reports[0][1]


def inspect_path(source: Path, options: RewriteOptions | None = None) -> PathInspection:
    """The report of an IR file, or of each IR of an export folder that holds stateful attention."""
    if not os.path.isdir(source):
        model = read_ir(source)
        refuse_without_attention(Path(source))
        return PathInspection(source, [(None, inspect_model(model, options))],
                              family=export_family(Path(source).parent))
    scan = scan_export(source)
    return PathInspection(source, [(name, inspect_model(read_ir(source / name), options)) for name in scan.stateful],
                          scan.skipped_dicts(), family=export_family(source))
