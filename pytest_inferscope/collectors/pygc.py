"""Python's cyclic garbage collector in the test thread: its time and collections, for the per-round counters.

The collector runs inside whichever call allocates the object that crosses a generation's threshold, so the stack
samples charge its time to that call: 200,000 small objects with reference cycles a round, on the 2-core VM
(2026-11-29), read as 392 ms a round "in" their `__init__`, when 415 ms of the 448 were the collector's (gc.disable():
65 ms). A `gc.callbacks` entry, installed for the collection, times each collection the test thread runs; the round
boundaries read the totals (`Counters`), as they read the thread's CPU clock. Its two calls cost 0.7 µs a collection
on the 2-core VM: 570 collections a round there, 0.4 ms of a 450 ms round. Since session 40 it also sums the time of
the collections that freed objects and of the full ones (what breaking cycles and gc.freeze() can save at most): the
callback's cost per collection did not grow (old 548/758 ns, new 536/736 ns for a start and a stop, two runs of 30
alternated blocks, 2026-11-30).
"""

from __future__ import annotations

import gc
import threading
import time
from typing import Any


class GcClock:
    """The test thread's time in the garbage collector and its collections (all, and full ones) while installed."""

    __slots__ = ("_began", "_ident", "collected", "collections", "freeing_ns", "full", "full_ns", "ns")

    def __init__(self) -> None:
        self._ident = threading.get_ident()
        self._began = 0
        self.ns = 0
        self.collections = 0
        self.full = 0  # collections of the oldest generation (2): the ones that walk every tracked object
        self.collected = 0  # objects the collections freed: only reference cycles need the collector
        # The time of the collections that freed objects, and of the full ones: what breaking the cycles and
        # gc.freeze() can take away at most (python_gc's suggestions; the others only walked live objects).
        self.freeing_ns = 0
        self.full_ns = 0

    def __call__(self, phase: str, info: dict[str, Any]) -> None:
        if threading.get_ident() != self._ident:
            return  # another thread's collection: the test thread may run beside it (a torch op without the GIL)
        if phase == "start":
            self._began = time.perf_counter_ns()
        elif self._began:
            ns = time.perf_counter_ns() - self._began
            self._began = 0
            self.ns += ns
            self.collections += 1
            if info.get("generation") == 2:
                self.full += 1
                self.full_ns += ns
            collected = int(info.get("collected", 0))
            if collected:
                self.collected += collected
                self.freeing_ns += ns


_clocks: list[GcClock] = []  # the running collections' (a profile nested in a test's body runs on top of it)


def start() -> GcClock:
    """Time the calling thread's collections from now (a collection's start, on the test thread)."""
    clock = GcClock()
    gc.callbacks.append(clock)
    _clocks.append(clock)
    return clock


def stop(clock: GcClock) -> None:
    """Stop the clock `start` gave; the one it was started over is read again."""
    if clock in gc.callbacks:
        gc.callbacks.remove(clock)
    if clock in _clocks:
        _clocks.remove(clock)


def totals() -> tuple[int, int, int, int, int, int]:
    """(ns, collections, full collections, objects collected, ns of the collections that freed objects, ns of the
    full ones) of the latest running clock; zeros without one."""
    if not _clocks:
        return 0, 0, 0, 0, 0, 0
    c = _clocks[-1]
    return c.ns, c.collections, c.full, c.collected, c.freeing_ns, c.full_ns
