"""Real faults for the file layer's tests: ``strace`` attached to a process once its imports are done.

Why attached and not ``strace COMMAND``: under ptrace every system call of the traced process stops it,
whichever calls ``-e trace=`` names, and most of an ``ovpass`` run's calls are Python's and OpenVINO's imports
(14,658 calls for a tiny8 folder rewrite, 3,643 of them after the imports). Traced from its start, a run took
1.84-2.01 s; attached after the imports 0.98-1.03 s; untraced 0.62-0.64 s (2026-12-07, this VM, one run at a
time). strace 6.1's ``--seccomp-bpf``, which would stop only at the named calls, injects no signal
(benchmarks/records/2026-12-07-test-run-profile.md).

What the process does is a user's run: it imports what the console script imports, waits on a pipe until the
tracer has attached, then calls the console script's function with the same ``sys.argv``. Everything the command
does, its signal handlers installed by ``main()`` included, happens under the tracer; an injection's ``when=N``
counts the calls of the command alone, and so does a trace that finds the steps (both run attached).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence

# waits for the tracer before the command runs; allows a tracer that is not its parent (Yama's ptrace_scope 1)
_LAUNCHER = r"""
import ctypes, os, sys
ready, go, kind = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
try:
    ctypes.CDLL(None, use_errno=True).prctl(0x59616D61, ctypes.c_ulong(-1), 0, 0, 0)  # PR_SET_PTRACER, any
except (OSError, AttributeError):
    pass
if kind == "ovpass":
    from ovpasses.app.cli import main  # what the console script imports: openvino and the whole CLI
else:
    import importlib
    for name in filter(None, sys.argv[5].split(",")):   # what the script imports first, named by the caller
        importlib.import_module(name)
os.write(ready, b"r")
os.close(ready)
os.read(go, 1)
os.close(go)
if kind == "ovpass":
    sys.argv = sys.argv[4:]
    sys.exit(main())
source, sys.argv = sys.argv[4], ["-c", *sys.argv[6:]]
exec(compile(source, "<string>", "exec"), {"__name__": "__main__"})   # imports not preloaded are traced
"""


def run_traced(strace: Sequence[str], command: Sequence[str], *, script: str | None = None,
               preload: Sequence[str] = (), timeout: float = 120,
               env: dict | None = None) -> subprocess.CompletedProcess:
    """``command`` (``[ovpass, ARGS...]``, the console script's path first) under ``strace -f STRACE``,
    attached after the imports; or, with ``script``, that Python source run with ``command`` as its arguments,
    attached after the modules ``preload`` names are imported. Returns the command's own exit (a negative code
    where a signal ended it) and output."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    argv = ["ovpass", *map(str, command)] if script is None else \
        ["script", script, ",".join(preload), *map(str, command)]
    child = subprocess.Popen([sys.executable, "-c", _LAUNCHER, str(ready_w), str(go_r), *argv],
                             pass_fds=(ready_w, go_r), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=env)
    os.close(ready_w)
    os.close(go_r)
    tracer = None
    try:
        if os.read(ready_r, 1) != b"r":
            out, err = child.communicate(timeout=timeout)
            raise RuntimeError(f"the traced process ended before it was ready: {err}")
        tracer = subprocess.Popen(["strace", "-f", "-p", str(child.pid), *strace], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        first = tracer.stderr.readline()
        if f"Process {child.pid} attached" not in first:
            raise RuntimeError(f"strace did not attach to {child.pid}: {first}{tracer.stderr.read()}")
        os.write(go_w, b"g")
        out, err = child.communicate(timeout=timeout)
        tracer.communicate(timeout=30)
    finally:
        os.close(ready_r)
        os.close(go_w)
        for process in (child, tracer):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    return subprocess.CompletedProcess(list(command), child.returncode, out, err)
