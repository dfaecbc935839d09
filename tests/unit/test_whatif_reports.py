"""The what-if table end to end: a plugin's what-if on a recorded trace, the reports, report.json read back,
and imported torch.profiler traces."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_inferscope import kineto
from pytest_inferscope.analyzer import WhatIf, analyze
from pytest_inferscope.analyzer.graph import RoundGraph
from pytest_inferscope.checks import Plan
from pytest_inferscope.events import Kind, RawTrace
from pytest_inferscope.extra import warn_rule_failures
from pytest_inferscope.merger import merge
from pytest_inferscope.postprocess import process
from pytest_inferscope.reporters.jsonreport import load_report
from pytest_inferscope.results import SCHEMA_VERSION
from pytest_inferscope.warning import InferscopeWarning

DATA = Path(__file__).parent.parent / "data"


def no_kernels(g: RoundGraph) -> RoundGraph:
    out = RoundGraph(g.nodes, [dataclass_copy(o) for o in g.ops], g.measured_ns, dict(g.stream_busy), g.counted)
    for o in out.ops:
        if o.kind == Kind.KERNEL:
            o.dur = 0
    return out


def dataclass_copy(o: object) -> object:
    import dataclasses

    return dataclasses.replace(o)  # type: ignore[type-var]


def test_a_plugins_whatif_is_replayed_reported_and_read_back(tmp_path: Path) -> None:
    raw = RawTrace.load(str(DATA / "launch_bound" / "trace.npz"))
    mine = WhatIf("kernels for free", "gpu_bound", "Precompute the answers", no_kernels)
    result, _ = process(raw, Plan(nodeid="t::decode", rounds=10, warmup=3), [], report_dir=tmp_path, whatifs=[mine])
    rows = {r.change: r for r in result.analysis.whatif}
    # The host's launches are the critical path: kernels that take no time save (next to) nothing, and a CUDA
    # graph saves most.
    assert rows["kernels for free"].saved_ms == pytest.approx(0, abs=0.05)
    assert rows["kernels for free"].bottleneck == "gpu_bound"
    assert result.analysis.bottleneck == "launch_bound"
    graph = rows["a CUDA graph (launch overhead removed)"]
    assert result.analysis.suggestions[0].saving_ms == graph.saved_ms
    assert f"-{graph.saved_fraction:.0%}" in result.analysis.suggestions[0].rationale
    md = (tmp_path / result.slug / "report.md").read_text()
    assert "### What-if: each fix simulated" in md and "| kernels for free |" in md
    assert "Simulated: launch_bound: a CUDA graph" in md and "error <0.1%" in md
    html = (tmp_path / result.slug / "report.html").read_text()
    assert 'id="whatif"' in html and "kernels for free" in html
    data = json.loads((tmp_path / result.slug / "report.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    first = data["analysis"]["whatif"][0]
    assert set(first) >= {"change", "round_ms", "saved_ms", "saved_fraction"}
    assert abs(data["analysis"]["whatif_replay"]["replay_error"]) < 0.05
    back = load_report(tmp_path / result.slug / "report.json")
    assert back.analysis.whatif == result.analysis.whatif


def broken_transform(g: RoundGraph) -> RoundGraph:
    return g.nodes[10**9]  # type: ignore[return-value]  # an IndexError, as a plugin's bug raises


@pytest.mark.parametrize(
    ("transform", "why"),
    [
        (broken_transform, "raised IndexError: list index out of range"),
        (lambda g: "changed", "returned 'changed' (a str), not a RoundGraph or None"),
    ],
)
def test_a_plugins_whatif_that_fails_loses_its_row_not_the_analysis(
    tmp_path: Path, transform: object, why: str
) -> None:
    """A what-if of the pytest_inferscope_whatifs hook whose transform raises (or returns something else than a graph)
    is left out of the table and said in `extension_errors`, as an added rule is (analyzer/extension.py); the other
    what-ifs, the verdict and the reports stand."""
    raw = RawTrace.load(str(DATA / "launch_bound" / "trace.npz"))
    bad = WhatIf("broken fix", "gpu_bound", "Break it", transform)  # type: ignore[arg-type]
    good = WhatIf("kernels for free", "gpu_bound", "Precompute the answers", no_kernels)
    result, _ = process(raw, Plan(nodeid="t::decode", rounds=10, warmup=3), [], report_dir=tmp_path,
                        whatifs=[bad, good])  # fmt: skip
    rows = {r.change for r in result.analysis.whatif}
    assert "kernels for free" in rows and "broken fix" not in rows
    assert result.analysis.bottleneck == "launch_bound"  # the built-in what-ifs decide as without it
    (error,) = result.analysis.extension_errors
    assert error.startswith("the what-if 'broken fix' (test_whatif_reports.py:") and why in error, error
    data = json.loads((tmp_path / result.slug / "report.json").read_text())
    assert data["analysis"]["extension_errors"] == [error]


def test_a_whatifs_failure_is_one_warning_naming_the_table_it_is_left_out_of() -> None:
    error = "the what-if 'broken fix' (conftest.py:4) raised IndexError: list index out of range"
    with pytest.warns(InferscopeWarning) as seen:
        warn_rule_failures("t.py::test_x", [error], [])
    (w,) = seen
    text = str(w.message)
    assert text.startswith(f"inferscope: {error}; its row is left out of t.py::test_x's what-if table"), text
    assert "pytest_inferscope_whatifs" in text and "findings" not in text


def test_without_gpu_the_report_says_why_there_is_no_table(tmp_path: Path) -> None:
    raw = RawTrace.load(str(DATA / "memory_bound" / "trace.npz"))
    result, _ = process(raw, Plan(nodeid="t::grow", rounds=8, warmup=1), [], report_dir=tmp_path)
    md = (tmp_path / result.slug / "report.md").read_text()
    assert "No what-if table: no GPU work was recorded" in md and "### What-if" not in md


def kineto_loop(
    kernels: int, kernel_us: float, op_us: float, launch_us: float, nested: bool = False
) -> dict[str, object]:
    """A torch.profiler trace of one step launching `kernels` tiny elementwise kernels back to back
    (the issue's loop: aten::add around cudaLaunchKernel, ~1 µs kernels), then one .item(). `nested`: each
    launch also records the driver call inside it (cuLaunchKernel), as Kineto does with driver events on."""
    events: list[dict[str, object]] = []
    t = 1000.0
    step_start = t
    gpu_free = 0.0
    for c in range(1, kernels + 1):
        events.append({"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": t, "dur": op_us, "tid": 1, "pid": 1})
        launch_at = t + op_us - launch_us - 0.5
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": launch_at,
                       "dur": launch_us, "tid": 1, "pid": 1, "args": {"correlation": c}})  # fmt: skip
        start = max(launch_at + 5.0, gpu_free + 1.0)
        gpu_free = start + kernel_us
        if nested:
            events.append({"ph": "X", "cat": "cuda_driver", "name": "cuLaunchKernel", "ts": launch_at + 1,
                           "dur": launch_us - 2, "tid": 1, "pid": 1, "args": {"correlation": 100_000 + c}})  # fmt: skip
        args = {"correlation": c, "stream": 7, "device": 0}
        events.append({"ph": "X", "cat": "kernel", "name": "vectorized_elementwise_kernel", "ts": start,
                       "dur": kernel_us, "tid": 7, "pid": 0, "args": args})  # fmt: skip
        t += op_us
    events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaStreamSynchronize", "ts": t, "dur": gpu_free - t + 2,
                   "tid": 1, "pid": 1, "args": {"correlation": kernels + 1}})  # fmt: skip
    t = max(t, gpu_free) + 3
    events.append({"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": step_start,
                   "dur": t - step_start, "tid": 1, "pid": 1})  # fmt: skip
    return {"traceEvents": events}


def test_an_imported_trace_of_tiny_kernels_is_launch_bound_from_its_cpu_ops_and_launch_calls() -> None:
    # The example, read as cpu_bound before: 12 µs of host per ~1 µs kernel, the host launching back to back.
    trace = kineto.import_events(kineto_loop(1500, 1.0, 12.0, 4.0), "loop.json")
    a = analyze(merge(trace.raw), kineto.RULES)
    assert a.bottleneck == "launch_bound", a.whatif_replay
    assert a.whatif_replay["decided_by"] == "whatif" and abs(a.whatif_replay["replay_error"]) < 0.05
    top = a.whatif[0]
    # 1500 x 12 µs = 18 ms of host; as one graph the kernels run 1500 x (1 + 1 µs gap): about 3 ms.
    assert top.change.startswith("a CUDA graph") and top.saved_fraction > 0.7
    assert "CUDA graph" in a.suggestions[0].action


def test_the_recorded_kineto_trace_gets_a_class_with_a_whatif_table() -> None:
    trace = kineto.load(DATA / "kineto" / "gpu_steps.json")
    a = analyze(merge(trace.raw), kineto.RULES)
    assert a.whatif and a.whatif_replay["decided_by"] == "whatif"
    assert a.bottleneck == "gpu_bound" and a.whatif[0].change == "GPU work 2x faster"
    # The hand-written trace runs the memset, launched after the sgemm, before it on the same stream (which CUDA
    # never does); the replay keeps the order of issue, so it ends 80 µs early in each 1 ms round.
    assert a.whatif_replay["replay_error"] == pytest.approx(-0.08, abs=0.005)


def test_a_kineto_trace_without_gpu_work_falls_back_to_the_rules() -> None:
    a = analyze(merge(kineto.load(DATA / "kineto" / "cpu_steps.json.gz").raw), kineto.RULES)
    assert not a.whatif and "no GPU work" in a.whatif_replay["fallback"]


def test_driver_calls_inside_runtime_calls_are_not_counted_twice() -> None:
    plain = analyze(merge(kineto.import_events(kineto_loop(200, 1.0, 12.0, 4.0), "a.json").raw), kineto.RULES)
    nested = analyze(merge(kineto.import_events(kineto_loop(200, 1.0, 12.0, 4.0, True), "b.json").raw), kineto.RULES)
    assert abs(nested.whatif_replay["replay_error"]) < 0.01
    assert nested.whatif_replay["replay_ms"] == pytest.approx(plain.whatif_replay["replay_ms"], rel=0.01)


def test_a_replay_that_misses_the_measured_rounds_leaves_the_verdict_to_the_rules(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pytest_inferscope.analyzer import whatif

    # As if the graph lacked a dependency it cannot see (another thread's work, a cross-stream event).
    monkeypatch.setattr(whatif.WhatIfTable, "replay_error", property(lambda self: -0.2))
    a = analyze(merge(RawTrace.load(str(DATA / "sync_bound" / "trace.npz"))))
    assert a.whatif and a.whatif_replay["decided_by"] == "rules"
    assert a.bottleneck == "sync_bound" == a.whatif_replay["rule_class"]
    assert "misses the measured rounds by -20%" in a.whatif_replay["fallback"]
