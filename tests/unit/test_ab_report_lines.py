"""Who takes an A/B test's turns, as report.md, report.html and the summary's notes say it: this pytest process
and the twin, or with --inferscope-ab-pairs=twins this checkout's twin and the twin (ab.between)."""

from __future__ import annotations

import io

import pytest

from pytest_inferscope.ab.notes import hashseed_note
from pytest_inferscope.ab.paired import ABVerdict, judge
from pytest_inferscope.reporters.html import write_html_report
from pytest_inferscope.reporters.markdown import render_report
from pytest_inferscope.results import Analysis, LatencyStats, TestResult


def _result(between: str, core: int | None) -> TestResult:
    new = [10.0 + 0.01 * i for i in range(12)]
    ref = [10.0 + 0.01 * (11 - i) for i in range(12)]
    look = judge(new, ref, max_regression=0.05, alpha=0.01, n_looks=3, last=True)
    ab = ABVerdict("t.py::t", look.verdict, look.reason, "HEAD~1", look.ratio, look.ci_low, look.ci_high,
                   look.p_value, look.pairs, 1, 10.05, 10.05, new, ref, core=core, between=between)  # fmt: skip
    r = TestResult("t.py::t", "t", "passed", "pass", 12, 2, LatencyStats.from_samples(new), Analysis("cpu_bound", 0.9))
    r.ab = ab.to_dict()
    return r


def _html(r: TestResult) -> str:
    out = io.BytesIO()
    write_html_report(r, None, out)
    return out.getvalue().decode()


@pytest.mark.parametrize("core", [3, None])
def test_the_reports_name_the_processes_that_took_the_turns(core: int | None) -> None:
    here, twins = render_report(_result("here", core)), render_report(_result("twins", core))
    assert "over 12 pairs (1 look)" in here and "over 12 pairs (1 look)" in twins
    if core is None:
        assert "pinned" not in here and "pinned" not in twins
        assert "(1 look), between this checkout's twin and the twin." in twins
        assert "between this checkout's twin" not in here
    else:
        assert "(1 look), both processes pinned to CPU core 3." in here
        assert "(1 look), this checkout's twin and the twin pinned to CPU core 3." in twins
    assert "between this checkout's twin and the twin" in _html(_result("twins", core))
    assert "between this checkout's twin and the twin" not in _html(_result("here", core))


def test_a_report_json_written_before_the_twins_renders_as_this_process_and_its_twin() -> None:
    """report.json files written before 2026-11-30 have no `between` (all "here"), nor, before 2026-11-29,
    `not_compared`, `recheck`, `busy` or `clocks`: a result loaded from one (`load_report`, then `write_report`)
    renders, as the reports read it (StrictUndefined: a key the template asks for and the dict lacks would raise)."""
    old = _result("here", 3)
    for key in ("between", "not_compared", "recheck", "busy", "clocks"):
        del old.ab[key]
    assert "(1 look), both processes pinned to CPU core 3." in render_report(old)
    assert "between this checkout's twin" not in _html(old)


@pytest.mark.parametrize(
    ("twins", "workers", "who"),
    [
        (False, 0, "this process and its twin hash"),
        (True, 0, "this process and its twins hash"),
        (False, 2, "each xdist worker and its twin hash"),
        (True, 2, "each xdist worker and its twins hash"),
    ],
)
def test_the_hash_seed_note_names_the_processes_that_take_the_turns(
    monkeypatch: pytest.MonkeyPatch, twins: bool, workers: int, who: str
) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    (note,) = hashseed_note(twins=twins, workers=workers)
    assert f"PYTHONHASHSEED is not set, so {who} strings differently" in note
    assert note.endswith("Set PYTHONHASHSEED=0 for A/B runs: every twin inherits it.")
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    assert hashseed_note(twins=twins, workers=workers) == []
