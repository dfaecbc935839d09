"""The host memory column of the terminal summary, index.md and index.html: shown where memory matters (a test with a
host memory threshold, or whose rounds took 1 MB or more), the figure the threshold compared; left out otherwise, so
a suite that takes no memory keeps its table as narrow as before. index.json gives every test's figures, as numbers."""

from __future__ import annotations

import math

from pytest_inferscope.reporters import index_entry
from pytest_inferscope.reporters.html import render_html_index
from pytest_inferscope.reporters.markdown import render_index
from pytest_inferscope.reporters.terminal import display_width, summary_lines
from pytest_inferscope.results import Analysis, CheckResult, LatencyStats, TestResult


def _result(nodeid: str, peak: float, start: float, checks: list[CheckResult] | None = None) -> TestResult:
    metrics: dict[str, float | None] = {"mem.rss_peak_mb": peak, "mem.rss_start_mb": start}
    r = TestResult(nodeid, nodeid.replace("::", "__"), "passed", "pass", 3, 1, LatencyStats.from_samples([1.0, 1.1]),
                   Analysis("cpu_bound", 0.85, metrics=metrics), checks=checks or [])  # fmt: skip
    if any(c.status == "failed" for c in r.checks):
        r.verdict = "fail"
    return r


ADDED = CheckResult(
    "max_host_memory_added_mb", "failed", 5.0, 60.0, "max_host_memory_added_mb: ...", "60.0 MB > 5.0 MB"
)
PEAK = CheckResult("max_host_memory_mb", "failed", 500.0, 612.3, "max_host_memory_mb: ...", "612.3 MB > 500.0 MB")


def _suite() -> list[TestResult]:
    small = [_result(f"tests/test_m.py::test_small[{i}]", 67.5, 67.2) for i in range(30)]
    return [*small, _result("tests/test_m.py::test_grows", 127.2, 67.2, [ADDED]),
            _result("tests/test_m.py::test_big", 612.3, 300.0, [PEAK])]  # fmt: skip


def test_a_memory_failing_test_shows_the_figure_its_threshold_compared() -> None:
    lines = summary_lines(_suite())
    assert "host memory" in lines[0], lines[0]
    grows = next(line for line in lines if "test_grows" in line)
    big = next(line for line in lines if "test_big" in line)
    small = next(line for line in lines if "test_small[0]" in line)
    assert "+60.0 MB" in grows and "612.3 MB" in big and "+0.3 MB" in small  # added, or the peak its threshold read
    md = render_index(_suite(), {})
    assert "| Host memory |" in md and "| +60.0 MB |" in md and "| 612.3 MB |" in md
    html = render_html_index(_suite(), {})
    assert ">Host memory</th>" in html and ">+60.0 MB</td>" in html


def test_a_suite_that_takes_no_memory_has_no_memory_column() -> None:
    small = [_result(f"tests/test_m.py::test_small[{i}]", 67.5, 67.2) for i in range(3)]
    assert "host memory" not in summary_lines(small)[0]
    assert "Host memory" not in render_index(small, {}) and "Host memory" not in render_html_index(small, {})
    # a test whose rounds took 1 MB or more shows it, without a threshold
    took = [*small, _result("tests/test_m.py::test_took", 70.0, 67.2)]
    assert "+2.8 MB" in next(line for line in summary_lines(took) if "test_took" in line)


def test_the_memory_column_still_fits_80_and_120_columns() -> None:
    for width in (80, 120):
        lines = summary_lines(_suite(), width=width)
        assert all(display_width(line) <= width for line in lines), "\n".join(lines)
        assert "+60.0 MB" in "\n".join(lines) and "612.3 MB" in "\n".join(lines)


