"""After a collection: merge, analyze, check and report — the same path for pytest and the API."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .analyzer import DEFAULT_RULES, Context, Rule, WhatIf, analyze
from .analyzer.context import LAUNCH_GAP_NS
from .baseline import DETERMINISTIC_METRICS, BaselineEntry
from .checks import Plan, ab_regression_check, evaluate, failed_first
from .events import Kind, RawTrace
from .merger import Timeline, merge
from .regression import compare_to_baseline
from .reporters.files import slugify
from .results import Analysis, CollectorInfo, LatencyStats, RegressionVerdict, TestResult
from .rounds import RoundKind, kinds_of, row_kind

if TYPE_CHECKING:
    from .reporters.writer import ReportWriter


@dataclass
class Comparison:
    """What to compare a test against: its baseline entry (None: not in the baseline), and the rule's knobs."""

    baseline_name: str
    entry: BaselineEntry | None
    max_regression: float = 0.05
    alpha: float = 0.01
    tests_in_baseline: int = 0
    history: list[BaselineEntry] = field(default_factory=list)  # every saved run of the test, oldest first


@dataclass
class Judged:
    """What `judge` made of one collection: the result, the merged timeline and the analyzer's context."""

    result: TestResult
    timeline: Timeline
    ctx: Context


def process(
    raw: RawTrace,
    plan: Plan,
    collectors: list[CollectorInfo] | None = None,
    *,
    report_dir: Path | None = None,
    ab: Callable[[TestResult], dict[str, Any] | None] | None = None,
    environment: Mapping[str, Any] | None = None,
    writer: ReportWriter | None = None,
    trace_format: str = "json.gz",
    earlier_runs: Sequence[str] = (),
    **how: Any,
) -> tuple[TestResult, Timeline]:
    """Turn one raw collection into a checked, reported `TestResult`: `judge`, then the A/B verdict and the reports.

    The plan and the environment are kept in the trace's meta first, so the raw.npz written beside the
    reports says how it was made (`inferscope analyze` re-runs it from there); the environment's `torch_threads` is
    the collection's own reading (`raw.meta["torch_threads"]`, at its stop: a fixture's setting, not a body's own
    one given back before the rounds ended). `writer`: put the report
    files on disk through it (`reporters.writer`). `trace_format`: --inferscope-trace-format (json.gz or
    json). `earlier_runs`: the verdicts of the test's runs before this one in the session (a rerun plugin's), which
    its reports name. `how`: `judge`'s keywords.
    """
    raw.meta["plan"] = dataclasses.asdict(plan)
    raw.meta["environment"] = env = dict(environment or _meta_dict(raw, "environment"))
    if raw.meta.get("torch_threads") is not None:  # this test's, read at its collection's stop: not the session's
        env["torch_threads"] = raw.meta["torch_threads"]  # one reading, made once after the first test's body
    if report_dir is not None:  # the report files' code (Jinja2, the trace writer) loads only where they are written
        from .reporters.folder import submit_raw, write_test_reports
    # raw.npz first: the writer makes the test's folder and writes it while the analysis runs.
    began = time.perf_counter_ns()
    raw_submitted = (
        report_dir is not None
        and writer is not None
        and submit_raw(raw, report_dir, slugify(plan.nodeid), plan.nodeid, writer)
    )
    submitted = time.perf_counter_ns() - began
    judged = judge(raw, plan, collectors, report_dir=report_dir, **how)
    result = judged.result
    result.earlier_runs = list(earlier_runs)
    if ab is not None:  # the A/B verdict (ab.controller.finish): a regression fails the test like a check
        result.ab = ab(result)
        if result.ab is not None:
            _judged_by_ab(result, result.ab)
    if report_dir is not None:
        began = time.perf_counter_ns()
        write_test_reports(
            result,
            judged.timeline,
            report_dir,
            raw=raw,
            idle=judged.ctx.gpu.idle,
            writer=writer,
            raw_submitted=raw_submitted,
            trace_format=trace_format,
        )
        # Known only now, so not in the files just written: the session's summary and index.json have it.
        add_time(result, "reports_ms", time.perf_counter_ns() - began + submitted)
    return result, judged.timeline


