"""Long sessions: what the plugin keeps of each test does not outgrow what it says it keeps, and a session leaves the
process as it found it (docs/performance.md, "Long sessions (session 38)")."""

from __future__ import annotations

import atexit
import contextlib
import gc
import json
import logging
import os
import signal
import sys
import threading
import tracemalloc
import warnings

import numpy as np
import pytest

from pytest_inferscope.buffer import _RING_START
from pytest_inferscope.events import EVENT_DTYPE

BUFFER_FILE = os.path.join("pytest_inferscope", "buffer.py")
NUMPY_DIR = os.path.dirname(np.__file__)

#: In the session's process: from the START-th test to the TOTAL-th, what stays allocated by the plugin's own code
#: (tracemalloc, by file), and the size of what the plugin says it keeps of a test (its kept result, less the session's
#: one environment dict, and its JUnit properties), measured on the last test.
MEMORY_CONFTEST = """
import gc, json, os, sys, tracemalloc

START, TOTAL = 50, 250
PKG = os.path.dirname(__import__("pytest_inferscope").__file__) + os.sep
seen = [0]
configs = []


def deep_size(obj, memo):
    if id(obj) in memo or isinstance(obj, type) or obj is None:
        return 0
    memo.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        size += sum(deep_size(k, memo) + deep_size(v, memo) for k, v in obj.items())
    elif isinstance(obj, (list, tuple, set, frozenset)):
        size += sum(deep_size(x, memo) for x in obj)
    elif hasattr(obj, "__dict__"):
        size += deep_size(vars(obj), memo)
    return size


def pytest_configure(config):
    configs.append(config)


def pytest_runtest_teardown(item):
    item.config.stash.setdefault("props", []).append(item.user_properties)


def pytest_runtest_logfinish(nodeid, location):
    seen[0] += 1
    if seen[0] == START:
        gc.collect()
        tracemalloc.start()
    elif seen[0] == TOTAL:
        gc.collect()
        snap = tracemalloc.take_snapshot()
        tracemalloc.stop()
        by_file = {}
        for stat in snap.statistics("filename"):
            name = stat.traceback[0].filename
            if name.startswith(PKG):
                by_file[name[len(PKG):]] = stat.size
        from pytest_inferscope.plugin import get_session

        last = get_session(configs[0]).results[-1]
        kept = deep_size(last, {id(last.environment)}) + deep_size(configs[0].stash["props"][-1], set())
        with open("memory.json", "w") as f:
            json.dump({"tests": TOTAL - START, "by_file": by_file, "kept": kept}, f)
"""


