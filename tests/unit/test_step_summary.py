"""The GitHub Actions job summary ($GITHUB_STEP_SUMMARY): a Markdown table that holds whatever a test id contains."""

from __future__ import annotations

from pathlib import Path

from pytest_inferscope.reporters.folder import append_step_summary
from pytest_inferscope.results import Analysis, LatencyStats, TestResult


def _result(nodeid: str, samples: list[float]) -> TestResult:
    latency = LatencyStats.from_samples(samples)
    return TestResult(nodeid, "t", "passed", "pass", 2, 0, latency, Analysis("cpu_bound", 0.9))


def _cells(row: str) -> list[str]:
    """A GFM table row's cells: split at the pipes not escaped with a backslash."""
    cells, cell, escaped = [], "", False
    for ch in row.strip().strip("|"):
        if ch == "|" and not escaped:
            cells.append(cell)
            cell = ""
        else:
            cell += ch
        escaped = ch == "\\" and not escaped
    return [*cells, cell]


def test_a_test_id_with_a_pipe_or_a_backtick_keeps_the_table_in_shape(tmp_path: Path) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    append_step_summary(summary, [_result("t.py::test_p[a|b]", [1.0, 2.0]), _result("t.py::test_p[c`d]", [])], None)
    text = summary.read_text()
    assert text.startswith("earlier step\n")
    header, _, *rows = [line for line in text.splitlines() if line.startswith("|")]
    assert len(rows) == 2 and all(len(_cells(r)) == len(_cells(header)) == 5 for r in rows), rows
    assert _cells(rows[0])[0].strip() == "t.py::test_p\\[a\\|b\\]"
    assert _cells(rows[1])[0].strip() == "t.py::test_p\\[c\\`d\\]"
    assert _cells(rows[1])[1:3] == [" none ", "  "]  # no measured round: no latency, as the terminal and the indexes


def test_a_failure_is_one_line_naming_its_test_above_the_table(tmp_path: Path) -> None:
    """The Failures list held each crossed check's whole message (evidence, report path) without the test's id, below
    the table and folded: with 30 tests, which test had crossed what was not to be read from it. Each failure is now
    one line, the test's id and the check's one-line form (`CheckResult.short`), above the table; the medians are
    written as everywhere else (`fmt_ms`), not with three decimals ('0.000')."""
    from pytest_inferscope.results import CheckResult
    from pytest_inferscope.units import fmt_ms

    ok = [_result(f"tests/test_m.py::test_ok[{i}]", [0.0004, 0.0005, 0.0006]) for i in range(30)]
    slow = _result("tests/test_m.py::test_slow", [12.0, 12.1, 12.2])
    slow.verdict = "fail"
    message = "max_latency_ms: median latency 12.1 ms exceeds limit 10.0 ms. Evidence: 3 rounds: ...\nmore"
    slow.checks = [CheckResult("max_latency_ms", "failed", 10.0, 12.1, message, "median 12.1 ms > 10.0 ms")]
    summary = tmp_path / "summary.md"
    append_step_summary(summary, [*ok, slow], None)
    lines = summary.read_text().splitlines()
    failure = "- tests/test_m.py::test_slow: max_latency_ms: median 12.1 ms > 10.0 ms"
    assert failure in lines, lines
    assert lines.index(failure) < min(i for i, line in enumerate(lines) if line.startswith("| "))
    assert "Evidence" not in summary.read_text()
    row = next(line for line in lines if "test_ok\\[0\\]" in line)
    assert _cells(row)[1].strip() == fmt_ms(0.0005), row


def test_the_vs_baseline_column_is_there_only_when_the_run_was_compared(tmp_path: Path) -> None:
    """Every table had a "vs baseline" column, all "—" in a run compared with no baseline (the terminal's had none):
    the step summary, index.md and index.html now show it only where a test was compared, as the terminal does."""
    from pytest_inferscope.comparison import Comparison
    from pytest_inferscope.reporters import write_index
    from pytest_inferscope.results import RegressionVerdict

    def tables(results: list[TestResult], out: Path) -> tuple[str, str, str]:
        out.mkdir()
        append_step_summary(out / "summary.md", results, None)
        write_index(results, out, {})
        header = next(line for line in (out / "index.md").read_text().splitlines() if line.startswith("| Test"))
        thead = next(line for line in (out / "index.html").read_text().splitlines() if line.startswith("<thead>"))
        return (out / "summary.md").read_text(), header, thead

    alone = [_result("t.py::test_a", [1.0, 2.0]), _result("t.py::test_b", [1.0])]
    for text in tables(alone, tmp_path / "alone"):
        assert "vs baseline" not in text, text
    c = Comparison("regressed", 1.283, 1.2, 1.4, 0.001, "", 1.069, 1.372, 12, 12)
    alone[0].regression = RegressionVerdict(alone[0].nodeid, "regressed", "", c, baseline_name="main")
    summary, header, thead = tables(alone, tmp_path / "compared")
    assert "vs baseline" in header and "vs baseline" in thead
    rows = [line for line in summary.splitlines() if line.startswith("| t.py")]
    assert "| +28.3% regressed |" in rows[0] and "| — |" in rows[1], rows
    assert len({len(_cells(line)) for line in summary.splitlines() if line.startswith("|")}) == 1


def test_the_index_environment_line_gives_the_threads_each_test_read() -> None:
    """The index's environment line was the session's one reading (torch_threads read once, after the first test):
    tests whose fixtures set 3 threads read "torch_threads 1" there, while their reports said 3."""
    from pytest_inferscope.reporters.folder import environment_line

    a, b = _result("t.py::test_a", [1.0]), _result("t.py::test_b", [1.0])
    a.environment, b.environment = {"torch_threads": 3, "python": "3.11"}, {"torch_threads": 12, "python": "3.11"}
    session = {"python": "3.11", "torch_threads": 1}
    assert environment_line(session, [a, b]) == "python 3.11, torch_threads by test: 3, 12"
    b.environment["torch_threads"] = 3
    assert environment_line(session, [a, b]) == "python 3.11, torch_threads 3"
    assert environment_line(session, []) == "python 3.11, torch_threads 1"
