"""After a collection: merge, analyze, check and report — the same path for pytest and the API."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .analyzer import DEFAULT_RULES, Context, Rule, WhatIf, analyze
from .analyzer.context import LAUNCH_GAP_NS
from .baseline import BaselineEntry
from .checks import Plan, evaluate
from .events import Kind, RawTrace
from .merger import Timeline, merge
from .regression import RegressionVerdict, compare_to_baseline
from .reporters import write_test_reports
from .reporters.files import slugify
from .results import CollectorInfo, TestResult


@dataclass
class Comparison:
    """What to compare a test against: its baseline entry (None: not in the baseline), and the rule's knobs."""

    baseline_name: str
    entry: BaselineEntry | None
    max_regression: float = 0.05
    alpha: float = 0.01
    tests_in_baseline: int = 0
    history: list[BaselineEntry] = field(default_factory=list)  # every saved run of the test, oldest first


def process(
    raw: RawTrace,
    plan: Plan,
    collectors: list[CollectorInfo],
    *,
    outcome: str = "passed",
    partial_reason: str = "",
    gpu_required: bool = False,
    report_dir: Path | None = None,
    environment: Mapping[str, Any] | None = None,
    rules: Iterable[Rule] = DEFAULT_RULES,
    whatifs: Iterable[WhatIf] = (),
    comparison: Comparison | None = None,
    launch_gap_us: float = LAUNCH_GAP_NS / 1000,
    probe_ms: list[float] | None = None,
    ab: Callable[[TestResult], dict[str, Any] | None] | None = None,
) -> tuple[TestResult, Timeline]:
    """Turn one raw collection into a checked, reported `TestResult` (`probe_ms`: drift.probe_ms readings)."""
    timeline = merge(raw)
    gpu = next((c for c in collectors if c.name == "gpu"), None)
    gpu_collected = bool(gpu and gpu.active and timeline.has_gpu)
    if gpu is not None and gpu.active and not timeline.clock.ok:
        gpu_reason = f"GPU times discarded: {timeline.clock.note}"
    elif gpu is not None and gpu.active:
        gpu_reason = "the GPU backend ran but recorded no GPU work"
    else:
        gpu_reason = gpu.reason if gpu is not None else "no GPU backend ran"
    ctx = Context(timeline, launch_gap_ns=round(launch_gap_us * 1000))
    analysis = analyze(timeline, rules, gpu_reason=gpu_reason, ctx=ctx, whatifs=whatifs)
    latency = ctx.latency
    if probe_ms:
        latency.probe_ms = list(probe_ms)
    slug = slugify(plan.nodeid)
    report = str(report_dir / slug / "report.md") if report_dir is not None else ""
    cpu = next((c for c in collectors if c.name == "cpu"), None)
    thresholds = dict(plan.thresholds)
    regression: RegressionVerdict | None = None
    regression_note = "no baseline to compare against in this run (use --inferscope-compare=NAME)"
    if comparison is not None:
        # Comparing a session against a baseline gates every test on it; the marker can set its own limit.
        thresholds.setdefault("max_regression", comparison.max_regression)
        if comparison.entry is None:
            regression_note = (
                f"{plan.nodeid} is not in baseline {comparison.baseline_name!r} "
                f"({comparison.tests_in_baseline} tests); save one with --inferscope-save-baseline"
            )
        elif not partial_reason:
            draft = TestResult(plan.nodeid, "", outcome, "pass", plan.rounds, plan.warmup, latency, analysis,
                               environment=dict(environment or {}))  # fmt: skip
            regression = compare_to_baseline(
                comparison.entry,
                draft,
                max_regression=float(thresholds["max_regression"]),
                alpha=comparison.alpha,
                environment=environment,
                baseline_name=comparison.baseline_name,
                history=comparison.history,
            )
    checks = evaluate(
        thresholds,
        analysis,
        latency,
        latency_stat=plan.latency_stat,
        overhead=cpu.overhead if cpu is not None else None,
        gpu_collected=gpu_collected,
        gpu_reason=gpu_reason,
        gpu_required=gpu_required,
        report=report,
        regression=regression,
        regression_note=regression_note,
    )
    verdict = "partial" if partial_reason else ("fail" if any(c.status == "failed" for c in checks) else "pass")
    marks = [
        {
            "name": timeline.name(i),
            "t_ms": float(timeline.events["start"][i]) / 1e6,
            "attrs": timeline.attrs[int(timeline.events["value"][i])] if timeline.events["value"][i] >= 0 else {},
        }
        for i in timeline.mask(Kind.MARK).nonzero()[0].tolist()
    ]
    result = TestResult(
        nodeid=plan.nodeid,
        slug=slug,
        outcome=outcome,
        verdict=verdict,
        rounds=plan.rounds,
        warmup=plan.warmup,
        latency=latency,
        analysis=analysis,
        checks=checks,
        collectors=collectors,
        clock=timeline.clock,
        thresholds=thresholds,
        dropped_events=timeline.dropped,
        event_count=len(timeline),
        partial_reason=partial_reason,
        marks=marks,
        environment=dict(environment or {}),
        regression=regression.to_dict() if regression is not None else None,
    )
    if ab is not None:  # the A/B verdict (ab.controller.finish): a regression fails the test like a check
        result.ab = ab(result)
        if result.ab is not None and result.ab.get("verdict") == "regressed" and verdict == "pass":
            result.verdict = "fail"
    if report_dir is not None:
        write_test_reports(result, timeline, report_dir, raw=raw, idle=ctx.idle)
    return result, timeline
