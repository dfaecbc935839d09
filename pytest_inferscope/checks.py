"""Marker thresholds: what the marker accepts, validated at collection, and checked after the run.

`MARKER_KEYS` is the one definition of the marker's keys (the docs are generated from it).
`validate_marker` returns problems as sentences; `evaluate` returns one `CheckResult` per
threshold, and a failure's message explains it with the evidence.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .results import BOTTLENECKS, LATENCY_STATS, UNCLASSIFIED, Analysis, CheckResult, LatencyStats

if TYPE_CHECKING:
    from .regression import RegressionVerdict


@dataclass(frozen=True)
class MarkerKey:
    """One key of `@pytest.mark.inferscope(...)`."""

    name: str
    kind: str  # "number" | "fraction" | "int" | "choice"
    help: str
    low: float | None = None  # inclusive, unless low_open
    high: float | None = None  # inclusive
    low_open: bool = False  # values must be > low
    choices: tuple[str, ...] = ()
    gpu: bool = False  # needs GPU data to evaluate
    threshold: bool = True  # False for settings (rounds, warmup, cpu, latency_stat)

    def valid(self) -> str:
        if self.kind == "choice":
            return "one of " + ", ".join(repr(c) for c in self.choices)
        what = {"number": "a number", "fraction": "a fraction", "int": "an integer"}[self.kind]
        lo = "" if self.low is None else f" {'>' if self.low_open else '>='} {self.low:g}"
        hi = "" if self.high is None else f" <= {self.high:g}"
        # A number key with choices also takes those words (trace_rounds: N or 'all').
        words = "".join(f" or {c!r}" for c in self.choices)
        return f"{what}{lo}{' and' if lo and hi else ''}{hi}{words}"

    def check(self, value: Any) -> str | None:
        """None when `value` is valid, else what is wrong with it."""
        if self.kind == "choice":
            return None if value in self.choices else f"{value!r} is not {self.valid()}"
        if isinstance(value, str) and value in self.choices:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{value!r} is not {self.valid()}"
        if self.kind == "int" and not isinstance(value, int):
            return f"{value!r} is not {self.valid()}"
        too_low = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        if not math.isfinite(value) or too_low or (self.high is not None and value > self.high):
            return f"{value!r} is out of range: give {self.valid()}"
        return None


MARKER_KEYS: dict[str, MarkerKey] = {
    k.name: k
    for k in (
        MarkerKey(
            "max_latency_ms",
            "number",
            "fail when the round latency statistic (latency_stat) exceeds this",
            low=0,
            low_open=True,
        ),
        MarkerKey(
            "latency_stat",
            "choice",
            "the statistic max_latency_ms is checked against (default: median)",
            choices=LATENCY_STATS,
            threshold=False,
        ),
        MarkerKey(
            "max_regression",
            "fraction",
            "allowed latency regression against a stored baseline (0.05 = 5%)",
            low=0,
            high=10,
        ),
        MarkerKey(
            "expect_bottleneck",
            "choice",
            "fail unless the analyzer classifies the test as this",
            choices=(*BOTTLENECKS, UNCLASSIFIED),
        ),
        MarkerKey(
            "expect_fix",
            "choice",
            "fail unless a simulated fix of this class (the what-if table) saves at least min_fix_saving of the "
            "round: what holds on every GPU when the class itself may differ between them",
            choices=BOTTLENECKS,
            gpu=True,
        ),
        MarkerKey(
            "min_fix_saving",
            "fraction",
            "the share of the round expect_fix's fix must save (default 0.15)",
            low=0,
            high=1,
            threshold=False,
        ),
        MarkerKey("max_host_memory_mb", "number", "fail when peak host RSS exceeds this many MB", low=0, low_open=True),
        MarkerKey(
            "max_overhead",
            "fraction",
            "fail when the profiler's estimated overhead exceeds this fraction",
            low=0,
            high=1,
        ),
        MarkerKey(
            "max_gpu_idle",
            "fraction",
            "fail when the GPU is idle more than this fraction of the round",
            low=0,
            high=1,
            gpu=True,
        ),
        MarkerKey(
            "max_gpu_memory_mb",
            "number",
            "fail when peak GPU memory allocated exceeds this many MB",
            low=0,
            low_open=True,
            gpu=True,
        ),
        MarkerKey(
            "max_transfer_fraction",
            "fraction",
            "fail when host/device copies cover more than this fraction of the round",
            low=0,
            high=1,
            gpu=True,
        ),
        MarkerKey(
            "max_kernel_launches",
            "number",
            "fail when a round launches more GPU kernels than this (deterministic)",
            low=0,
            gpu=True,
        ),
        MarkerKey(
            "max_h2d_bytes",
            "number",
            "fail when a round copies more bytes host-to-device than this (deterministic)",
            low=0,
            gpu=True,
        ),
        MarkerKey(
            "max_syncs",
            "number",
            "fail when a round makes more blocking synchronisations than this (deterministic)",
            low=0,
            gpu=True,
        ),
        MarkerKey("rounds", "int", "measured calls of the test body", low=1, high=1_000_000, threshold=False),
        MarkerKey(
            "warmup", "int", "calls before the measured ones, not counted", low=0, high=1_000_000, threshold=False
        ),
        MarkerKey(
            "round_cap",
            "number",
            "with the speed probe on, add rounds until `rounds` ran at the machine's usual speed, up to this "
            "many times `rounds` in all (1 = never)",
            low=1,
            high=100,
            threshold=False,
        ),
        MarkerKey(
            "trace_rounds",
            "int",
            "extra rounds after the measured ones that record the GPU launch calls, which the measured rounds "
            "are timed without; 'all' records them in every round (no trace round)",
            low=1,
            high=1000,
            choices=("all",),
            threshold=False,
        ),
        MarkerKey(
            "gpu_rounds",
            "choice",
            "which rounds record GPU activity: 'measured' (warm-up and measured rounds), 'trace' (only rounds after "
            "the measured ones, which are timed without CUPTI) or 'auto' (decided after the warm-up)",
            choices=("measured", "trace", "auto"),
            threshold=False,
        ),
        MarkerKey(
            "cpu", "choice", "CPU collector mode for this test", choices=("sample", "trace", "off"), threshold=False
        ),
        MarkerKey(
            "modules",
            "int",
            "record torch.nn.Module forwards to this depth for this test (0 = off)",
            low=0,
            high=32,
            threshold=False,
        ),
    )
}


#: Deterministic per-round counts: the same every run of the same code, so CI can gate on them tightly.
_PER_ROUND = {
    "max_kernel_launches": ("gpu.kernel_launches_per_round", "kernel launches"),
    "max_h2d_bytes": ("gpu.h2d_bytes_per_round", "host-to-device bytes"),
    "max_syncs": ("host.syncs_per_round", "blocking synchronisations"),
}


def validate_marker(nodeid: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[str]:
    """Problems with one test's marker, each a sentence naming the test, the key and what is valid."""
    problems = []
    if args:
        problems.append(
            f"{nodeid}: @pytest.mark.inferscope takes keyword arguments only, got positional {args!r}; "
            f"write e.g. @pytest.mark.inferscope(max_latency_ms=50)."
        )
    for key, value in kwargs.items():
        spec = MARKER_KEYS.get(key)
        if spec is None:
            close = difflib.get_close_matches(key, MARKER_KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            problems.append(
                f"{nodeid}: unknown @pytest.mark.inferscope key {key!r}; {hint}valid keys: {', '.join(MARKER_KEYS)}."
            )
            continue
        wrong = spec.check(value)
        if wrong is not None:
            problems.append(f"{nodeid}: @pytest.mark.inferscope({key}=...): {wrong} ({spec.help}).")
    return problems


def _mb(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1f} MB"


def _evidence(analysis: Analysis, latency: LatencyStats) -> str:
    lat = (
        f"{len(latency.samples_ms)} rounds: median {latency.median:.3f} ms, p90 {latency.p90:.3f} ms, "
        f"max {latency.max:.3f} ms"
    )
    top = analysis.findings[0].summary.rstrip(".") if analysis.findings else "no rule found a cause"
    return f"{lat}; bottleneck {analysis.bottleneck} (confidence {analysis.confidence:.2f}): {top}"


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
    out: list[CheckResult] = []

    def add(key: str, limit: Any, measured: Any, failed: bool, what: str, fmt: Callable[[Any], str] = str) -> None:
        status = "failed" if failed else "passed"
        verb = "exceeds" if failed else "within"
        msg = f"{key}: {what} {fmt(measured)} {verb} limit {fmt(limit)}."
        if failed:
            msg += f" Evidence: {ev}.{where}"
        out.append(CheckResult(key, status, limit, measured, msg))

    def not_evaluated(key: str, limit: Any, why: str, fail: bool = False) -> None:
        status = "failed" if fail else "not_evaluated"
        extra = " GPU collection is required (--inferscope-gpu=required), so this fails." if fail else ""
        out.append(CheckResult(key, status, limit, None, f"{key}: not evaluated: {why}.{extra}{where if fail else ''}"))

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
            add(key, limit, value, value > limit, f"{stat} latency", lambda v: f"{v:.3f} ms")
        elif key == "expect_bottleneck":
            got = analysis.bottleneck
            failed = got != limit
            msg = f"expect_bottleneck: classified {got} (confidence {analysis.confidence:.2f}), expected {limit}." + (
                f" Evidence: {ev}.{where}" if failed else ""
            )
            out.append(CheckResult(key, "failed" if failed else "passed", limit, got, msg))
        elif key == "expect_fix":
            least = float(thresholds.get("min_fix_saving", MIN_FIX_SAVING))
            out.append(_expect_fix(analysis, limit, least, gpu_required, f" Evidence: {ev}.{where}"))
        elif key == "max_host_memory_mb":
            peak = m.get("mem.rss_peak_mb")
            if peak is None:
                not_evaluated(key, limit, "host memory was not read (no /proc)")
            else:
                add(key, limit, peak, peak > limit, "peak host RSS", _mb)
        elif key == "max_overhead":
            if overhead is None:
                not_evaluated(key, limit, "the collector gave no overhead estimate")
            else:
                add(key, limit, overhead, overhead > limit, "estimated profiler overhead", lambda v: f"{100 * v:.2f}%")
        elif key == "max_regression":
            if regression is None:
                not_evaluated(key, limit, regression_note)
            elif regression.verdict == "inconclusive":
                not_evaluated(key, limit, regression.reason.rstrip("."))
            else:
                ratio = regression.latency.ratio
                status = "failed" if regression.failed else "passed"
                msg = f"max_regression: {regression.message()}"
                if regression.failed:
                    msg += where
                out.append(CheckResult(key, status, limit, ratio, msg))
        elif key == "max_gpu_idle":
            idle = m.get("gpu.idle_fraction")
            add(key, limit, idle, (idle or 0.0) > limit, "GPU idle fraction", lambda v: f"{100 * v:.1f}%")
        elif key == "max_gpu_memory_mb":
            peak = m.get("gpu.memory_peak_mb")
            if peak is None:
                not_evaluated(
                    key, limit, "GPU memory peak unknown (torch's CUDA allocator was not in use)", fail=gpu_required
                )
            else:
                add(key, limit, peak, peak > limit, "peak GPU memory allocated", _mb)
        elif key in _PER_ROUND:
            metric, what = _PER_ROUND[key]
            count = m.get(metric)
            if count is None:
                not_evaluated(key, limit, f"{what} was not measured", fail=gpu_required)
            else:
                add(key, limit, count, count > limit, f"{what} per round", lambda v: f"{v:,.0f}")
        elif key == "max_transfer_fraction":
            frac = m.get("gpu.transfer_fraction")
            add(key, limit, frac, (frac or 0.0) > limit, "transfer fraction", lambda v: f"{100 * v:.1f}%")
    out.sort(key=lambda c: {"failed": 0, "not_evaluated": 1, "passed": 2}[c.status])
    return out


@dataclass
class Plan:
    """How one test is profiled: rounds, warm-up and the marker's thresholds."""

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
    return CheckResult(
        "expect_fix", "failed" if failed else "passed", cls, round(saved, 4), msg + (evidence if failed else "")
    )
