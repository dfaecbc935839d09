"""torch.compile's compilations: read from dynamo's records at a collection's ends, placed in the rounds, and told.

The collector's tests compile with backend="eager" (dynamo only: a frame compiles in ~0.1 s on the 2-core VM);
the analyzer's run on synthetic traces (test_analyzer.build) with the meta the collector writes.
"""

from __future__ import annotations

import sys
from typing import Any

import pytest
from test_analyzer import MS, build
from test_baseline import METRICS, _entry, _result, _samples

from pytest_inferscope.analyzer import analyze
from pytest_inferscope.analyzer.context import Context
from pytest_inferscope.collectors.compiles import CompileLog
from pytest_inferscope.events import Kind, RawTrace, host_clock_ns
from pytest_inferscope.merger import merge
from pytest_inferscope.regression import compare_to_baseline

# -- the collector (real dynamo) ----------------------------------------------------------------------------------


def _dynamo() -> Any:
    pytest.importorskip("torch")
    return pytest.importorskip("torch._dynamo")


def test_the_log_lists_the_frames_compiled_since_its_start_and_why_each_recompiled() -> None:
    _dynamo()
    import torch

    weight = torch.ones(8, 4)

    def forward(x: Any) -> Any:
        return (x @ weight).relu()

    compiled = torch.compile(forward, backend="eager", dynamic=False)
    compiled(torch.ones(2, 8))  # before the log: another test's, a fixture's
    log = CompileLog()
    t0 = host_clock_ns()
    compiled(torch.ones(3, 8))  # a new size: recompiles
    compiled(torch.ones(3, 8))  # fits: nothing
    t1 = host_clock_ns()
    out = log.stop(t0)
    (c,) = out["compiles"]
    assert c["frame"].startswith("forward (test_compiles.py:")
    assert c["id"].endswith("/1") and "size mismatch" in c["reason"] and "expected 2, actual 3" in c["reason"]
    # dynamo's wall-clock µs mapped onto the collection's clock: inside the calls, to within the µs they are kept in
    assert -2_000 <= c["start_ns"] < c["end_ns"] <= t1 - t0 + 2_000
    assert c["failed"] == "" and out["graph_breaks"] == [] and out["lost"] is False


def test_the_log_counts_only_the_graph_breaks_met_since_its_start_and_names_where_the_code_resumes() -> None:
    dynamo = _dynamo()
    import torch

    def before(x: Any) -> Any:
        x = x + 1
        dynamo.graph_break()
        return x * 2

    def after(x: Any) -> Any:
        x = x - 1
        dynamo.graph_break()
        return x * 3

    torch.compile(before, backend="eager")(torch.ones(2))
    log = CompileLog()
    torch.compile(after, backend="eager")(torch.ones(2))
    out = log.stop(host_clock_ns())
    (b,) = out["graph_breaks"]
    assert b["count"] == 1 and "graph_break()" in b["reason"]
    frames = [c["frame"] for c in out["compiles"]]
    assert frames[0].startswith("after (test_compiles.py:")
    assert any(f.startswith("after after the graph break at test_compiles.py:") for f in frames[1:])


def test_without_dynamo_or_its_records_the_log_says_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    dynamo = _dynamo()
    log = CompileLog()
    monkeypatch.setattr(dynamo.utils, "get_compilation_metrics", lambda: 1 / 0)  # torch's internals changed
    assert log.stop(0) == {}
    monkeypatch.delitem(sys.modules, "torch._dynamo.utils")  # a process that never imported torch._dynamo
    assert CompileLog().stop(0) == {}


# -- the analysis (synthetic traces) ------------------------------------------------------------------------------


