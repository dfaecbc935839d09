"""Power study of the regression gate: how often it flags injected slowdowns, timed for real on this machine.

The workload is a pure-Python integer loop calibrated to about 3 ms per call (`--target-ms`); a
slowdown of s is injected as s × more loop iterations (each costs the same), so the new code does
proportionally more of the same work, like a real regression. Each trial records what CI records,
in CI's order, back to back: `--history` baseline runs of the unchanged code (saved on main, one
after the other), then the candidate run. Each run has its own warm-up and `rounds` timed rounds,
timed as the plugin times them, through the plugin's own round loop (`drift.measure_steady`):
the speed probe (`drift.probe_ms`, a different piece of code from the workload) is read before
the first round and after every one, and rounds are added while fewer than `rounds` are steady,
up to `--round-cap` times `rounds` (the plugin's default; 1 = the requested rounds only). A
baseline run's loop knows the readings of the runs saved before it (the first knows none), as
`--inferscope-save-baseline` does when it appends; the candidate's knows those of the baseline
runs, as with `--inferscope-compare` (the last five runs, in both cases). Baseline and
candidate are never interleaved: CI cannot do that.

The same trials are judged by eight rules, all through the plugin's own functions:

- `asv`: `stats.compare_samples` on the latest baseline run against the candidate (a one-sided
  Mann–Whitney U test at alpha *and* a median ratio above 1 + max_regression): the gate before
  the drift defences;
- `floor`: `regression.compare_to_baseline` with the history but without probe readings (the
  run-to-run noise floor alone);
- `probe`: `compare_to_baseline` with the probe readings of the latest run only (steady rounds alone);
- `gate`: `compare_to_baseline` with probe readings and the whole history: what the plugin does
  when main has saved `--history` runs. This is the headline.
- `probe-cap1`, `gate-cap1`: the same on the first `rounds` rounds (and readings) of every run,
  which is exactly what a round cap of 1 would have measured: the effect of the added rounds,
  on the same trials;
- `asv+ci`, `gate+ci`: `asv` and `gate`, with "regressed" kept only where the 99% CI of the ratio
  that the report prints lies above 1 too (else "unchanged"): how often the verdict and the
  interval printed beside it disagree, and what requiring both would cost.

Slowdowns (0, 5, 10, 20%) and round counts (10, 20, 40) are visited in a shuffled order in every
trial, so a noisy minute on the shared machine hits every setting alike.

Targets: at most 1% flagged at 0%; at least 95% flagged at 10% with 20 rounds.

    python benchmarks/regression_power.py            # 100 trials per setting, about 10 minutes
    python benchmarks/regression_power.py --quick    # 20 trials, 20 rounds only, about a minute
    python benchmarks/regression_power.py --markdown # also print the tables as Markdown
    python benchmarks/regression_power.py --ab --trials 200  # A/B mode through the plugin (ab_power.py)
"""

from __future__ import annotations

import argparse
import functools
import math
import os
import platform
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header
from pytest_inferscope import drift, regression, stats
from pytest_inferscope.baseline import BaselineEntry
from pytest_inferscope.comparison import Comparison
from pytest_inferscope.drift import measure_steady
from pytest_inferscope.options import OPTIONS_BY_NAME
from pytest_inferscope.regression import compare_to_baseline
from pytest_inferscope.results import Analysis, LatencyStats, TestResult
from pytest_inferscope.stats import compare_samples, rel_spread

SLOWDOWNS = (0.0, 0.05, 0.10, 0.20)
ROUNDS = (10, 20, 40)
RULES = ("asv", "floor", "probe", "gate", "probe-cap1", "gate-cap1", "asv+ci", "gate+ci")
CI = "+ci"  # the rule, and "regressed" only where the printed CI of the ratio lies above 1 too
CAP1 = "-cap1"  # the rule on the first `rounds` rounds of every run: as if no rounds had been added
NODEID = "bench::workload"


def work(n: int) -> int:
    """The timed body: n iterations of the same small-integer arithmetic, so its cost is linear in n.

    (acc stays below 2**20, so every iteration costs the same; `i * i` would grow past one
    PyLong digit and make later iterations dearer.)
    """
    acc = 1
    for _ in range(n):
        acc = (acc * 31 + 7) % 1_000_003
    return acc


