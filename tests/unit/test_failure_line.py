"""The one-line reason of a test the plugin fails (reporters/failure.py): what pytest's short summary, `--tb=line` and
JUnit's failure message show, in a line that fits beside a short test id in 80 columns."""

from __future__ import annotations

import math

import pytest

from pytest_inferscope.ab.paired import ABVerdict, judge
from pytest_inferscope.reporters.failure import failure_longrepr, failure_text
from pytest_inferscope.results import Analysis, CheckResult, LatencyStats, TestResult
from pytest_inferscope.stats import compare_metric

#: pytest's short summary line of a test with a short id, before the reason: the threshold one's test (test_plugin.py,
#: test_the_one_line_reason_names_the_threshold_crossed) fits its line in 80 columns beside it.
SHORT_SUMMARY = "FAILED test_x.py::test_y - "


def _ab(ref: str, slower: float, metrics: bool = False) -> dict[str, object]:
    new = [10.0 * slower + 0.01 * i for i in range(12)]
    ref_ms = [10.0 + 0.01 * i for i in range(12)]
    look = judge(new, ref_ms, max_regression=0.05, alpha=0.01, n_looks=3, last=True)
    changes = [compare_metric("gpu.kernel_launches_per_round", 120, 240, 0.0)] if metrics else []
    verdict, reason = look.verdict, look.reason
    if metrics and verdict != "regressed":  # as ab.paired.verdict_from
        verdict, reason = "regressed", f"1 deterministic metric(s) rose; latency: {reason}"
    return ABVerdict(
        "test_x.py::test_y",
        verdict,
        reason,
        ref,
        look.ratio,
        look.ci_low,
        look.ci_high,
        look.p_value,
        look.pairs,
        3,
        float(sum(new) / 12),
        float(sum(ref_ms) / 12),
        new,
        ref_ms,
        core=1,
        metric_changes=[c for c in changes if c is not None],
    ).to_dict()


def _result(ab: dict[str, object], failed: list[CheckResult] | None = None) -> TestResult:
    r = TestResult("test_x.py::test_y", "t", "failed", "fail", 12, 2, LatencyStats.from_samples([10.0, 11.0]),
                   Analysis("cpu_bound", 0.9), checks=failed or [])  # fmt: skip
    r.ab = ab
    return r


@pytest.mark.parametrize("ref", ["HEAD~1 (3f2a9c1d0e)", "origin/main (3f2a9c1d0e)"])
def test_an_ab_regression_gives_a_one_line_reason_that_fits_80_columns(ref: str) -> None:
    """The A/B's reason was its message's first line, 150 characters and more on CI, where pytest does not trim it
    ('inferscope A/B: Performance regression against HEAD~1 (3f2a9c1d0e): +29.8% slower over 12 pairs (signed-rank
    p=0.00024 at alpha 0.01/3 look(s)), beyond the allowed 0.05.'): now the change and the ref, as the thresholds'."""
    ab = _ab(ref, 1.3)
    assert ab["verdict"] == "regressed"
    text = failure_text(_result(ab))
    line = failure_longrepr(text, ("test_x.py", 3, "test_y")).reprcrash.message
    name = ref.split(" (")[0]
    assert line == f"inferscope A/B: +{100 * (ab['ratio'] - 1):.1f}% slower vs {name}", line  # type: ignore[operator]
    assert len(SHORT_SUMMARY + line) <= 80, line
    assert "Performance regression against " + ref in text and "pairs in alternating order" in text  # the evidence


def test_an_ab_regression_of_a_metric_names_the_metric() -> None:
    ab = _ab("HEAD~1 (3f2a9c1d0e)", 1.0, metrics=True)
    assert ab["verdict"] == "regressed" and math.isfinite(ab["ratio"])  # type: ignore[arg-type]
    line = failure_text(_result(ab)).partition("\n")[0]
    assert line == "inferscope A/B: kernel_launches +100.0% vs HEAD~1", line
    assert len(SHORT_SUMMARY + line) <= 80


def test_an_ab_regression_and_a_crossed_threshold_count_the_threshold() -> None:
    crossed = CheckResult("max_latency_ms", "failed", 1.0, 13.0, "max_latency_ms: median latency 13.0 ms ...",
                          "median 13.0 ms > 1.00 ms")  # fmt: skip
    text = failure_text(_result(_ab("HEAD~1 (3f2a9c1d0e)", 1.3), [crossed]))
    assert text.partition("\n")[0].endswith("% slower vs HEAD~1 (+1 more)"), text
    assert "inferscope: max_latency_ms: median 13.0 ms > 1.00 ms" in text.splitlines()
