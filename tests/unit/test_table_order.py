"""The order of the tests in the session's tables: by test id, the numbers in it as numbers, so a sweep of batch sizes
reads 1, 2, 16, 128 as pytest ran it, not 1, 128, 16, 2; the same under xdist as serially."""

from __future__ import annotations

import json
from pathlib import Path

from pytest_inferscope.reporters import write_index
from pytest_inferscope.reporters.folder import append_step_summary
from pytest_inferscope.reporters.terminal import summary_lines
from pytest_inferscope.results import Analysis, LatencyStats, TestResult

IDS = [f"tests/test_m.py::test_batch[bf16-{n}]" for n in (1, 2, 16, 128)] + ["tests/test_m.py::test_other"]


def _md(nodeid: str) -> str:
    return nodeid.replace("[", "\\[").replace("]", "\\]")


def _result(nodeid: str) -> TestResult:
    r = TestResult(nodeid, nodeid.replace("::", "__"), "passed", "pass", 3, 1, LatencyStats.from_samples([1.0]),
                   Analysis("cpu_bound", 0.85))  # fmt: skip
    r.files = {"md": f"t{len(nodeid)}/report.md", "html": f"t{len(nodeid)}/report.html"}  # (as written: linked)
    return r


def test_the_tables_order_a_parameter_sweep_by_its_numbers(tmp_path: Path) -> None:
    shuffled = [_result(IDS[i]) for i in (3, 0, 4, 2, 1)]
    rows = [line.split()[0] for line in summary_lines(shuffled)[1:]]
    assert rows == [i.split("/")[-1] for i in IDS], rows
    write_index(shuffled, tmp_path, {})
    assert [t["nodeid"] for t in json.loads((tmp_path / "index.json").read_text())["tests"]] == IDS
    md = [line for line in (tmp_path / "index.md").read_text().splitlines() if line.startswith("| [")]
    assert [line.split("](")[0] for line in md] == [f"| [{_md(i)}" for i in IDS]
    html = (tmp_path / "index.html").read_text()
    assert [html.index(f">{i}</a>") for i in IDS] == sorted(html.index(f">{i}</a>") for i in IDS)
    summary = tmp_path / "summary.md"
    append_step_summary(summary, shuffled, None)
    lines = [line for line in summary.read_text().splitlines() if line.startswith("| tests/")]
    assert [line.split(" | ")[0] for line in lines] == [f"| {_md(i)}" for i in IDS]