def calibrate(target_ms: float) -> int:
    """Iterations for one call of `work` to take about target_ms (median of a few timings)."""
    probe = 20_000
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        work(probe)
        times.append(time.perf_counter() - t0)
    # The fastest timing: the machine's fast state, so the calibration does not depend on which
    # state it happened to run in (the median of 7 gave 25,000 or 45,000 iterations).
    per_iter_ms = 1e3 * float(np.min(times)) / probe
    return max(1000, round(target_ms / per_iter_ms))


@dataclass
class Run:
    """One run of the workload as the plugin measures it: round latencies, probe readings, CPU share."""

    samples_ms: list[float]
    probe_ms: list[float]
    working: float  # the test thread's CPU time over wall time (the analyzer's cpu.test_thread_working)


def measure(fn: Callable[[], object], rounds: int, warmup: int, cap: float, prior: list[float]) -> Run:
    """warmup + rounds (or more, up to cap x rounds) calls through the plugin's round loop, timed as session.py does."""
    for _ in range(warmup):
        fn()
    samples: list[float] = []

    def one(_: int) -> None:
        t0 = time.perf_counter()
        fn()
        samples.append(1e3 * (time.perf_counter() - t0))

    done = measure_steady(one, rounds, max(rounds, math.ceil(rounds * cap - 1e-9)), prior=prior)
    return Run(samples, done.probe_ms, min(1.0, done.cpu_share))


def _prior(history: list[Run]) -> list[float]:
    """The readings the plugin's round loop knows from the baseline: those of its last five saved runs."""
    return [x for run in history[-5:] for x in run.probe_ms]


def entry(run: Run, probe: bool) -> BaselineEntry:
    return BaselineEntry(NODEID, run.samples_ms, probe_ms=run.probe_ms if probe else [], rounds=len(run.samples_ms))


def result(run: Run, probe: bool) -> TestResult:
    latency = LatencyStats.from_samples(run.samples_ms)
    latency.probe_ms = run.probe_ms if probe else []
    analysis = Analysis(bottleneck="cpu_bound", confidence=1.0, metrics={"cpu.test_thread_working": run.working})
    return TestResult(NODEID, "w", "passed", "pass", len(run.samples_ms), 3, latency, analysis)


def _no_warnings(*args: object, **kwargs: object) -> list[str]:
    return []


def _first(run: Run, rounds: int) -> Run:
    return Run(run.samples_ms[:rounds], run.probe_ms[: rounds + 1], run.working)


def judge(
    history: list[Run], new: Run, rounds: int, max_regression: float, alpha: float
) -> dict[str, tuple[str, float]]:
    """Verdict and ratio of each rule in RULES on one trial.

    The pyperf-style noise warnings are skipped: they never change a verdict, and their power
    simulation would triple the study's run time.
    """
    regression.noise_warnings = _no_warnings  # type: ignore[assignment]
    kw = {"max_regression": max_regression, "alpha": alpha}
    asv = compare_samples(history[-1].samples_ms, new.samples_ms, **kw)
    out = {"asv": (asv.verdict, asv.ratio), "asv" + CI: (_ci_agrees(asv), asv.ratio)}
    first = [_first(r, rounds) for r in history]
    for rule, probe, hist, cand in (
        ("floor", False, history, new),
        ("probe", True, history[-1:], new),
        ("gate", True, history, new),
        ("probe" + CAP1, True, first[-1:], _first(new, rounds)),
        ("gate" + CAP1, True, first, _first(new, rounds)),
    ):
        entries = [entry(r, probe) for r in hist]
        v = compare_to_baseline(entries[-1], result(cand, probe), history=entries, **kw)
        out[rule] = (v.verdict, v.latency.ratio)
        if rule == "gate":
            out[rule + CI] = (_ci_agrees(v.latency) if v.verdict == "regressed" else v.verdict, v.latency.ratio)
    return out


def _ci_agrees(c: Comparison) -> str:
    """A verdict of "regressed" kept only where the CI the report prints lies above 1 ("unchanged" otherwise)."""
    return "unchanged" if c.verdict == "regressed" and not c.ci_low > 1.0 else c.verdict


