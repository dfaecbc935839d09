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
Not told apart: a Python thread that ended before the stop counts as native (its own clock is gone with it). Where there
is no such clock (not Linux), nothing is recorded.
"""

from __future__ import annotations

import sys
import threading
import time

#: Each Python thread's (name, CPU ns so far), by native id; with the other threads' CPU so far (the process's less
#: the test thread's).
Reading = tuple[int, dict[int, tuple[str, int]]]


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
        except OSError:  # ended since the listing
            continue
    try:
        others = clock(time.CLOCK_PROCESS_CPUTIME_ID) - clock(_cpu_clock(test_tid))
    except OSError:
        return None
    return others, python


def split(before: Reading | None, after: Reading | None) -> dict[str, int] | None:
    """The other threads' CPU between two readings: Python threads' (the plugin's own, `inferscope-*`, left out) and
    native ones' (the rest), ns; None where a reading is missing."""
    if before is None or after is None:
        return None
    python_ns = own_ns = threads = 0
    for tid, (name, ns) in after[1].items():
        spent = ns - before[1].get(tid, (name, 0))[1]  # a thread started since counts from its start
        if spent <= 0:
            continue
        if name.startswith("inferscope"):
            own_ns += spent  # the sampler, the report writers
        else:
            python_ns += spent
            threads += 1
    native_ns = max(0, after[0] - before[0] - python_ns - own_ns)
    return {"native_ns": native_ns, "python_ns": python_ns, "python_threads": threads}


class OtherThreads:
    """Made at the collection's start; `stop()` at its stop: `split` between the two."""

    def __init__(self, test_tid: int) -> None:
        self.test_tid = test_tid
        self._before = read(test_tid)

    def stop(self) -> dict[str, int] | None:
        return split(self._before, read(self.test_tid))
