"""The verdict of one test against its baseline: latency, deterministic metrics, bottleneck, environment.

The latency rule is `stats.compare_samples` (a one-sided Mann–Whitney U test at alpha *and* a
median ratio beyond the allowed regression), applied to the rounds the machine ran at its usual
speed when both runs carry speed-probe readings, and checked against the run-to-run noise floor
of the baseline's history when it holds enough runs (see `drift`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from .baseline import DETERMINISTIC_METRICS, SLOT_KEYS, BaselineEntry, fingerprint, fingerprint_diff, slot_change
from .drift import (
    FLOOR_WINDOW,
    MIN_HISTORY,
    PROBE_TOLERANCE,
    NoiseFloor,
    extra_rounds_note,
    noise_floor,
    probe_applies,
    probe_drift,
    probe_fits,
    probe_reference,
    steady_mask,
    steady_rounds,
)
from .results import RegressionVerdict, TestResult
from .stats import (
    Comparison,
    MetricChange,
    compare_metric,
    compare_samples,
    gate_blind_spots,
    noise_warnings,
    separation,
)
from .units import fmt_count, fmt_ms


def _median(samples: Sequence[float]) -> float:
    return float(np.median(np.asarray(samples, dtype=float))) if len(samples) else math.nan


def _history_floor(
    runs: Sequence[BaselineEntry],
    new_ms: Sequence[float],
    new_probe: Sequence[float],
    alpha: float,
    min_samples: int,
    use_probe: bool,
) -> tuple[NoiseFloor | None, int, float]:
    """The noise floor of the saved runs (same environment as the latest), how many runs it could use, the new median.

    With speed-probe readings on every run and on the new one, each run's median is taken over its
    steady rounds (against the readings of all of them), as the gate compares them; a saved run
    with fewer than `min_samples` such rounds is left out, and the new run then falls back to all
    its rounds. The new median is the one to hold against the floor's centre.
    """
    probed = (
        use_probe
        and probe_fits(new_probe, len(new_ms))
        and all(probe_fits(e.probe_ms, len(e.samples_ms)) for e in runs)
    )
    ref = probe_reference(*(e.probe_ms for e in runs), new_probe) if probed else math.nan

    def median(samples: Sequence[float], probe: Sequence[float]) -> float:
        if probed:
            keep = [x for x, k in zip(samples, steady_mask(probe, ref), strict=True) if k]
            return _median(keep) if len(keep) >= min_samples else math.nan
        return _median(samples) if len(samples) >= min_samples else math.nan

    medians = [m for m in (median(e.samples_ms, e.probe_ms) for e in runs) if math.isfinite(m)]
    new = median(new_ms, new_probe)
    return noise_floor(medians, alpha), len(medians), new if math.isfinite(new) else _median(new_ms)


def _beyond_any_drift(
    base_ms: Sequence[float],
    base_probe: Sequence[float],
    new_ms: Sequence[float],
    new_probe: Sequence[float],
    max_regression: float,
) -> str | None:
    """Why even the worst machine slowdown the probe saw cannot explain the shift, or None.

    The fast new rounds against the slow baseline rounds (10th against 90th percentile), over the
    slow new probe readings against the fast baseline ones (90th against 10th): if the code were
    unchanged, the rounds could not have slowed by more than the machine did. Percentiles, not the
    extremes, so one descheduled round or reading decides nothing.
    """
    if not (base_ms and new_ms and base_probe and new_probe):
        return None
    low = float(np.percentile(base_probe, 10))
    if low <= 0:
        return None
    shift = separation(base_ms, new_ms)
    worst = float(np.percentile(new_probe, 90)) / low
    if shift <= worst * (1.0 + max_regression):
        return None
    return (
        f"the new run's fast rounds (10th percentile) are {shift:.2f}x the baseline's slow ones (90th), while the "
        f"machine was at most {worst:.2f}x slower (speed probe, 90th against 10th percentile)"
    )


def latency_verdict(
    entry: BaselineEntry,
    new_ms: Sequence[float],
    new_probe: Sequence[float],
    *,
    not_cpu_bound: str,
    history: Sequence[BaselineEntry],
    max_regression: float,
    alpha: float,
    min_samples: int = 5,
    max_spread: float = 0.5,
) -> tuple[Comparison, str, float | None, list[str]]:
    """The latency comparison after the drift defences: (comparison, steady note, noise floor, warnings).

    `not_cpu_bound` is `drift.probe_applies`'s answer for the new run ('' when the probe applies).
    """
    base_ms = entry.samples_ms
    kw: dict[str, Any] = dict(max_regression=max_regression, alpha=alpha, min_samples=min_samples)
    warnings: list[str] = []
    steady = None if not_cpu_bound else steady_rounds(base_ms, entry.probe_ms, new_ms, new_probe)
    note = ""
    if steady is not None:
        note = steady.describe()
        latency = compare_samples(steady.base_ms, steady.new_ms, max_spread=max_spread, **kw)
        scaled = compare_samples(steady.base_scaled_ms, steady.new_scaled_ms, max_spread=max_spread, **kw)
        if latency.verdict in ("regressed", "improved") and scaled.verdict != latency.verdict:
            direction = "slower" if latency.verdict == "regressed" else "faster"
            latency = dataclasses.replace(
                latency,
                verdict="unchanged",
                reason=f"Unchanged once the machine's speed is allowed for: {direction} by "
                f"{100 * abs(latency.ratio - 1):.1f}% on the steady rounds, but by {100 * (scaled.ratio - 1):+.1f}% "
                f"(p={scaled.p_value:.2g}) with each round scaled by the speed probe around it, so the "
                "shift is within what the machine's own drift explains.",
            )
        if min(len(steady.base_ms), len(steady.new_ms)) < min_samples:
            everything = compare_samples(base_ms, new_ms, max_spread=max_spread, **kw)
            beyond = _beyond_any_drift(base_ms, entry.probe_ms, new_ms, new_probe, max_regression)
            if everything.verdict == "regressed" and beyond is not None:
                latency = dataclasses.replace(
                    everything,
                    reason=f"{everything.reason} The machine was busy ({note}), but no drift explains this: {beyond}.",
                )
            else:
                latency = dataclasses.replace(
                    everything,
                    verdict="inconclusive",
                    reason=f"The machine was busy: {note}; at least {min_samples} such rounds per side are needed, "
                    "so a slower machine cannot be told from slower code. Run on a quieter machine or with more "
                    "rounds.",
                )
    else:
        latency = compare_samples(base_ms, new_ms, max_spread=max_spread, **kw)
        drift = probe_drift(entry.probe_ms, new_probe)
        if not_cpu_bound and math.isfinite(drift) and abs(math.log(drift)) > math.log1p(PROBE_TOLERANCE):
            warnings.append(
                f"the host CPU ran {100 * abs(drift - 1):.0f}% {'slower' if drift > 1 else 'faster'} than when the "
                f"baseline was recorded (speed probe); not corrected for, since {not_cpu_bound}."
            )
    # (a key an older entry lacks reads "none": a run saved before the key existed is of the same environment)
    same_env = [e for e in history if not fingerprint_diff(e.fingerprint, entry.fingerprint)] or [entry]
    same_env = same_env[-FLOOR_WINDOW:]
    floor, usable, new_median = _history_floor(
        same_env, new_ms, new_probe, alpha, min_samples, use_probe=steady is not None
    )
    if floor is None:
        if len(same_env) >= MIN_HISTORY:
            warnings.append(
                f"no run-to-run noise floor: only {usable} of the {len(same_env)} saved runs of this test had at "
                f"least {min_samples} steady rounds (the others ran on a busy machine), and {MIN_HISTORY} are needed."
            )
        return latency, note, None, warnings
    return _within_floor(latency, floor, new_median, max_regression, warnings), note, floor.floor, warnings


def _within_floor(
    latency: Comparison, floor: NoiseFloor, new_median: float, max_regression: float, warnings: list[str]
) -> Comparison:
    """A regressed or improved latency within the run-to-run noise floor becomes inconclusive (warnings: appended)."""
    if floor.floor > 1.0 + max_regression:
        warnings.append(
            f"run-to-run drift: {floor.describe()}; that is more than the allowed {100 * max_regression:.3g}%, "
            "so on this machine a regression of that size cannot be told from drift."
        )
    off_centre = new_median / floor.centre
    shift = off_centre if latency.verdict == "regressed" else 1.0 / off_centre
    if latency.verdict in ("regressed", "improved") and not shift > floor.floor:
        direction = "slower" if latency.verdict == "regressed" else "faster"
        latency = dataclasses.replace(
            latency,
            verdict="inconclusive",
            reason=f"Within the run-to-run drift: {direction} by {100 * abs(latency.ratio - 1):.1f}% than the latest "
            f"baseline run and significant on the rounds (p={latency.p_value:.2g}), but this run's median, "
            f"{fmt_ms(new_median)} ms, is {off_centre:.3f}x the centre of the saved runs, and {floor.describe()}. "
            "The latest baseline run may just have been measured at a different machine speed.",
        )
    return latency


def compile_warning(metrics: Mapping[str, Any]) -> str:
    """Why this run's rounds vary, when torch.compile compiled in measured rounds (analyzer/rules_compile.py); ''."""
    rounds = metrics.get("compile.measured_rounds") or 0
    if not rounds:
        return ""
    return (
        f"this run: {fmt_count(int(rounds), 'measured round')} compiled (torch.compile, "
        f"{metrics.get('compile.ms_per_round') or 0.0:.1f} ms per measured round on average): their latency is "
        "compilation, not the model's, and so is what is compared with the baseline; run more warm-up rounds or keep "
        "the input shapes fixed (the report's torch_compile finding says which rounds, and why each recompiled)."
    )