@dataclass
class Cell:
    """The outcomes of every trial of one (rule, slowdown, rounds) setting."""

    verdicts: list[str] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    spreads: list[float] = field(default_factory=list)
    ran: list[int] = field(default_factory=list)  # rounds the candidate run actually ran
    drifts: list[float] = field(
        default_factory=list
    )  # median ratio of the latest baseline run's probe to the new run's

    def share(self, verdict: str) -> float:
        return self.verdicts.count(verdict) / len(self.verdicts)


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """95% Wilson score interval of a proportion k/n."""
    if n == 0:
        return math.nan, math.nan
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


Cells = dict[tuple[str, float, int], Cell]


def model_run(rng: np.random.Generator, sigma: float, level: float, rounds: int, run_sd: float = 0.0) -> Run:
    """--model: no timing; independent log-normal rounds (log-sd sigma) around a run level, and a steady probe.

    The run's level is itself log-normal around `level` with log-sd `run_sd` (--model-drift): a
    machine whose speed moves between runs in a way the probe does not see.
    """
    level *= math.exp(rng.normal(0.0, run_sd)) if run_sd > 0 else 1.0
    return Run([float(x) for x in level * np.exp(rng.normal(0.0, sigma, rounds))], [0.05] * (rounds + 1), 1.0)


def steady_medians(history: list[Run], min_samples: int = 5) -> list[float]:
    """The medians of the saved runs' steady rounds, as the noise floor takes them (runs with too few left out)."""
    ref = drift.probe_reference(*(r.probe_ms for r in history))
    out = []
    for r in history:
        kept = np.asarray(r.samples_ms)[drift.steady_mask(r.probe_ms, ref)]
        if len(kept) >= min_samples:
            out.append(float(np.median(kept)))
    return out


def drift_ceilings(log_sds: list[float], history: int, max_regression: float, alpha: float) -> list[str]:
    """The run-to-run drift of the unchanged runs, and what it leaves of the 95% target at a 10% slowdown.

    sigma is the root mean square of the within-trial log-sd of the saved runs' steady medians:
    how far one run of unchanged code lands from the next, minutes apart at most. If run medians
    scatter log-normally by sigma, then (rounds aside) a 10% slowdown reaches a median ratio above
    1 + max_regression against one baseline run with probability Phi((ln 1.10 - ln(1 + m)) /
    (sigma sqrt 2)), the ceiling of the median-ratio rule the issue prescribes; and a floor that
    keeps false positives at alpha with `history` runs, even with sigma known exactly, catches at
    most Phi(ln 1.10 / s - z(1 - alpha)), s = sigma sqrt(1 + 1/k).
    """
    if not log_sds:
        return []
    sigma = math.sqrt(float(np.mean(np.square(log_sds))))
    asv = 1.0 - stats._norm_sf((math.log(1.10) - math.log1p(max_regression)) / (sigma * math.sqrt(2.0)))
    z = stats._norm_ppf(1.0 - alpha)
    lines = [
        f"run-to-run drift of unchanged code: sigma = {100 * sigma:.2f}% (log-sd of the steady medians of the "
        f"saved runs within a trial, RMS over {len(log_sds)} trials)",
        f"  ceiling at a 10% slowdown, median ratio > {1 + max_regression:g} against one baseline run: "
        f"{100 * asv:.1f}%",
    ]
    for k, label in ((history, f"{history} saved runs"), (10**9, "an endless history")):
        s = sigma * math.sqrt(1.0 + 1.0 / k)
        lines.append(
            f"  ceiling at a 10% slowdown, a floor at {100 * alpha:g}% false positives with {label} (sigma known): "
            f"{100 * (1.0 - stats._norm_sf(math.log(1.10) / s - z)):.1f}%"
        )
    need = (math.log(1.10) - math.log1p(max_regression)) / (stats._norm_ppf(0.95) * math.sqrt(2.0))
    lines.append(f"  the median-ratio rule reaches 95% only while sigma <= {100 * need:.2f}%")
    return lines


