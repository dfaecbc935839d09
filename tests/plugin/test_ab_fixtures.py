"""The twin keeps a test's shared fixtures (a session-scoped model) for the test the parent runs next, as pytest keeps
them on this side: it built them again for every test before (docs/ab.md, "Limits")."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from test_ab_failures import make_repo

CONFTEST = """
import os, pytest

def log(what):
    with open(os.environ["FIXTURE_LOG"], "a") as f:
        f.write(f"{os.getpid()} {'twin' if os.environ.get('INFERSCOPE_AB_TWIN') else 'here'} {what}\\n")

@pytest.fixture(scope="session")
def model():
    log("session up")
    yield 1
    log("session down")

@pytest.fixture(scope="module")
def per_module(request):
    name = request.module.__name__
    log(f"up {name}")
    yield
    log(f"down {name}")
    if os.environ.get("INFERSCOPE_AB_TWIN") and os.environ.get("FAIL_TEARDOWN") == name:
        raise RuntimeError(f"{name} would not close")
"""

TESTS = """
import time, pytest

def spin(ms):
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        pass

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_first(model, per_module):
    spin(1)

def test_not_profiled(model, per_module):
    pass

class TestGrouped:
    @pytest.mark.inferscope(rounds=3, warmup=0)
    def test_in_a_class(self, model, per_module):
        spin(1)

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_last_here(model, per_module):
    spin(1)

@pytest.mark.skipif("True", reason="skipped in its setup on both sides")
@pytest.mark.inferscope(rounds=3, warmup=0)
def test_skipped(model, per_module):
    pass
"""


Events = dict[str, list[str]]


def events(log: Path) -> Events:
    """Each side's fixture events in order: "here" (this side's pytest process) and "twin"."""
    out: dict[str, list[str]] = defaultdict(list)
    for line in log.read_text().splitlines():
        _, side, what = line.split(" ", 2)
        out[side].append(what)
    return out


def run(pytester: pytest.Pytester, xdist: bool, fail_teardown: str = "") -> tuple[pytest.RunResult, Events]:
    if xdist:
        pytest.importorskip("xdist")
    files = {"conftest.py": CONFTEST, "test_a.py": TESTS, "test_b.py": TESTS}
    make_repo(pytester.path, files, {"test_a.py": TESTS + "# changed\n"})
    log = pytester.path / "fixtures.log"
    pytester._monkeypatch.setenv("FIXTURE_LOG", str(log))
    if fail_teardown:
        pytester._monkeypatch.setenv("FAIL_TEARDOWN", fail_teardown)
    args = ["-n", "1"] if xdist else []
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1", *args)
    return result, events(log)


@pytest.mark.parametrize("xdist", [False, True])
def test_the_twin_sets_a_session_fixture_up_once(pytester: pytest.Pytester, xdist: bool) -> None:
    """Six profiled tests in two files, an unprofiled one and a skipped one between them: the twin set the session's
    model up once and each module's fixture once, and tore each down once, in pytest's order; the test after a
    skipped one (which the parent never asks for) tears down the fixtures kept for it first."""
    result, seen = run(pytester, xdist)
    result.assert_outcomes(passed=8, skipped=2)
    expected = ["session up", "up test_a", "down test_a", "up test_b", "down test_b", "session down"]
    assert seen["here"] == expected, seen
    assert seen["twin"] == expected, seen
    rows = [line for line in result.outlines if "::test_" in line and "HEAD~1" not in line and "vs " not in line]
    assert not any("inconclusive" in row for row in rows if "test_skipped" not in row), rows
    assert "torn down" not in result.stdout.str() and "not torn down properly" not in result.stdout.str()


def test_a_teardown_failing_between_two_tests_asked_is_said(pytester: pytest.Pytester) -> None:
    """The module fixture kept for test_a's skipped last test fails to close at the ref when test_b's first test
    arrives: no test of this side's is that teardown's, so the summary says it as the twin's warning, and the next
    test is compared all the same."""
    result, seen = run(pytester, False, fail_teardown="test_a")
    result.assert_outcomes(passed=8, skipped=2)
    said = [line for line in result.outlines if line.startswith("inferscope A/B: the twin at HEAD~1")]
    assert len(said) == 1, result.stdout.str()
    assert "the fixtures test_a.py::test_last_here left set up failed in their teardown before " in said[0], said
    assert "test_b.py::test_first at this side: RuntimeError: test_a would not close" in said[0], said
    assert seen["twin"].count("session up") == 1 and seen["twin"].count("up test_b") == 1, seen
