"""The plugin beside what other plugins and test styles do to a test: a body cut short (pytest-timeout), a test run
again (pytest-rerunfailures), unittest.TestCase methods, a tracer (pytest-cov), async tests awaited by another plugin
(anyio) and unittest (IsolatedAsyncioTestCase), and a fixture that may be called once a test (pytest-benchmark's
`benchmark`)."""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest


def folders(out: Path) -> dict[str, Path]:
    """Each test's report folder by its function's name, as index.json lists them."""
    tests = json.loads((out / "index.json").read_text())["tests"]
    return {t["nodeid"].rsplit("::", 1)[1]: out / t["slug"] for t in tests}


def test_a_round_the_body_raised_in_is_no_latency_sample(pytester: pytest.Pytester) -> None:
    """A call cut short (an assertion, pytest-timeout's signal) did not finish: its round's time is not a latency."""
    pytester.makepyfile(
        """
        import time
        import pytest

        CALLS = []

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_cut_short():
            CALLS.append(1)
            if len(CALLS) == 3:  # the second measured round
                raise TimeoutError("cut short")
            time.sleep(0.03)

        @pytest.mark.inferscope(rounds=3, warmup=0)
        def test_first_call_raises():
            time.sleep(0.01)
            raise TimeoutError("at once")
        """
    )
    summary = pytester.path / "step-summary.md"
    pytester._monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    result = pytester.runpytest("--inferscope-report=out")
    result.assert_outcomes(failed=2)
    assert "::test_first_call_raises | none |  |" in summary.read_text()
    reports = folders(pytester.path / "out")
    cut = json.loads((reports["test_cut_short"] / "report.json").read_text())
    assert cut["verdict"] == "partial" and "cut short" in cut["partial_reason"]
    (sample,) = cut["latency"]["samples_ms"]  # the first measured round; not the second, which raised at once
    assert sample >= 25.0 and cut["latency"]["median"] == sample
    first = json.loads((reports["test_first_call_raises"] / "report.json").read_text())
    assert first["latency"]["samples_ms"] == []
    assert "no measured round completed" in (reports["test_first_call_raises"] / "report.md").read_text()


