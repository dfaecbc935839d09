"""The process's other threads' CPU over a collection, Python threads' apart from native ones (collectors/threads)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from pytest_inferscope.collectors.threads import OtherThreads, split_threads, threads_cpu_ns


def test_the_split_leaves_out_the_test_thread_and_the_plugins_own_and_tells_python_from_native() -> None:
    before = {1: 100, 2: 100, 3: 100, 4: 100}
    after = {1: 900, 2: 400, 3: 150, 4: 100, 5: 70}  # 5 started since; 4 did nothing
    python = {1: "MainThread", 2: "spinner", 3: "inferscope-sampler"}
    assert split_threads(before, after, python, test_tid=1) == {
        "native_ns": 70,
        "python_ns": 300,
        "native_threads": 1,
        "python_threads": 1,
    }
    assert split_threads({}, after, python, test_tid=1) is None  # no procfs: nothing said


@pytest.mark.skipif(not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/schedstat"), reason="Linux")
def test_a_python_threads_time_reads_as_a_python_threads() -> None:
    assert threads_cpu_ns()[threading.get_native_id()] > 0
    other = OtherThreads(threading.get_native_id())
    stop = time.perf_counter() + 0.05
    spin = threading.Thread(target=lambda: [None for _ in iter(lambda: time.perf_counter() < stop, False)])
    spin.start()
    spin.join()
    got = other.stop()
    # The thread ended before the stop: its time went with it. Alive at the stop, it counts.
    assert got is not None and got["python_ns"] == 0
    other = OtherThreads(threading.get_native_id())
    done = threading.Event()
    spin = threading.Thread(target=lambda: [None for _ in iter(lambda: not done.is_set(), False)], name="spinner")
    spin.start()
    time.sleep(0.05)
    got = other.stop()
    done.set()
    spin.join()
    assert got is not None and got["python_ns"] > 0 and got["python_threads"] == 1, got


@pytest.mark.skipif(not os.path.exists(f"/proc/self/task/{threading.get_native_id()}/schedstat"), reason="Linux")
def test_each_threads_clock_is_its_time_on_a_cpu_as_procfs_says() -> None:
    """The readings are the threads' CPU clocks (one clock_gettime each: reading every thread's schedstat file cost
    160-1,000 µs with 32 threads): a parked thread's clock is its schedstat's first figure, to the ns."""
    parked = threading.Event()
    idle = threading.Thread(target=parked.wait)
    idle.start()
    try:
        path = f"/proc/self/task/{idle.native_id}/schedstat"
        with open(path, "rb") as f:
            on_cpu = int(f.read().split()[0])
        assert threads_cpu_ns()[idle.native_id] == on_cpu  # a parked thread's clock does not move between the two
    finally:
        parked.set()
        idle.join()
