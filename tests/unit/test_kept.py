"""What a session keeps of a test once its reports are written (`postprocess.kept`): what the summary, the index, a
saved baseline and xdist's controller read, and no more."""

from __future__ import annotations

from pytest_inferscope.baseline import DETERMINISTIC_METRICS, BaselineEntry
from pytest_inferscope.postprocess import kept
from pytest_inferscope.reporters.folder import index_entry
from pytest_inferscope.results import Analysis, CollectorInfo, Finding, LatencyStats, ScopeStat, TestResult


def _full() -> TestResult:
    metrics = {name: 3.0 for name in DETERMINISTIC_METRICS} | {"cpu.test_thread_working": 0.9, "gpu.idle_fraction": 0.2}
    finding = Finding("launch_overhead", "Launch-bound", "many small kernels", "launch_bound", 0.6, 0.8)
    scope = ScopeStat("forward", "scope", 1, 2.0, 2.0, 0.5)
    analysis = Analysis("launch_bound", 0.8, findings=[finding], scopes=[scope], metrics=metrics)
    latency = LatencyStats.from_samples([1.0, 2.0, 3.0])
    marks = [{"name": "m", "t_ms": 0.1, "attrs": {}}]
    return TestResult("t.py::test_a", "t", "passed", "pass", 3, 1, latency, analysis, environment={"python": "3.11.7"},
                      marks=marks)  # fmt: skip


def test_the_analysis_is_cut_to_what_later_readers_use() -> None:
    full = _full()
    slim = kept(full)
    assert (slim.analysis.bottleneck, slim.analysis.confidence) == ("launch_bound", 0.8)
    assert set(slim.analysis.metrics) == set(DETERMINISTIC_METRICS)
    assert not slim.analysis.findings and not slim.analysis.scopes and slim.marks == []
    assert full.analysis.findings and full.marks  # the full result, which hooks and the fixture get, is unchanged
    # the index and a baseline read the same from either
    assert index_entry(slim) == index_entry(full)
    fp = {"python": "3.11.7"}
    assert BaselineEntry.from_result(slim, fp, "now") == BaselineEntry.from_result(full, fp, "now")
    assert len(slim.to_wire()) < len(full.to_wire())


def test_an_environment_equal_to_the_sessions_is_the_sessions_one_dict() -> None:
    session_env = {"python": "3.11.7"}
    assert kept(_full(), session_env).environment is session_env
    other = {"python": "3.12.1"}
    slim = kept(_full(), other)
    assert slim.environment == {"python": "3.11.7"} and slim.environment is not other


def test_the_collectors_description_is_left_to_the_report_files() -> None:
    """It was kept for every test of a serial session (~0.5 kB a trivial test, 2026-11-30), though nothing the session
    writes at its end reads it (xdist's controller left it out already); report.json has it."""
    full = _full()
    full.collectors = [CollectorInfo("cpu", True, "stack sampling every 10 ms"), CollectorInfo("gpu", False, "no GPU")]
    slim = kept(full)
    assert slim.collectors == [] and len(full.collectors) == 2
    assert index_entry(slim) == index_entry(full)