def run_study(args: argparse.Namespace) -> tuple[Cells, int, float, list[float]]:
    n_base = 0 if args.model is not None else calibrate(args.target_ms)
    model_rng = np.random.default_rng(args.seed)
    settings = [(s, r) for s in args.slowdowns for r in args.rounds]
    cells: Cells = {(rule, s, r): Cell() for rule in RULES for s, r in settings}
    rng = random.Random(args.seed)
    log_sds: list[float] = []  # per trial and setting: the log-sd of the saved runs' steady medians
    t_start = time.perf_counter()
    for trial in range(args.trials):
        rng.shuffle(settings)
        for slowdown, rounds in settings:
            if args.model is not None:
                history = [model_run(model_rng, args.model, 1.0, rounds, args.model_drift) for _ in range(args.history)]
                new = model_run(model_rng, args.model, 1.0 + slowdown, rounds, args.model_drift)
            else:
                n_new = round(n_base * (1 + slowdown))
                history = []
                for _ in range(args.history):  # each save knows the readings of the runs saved before it
                    history.append(
                        measure(functools.partial(work, n_base), rounds, args.warmup, args.round_cap, _prior(history))
                    )
                new = measure(functools.partial(work, n_new), rounds, args.warmup, args.round_cap, _prior(history))
            medians = steady_medians(history)
            if len(medians) >= 2:
                log_sds.append(float(np.std(np.log(medians), ddof=1)))
            spread = max(rel_spread(history[-1].samples_ms), rel_spread(new.samples_ms))
            drift = float(np.median(new.probe_ms) / np.median(history[-1].probe_ms))
            for rule, (verdict, ratio) in judge(history, new, rounds, args.max_regression, args.alpha).items():
                cell = cells[(rule, slowdown, rounds)]
                cell.verdicts.append(verdict)
                cell.ratios.append(ratio)
                cell.spreads.append(spread)
                cell.ran.append(rounds if rule.endswith(CAP1) else len(new.samples_ms))
                cell.drifts.append(drift)
        if args.progress and (trial + 1) % max(1, args.trials // 10) == 0:
            elapsed = time.perf_counter() - t_start
            print(f"  trial {trial + 1}/{args.trials}  ({elapsed:.0f} s)", file=sys.stderr, flush=True)
    return cells, n_base, time.perf_counter() - t_start, log_sds


def table(cells: Cells, rule: str, markdown: bool) -> str:
    head = ["slowdown", "rounds", "trials", "regressed", "95% CI", "unchanged", "inconclusive", "median ratio",
            "median spread", "machine drift (p10–p90)", "rounds ran (mean, max)"]  # fmt: skip
    rows = []
    for (_, slowdown, rounds), c in sorted((k, v) for k, v in cells.items() if k[0] == rule):
        n = len(c.verdicts)
        lo, hi = wilson(c.verdicts.count("regressed"), n)
        ratios = [r for r in c.ratios if math.isfinite(r)]
        d10, d90 = np.percentile(c.drifts, [10, 90])
        rows.append(
            [
                f"{100 * slowdown:.0f}%",
                str(rounds),
                str(n),
                f"{100 * c.share('regressed'):.1f}%",
                f"{100 * lo:.1f}–{100 * hi:.1f}%",
                f"{100 * c.share('unchanged'):.1f}%",
                f"{100 * c.share('inconclusive'):.1f}%",
                f"{float(np.median(ratios)):.3f}" if ratios else "n/a",
                f"{100 * float(np.median(c.spreads)):.1f}%",
                f"{d10:.2f}–{d90:.2f}",
                f"{float(np.mean(c.ran)):.1f}, {max(c.ran)}",
            ]
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*r) for r in rows])


