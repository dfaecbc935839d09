"""SIGTERM/SIGHUP during an A/B run (ab/signals.py): the cleanup runs first, then the signal does what it did before;
the previous handlers come back afterwards, and an ignored signal stays ignored."""

from __future__ import annotations

import os
import signal

from pytest_inferscope.ab.signals import CleanupOnSignals


def test_cleanup_then_the_previous_handler_and_restored_after() -> None:
    calls: list[str] = []
    before = signal.signal(signal.SIGTERM, lambda s, f: calls.append("previous"))
    hup = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        guard = CleanupOnSignals(lambda: calls.append("cleanup"))
        guard.install()
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN  # ignored (nohup): left alone
        os.kill(os.getpid(), signal.SIGTERM)
        assert calls == ["cleanup", "previous"]
        assert signal.getsignal(signal.SIGTERM) is not guard._handle  # back to the previous one
        previous = signal.getsignal(signal.SIGTERM)
        guard.install()
        guard.restore()
        guard.restore()  # twice is fine
        assert signal.getsignal(signal.SIGTERM) is previous
    finally:
        signal.signal(signal.SIGTERM, before)
        signal.signal(signal.SIGHUP, hup)
