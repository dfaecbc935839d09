"""The CPU collector: explicit scopes and marks, and where the Python time went.

Two ways to see Python time:

* `sample` (default): the test thread's stack every interval, recorded as a folded stack
  weighted by the time since the previous sample. By default (`--inferscope-sampler=auto`)
  the test thread takes it itself, at calls a clock in C queues (`cpu_tick.SignalSampler`:
  `pending` before CPython 3.13, `signal` from it). With `thread`, or where that clock is not
  built or the test runs off the main thread, a daemon thread of this module reads it via
  `sys._current_frames()`, taking the GIL briefly once per interval (nothing from a test
  thread inside a C call that released it, a torch op). Either sampler's own cost is measured
  and reported as the overhead estimate.
* `trace` (opt-in): every Python call in the rounds as a CALL span (`tracer.Tracer`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from types import CodeType, FrameType

from ..buffer import TraceBuffer
from ..events import GC_FRAME, Kind, MemoryFlag, host_clock_ns, sample_flags
from . import pygc
from .memory import RssFile

#: Frames from these files are the harness, not the user's code.
_HARNESS_MARKERS = (
    "/_pytest/",
    "/pluggy/",
    "/pytest_inferscope/",
    "/site-packages/pytest/",
    "/xdist/",
    "<frozen runpy>",
    "/runpy.py",
)
MEMORY_SAMPLE_NS = 10_000_000

# Process-wide caches, so a test's first samples don't pay for labelling frames again:
# id(code) -> (is harness, the code object, kept alive so the id stays its own), and
# a stack of code ids -> its folded label.
_HARNESS: dict[int, tuple[bool, CodeType]] = {}
_FOLDED: dict[tuple[int, ...], str] = {}


def _short_path(filename: str) -> str:
    """A file name as a reader knows it: relative to site-packages or the working directory."""
    if "/site-packages/" in filename:
        return filename.rsplit("/site-packages/", 1)[1]
    cwd = os.getcwd() + "/"
    return filename.removeprefix(cwd)


#: The garbage collector's timing callback (pygc.GcClock), a frame of the plugin's: a sample taken while it runs (the
#: thread sampler gets the GIL there, right after a collection) is the collector's time, under the call that allocated.
_GC_CODE = pygc.GcClock.__call__.__code__
_HARNESS[id(_GC_CODE)] = (False, _GC_CODE)


def _label(code: CodeType) -> str:
    if code is _GC_CODE:
        return GC_FRAME
    module = code.co_filename.rsplit("/", 1)[-1].removesuffix(".py")
    return f"{module}:{code.co_qualname} ({_short_path(code.co_filename)}:{code.co_firstlineno})"


def _is_harness(code: CodeType) -> bool:
    return any(m in code.co_filename for m in _HARNESS_MARKERS)


def _stack_key(frame: FrameType | None) -> tuple[int, ...]:
    """The ids of the code objects from `frame` out to the innermost harness frame.

    Keyed by id(): a code object hashes its whole contents, which made a sample cost ~40 µs. `_HARNESS` keeps every
    code object seen alive, so an id is never reused for another.
    """
    ids: list[int] = []
    harness = _HARNESS
    while frame is not None:
        code = frame.f_code
        entry = harness.get(id(code))
        if entry is None:
            entry = harness[id(code)] = (_is_harness(code), code)
        if entry[0]:
            break
        ids.append(id(code))
        frame = frame.f_back
    return tuple(ids)


class Sampler:
    """A thread that samples one thread's Python stack at a fixed interval."""

    def __init__(
        self,
        buffer: TraceBuffer,
        interval_ms: float,
        target_ident: int,
        target_tid: int,
        thread: SamplerThread | None = None,
    ) -> None:
        self.buffer = buffer
        self.interval_s = interval_ms / 1000.0
        self.target_ident = target_ident
        self.target_tid = target_tid
        self.samples = 0
        self.cost_ns = 0  # time the sampler spent holding the GIL
        self.rss_peak = 0
        self._stop = threading.Event()
        self._done = threading.Event()  # set when _run has returned
        self._host = thread  # a parked thread to run on (None: a thread of its own)
        self._thread: threading.Thread | None = None
        self._stacks: dict[tuple[int, ...], int] = {}  # this collection's interned names

    def start(self) -> None:
        self._last = host_clock_ns()
        self._last_mem = 0
        self._cpu_clock = _thread_cpu_clock(self.target_ident)
        self._last_cpu = _read_cpu(self._cpu_clock)
        if self._host is not None:
            self._host.run(self)
        else:
            self._thread = threading.Thread(target=self._run_once, name="inferscope-sampler", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._host is not None and self._host.cancel(self):
            return  # the parked thread never took it up (a body shorter than a tick): nothing ran, nothing to wait for
        self._done.wait(timeout=5.0)
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        self._thread = None

    def _run_once(self) -> None:
        try:
            self._run()
        finally:
            self._done.set()

    def _stack_name(self, frame: FrameType | None) -> int:
        """Interned folded stack of the user's frames: those inside the innermost harness frame.

        Walking stops at the first harness frame (pytest, pluggy, this plugin) from the leaf,
        so the walk is as short as the user's stack and pytest's own frames never show.
        A sample taken in the harness itself (e.g. the end-of-round synchronize) is "<harness>".
        """
        return self._name_of(_stack_key(frame))

    def _name_of(self, key: tuple[int, ...]) -> int:
        """The interned folded name of a stack of code ids (`_stack_key`)."""
        name = self._stacks.get(key)
        if name is None:
            folded = _FOLDED.get(key)
            if folded is None:
                folded = _FOLDED[key] = ";".join(_label(_HARNESS[i][1]) for i in reversed(key)) or "<harness>"
            name = self._stacks[key] = self.buffer.strings.intern(folded)
        return name

    def _run(self) -> None:
        wait, stopped, frames = self._stop.wait, self._stop.is_set, sys._current_frames
        record = self.buffer.record
        # The cost is all of this thread's CPU time, wake-ups and GIL hand-overs included:
        # on a busy machine with no spare core every microsecond of it is taken from the test.
        cpu_start = time.thread_time_ns()
        rss = RssFile()
        try:
            self._loop(wait, stopped, frames, record, rss.rss)
        finally:
            rss.close()
            self.cost_ns = time.thread_time_ns() - cpu_start

    def _loop(self, wait: Callable[[float], bool], stopped: Callable[[], bool],
              frames: Callable[[], dict[int, FrameType]], record: Callable[..., bool],
              read_rss: Callable[[], int]) -> None:  # fmt: skip
        # The first sample an interval after the start, however late a parked thread took the sampler up.
        first = max(0.0, self.interval_s - (host_clock_ns() - self._last) / 1e9)
        due = host_clock_ns() + int(first * 1e9)
        if wait(first):
            return
        while True:
            # A tick that timed out as the stop came (the GIL held to the stop's wait) would sample the stop.
            if stopped():
                break
            frame = frames().get(self.target_ident)
            if frame is None:  # the test thread is gone
                break
            self._take(frame, record, read_rss, due)
            del frame
            due = host_clock_ns() + int(self.interval_s * 1e9)
            if wait(self.interval_s):
                break

    def _take(self, frame: FrameType, record: Callable[..., bool], read_rss: Callable[[], int], due: int) -> None:
        """One sample of `frame`'s stack, the test thread's CPU clock, and the RSS every MEMORY_SAMPLE_NS.

        Whether the thread was at work at the tick (`due`), so that its time off a CPU since the sample before is not
        put at a stack it was computing in (events.SAMPLE_AT_WORK): its CPU clock moved while this thread, holding the
        GIL, walked the stack (a C call that let the GIL go, running); or this thread got the GIL late, at least half a
        switch interval after its tick, and the test thread was on a CPU for at least half that lateness (it held the
        GIL, computing, until CPython made it hand it over; a thread holding the GIL waits on it after, so its clock
        cannot tell)."""
        before = _read_cpu(self._cpu_clock)
        name = self._stack_name(frame)
        line = frame.f_lineno or 0  # the line the leaf frame was on (the name has its function's first line)
        now, cpu = host_clock_ns(), _read_cpu(self._cpu_clock)
        late = now - due
        at_work = 0 <= before < cpu or (late >= _LATE_NS and cpu - self._last_cpu >= late // 2 and self._last_cpu >= 0)
        self._put(record, name, line, now, self._rss_due(now, read_rss), cpu, at_work)
        self.samples += 1

    def _rss_due(self, now: int, read_rss: Callable[[], int]) -> int | None:
        """The RSS when MEMORY_SAMPLE_NS has passed since the last reading, else None."""
        if now - self._last_mem < MEMORY_SAMPLE_NS:
            return None
        self._last_mem = now
        return read_rss()

    def _put(
        self, record: Callable[..., bool], name: int, line: int, now: int, rss: int | None, cpu: int, at_work: bool
    ) -> None:
        """Record a sample, weighted by the time since the last, with the thread's CPU time over it (`cpu`: its CPU
        clock now, -1 where it cannot be read), whether it was at work at the sample's instant, and the RSS read with
        it (if any)."""
        # At most the span: the two clocks are read one after the other, and a thread descheduled between the two
        # reads of the sample before read more CPU time than wall time over this one (signal sampler, loaded 2-core VM)
        known = cpu >= 0 and self._last_cpu >= 0
        on_cpu = sample_flags(min(cpu - self._last_cpu, now - self._last), at_work) if known else 0
        record(Kind.SAMPLE, name, self._last, now, value=line, tid=self.target_tid, flags=on_cpu)
        self._last, self._last_cpu = now, cpu
        if rss is not None:
            self.rss_peak = max(self.rss_peak, rss)
            record(Kind.MEMORY, 0, now, now, value=rss, flags=MemoryFlag.RSS, tid=self.target_tid)


#: A sampler thread that got the GIL this late after its tick found it held (CPython's waiter asks for it after a
#: switch interval, 5 ms by default): half the interval, read when this module is loaded.
_LATE_NS = int(sys.getswitchinterval() * 1e9 / 2)


def _thread_cpu_clock(ident: int) -> int | None:
    """The CPU-time clock of the thread `ident` (threading's), None where the platform has none."""
    try:
        return time.pthread_getcpuclockid(ident)
    except (AttributeError, OSError):
        return None


def _read_cpu(clock: int | None) -> int:
    """A thread's CPU time in ns from its clock (`_thread_cpu_clock`): a system call that keeps the GIL, ~1 µs on the
    2-core VM; -1 where there is no clock or the thread is gone."""
    if clock is None:
        return -1
    try:
        return time.clock_gettime_ns(clock)
    except OSError:
        return -1


class SamplerThread:
    """A thread that runs one `Sampler` after another, parked between them (a pytest session keeps one).

    Starting a thread per test cost 0.2-0.3 ms on the 2-core dev VM (and the new thread's start-up
    took the GIL right before the first round). Waking the parked thread for each sampler, and waiting for it
    to finish, still cost ~1.2 ms a collection there (a trivial collection: 1.9 ms with the sampler, 0.65 ms
    without). So while collections follow one another (within `TICKING_S` of the last), the thread ticks once
    a sample interval instead of sleeping, and takes up a new sampler at its next tick without being woken; a
    sampler stopped before that tick (a body shorter than an interval, which would get no sample anyway) is
    taken back without ever having run. Otherwise the thread waits on an event without a timeout: no wake-ups
    (`run` wakes it). `quiet()`: stop ticking (a collection that does not sample).

    `ticking_s=0`: never tick, so nothing of the plugin runs between collections: `measure()` and `profile()` (api.py)
    keep such a thread for the process ("inferscope-sampler-measure", a daemon), since their caller's own code runs
    between two calls. Woken and waited for, it cost a collection 0.15 ms on the 2-core VM against 0.42 ms for a
    thread of its own (2026-11-28, a sampler started and stopped around 16 ms of Python, medians of 50).
    """

    #: How long after the last collection the thread keeps ticking (at most ten ticks of a 10 ms interval).
    TICKING_S = 0.1

    def __init__(self, ticking_s: float | None = None, name: str = "inferscope-sampler") -> None:
        self._ticking_s = self.TICKING_S if ticking_s is None else ticking_s
        self._name = name
        self._lock = threading.Lock()
        self._ready = threading.Event()
        self._job: Sampler | None = None
        self._closing = False
        self._thread: threading.Thread | None = None
        self._tick_s = 0.0  # the interval of the last sampler: the tick while ticking
        self._ticking_until = 0.0  # time.monotonic() after which the thread parks without a timeout
        self._parked = True  # waiting without a timeout: a new sampler must wake it
        self._waiting_s = 0.0  # the tick the thread waits with now (a sampler of a shorter interval wakes it)

    def run(self, sampler: Sampler) -> None:
        """Run `sampler` until its `stop()`: one at a time. A ticking thread takes it up at its next tick."""
        with self._lock:
            if self._thread is None or not self._thread.is_alive():
                self._closing = False
                self._parked = True
                self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
                self._thread.start()
            self._job = sampler
            self._tick_s = sampler.interval_s
            self._ticking_until = time.monotonic() + self._ticking_s
            if self._parked or sampler.interval_s < self._waiting_s:
                self._ready.set()

    def cancel(self, sampler: Sampler) -> bool:
        """Take `sampler` back if the thread has not taken it up yet (True: it never ran)."""
        with self._lock:
            if self._job is not sampler:
                return False
            self._job = None
            self._ticking_until = time.monotonic() + self._ticking_s
            return True

    def quiet(self) -> None:
        """Stop ticking: the thread parks at its next tick (a collection that samples nothing is not disturbed)."""
        with self._lock:
            self._ticking_until = 0.0

    def close(self) -> None:
        """End the thread (after the last collection stopped)."""
        with self._lock:
            thread, self._thread = self._thread, None
            self._closing = True
            self._ready.set()
        if thread is not None:
            thread.join(timeout=5.0)

    def _loop(self) -> None:
        while True:
            with self._lock:
                pending = self._job is not None or self._closing  # taken up now, without waiting
                ticking = not pending and time.monotonic() < self._ticking_until
                self._parked = not (pending or ticking)
                timeout = self._tick_s if ticking else None
                self._waiting_s = self._tick_s if ticking else 0.0
            if not pending:
                self._ready.wait(timeout)
            with self._lock:
                self._ready.clear()
                job, self._job = self._job, None
                closing = self._closing
            if job is not None:
                try:
                    job._run()
                except Exception:  # shown as a thread of its own would show it; the next sampler still runs
                    threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), threading.current_thread())))
                finally:
                    job._done.set()
                    with self._lock:
                        self._ticking_until = time.monotonic() + self._ticking_s
            if closing:
                return
