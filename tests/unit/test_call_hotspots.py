"""Hotspots without CPU samples, from calls recorded whole: `--inferscope-cpu=trace` and imported Kineto traces."""

from __future__ import annotations

import time

import numpy as np

from pytest_inferscope import kineto
from pytest_inferscope.analyzer import Context
from pytest_inferscope.analyzer.calls import innermost_ns
from pytest_inferscope.collectors import Collection, CollectionOptions
from pytest_inferscope.merger import merge


def spin(ms: float) -> None:
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        pass


def outer() -> None:
    spin(4)
    inner()


def inner() -> None:
    spin(2)


def test_trace_mode_has_hotspots_from_its_calls() -> None:
    coll = Collection(CollectionOptions(cpu="trace"))
    coll.start()
    try:
        coll.run_rounds(outer, 9, 1)
    finally:
        raw = coll.stop()
    spots = {h.function.split(" (")[0]: h for h in Context(merge(raw)).cpu.hotspots}
    # spin runs 6 ms a round, in two calls; outer's and inner's own time is a few Python lines. Over 9 rounds, as one
    # preemption between those lines on a loaded machine read 0.53 ms a round over 3 (the 2-core VM, 2026-11-30).
    assert spots["test_call_hotspots:spin"].self_ms >= 5.9
    assert spots["test_call_hotspots:outer"].total_ms >= 6.0 > 0.5 > spots["test_call_hotspots:outer"].self_ms
    assert spots["test_call_hotspots:inner"].total_ms >= 2.0 > 0.5 > spots["test_call_hotspots:inner"].self_ms
    assert spots["test_call_hotspots:spin"].share <= 1.0


def test_crossing_spans_share_the_time_as_key_averages_does() -> None:
    # step [0, 100) calls enter [10, 20); the annotation opened inside it runs [15, 60), and exit [55, 70) closes it.
    starts, ends = np.array([0, 10, 15, 55]), np.array([100, 20, 60, 70])
    assert innermost_ns(starts, ends, np.array([0]), np.array([100])).tolist() == [40, 5, 40, 15]
    # Only the time inside the windows counts: here [0, 50) and [65, 80).
    assert innermost_ns(starts, ends, np.array([0, 65]), np.array([50, 80])).tolist() == [20, 5, 35, 5]


def test_a_recursive_function_counts_its_time_once_in_total() -> None:
    ev = [{"ph": "X", "cat": "python_function", "name": n, "ts": ts, "dur": d, "tid": 1, "pid": 1}
          for n, ts, d in [("f", 0, 100), ("f", 10, 50), ("g", 20, 10)]]  # fmt: skip
    spots = {h.function: h for h in Context(merge(kineto.import_events({"traceEvents": ev}, "t").raw)).cpu.hotspots}
    assert (spots["f"].self_ms, spots["f"].total_ms) == (0.09, 0.1)
    assert (spots["g"].self_ms, spots["g"].total_ms) == (0.01, 0.01)
