"""The process's other threads' CPU time over a collection, Python threads' apart from native ones.

The per-round counters give the process's CPU and the test thread's; what the other threads did is their difference,
which does not say whose threads they were. A Python thread running beside the body takes the GIL in turns with it; a
native thread (torch's intra-op pool, a native library's workers) runs the ops the body handed it, on the other cores.
torch's thread count read after the rounds cannot tell: a body that sets its own and gives the caller's back reads as
the caller's (`rules._threads_read`). Linux keeps each thread's time on a CPU in ns in
`/proc/self/task/<tid>/schedstat` (first field); threading's `native_id`s say which of them are Python threads. Read at
the collection's start and stop, never inside a round: ~8 µs for a handful of threads on the 2-core dev VM
(2026-11-30). Not seen: a thread that ended before the stop (its time is gone with it), and where procfs has no
schedstat (not Linux), nothing is recorded.
"""

from __future__ import annotations

import os
import threading

_TASKS = "/proc/self/task"


def threads_cpu_ns() -> dict[int, int]:
    """Each thread of the process: its time on a CPU so far (ns); empty where procfs does not say."""
    out: dict[int, int] = {}
    try:
        tids = os.listdir(_TASKS)
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"{_TASKS}/{tid}/schedstat", "rb") as f:
                out[int(tid)] = int(f.read().split()[0])
        except (OSError, ValueError, IndexError):  # the thread ended between the listing and the read
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