def _judged_by_ab(result: TestResult, ab: dict[str, Any]) -> None:
    """An A/B run's verdict on the test: its max_regression check is the A/B comparison's (the limit the pairs were
    judged with), and a regression fails the test, as a crossed threshold does."""
    if "max_regression" in result.thresholds:
        check = ab_regression_check(result.thresholds["max_regression"], ab)
        result.checks = [check if c.key == "max_regression" else c for c in result.checks]
        result.checks.sort(key=lambda c: {"failed": 0, "not_evaluated": 1, "passed": 2}[c.status])
    if result.verdict != "partial":
        result.verdict = "fail" if ab.get("verdict") == "regressed" or result.failed_checks else "pass"


def add_time(result: TestResult, key: str, ns: int) -> None:
    """Add `ns` to `result.added[key]` (ms) and to its `added_ms`, where the result says what the plugin added; in a
    re-analysis's (`reanalysis_ms`, from `judge`'s `recorded_added`), to that alone: the run's figures stay."""
    if result.added:
        for k in ("reanalysis_ms",) if "reanalysis_ms" in result.added else (key, "added_ms"):
            result.added[k] = round((result.added.get(k) or 0.0) + ns / 1e6, 3)


#: The metrics a session keeps of a test (`kept`): those a baseline or an A/B verdict compares, and the measured rounds
#: that compiled, which the terminal summary names the tests of (reporters/terminal.py `compile_lines`), and the host
#: memory the tables show (reporters/fmt.py `host_memory_cell`).
KEPT_METRICS = (*DETERMINISTIC_METRICS, "compile.measured_rounds", "mem.rss_peak_mb", "mem.rss_start_mb")


def kept(result: TestResult, environment: dict[str, Any] | None = None) -> TestResult:
    """What a session keeps of a test once its report files are written and the hooks have seen it: the result with
    its analysis cut to the class, the confidence and the metrics a baseline or an A/B verdict compares or the
    summary reads (KEPT_METRICS), and its environment as the session's one dict (`environment`) when equal. The summary,
    the index, a saved baseline and xdist's controller read no more (not the collectors' description: ~0.5 kB a test of
    a long session); the rest is in the test's report files."""
    a = result.analysis
    metrics = {k: a.metrics[k] for k in KEPT_METRICS if k in a.metrics}
    env = environment if environment is not None and environment == result.environment else result.environment
    slim = Analysis(a.bottleneck, a.confidence, metrics=metrics)
    return dataclasses.replace(result, analysis=slim, marks=[], environment=env, collectors=[])


def judge(
    raw: RawTrace,
    plan: Plan,
    collectors: list[CollectorInfo] | None = None,
    *,
    outcome: str = "passed",
    partial_reason: str = "",
    gpu_required: bool = False,
    report_dir: Path | None = None,
    rules: Iterable[Rule] = DEFAULT_RULES,
    whatifs: Iterable[WhatIf] = (),
    comparison: Comparison | None = None,
    launch_gap_us: float = LAUNCH_GAP_NS / 1000,
    recorded_added: Mapping[str, float] | None = None,
) -> Judged:
    """Merge, analyze and check one collection: no I/O (`report_dir` only names the report in messages).

    `recorded_added`: a re-analysis's (`inferscope analyze`): what the plugin added when the test ran, kept as the
    result's `added`, with this analysis's own time apart as its `reanalysis_ms` (none where it is empty).

    `collectors` default to the ones the collection described (`raw.meta["collectors"]`), the environment
    to `raw.meta["environment"]`; the speed probe's readings come with the trace (`raw.meta["probe_ms"]`).
    """
    began = time.perf_counter_ns()
    timeline = merge(raw)
    if collectors is None:
        described = raw.meta.get("collectors")
        collectors = [CollectorInfo.from_dict(c) for c in described] if isinstance(described, list) else []
    environment = _meta_dict(raw, "environment")
    gpu_collected, gpu_reason = _gpu_state(collectors, timeline)
    ctx = Context(timeline, launch_gap_ns=round(launch_gap_us * 1000))
    analysis = analyze(timeline, rules, gpu_reason=gpu_reason, ctx=ctx, whatifs=whatifs)
    latency = ctx.rounds.latency
    slug = slugify(plan.nodeid)
    thresholds = dict(plan.thresholds)
    regression, regression_note = _compare(comparison, plan, thresholds, latency, analysis, environment,
                                           outcome=outcome, partial_reason=partial_reason)  # fmt: skip
    cpu = next((c for c in collectors if c.name == "cpu"), None)
    checks = evaluate(
        thresholds,
        analysis,
        latency,
        latency_stat=plan.latency_stat,
        overhead=cpu.overhead if cpu is not None else None,
        gpu_collected=gpu_collected,
        gpu_reason=gpu_reason,
        gpu_required=gpu_required,
        report=str(report_dir / slug / "report.md") if report_dir is not None else "",
        regression=regression,
        regression_note=regression_note,
    )
    analysis.findings = failed_first(analysis.findings, checks)
    verdict = "partial" if partial_reason else ("fail" if any(c.status == "failed" for c in checks) else "pass")
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
        marks=_marks(timeline),
        environment=environment,
        regression=regression,
        added=added_time(raw.meta, plan, time.perf_counter_ns() - began),
    )
    if recorded_added is not None:  # the run's figures; the time of this analysis is no part of the run's
        ran = {k: v for k, v in recorded_added.items() if k != "reanalysis_ms"}
        result.added = {**ran, "reanalysis_ms": result.added.get("analysis_ms", 0.0)} if ran else {}
    return Judged(result, timeline, ctx)


