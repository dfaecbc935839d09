"""The A/B verdict on pairs of rounds: a Wilcoxon signed-rank test on their log ratios, a bootstrap CI of
the median ratio, and a sequential rule whose false-positive rate holds over every look it takes.

Pair i is (this checkout's round i, the twin's round i), run back to back on one core, so the
machine's drift is shared by both halves and cancels in their ratio. The rule is the stored-baseline
gate's two-part rule (`stats.compare_samples`) on pairs: significant at alpha AND a median ratio
beyond max_regression. Looks are taken at every `step` pairs up to the cap; each look tests at
alpha / looks (Bonferroni over looks), so the chance of any false "regressed" stays at most alpha.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..comparison import MetricChange
from ..events import unique
from ..stats import _norm_sf
from ..units import fmt_count, fmt_ms

#: Bootstrap resamples for the CI of the median ratio; seeded, so a report is reproducible.
BOOTSTRAP = 2000


def signed_rank_p(d: Sequence[float]) -> tuple[float, float]:
    """One-sided p-values (greater, less) of the Wilcoxon signed-rank test that the d's centre is 0.

    Exact (the distribution of the rank sum by counting) without ties and zeros; with them, the
    normal approximation with the tie correction. Zeros are dropped (Wilcoxon's convention).
    """
    x = np.asarray([v for v in d if v != 0.0], dtype=float)
    n = x.size
    if n == 0:
        return 1.0, 1.0
    a = np.abs(x)
    order = np.argsort(a, kind="mergesort")
    ranks = np.empty(n)
    ranks[order] = np.arange(1, n + 1, dtype=float)
    tied = len(unique(a)) < n
    if tied:  # midranks
        for v in unique(a):
            m = a == v
            ranks[m] = ranks[m].mean()
    w = float(ranks[x > 0].sum())
    total = n * (n + 1) / 2
    if not tied:
        counts = np.zeros(int(total) + 1)
        counts[0] = 1.0
        for r in range(1, n + 1):  # subsets of {1..n} by their sum
            counts[r:] = counts[r:] + counts[:-r].copy()
        probs = counts / counts.sum()
        k = round(w)
        return float(probs[k:].sum()), float(probs[: k + 1].sum())
    _, tie_counts = np.unique(a, return_counts=True)
    var = n * (n + 1) * (2 * n + 1) / 24 - float((tie_counts**3 - tie_counts).sum()) / 48
    if var <= 0:
        return 1.0, 1.0
    mean = total / 2
    sd = math.sqrt(var)
    return _norm_sf((w - mean - 0.5) / sd), _norm_sf((mean - w - 0.5) / sd)


def median_ratio_ci(logs: Sequence[float], confidence: float, seed: int = 0) -> tuple[float, float, float]:
    """exp(median of the log ratios) and its bootstrap percentile CI at `confidence`."""
    x = np.asarray(logs, dtype=float)
    med = float(np.exp(np.median(x)))
    if x.size < 2:
        return med, math.nan, math.nan
    rng = np.random.default_rng(seed)
    boot = np.median(x[rng.integers(0, x.size, size=(BOOTSTRAP, x.size))], axis=1)
    tail = 100 * (1 - confidence) / 2
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return med, float(np.exp(lo)), float(np.exp(hi))


def looks(first: int, cap: int) -> list[int]:
    """The pair counts at which the rule looks: every `first` pairs, and the cap."""
    first = max(1, first)
    points = list(range(first, cap + 1, first))
    if not points or points[-1] != cap:
        points.append(max(cap, first))
    return points


#: Each pair's clocks besides its wall times, in ms (twin.core_clocks): each side's time runnable but waiting for the
#: pinned core during its round, and its time on a CPU.
CLOCKS = ("new_wait_ms", "ref_wait_ms", "new_cpu_ms", "ref_cpu_ms")

#: The pinned core counts as busy when the rounds waited for it, runnable, this share of the time they ran (both
#: sides' waits over both sides' round times); then the verdict must hold on the rounds' CPU time too. On the 2-core
#: dev VM, 40 tests each: one process spinning on the core made it 0.57-1.68, four 1.15-4.67, other engineers' test
#: suites alone (load ~10) 0.03-1.06 (docs/ab.md, "A busy pinned core"). Below it the wall times decide alone.
BUSY_MIN = 0.2


def busy_share(new_ms: Sequence[float], ref_ms: Sequence[float], clocks: Mapping[str, Sequence[float]]) -> float:
    """The pairs' time waiting, runnable, for the pinned core over their rounds' time (both sides); NaN where a side
    did not say its waits (a twin of an earlier version)."""
    new_wait, ref_wait = clocks.get("new_wait_ms", ()), clocks.get("ref_wait_ms", ())
    n = min(len(new_ms), len(ref_ms), len(new_wait), len(ref_wait))
    waits = [*new_wait[:n], *ref_wait[:n]]
    ran = sum(new_ms[:n]) + sum(ref_ms[:n])
    if not n or not all(math.isfinite(w) for w in waits) or not ran > 0:
        return math.nan
    return max(0.0, sum(waits)) / ran


@dataclass
class PairedLook:
    """The test on the pairs so far: what it says and whether it is final."""

    verdict: str  # regressed | improved | unchanged | inconclusive
    reason: str
    ratio: float
    ci_low: float
    ci_high: float
    p_value: float  # one-sided, in the direction of the ratio
    pairs: int
    final: bool
    clocks: dict[str, list[float]] = field(default_factory=dict)  # CLOCKS, each pair's (NaN: not known)
    busy: float = math.nan  # busy_share of the pairs


def judge(
    new_ms: Sequence[float], ref_ms: Sequence[float], *, max_regression: float, alpha: float, n_looks: int, last: bool,
    clocks: Mapping[str, Sequence[float]] | None = None,
) -> PairedLook:  # fmt: skip
    """One look at the pairs: the verdict at alpha / n_looks, final when clear or when `last`.

    With a busy pinned core (`clocks`' waits, `busy_share` >= BUSY_MIN), the verdict on the wall times stands only
    where the rounds' CPU times give the same one: the scheduler preempts some rounds and not others, unevenly between
    the two sides, and a preemption lengthens a round's wall time, not its CPU time. Else it is inconclusive, saying so.
    """
    kw: dict[str, Any] = {"max_regression": max_regression, "alpha": alpha, "n_looks": n_looks, "last": last}
    look = _judge(new_ms, ref_ms, **kw)
    clocks = clocks or {}
    look.clocks = {k: [float(x) for x in clocks.get(k, ())][: look.pairs] for k in CLOCKS if k in clocks}
    look.busy = share = busy_share(new_ms, ref_ms, clocks)
    if not share >= BUSY_MIN or not look.final:
        return look
    if look.verdict == "inconclusive":
        look.reason += (
            f" The pinned CPU core was busy: the rounds waited {100 * share:.0f}% as long as they ran for it."
        )
        return look
    new_cpu, ref_cpu = (list(clocks.get(k, ()))[: look.pairs] for k in ("new_cpu_ms", "ref_cpu_ms"))
    if len(new_cpu) < look.pairs or not all(math.isfinite(x) and x > 0 for x in (*new_cpu, *ref_cpu)):
        cpu = PairedLook("unknown", "a side did not say its rounds' CPU time", *(math.nan,) * 4, look.pairs, True)
    else:
        cpu = _judge(new_cpu, ref_cpu, **kw)
    waiting = f"the rounds waited {100 * share:.0f}% as long as they ran for the pinned core, behind other processes"
    if cpu.verdict == look.verdict:
        said = f"{100 * (cpu.ratio - 1):+.1f}%, signed-rank p={cpu.p_value:.2g}"  # (not its reason: one "slower over")
        look.reason += f" The core was busy ({waiting}); the rounds' CPU time gives the same verdict ({said})."
    elif not cpu.final:
        look.verdict, look.reason, look.final = "inconclusive", f"not yet clear after {look.pairs} pairs", False
    else:
        look.verdict, look.final = "inconclusive", True
        look.reason = (
            f"{look.reason.rstrip('.')} on the wall times, but the pinned CPU core was busy ({waiting}), and the "
            f"rounds' CPU time says {cpu.verdict} ({cpu.reason.rstrip('.')}). Where another process runs on the core, "
            "the scheduler preempts some rounds and not others, and unevenly between the two sides, so the wall "
            "times' ratio cannot be trusted. Run the A/B where nothing else runs on that core (the last one the "
            "session may use): give it cores of its own (taskset -c, a cpuset, a CI runner to itself)."
        )
    return look


def _judge(
    new_ms: Sequence[float], ref_ms: Sequence[float], *, max_regression: float, alpha: float, n_looks: int, last: bool
) -> PairedLook:
    n = min(len(new_ms), len(ref_ms))
    level = alpha / max(1, n_looks)
    if n == 0:
        return PairedLook("inconclusive", "no pairs were measured", math.nan, math.nan, math.nan, math.nan, 0, True)
    logs = [math.log(a / b) for a, b in zip(new_ms[:n], ref_ms[:n], strict=True) if a > 0 and b > 0]
    ratio, lo, hi = median_ratio_ci(logs, confidence=1 - 2 * level)
    p_up, p_down = signed_rank_p(logs)
    up, down = 1.0 + max_regression, 1.0 / (1.0 + max_regression)
    p = p_up if ratio >= 1 else p_down
    change = f"{100 * (ratio - 1):+.1f}%"
    test = f"signed-rank p={p:.2g} at alpha {alpha:g}/{fmt_count(n_looks, 'look')}"

    def look(verdict: str, reason: str, final: bool = True) -> PairedLook:
        return PairedLook(verdict, reason, ratio, lo, hi, p, n, final)

    if p_up < level and ratio > up:
        return look(
            "regressed", f"{change} slower over {n} pairs ({test}), beyond the allowed {100 * max_regression:.3g}%."
        )
    if p_down < level and ratio < down:
        return look("improved", f"{change} faster over {n} pairs ({test}).")
    if math.isfinite(lo) and down < lo and hi < up:
        return look("unchanged", f"{change} over {n} pairs; the CI {lo:.3f}-{hi:.3f} lies within the allowed change.")
    if not last:
        return look("inconclusive", f"not yet clear after {n} pairs", final=False)
    if 2.0**-n >= level:
        return look(
            "inconclusive",
            f"{n} pairs cannot reach significance at alpha {alpha:g}/{n_looks} (the smallest p of {n} pairs is "
            f"{2.0**-n:.2g}); give the test more rounds or a higher --inferscope-round-cap.",
        )
    if ratio > up or ratio < down:
        return look(
            "inconclusive",
            f"{change} over {n} pairs, beyond the allowed {100 * max_regression:.3g}%, but not significant ({test}); "
            "the pairs disagree too much to tell. Run on a quieter machine or with more rounds.",
        )
    return look("unchanged", f"{change} over {n} pairs, within the allowed {100 * max_regression:.3g}% ({test}).")


@dataclass
class ABVerdict:
    """One test, this checkout against the other side: the verdict, the pairs, the evidence."""

    nodeid: str
    verdict: str  # regressed | improved | unchanged | inconclusive | new | removed
    reason: str
    ref: str  # what the other side is: "origin/main (3f2a9c1)", "python ../venv/bin/python"
    ratio: float = math.nan
    ci_low: float = math.nan
    ci_high: float = math.nan
    p_value: float = math.nan
    pairs: int = 0
    looks: int = 0
    new_median_ms: float = math.nan
    ref_median_ms: float = math.nan
    new_ms: list[float] = field(default_factory=list)
    ref_ms: list[float] = field(default_factory=list)
    clocks: dict[str, list[float]] = field(default_factory=dict)  # CLOCKS: each pair's waits for the core, CPU times
    busy: float = math.nan  # the pairs' time waiting for the pinned core over their time (paired.busy_share)
    core: int | None = None
    metric_changes: list[MetricChange] = field(default_factory=list)
    twin_error: str = ""  # the test's failure on the other side
    notes: list[str] = field(default_factory=list)
    not_compared: str = ""  # why the test was not compared with --inferscope-compare's baseline (the A/B is the gate)
    # A regressed latency checked by a fresh pair of processes (recheck.py): its outcome ("confirmed", "not confirmed",
    # "not run"), the first pairs' look and the fresh pair's ("first", "fresh"), or why it did not run ("error")
    recheck: dict[str, Any] | None = None
    # Which processes took the turns: "here" (this pytest process and the twin) or "twins" (this checkout's twin and
    # the twin: --inferscope-ab-pairs=twins); absent from report.json files written before 2026-11-30 (all "here")
    between: str = "here"

    @property
    def failed(self) -> bool:
        return self.verdict == "regressed"

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["metric_changes"] = [m.to_dict() for m in self.metric_changes]
        d["clocks"] = {k: [x if math.isfinite(x) else None for x in v] for k, v in self.clocks.items()}  # JSON: no NaN
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in d.items()}

    def message(self) -> str:
        """The evidence, as the failure text and the report line."""
        head = {
            "regressed": "Performance regression against",
            "improved": "Faster than",
            "unchanged": "No significant change against",
            "inconclusive": "Inconclusive A/B comparison with",
            "new": "New test, not at",
            "removed": "Test not run here, only at",
        }.get(self.verdict, self.verdict)
        lines = [f"{head} {self.ref}: {self.reason}"]
        if self.pairs:
            core = f", both pinned to CPU core {self.core}" if self.core is not None else ""
            if self.between == "twins":  # (this process's rounds, on that core too, are not in them)
                core = f" between this checkout's twin and the twin{core.replace(', both', ',')}"
            lines.append(
                f"  latency: median {fmt_ms(self.ref_median_ms, self.new_median_ms)} ms ({self.ref}) -> "
                f"{fmt_ms(self.new_median_ms, self.ref_median_ms)} ms (this "
                f"checkout); median pair ratio {self.ratio:.3f}, CI {self.ci_low:.3f}-{self.ci_high:.3f}; "
                f"signed-rank p={self.p_value:.2g}; {self.pairs} pairs in alternating order{core}."
            )
        lines += _recheck_lines(self.recheck or {}, self.between)
        lines += [f"  metric: {m.message}" for m in self.metric_changes]
        if self.twin_error:
            lines.append(f"  at {self.ref}: {self.twin_error}")
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def _recheck_lines(recheck: Mapping[str, Any], between: str) -> list[str]:
    """The other pairs' look, where a re-check ran (recheck.py): the fresh pair's where it confirmed the first pairs,
    the first pairs' where it did not (the latency line above is then the fresh pair's)."""
    outcome = recheck.get("outcome")
    if outcome not in ("confirmed", "not confirmed"):
        return []
    which = "fresh" if outcome == "confirmed" else "first"
    first = "this checkout's twin and the twin" if between == "twins" else "this pytest process and its twin"
    whose = "two more processes, started alike" if which == "fresh" else first
    other = recheck.get(which) or {}
    ratio, lo, hi, p = (other.get(k) for k in ("ratio", "ci_low", "ci_high", "p_value"))
    if not isinstance(ratio, float):
        return []
    ci = f", CI {lo:.3f}-{hi:.3f}" if isinstance(lo, float) and isinstance(hi, float) else ""
    said = f"; signed-rank p={p:.2g}" if isinstance(p, float) else ""
    pairs, verdict = other.get("pairs"), other.get("verdict")
    return [f"  {which} pairs ({whose}): median pair ratio {ratio:.3f}{ci}{said}; {pairs} pairs, {verdict}."]


#: How a verdict made regressed by its deterministic metrics alone begins its reason ('2 deterministic metrics rose;
#: latency: ...'); a report.json written before 2026-11-30 says 'metric(s)'.
METRICS_ROSE = re.compile(r"^\d+ deterministic metric(?:s|\(s\))? rose; latency: ")


def verdict_from(nodeid: str, ref: str, new_ms: Sequence[float], ref_ms: Sequence[float], look: PairedLook,
                 n_looks: int, metric_changes: list[MetricChange]) -> ABVerdict:  # fmt: skip
    """The ABVerdict of a finished sequence of pairs; a changed deterministic metric makes it regressed."""
    verdict, reason = look.verdict, look.reason
    bad = [m for m in metric_changes if m.regressed]
    if bad and verdict != "regressed":
        verdict, reason = "regressed", f"{fmt_count(len(bad), 'deterministic metric')} rose; latency: {reason}"
    return ABVerdict(
        nodeid=nodeid,
        verdict=verdict,
        reason=reason,
        ref=ref,
        ratio=look.ratio,
        ci_low=look.ci_low,
        ci_high=look.ci_high,
        p_value=look.p_value,
        pairs=look.pairs,
        looks=n_looks,
        new_median_ms=float(np.median(new_ms)) if len(new_ms) else math.nan,
        ref_median_ms=float(np.median(ref_ms)) if len(ref_ms) else math.nan,
        new_ms=[float(x) for x in new_ms],
        ref_ms=[float(x) for x in ref_ms],
        clocks=look.clocks,
        busy=look.busy,
        metric_changes=metric_changes,
    )


def verdict_of(nodeid: str, ref: str, data: Mapping[str, Any], metrics: Mapping[str, Any]) -> ABVerdict:
    """The ABVerdict of one test from its A/B record (controller.py: its state, pairs, last look, the twin's
    deterministic `metrics` and error, a re-check's record), against this side's deterministic `metrics`."""
    state = data["state"]
    look: PairedLook | None = data["look"]
    if state == "new":
        return ABVerdict(nodeid, "new", f"the test is not profiled at {ref}", ref)
    if state == "dead":
        return ABVerdict(nodeid, "inconclusive", str(data.get("reason")), ref)
    if state == "twin_skipped":
        return ABVerdict(nodeid, "inconclusive", f"the test was skipped at {ref} ({data['error']}), so there is "
                         "nothing to compare", ref)  # fmt: skip
    if state == "twin_failed" and look is None:
        reason = f"the test failed at {ref}, so there is nothing to compare; this checkout's result stands"
        return ABVerdict(nodeid, "inconclusive", reason, ref, twin_error=str(data.get("error")))
    if state == "partner_failed" and look is None:  # (--inferscope-ab-pairs=twins: partner.py)
        reason = (
            f"the test failed in this checkout's twin ({data.get('error')}), so there is nothing to compare; this "
            "pytest process's result stands"
        )
        return ABVerdict(nodeid, "inconclusive", reason, ref, between="twins")
    if look is None:  # this side's test failed before the first look at the pairs
        reason = (
            f"the test failed here after {len(data['new_ms'])} of the pairs, before the first look at them, so "
            "there is nothing to compare"
        )
        return ABVerdict(nodeid, "inconclusive", reason, ref)
    from ..baseline import DETERMINISTIC_METRICS
    from ..stats import compare_metric

    changes = [
        c for name in DETERMINISTIC_METRICS
        if (c := compare_metric(name, data["metrics"].get(name), metrics.get(name)))
    ]  # fmt: skip
    verdict = verdict_from(nodeid, ref, data["new_ms"], data["ref_ms"], look, data["looks"], changes)
    verdict.recheck = data.get("recheck")
    verdict.between = str(data.get("between") or "here")
    verdict.notes += list(data.get("notes") or ())  # (the partner could not run the test: partner.py)
    if data.get("after_error"):  # a threshold the ref's test crossed: its rounds' times compare all the same
        verdict.twin_error = str(data["after_error"])
        verdict.notes.append(f"the test failed at {ref} after its rounds; the pairs are compared")
    if state == "here_failed":
        verdict.verdict = "inconclusive"
        verdict.reason = f"the test failed here after {look.pairs} pairs, so the pairs are not all there are"
    elif state == "partner_failed":
        verdict.verdict = "inconclusive"
        verdict.reason = f"the test failed in this checkout's twin after {look.pairs} pairs: {data.get('error')}"
    elif state != "paired":
        verdict.verdict, verdict.twin_error = "inconclusive", str(data.get("error") or data.get("reason"))
        verdict.reason = f"the twin stopped after {look.pairs} pairs ({state}): {verdict.twin_error}"
    return verdict


def ab_message(data: dict[str, Any]) -> str:
    """ABVerdict.message() of a verdict kept as plain data (TestResult.ab)."""
    known = {f.name for f in dataclasses.fields(ABVerdict)}
    kept = ("core", "recheck")  # None where not known, as the others' NaN
    kw: dict[str, Any] = {k: (math.nan if v is None and k not in kept else v) for k, v in data.items() if k in known}
    kw["metric_changes"] = [MetricChange.from_dict(m) for m in data.get("metric_changes") or []]
    return ABVerdict(**kw).message()


def ab_line(data: dict[str, Any], more: int = 0) -> str:
    """The one-line reason of a test the A/B failed (TestResult.ab), as a crossed threshold's: what rose, by how much,
    against what, short enough for pytest's short summary in 80 columns beside a short test id ('+29.8% slower vs
    HEAD~1', 'kernel_launches +100.0% vs HEAD~1', '(+1 more)' where more regressed, or `more` thresholds were crossed
    too); the ref's commit is in the message."""
    ref = re.sub(r" \([0-9a-f]{7,40}\)", "", str(data.get("ref")))
    said = []
    ratio = data.get("ratio")
    if not METRICS_ROSE.match(str(data.get("reason"))) and isinstance(ratio, float) and math.isfinite(ratio):
        said.append(f"{100 * (ratio - 1):+.1f}% slower")
    for m in data.get("metric_changes") or []:
        if m.get("regressed"):
            name = str(m["name"]).removeprefix("gpu.").removesuffix("_per_round")
            base, new = float(m["base"]), float(m["new"])
            said.append(f"{name} {100 * (new / base - 1):+.1f}%" if base else f"{name} {base:.6g} → {new:.6g}")
    others = len(said) - 1 + more if said else more
    line = f"inferscope A/B: {said[0] if said else 'regressed'} vs {ref}"  # (none said: a verdict made by hand)
    return line + (f" (+{others} more)" if others > 0 else "")
