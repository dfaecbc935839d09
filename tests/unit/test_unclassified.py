"""`unclassified` is no class: the reports name no confidence for it, and say why no class was named.

Its confidence was 1 - the largest share a class explains (1.0 from the what-if table), so a test whose rules found
nothing read 'unclassified (confidence 100%)', as if the plugin were sure of nothing.
"""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from test_analyzer import build
from test_reporters import cpu_only_failing_result

from pytest_inferscope.analyzer import analyze, unclassified_reason
from pytest_inferscope.checks import evaluate
from pytest_inferscope.cli.common import summary_lines as cli_lines
from pytest_inferscope.merger import merge
from pytest_inferscope.reporters.folder import append_step_summary
from pytest_inferscope.reporters.html import render_html_index, write_html_report
from pytest_inferscope.reporters.junit import junit_properties
from pytest_inferscope.reporters.markdown import render_index, render_report
from pytest_inferscope.reporters.terminal import summary_lines
from pytest_inferscope.results import UNCLASSIFIED, Analysis, Finding, TestResult

WHY = "no class explains 30% of the measured time (the most: cpu_bound, 22%)"


def _unclassified() -> TestResult:
    r = cpu_only_failing_result()
    r.analysis.bottleneck, r.analysis.confidence, r.analysis.unclassified_reason = UNCLASSIFIED, 0.78, WHY
    return r


def test_the_reason_names_the_largest_share_or_that_no_finding_points_to_a_class() -> None:
    def finding(cause: str | None, share: float) -> Finding:
        return Finding("r", "t", "s", cause, share, 0.9)

    assert unclassified_reason([finding("cpu_bound", 0.22), finding("gpu_bound", 0.1), finding(None, 0.8)]) == WHY
    assert unclassified_reason([finding(None, 0.8)]) == "no finding points to a class"
    assert unclassified_reason([]) == "no finding points to a class"


def test_a_finding_that_does_not_measure_its_time_is_named_as_such_not_as_zero() -> None:
    """A custom rule with a `cause:` and no `share:` (share_measured false) read "(the most: memory_bound, 0%)", as if
    it had measured none of the time: it is named as a rule that points to a class without measuring its time."""
    unmeasured = Finding("my_rule", "t", "s", "memory_bound", 0.0, 0.9, share_measured=False)
    only = unclassified_reason([unmeasured])
    assert only == (
        "no finding that measures its time points to a class; my_rule (memory_bound) points to a class without "
        "measuring its time"
    )
    both = unclassified_reason([unmeasured, Finding("r", "t", "s", "cpu_bound", 0.22, 0.9)])
    assert both.startswith(WHY + "; my_rule (memory_bound) points") and ", 0%" not in both


def test_the_analysis_says_why_it_named_no_class() -> None:
    a = analyze(merge(build(cpu_busy=0.2)))  # 20% on CPU, nothing else: no rule names a class
    assert a.bottleneck == UNCLASSIFIED and a.unclassified_reason == "no finding points to a class"
    named = analyze(merge(build(cpu_busy=0.97)))
    assert named.bottleneck == "cpu_bound" and named.unclassified_reason == ""


def test_unclassified_by_the_what_if_table_gives_its_verdict(monkeypatch: pytest.MonkeyPatch) -> None:
    import pytest_inferscope.analyzer as analyzer

    verdict = "no simulated change saves 10% of the round (a CUDA graph (launch overhead removed) saves 4%)"

    class Table:  # what diagnose() gives where no simulated fix saves enough
        measured_ms = replay_ms = 1.0
        replay_error, rounds, rows, errors = 0.0, 3, [], []

        def classify(self) -> tuple[str, float, str]:
            return UNCLASSIFIED, 1.0, verdict

        def suggestions(self) -> list:
            return []

    monkeypatch.setattr(analyzer, "diagnose", lambda ctx, extra, added: (Table(), ""))
    a = analyze(merge(build(cpu_busy=0.2)))
    assert (a.bottleneck, a.whatif_replay["decided_by"], a.unclassified_reason) == (UNCLASSIFIED, "whatif", verdict)
    md = render_report(TestResult("t.py::t", "t", "passed", "pass", 10, 1, cpu_only_failing_result().latency, a))
    assert f"**unclassified**: {verdict}." in md and md.count(verdict) == 1  # not again as a 'Simulated:' line


def test_report_md_and_html_say_why_and_no_confidence() -> None:
    r = _unclassified()
    md = render_report(r)
    assert f"**unclassified**: {WHY}" in md
    assert "unclassified** (confidence" not in md
    buf = io.BytesIO()
    write_html_report(r, None, buf)
    page = buf.getvalue().decode()
    assert "<b>unclassified</b> (" not in page and "Bottleneck: unclassified <small>(confidence" not in page
    assert WHY in page
    # a class keeps its confidence
    assert "**cpu_bound** (confidence 90%)" in render_report(cpu_only_failing_result())


def test_tables_show_unclassified_without_a_percentage(tmp_path: Path) -> None:
    r, c = _unclassified(), cpu_only_failing_result()
    c.nodeid = "tests/test_other.py::test_other"
    line = next(x for x in summary_lines([r, c]) if "test_cpu_path" in x)
    assert " unclassified " in line and "unclassified (" not in line
    assert "cpu_bound (90%)" in "\n".join(summary_lines([r, c]))
    index_md = render_index([r, c], {})
    assert "| unclassified |" in index_md and "unclassified (" not in index_md and "cpu_bound (90%)" in index_md
    index_html = render_html_index([r, c], {})
    assert "<td>unclassified</td>" in index_html and "<td>cpu_bound (90%)</td>" in index_html
    summary = tmp_path / "summary.md"
    append_step_summary(summary, [r, c], None)
    text = summary.read_text()
    assert " unclassified |" in text and "unclassified (" not in text and "cpu_bound (90%)" in text


def test_junit_says_why_unclassified_beside_the_number_it_always_gave() -> None:
    # The property names only ever gain entries (junit.py): inferscope.confidence stays, its number as before.
    props = dict(junit_properties(_unclassified(), None))
    assert props["inferscope.bottleneck"] == "unclassified" and props["inferscope.unclassified_reason"] == WHY
    assert props["inferscope.confidence"] == "0.78"
    assert "inferscope.unclassified_reason" not in dict(junit_properties(cpu_only_failing_result(), None))


def test_a_check_and_the_cli_say_why_not_a_confidence(tmp_path: Path) -> None:
    r = _unclassified()
    checks = evaluate({"expect_bottleneck": "gpu_bound"}, r.analysis, r.latency, gpu_collected=False)
    (msg,) = [c.message for c in checks if c.key == "expect_bottleneck"]
    assert msg.startswith(f"expect_bottleneck: classified unclassified ({WHY}), expected gpu_bound.")
    assert "confidence" not in msg.split("expected")[0]
    lines = cli_lines(r, tmp_path / "report.md")
    assert f"  bottleneck:     unclassified ({WHY})" in lines


def test_report_json_keeps_the_confidence_and_adds_the_reason() -> None:
    r = _unclassified()
    data = r.to_dict()
    assert data["analysis"]["confidence"] == 0.78 and data["analysis"]["unclassified_reason"] == WHY
    del data["analysis"]["unclassified_reason"]  # a report.json written before the field
    assert TestResult.from_dict(data).analysis.unclassified_reason == ""
    assert Analysis.from_dict({"bottleneck": "cpu_bound", "confidence": 0.5}).unclassified_reason == ""
