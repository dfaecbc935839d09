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
    assert len(rows) == 2 and all(len(_cells(r)) == len(_cells(header)) == 6 for r in rows), rows
    assert _cells(rows[0])[0].strip() == "t.py::test_p\\[a\\|b\\]"
    assert _cells(rows[1])[0].strip() == "t.py::test_p\\[c\\`d\\]"
    assert _cells(rows[1])[1:3] == [" none ", "  "]  # no measured round: no latency, as the terminal and the indexes
