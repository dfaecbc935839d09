"""The process's other threads' CPU time over a collection, Python threads' apart from native ones.

The per-round counters give the process's CPU and the test thread's; what the other threads did is their difference,
which does not say whose threads they were. A Python thread running beside the body takes the GIL in turns with it; a
native thread (torch's intra-op pool, a native library's workers) runs the ops the body handed it, on the other cores.
torch's thread count read after the rounds cannot tell: a body that sets its own and gives the caller's back reads as
the caller's (`rules._threads_read`). Linux gives each thread of the process a CPU clock (ns on a CPU, what
`/proc/self/task/<tid>/schedstat` says first) that any thread of it can read with one `clock_gettime`; the threads are
`/proc/self/task`'s entries, and threading's `native_id`s say which of them are Python threads. Read at the collection's
start and stop, never inside a round. Reading each thread's schedstat file instead cost 160–1,000 µs a reading with 32
threads on the 2-core dev VM (2026-11-30; a GPU test's process has torch's pool, CUDA's threads: dozens), the clocks
27 µs. Not seen: a thread that ended before the stop (its time is gone with it); where there is no
`/proc/self/task` or no `time.clock_gettime_ns` (not Linux), nothing is recorded.
"""

from __future__ import annotations

import os
import threading
import time

_TASKS = "/proc/self/task"


def _cpu_clock(tid: int) -> int:
    """The clock id of thread `tid`'s CPU time (Linux's MAKE_THREAD_CPUCLOCK(tid, CPUCLOCK_SCHED), as glibc's
    pthread_getcpuclockid makes it): readable from any thread of the same process."""
    return ((~tid) << 3) | 6


def threads_cpu_ns() -> dict[int, int]:
    """Each thread of the process: its time on a CPU so far (ns); empty where procfs does not say."""
    out: dict[int, int] = {}
    clock = getattr(time, "clock_gettime_ns", None)
    try:
        tids = os.listdir(_TASKS) if clock is not None else []
    except OSError:
        return out
    for tid in map(int, tids):
        try:
            out[tid] = clock(_cpu_clock(tid))  # type: ignore[misc]
        except OSError:  # the thread ended between the listing and the read
            continue
    return out


def split_threads(
    before: dict[int, int], after: dict[int, int], python: dict[int, str], test_tid: int
) -> dict[str, int] | None:
    """The other threads' CPU between two readings, as Python threads' (`python`: native id -> name, the plugin's own
    `inferscope-*` threads left out) and native ones'; None where a reading is empty."""
    if not before or not after:
        return None
    out = {"native_ns": 0, "python_ns": 0, "native_threads": 0, "python_threads": 0}
    for tid, ns in after.items():
        spent = ns - before.get(tid, 0)  # a thread started since counts from its start
        if tid == test_tid or spent <= 0:
            continue
        name = python.get(tid)
        if name is not None and name.startswith("inferscope"):
            continue  # the plugin's own (sampler, report writers)
        kind = "native" if name is None else "python"
        out[f"{kind}_ns"] += spent
        out[f"{kind}_threads"] += 1
    return out


class OtherThreads:
    """Made at the collection's start; `stop()` at its stop: the split of `split_threads` between the two."""

    def __init__(self, test_tid: int) -> None:
        self.test_tid = test_tid
        self._before = threads_cpu_ns()

    def stop(self) -> dict[str, int] | None:
        python = {t.native_id: t.name for t in threading.enumerate() if t.native_id is not None}
        return split_threads(self._before, threads_cpu_ns(), python, self.test_tid)