def added_time(meta: Mapping[str, Any], plan: Plan, analysis_ns: int) -> dict[str, float]:
    """What the plugin added to a test's time, in ms (`TestResult.added`), from the collection's meta (`meta`).

    `asked_ms`: the warm-up and measured rounds the test asked for (`plan`); `extra_rounds` and `extra_rounds_ms`: the
    rounds the plugin ran besides (after the measured ones: settling, profile, trace; a warm-up auto asked for; measured
    rounds beyond those asked for: the speed probe's, an A/B test's further pairs); `outside_rounds_ms`: the
    collection's own time outside every round (starting and stopping the collectors, the work between rounds: an A/B
    test's other side's rounds too), of which `collectors_ms` (where not 0) the collectors other plugins added
    (pytest_inferscope_collectors) took to start and stop; `analysis_ms`: merge, analysis and checks (`analysis_ns`);
    `load_ms`, only on the first profiled test of a pytest process (`meta["load_ns"]`): loading the plugin's code for
    profiling and post-processing (`preload`), choosing the GPU backend, reading the machine's facts; `added_ms`: these
    together
    (`process` adds `reports_ms` once the report files are written). Empty where the meta does not say (a trace
    imported from elsewhere)."""
    rows = meta.get("rounds")
    if not isinstance(rows, list) or "wall_ns" not in meta:
        return {}
    walls: dict[RoundKind, list[int]] = {}
    for row in rows:
        walls.setdefault(row_kind(row), []).append(int(row.get("wall_ns", 0)))
    warm, measured = walls.get(RoundKind.WARMUP, []), walls.get(RoundKind.MEASURED, [])
    asked = warm[: plan.warmup] + measured[: plan.rounds]
    after = [w for k, ws in walls.items() if k.after_measured for w in ws]
    extra = after + warm[plan.warmup :] + measured[plan.rounds :]
    every = sum(sum(ws) for ws in walls.values())
    outside = max(0, int(meta["wall_ns"]) - every) + int(meta.get("start_ns", 0)) + int(meta.get("stop_ns", 0))
    load = int(meta.get("load_ns", 0))
    added = {
        "asked_ms": round(sum(asked) / 1e6, 3),
        "extra_rounds": len(extra),
        "extra_rounds_ms": round(sum(extra) / 1e6, 3),
        "outside_rounds_ms": round(outside / 1e6, 3),
        "analysis_ms": round(analysis_ns / 1e6, 3),
    }
    if load > 0:
        added["load_ms"] = round(load / 1e6, 3)
    if (theirs := int(meta.get("extra_collectors_ns", 0))) > 0:  # part of outside_rounds_ms, said apart
        added["collectors_ms"] = round(theirs / 1e6, 3)
    added["added_ms"] = round((sum(extra) + outside + analysis_ns + load) / 1e6, 3)
    return added


