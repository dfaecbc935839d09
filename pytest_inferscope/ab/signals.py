"""SIGTERM and SIGHUP during an A/B run: the twin ended and the worktree removed before the signal does its work.

Ctrl-C raises KeyboardInterrupt, and pytest unwinds to the controller's cleanup at unconfigure; SIGTERM (a CI
cancelling a job, `timeout`) and SIGHUP (a closed terminal) end the process at once by default, and left the
worktree registered in the user's repository and its folder and the twin's log in TMPDIR.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

SIGNALS = tuple(getattr(signal, name) for name in ("SIGTERM", "SIGHUP") if hasattr(signal, name))


class CleanupOnSignals:
    """While installed, SIGTERM and SIGHUP first run `cleanup`, then do what they did before (by default, end the
    process by that signal, so its exit status still says so). A signal that was ignored stays ignored."""

    def __init__(self, cleanup: Callable[[], object]) -> None:
        self.cleanup = cleanup
        self.previous: dict[int, Any] = {}

    def install(self) -> None:
        """Take over the signals; only in the main thread (Python delivers signals there, and only there can a handler
        be set: under a thread-based runner nothing is changed)."""
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            before = signal.getsignal(sig)
            if before in (signal.SIG_IGN, None) or sig in self.previous:  # ignored (nohup), or set by C code: as is
                continue
            self.previous[sig] = before
            signal.signal(sig, self._handle)

    def restore(self) -> None:
        """Put back the handlers there were before `install`; safe to call twice."""
        while self.previous:
            sig, before = self.previous.popitem()
            if signal.getsignal(sig) == self._handle:  # (another handler set since then is theirs to keep)
                signal.signal(sig, before)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        before = self.previous.get(signum, signal.SIG_DFL)
        self.restore()
        try:
            self.cleanup()
        finally:
            if callable(before):
                before(signum, frame)
            else:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
