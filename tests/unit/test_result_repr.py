"""A result shown as a notebook or a print shows it: one short line that says what was measured."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_inferscope import measure, profile
from pytest_inferscope.results import Analysis, CheckResult, Finding, LatencyStats, Suggestion, TestResult
from pytest_inferscope.units import fmt_ms


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSCOPE_GPU", "off")


def test_a_measured_result_shows_as_one_short_line() -> None:
    # It was the dataclass's repr: 4.8 kB on one line for measure(lambda: None), every metric and breakdown part.
    result = measure(sum, range(1000), rounds=3, warmup=1, cpu="off")
    shown = repr(result)
    assert "\n" not in shown and len(shown) < 200, shown
    median = f"{fmt_ms(result.latency.median)} ms"  # as the summary writes it
    assert shown == f"<TestResult 'sum': pass, median {median} of 3 rounds (warm-up 1), bottleneck unclassified>"
    assert str(result) == shown


def test_a_partial_or_failing_result_says_so() -> None:
    result = TestResult(
        nodeid="predict",
        slug="predict",
        outcome="failed",
        verdict="partial",
        rounds=5,
        warmup=1,
        latency=LatencyStats.from_samples([2.0, 4.0], [9.0]),
        analysis=Analysis(bottleneck="cpu_bound", confidence=0.9),
        checks=[CheckResult("max_latency_ms", "failed", 1.0, 3.0, "over")],
        partial_reason="ValueError: round 3 boom " + "x" * 300,
    )
    shown = repr(result)
    assert shown.startswith(
        "<TestResult 'predict': partial, median 3.00 ms of 2 rounds (warm-up 1), bottleneck cpu_bound, failed "
        "max_latency_ms, raised ValueError: round 3 boom xxx"
    )
    assert shown.endswith("…>") and len(shown) < 300


def test_a_result_without_a_measured_round_says_so() -> None:
    empty = TestResult(
        "f", "f", "failed", "partial", 3, 0, LatencyStats.from_samples([]), Analysis("unclassified", 1.0)
    )
    assert repr(empty).startswith("<TestResult 'f': partial, no measured round completed, bottleneck unclassified")


def test_what_profile_yields_shows_its_name_and_result() -> None:
    # It was "<pytest_inferscope.api.Profile object at 0x7f...>", in the block and after it.
    with profile("forward", cpu="off") as p:
        assert repr(p) == "<Profile 'forward': running>"
    assert repr(p) == f"<Profile 'forward': {p.result!r}>"


@pytest.mark.parametrize(("median", "shown"), [(1234.5, "1234.5"), (27.71, "27.7"), (0.000562, "<0.001")])
def test_the_median_is_shown_without_an_exponent(median: float, shown: str) -> None:
    # A 1.2 s median read "median 1.23e+03 ms".
    result = TestResult("f", "f", "passed", "pass", 1, 0, LatencyStats.from_samples([median]), Analysis("cpu_bound", 1))
    assert f"median {shown} ms of 1 round," in repr(result)


def test_an_analysis_and_its_findings_show_as_one_short_line_each() -> None:
    # `result.analysis` in a notebook was the dataclass's repr: every metric, breakdown part and evidence, 3-5 kB.
    finding = Finding(
        "sync_stall", "Sync-bound: host and GPU take turns", "blocked " * 200, "sync_bound", 0.42, 0.9, {"x": 1}
    )
    fix = Suggestion("Remove per-step synchronisations: keep values on the GPU " + "y" * 200, "why", 5.46, "whatif")
    metrics: dict[str, float | None] = {f"m{i}": i for i in range(99)}
    analysis = Analysis("sync_bound", 0.87, findings=[finding], suggestions=[fix], metrics=metrics)
    shown = repr(analysis)
    assert "\n" not in shown and len(shown) < 240, shown
    assert shown.startswith(
        "<Analysis: sync_bound (confidence 87%), 1 finding, top suggestion: Remove per-step synchronisations"
    )
    assert shown.endswith("… (saves ~5.46 ms per round)>"), shown
    assert repr(finding) == "<Finding sync_stall: Sync-bound: host and GPU take turns (sync_bound, 42% of the time)>"
    unclassified = Analysis("unclassified", 1.0, unclassified_reason="no simulated change saves 5% of the round")
    assert repr(unclassified) == (
        "<Analysis: unclassified (no simulated change saves 5% of the round), 0 findings, no suggestion>"
    )


def test_a_notebook_shows_a_result_as_a_short_markdown_summary(tmp_path: Path) -> None:
    # Jupyter showed the one line of repr; `_repr_markdown_` (IPython calls it) gives the figures, the failed
    # thresholds, the top suggestions and where the report files are, with the names' Markdown escaped.
    result = TestResult(
        nodeid="test_a.py::test_x[*bs_1*]",
        slug="s",
        outcome="passed",
        verdict="fail",
        rounds=2,
        warmup=1,
        latency=LatencyStats.from_samples([2.0, 4.0], [9.0]),
        analysis=Analysis(
            bottleneck="cpu_bound",
            confidence=0.9,
            suggestions=[Suggestion(f"Do thing_{i} | now", "why", saving_ms=1.5 - i / 10) for i in range(5)],
        ),
        checks=[CheckResult("max_latency_ms", "failed", 1.0, 3.0, "over", short="median 3.00 ms > 1.00 ms")],
    )
    md = result._repr_markdown_()
    lines = md.splitlines()
    assert lines[0] == (
        r"**test\_a.py::test\_x\[\*bs\_1\*\]**: fail, median 3.00 ms of 2 rounds (warm-up 1), IQR 1.00 ms; "
        "bottleneck **cpu_bound** (confidence 90%)"
    )
    assert r"- failed max\_latency\_ms: median 3.00 ms > 1.00 ms" in lines
    shown = [line for line in lines if line.startswith("  - ")]
    assert shown == [rf"  - Do thing\_{i} \| now (saves ~{fmt_ms(1.5 - i / 10)} ms per round)" for i in range(3)]
    assert "report" not in md  # none written
    result.report_dir = tmp_path
    result.files = {"md": "s/report.md", "html": "s/report.html"}
    assert result._repr_markdown_().splitlines()[-1] == f"- report: `{tmp_path / 's' / 'report.md'}` (and report.html)"
