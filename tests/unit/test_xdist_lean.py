"""What the xdist controller keeps of a worker's result (`xdist.Lean`): its summary, index and baseline read alike."""

from __future__ import annotations

from pathlib import Path

from pytest_inferscope.baseline import BaselineEntry, fingerprint
from pytest_inferscope.regression import gate_blind_notes
from pytest_inferscope.reporters.folder import write_index
from pytest_inferscope.reporters.terminal import session_lines
from pytest_inferscope.results import Analysis, CheckResult, ClockFit, CollectorInfo, LatencyStats, TestResult
from pytest_inferscope.xdist import Lean


def _wire(n: int, gpu: str) -> str:
    result = TestResult(
        f"t.py::test_{n}", f"t.py__test_{n}-0123456789", "passed", "fail" if n == 2 else "pass", 3, 1,
        LatencyStats.from_samples([1.0 + n, 1.2 + n, 0.9 + n], [2.0]),
        Analysis("cpu_bound", 0.8, metrics={"cpu.python_share": 0.9, "compile.measured_rounds": 0.0}),
        checks=[CheckResult("max_latency_ms", "failed" if n == 2 else "passed", 2.0, 1.0 + n, "median", "m")],
        collectors=[CollectorInfo("cpu", True, "stack sampling every 10 ms"), CollectorInfo("gpu", False, "none")],
        clock=ClockFit(rate=1.0001, pairs=4, note="fitted"),
        thresholds={"max_latency_ms": 2.0},
        environment={"python": "3.11.7", "cpu_model": "x", "pinned_gpu": gpu},
        files={"md": f"t.py__test_{n}-0123456789/report.md"},
        added={"asked_ms": 3.0, "added_ms": 1.5, "extra_rounds": 0},
        earlier_runs=["fail"] if n == 1 else [],
    )  # fmt: skip
    return result.to_wire()


def _outputs(results: list[TestResult], folder: Path) -> list[str]:
    write_index(results, folder, {"collectors": "c", "environment": "e"})
    entries = [BaselineEntry.from_result(r, fingerprint(r.environment), "2026-11-30").to_dict() for r in results]
    lines = [*session_lines(results, True), *gate_blind_notes(results, alpha=0.05, saving=False)]
    return [*((folder / f"index.{x}").read_text() for x in ("md", "json", "html")), repr(entries), *lines]


def test_the_controller_reads_the_same_from_what_it_keeps(tmp_path: Path) -> None:
    wires = [_wire(n, "0" if n % 2 else "1") for n in range(4)]
    whole = [TestResult.from_wire(w) for w in wires]
    lean = Lean()
    kept = [lean(TestResult.from_wire(w)) for w in wires]
    assert _outputs(whole, tmp_path / "whole") == _outputs(kept, tmp_path / "kept")
    assert len({id(r.environment) for r in kept}) == 2  # one a worker (the GPU it pinned)
    assert all(r.collectors == [] and r.clock == ClockFit() for r in kept)
