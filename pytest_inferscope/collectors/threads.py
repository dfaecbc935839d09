"""The process's other threads' CPU time over a collection, Python threads' apart from native ones.

The per-round counters give the process's CPU and the test thread's; what the other threads did is their difference,
which does not say whose threads they were. A Python thread running beside the body takes the GIL in turns with it; a
native thread (torch's intra-op pool, a native library's workers) runs the ops the body handed it, on the other cores.
torch's thread count read after the rounds cannot tell: a body that sets its own and gives the caller's back reads as
the caller's (`rules._threads_read`).

Linux gives each thread a CPU clock (ns on a CPU) that any thread of the process can read with one `clock_gettime`, and
the process one that counts every thread's, ended ones too. At the collection's start and stop (never inside a round)
this reads the process's clock, the test thread's and each Python thread's (`threading.enumerate`: the plugin's own,
`inferscope-*`, apart); the native threads' time is what is left. Reading every thread of the process instead
(`/proc/self/task` and each one's clock) cost 115.5 µs a reading against 32.7 for this with 18 threads right after a
ResNet-50 call on an H200 host, and 60.8 µs against 19.9 with 32 threads on the 2-core dev VM (alternated, 2026-11-30).

A Python thread that ends before the stop is not listed there, and its clock is gone with it: a pool made and shut down
inside the body, a thread joined within the call, read as native until 2026-11-30 ("100.0% of their time native
threads'" for a body whose work all ran in a `ThreadPoolExecutor` of its own). So from the start to the stop
`threading.setprofile` hands each Python thread started meanwhile a one-shot hook: on its first event it takes itself
off (the previous hook, if any, put back) and leaves the thread a `threading.local` value whose finalizer, run by the
thread as it ends, notes its CPU clock (`Ends`). A thread started and ended within the collection counts as a Python
thread's; one alive at the start that ended before the stop (or one whose end was not noted: the hook replaced by the
body's own, a finalizer run elsewhere) leaves its time after the start not told from the native threads': `native_ns`
is None then, the rest is `untold_ns`, and `cpu.other_threads_native` None. Where there is no such clock (not Linux),
nothing is recorded.
"""

from __future__ import annotations

import sys
import threading
import time
import weakref
from collections.abc import Callable
from types import FrameType
from typing import Any

#: Each Python thread's (name, CPU ns so far), by native id; with the other threads' CPU so far (the process's less
#: the test thread's).
Reading = tuple[int, dict[int, tuple[str, int]]]

_Hook = Callable[..., object]  # sys.setprofile's: (frame, event, arg)


def _cpu_clock(tid: int) -> int:
    """The clock id of thread `tid`'s CPU time (Linux's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), as glibc's
    pthread_getcpuclockid makes it): readable from any thread of the same process."""
    return ((~tid) << 3) | 6


def read(test_tid: int) -> Reading | None:
    """The other threads' CPU so far and each Python thread's (not the test thread's); None where Linux's clocks are
    not there."""
    clock = getattr(time, "clock_gettime_ns", None)
    if clock is None or not sys.platform.startswith("linux"):
        return None
    python: dict[int, tuple[str, int]] = {}
    for t in threading.enumerate():
        if t.native_id is None or t.native_id == test_tid:
            continue
        try:
            python[t.native_id] = (t.name, clock(_cpu_clock(t.native_id)))
        except OSError:  # ended since the listing (its end noted where it started since the start: `Ends`)
            continue
    try:
        others = clock(time.CLOCK_PROCESS_CPUTIME_ID) - clock(_cpu_clock(test_tid))
    except OSError:
        return None
    return others, python


class _End:
    """Left in a Python thread's `threading.local`: dropped by the thread itself as it ends, noting its CPU clock.

    It holds its `Ends` weakly: a thread started during a collection may outlive it by far (a pool kept for the
    process, the plugin's own parked sampler thread), and it kept that collection's `Ends` alive until it ended (one
    in a run of 200 `measure()` calls: tests/plugin/test_long_sessions.py)."""

    def __init__(self, ends: Ends, tid: int) -> None:
        self.ends, self.tid = weakref.ref(ends), tid

    def __del__(self) -> None:
        ends = self.ends()
        if ends is not None and threading.get_native_id() == self.tid:  # noted by the thread itself only
            ends.ended[self.tid] = time.thread_time_ns()


#: Each hooked thread's `_End`: one local for the process, not one a collection (each a per-thread entry in every
#: thread that touched it).
_LOCAL = threading.local()


class Ends:
    """From the start to `close()`: each Python thread started meanwhile (name, by native id) and, for those that
    ended, their CPU ns at the end."""

    def __init__(self) -> None:
        self.started: dict[int, str] = {}
        self.ended: dict[int, int] = {}
        self.complete = True  # False: the hook was replaced before the stop, so a start may have gone unseen
        self._previous: _Hook | None = threading.getprofile()
        threading.setprofile(self._hook)

    def _hook(self, frame: FrameType, event: str, arg: Any) -> object:
        sys.setprofile(self._previous)  # one event a thread: its start
        tid = threading.get_native_id()
        self.started[tid] = threading.current_thread().name
        _LOCAL.end = _End(self, tid)
        return self._previous(frame, event, arg) if self._previous is not None else None

    def close(self) -> None:
        if threading.getprofile() == self._hook:
            threading.setprofile(self._previous)
        else:
            self.complete = False  # the body's own hook (left in place): threads started since were not seen


def split(before: Reading | None, after: Reading | None, ends: Ends | None = None) -> dict[str, int | None] | None:
    """The other threads' CPU between two readings: Python threads' (the plugin's own, `inferscope-*`, left out) and
    native ones' (the rest), ns; None where a reading is missing. With `ends`, a Python thread that ended in between
    counts where its end was noted; otherwise (or with a start missed) the rest is `untold_ns`, `native_ns` None."""
    if before is None or after is None:
        return None
    started, ended = (ends.started, ends.ended) if ends is not None else ({}, {})
    gone = {tid: (name, 0) for tid, name in started.items() if tid not in after[1]}  # ended, or unread at the stop
    gone.update((tid, seen) for tid, seen in before[1].items() if tid not in after[1])
    python_ns = own_ns = threads = untold = 0
    for tid, (name, ns) in [*after[1].items(), *gone.items()]:
        if tid in gone:
            if tid not in ended or tid in before[1]:  # its end not noted, or its time since the start not known
                untold += 1
                continue
            ns = ended[tid]
        spent = ns - before[1].get(tid, (name, 0))[1]  # a thread started since counts from its start
        if spent <= 0:
            continue
        if name.startswith("inferscope"):
            own_ns += spent  # the sampler, the report writers
        else:
            python_ns += spent
            threads += 1
    if ends is not None and not ends.complete:
        untold += 1
    rest = max(0, after[0] - before[0] - python_ns - own_ns)
    return {
        "native_ns": None if untold else rest,
        "untold_ns": rest if untold else 0,
        "untold_threads": untold,
        "python_ns": python_ns,
        "python_threads": threads,
    }


class OtherThreads:
    """Made at the collection's start; `stop()` at its stop: `split` between the two."""

    def __init__(self, test_tid: int) -> None:
        self.test_tid = test_tid
        self._before = read(test_tid)
        self._ends = Ends() if self._before is not None else None

    def stop(self) -> dict[str, int | None] | None:
        after = read(self.test_tid)
        if self._ends is not None:
            self._ends.close()
        return split(self._before, after, self._ends)
