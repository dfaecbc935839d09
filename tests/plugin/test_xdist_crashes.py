"""xdist sessions where a worker dies: what the workers had profiled still reaches the summary and the index."""

from __future__ import annotations

import json

import pytest

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