def preload(reports: bool) -> None:
    """Import what a profiled test's collection, post-processing and (`reports`) report files load, before its
    collection starts: once a process, the pytest plugin times it as the first test's `load_ms` (`added_time`)."""
    from .collectors import schedule  # noqa: F401
    from .reporters import junit, progress, terminal  # noqa: F401

    if reports:
        from .reporters import folder

        folder.load_templates()


def _meta_dict(raw: RawTrace, key: str) -> dict[str, Any]:
    value = raw.meta.get(key)
    return dict(value) if isinstance(value, dict) else {}


def _gpu_state(collectors: list[CollectorInfo], timeline: Timeline) -> tuple[bool, str]:
    """Whether GPU work was collected, and if not, why (for the checks and the report)."""
    gpu = next((c for c in collectors if c.name == "gpu"), None)
    if gpu is not None and gpu.active and not timeline.clock.ok:
        return False, f"GPU times discarded: {timeline.clock.note}"
    if gpu is not None and gpu.active:
        return timeline.has_gpu, "the GPU backend ran but recorded no GPU work"
    return False, gpu.reason if gpu is not None else "no GPU backend ran"


def _compare(
    comparison: Comparison | None,
    plan: Plan,
    thresholds: dict[str, Any],
    latency: LatencyStats,
    analysis: Analysis,
    environment: dict[str, Any],
    *,
    outcome: str,
    partial_reason: str,
) -> tuple[RegressionVerdict | None, str]:
    """The regression verdict against the baseline (None when there is none to give), and the note why not."""
    if comparison is None:
        return None, "no baseline to compare against in this run (use --inferscope-compare=NAME)"
    # Comparing a session against a baseline gates every test on it; the marker can set its own limit.
    thresholds.setdefault("max_regression", comparison.max_regression)
    if comparison.entry is None:
        return None, (
            f"{plan.nodeid} is not in baseline {comparison.baseline_name!r} "
            f"({comparison.tests_in_baseline} tests); save one with --inferscope-save-baseline"
        )
    if partial_reason:
        return None, "no baseline to compare against in this run (use --inferscope-compare=NAME)"
    draft = TestResult(plan.nodeid, "", outcome, "pass", plan.rounds, plan.warmup, latency, analysis,
                       environment=environment)  # fmt: skip
    verdict = compare_to_baseline(
        comparison.entry,
        draft,
        max_regression=float(thresholds["max_regression"]),
        alpha=comparison.alpha,
        environment=environment,
        baseline_name=comparison.baseline_name,
        history=comparison.history,
    )
    return verdict, ""


def _marks(timeline: Timeline) -> list[dict[str, Any]]:
    """The mark_event()s: name, time in ms, attributes, and the round it was made in ("measured 3", "warmup 0"; none
    outside every round): a test's marks come from every round it ran, the warm-up's and those after the measured
    ones too, so that a count of them is read against the rounds."""
    ev = timeline.events
    idx = timeline.mask(Kind.MARK).nonzero()[0]
    if not len(idx):
        return []
    rounds = (ev["kind"] == int(Kind.ROUND)).nonzero()[0]
    rounds = rounds[ev["start"][rounds].argsort(kind="stable")]  # (one after another: by start)
    at = ev["start"][idx]
    k = ev["start"][rounds].searchsorted(at, side="right") - 1  # the round each mark is in, if any
    inside = (k >= 0) & (at < ev["end"][rounds][k.clip(0)]) if len(rounds) else k >= 0
    labels = [
        f"{RoundKind(kind).name.lower()} {n}"
        for kind, n in zip(kinds_of(ev["flags"][rounds]).tolist(), ev["value"][rounds].tolist(), strict=True)
    ]
    out = []
    for i, t, r, ok in zip(idx.tolist(), at.tolist(), k.tolist(), inside.tolist(), strict=True):
        mark = {
            "name": timeline.name(i),
            "t_ms": float(t) / 1e6,
            "attrs": timeline.attrs[int(ev["value"][i])] if ev["value"][i] >= 0 else {},
        }
        if ok:
            mark["round"] = labels[r]
        out.append(mark)
    return out
