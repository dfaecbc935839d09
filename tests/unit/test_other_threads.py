"""The process's other threads' CPU over a collection, Python threads' apart from native ones (collectors/threads)."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from pytest_inferscope.collectors.threads import Ends, OtherThreads, split

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's thread CPU clocks")


def test_the_split_leaves_out_the_plugins_own_and_tells_python_from_native() -> None:
    before = (1_000, {2: ("spinner", 100), 3: ("inferscope-sampler", 100)})
    after = (1_600, {2: ("spinner", 400), 3: ("inferscope-sampler", 150), 5: ("later", 70)})  # 5 started since
    # 600 ns of the other threads: 300 + 70 Python, 50 the plugin's, 180 native
    assert split(before, after) == {
        "native_ns": 180,
        "untold_ns": 0,
        "untold_threads": 0,
        "python_ns": 370,
        "python_threads": 2,
    }
    assert split(None, after) is None  # no clocks: nothing said


@linux
def test_a_python_threads_time_reads_as_a_python_threads_and_torchs_pool_as_native() -> None:
    other = OtherThreads(threading.get_native_id())
    done = threading.Event()
    spin = threading.Thread(target=lambda: [None for _ in iter(lambda: not done.is_set(), False)], name="spinner")
    spin.start()
    time.sleep(0.05)
    got = other.stop()
    done.set()
    spin.join()
    assert got is not None and got["python_ns"] > 0 and got["python_threads"] == 1, got
    assert got["native_ns"] < got["python_ns"], got
    torch = pytest.importorskip("torch")
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        a = torch.randn(384, 384)
        other = OtherThreads(threading.get_native_id())
        stop = time.perf_counter() + 0.05
        while time.perf_counter() < stop:
            torch.tanh(a @ a)
        got = other.stop()
    finally:
        torch.set_num_threads(old)
    assert got is not None and got["python_ns"] == 0 and got["native_ns"] > 0, got  # the pool's second thread


def _spin(n: int) -> int:
    return sum(i * i for i in range(n))


@linux
def test_python_threads_started_and_ended_within_the_collection_are_python_threads() -> None:
    # A pool made and shut down inside the body, a thread joined within the call: gone from threading.enumerate() at
    # the stop, their time read as native ("100.0% of their time native threads'", 2026-11-30).
    other = OtherThreads(threading.get_native_id())
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(_spin, [200_000, 200_000]))
    joined = threading.Thread(target=_spin, args=(200_000,))
    joined.start()
    joined.join()
    got = other.stop()
    assert got is not None and got["python_threads"] == 3, got
    assert got["native_ns"] is not None and got["native_ns"] < got["python_ns"] and got["untold_threads"] == 0, got
    assert threading.getprofile() is None  # the hook is gone with the collection


@linux
def test_a_python_thread_alive_at_the_start_that_ends_before_the_stop_is_not_called_native() -> None:
    go = threading.Event()
    worker = threading.Thread(target=lambda: go.wait() and _spin(200_000))
    worker.start()
    other = OtherThreads(threading.get_native_id())
    go.set()
    worker.join()
    got = other.stop()
    assert got is not None and got["native_ns"] is None and got["untold_threads"] == 1 and got["untold_ns"] > 0, got


@linux
def test_the_hook_runs_once_a_thread_and_keeps_the_one_before_it() -> None:
    seen: list[str] = []

    def theirs(frame: object, event: str, arg: object) -> None:
        seen.append(event)

    threading.setprofile(theirs)
    try:
        ends = Ends()
        t = threading.Thread(target=_spin, args=(10,))
        t.start()
        t.join()
        ends.close()
        assert threading.getprofile() is theirs and ends.complete
        assert list(ends.started) == list(ends.ended) == [t.native_id], (ends.started, ends.ended)
        assert seen, "the previous hook saw the thread's events"
        replaced = Ends()
        threading.setprofile(None)  # a body's own: kept, and a start after it may have gone unseen
        replaced.close()
        assert threading.getprofile() is None and not replaced.complete
    finally:
        threading.setprofile(None)


def test_a_thread_that_outlives_the_collection_does_not_keep_it() -> None:
    """A thread started during a collection and alive after it (a pool kept for the process, the plugin's parked
    sampler thread) held that collection's `Ends` until it ended: one for each such thread, kept by a long session."""
    import gc
    import weakref

    release = threading.Event()
    ends = Ends()
    thread = threading.Thread(target=release.wait, name="kept")
    thread.start()
    time.sleep(0.05)  # its hook ran: it is noted as started
    ends.close()
    assert list(ends.started.values()) == ["kept"]
    gone = weakref.ref(ends)
    del ends
    gc.collect()
    try:
        assert gone() is None  # the thread still runs; its `_End` no longer holds the collection's record
    finally:
        release.set()
        thread.join()
