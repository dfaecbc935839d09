"""xdist sessions where a worker dies: what the workers had profiled still reaches the summary and the index."""

from __future__ import annotations

import json

import pytest

ARGS = ("-p", "no:randomly", "-p", "no:benchmark")

CRASHING = """
import os
import pytest

@pytest.mark.parametrize("n", range(3))
@pytest.mark.inferscope(rounds=2)
def test_a_before(n):
    sum(range(1000))

@pytest.mark.inferscope(rounds=2)
def test_b_crash():
    os._exit(1)

@pytest.mark.inferscope(rounds=2)
def test_c_after():
    sum(range(1000))
"""


def test_a_crashed_worker_keeps_the_tests_it_had_profiled(pytester: pytest.Pytester) -> None:
    """The workers sent their results at their session's end only: a worker that died took every test it had profiled
    with it (absent from the summary and index.json, their report folders on disk but named nowhere)."""
    pytest.importorskip("xdist")
    pytester.makepyfile(CRASHING)
    result = pytester.runpytest_subprocess(
        "-n", "1", "-p", "no:randomly", "-p", "no:benchmark", "--inferscope-report=out"
    )
    result.assert_outcomes(passed=4, failed=1)
    index = json.loads((pytester.path / "out" / "index.json").read_text())
    nodeids = [t["nodeid"] for t in index["tests"]]
    expected = [f"test_a_crashed_worker_keeps_the_tests_it_had_profiled.py::test_a_before[{n}]" for n in range(3)]
    expected.append("test_a_crashed_worker_keeps_the_tests_it_had_profiled.py::test_c_after")
    assert sorted(n for n in nodeids if "test_b_crash" not in n) == sorted(expected)
    assert len(nodeids) == len(set(nodeids))
    result.stdout.fnmatch_lines(["*the plugin added * to the 4 profiled tests*"])


@pytest.mark.parametrize("death", ["os._exit(1)", "ctypes.string_at(0)"], ids=["exit", "segfault"])
def test_the_test_a_worker_died_in_is_listed_once_as_partial(pytester: pytest.Pytester, death: str) -> None:
    """It was in neither the summary's table nor index.json: only xdist's own failure said that it had run."""
    pytest.importorskip("xdist")
    pytester.makepyfile(CRASHING.replace("os._exit(1)", death).replace("import os", "import ctypes, os"))
    result = pytester.runpytest_subprocess(*ARGS, "-n", "2", "--inferscope-report=out", "--junitxml=junit.xml")
    result.assert_outcomes(passed=4, failed=1)
    tests = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    assert len(tests) == 5 == len({t["nodeid"] for t in tests})
    (crashed,) = [t for t in tests if t["nodeid"].endswith("::test_b_crash")]
    assert crashed["verdict"] == "partial" and crashed["outcome"] == "failed" and crashed["rounds"] == 2
    assert (
        crashed["partial_reason"].startswith("worker 'gw")
        and "crashed while running this test" in crashed["partial_reason"]
    )
    assert crashed["latency_ms"]["median"] is None and crashed["files"] == {}
    # (what the plugin added: the four that ran to their end, the crashed test's is unknown)
    result.stdout.fnmatch_lines(["*::test_b_crash * none * 0 * partial", "*plugin added * to the 4 profiled tests*"])
    # listed, not linked: it has no report folder (the index linked one that was never written)
    lines = (pytester.path / "out" / "index.md").read_text().splitlines()
    (row,) = [line for line in lines if line.startswith("| ") and "test_b_crash" in line]  # (its table row)
    assert "partial" in row and "](" not in row
    html = (pytester.path / "out" / "index.html").read_text()
    assert "::test_b_crash</td>" in html and "test_b_crash-" not in html


def test_a_test_rerunfailures_ran_again_after_its_worker_died_is_listed_with_its_deaths(
    pytester: pytest.Pytester,
) -> None:
    """pytest-rerunfailures runs the test a worker died in again (on another worker). It sends a test's reports once
    the test has run to its end, so no setup report had told the controller the test was profiled: a test that died at
    every try was in neither the summary nor the index (only xdist's and rerunfailures' lines said it had run), and one
    that died and then passed was listed as run once, its death in no earlier run."""
    pytest.importorskip("xdist")
    pytest.importorskip("pytest_rerunfailures")
    pytester.makepyfile(
        """
        import os
        from pathlib import Path

        def test_a_crash_once():
            flag = Path("crashed")
            if not flag.exists():
                flag.write_text("")
                os._exit(1)

        def test_b_crash():
            os._exit(1)

        def test_c_plain():
            pass
        """
    )
    result = pytester.runpytest_subprocess(
        *ARGS, "-n", "1", "--reruns", "1", "--inferscope-all", "--inferscope-report=out"
    )
    assert result.parseoutcomes() == {"passed": 2, "failed": 1, "rerun": 2}
    tests = json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    listed = [(t["nodeid"].rpartition("::")[2], t["verdict"], t["earlier_runs"]) for t in tests]
    assert listed == [
        ("test_a_crash_once", "pass", ["partial"]),
        ("test_b_crash", "partial", ["partial"]),
        ("test_c_plain", "pass", []),
    ]
    (died,) = [t for t in tests if t["nodeid"].endswith("::test_b_crash")]
    assert "crashed while running this test" in died["partial_reason"] and died["files"] == {}
    result.stdout.fnmatch_lines(
        ["*::test_b_crash * none * 0 * partial", "*2 tests ran more than once*test_b_crash: partial, then partial*"]
    )