def test_a_test_costs_the_session_no_more_memory_than_what_it_keeps_of_it(pytester: pytest.Pytester) -> None:
    """With pytest-xdist installed and no `-n`, the xdist controller's hooks ran in every serial session and copied
    each test's JUnit properties into a report of their own: ~1 kB a test of the ~5 kB the plugin's code kept (2,500
    trivial tests, 2026-11-30). What stays allocated by the plugin's code over 200 tests is no more than what it says it
    keeps of them: each test's kept result and JUnit properties."""
    pytest.importorskip("xdist")
    pytester.makeconftest(MEMORY_CONFTEST)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("i", range(250))
        def test_trivial(i):
            pass
        """
    )
    result = pytester.runpytest_subprocess("--inferscope-all", "-p", "xdist", "-p", "no:randomly")
    result.assert_outcomes(passed=250)
    memory = json.loads((pytester.path / "memory.json").read_text())
    n, by_file = memory["tests"], memory["by_file"]
    assert {f: b for f, b in by_file.items() if f.endswith("xdist.py")} == {}  # no xdist: its hooks keep nothing
    per_test = sum(by_file.values()) / n
    assert per_test <= memory["kept"], (per_test, memory["kept"], sorted(by_file.items(), key=lambda kv: -kv[1]))


def process_state() -> dict[str, object]:
    """What a profiler could leave changed in the process: threads, file descriptors, GC callbacks, signal handlers and
    timers, the switch interval, profile and trace functions, atexit handlers, loggers, warnings filters."""
    loggers = {"": (list(logging.root.handlers), logging.root.level)}
    for name, lg in list(logging.root.manager.loggerDict.items()):
        if isinstance(lg, logging.Logger):
            loggers[name] = (list(lg.handlers), lg.level, lg.propagate, lg.disabled)
    handlers = {}
    for sig in range(1, signal.NSIG):
        with contextlib.suppress(ValueError, OSError):
            handlers[sig] = signal.getsignal(sig)
    return {
        "threads": sorted(t.name for t in threading.enumerate()),
        "tasks": len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else None,
        "fds": sorted(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None,
        "gc.callbacks": list(gc.callbacks),
        "gc.enabled": gc.isenabled(),
        "signals": handlers,
        "timers": [signal.getitimer(t) for t in (signal.ITIMER_REAL, signal.ITIMER_PROF, signal.ITIMER_VIRTUAL)],
        "switchinterval": sys.getswitchinterval(),
        "profile": (sys.getprofile(), sys.gettrace()),
        "atexit": atexit._ncallbacks(),
        "loggers": loggers,
        "warnings": list(warnings.filters),
    }


def changed(before: dict[str, object], after: dict[str, object]) -> dict[str, tuple[object, object]]:
    return {k: (before[k], after[k]) for k in before if before[k] != after[k]}


def test_a_session_leaves_the_process_as_it_found_it(pytester: pytest.Pytester) -> None:
    """pytest run in a process that goes on (`pytest.main` in a notebook or a service) found the plugin's logger set to
    the session's level after it: the session now gives it back its level. Its first session leaves what is the
    process's for good (the stack sampler's clock thread and signal handler, parked: docs/performance.md, "Long
    sessions"); a later one leaves nothing changed."""
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("i", range(20))
        def test_trivial(i):
            pass
        """
    )
    from pytest_inferscope.postprocess import preload

    preload(reports=False)  # here: pytester takes out the modules a run imported, whose imports would run again
    # pytest-rerunfailures (16.7, a test dependency) leaves a thread and a socket of its own each session, with or
    # without this plugin: this test looks at what this plugin leaves.
    others = ("-p", "no:randomly", "-p", "no:rerunfailures")
    pytester.runpytest_inprocess("--inferscope-all", *others).assert_outcomes(passed=20)
    logging.getLogger("pytest_inferscope").setLevel(logging.NOTSET)  # as in a fresh process
    before = process_state()
    result = pytester.runpytest_inprocess("--inferscope-all", *others, "--inferscope-log-level=info")
    result.assert_outcomes(passed=20)
    assert changed(before, process_state()) == {}


def test_measure_leaves_the_process_as_it_found_it_and_keeps_nothing_of_a_call() -> None:
    """5,000 calls of `measure(fn, rounds=3)` in one process kept nothing (RSS 51.26 -> 51.35 MB, 2026-11-30): what
    is allocated over 200 calls and stays is less than one call's result, which anything kept of each call would be."""
    import pytest_inferscope

    def body() -> int:
        return sum(i * i for i in range(200))

    for _ in range(3):  # the first calls load what stays for the process (the pipeline, the parked sampler thread)
        pytest_inferscope.measure(body, rounds=3)
    before = process_state()
    tracemalloc.start()
    try:
        for _ in range(20):  # what stays of the latest call (its collection's buffer, until the next) is in both
            pytest_inferscope.measure(body, rounds=3)
        gc.collect()
        first = tracemalloc.take_snapshot()
        for _ in range(200):
            last = pytest_inferscope.measure(body, rounds=3)
        size = len(last.to_wire())
        del last
        gc.collect()
        diffs = tracemalloc.take_snapshot().compare_to(first, "filename")
    finally:
        tracemalloc.stop()
    # The latest call's trace buffer stays until the next replaces it: a ring (768 kB) for each thread that wrote to it,
    # the test thread's and, where a sample was taken (a loaded machine stretches the calls), the sampler's. So the
    # buffer's rings may be one more or fewer at either snapshot; kept for each call, they would be ~200 rings more.
    # numpy's own code keeps small allocations it freed, for reuse, filled as new sizes come (~1-5 kB per 150 calls
    # in numpy's files, fewer each window, 1,200 calls on the 2-core dev VM, 2026-11-30): numpy's, not the plugin's.
    ring = _RING_START * EVENT_DTYPE.itemsize
    in_buffer = sum(d.size_diff for d in diffs if d.traceback[0].filename.endswith(BUFFER_FILE))
    in_numpy = {d.traceback[0].filename for d in diffs if d.traceback[0].filename.startswith(NUMPY_DIR)}
    grown = sum(d.size_diff for d in diffs if not d.traceback[0].filename.endswith(BUFFER_FILE))
    grown -= sum(d.size_diff for d in diffs if d.traceback[0].filename in in_numpy)
    assert grown < size, (grown, size)
    assert in_buffer <= 2 * ring, (in_buffer, ring)
    assert changed(before, process_state()) == {}
