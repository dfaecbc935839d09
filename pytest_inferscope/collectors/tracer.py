"""Full call tracing (`--inferscope-cpu=trace`): every Python call in the rounds as a CALL span, through
`sys.setprofile`. Exact but expensive; the overhead is estimated from a calibration and reported."""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from types import CodeType, FrameType
from typing import Any

from ..buffer import TraceBuffer
from ..events import Kind, host_clock_ns
from .cpu import _label

#: The plugin's own files (its package's folder), left out of the call trace.
_OWN_FILES = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class Tracer:
    """Full call tracing through sys.setprofile on the calling thread (opt-in), in the rounds only.

    The profile function is set when a round starts (`arm`) and taken off when it ends (`disarm`): the harness
    between rounds (pytest's and pluggy's calls, the collection's own work) is neither traced nor slowed, and no
    call span outlives its round. The plugin's own frames inside a round (a scope's `__enter__`, which records the
    scope's start inside it, so their spans would cross) are left out, their callees kept.
    """

    _per_call_ns: float | None = None  # calibrated once per process

    def __init__(self, buffer: TraceBuffer, tid: int, ours_too: bool = False) -> None:
        """`ours_too`: trace the plugin's own frames as well (the calibration's loop is the plugin's code)."""
        self.buffer = buffer
        self.tid = tid
        self._ours = "\0" if ours_too else _OWN_FILES  # (no file name starts with a NUL)
        self.calls = 0
        self.hook_calls = 0  # every call of the hook, including those for C functions
        self._stack: list[tuple[int, int]] = []  # (name, start) of the open calls; name -1: one of ours, not recorded
        self._names: dict[CodeType, int] = {}
        self._previous: Callable[..., Any] | None = None
        self._armed = False

    def _hook(self, frame: FrameType, event: str, arg: object) -> None:
        self.hook_calls += 1
        if event == "call":
            code = frame.f_code
            name = self._names.get(code)
            if name is None:
                own = code.co_filename.startswith(self._ours)
                name = self._names[code] = -1 if own else self.buffer.strings.intern(_label(code))
            self._stack.append((name, host_clock_ns()))
        elif event == "return" and self._stack:
            name, start = self._stack.pop()
            if name >= 0:
                self.buffer.record(Kind.CALL, name, start, host_clock_ns(), tid=self.tid)
                self.calls += 1

    def start(self) -> None:
        """Nothing is traced until a round arms the tracer."""

    def arm(self) -> None:
        """A round starts: trace its calls."""
        if not self._armed:
            self._armed = True
            self._previous = sys.getprofile()
            sys.setprofile(self._hook)

    def disarm(self) -> None:
        """The round ends: stop tracing; calls still open (a body's suspended coroutine) end here."""
        if self._armed:
            sys.setprofile(self._previous)
            self._armed = False
            now = host_clock_ns()
            while self._stack:
                name, start = self._stack.pop()
                if name >= 0:
                    self.buffer.record(Kind.CALL, name, start, now, tid=self.tid)

    def stop(self) -> None:
        self.disarm()

    @classmethod
    def per_call_ns(cls) -> float:
        """Added cost of one call of the hook, measured once per process.

        Calibrated on a loop that calls a Python function and a C function (len) in turn,
        so both kinds of hook call (call/return and c_call/c_return) are in the mix, as in
        real code; the overhead estimate multiplies it by every hook call the run made.
        """
        if cls._per_call_ns is None:

            def f(x: list[int]) -> int:
                return len(x)

            def loop(n: int) -> int:
                data = [1, 2, 3]
                t = time.perf_counter_ns()
                for _ in range(n):
                    f(data)
                return time.perf_counter_ns() - t

            n = 20_000
            plain = min(loop(n) for _ in range(3))
            tracer = cls(TraceBuffer(size_mb=4), tid=0, ours_too=True)
            tracer.arm()
            try:
                traced = min(loop(n) for _ in range(3))
            finally:
                tracer.disarm()
            hooks = max(1, tracer.hook_calls // 3)
            cls._per_call_ns = max(0.0, (traced - plain) / hooks)
        return cls._per_call_ns
