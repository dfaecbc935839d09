"""The plain data that joins analyzer, checks and reporters, and that travels through xdist.

Every class here serialises to JSON with `to_dict()` and back with `from_dict()`, so any
later stage can be re-run from a saved `report.json`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .comparison import RegressionVerdict
from .serial import LOCAL, Serial
from .units import fmt_ms, fmt_pct

#: 2: `Analysis.whatif` and `Analysis.whatif_replay` (the simulated fixes, issue 15). 3: report.json leaves out the
#: metrics not measured (null in 2; `metrics.get(name)` reads None for both).
SCHEMA_VERSION = 3

BOTTLENECKS = (
    "cpu_bound",
    "gpu_bound",
    "transfer_bound",
    "launch_bound",
    "sync_bound",
    "memory_bound",
    "communication_bound",
)
#: When no finding explains enough of the time to name a class.
UNCLASSIFIED = "unclassified"

LATENCY_STATS = ("median", "mean", "p90", "p99", "min", "max")


def percentiles(ordered: list[float], qs: tuple[float, ...]) -> list[float]:
    """Percentiles `qs` (0-100) of sorted values, as `numpy.percentile` gives them (its default, linear method, to
    the bit): without numpy, ~10x faster on a test's few rounds."""
    n, out = len(ordered), []
    for q in qs:
        at = (n - 1) * (q / 100)
        lo = math.floor(at)
        hi, t = min(lo + 1, n - 1), at - lo
        a, b = ordered[lo], ordered[hi]
        # numpy's lerp: from the nearer end
        out.append(b - (b - a) * (1 - t) if t >= 0.5 else a + (b - a) * t)
    return out


@dataclass
class LatencyStats(Serial):
    """Per-round wall-clock latency of the test body, warm-up and trace rounds kept apart."""

    samples_ms: list[float]
    warmup_ms: list[float] = field(default_factory=list)
    median: float = math.nan
    mean: float = math.nan
    p90: float = math.nan
    p99: float = math.nan
    min: float = math.nan
    max: float = math.nan
    iqr: float = math.nan
    stdev: float = math.nan
    # drift.probe_ms readings before the first measured round and after each one (empty: no probe ran)
    probe_ms: list[float] = field(default_factory=list)
    # trace rounds (launch calls recorded, after the measured ones): shown, never a sample
    trace_ms: list[float] = field(default_factory=list)

    @classmethod
    def from_samples(
        cls, samples_ms: list[float], warmup_ms: list[float] | None = None, trace_ms: list[float] | None = None
    ) -> LatencyStats:
        traced = [float(x) for x in (trace_ms or [])]
        s = [float(x) for x in samples_ms]
        if not s:
            return cls([], list(warmup_ms or []), trace_ms=traced)
        q25, q50, q75, q90, q99 = percentiles(sorted(s), (25, 50, 75, 90, 99))
        mean = math.fsum(s) / len(s)
        return cls(
            samples_ms=s,
            warmup_ms=[float(x) for x in (warmup_ms or [])],
            median=q50,
            mean=mean,
            p90=q90,
            p99=q99,
            min=min(s),
            max=max(s),
            iqr=q75 - q25,
            stdev=math.sqrt(math.fsum((x - mean) ** 2 for x in s) / (len(s) - 1)) if len(s) > 1 else 0.0,
            trace_ms=traced,
        )

    def get(self, stat: str) -> float:
        if stat not in LATENCY_STATS:
            raise ValueError(f"unknown latency statistic {stat!r}; choose one of {', '.join(LATENCY_STATS)}")
        return float(getattr(self, stat))

    @property
    def rel_spread(self) -> float:
        """IQR over median: the spread the terminal summary shows."""
        return self.iqr / self.median if self.median else math.nan


@dataclass
class Suggestion(Serial):
    """One thing to try, with the time it is expected to save per round."""

    action: str
    rationale: str
    saving_ms: float  # 0: not estimated (a rule that cannot tell the fix's time apart, a custom rule without one)
    rule: str = ""

    @property
    def saves(self) -> str:
        """The saving as the reports word it: "saves ~1.23 ms per round", or "saving not estimated" where it is 0."""
        return f"saves ~{fmt_ms(self.saving_ms)} ms per round" if self.saving_ms else "saving not estimated"


@dataclass
class EventRef(Serial):
    """An event behind a finding, in report form (times in ms from the test's start)."""

    kind: str
    name: str
    start_ms: float
    duration_ms: float


