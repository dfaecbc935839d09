"""The stack sampler that runs in the test thread itself (`--inferscope-sampler=pending` or `signal`), driven by a
clock in C.

`cpu.Sampler`'s thread needs the GIL for each sample; here the clock (native/_tick.c, a thread of plain C) has CPython
run the sample in the main thread between two bytecodes: by a pending call (`pending`, and `signal` from CPython
3.13), or by a signal to the main thread (`signal` before 3.13).
"""

from __future__ import annotations

import atexit
import signal
import sys
import threading
import time
from types import FrameType

from ..buffer import TraceBuffer
from ..events import host_clock_ns
from ..options import CLOCK_NOT_BUILT
from .cpu import Sampler, _stack_key
from .memory import RssFile

try:  # the sampler clock in C (native/_tick.c): without it (no C compiler at install), the thread samples
    from .. import _tick
except ImportError:  # pragma: no cover - the build skips it only without a compiler
    _tick = None  # type: ignore[assignment]

#: The signal `SignalSampler`'s clock sends to the main thread before CPython 3.13: a real-time one, which no tool we
#: know of uses (SIGRTMAX - 2).
TICK_SIGNAL: int | None = signal.SIGRTMAX - 2 if hasattr(signal, "SIGRTMAX") else None
#: From CPython 3.13 the clock queues pending calls, which wake the main thread's eval loop there, and sends no signal;
#: before, a pending call from a thread of ours waited for the next GIL switch (none in 200 ms of pure Python at
#: 10 ms, where 3.13 ran 19).
_PENDING_CALLS = sys.version_info >= (3, 13)
#: Before 3.13 the pending calls of `--inferscope-sampler=pending` run at the main thread's next GIL switch: at once in
#: a body that lets the GIL go (a torch op, a CUDA launch, a sleep), never in pure Python. A call still queued this
#: share of the interval after its tick, the main thread at work, is nudged by a GIL hand-over (native/_tick.c).
NUDGE_SHARE = 1 / 8
_ticking: SignalSampler | None = None  # the sampler the clock feeds now


def nudge_ns(interval_s: float, kind: str) -> int:
    """How long a pending call of `kind`'s sampler may wait for a GIL switch before the clock nudges it (0: never)."""
    return int(interval_s * 1e9 * NUDGE_SHARE) if kind == "pending" and not _PENDING_CALLS else 0


def _stop_clock() -> None:
    """At the interpreter's exit, before it resets the signal handlers: a collection left running stops its clock."""
    if _tick is not None:
        _tick.stop()


atexit.register(_stop_clock)


def _on_pending(frame: FrameType | None) -> None:
    """The clock's pending call, in the main thread: a sample, or nothing after its sampler stopped."""
    sampler = _ticking
    if sampler is not None:
        sampler._sample(frame)


def _on_tick(signum: int, frame: FrameType | None) -> None:
    """TICK_SIGNAL's handler (before 3.13), installed once for the process: the same."""
    _on_pending(frame)


