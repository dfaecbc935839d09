"""The process's other threads' CPU over a collection, Python threads' apart from native ones (collectors/threads)."""

from __future__ import annotations

import sys
import threading
import time

import pytest

from pytest_inferscope.collectors.threads import OtherThreads, split

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's thread CPU clocks")


def test_the_split_leaves_out_the_plugins_own_and_tells_python_from_native() -> None:
    before = (1_000, {2: ("spinner", 100), 3: ("inferscope-sampler", 100)})
    after = (1_600, {2: ("spinner", 400), 3: ("inferscope-sampler", 150), 5: ("later", 70)})  # 5 started since
    # 600 ns of the other threads: 300 + 70 Python, 50 the plugin's, 180 native
    assert split(before, after) == {"native_ns": 180, "python_ns": 370, "python_threads": 2}
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
