"""Each test's recorded environment names the torch threads that test ran with, not the session's first reading."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

BODIES = """
import pytest, torch

torch.set_num_threads(1)  # the session's setting
x = torch.randn(64, 64)

@pytest.fixture
def three():
    old = torch.get_num_threads()
    torch.set_num_threads(3)
    yield
    torch.set_num_threads(old)

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_a_sets_its_own_and_gives_it_back():
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        x @ x
    finally:
        torch.set_num_threads(old)

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_b_with_a_fixture_setting_three(three):
    x @ x

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_c_leaving_threads_alone():
    x @ x
"""


def _reports(pytester: pytest.Pytester, source: str, passed: int) -> dict[str, dict]:
    """Each test's report.json by test name, from `source` run with reports, GPU collection off."""
    pytester.makepyfile(source)
    result = pytester.runpytest_subprocess("--inferscope-gpu=off", "-p", "no:randomly", "--inferscope-report=out")
    result.assert_outcomes(passed=passed)
    reports = (json.loads(path.read_text()) for path in (pytester.path / "out").glob("*/report.json"))
    return {report["nodeid"].split("::")[-1]: report for report in reports}


def test_each_tests_environment_names_the_threads_its_rounds_ran_with(pytester: pytest.Pytester) -> None:
    # Before: the environment was read once, after the first test, so the fixture's 3 read as the session's 1.
    threads = {
        name: (report["environment"]["torch_threads"], report["analysis"]["metrics"]["cpu.torch_threads"])
        for name, report in _reports(pytester, BODIES, passed=3).items()
    }
    # The body's own 2, given back before the rounds ended, cannot be read without hooking torch: the caller's 1.
    assert threads == {
        "test_a_sets_its_own_and_gives_it_back": (1, 1.0),
        "test_b_with_a_fixture_setting_three": (3, 3.0),
        "test_c_leaving_threads_alone": (1, 1.0),
    }


def test_the_threads_a_test_ran_with_are_not_part_of_the_baseline_fingerprint() -> None:
    # A baseline saved when the environment read the session's threads compares with one reading the test's own.
    from pytest_inferscope.baseline import fingerprint

    env = {"python": "3.11.9", "torch": "2.13.0", "cpu_model": "x", "plugin_version": "1"}
    assert fingerprint({**env, "torch_threads": 1}) == fingerprint({**env, "torch_threads": 3})


WHOSE_THREADS = """
import threading, time
from concurrent.futures import ThreadPoolExecutor
import pytest, torch

torch.set_num_threads(1)
a = torch.randn(384, 384)

@pytest.fixture
def spinner():
    done = threading.Event()
    t = threading.Thread(target=lambda: [None for _ in iter(lambda: not done.is_set(), False)])
    t.start()
    yield
    done.set()
    t.join()

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_a_beside_a_python_thread(spinner):
    time.sleep(0.02)

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_c_on_a_pool_of_its_own_each_call():
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda n: sum(i * i for i in range(n)), [100_000, 100_000]))

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_b_on_torch_threads_it_sets_and_gives_back():
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        for _ in range(10):
            torch.tanh(a @ a)
    finally:
        torch.set_num_threads(old)
"""


def test_the_other_threads_time_is_told_python_threads_apart_from_torchs(pytester: pytest.Pytester) -> None:
    # torch's threads read after the rounds say 1 for a body that set 2 and gave 1 back, whose pool's work read as "a
    # Python thread holding the GIL" in off_cpu_wait (2026-11-30): the threads' own CPU clocks say whose they were.
    native = {
        name: report["analysis"]["metrics"]["cpu.other_threads_native"]
        for name, report in _reports(pytester, WHOSE_THREADS, passed=3).items()
    }
    assert native["test_a_beside_a_python_thread"] < 0.2, native
    # A pool made and shut down in each call: its threads gone at the stop, their time read as native (1.0, 2026-11-30).
    assert native["test_c_on_a_pool_of_its_own_each_call"] < 0.2, native
    assert native["test_b_on_torch_threads_it_sets_and_gives_back"] > 0.8, native
