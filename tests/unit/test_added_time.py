"""What the plugin added to a test's time (`TestResult.added`): computed from the collection's meta, summed and said."""

from __future__ import annotations

import pytest

from pytest_inferscope.checks import Plan
from pytest_inferscope.postprocess import add_time, added_time
from pytest_inferscope.reporters.fmt import fmt_added, sum_added
from pytest_inferscope.reporters.terminal import added_time_line
from pytest_inferscope.results import Analysis, LatencyStats, TestResult

MS = 1_000_000


def _rows(*kinds_ms: tuple[str, float]) -> list[dict[str, object]]:
    return [{"index": i, "kind": kind, "wall_ns": int(ms * MS)} for i, (kind, ms) in enumerate(kinds_ms)]


def test_the_rounds_asked_for_the_rounds_added_and_the_time_outside_them() -> None:
    # 1 warm-up and 2 measured rounds asked for; auto ran one more warm-up, the speed probe one more measured round,
    # and a profile and a trace round ran after the measured ones: 4 rounds more, 35 ms.
    rows = _rows(("WARMUP", 10), ("WARMUP", 11), ("MEASURED", 5), ("MEASURED", 6), ("MEASURED", 7),
                 ("PROFILE", 8), ("TRACE", 9))  # fmt: skip
    # 56 ms of rounds in a 60 ms collection, 1 ms to start it and 2 to stop it: 7 ms outside the rounds
    meta = {"rounds": rows, "wall_ns": 60 * MS, "start_ns": 1 * MS, "stop_ns": 2 * MS}
    added = added_time(meta, Plan("t", rounds=2, warmup=1), analysis_ns=3 * MS)
    assert added == {
        "asked_ms": 21.0,
        "extra_rounds": 4,
        "extra_rounds_ms": 35.0,
        "outside_rounds_ms": 7.0,
        "analysis_ms": 3.0,
        "added_ms": 45.0,
    }


def test_a_collection_that_ran_only_what_was_asked_adds_its_outside_time_and_analysis() -> None:
    meta = {"rounds": _rows(("WARMUP", 2), ("MEASURED", 1), ("MEASURED", 1)), "wall_ns": int(4.5 * MS)}
    added = added_time(meta, Plan("t", rounds=2, warmup=1), analysis_ns=MS // 2)
    # no start or stop time in the meta (a raw.npz from before they were kept): the gaps alone
    assert added["extra_rounds"] == 0 and added["extra_rounds_ms"] == 0.0
    assert (added["asked_ms"], added["outside_rounds_ms"], added["added_ms"]) == (4.0, 0.5, 1.0)


@pytest.mark.parametrize("meta", [{}, {"rounds": []}, {"wall_ns": 5}, {"rounds": "?", "wall_ns": 5}])
def test_a_trace_that_does_not_say_how_it_was_collected_adds_nothing_known(meta: dict[str, object]) -> None:
    assert added_time(meta, Plan("t", rounds=2, warmup=1), analysis_ns=MS) == {}


def _result(added: dict[str, float]) -> TestResult:
    return TestResult("t.py::t", "t", "passed", "pass", 2, 1, LatencyStats([1.0]), Analysis("unclassified", 0.0),
                      added=dict(added))  # fmt: skip


def test_time_spent_later_adds_to_the_result_where_it_says_what_was_added() -> None:
    result = _result({"asked_ms": 20.0, "analysis_ms": 1.0, "added_ms": 3.0})
    add_time(result, "reports_ms", int(1.5 * MS))
    add_time(result, "reports_ms", int(0.25 * MS))
    assert result.added["reports_ms"] == 1.75 and result.added["added_ms"] == 4.75
    unknown = _result({})
    add_time(unknown, "reports_ms", MS)
    assert unknown.added == {}  # nothing known to add to


def test_one_test_and_a_session_in_words() -> None:
    one = {"asked_ms": 80.0, "extra_rounds": 1, "extra_rounds_ms": 8.1, "outside_rounds_ms": 2.3,
           "analysis_ms": 2.0, "added_ms": 12.4}  # fmt: skip
    assert fmt_added(one) == (
        "12.4 ms (15.5% over the 80.0 ms of the calls asked for): 1 more round 8.10 ms, outside the rounds 2.30 ms, "
        "analysis 2.00 ms"
    )
    quiet = {"asked_ms": 1000.0, "extra_rounds": 0, "extra_rounds_ms": 0.0, "outside_rounds_ms": 1500.0,
             "analysis_ms": 500.0, "added_ms": 2400.0, "reports_ms": 400.0}  # fmt: skip
    total, n = sum_added([_result(one), _result(quiet), _result({})])
    assert n == 2 and total["added_ms"] == 2412.4 and total["extra_tests"] == 1
    assert fmt_added(total, n) == (
        "2.41 s to the 2 profiled tests (223.4% over the 1.08 s of the calls asked for): 1 more round in 1 of them "
        "8.10 ms, outside the rounds 1.50 s, analysis 502.0 ms, writing reports 400.0 ms"
    )
    trivial = {"asked_ms": 0.004, "outside_rounds_ms": 0.7, "analysis_ms": 1.0, "added_ms": 1.7}
    assert (
        fmt_added(trivial)
        == "1.70 ms (425x the 0.004 ms of the calls asked for): outside the rounds 0.700 ms, analysis 1.00 ms"
    )
    assert fmt_added(trivial, 1).startswith("1.70 ms to the 1 profiled test (425x the 0.004 ms of the calls asked for)")
    (line,) = added_time_line([_result(one), _result(quiet)], indexed=True)
    assert line.startswith("inferscope: the plugin added 2.41 s to the 2 profiled tests")
    assert line.endswith(' (per test: "added" in index.json)')
    (unindexed,) = added_time_line([_result(one), _result(quiet)], indexed=False)  # no --inferscope-report
    assert "index.json" not in unindexed and line.startswith(unindexed)
    assert added_time_line([_result({})], indexed=True) == []


def test_the_first_test_of_a_process_adds_what_loading_the_plugin_took() -> None:
    rows = _rows(("WARMUP", 2), ("MEASURED", 1), ("MEASURED", 1))
    meta = {"rounds": rows, "wall_ns": 5 * MS, "load_ns": 250 * MS}  # the session's preparation, charged to it
    added = added_time(meta, Plan("t", rounds=2, warmup=1), analysis_ns=MS)
    assert added["load_ms"] == 250.0 and added["added_ms"] == 1.0 + 1.0 + 250.0
    later = added_time({**meta, "load_ns": 0}, Plan("t", rounds=2, warmup=1), analysis_ns=MS)
    assert "load_ms" not in later and later["added_ms"] == 2.0  # the tests after it say nothing of loading
    assert fmt_added(added).endswith("analysis 1.00 ms, loading the plugin 250.0 ms (once a process)")
    total, n = sum_added([_result(added), _result(later)])
    assert total["load_ms"] == 250.0 and "loading the plugin 250.0 ms (once a process)" in fmt_added(total, n)