@dataclass
class Finding(Serial):
    """What one rule saw, with the numbers and events that show it."""

    rule: str
    title: str
    summary: str
    cause: str | None  # the bottleneck class this supports, or None for information
    share: float  # fraction of the measured time this explains, 0..1 (None given: not measured, as 0.0 left out)
    confidence: float  # 0..1
    evidence: dict[str, Any] = field(default_factory=dict)
    events: list[EventRef] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)
    #: False: the rule measures no time apart (share 0 for that, not measured as none). Left out (None): measured when
    #: the share is above 0, so that a rule (a custom one through pytest_inferscope_rules) returning share 0.0 or None
    #: for "no time said" reads "time not measured apart", not "explains 0.0%"; a rule that measured none says True.
    #: A report.json written before 2026-11-30 has no share_measured: read as left out.
    share_measured: bool | None = None

    def __post_init__(self) -> None:
        if self.share is None or (isinstance(self.share, float) and math.isnan(self.share)):
            self.share, self.share_measured = 0.0, False  # (NaN: report.json writes it null)
        elif self.share_measured is None:
            self.share_measured = self.share > 0

    @property
    def explains(self) -> str:
        """The share as the reports word it: "explains 21.0% of the measured time", or "time not measured apart"."""
        if not self.share_measured:
            return "time not measured apart"
        return f"explains {fmt_pct(self.share)} of the measured time"

    def __repr__(self) -> str:
        """One line, as a notebook shows `result.analysis.findings`: the rule, its title, the class it supports."""
        supports = f"{self.cause}, " if self.cause else ""
        share = f"{self.share:.0%} of the time" if self.share_measured else "time not measured apart"
        return f"<Finding {self.rule}: {self.title} ({supports}{share})>"


@dataclass
class BreakdownPart(Serial):
    """One line of the report's Timeline Breakdown."""

    name: str  # "CPU", "GPU compute", "Transfers", "Framework overhead", ...
    ms: float | None  # per round; None when not collected
    share: float | None
    collected: bool = True
    reason: str = ""  # why not collected


@dataclass
class Hotspot(Serial):
    """A Python function by sampled CPU time (self and total, per round)."""

    function: str  # "module:qualname (file:line)"
    self_ms: float
    total_ms: float
    share: float  # self time over measured round time


@dataclass
class ScopeStat(Serial):
    """A user scope (or module) aggregated over the measured rounds."""

    path: str  # "forward/attention"
    kind: str  # "scope" | "module" | "round"
    count: int
    total_ms: float
    mean_ms: float
    share: float
    gpu_ms: float | None = (
        None  # per round: GPU work launched inside it (and inside its children); None without GPU data
    )
    launches: float | None = None  # per round: kernels launched inside it


@dataclass
class WhatIfRow(Serial):
    """One simulated change (analyzer/whatif.py): the round's length replayed with it, and what it saves."""

    change: str
    round_ms: float  # the replayed round with the change, ms
    saved_ms: float  # against the replayed round without it
    saved_fraction: float
    bottleneck: str = ""  # the class this change stands for
    action: str = ""  # the suggestion that applies it
    prerequisite: str = ""  # what must be done first ("" : nothing)


@dataclass
class Analysis(Serial):
    """The analyzer's verdict: a class chosen from the findings, never the other way round."""

    bottleneck: str
    confidence: float
    findings: list[Finding] = field(default_factory=list)
    suggestions: list[Suggestion] = field(default_factory=list)
    breakdown: list[BreakdownPart] = field(default_factory=list)
    hotspots: list[Hotspot] = field(default_factory=list)
    scopes: list[ScopeStat] = field(default_factory=list)
    metrics: dict[str, float | None] = field(default_factory=dict)  # flat, dotted names
    gpu: dict[str, Any] = field(default_factory=dict)  # streams, idle gaps, copies, syncs; empty without GPU data
    #: The simulated fixes, the largest saving first (empty: no round graph could be built; see whatif_replay).
    whatif: list[WhatIfRow] = field(default_factory=list)
    #: measured_ms, replay_ms, replay_error, rounds, verdict, decided_by ("whatif" or "rules"); for the rules, fallback
    whatif_replay: dict[str, Any] = field(default_factory=dict)
    #: Why no class was named, when `bottleneck` is unclassified ("" otherwise, and in results written before it); its
    #: `confidence` is then no class's (1 - the largest share a class explains; 1.0 from the what-if table).
    unclassified_reason: str = ""
    #: Why no CPU sample counts in the measured rounds, so the CPU hotspots are empty ("" where samples count, or
    #: where the trace does not say: imported, or recorded before the sampler's kind was kept).
    no_samples_reason: str = ""
    raised_round_note: str = ""  # the measured rounds that raised while others completed, left out of all (or "")
    #: The added rules (a hook's, .inferscope_rules.yaml's) that failed here, one clause each (analyzer/extension.py)
    extension_errors: list[str] = field(default_factory=list)

    def __repr__(self) -> str:
        """One line, as a notebook shows `result.analysis`: the class, how many findings, the top suggestion."""
        why = f"confidence {self.confidence:.0%}" if self.bottleneck != UNCLASSIFIED else self.unclassified_reason
        verdict = f"{self.bottleneck} ({why})" if why else self.bottleneck
        n = len(self.findings)
        top = "no suggestion"
        if self.suggestions:
            s = self.suggestions[0]
            action = s.action if len(s.action) <= 100 else s.action[:99].rstrip() + "…"
            top = f"top suggestion: {action} ({s.saves})"
        return f"<Analysis: {verdict}, {n} finding{'' if n == 1 else 's'}, {top}>"


