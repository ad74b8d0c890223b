"""Signals that stop ovpass: deferred while a commit renames files, an ordinary exception elsewhere.

A commit (:mod:`ovpasses.app.files.commit`) renames several files or folders into place; a process stopped
between two of those renames would leave the target half old and half new until the next ovpass
command repairs it. :func:`deferred` holds SIGINT, SIGTERM and SIGHUP for the length of that window
and delivers the first one it held once the window is over: the commit is then complete or undone.

Outside that window a signal should unwind the stack so that ``finally`` blocks remove the
process's own temporaries. Python does that for SIGINT (``KeyboardInterrupt``) but not for SIGTERM
or SIGHUP, whose default action ends the process at once. :func:`raising` installs handlers that
raise :class:`Interrupted` for all three; the command-line tool installs them for its whole run.

SIGKILL cannot be caught: what it leaves, the next ovpass command on the folder finishes or undoes
(:func:`ovpasses.app.files.commit.recover`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator

HELD = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Interrupted(KeyboardInterrupt):
    """A SIGINT, SIGTERM or SIGHUP stopped the run (a ``KeyboardInterrupt``, so ``except Exception``
    does not swallow it); ``signum`` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        """The exit status a shell reports for a process that this signal ended: 128 + its number."""
        return 128 + self.signum


def _raise(signum: int, _frame) -> None:
    raise Interrupted(signum)


@contextlib.contextmanager
def raising() -> Iterator[None]:
    """For the block: SIGINT, SIGTERM and SIGHUP raise :class:`Interrupted` (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.signal(signum, _raise) for signum in HELD}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


@contextlib.contextmanager
def deferred() -> Iterator[list[int]]:
    """Hold SIGINT, SIGTERM and SIGHUP for the block; then deliver the first held, as it would have been.

    Yields the list of held signal numbers. The block ends normally or with its own exception; a
    held signal is delivered only when the block ended normally (an exception in flight already ends
    the command, with a message about the state the block left). Delivery calls the handler that
    was installed before the block (:class:`Interrupted` or ``KeyboardInterrupt`` for the usual
    ones); a default action is carried out by re-sending the signal to this process. Outside the
    main thread, where Python cannot install handlers, the block runs unprotected.
    """
    if threading.current_thread() is not threading.main_thread():
        yield []
        return
    held: list[int] = []

    def hold(signum: int, _frame) -> None:
        held.append(signum)

    previous = {signum: signal.signal(signum, hold) for signum in HELD}
    ok = False
    try:
        yield held
        ok = True
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if ok and held:
            _deliver(held[0], previous[held[0]])


def _deliver(signum: int, handler) -> None:
    if handler is signal.SIG_IGN:
        return
    if callable(handler):
        handler(signum, None)
        return
    os.kill(os.getpid(), signum)  # SIG_DFL (or a handler not set from Python): the default action