CONTROLLER_HOLDS = """
import json
import pytest

@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    if hasattr(session.config, "workerinput"):
        return
    results = session.config.pluginmanager.get_plugin("inferscope-session").results
    stats = session.config.pluginmanager.get_plugin("terminalreporter").stats
    calls = {r.nodeid: r.user_properties for r in stats["passed"] if r.when == "call"}
    teardowns = {r.nodeid: r.user_properties for r in stats[""] if r.when == "teardown"}
    held = {
        "environments": len({id(r.environment) for r in results}),
        "collectors": sum(len(r.collectors) for r in results),
        "shared": sum(all(a is b for a, b in zip(calls[n], teardowns[n])) for n in calls),
        "properties": sorted({len(p) for p in calls.values()}),
    }
    (session.config.rootpath / "held.json").write_text(json.dumps(held))
"""


def test_the_controller_keeps_what_its_summary_index_and_baseline_read(pytester: pytest.Pytester) -> None:
    """The controller kept every worker's result whole, each with its own copy of its worker's environment, the
    collectors' description and the clock fit (report.json's, not the summary's, the index's or the baseline's), and
    pytest kept each test's JUnit properties twice (its call and its teardown report): ~12.6 KB a test, ~630 MB for
    50,000 tests."""
    pytest.importorskip("xdist")
    pytester.makeconftest(CONTROLLER_HOLDS)
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", range(12))
        def test_a(n):
            sum(range(100))
        """
    )
    result = pytester.runpytest_subprocess(*ARGS, "-n", "2", "--inferscope-all", "--inferscope-report=out")
    result.assert_outcomes(passed=12)
    held = json.loads((pytester.path / "held.json").read_text())
    assert held["environments"] <= 2 and held["collectors"] == 0, held  # one environment a worker at most
    assert held["shared"] == 12 and held["properties"][0] > 5, held  # the teardown report's are the call report's
    assert len(json.loads((pytester.path / "out" / "index.json").read_text())["tests"]) == 12


DIES_IN_SETUP = """
import os
import pytest

@pytest.fixture
def dies():
    os._exit(1)

@pytest.mark.inferscope(rounds=2)
def test_a_profiled():
    sum(range(1000))

@pytest.mark.inferscope(rounds=2)
def test_b_dies_in_setup(dies):
    pass

def test_c_unprofiled_dies():
    os._exit(1)
"""


@pytest.mark.parametrize("restarts", ["0", "1"])
def test_a_test_whose_worker_died_in_its_setup_is_listed(pytester: pytest.Pytester, restarts: str) -> None:
    """A worker that died in a profiled test's setup had sent no setup report saying the test was profiled, and the
    plans that would say it came only under pytest-rerunfailures, from a worker that lived to its end: the test was in
    neither the summary nor the index. It is listed as crashed, its plan unknown; a test the worker had set up as
    unprofiled, and died in, is not listed."""
    pytest.importorskip("xdist")
    pytester.makepyfile(DIES_IN_SETUP)
    result = pytester.runpytest_subprocess(*ARGS, "-n", "1", f"--max-worker-restart={restarts}",
                                           "--inferscope-report=out")  # fmt: skip
    tests = {
        t["nodeid"].rpartition("::")[2]: t
        for t in json.loads((pytester.path / "out" / "index.json").read_text())["tests"]
    }
    assert "test_c_unprofiled_dies" not in tests, sorted(tests)
    died = tests["test_b_dies_in_setup"]
    assert died["verdict"] == "partial" and died["files"] == {}, died
    assert died["partial_reason"].startswith("worker 'gw0' crashed while running this test"), died["partial_reason"]
    assert "no plan known" in died["partial_reason"]
    assert tests["test_a_profiled"]["verdict"] == "pass"
    result.stdout.fnmatch_lines(["*::test_b_dies_in_setup * none * 0 * partial"])


KILLED_AFTER = """
import os, shutil
from pathlib import Path
import pytest

@pytest.mark.inferscope(rounds=2)
def test_a_done():
    sum(range(1000))

def test_b_killed():
    for folder in Path("out").glob("*test_a_done*"):  # as if the worker's writer had not written them yet
        shutil.rmtree(folder)
    os._exit(1)
"""


def test_a_killed_workers_tests_without_their_report_folder_are_not_linked(pytester: pytest.Pytester) -> None:
    """A worker killed before its writer (a helper process) had put a test's files on disk: the index linked a report
    folder that does not exist. Every file the index names exists; the summary says whose files are missing."""
    pytest.importorskip("xdist")
    pytester.makepyfile(KILLED_AFTER)
    result = pytester.runpytest_subprocess(*ARGS, "-n", "1", "--max-worker-restart=0", "--inferscope-report=out")
    out = pytester.path / "out"
    tests = json.loads((out / "index.json").read_text())["tests"]
    (done,) = [t for t in tests if t["nodeid"].endswith("::test_a_done")]
    assert all((out / f).is_file() for t in tests for f in t["files"].values()), tests
    assert done["files"] == {} and "test_a_done-" not in (out / "index.html").read_text()
    text = " ".join(result.stdout.str().split())
    assert "worker 'gw0' died before the report files of test_a_killed" in text, text
