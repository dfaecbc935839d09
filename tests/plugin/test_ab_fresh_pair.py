"""--inferscope-ab-recheck end to end: a test slower in this pytest process alone (an offset of the process's own) is
not failed once a fresh pair of processes reads it unchanged; a real slowdown is read by both pairs and fails
(docs/ab.md, "A changed test checked by a fresh pair"). A bad value of it, or of --inferscope-ab-pairs, is refused."""

from __future__ import annotations

import pytest
from gitrepo import ab_reports, git, two_commits

BODY = """
import os, time, pytest

def spin(seconds):
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass

MAIN = not os.environ.get("INFERSCOPE_AB_TWIN")  # this pytest process; every twin has the variable

@pytest.mark.inferscope(rounds=10, warmup=1, max_regression=0.2)
def test_offset():
    spin(0.02 if MAIN else 0.002)  # the same code at both commits, 10x slower in this process only

@pytest.mark.inferscope(rounds=10, warmup=1, max_regression=0.2)
def test_changed():
    spin({changed})

@pytest.mark.inferscope(rounds=10, warmup=1, max_regression=0.2)
def test_faster():
    spin({faster})
"""


def _ab(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, dict]]:
    """The A/B run of the two commits (test_changed 10x slower at HEAD, test_faster 10x faster), and each test's
    report.json `ab`."""
    root = two_commits(pytester.path, BODY.format(changed=0.002, faster=0.02), BODY.format(changed=0.02, faster=0.002))
    out = root.parent / "out"
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1",
                                f"--inferscope-report={out}", *args)  # fmt: skip
    return result, {name: report["ab"] for name, report in ab_reports(root, out).items()}


@pytest.mark.parametrize("xdist", [False, True], ids=["one process", "xdist"])
def test_an_offset_of_this_process_is_not_a_regression(pytester: pytest.Pytester, xdist: bool) -> None:
    result, ab = _ab(pytester, *(["-n", "1"] if xdist else []))
    result.assert_outcomes(passed=2, failed=1)
    offset, changed, faster = ab["test_offset"], ab["test_changed"], ab["test_faster"]
    assert offset["recheck"]["outcome"] == "not confirmed"
    first = offset["recheck"]["first"]
    assert first["verdict"] == "regressed" and first["ratio"] > 5  # this process against its twin: ~10x
    assert offset["verdict"] in ("unchanged", "inconclusive")  # the fresh pair: the same code, the same speed
    assert 0.8 < offset["ratio"] < 1.25 and offset["new_ms"] == offset["recheck"]["fresh"]["new_ms"]
    assert offset["reason"].startswith("A fresh pair of processes, started alike, read ")
    assert "This pytest process and its twin read +" in offset["reason"]
    assert changed["verdict"] == "regressed" and changed["recheck"]["outcome"] == "confirmed"
    assert changed["recheck"]["fresh"]["verdict"] == "regressed" and changed["recheck"]["fresh"]["ratio"] > 5
    assert faster["verdict"] == "improved" and faster["recheck"]["outcome"] == "confirmed"  # (the default: changed)
    out = result.stdout.str()
    assert (
        "inferscope A/B: 3 tests that read regressed or improved re-checked by a fresh pair of processes, started "
        "alike: 2 confirmed, 1 not confirmed (the fresh pair's verdict stands for test_x.py::test_offset; docs/ab.md)"
    ) in out
    assert "A fresh pair of processes, started alike, read it too: +" in out
    assert "\n  fresh pairs (two more processes, started alike): median pair ratio " in out
    assert any(line.startswith("FAILED test_x.py::test_changed - inferscope A/B: +") for line in result.outlines)


def test_without_the_recheck_the_first_pairs_decide(pytester: pytest.Pytester) -> None:
    result, ab = _ab(pytester, "--inferscope-ab-recheck=off")
    result.assert_outcomes(passed=1, failed=2)
    assert ab["test_offset"]["verdict"] == "regressed" and ab["test_offset"]["recheck"] is None
    assert ab["test_changed"]["verdict"] == "regressed" and ab["test_changed"]["recheck"] is None
    assert ab["test_faster"]["verdict"] == "improved" and ab["test_faster"]["recheck"] is None
    assert "fresh pair" not in result.stdout.str() and "re-checked" not in result.stdout.str()


def test_regressed_alone_leaves_an_improvement_to_the_first_pairs(pytester: pytest.Pytester) -> None:
    result, ab = _ab(pytester, "--inferscope-ab-recheck=regressed")
    result.assert_outcomes(passed=2, failed=1)
    assert ab["test_faster"]["verdict"] == "improved" and ab["test_faster"]["recheck"] is None
    assert ab["test_offset"]["recheck"]["outcome"] == "not confirmed"


@pytest.mark.parametrize(
    ("given", "said"),
    [("--inferscope-ab-recheck=fresh", "--inferscope-ab-recheck='fresh' is not one of the choices: set the A/B "
      "re-check to changed, regressed or off, e.g. --inferscope-ab-recheck=off."),
     ("--inferscope-ab-pairs=three", "--inferscope-ab-pairs='three' is not one of the choices: set the A/B pairs to "
      "here or twins, e.g. --inferscope-ab-pairs=twins.")],
)  # fmt: skip
def test_a_bad_value_is_a_usage_error_naming_the_choices(pytester: pytest.Pytester, given: str, said: str) -> None:
    two_commits(pytester.path, BODY.format(changed=0.002, faster=0.02), BODY.format(changed=0.002, faster=0.02))
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-ab=HEAD~1", given)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{said}*"])
    assert len(git(pytester.path, "worktree", "list").strip().splitlines()) == 1  # refused before any worktree