@dataclass
class CheckResult(Serial):
    """One marker threshold against what was measured."""

    key: str
    status: str  # "passed" | "failed" | "not_evaluated"
    limit: Any
    measured: Any
    message: str
    short: str = ""  # the figures in a few words, for a failure's one-line reason: "median 12.1 ms > 10.0 ms"


@dataclass
class CollectorInfo(Serial):
    """Which collector ran, how, and why not when it didn't."""

    name: str  # "cpu" | "gpu" | "memory"
    active: bool
    mode: str  # e.g. "sampling 1.0 ms", "native CUPTI", "procfs"
    reason: str = ""
    overhead: float | None = None  # estimated fraction of wall time


@dataclass
class ClockFit(Serial):
    """host_ns = host_ref_ns + rate * (device_ns - device_ref_ns) + offset_ns, fitted from paired readings.

    The integer reference points keep the arithmetic exact: raw CUPTI timestamps (~1e18 ns)
    cannot be held in a float64 to better than 256 ns.
    """

    rate: float = 1.0
    offset_ns: float = 0.0
    host_ref_ns: int = 0
    device_ref_ns: int = 0
    residual_ns: float = 0.0
    pairs: int = 0
    causality_violations: int = 0
    ok: bool = True
    note: str = "no device clock (CPU-only collection)"