def _compiled(raw: RawTrace, per_round: dict[int, list[tuple[float, str, str]]], breaks: int = 0) -> RawTrace:
    """`raw` with compilations in the rounds given (index -> (ms from the round's start, reason, failed) each, 80%
    of the round long) and `breaks` graph breaks, as collectors/compiles.py writes them."""
    rounds = {int(r["value"]): r for r in raw.events[raw.events["kind"] == Kind.ROUND]}
    compiles = []
    for index, items in per_round.items():
        r = rounds[index]
        for at_ms, reason, failed in items:
            start = int(r["start"]) + int(at_ms * MS)
            compiles.append(
                {
                    "id": f"0/{len(compiles)}",
                    "frame": "forward (model.py:12)",
                    "start_ns": start,
                    "end_ns": start + int(0.8 * (r["end"] - r["start"])) // len(items),
                    "reason": reason,
                    "failed": failed,
                }
            )
    graph_breaks = [{"reason": "Call to `torch._dynamo.graph_break()`", "explanation": "", "hint": "", "count": breaks}]
    raw.meta["torch_compile"] = {"compiles": compiles, "graph_breaks": graph_breaks if breaks else [], "lost": False}
    return raw


def _finding(raw: RawTrace, rule: str = "torch_compile") -> Any:
    return next((f for f in analyze(merge(raw)).findings if f.rule == rule), None)


def test_a_compile_in_a_measured_round_is_a_finding_with_its_share_and_the_warmup_it_needs() -> None:
    # warm-up round 0, measured rounds 1-5: the first measured round compiled (warmup=0 would put the first compile
    # there; a guard on a value, the second call). Its 10 ms round was 8 ms of compiler.
    raw = _compiled(build(n_rounds=5, warmup=1, cpu_busy=0.9), {1: [(0.5, "0/0: L['x'] == 3", "")]})
    a = analyze(merge(raw))
    f = next(f for f in a.findings if f.rule == "torch_compile")
    assert f.cause is None and a.bottleneck == "cpu_bound"  # information: the class stays the rules' own
    assert f.share == pytest.approx(8.0 / 50.0, rel=1e-3)  # 8 ms of the 50 measured
    assert "1 measured round of 5 compiled (round 1: 1 compilation, 8.0 ms of its 10.0 ms)" in f.summary
    assert [(e.kind, e.start_ms) for e in f.events] == [("round", pytest.approx(10.001))]  # the round that compiled
    (warm,) = [s for s in f.suggestions if "warm-up" in s.action]
    assert warm.action.startswith("Run at least 2 warm-up rounds") and warm.saving_ms == pytest.approx(8.0 / 5)
    m = a.metrics
    assert (m["compile.measured_rounds"], m["compile.ms_per_round"], m["compile.graph_breaks"]) == (1.0, 1.6, 0.0)


def test_recompiles_for_new_sizes_to_the_last_round_ask_for_dynamic_shapes_not_more_warmup() -> None:
    size = "0/{}: tensor 'x' size mismatch at index 0. expected 8, actual 15"
    raw = _compiled(build(n_rounds=3, warmup=1, cpu_busy=0.9), {i: [(0.1, size.format(i), "")] for i in (1, 2, 3)})
    f = _finding(raw)
    assert f.share == pytest.approx(0.8, rel=1e-3) and f.summary.startswith("3 measured rounds of 3 compiled")
    actions = [s.action for s in f.suggestions]
    assert not any("warm-up rounds" in a for a in actions)
    assert any("dynamic=True" in a and "mark_dynamic" in a for a in actions)


def test_a_frame_dynamo_gave_up_on_is_said_and_no_warmup_is_advised_for_it() -> None:
    # The recompile limit: the compilations stop because dynamo gives up, and the rounds after it run uncompiled;
    # more warm-up would hide that, not fix it.
    size = "0/0: tensor 'x' size mismatch at index 0. expected 8, actual 15"
    raw = _compiled(
        build(n_rounds=4, warmup=0, cpu_busy=0.9),
        {0: [(0.1, size, "")], 1: [(0.1, size, "Dynamo recompile limit exceeded")]},
    )
    f = _finding(raw)
    assert "Dynamo gave up on forward (model.py:12) in round 1 (Dynamo recompile limit exceeded)" in f.summary
    assert not any("warm-up rounds" in s.action for s in f.suggestions)