class SignalSampler(Sampler):
    """The same samples, taken in the test thread itself (`--inferscope-sampler=signal`, or `pending`: `kind`).

    `Sampler`'s thread needs the GIL for each sample, which the test thread holds while it runs Python: every sample
    is a forced hand-over and back. Here a thread of C (native/_tick.c, holding the GIL only for a nudge, below) wakes
    every interval and has CPython run the sampler in the main thread between two bytecodes, with the interrupted
    frame: no GIL hand-over, and with `signal` samples at the interval asked for in pure Python, where the thread gets
    the GIL only every switch interval (5 ms). From CPython 3.13 no signal is sent (the clock queues a pending call,
    which the main thread runs); before, the clock sends TICK_SIGNAL to the main thread alone (pthread_kill), whose
    Python handler samples, and the system calls it interrupts there restart (`siginterrupt(False)`), except those that
    never do (a C `poll` with a timeout fails with EINTR). The wall-clock timer and SIGALRM are left alone:
    pytest-timeout's signal method works beside it. While the test thread is in a C call, the sample waits for the
    call's return (the frame then is the caller's, its line the call's). (ViT-B/16 on an H200 at 10 ms, the mechanism
    alone: ~0% a call against ~2% for a thread that only walks the frames; docs/performance.md, "Session 25 on the
    H200 host".)

    `pending` (auto's choice before 3.13 since 2026-12-01: docs/performance.md, "Session 48") never sends a signal.
    Before 3.13 the main thread runs the clock's pending call when it next takes the GIL back: in a body that lets
    it go (torch ops, CUDA launches, sleeps; every few µs in a model's forward) at once, with no hand-over; where it
    runs pure Python instead, the clock makes it hand the GIL over once, `NUDGE_SHARE` of the interval after the
    tick (CPython asks for it after the switch interval, 5 ms), and the call runs then: the thread sampler's cost,
    where the thread sampler would pay it too.

    Only where `unavailable()` says nothing: the C clock built, the main thread (Python runs signal handlers and
    pending calls there only), and for `signal` before 3.13 TICK_SIGNAL without another tool's handler. Its handler
    stays installed for the process, a no-op between two samplers, so that a signal still on its way at a stop cannot
    reach a default disposition.
    """

    def __init__(self, buffer: TraceBuffer, interval_ms: float, target_ident: int, target_tid: int,
                 kind: str = "signal") -> None:  # fmt: skip
        super().__init__(buffer, interval_ms, target_ident, target_tid)
        self.kind = kind  # signal | pending
        self.nudges = 0  # the GIL hand-overs the clock made for this sampler's calls (`pending` before 3.13)

    @property
    def nudged(self) -> bool:
        """Whether the clock nudges a call the thread holds back (pending calls before CPython 3.13)."""
        return nudge_ns(self.interval_s, self.kind) > 0

    @staticmethod
    def unavailable(kind: str = "signal") -> str:
        """Why this thread cannot be sampled in itself by `kind` now ("" when it can)."""
        if _tick is None:
            return CLOCK_NOT_BUILT
        if threading.current_thread() is not threading.main_thread():
            return (
                "the test runs outside the main thread, and Python runs signal handlers and pending calls in the "
                "main thread only"
            )
        if _PENDING_CALLS or kind == "pending":
            return ""
        if TICK_SIGNAL is None:
            return "before CPython 3.13 it needs a real-time signal, and this platform has none"
        if signal.getsignal(TICK_SIGNAL) not in (signal.SIG_DFL, None, _on_tick):
            return f"signal {TICK_SIGNAL} (SIGRTMAX-2), which it uses, has another tool's handler"
        return ""

    def start(self) -> None:
        global _ticking
        assert _tick is not None  # unavailable() said so
        self._last = host_clock_ns()
        self._last_mem = 0
        self._last_cpu = time.thread_time_ns()  # started on the test thread, whose CPU clock the handler reads
        # (stack key, line, when, RSS or None, the thread's CPU clock, whether it was at work at the tick)
        self._taken: list[tuple[tuple[int, ...], int, int, int | None, int, bool]] = []
        self._busy = False  # the handler is running (a signal then is skipped)
        self._rss = RssFile()
        _ticking = self
        main = threading.main_thread()  # the sampled thread, whose state each tick reads (_tick.at_work)
        watch = (main.ident or 0, main.native_id or 0)
        if _PENDING_CALLS or self.kind == "pending":
            _tick.start(int(self.interval_s * 1e9), _on_pending, 0, 0, *watch, nudge_ns(self.interval_s, self.kind))
            return
        assert TICK_SIGNAL is not None  # unavailable() said so
        if signal.getsignal(TICK_SIGNAL) is not _on_tick:
            signal.signal(TICK_SIGNAL, _on_tick)
        # Every time: signal.signal makes system calls interruptible again, and whoever set ours back called it
        signal.siginterrupt(TICK_SIGNAL, False)
        _tick.start(int(self.interval_s * 1e9), _on_pending, TICK_SIGNAL, watch[0], *watch)

    def _sample(self, frame: FrameType | None) -> None:
        # Between two bytecodes of the test thread, which may be inside the trace buffer's or the string table's own
        # code: the handler only walks the stack and appends to a list of its own; names and records come at stop().
        if frame is None or self._busy:
            return  # a signal that came while the handler ran (a slowed machine): its frame would be the handler's
        self._busy = True
        began = time.thread_time_ns()  # the handler's CPU, in the test thread: its whole cost (and its CPU clock)
        try:
            now, tick = host_clock_ns(), _tick.at_work()
            # The tick's state is this stack's where the thread ran little between the two (waiting for a core counts
            # nothing); one that ran on (3.11 and 3.12 run the handler at some loops' end, not in them) took the
            # stack after whatever ran between: not told. A nudged call run before the thread let the GIL go says the
            # thread's clock at the call: at work till then.
            at_work = tick >= 0 and began - tick <= _PROMPT_NS
            rss = self._rss_due(now, self._rss.rss)
            self._taken.append((_stack_key(frame), frame.f_lineno or 0, now, rss, began, at_work))
            self.samples += 1
        finally:
            self.cost_ns += time.thread_time_ns() - began
            self._busy = False

    def stop(self) -> None:
        global _ticking
        assert _tick is not None
        _tick.stop()  # nothing sent after it returns; a signal on its way finds _ticking None
        _ticking = None
        self.nudges = _tick.nudges()
        self._rss.close()
        for key, line, now, rss, cpu, at_work in self._taken:
            self._put(self.buffer.record, self._name_of(key), line, now, rss, cpu, at_work)
        self._taken = []
        self._done.set()


#: A signal sampler's handler that came within this much of the thread's CPU time after its tick took the stack the
#: tick found the thread in.
_PROMPT_NS = 500_000