@dataclass
class TestResult(Serial):
    """Everything about one profiled test; what reporters render and xdist ships."""

    __test__ = False  # not a pytest test class

    nodeid: str
    slug: str
    outcome: str  # "passed" | "failed" (the test's own outcome, before checks)
    verdict: str  # "pass" | "fail" | "partial"
    rounds: int
    warmup: int
    latency: LatencyStats
    analysis: Analysis
    checks: list[CheckResult] = field(default_factory=list)
    collectors: list[CollectorInfo] = field(default_factory=list)
    clock: ClockFit = field(default_factory=ClockFit)
    thresholds: dict[str, Any] = field(default_factory=dict)
    dropped_events: int = 0
    event_count: int = 0
    partial_reason: str = ""  # the exception that cut the body short
    marks: list[dict[str, Any]] = field(default_factory=list)  # mark_event()s: name, t_ms, attrs
    environment: dict[str, Any] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)  # "md" -> path, relative to the report dir
    regression: RegressionVerdict | None = None  # when compared with a baseline (regression.compare_to_baseline)
    ab: dict[str, Any] | None = None  # ab.paired.ABVerdict.to_dict() with --inferscope-ab / --inferscope-ab-python
    #: What the plugin added, ms (postprocess.added_time); `extra_rounds` a count, read back as an int (not as 0.0)
    added: dict[str, float | int] = field(default_factory=dict)
    earlier_runs: list[str] = field(default_factory=list)  # verdicts of this test's runs before, this session (reruns)
    schema_version: int = SCHEMA_VERSION
    #: The folder this result's report files were last written to (`files` are relative to it), by `measure()`'s
    #: report_dir=, `write_report()`, or read back from it (`load_report`); None when none was. This process's:
    #: in no report file (LOCAL).
    report_dir: Path | None = field(default=None, init=False, compare=False, metadata=LOCAL)
    #: The raw collection, kept by `measure()`, `measure_async()` and `profile()` so that `write_report()` can write
    #: the trace and raw.npz after the call; None in the plugin's results and those read back. In no report file.
    #: (An `events.RawTrace`, typed Any: its module loads numpy, which this one must not, and the hints are resolved.)
    raw: Any = field(default=None, init=False, compare=False, metadata=LOCAL)

    @property
    def failed_checks(self) -> list[CheckResult]:
        return [c for c in self.checks if c.status == "failed"]

    def __repr__(self) -> str:
        """One line, as a notebook shows the result of `measure()`: the verdict, the latency, the bottleneck, the
        failed checks and what the body raised (the fields are the attributes; the dataclass's repr of them all ran
        to ~5 kB)."""
        lat = self.latency
        n = len(lat.samples_ms)
        parts = [self.verdict]
        if n:
            warmup = f" (warm-up {len(lat.warmup_ms)})" if lat.warmup_ms else ""
            parts.append(f"median {fmt_ms(lat.median)} ms of {n} round{'s' if n != 1 else ''}{warmup}")
        else:
            parts.append("no measured round completed")
        parts.append(f"bottleneck {self.analysis.bottleneck}")
        if self.failed_checks:
            parts.append("failed " + ", ".join(c.key for c in self.failed_checks))
        if self.partial_reason:
            raised = self.partial_reason.splitlines()[0]
            parts.append(f"raised {raised[:80]}…" if len(raised) > 80 else f"raised {raised}")
        return f"<TestResult {self.nodeid!r}: {', '.join(parts)}>"

    def _repr_markdown_(self) -> str:
        """What Jupyter shows for a result (IPython calls this): `repr`'s figures, then the failed thresholds, what the
        body raised, the top 3 suggestions and where the report files are (`report_dir`), as a short Markdown list."""
        lat, a = self.latency, self.analysis
        n = len(lat.samples_ms)
        warm = f" (warm-up {len(lat.warmup_ms)})" if lat.warmup_ms else ""
        figures = f"median {fmt_ms(lat.median)} ms of {n} round{'s' if n != 1 else ''}{warm}, IQR {fmt_ms(lat.iqr)} ms"
        why = f"confidence {a.confidence:.0%}" if a.bottleneck != UNCLASSIFIED else a.unclassified_reason
        lines = [
            f"**{_md(self.nodeid)}**: {self.verdict}, {figures if n else 'no measured round completed'}; "
            f"bottleneck **{a.bottleneck}**{f' ({_md(why)})' if why else ''}"
        ]
        lines += [f"- failed {_md(c.key)}: {_md(c.short or c.message)}" for c in self.failed_checks]
        if self.partial_reason:
            lines.append(f"- raised {_md(self.partial_reason.splitlines()[0])}")
        if a.suggestions:
            lines.append("- top suggestions:")
            lines += [f"  - {_md(s.action)} (saves ~{fmt_ms(s.saving_ms)} ms per round)" for s in a.suggestions[:3]]
        if self.report_dir is not None and "md" in self.files:
            lines.append(f"- report: `{self.report_dir / self.files['md']}` (and report.html)")
        return "\n".join(lines)

    def to_wire(self) -> str:
        """As JSON text, for an xdist worker's `workeroutput`: execnet sends only plain types, and a result holds
        what the user's hooks and libraries gave (torch's version is a str subclass, numpy scalars)."""
        return json.dumps(self.to_dict(), default=_wire_default)

    @classmethod
    def from_wire(cls, text: str) -> TestResult:
        return cls.from_dict(json.loads(text))


def keep_last_run(results: list[TestResult], result: TestResult) -> None:
    """Append `result`, and where it is a rerun (`result.earlier_runs`: pytest-rerunfailures runs the same item again)
    drop the run before it: the summary, the index and a saved baseline hold a test's last run, as its folder does."""
    if result.earlier_runs:
        results[:] = [r for r in results if r.nodeid != result.nodeid]  # in place: the A/B gate holds this list too
    results.append(result)


def _md(text: str) -> str:
    """`text` as Markdown text, not markup (a test id's `[...]`, `*` and `_`; a suggestion's `|`)."""
    return "".join(f"\\{c}" if c in _MD_SPECIAL else c for c in text)


_MD_SPECIAL = frozenset("\\`*_[]<|#")  # (">" only quotes at a line's start, where no text of ours is)


def _wire_default(value: Any) -> Any:
    """What `to_dict` leaves that JSON lacks (a user's object in `environment`, say): its `item()` or its str."""
    item = getattr(value, "item", None)
    return item() if callable(item) else str(value)
