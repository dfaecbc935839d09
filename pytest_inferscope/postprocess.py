"""After a collection: merge, analyze, check and report — the same path for pytest and the API."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .analyzer import DEFAULT_RULES, Context, Rule, analyze
from .checks import evaluate
from .events import Kind, RawTrace
from .merger import Timeline, merge
from .reporters import write_test_reports
from .reporters.files import slugify
from .results import CollectorInfo, TestResult


@dataclass
class Plan:
    """How one test is profiled: rounds, warm-up and the marker's thresholds."""

    nodeid: str
    rounds: int = 1
    warmup: int = 0
    thresholds: dict[str, Any] = field(default_factory=dict)
    latency_stat: str = "median"
    cpu: str = "sample"


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
) -> tuple[TestResult, Timeline]:
    """Turn one raw collection into a checked, reported `TestResult`."""
    timeline = merge(raw)
    gpu = next((c for c in collectors if c.name == "gpu"), None)
    gpu_collected = bool(gpu and gpu.active and timeline.has_gpu)
    if gpu is not None and gpu.active and not timeline.clock.ok:
        gpu_reason = f"GPU times discarded: {timeline.clock.note}"
    elif gpu is not None and gpu.active:
        gpu_reason = "the GPU backend ran but recorded no GPU work"
    else:
        gpu_reason = gpu.reason if gpu is not None else "no GPU backend ran"
    analysis = analyze(timeline, rules, gpu_reason=gpu_reason)
    latency = Context(timeline).latency
    slug = slugify(plan.nodeid)
    report = str(report_dir / slug / "report.md") if report_dir is not None else ""
    cpu = next((c for c in collectors if c.name == "cpu"), None)
    checks = evaluate(
        plan.thresholds,
        analysis,
        latency,
        latency_stat=plan.latency_stat,
        overhead=cpu.overhead if cpu is not None else None,
        gpu_collected=gpu_collected,
        gpu_reason=gpu_reason,
        gpu_required=gpu_required,
        report=report,
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
        thresholds=dict(plan.thresholds),
        dropped_events=timeline.dropped,
        event_count=len(timeline),
        partial_reason=partial_reason,
        marks=marks,
        environment=dict(environment or {}),
    )
    if report_dir is not None:
        write_test_reports(result, timeline, report_dir, raw=raw)
    return result, timeline