def _metric_changes(
    before: Mapping[str, Any], after: Mapping[str, Any], tolerance: float | Mapping[str, float]
) -> list[MetricChange]:
    """The deterministic metrics that changed beyond their tolerance (one for all, or one per name)."""
    changes = []
    for name in DETERMINISTIC_METRICS:
        tol = tolerance.get(name, 0.0) if isinstance(tolerance, Mapping) else tolerance
        change = compare_metric(name, before.get(name), after.get(name), tol)
        if change is not None:
            changes.append(change)
    return changes


def _overall(latency: Comparison, changes: list[MetricChange], differences: list[str]) -> tuple[str, str]:
    """The verdict and its reason: a changed environment makes it inconclusive; else latency and metrics decide."""
    regressed_metrics = [m for m in changes if m.regressed]
    if differences:
        return "inconclusive", (
            f"the environment differs from the baseline's ({fmt_count(len(differences), 'difference')}, listed "
            f"below), so the latency comparison is not a fair one; it would have been {latency.verdict!r}. Record a "
            "baseline on this environment to gate on it."
        )
    if latency.verdict == "regressed" or regressed_metrics:
        parts = [latency.reason] if latency.verdict == "regressed" else []
        return "regressed", " ".join(parts + [m.message for m in regressed_metrics])
    return latency.verdict, latency.reason