def test_compiles_in_the_warmup_only_are_told_without_a_share() -> None:
    raw = _compiled(build(n_rounds=3, warmup=1, cpu_busy=0.9), {0: [(0.1, "", "")]})
    f = _finding(raw)
    assert f.title == "torch.compile compiled in the warm-up only" and f.share == 0.0 and not f.suggestions
    assert f.share_measured  # the measured rounds' compile time was measured, and is none
    assert "(round 0: 1 compilation, 8.0 ms of its 10.0 ms); the measured rounds compiled nothing." in f.summary


def test_graph_breaks_are_their_own_finding_with_a_fix() -> None:
    f = _finding(
        _compiled(build(n_rounds=3, cpu_busy=0.9), {0: [(0.1, "", "")]}, breaks=2), "torch_compile_graph_breaks"
    )
    assert "Dynamo met 2 graph breaks" in f.summary and "graph_break()" in f.summary
    assert f.share == 0.0 and not f.share_measured  # what a break costs a call is not measured
    assert "fullgraph=True" in f.suggestions[0].action


def test_a_trace_without_compile_records_has_no_compile_metrics_and_one_without_compiles_zero() -> None:
    old = analyze(merge(build(n_rounds=3, cpu_busy=0.9)))  # saved before compilations were recorded
    assert old.metrics["compile.measured_rounds"] is None and not any("compile" in f.rule for f in old.findings)
    none = build(n_rounds=3, cpu_busy=0.9, meta={"torch_compile": {}})  # recorded: nothing compiled
    assert analyze(merge(none)).metrics["compile.measured_rounds"] == 0.0


def test_a_comparison_with_a_baseline_names_compilation_as_the_cause_of_the_spread_first() -> None:
    # One measured round of 20 took the compiler's 740 ms: what is compared is partly compile time, and a noise
    # warning ("the machine was busy or the rounds do different work") would not say so.
    samples = [740.0, *_samples(3.0, n=19, seed=2)]
    compiled = {**METRICS, "compile.measured_rounds": 1.0, "compile.ms_per_round": 37.0}
    v = compare_to_baseline(
        _entry(_samples(3.0, seed=1)), _result(samples=samples, metrics=compiled), max_regression=0.05
    )
    assert v.warnings[0].startswith("this run: 1 measured round compiled (torch.compile, 37.0 ms per measured round")
    for metrics in ({**METRICS, "compile.measured_rounds": 0.0}, METRICS):  # none compiled; a trace without records
        v = compare_to_baseline(
            _entry(_samples(3.0, seed=1)), _result(samples=samples, metrics=metrics), max_regression=0.05
        )
        assert not any("compiled" in w for w in v.warnings)


def test_the_terminal_summary_names_the_tests_whose_measured_rounds_compiled_below_the_table() -> None:
    # The table's row of such a test reads a huge spread and the other rules' class: the line under it says why.
    from pytest_inferscope.postprocess import kept
    from pytest_inferscope.reporters.terminal import compile_lines, session_lines

    samples = [740.0, *_samples(3.0, n=4, seed=2)]
    compiled = [
        _result(f"t.py::test_{i}", samples, metrics={**METRICS, "compile.measured_rounds": float(i)})
        for i in range(1, 5)
    ]
    quiet = [_result("t.py::test_none", metrics={**METRICS, "compile.measured_rounds": 0.0}), _result("t.py::test_old")]
    assert compile_lines(quiet) == []
    (line,) = compile_lines([compiled[0], *quiet])
    assert line.startswith("inferscope: 1 test compiled (torch.compile) in its measured rounds, so its latency")
    assert "t.py::test_1 (1 of 5 rounds)" in line and "test_none" not in line and "test_old" not in line
    assert "torch_compile finding of its report" in line
    (line,) = compile_lines([*compiled, *quiet], indexed=False)
    assert line.startswith("inferscope: 4 tests compiled (torch.compile) in their measured rounds")
    shown = "t.py::test_1 (1 of 5 rounds), t.py::test_2 (2 of 5 rounds), t.py::test_3 (3 of 5 rounds); and 1 more."
    assert shown in line
    assert "report" not in line and "warm-up" in line  # no reports written: what to do instead
    assert line in session_lines([*compiled, *quiet], indexed=False)
    # what the session keeps of a test once its reports are written (what the summary reads) keeps the figure
    assert compile_lines([kept(compiled[0])]) == compile_lines([compiled[0]])


