"""--inferscope-ab-pairs=twins end to end: the pairs are taken by a twin of this checkout and the twin of the ref,
so a test slower in this pytest process alone (an offset of the process's own) reads unchanged from its first pairs,
while this process's report keeps its own rounds; a real slowdown still fails, confirmed by a fresh pair; a test that
fails in this checkout's twin alone is inconclusive, and one it cannot start there is paired by this process as
without the option (docs/ab.md, "The pairs between two twins")."""

from __future__ import annotations

import pytest
from gitrepo import ab_reports, git, two_commits
from test_ab_fresh_pair import BODY

#: A test that raises in this checkout's twin alone: the partner runs in the folder pytest runs in, the ref's twin in
#: the worktree.
RAISES_IN_PARTNER = """

@pytest.mark.inferscope(rounds=10, warmup=1, max_regression=0.2)
def test_partner_raises():
    if not MAIN and os.getcwd() == HERE:
        raise RuntimeError("only in this checkout's twin")
    spin(0.002)


@pytest.fixture
def not_in_partner():
    if not MAIN and os.getcwd() == HERE:
        pytest.skip("a fixture that skips in this checkout's twin alone")


@pytest.mark.inferscope(rounds=10, warmup=1, max_regression=0.2)
def test_partner_skips(not_in_partner):
    spin(0.002)
"""


def _run(pytester: pytest.Pytester, *args: str) -> tuple[pytest.RunResult, dict[str, dict]]:
    """The A/B run of the two commits with the pairs between two twins, and each test's report.json (`ab` and the
    latency this process measured)."""
    partner = f"\nHERE = {str(pytester.path)!r}" + RAISES_IN_PARTNER
    first, second = BODY.format(changed=0.002, faster=0.02), BODY.format(changed=0.02, faster=0.002)
    root = two_commits(pytester.path, first + partner, second + partner)
    out = root.parent / "out"
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1",
                                "--inferscope-ab-pairs=twins", f"--inferscope-report={out}", *args)  # fmt: skip
    return result, ab_reports(root, out)


@pytest.mark.parametrize("xdist", [False, True], ids=["one process", "xdist"])
def test_the_pairs_between_two_twins_hold_no_offset_of_this_process(pytester: pytest.Pytester, xdist: bool) -> None:
    result, reports = _run(pytester, *(["-n", "1"] if xdist else []))
    result.assert_outcomes(passed=4, failed=1)
    offset, changed, faster = (reports[n]["ab"] for n in ("test_offset", "test_changed", "test_faster"))
    # 10x slower in this process alone: the twins read the same code at the same speed, and nothing is re-checked
    assert offset["verdict"] == "unchanged" and offset["recheck"] is None and offset["between"] == "twins"
    assert 0.8 < offset["ratio"] < 1.25 and offset["new_median_ms"] < 5
    assert reports["test_offset"]["latency"]["median"] > 15  # this process's report: its own rounds, ~20 ms
    # a real slowdown and a real speed-up, each read by the fresh pair too
    assert changed["verdict"] == "regressed" and changed["recheck"]["outcome"] == "confirmed"
    assert changed["ratio"] > 5 and changed["between"] == "twins"
    assert faster["verdict"] == "improved" and faster["recheck"]["outcome"] == "confirmed"
    partner = reports["test_partner_raises"]["ab"]
    assert partner["verdict"] == "inconclusive", partner
    assert partner["reason"].startswith("the test failed in this checkout's twin (RuntimeError: only in this "), partner
    # a test this checkout's twin cannot start: its pairs are this process's and the twin's, as without the option
    skips = reports["test_partner_skips"]["ab"]
    assert skips["verdict"] == "unchanged" and skips["between"] == "here" and skips["pairs"] >= 10, skips
    assert skips["notes"] == [
        "the test did not start in this checkout's twin (a fixture that skips in this checkout's twin alone): the "
        "pairs are this pytest process's and the twin's"
    ]
    out = result.stdout.str()
    assert (
        "inferscope A/B: 1 test this checkout's twin could not start, paired by this pytest process and the twin "
        "instead (--inferscope-ab-pairs=twins; each verdict's note says why): test_x.py::test_partner_skips"
    ) in out
    assert "pairs in alternating order between this checkout's twin and the twin, pinned to CPU core " in out
    assert "\n  fresh pairs (two more processes, started alike): median pair ratio " in out
    if xdist:
        assert "takes turns with its own twin (through its own twin of this checkout, with its own rounds " in out
    else:
        assert "inferscope A/B: this checkout's twin against the twin at HEAD~1 (" in out
    assert any(line.startswith("FAILED test_x.py::test_changed - inferscope A/B: +") for line in result.outlines)


def test_tests_this_checkouts_twin_cannot_collect_stop_the_session_saying_what_it_said(
    pytester: pytest.Pytester,
) -> None:
    conftest = (
        "import os\n"
        f"if os.environ.get('INFERSCOPE_AB_TWIN') and os.getcwd() == {str(pytester.path)!r}:\n"
        "    raise ImportError('a module only this checkout lacks in its twin')\n"
    )
    (pytester.path / "conftest.py").write_text(conftest)
    body = BODY.format(changed=0.002, faster=0.02)
    two_commits(pytester.path, body, body)
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-ab=HEAD~1", "--inferscope-ab-pairs=twins")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "--inferscope-ab-pairs=twins: this checkout's twin, a second pytest process of this checkout, " in err, err
    assert "a module only this checkout lacks in its twin" in err and "Run without --inferscope-ab-pairs=twins" in err
    assert len(git(pytester.path, "worktree", "list").strip().splitlines()) == 1  # the worktree is gone