def test_index_json_gives_each_tests_host_memory_as_numbers() -> None:
    # index.json had no memory figure: a CI script could not see what failed a host memory threshold.
    grows, big = _suite()[-2:]
    entry = index_entry(grows)["host_memory_mb"]
    assert set(entry) == {"rss_peak", "rss_start", "added"}
    assert entry["rss_peak"] == 127.2 and entry["rss_start"] == 67.2
    assert math.isclose(entry["added"], 60.0)  # what max_host_memory_added_mb compared: the peak above the start
    assert index_entry(big)["host_memory_mb"]["rss_peak"] == 612.3  # what max_host_memory_mb compared
    # where the rounds took less than the start (a freed cache), nothing was added; where memory was not read, null
    assert index_entry(_result("t.py::test_freed", 60.0, 67.2))["host_memory_mb"]["added"] == 0.0
    unread = _result("t.py::test_unread", 0.0, 0.0)
    unread.analysis.metrics.update({"mem.rss_peak_mb": None, "mem.rss_start_mb": None})
    assert index_entry(unread)["host_memory_mb"] is None
    no_start = _result("t.py::test_no_start", 70.0, 0.0)
    no_start.analysis.metrics["mem.rss_start_mb"] = None
    assert index_entry(no_start)["host_memory_mb"] == {"rss_peak": 70.0, "rss_start": None, "added": None}


def test_at_80_columns_a_memory_failures_verdict_goes_beside_its_id_not_on_a_line_of_its_own() -> None:
    """`FAIL (max_host_memory_added_mb)`, 31 columns, put every test's verdict on a line of its own at 80 columns,
    below its figures: it goes beside the test's id, whole, in a column of its own."""
    suite = [_result("tests/test_model.py::test_forward", 127.2, 67.2, [ADDED]),
             _result("tests/test_model.py::test_zero", 67.2, 67.2)]  # fmt: skip
    lines = summary_lines(suite, width=80)
    assert all(display_width(line) <= 80 for line in lines), "\n".join(lines)
    assert lines[0] == "test                         verdict", "\n".join(lines)
    assert "test_model.py::test_forward  FAIL (max_host_memory_added_mb)" in lines
    assert "test_model.py::test_zero     pass" in lines
    assert len(lines) == 6 and not any(line.strip().startswith(("FAIL", "pass")) for line in lines)
    # where the table fits, as before
    wide = summary_lines(suite, width=200)
    assert wide[1].endswith("FAIL (max_host_memory_added_mb)") and len(wide) == 3


def test_verdicts_too_long_beside_the_ids_name_their_thresholds_shortly_with_a_legend() -> None:
    latency = CheckResult("max_latency_ms", "failed", 5.0, 60.0, "max_latency_ms: ...", "median 60.0 ms > 5.00 ms")
    suite = [_result("tests/test_model.py::test_forward", 127.2, 67.2, [ADDED, latency]),
             _result("tests/test_model.py::test_big", 612.3, 67.2, [PEAK])]  # fmt: skip
    lines = summary_lines(suite, width=80)  # beside the ids, whole
    assert "test_model.py::test_forward  FAIL (max_host_memory_added_mb, max_latency_ms)" in lines, "\n".join(lines)
    for width in (50, 60):
        lines = summary_lines(suite, width=width)
        assert all(display_width(line) <= width for line in lines), "\n".join(lines)
        assert any("FAIL (RSS+, latency)" in line for line in lines) and any("FAIL (RSS)" in line for line in lines)
        legend = " ".join(lines[lines.index("FAIL (...) names the thresholds crossed:") :])
        for said in ("RSS+ = max_host_memory_added_mb", "RSS = max_host_memory_mb", "latency = max_latency_ms"):
            assert said in legend, "\n".join(lines)


def test_nothing_added_reads_as_a_zero_not_as_plus_zero() -> None:
    # `+0.0 MB` beside the other columns' zeros (`± 0`): nothing added reads `0 MB`; 0.05 MB and more keeps its sign.
    lines = summary_lines([_result("t.py::test_same", 67.2, 67.2), _result("t.py::test_took", 70.0, 67.2)])
    assert next(line for line in lines if "test_same" in line).endswith(" 0 MB  pass")
    assert "+0.0 MB" not in "\n".join(lines) and "+2.8 MB" in "\n".join(lines)
    md = render_index([_result("t.py::test_same", 67.2, 67.2), _result("t.py::test_took", 70.0, 67.2)], {})
    assert "| 0 MB |" in md and "| +2.8 MB |" in md
