"""``ovpass`` run in this process: :func:`ovpasses.app.cli.main` with its output captured, for the tests whose
command gains nothing from a process of its own (a fresh interpreter costs about a second per command).

What still needs a real process runs one (tests/test_cli.py keeps those): the console script itself, an
exit by a signal, another runtime's virtual environment, output that OpenVINO writes to the file
descriptors directly, and anything that must not share this process's state (locks held, signal handlers).
"""

from __future__ import annotations

import contextlib
import io
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CliResult:
    """What one command gave: its exit code and what it wrote to stdout and stderr (as
    ``subprocess.CompletedProcess`` names them, so a test reads either the same way)."""

    returncode: int
    stdout: str
    stderr: str


def run_main(*args, cwd: str | os.PathLike | None = None) -> CliResult:
    """``ovpass ARGS`` in this process (in ``cwd`` when given): main()'s exit code, or argparse's
    (``SystemExit``), and what the command printed."""
    from ovpasses.app.cli import main  # noqa: PLC0415 - the CLI is not part of what the builders need

    out, err = io.StringIO(), io.StringIO()
    here = Path.cwd()
    try:
        if cwd is not None:
            os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:   # argparse: --help, --version, usage errors
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.chdir(here)
    return CliResult(code, out.getvalue(), err.getvalue())


def unwrapped(text: str) -> list[str]:
    """The lines of ``ovpass``'s text output as they were before it wrapped them at 100 characters
    (``ovpasses.app.render.text.fit``): a line indented 4 more than the one before it continues that one."""
    lines: list[str] = []
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip(" "))
        if lines and line.strip() and indent == len(lines[-1]) - len(lines[-1].lstrip(" ")) + 4:
            lines[-1] += " " + line.strip()
        else:
            lines.append(line)
    return lines
