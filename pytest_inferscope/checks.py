"""Marker thresholds: what the marker accepts, validated at collection, and checked after the run.

The marker's keys and their validation live in `marker.py` (re-exported here); `evaluate`
returns one `CheckResult` per threshold, and a failure's message explains it with the evidence.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from .marker import MARKER_KEYS, PARTNERS, MarkerKey, lone_key_problem, lone_keys, parse_marker, validate_marker
from .options import LEAN_TRACE_ROUNDS, MARKED_ROUNDS, MARKED_WARMUP
from .results import UNCLASSIFIED, Analysis, CheckResult, Finding, LatencyStats
from .units import fmt_fixed, fmt_ms, fmt_threshold
from .warning import InferscopeWarning

__all__ = ["MARKER_KEYS", "MarkerKey", "Plan", "ab_regression_check", "evaluate", "validate_marker"]

if TYPE_CHECKING:
    import pytest

    from .config import Settings
    from .results import RegressionVerdict


#: Deterministic per-round counts: the same every run of the same code, so CI can gate on them tightly.
_PER_ROUND = {
    "max_kernel_launches": ("gpu.kernel_launches_per_round", "kernel launches"),
    "max_h2d_bytes": ("gpu.h2d_bytes_per_round", "host-to-device bytes"),
    "max_syncs": ("host.syncs_per_round", "blocking synchronisations"),
}


def _ms(x: float, beside: float | None = None) -> str:
    """As the summary and the reports write it (`units.fmt_ms`); `beside`: the limit, which it must read apart from."""
    return f"{fmt_ms(x, beside)} ms"


def _mb(x: float | None) -> str:
    return "n/a" if x is None else f"{fmt_fixed(x, 1)} MB"


def _host_memory_note(m: Mapping[str, float | None], peak: float, added: bool = False) -> str:
    """What max_host_memory_mb (or, `added`, max_host_memory_added_mb) compared: the whole process's peak, with what was
    resident before the rounds (torch's import, a model a fixture loaded), and whether the peak was only sampled."""
    start = m.get("mem.rss_start_mb")
    if start is None:
        note = ""
    elif added:
        note = (
            f" The peak was {_mb(peak)}, {_mb(start)} of it resident before the rounds (imports such as torch, models "
            "fixtures loaded, what earlier tests kept)."
        )
    else:
        note = (
            f" The whole process counts, {_mb(start)} of it resident before the rounds (imports such as torch, models "
            f"fixtures loaded), {_mb(max(0.0, peak - start))} above that at the peak."
        )
    how = m.get("mem.rss_peak_sampled")
    if how == 2:
        note += (
            " The peak was read only at the rounds' start and end (no stack sampler ran, and the kernel's exact peak, "
            "VmHWM, could not be reset here): a peak inside the rounds is missed."
        )
    elif how:
        note += (
            " The peak was sampled (every 10 ms at most: the kernel's exact peak, VmHWM, could not be reset here): a "
            "shorter spike may be missed."
        )
    return note


def _evidence(analysis: Analysis, latency: LatencyStats) -> str:
    lat = (
        f"{len(latency.samples_ms)} rounds: median {_ms(latency.median)}, p90 {_ms(latency.p90)}, "
        f"max {_ms(latency.max)}"
    )
    # the first finding of the class named, before the first by share (cpu_contention, say, supports no class)
    of_class = [f for f in analysis.findings if f.cause == analysis.bottleneck] or analysis.findings
    top = of_class[0].summary.rstrip(".") if of_class else "no rule found a cause"
    return f"{lat}; bottleneck {stated(analysis)}: {top}"


def stated(analysis: Analysis) -> str:
    """The class as a message says it: 'cpu_bound (confidence 85%)', a percentage as in every report and table, or for
    unclassified, which names no class to be confident in, why none was named."""
    if analysis.bottleneck == UNCLASSIFIED:
        return f"{UNCLASSIFIED} ({analysis.unclassified_reason or 'no finding explains enough of the time'})"
    return f"{analysis.bottleneck} (confidence {analysis.confidence * 100:.0f}%)"


def evaluate(
    thresholds: Mapping[str, Any],
    analysis: Analysis,
    latency: LatencyStats,
    *,
    latency_stat: str = "median",
    overhead: float | None = None,
    gpu_collected: bool,
    gpu_reason: str = "",
    gpu_required: bool = False,
    report: str = "",
    regression: RegressionVerdict | None = None,
    regression_note: str = "no baseline to compare against in this run",
) -> list[CheckResult]:
    """Check every threshold in the marker; the failure messages carry the evidence and the report path."""
    m = analysis.metrics
    where = f" Report: {report}" if report else ""
    ev = _evidence(analysis, latency)
    out = _Results(f" Evidence: {ev}.{where}", where)
    add, not_evaluated = out.add, out.not_evaluated
    stat = thresholds.get("latency_stat", latency_stat)
    for key, limit in thresholds.items():
        spec = MARKER_KEYS.get(key)
        if spec is None or not spec.threshold:
            continue
        if spec.gpu and not gpu_collected:
            not_evaluated(
                key, limit, f"no GPU data was collected ({gpu_reason or 'no GPU backend ran'})", fail=gpu_required
            )
            continue
        if key == "max_latency_ms":
            if not latency.samples_ms:
                not_evaluated(key, limit, "no round completed")
                continue
            value = latency.get(stat)
            add(key, limit, value, value > limit, f"{stat} latency", stat=stat)
        elif key == "expect_bottleneck":
            out.bottleneck(analysis, limit)
        elif key == "expect_fix":
            least = float(thresholds.get("min_fix_saving", MIN_FIX_SAVING))
            out.append(_expect_fix(analysis, limit, least, gpu_required, out.evidence))
        elif key in ("max_host_memory_mb", "max_host_memory_added_mb"):
            out.host_memory(key, limit, m)
        elif key == "max_overhead":
            if overhead is None:
                not_evaluated(key, limit, "the collector gave no overhead estimate")
            else:
                add(key, limit, overhead, overhead > limit, "estimated profiler overhead")
        elif key == "max_regression":
            out.regression(limit, regression, regression_note)
        elif key == "max_gpu_idle":
            idle = m.get("gpu.idle_fraction")
            add(key, limit, idle, (idle or 0.0) > limit, "GPU idle fraction")
        elif key == "max_gpu_memory_mb":
            peak = m.get("gpu.memory_peak_mb")
            if peak is None:
                not_evaluated(
                    key, limit, "GPU memory peak unknown (torch's CUDA allocator was not in use)", fail=gpu_required
                )
            else:
                add(key, limit, peak, peak > limit, "peak GPU memory allocated")
        elif key in _PER_ROUND:
            metric, what = _PER_ROUND[key]
            count = m.get(metric)
            if count is None:
                not_evaluated(key, limit, f"{what} was not measured", fail=gpu_required)
            else:
                add(key, limit, count, count > limit, f"{what} per round")
        elif key == "max_transfer_fraction":
            frac = m.get("gpu.transfer_fraction")
            add(key, limit, frac, (frac or 0.0) > limit, "transfer fraction")
    out.sort(key=lambda c: {"failed": 0, "not_evaluated": 1, "passed": 2}[c.status])
    return list(out)


class _Results(list[CheckResult]):
    """The checks of one test as `evaluate` adds them; failures carry `evidence` (and the report path)."""

    def __init__(self, evidence: str, where: str) -> None:
        super().__init__()
        self.evidence, self.where = evidence, where

    def add(self, key: str, limit: Any, value: Any, failed: bool, what: str, note: str = "", stat: str = "") -> None:
        """A numeric threshold's check: value and limit in the key's unit, as the reports write them, apart from each
        other where they would read alike (`units.fmt_threshold`); `stat`: the latency statistic compared."""
        verb = "exceeds" if failed else "within"
        shown = fmt_threshold(key, value, limit) or "n/a"
        limit_shown = fmt_threshold(key, limit, value) or str(limit)
        msg = f"{key}: {what} {shown} {verb} limit {limit_shown}.{note}" + (self.evidence if failed else "")
        short = f"{stat} {shown}".lstrip() + f" {'>' if failed else '<='} {limit_shown}"
        self.append(CheckResult(key, "failed" if failed else "passed", limit, value, msg, short))

    def not_evaluated(self, key: str, limit: Any, why: str, fail: bool = False) -> None:
        status = "failed" if fail else "not_evaluated"
        extra = " GPU collection is required (--inferscope-gpu=required), so this fails." if fail else ""
        msg = f"{key}: not evaluated: {why}.{extra}{self.where if fail else ''}"
        short = "not evaluated, GPU data required" if fail else "not evaluated"
        self.append(CheckResult(key, status, limit, None, msg, short))

    def host_memory(self, key: str, limit: Any, m: Mapping[str, float | None]) -> None:
        """max_host_memory_mb (the process's peak RSS) or max_host_memory_added_mb (its peak above the RSS before
        the rounds)."""
        peak, start = m.get("mem.rss_peak_mb"), m.get("mem.rss_start_mb")
        if peak is None:
            self.not_evaluated(key, limit, "host memory was not read (no /proc)")
        elif key == "max_host_memory_mb":
            self.add(key, limit, peak, peak > limit, "the process's peak RSS", _host_memory_note(m, peak))
        elif start is None:
            self.not_evaluated(key, limit, "host memory before the rounds was not read (a trace recorded without it)")
        else:
            added, what = max(0.0, peak - start), "the process's peak RSS above its RSS before the rounds"
            self.add(key, limit, added, added > limit, what, _host_memory_note(m, peak, added=True))

    def bottleneck(self, analysis: Analysis, expected: Any) -> None:
        got, failed = analysis.bottleneck, analysis.bottleneck != expected
        msg = f"expect_bottleneck: classified {stated(analysis)}, expected {expected}."
        self.append(CheckResult("expect_bottleneck", "failed" if failed else "passed", expected, got,
                                msg + (self.evidence if failed else ""), f"{got}, expected {expected}"))  # fmt: skip

    def regression(self, limit: Any, regression: RegressionVerdict | None, note: str) -> None:
        if regression is None or regression.verdict == "inconclusive":
            self.not_evaluated("max_regression", limit, note if regression is None else regression.reason.rstrip("."))
            return
        msg = f"max_regression: {regression.message()}" + (self.where if regression.failed else "")
        ratio = regression.latency.ratio
        change = f"{'+' * (ratio > 1)}{fmt_threshold('max_regression', ratio - 1, limit) or 'n/a'}"
        short = f"{regression.verdict}, median {change}, allowed {fmt_threshold('max_regression', limit)}"
        self.append(CheckResult("max_regression", "failed" if regression.failed else "passed", limit, ratio, msg,
                                short))  # fmt: skip


def ab_regression_check(limit: Any, ab: Mapping[str, Any]) -> CheckResult:
    """The marker's max_regression in an A/B run, judged by the A/B verdict (`ab`, ABVerdict as plain data): the A/B
    gate judges the test against the ref with that limit, so the check says what it found (docs/ab.md)."""
    verdict, ref, reason = ab.get("verdict"), ab.get("ref"), str(ab.get("reason") or "").rstrip(".")
    if verdict in ("regressed", "improved", "unchanged"):
        status = "failed" if verdict == "regressed" else "passed"
        msg = f"max_regression: {verdict} against {ref}, judged by the A/B comparison: {reason}."
        return CheckResult("max_regression", status, limit, ab.get("ratio"), msg, f"{verdict} against {ref} (A/B)")
    msg = f"max_regression: not evaluated: the A/B comparison with {ref} is {verdict}: {reason}."
    return CheckResult("max_regression", "not_evaluated", limit, None, msg)


#: The finding that says how the memory a failed threshold measures went (a leak, pages faulting in).
_THRESHOLD_FINDING = {
    "max_host_memory_mb": "memory_pressure",
    "max_host_memory_added_mb": "memory_pressure",
    "max_gpu_memory_mb": "gpu_memory_pressure",
}


def failed_first(findings: list[Finding], checks: list[CheckResult]) -> list[Finding]:
    """`findings` with those of the memory thresholds that failed first (memory_pressure for a host memory one): a
    memory finding explains little of the time and was listed by it, below what the test did not fail on."""
    rules = {_THRESHOLD_FINDING[c.key] for c in checks if c.status == "failed" and c.key in _THRESHOLD_FINDING}
    return sorted(findings, key=lambda f: f.rule not in rules) if rules else findings


@dataclass(frozen=True)
class Plan:
    """How one test is profiled: rounds, warm-up and the marker's thresholds (typed by `parse_marker`)."""

    nodeid: str
    rounds: int = 1
    warmup: int = 0
    thresholds: dict[str, Any] = field(default_factory=dict)
    latency_stat: str = "median"
    cpu: str = "sample"
    modules: int = 0
    round_cap: float = 1.0  # at most round_cap x rounds when re-measuring unsteady rounds (drift.measure_steady)
    trace_rounds: int | str = "all"  # trace rounds after the measured ones (launch calls recorded), or "all"
    gpu_rounds: str = "measured"  # which rounds record GPU activity: measured | trace | auto
    lean_trace_rounds: int | str = "all"  # trace rounds when only they record GPU activity (trace, or auto gone lean)
    until_in_step: bool = False  # profile and trace rounds end at the first in step (up to their maximum)


def markers_farthest_first(item: pytest.Item) -> list[pytest.Mark]:
    """The test's inferscope markers, the closest last: its parameters' (`pytest.param(..., marks=...)`), then its
    function's, its class's, its module's before them. pytest lists a function's own marks before its parameters'
    (`get_closest_marker` returns the function's), so a marker written for one parametrisation lost to the function's
    until 2026-11-30."""
    marks = list(item.iter_markers("inferscope"))
    callspec = getattr(item, "callspec", None)
    params = [m for m in getattr(callspec, "marks", ()) if m.name == "inferscope"]
    return [*(m for m in reversed(marks) if not any(m is p for p in params)), *params]


@dataclass(frozen=True)
class UnusedKey:
    """A class or module marker key that does nothing (`lone_key_problems`): the warning's text, and where the marker
    is (the class's or module's file and line), which the warning names rather than this file."""

    text: str
    path: str
    lineno: int


def lone_key_problems(items: Iterable[pytest.Item]) -> tuple[list[str], list[UnusedKey]]:
    """Marker keys that do nothing (`marker.lone_keys`: latency_stat without max_latency_ms, min_fix_saving without
    expect_fix), judged on each test's markers merged: errors for a key of the test's own marker (its function's or
    its parameters'), and warnings for one a class or module marker gives, once a marker, when none of the tests
    collected under it sets the key's partner: a class may set latency_stat for those of its tests that set
    max_latency_ms, so there the key is a shared default, wrong only if no test uses it."""
    errors: list[str] = []
    inherited: dict[tuple[str, str], tuple[Any, bool, Any]] = {}  # (node id, key) -> (value, used, the node)
    for item in items:
        marks = list(item.iter_markers_with_node("inferscope"))
        lone, said = set(lone_keys(k for _, m in marks for k in m.kwargs)), set()
        for node, mark in marks:  # (the closest first)
            for key in sorted(set(mark.kwargs) & PARTNERS.keys()):
                if node is item:
                    if key in lone and key not in said:
                        said.add(key)
                        errors.append(lone_key_problem(item.nodeid, key, mark.kwargs[key]))
                    continue
                value, used, _ = inherited.get((node.nodeid, key), (mark.kwargs[key], False, node))
                inherited[(node.nodeid, key)] = (value, used or key not in lone, node)
    unused = []
    for (where, key), (value, used, node) in inherited.items():
        if not used:
            partner, example = PARTNERS[key]
            text = (
                f"{where}: @pytest.mark.inferscope({key}={value!r}) does nothing: none of the tests collected under "
                f"it sets {partner}. Add {example} to the tests it is meant for, or remove {key}."
            )
            unused.append(UnusedKey(text, *_where_defined(node)))
    return errors, unused


def _where_defined(node: Any) -> tuple[str, int]:
    """A class's or module's file and line (1-based; a module's first line); `node`: pytest's Node, not public."""
    try:
        path, line, _ = node.reportinfo()
    except Exception:  # a node type of another plugin's
        path, line = node.path, None
    return str(path), (line or 0) + 1


def warn_unused(unused: list[UnusedKey], shown: bool = True) -> list[str]:
    """Warn of each class or module marker key that does nothing (`lone_key_problems`), at the marker's file and line;
    those a warnings filter turns into errors (`-W error`) are returned, for the collection's usage error to list with
    the others. Not `shown` (an xdist worker but the first: each collects the same tests, and the controller listed the
    warning as many times), the warning is only checked against the filters."""
    errors = []
    for u in unused:
        try:
            with warnings.catch_warnings(record=not shown):
                warnings.warn_explicit(InferscopeWarning(u.text), InferscopeWarning, u.path, u.lineno)
        except InferscopeWarning:
            errors.append(u.text)
    return errors


#: The first line of the refusal of bad marker arguments (`refuse_markers`).
REFUSED = "invalid @pytest.mark.inferscope arguments:"


def refuse_markers(config: pytest.Config, items: list[pytest.Item], problems: list[str]) -> None:
    """Stop the session on invalid markers, the problems listed in one paragraph each: a usage error; in an xdist
    worker, a failed collection report the controller shows (and stops on, as on any collection error) with no test
    left to run, and ends as a usage error (`xdist.XdistHooks`). A worker's usage error reached the controller as an
    INTERNALERROR (xdist's "assert not crashitem"), without the problems (pytest-xdist 3.8)."""
    import pytest

    text = f"{REFUSED}\n  " + "\n  ".join(problems)
    if not hasattr(config, "workerinput"):
        raise pytest.UsageError(text)
    config.hook.pytest_collectreport(report=pytest.CollectReport("", "failed", text, []))
    items[:] = []


def plan_of(item: pytest.Item, settings: Settings) -> Plan | None:
    """How `item` is profiled (its markers over the settings, the closest marker winning), or None when it is not."""
    kwargs: dict[str, Any] = {}
    marked = False
    for marker in markers_farthest_first(item):
        marked = True
        kwargs.update(parse_marker(marker.kwargs))  # validated at collection; typed by the options' parsers
    # A test that asks for the `inferscope` fixture (directly or through another fixture) asked to be
    # profiled, as pytest-benchmark's `benchmark` does: like a marked test with no keys, but with the
    # rounds of an unmarked one unless options say otherwise.
    asked = "inferscope" in getattr(item, "fixturenames", ())
    if not marked and not settings.all and not asked:
        return None
    s = settings
    default_rounds, default_warmup = (MARKED_ROUNDS, MARKED_WARMUP) if marked else (1, 0)
    traced = kwargs.get("trace_rounds", s.trace_rounds)
    explicit = "trace_rounds" in kwargs or s.sources.get("trace_rounds", "default") != "default"
    plan = Plan(
        nodeid=item.nodeid,
        rounds=int(kwargs.get("rounds", s.rounds if s.rounds is not None else default_rounds)),
        warmup=int(kwargs.get("warmup", s.warmup if s.warmup is not None else default_warmup)),
        thresholds=kwargs,
        latency_stat=str(kwargs.get("latency_stat", s.latency_stat)),
        cpu=str(kwargs.get("cpu", s.cpu)),
        modules=int(kwargs.get("modules", s.modules)),
        round_cap=float(kwargs.get("round_cap", s.round_cap)),
        trace_rounds=traced,
        gpu_rounds=str(kwargs.get("gpu_rounds", s.gpu_rounds)),
        lean_trace_rounds=traced if explicit else LEAN_TRACE_ROUNDS,
        until_in_step=not explicit,
    )
    if "benchmark" in getattr(item, "fixturenames", ()):
        # pytest-benchmark's fixture may be called once a test (a second call raises FixtureAlreadyUsed): one measured
        # call around its own iterations, and nothing that calls the body again (no warm-up, no round the speed probe
        # adds, no trace round: GPU activity and launch calls recorded in the call). Rounds or a warm-up the marker
        # asks for are kept, for `benchmark_conflict` to refuse.
        plan = replace(
            plan, rounds=int(kwargs.get("rounds", 1)), warmup=int(kwargs.get("warmup", 0)), round_cap=1.0,
            trace_rounds="all", gpu_rounds="measured", lean_trace_rounds="all", until_in_step=False,
        )  # fmt: skip
    return plan


def benchmark_conflict(item: pytest.Item, plan: Plan) -> str | None:
    """Why a test using pytest-benchmark's `benchmark` fixture cannot be profiled as its marker asks, or None."""
    if "benchmark" not in getattr(item, "fixturenames", ()) or plan.rounds + plan.warmup <= 1:
        return None
    return (
        f"{item.nodeid}: uses pytest-benchmark's `benchmark` fixture, which may be called once a test, but its "
        f"inferscope marker asks for {plan.warmup + plan.rounds} calls (warmup={plan.warmup}, rounds={plan.rounds}). "
        "Remove `rounds` and `warmup` from the marker "
        "(the test is then profiled in one call, around pytest-benchmark's own iterations), or call the function "
        "without the fixture to profile it in rounds."
    )


#: expect_fix's default: the fix must save this share of the round.
MIN_FIX_SAVING = 0.15


def _expect_fix(analysis: Analysis, cls: str, least: float, gpu_required: bool, evidence: str) -> CheckResult:
    """expect_fix: the best simulated fix of class `cls` saves at least `least` of the round."""
    if not analysis.whatif:
        why = analysis.whatif_replay.get("fallback") or "no what-if table was built"
        status = "failed" if gpu_required else "not_evaluated"
        return CheckResult("expect_fix", status, cls, None, f"expect_fix: not evaluated: {why}.")
    rows = [r for r in analysis.whatif if r.bottleneck == cls]
    best = max(rows, key=lambda r: r.saved_fraction, default=None)
    saved = best.saved_fraction if best is not None else 0.0
    failed = saved < least
    what = f"{best.change} saves {saved:.1%} of the round" if best is not None else "no simulated fix of that class"
    msg = f"expect_fix: the best {cls} fix simulated: {what}; at least {least:.0%} expected."
    short = f"best {cls} fix saves {fmt_threshold('expect_fix', saved, least)}, {least:.0%} expected"
    return CheckResult(
        "expect_fix", "failed" if failed else "passed", cls, round(saved, 4), msg + (evidence if failed else ""), short
    )
