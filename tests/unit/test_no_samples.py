"""Why a report has no CPU hotspots: the samples taken, where they fell, and which sampler took them.

A pure-Python round shorter than the GIL's switch interval (5 ms) holds the GIL throughout, so the thread sampler gets
in only between rounds, and every sample it takes is the plugin's, not the body's: the report said "No CPU samples."
while its header counted them.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
from test_analyzer import MS, build

from pytest_inferscope.analyzer import analyze
from pytest_inferscope.events import EVENT_DTYPE, Domain, Kind, RawTrace
from pytest_inferscope.merger import merge
from pytest_inferscope.reporters.html import write_html_report
from pytest_inferscope.reporters.markdown import render_report
from pytest_inferscope.results import LatencyStats, TestResult


def _sampled(kind: str | None, where: str, n: int = 2, *, round_ms: float = 1.0) -> RawTrace:
    """Ten rounds of `round_ms` sampled `n` times, each sample taken `where` ("between" rounds, "inside" the first
    rounds), by the `kind` of sampler (None: no "kind" in the meta, as traces recorded before it)."""
    sampler: dict[str, Any] = {"samples": n, "cost_ns": 0, "interval_ms": 10.0, "switch_interval_ms": 5.0}
    if kind is not None:
        sampler["kind"] = kind
    raw = build(n_rounds=10, round_ms=round_ms, cpu_busy=1.0, meta={"sampler": sampler, "wall_ns": 20 * MS})
    rounds = raw.events[raw.events["kind"] == Kind.ROUND]
    rows = []
    for i in range(n):
        r = rounds[1 + i]
        at = int(r["end"]) + 500 if where == "between" else int(r["start"]) + 1000
        raw.strings.append("t:body (t.py:3)")
        rows.append((at - 10 * MS, at, 0, 0, len(raw.strings) - 1, 1, -1, -1, Kind.SAMPLE, Domain.HOST, 0))
    raw.events = np.concatenate([raw.events, np.array(rows, dtype=EVENT_DTYPE)])
    return raw


def test_thread_samples_all_between_rounds_say_the_gil_kept_them_out() -> None:
    a = analyze(merge(_sampled("thread", "between")))
    assert not a.hotspots
    why = a.no_samples_reason
    assert why.startswith("2 samples were taken, none inside a measured round")
    assert "GIL" in why and "5 ms" in why and "--inferscope-sampler=signal" in why


def test_one_thread_sample_between_rounds_is_one_sample() -> None:
    why = analyze(merge(_sampled("thread", "between", n=1))).no_samples_reason
    assert why.startswith("1 sample was taken, none inside a measured round")


def test_thread_samples_between_long_rounds_do_not_blame_a_short_round() -> None:
    # Rounds of 20 ms are longer than the switch interval: the GIL was held by something else (a C call keeping it).
    why = analyze(merge(_sampled("thread", "between", round_ms=20.0))).no_samples_reason
    assert "none inside a measured round" in why and "--inferscope-sampler=signal" in why
    assert "shorter than" not in why


def test_signal_samples_between_rounds_name_the_interval_option() -> None:
    why = analyze(merge(_sampled("signal", "between"))).no_samples_reason
    assert "none inside a measured round" in why and "--inferscope-sample-interval-ms" in why
    assert "GIL" not in why


def test_pending_calls_say_the_gil_kept_them_out_where_they_were_nudged_and_the_interval_where_not() -> None:
    # Before CPython 3.13 (the meta counts nudges) a pending call waits for a switch of the GIL, as the thread does;
    # from 3.13 it comes on time, as the signal does.
    raw = _sampled("pending", "between")
    raw.meta["sampler"]["nudges"] = 2
    why = analyze(merge(raw)).no_samples_reason
    assert "waits for a switch of the GIL" in why and "5 ms" in why and "--inferscope-sampler=signal" in why
    assert "thread sampler" not in why
    why = analyze(merge(_sampled("pending", "between"))).no_samples_reason
    assert "--inferscope-sample-interval-ms" in why and "GIL" not in why


def test_no_sample_at_all_says_the_collection_was_shorter_than_the_interval() -> None:
    raw = _sampled("signal", "between", n=0)
    raw.meta["wall_ns"] = 8 * MS
    why = analyze(merge(raw)).no_samples_reason
    assert why.startswith("the sampler took no sample") and "10 ms" in why
    assert "--inferscope-sample-interval-ms" in why


def test_sampling_off_and_call_tracing_say_so() -> None:
    off = build(cpu_busy=1.0, meta={"sampler": {}})
    assert "--inferscope-cpu=off" in analyze(merge(off)).no_samples_reason
    traced = build(cpu_busy=1.0, meta={"sampler": {"calls": 10, "hook_calls": 20, "per_call_ns": 50.0}})
    assert "--inferscope-cpu=trace" in analyze(merge(traced)).no_samples_reason


def test_no_reason_when_samples_counted_or_the_trace_does_not_say() -> None:
    a = analyze(merge(_sampled("thread", "inside")))
    assert a.hotspots and a.no_samples_reason == ""
    assert analyze(merge(_sampled(None, "between"))).no_samples_reason == ""  # recorded before the kind was kept
    assert analyze(merge(build(cpu_busy=1.0))).no_samples_reason == ""  # an imported trace: no sampler meta


def _result(raw: RawTrace) -> TestResult:
    a = analyze(merge(raw))
    return TestResult("t.py::test_s", "t-test_s", "passed", "pass", 10, 1, LatencyStats.from_samples([1.0] * 10), a)


def test_the_reports_give_the_reason_beside_no_cpu_samples() -> None:
    result = _result(_sampled("thread", "between"))
    md = render_report(result)
    assert "_No CPU samples: 2 samples were taken, none inside a measured round" in md
    buf = io.BytesIO()
    write_html_report(result, None, buf)
    assert "No CPU samples: 2 samples were taken, none inside a measured round" in buf.getvalue().decode()
    assert "_No CPU samples._" in render_report(_result(build(cpu_busy=1.0)))  # nothing known: as before


def test_the_reason_is_kept_in_report_json() -> None:
    result = _result(_sampled("thread", "between"))
    back = TestResult.from_dict(result.to_dict())
    assert back.analysis.no_samples_reason == result.analysis.no_samples_reason != ""
    old = result.to_dict()
    del old["analysis"]["no_samples_reason"]  # a report.json written before the field
    assert TestResult.from_dict(old).analysis.no_samples_reason == ""


def test_the_header_counts_one_sample_as_one_sample() -> None:
    from types import SimpleNamespace

    from pytest_inferscope.buffer import TraceBuffer
    from pytest_inferscope.collectors.cpu import Sampler
    from pytest_inferscope.collectors.describe import collectors_info

    sampler = Sampler(TraceBuffer(size_mb=1), 10.0, 0, 0)
    coll: Any = SimpleNamespace(
        t0=0, t_end=82 * MS, sampler=sampler, sampler_note="", tracer=None, modules_note="off", rounds=[],
        gpu_session=SimpleNamespace(collector=None, error="no GPU", choice=None),
        memory=SimpleNamespace(mode=lambda: "procfs"),
        options=SimpleNamespace(sample_interval_ms=10.0, modules=0, trace_rounds=None),
    )  # fmt: skip
    for n, words in ((1, "; 1 sample, one per 82.0 ms"), (2, "; 2 samples, one per 41.0 ms")):
        sampler.samples = n
        assert collectors_info(coll)[0].mode == f"stack sampling every 10 ms{words}"  # was '1 samples'