def test_a_measured_round_that_compiled_is_left_out_of_everything_but_the_latency() -> None:
    # The compiler's work is not the model's: on the H200 a cold inductor compile made its test cpu_bound (0.99), a
    # recompile on a new shape memory_bound (0.54). Here the model waits off CPU 90% of each round; the round that
    # compiled was on CPU throughout.
    raw = _compiled(build(n_rounds=5, warmup=1, cpu_busy=0.1), {1: [(0.5, "", "")]})
    (row,) = [r for r in raw.meta["rounds"] if r["index"] == 1]
    row["thread_cpu_ns"] = row["user_ns"] = row["wall_ns"]
    a = analyze(merge(raw))
    m = a.metrics
    assert m["cpu.test_thread_busy"] == pytest.approx(0.1) and m["rounds"] == 4  # the four that compiled nothing
    assert len(Context(merge(raw)).rounds.latency.samples_ms) == 5  # the latency keeps the round that compiled
    # told first (the others' shares are of the rounds that compiled nothing), then the model's own wait
    assert [f.rule for f in a.findings][:2] == ["torch_compile", "off_cpu_wait"] and a.bottleneck != "cpu_bound"
    f = next(f for f in a.findings if f.rule == "torch_compile")
    assert f.share == pytest.approx(8.0 / 50.0, rel=1e-3)  # of every measured round's time
    assert (
        "It is left out of the breakdown, the other findings and the class, which are from the 4 measured rounds"
        in (f.summary)
    )
    assert m["compile.ms_per_round"] == pytest.approx(8.0 / 5)
    # Every measured round compiled (a new shape each call): none is left out.
    raw = _compiled(build(n_rounds=3, warmup=1, cpu_busy=0.1), {i: [(0.5, "", "")] for i in (1, 2, 3)})
    a = analyze(merge(raw))
    assert (
        a.metrics["rounds"] == 3 and "left out" not in next(f for f in a.findings if f.rule == "torch_compile").summary
    )


def test_a_measured_round_that_raised_is_not_counted_as_one_that_compiled() -> None:
    """A recompile that raised (a backend error on a new shape, say) in the last measured round: that round is no
    latency sample, so it is not one of the measured rounds that compiled either. compile.measured_rounds counted it,
    and the summary read `(2 of 2 rounds)` for a test one of whose two latency samples compiled."""
    from test_no_measured_round import _raised_in

    from pytest_inferscope.reporters.terminal import compile_lines

    # warm-up round 0, measured rounds 1-3: round 1 compiled and completed, round 3 compiled and raised
    raw = _compiled(build(n_rounds=3, warmup=1, cpu_busy=0.9), {1: [(0.5, "", "")], 3: [(0.5, "0/1: size", "")]})
    raw = _raised_in(raw, 3)
    tl = merge(raw)
    assert len(Context(tl).rounds.latency.samples_ms) == 2
    a = analyze(tl)
    m = a.metrics
    assert m["compile.measured_rounds"] == 1.0 and m["compile.ms_per_round"] == pytest.approx(8.0 / 2)
    f = next(f for f in a.findings if f.rule == "torch_compile")
    assert f.summary.startswith("1 measured round of 2 compiled (round 1: 1 compilation, 8.0 ms"), f.summary
    assert "round 3" in str(f.evidence["compilations in the round that raised"])  # still told, apart
    r = _result("t.py::test_x", [10.0, 2.0], metrics={**METRICS, **{k: v for k, v in m.items() if "compile" in k}})
    assert "t.py::test_x (1 of 2 rounds)" in compile_lines([r])[0]
    # Only the round that raised compiled: no measured round compiled, and the finding says where it did.
    raw = _raised_in(_compiled(build(n_rounds=3, warmup=1, cpu_busy=0.9), {3: [(0.5, "", "")]}), 3)
    a = analyze(merge(raw))
    assert a.metrics["compile.measured_rounds"] == 0.0
    f = next(f for f in a.findings if f.rule == "torch_compile")
    assert "the measured rounds that completed compiled nothing" in f.summary and "round 3" in f.summary, f.summary