def summary(cells: Cells, rules: tuple[str, ...], rounds: int) -> list[str]:
    """Per rule: false positives at 0% (all round counts) and detection at 10% with `rounds` rounds."""
    out = []
    for rule in rules:
        zero = [c for (k, s, _), c in cells.items() if k == rule and s == 0.0]
        flagged, total = sum(c.verdicts.count("regressed") for c in zero), sum(len(c.verdicts) for c in zero)
        ten = cells.get((rule, 0.10, rounds))
        line = f"{rule:>5}: false positives at 0%: {flagged}/{total}"
        if total:
            line += f" = {100 * flagged / total:.2f}% ({'met' if flagged / total <= 0.01 else 'MISSED'}, target ≤ 1%)"
        if ten:
            rate = ten.share("regressed")
            met = "met" if rate >= 0.95 else "MISSED"
            line += (
                f"; detection at 10% with {rounds} rounds: {100 * rate:.1f}% "
                f"({met}, target ≥ 95%; inconclusive {100 * ten.share('inconclusive'):.0f}%)"
            )
        out.append(line)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--trials", type=int, default=100, help="trials per (slowdown, rounds) setting (default 100)")
    p.add_argument("--rounds", type=lambda s: tuple(int(x) for x in s.split(",")), default=ROUNDS)
    p.add_argument("--slowdowns", type=lambda s: tuple(float(x) / 100 for x in s.split(",")), default=SLOWDOWNS)
    p.add_argument("--history", type=int, default=3, help="baseline runs saved before the candidate (default 3)")
    p.add_argument("--target-ms", type=float, default=3.0, help="base latency of one round (default 3 ms)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument(
        "--round-cap",
        type=float,
        default=OPTIONS_BY_NAME["round_cap"].default,
        help="at most this many times the requested rounds per run (the plugin's --inferscope-round-cap; 1 = off)",
    )
    p.add_argument(
        "--tolerance",
        type=float,
        default=drift.PROBE_TOLERANCE,
        help="steady band of the speed probe, for the round loop and the rules (default: the plugin's)",
    )
    p.add_argument("--max-regression", type=float, default=0.05)
    p.add_argument("--alpha", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0, help="seed of the setting order (timings are real)")
    p.add_argument(
        "--model",
        type=float,
        metavar="LOGSD",
        help="no timing: draw independent log-normal rounds with this log-sd (checks the rules, not the machine)",
    )
    p.add_argument(
        "--model-drift",
        type=float,
        default=0.0,
        metavar="LOGSD",
        help="with --model: each run's level also moves by a log-normal factor with this log-sd (run-to-run drift)",
    )
    p.add_argument("--quick", action="store_true", help="20 trials, 20 rounds: about a minute")
    p.add_argument("--markdown", action="store_true", help="also print the tables as Markdown")
    p.add_argument("--progress", action="store_true", help="report progress on stderr")
    if argv is None:
        argv = sys.argv[1:]
    if "--ab" in argv:  # the A/B mode: the real plugin, two commits, pytest runs (benchmarks/ab_power.py)
        from benchmarks.ab_power import main as ab_main

        return ab_main([a for a in argv if a != "--ab"])
    args = p.parse_args(argv)
    if args.quick:
        args.trials, args.rounds = 20, (20,)
    drift.PROBE_TOLERANCE = args.tolerance  # read at call time by the loop, the rules and the notes
    if args.history < 1:
        p.error("--history must be at least 1")
    print("\n".join(header("regression gate power study", f"Python {platform.python_version()}")))
    load_before = os.getloadavg()
    cells, n_base, elapsed, log_sds = run_study(args)
    load_after = os.getloadavg()
    print(
        f"back to back, {args.history} baseline run(s) then the candidate; max_regression={args.max_regression:g}, "
        f"alpha={args.alpha:g}; "
        + (
            f"model: independent log-normal rounds, log-sd {args.model:g}"
            if args.model is not None
            else f"workload {n_base} loop iterations ≈ {args.target_ms:g} ms, warm-up {args.warmup}, "
            f"round cap {args.round_cap:g}, steady band {100 * args.tolerance:g}%"
        )
        + f"; {args.trials} trials; load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
        f"took {elapsed:.0f} s"
    )
    print("machine drift = median probe reading of the candidate run over the latest baseline run's")
    for rule in RULES:
        print(f"\nrule {rule!r}:\n")
        print(table(cells, rule, markdown=False))
    print()
    for line in summary(cells, RULES, 20):
        print(line)
    for line in drift_ceilings(log_sds, args.history, args.max_regression, args.alpha):
        print(line)
    if args.markdown:
        for rule in RULES:
            print(f"\nrule {rule!r}:\n")
            print(table(cells, rule, markdown=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