def compare_to_baseline(
    baseline_entry: BaselineEntry,
    result: TestResult,
    *,
    max_regression: float,
    alpha: float = 0.01,
    metric_tolerance: float | Mapping[str, float] = 0.0,
    min_samples: int = 5,
    max_spread: float = 0.5,
    environment: Mapping[str, Any] | None = None,
    ignore_fingerprint: Collection[str] = (),
    baseline_name: str = "",
    history: Sequence[BaselineEntry] = (),
) -> RegressionVerdict:
    """Judge `result` against a baseline entry: latency (compare_samples), deterministic metrics, bottleneck.

    When both the entry and the result carry speed-probe readings and the test's time is on the
    host, only the rounds the machine ran at its usual speed are compared (`drift.steady_rounds`);
    too few of them on a side makes the latency inconclusive. `history` is every saved run of
    the test, oldest first (the entry is normally its last); with `drift.MIN_HISTORY` runs from
    the entry's environment, a regressed or improved latency whose ratio stays within their
    run-to-run noise floor becomes inconclusive. A fingerprint difference (`environment`, default
    `result.environment`, against the entry's; keys in `ignore_fingerprint` skipped) makes the
    verdict inconclusive, with the differences as the reason: the numbers are still shown, never
    silently compared. Otherwise a regressed latency or any regressed deterministic metric makes
    it "regressed"; `metric_tolerance` is one relative tolerance for all metrics or one per
    metric name (missing names: 0, exact).
    """
    analysis = result.analysis
    latency, steady, floor, drift_warnings = latency_verdict(
        baseline_entry,
        result.latency.samples_ms,
        result.latency.probe_ms,
        not_cpu_bound=probe_applies(analysis.bottleneck, analysis.metrics.get("cpu.test_thread_working")),
        history=list(history),
        max_regression=max_regression,
        alpha=alpha,
        min_samples=min_samples,
        max_spread=max_spread,
    )
    extra = extra_rounds_note(len(result.latency.samples_ms), result.rounds)
    if extra:
        steady = f"{steady}; {extra}" if steady else extra
    changes = _metric_changes(baseline_entry.metrics, result.analysis.metrics, metric_tolerance)
    now_fp = fingerprint(result.environment if environment is None else environment)
    differences = fingerprint_diff(baseline_entry.fingerprint, now_fp, {*ignore_fingerprint, *SLOT_KEYS})
    moved = "" if differences else slot_change(baseline_entry.fingerprint, now_fp)
    warnings = [
        f"{label}: {w}"
        for label, samples in (("this run", result.latency.samples_ms), ("baseline", baseline_entry.samples_ms))
        for w in noise_warnings(samples, max_regression=max_regression, alpha=alpha)
    ] + drift_warnings
    if compiled := compile_warning(result.analysis.metrics):
        warnings.insert(0, compiled)
    verdict, reason = _overall(latency, changes, differences)
    return RegressionVerdict(
        nodeid=result.nodeid,
        verdict=verdict,
        reason=reason,
        latency=latency,
        metric_changes=changes,
        bottleneck_before=baseline_entry.bottleneck,
        bottleneck_after=result.analysis.bottleneck,
        fingerprint_differences=differences,
        warnings=warnings,
        baseline_name=baseline_name,
        baseline_timestamp=baseline_entry.timestamp,
        steady=steady,
        noise_floor=floor,
        slot_change=moved,
    )


