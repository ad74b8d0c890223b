"""``ovpass check`` over an IR file or an export folder: each IR that holds stateful attention checked
side by side (:func:`~ovpasses.app.check.side_by_side.check_model`), optionally openvino_genai on the folder
and its rewritten copy (:mod:`~ovpasses.app.check.genai`), and the worst verdict."""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import openvino as ov

from ovpasses.app.check import genai, inputs
from ovpasses.app.check.side_by_side import (FIXED, INCONCLUSIVE, OK, WORSE, CheckReport, bound_prefill,
                                              bounded_keeps, check_model)
from ovpasses.devices import resolve_device
from ovpasses.errors import InputError, OvpassesError
from ovpasses.app import folder
from ovpasses.app.files import export_scan, io
from ovpasses.options import RewriteOptions, SlidingWindow
from ovpasses.report import schemas

# the verdict of a folder: the worst of its reports'
VERDICT_ORDER = (OK, FIXED, INCONCLUSIVE, WORSE)


@dataclass
class PathCheck:
    """What ``ovpass check`` found for one IR file or one export folder."""

    source: Path
    is_folder: bool
    reports: list[tuple[str, CheckReport]] = field(default_factory=list)
    genai: list[genai.GenaiPathReport] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)   # a folder's other IRs: {"file", "reason"}

    @property
    def genai_paths(self) -> list[genai.GenaiPathsReport]:
        """genai's stateful and paged paths against each other, on each folder."""
        return genai.paths_reports(self.genai)

    @property
    def verdict(self) -> str:
        codes = [report.verdict_code for _, report in self.reports] + [r.verdict for r in self.genai] + \
            [r.verdict for r in self.genai_paths if r.folder == "rewritten"]
        return max(codes, key=VERDICT_ORDER.index)

    def to_dict(self) -> dict:
        """A folder's report (schema :data:`ovpasses.report.schemas.CHECK_FOLDER`)."""
        return {"schema": schemas.CHECK_FOLDER, "folder": str(self.source), "verdict_code": self.verdict,
                "models": [{"file": name, **report.to_dict()} for name, report in self.reports],
                "genai": [r.to_dict() for r in self.genai], "genai_paths": [r.to_dict() for r in self.genai_paths],
                "skipped": self.skipped}


def check_path(source: Path, device: str = "CPU", steps: int = 3, options: RewriteOptions | None = None,
               config: dict | None = None, prefill: int | None = None, atol: float = 1e-4, rtol: float = 1e-4,
               data_shapes: inputs.DataShapes | None = None, with_genai: bool = False,
               prefill_chunk: int | None = None) -> PathCheck:
    """Check an IR file, or each IR of an export folder that holds stateful attention (and, with
    ``with_genai``, the folder through openvino_genai). Raises :class:`OvpassesError` for a folder with
    files a client could not read, and for ``with_genai`` on an IR file."""
    is_folder = os.path.isdir(source)
    if with_genai and not is_folder:
        raise OvpassesError("--genai runs openvino_genai on an export folder: give the folder, not an IR file")
    if is_folder and (unreadable := export_scan.unreadable_files(source)):
        raise InputError(f"{source}: {len(unreadable)} file(s) of the export cannot be read: "
                            f"{', '.join(unreadable[:3])}{', ...' if len(unreadable) > 3 else ''}; "
                            "a client would fail on them: copy the export again (with cp -L for links)")
    scan = export_scan.scan_export(source) if is_folder else None
    files = [source / name for name in scan.stateful] if is_folder else [source]
    device = resolve_device(device, ov.Core())
    result = PathCheck(source, is_folder, skipped=scan.skipped_dicts() if is_folder else [])
    for path in files:
        model = io.read_ir(path)
        export_scan.refuse_without_attention(path)
        feeds = inputs.InputSource(path.parent, data_shapes or {},
                                   inputs.Embedders.beside(path.parent, ov.Core(), device))
        result.reports.append((path.name, check_model(
            model, device=device, steps=steps, options=options, config=config, prefill=prefill, atol=atol,
            rtol=rtol, source=feeds, prefill_chunk=prefill_chunk)))
    if with_genai:
        result.genai = genai_check(source, device, options, prefill)
    return result


def genai_check(source: Path, device: str, options: RewriteOptions | None = None, prefill: int | None = None) -> list:
    """The folder and its rewritten copy (in a temporary folder) through openvino_genai, on a prompt of
    ``prefill`` tokens; None: genai's default prompt, or, where the rewrite bounds a cache, a prompt past the
    most a bounded cache keeps."""
    with tempfile.TemporaryDirectory(prefix="ovpass-genai-") as tmp:
        rewritten = Path(tmp) / "rewritten"
        summary = folder.rewrite_folder(source, rewritten, options)
        # openvino_genai never runs the trimmer: trimmable caches hold every position there, nothing is bounded
        keeps = [k[1] for m in summary.models if m.summary is not None and (k := bounded_keeps(m.summary))
                 and m.summary.sliding_window is not SlidingWindow.TRIMMABLE]
        keep = max(keeps, default=None)
        if prefill is None and keep is not None:
            prefill = bound_prefill(keep)
        return genai.check_folders(source, rewritten, device=device, prefill=prefill, bound_keep=keep)