def test_a_rerun_test_keeps_its_last_run_and_names_the_runs_before(pytester: pytest.Pytester) -> None:
    """pytest-rerunfailures runs the same item again: one row, one folder, one set of JUnit properties per run."""
    pytester.makeconftest(
        """
        from _pytest.runner import runtestprotocol

        def pytest_runtest_protocol(item, nextitem):  # as pytest-rerunfailures does: the same item, run again
            for _ in range(3):
                runtestprotocol(item, nextitem=nextitem, log=True)
            return True
        """
    )
    pytester.makepyfile(
        """
        import time
        import pytest

        RUN = [0]

        @pytest.fixture
        def run():
            RUN[0] += 1
            return RUN[0]

        @pytest.mark.inferscope(rounds=3, warmup=0, max_latency_ms=15)
        def test_slow_twice(run):
            time.sleep(0.03 if run < 3 else 0.001)
        """
    )
    result = pytester.runpytest("--inferscope-report=out", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*1 test ran more than once*test_slow_twice: fail, fail, then pass*"])
    (entry,) = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    assert entry["verdict"] == "pass" and entry["earlier_runs"] == ["fail", "fail"]
    (d,) = folders(pytester.path / "out").values()
    assert "run 3 of this test in the session (the runs before: fail, fail)" in (d / "report.md").read_text()
    for case in ET.parse(pytester.path / "junit.xml").getroot().iter("testcase"):  # each run's, not accumulated
        names = [p.get("name") for p in case.iter("property")]
        assert names.count("inferscope.verdict") == 1, names


def test_a_unittest_method_is_profiled_in_rounds_between_one_setup_and_teardown(pytester: pytest.Pytester) -> None:
    """pytest runs a TestCase method through unittest, not pytest_pyfunc_call: marked, or under --inferscope-all, it
    is profiled too (it once ran unprofiled, with no word), its thresholds gate it, and what it raises is partial."""
    pytester.makepyfile(
        test_ut="""
        import time
        import unittest
        import pytest

        CALLS = {"setUp": 0, "tearDown": 0, "body": 0}

        class TestModel(unittest.TestCase):
            def setUp(self):
                CALLS["setUp"] += 1

            def tearDown(self):
                CALLS["tearDown"] += 1

            @pytest.mark.inferscope(rounds=4, warmup=1)
            def test_forward(self):
                CALLS["body"] += 1
                time.sleep(0.002)

            @pytest.mark.inferscope(rounds=3, warmup=0, max_latency_ms=1)
            def test_too_slow(self):
                time.sleep(0.005)

            @pytest.mark.inferscope(rounds=3, warmup=0)
            def test_raises_in_second_round(self):
                CALLS.setdefault("raises", 0)
                CALLS["raises"] += 1
                self.assertLess(CALLS["raises"], 2)

            def test_unmarked(self):
                time.sleep(0.001)

        def test_zz_counts():
            # test_forward: one setUp and tearDown around its 1 + 4 calls; the other three tests one each
            assert (CALLS["setUp"], CALLS["tearDown"], CALLS["body"]) == (4, 4, 5), CALLS
        """
    )
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-report=out")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines(["*FAILED*test_too_slow - inferscope: max_lat*"])  # trimmed to 80 columns
    reports = folders(pytester.path / "out")
    assert set(reports) == {"test_forward", "test_too_slow", "test_raises_in_second_round"}
    forward = json.loads((reports["test_forward"] / "report.json").read_text())
    assert forward["verdict"] == "pass" and len(forward["latency"]["samples_ms"]) == 4
    raised = json.loads((reports["test_raises_in_second_round"] / "report.json").read_text())
    assert raised["verdict"] == "partial" and "AssertionError" in raised["partial_reason"]
    assert len(raised["latency"]["samples_ms"]) == 1

    every = pytester.runpytest("-p", "no:randomly", "--inferscope-all", "--inferscope-report=all", "-k", "unmarked")
    every.assert_outcomes(passed=1)
    assert set(folders(pytester.path / "all")) == {"test_unmarked"}


def test_an_async_unittest_method_is_profiled_in_rounds_in_its_own_event_loop(pytester: pytest.Pytester) -> None:
    """An IsolatedAsyncioTestCase method, which unittest looks up on the test case and awaits in its own event loop
    (pytest does not set it there): its rounds are awaited in that loop, between one asyncSetUp and asyncTearDown;
    what it raises is partial; a skip leaves no report; under A/B both sides await their rounds in turn."""
    pytester.makepyfile(
        test_iat="""
        import asyncio
        import time
        import unittest
        import pytest

        CALLS = {"setUp": 0, "tearDown": 0, "body": 0, "raises": 0}

        class TestModel(unittest.IsolatedAsyncioTestCase):
            async def asyncSetUp(self):
                CALLS["setUp"] += 1
                self.loop = asyncio.get_running_loop()

            async def asyncTearDown(self):
                CALLS["tearDown"] += 1

            @pytest.mark.inferscope(rounds=4, warmup=1)
            async def test_forward(self):
                assert asyncio.get_running_loop() is self.loop
                CALLS["body"] += 1
                time.sleep(0.002)
                await asyncio.sleep(0)

            @pytest.mark.inferscope(rounds=3, warmup=0)
            async def test_raises_in_second_round(self):
                CALLS["raises"] += 1
                self.assertLess(CALLS["raises"], 2)

            @pytest.mark.inferscope(rounds=3, warmup=0)
            async def test_skipped(self):
                self.skipTest("not here")

        def test_zz_counts():
            # test_forward: one asyncSetUp and asyncTearDown around its 1 + 4 calls; the other two one each
            assert (CALLS["setUp"], CALLS["tearDown"], CALLS["body"]) == (3, 3, 5), CALLS
        """
    )
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-report=out")
    result.assert_outcomes(passed=2, failed=1, skipped=1)
    reports = folders(pytester.path / "out")
    assert set(reports) == {"test_forward", "test_raises_in_second_round"}
    forward = json.loads((reports["test_forward"] / "report.json").read_text())
    assert forward["verdict"] == "pass" and len(forward["latency"]["samples_ms"]) == 4
    assert all(1.9 < ms < 50 for ms in forward["latency"]["samples_ms"])  # the 2 ms body, awaited: not a coroutine made
    raised = json.loads((reports["test_raises_in_second_round"] / "report.json").read_text())
    assert raised["verdict"] == "partial" and "AssertionError" in raised["partial_reason"]

    # under A/B both sides await their rounds in turn (same code: no verdict asked of it beyond a 90% change)
    ab = pytester.runpytest("-p", "no:randomly", "-k", "forward", f"--inferscope-ab-python={sys.executable}",
                            "--inferscope-max-regression=0.9", "--inferscope-report=ab")  # fmt: skip
    ab.assert_outcomes(passed=1)
    paired = json.loads((folders(pytester.path / "ab")["test_forward"] / "report.json").read_text())["ab"]
    assert paired["pairs"] >= 4 and len(paired["new_ms"]) == len(paired["ref_ms"]) == paired["pairs"]
    assert all(1.9 < ms < 50 for ms in paired["new_ms"] + paired["ref_ms"])  # both sides' 2 ms bodies, awaited


def test_a_test_with_subtests_is_profiled_and_pytest_counts_them_once_a_round(pytester: pytest.Pytester) -> None:
    """pytest 9's `subtests`: a subtest's report is made while the rounds run, which once took the test's collection
    for the test's own report (no report, no row). Each round runs the subtests again, and pytest counts them once a
    round (docs/quickstart.md): counting each once would take pytest's private internals."""
    pytest.importorskip("_pytest.subtests", reason="pytest 9's subtests fixture")
    pytester.makepyfile(
        test_sub="""
        import pytest

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_with_subtests(subtests):
            for i in range(4):
                with subtests.test(i=i):
                    assert i >= 0

        @pytest.mark.inferscope(rounds=3, warmup=1)
        def test_with_a_failing_subtest(subtests):
            for i in range(2):
                with subtests.test(i=i):
                    assert i == 0
        """
    )
    result = pytester.runpytest("-q", "-p", "no:randomly", "--inferscope-report=out")  # -q: subtest passes counted
    result.stdout.fnmatch_lines(["*5 failed, 1 passed, 20 subtests passed*"])  # 1 + 3 calls: 4 x (4 + 1) passed
    result.stdout.fnmatch_lines(["*FAILED test_sub.py::test_with_a_failing_subtest - contains 4 failed subtests*"])
    reports = folders(pytester.path / "out")
    assert set(reports) == {"test_with_subtests", "test_with_a_failing_subtest"}
    for name in reports:
        assert len(json.loads((reports[name] / "report.json").read_text())["latency"]["samples_ms"]) == 3
    result.stdout.fnmatch_lines(["*test_sub.py::test_with_subtests * 3 *pass*"])  # its row in the summary


def test_a_tracer_beside_the_tests_is_said_and_keeps_a_baseline_without_it_from_the_comparison(
    pytester: pytest.Pytester,
) -> None:
    """pytest-cov's tracer slows every Python line the test runs (a pure-Python body ~3x on the dev VM): a run under
    one says so, and is not judged against a baseline saved without it."""
    pytester.makepyfile(
        test_model="""
        import time
        import pytest

        @pytest.mark.inferscope(rounds=5, warmup=1)
        def test_model():
            time.sleep(0.005)
        """
    )
    pytester.makeconftest(
        """
        import os, sys

        def a_coverage_tracer(frame, event, arg):
            return None

        previous = sys.gettrace()

        def pytest_sessionstart(session):  # where pytest-cov starts coverage
            if os.environ.get("TRACE") == "1":
                sys.settrace(a_coverage_tracer)

        def pytest_unconfigure(config):  # this session runs in the test's process: its tracer must not outlive it
            sys.settrace(previous)
        """
    )
    plain = pytester.runpytest("-p", "no:randomly", "--inferscope-save-baseline=main")
    plain.assert_outcomes(passed=1)
    assert "Python tracer" not in plain.stdout.str()
    os.environ["TRACE"] = "1"
    try:
        traced = pytester.runpytest("-p", "no:randomly", "--inferscope-compare=main", "--inferscope-report=out")
    finally:
        del os.environ["TRACE"]
    traced.assert_outcomes(passed=1)
    out = traced.stdout.str()
    assert "a Python tracer or profiler was active (conftest.a_coverage_tracer)" in out
    assert (
        "environment differs from baseline 'main' (Python tracer or profiler (coverage, a debugger) differs: "
        "baseline 'none', this run 'conftest.a_coverage_tracer')" in out
    )
    (folder,) = folders(pytester.path / "out").values()
    report = json.loads((folder / "report.json").read_text())
    assert report["environment"]["tracer"] == "conftest.a_coverage_tracer"
    assert report["regression"]["verdict"] == "inconclusive"


#: What anyio's and pytest-trio's plugins do with an `async def` test: await it in their event loop, in their own
#: pytest_pyfunc_call, with the test's fixture values.
ASYNC_RUNNER = """
import asyncio, inspect, pytest

@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        args = {name: pyfuncitem.funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
        asyncio.run(pyfuncitem.obj(**args))
        return True
"""

ASYNC_TESTS = """
import asyncio, time
import pytest

CALLS = []

@pytest.fixture
def model():
    def forward():
        t = time.perf_counter()
        while time.perf_counter() - t < 0.003:
            pass
    return forward

@pytest.mark.inferscope(rounds=4, warmup=1)
async def test_serve(model):
    CALLS.append("serve")
    await asyncio.sleep(0.002)
    model()

@pytest.mark.inferscope(rounds=3, warmup=0, max_latency_ms=1)
async def test_too_slow():
    await asyncio.sleep(0.004)

@pytest.mark.inferscope(rounds=3, warmup=0)
async def test_raises_in_second_round():
    CALLS.append("raises")
    if CALLS.count("raises") == 2:
        raise ValueError("second call")

def test_zz_counts():
    assert CALLS.count("serve") == 5, CALLS
"""


def test_an_async_test_a_plugin_awaits_is_profiled_in_rounds_in_its_event_loop(pytester: pytest.Pytester) -> None:
    """anyio (FastAPI's, httpx's tests) awaits an `async def` test in its own pytest_pyfunc_call: the plugin hands it
    an async function that awaits the body in rounds there. Before, such a test ran once, unprofiled, with a warning."""
    pytester.makeconftest(ASYNC_RUNNER)
    pytester.makepyfile(test_async=ASYNC_TESTS)
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:anyio", "-p", "no:asyncio", "--inferscope-report=out")
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines(["*FAILED*test_too_slow - inferscope: max_lat*"])  # trimmed to 80 columns
    reports = folders(pytester.path / "out")
    assert set(reports) == {"test_serve", "test_too_slow", "test_raises_in_second_round"}
    serve = json.loads((reports["test_serve"] / "report.json").read_text())
    assert serve["verdict"] == "pass" and len(serve["latency"]["samples_ms"]) == 4
    assert all(ms >= 4.5 for ms in serve["latency"]["samples_ms"])  # the await and the busy loop, both in the round
    assert serve["analysis"]["bottleneck"] == "cpu_bound"
    slow = json.loads((reports["test_too_slow"] / "report.json").read_text())
    assert slow["verdict"] == "fail" and slow["latency"]["median"] >= 4.0
    raised = json.loads((reports["test_raises_in_second_round"] / "report.json").read_text())
    assert raised["verdict"] == "partial" and "ValueError: second call" in raised["partial_reason"]
    assert len(raised["latency"]["samples_ms"]) == 1


def test_anyio_awaits_a_marked_async_test_in_rounds(pytester: pytest.Pytester) -> None:
    pytest.importorskip("anyio", reason="anyio is not installed here; the conftest runner above stands for it")
    pytester.makepyfile(
        test_anyio="""
        import anyio, pytest

        @pytest.fixture
        def anyio_backend():
            return "asyncio"

        @pytest.mark.anyio
        @pytest.mark.inferscope(rounds=3, warmup=1)
        async def test_anyio_model():
            await anyio.sleep(0.002)
        """
    )
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:asyncio", "--inferscope-report=out")
    result.assert_outcomes(passed=1)
    (folder,) = folders(pytester.path / "out").values()
    report = json.loads((folder / "report.json").read_text())
    assert len(report["latency"]["samples_ms"]) == 3 and report["latency"]["median"] >= 1.9


def test_a_test_using_pytest_benchmarks_fixture_is_profiled_in_one_call_or_refused(pytester: pytest.Pytester) -> None:
    """pytest-benchmark's `benchmark` may be called once a test (a second call raises FixtureAlreadyUsed), and the
    rounds called it again: such a test is profiled in one call, and a marker asking for more is a usage error."""
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def benchmark():  # as pytest-benchmark's: once a test
            used = []
            def run(fn):
                if used:
                    raise RuntimeError("FixtureAlreadyUsed: the fixture can only be used once")
                used.append(1)
                return fn()
            return run
        """
    )
    pytester.makepyfile(
        test_bench="""
        import time
        import pytest

        @pytest.mark.inferscope(max_latency_ms=5000)
        def test_marked(benchmark):
            benchmark(lambda: time.sleep(0.01))

        def test_unmarked(benchmark):
            benchmark(lambda: time.sleep(0.01))
        """
    )
    args = ("-p", "no:randomly", "-p", "no:benchmark", "--inferscope-all", "--inferscope-rounds=5")
    result = pytester.runpytest(*args, "--inferscope-report=out")
    result.assert_outcomes(passed=2)
    for name, folder in folders(pytester.path / "out").items():
        report = json.loads((folder / "report.json").read_text())
        assert (report["verdict"], len(report["latency"]["samples_ms"]), report["warmup"]) == ("pass", 1, 0), name
        assert report["latency"]["trace_ms"] == [] and report["latency"]["median"] >= 9.0

    pytester.makepyfile(
        test_bench="""
        import pytest

        @pytest.mark.inferscope(rounds=3)
        def test_rounds(benchmark):
            benchmark(lambda: None)
        """
    )
    refused = pytester.runpytest(*args)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(
        [
            "*test_bench.py::test_rounds: uses pytest-benchmark's `benchmark` fixture*"
            "asks for 3 calls (warmup=0, rounds=3)*"
        ]
    )


def test_a_runner_that_wraps_the_async_test_runs_once_around_all_its_rounds(pytester: pytest.Pytester) -> None:
    """pytest-asyncio and pytest-trio wrap an async test in a sync function that runs it in their runner, each in its
    own hook before the call. The plugin swaps the test for its rounds first, so the runner runs once around all of
    them; wrapped first, each round had been a run of the runner (+0.11 ms a round by pytest-asyncio 1.5.0 and +0.5
    ms by pytest-trio 0.8.0 for a 2 ms sleep, the 2-core VM)."""
    pytester.makeconftest(
        """
        import asyncio, functools, inspect, pytest

        RUNS = []

        @pytest.hookimpl(wrapper=True)
        def pytest_runtest_call(item):  # as pytest-trio does: the coroutine function wrapped for its runner
            func = item.obj
            if inspect.iscoroutinefunction(func):
                @functools.wraps(func)
                def run(*args, **kwargs):
                    RUNS.append(item.name)
                    return asyncio.run(func(*args, **kwargs))
                item.obj = run
            try:
                return (yield)
            finally:
                item.obj = func

        def pytest_sessionfinish(session):
            session.config.rootpath.joinpath("runs.txt").write_text(" ".join(RUNS))
        """
    )
    pytester.makepyfile(
        test_wrapped="""
        import asyncio, pytest

        @pytest.mark.inferscope(rounds=4, warmup=1)
        async def test_wrapped():
            await asyncio.sleep(0.002)
        """
    )
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:anyio", "-p", "no:asyncio", "--inferscope-report=out")
    result.assert_outcomes(passed=1)
    assert (pytester.path / "runs.txt").read_text() == "test_wrapped"  # one run of the runner, not five
    (folder,) = folders(pytester.path / "out").values()
    assert len(json.loads((folder / "report.json").read_text())["latency"]["samples_ms"]) == 4