def gate_blind_notes(results: Sequence[TestResult], *, alpha: float, saving: bool) -> list[str]:
    """One terminal line per gated test whose rounds the regression gate can never judge, and why.

    A test is gated when it has a `max_regression` (a marker's, or the run's with a baseline to compare
    with), or when its rounds are saved as a baseline (`saving`), which a later run compares against.
    """
    lines = []
    for r in sorted(results, key=lambda r: r.nodeid):
        if not saving and "max_regression" not in r.thresholds:
            continue
        if r.partial_reason:
            continue  # a partial run's rounds are neither compared nor saved
        for problem in gate_blind_spots(r.latency.samples_ms, alpha=alpha):
            lines.append(f"inferscope: {r.nodeid}: {problem}")
    return lines


def environment_note(result: TestResult) -> str | None:
    """The summary line for a test compared with a baseline recorded in another environment, or None."""
    reg = result.regression
    diffs = reg.fingerprint_differences if reg is not None else []
    if reg is not None and not diffs and reg.slot_change:
        return (
            f"inferscope: tests compared with baseline {reg.baseline_name!r} on another GPU of the same model (e.g. "
            f"{reg.nodeid}: {reg.slot_change}): xdist hands a test to whichever worker is free"
        )
    if reg is None or not diffs:
        return None
    name = reg.baseline_name
    return (
        f"inferscope: environment differs from baseline {name!r} ({'; '.join(d.rstrip('.') for d in diffs)}): "
        "latency was not compared (inconclusive) for the tests it recorded elsewhere"
    )
