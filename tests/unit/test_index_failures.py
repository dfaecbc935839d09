"""index.md and index.html of a suite of many tests: the tests that failed, each in a line linked to its report, above
the table, as the job summary lists them, so that one failure among 300 rows is found without reading them all."""

from __future__ import annotations

from pytest_inferscope.reporters.html import render_html_index
from pytest_inferscope.reporters.markdown import render_index
from pytest_inferscope.results import Analysis, CheckResult, LatencyStats, TestResult


def _result(nodeid: str, checks: list[CheckResult] | None = None) -> TestResult:
    slug = nodeid.replace("::", "__").replace("/", "_").replace("[", "_").rstrip("]")
    r = TestResult(nodeid, slug, "passed", "pass", 3, 1, LatencyStats.from_samples([1.0, 1.1]),
                   Analysis("cpu_bound", 0.85), checks=checks or [])  # fmt: skip
    r.files = {"md": f"{slug}/report.md", "html": f"{slug}/report.html", "json": f"{slug}/report.json"}
    if checks:
        r.verdict = "fail"
    return r


SLOW = CheckResult("max_latency_ms", "failed", 10.0, 12.1, "max_latency_ms: median latency 12.1 ms exceeds limit "
                   "10.0 ms. Evidence: ...", "median 12.1 ms > 10.0 ms")  # fmt: skip


def _suite() -> list[TestResult]:
    cut = _result("tests/test_m.py::test_raises")
    cut.verdict, cut.partial_reason = "partial", "ValueError: boom\n  more"
    ok = [_result(f"tests/test_m.py::test_ok[{i}]") for i in range(30)]
    return [*ok, _result("tests/test_m.py::test_slow", [SLOW]), cut]


def test_index_md_lists_the_failed_tests_above_the_table_with_their_reason() -> None:
    lines = render_index(_suite(), {}).splitlines()
    failed = (
        "- [tests/test_m.py::test_slow](tests_test_m.py__test_slow/report.md): max_latency_ms: median 12.1 ms > 10.0 ms"
    )
    partial = "- [tests/test_m.py::test_raises](tests_test_m.py__test_raises/report.md): partial: ValueError: boom"
    assert failed in lines and partial in lines, "\n".join(lines[:12])
    table = lines.index(next(line for line in lines if line.startswith("| Test |")))
    assert lines.index(failed) < table and lines.index(partial) < table


def test_index_html_lists_the_failed_tests_above_the_table() -> None:
    html = render_html_index(_suite(), {})
    item = '<a href="tests_test_m.py__test_slow/report.html">tests/test_m.py::test_slow</a>: max_latency_ms: median'
    assert item in html and html.index(item) < html.index('<table id="tests">')


def test_an_index_with_no_failure_has_no_list() -> None:
    ok = [_result(f"tests/test_m.py::test_ok[{i}]") for i in range(3)]
    assert "- [" not in render_index(ok, {}) and "failed:" not in render_html_index(ok, {})
