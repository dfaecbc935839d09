"""Power study of the regression gate: how often it flags injected slowdowns, timed for real on this machine.

The workload is a pure-Python loop calibrated to about 3 ms per call (`--target-ms`); a slowdown
of s is injected as s × more loop iterations (each costs the same), so the new code does proportionally more of the
same work, like a real regression. Each trial measures a *base* run and a *new* run the way CI
does: back to back, each with its own warm-up and `rounds` timed rounds (a CI records the
baseline on one run and the candidate on another, so drift between the two blocks is part of
the honest setting; `--order interleaved` alternates base and new rounds instead, for
comparison). The two sample sets go through `pytest_inferscope.stats.compare_samples` with
max_regression = 5% and alpha = 0.01, exactly as the plugin calls it.

Slowdowns (0, 5, 10, 20%) and round counts (10, 20, 40) are visited in a shuffled order in every
trial, so a noisy minute on the shared machine hits every setting alike. For each setting the
table gives the share of trials the gate called regressed / unchanged / inconclusive, a 95%
Wilson interval for the regressed share, the median observed ratio and spread, and for
contrast what each half of the rule would flag alone: the median ratio above 1.05 alone (a
threshold on one aggregate, pytest-benchmark's rule) and p < alpha alone. Every round is also
timed in thread CPU time (`time.thread_time`), and a second table judges the same trials on
that: it separates what the statistics do from what CPU contention on the machine does to
wall-clock time (the plugin gates on wall-clock time).

Targets: at most 1% flagged at 0%; at least 95% flagged at 10% with 20 rounds.

    python benchmarks/regression_power.py            # 100 trials per setting, a few minutes
    python benchmarks/regression_power.py --quick    # 20 trials, 20 rounds only, < 60 s
    python benchmarks/regression_power.py --markdown # also print the table as Markdown
"""

from __future__ import annotations

import argparse
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

from pytest_inferscope.stats import compare_samples, rel_spread

SLOWDOWNS = (0.0, 0.05, 0.10, 0.20)
ROUNDS = (10, 20, 40)


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
    per_iter_ms = 1e3 * float(np.median(times)) / probe
    return max(1000, round(target_ms / per_iter_ms))


Samples = dict[str, list[float]]  # clock ("wall" | "cpu") -> per-round ms


def timed_rounds(fn: Callable[[], object], rounds: int, warmup: int) -> Samples:
    """Wall-clock (what the plugin gates on) and thread CPU time (a diagnostic) of each round, in ms."""
    for _ in range(warmup):
        fn()
    out: Samples = {"wall": [], "cpu": []}
    for _ in range(rounds):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        t1, c1 = time.perf_counter(), time.thread_time()
        out["wall"].append(1e3 * (t1 - t0))
        out["cpu"].append(1e3 * (c1 - c0))
    return out


def measure_pair(
    n_base: int, n_new: int, rounds: int, warmup: int, order: str, probe: int = 0
) -> tuple[Samples, Samples]:
    """Base and new samples, back to back (base block, then new block) or interleaved round by round.

    With `probe` > 0 (back to back only), each block is bracketed by that many rounds of a fixed
    reference workload (the unchanged base code), kept under "probe": how fast the machine was.
    """
    base_fn, new_fn = (lambda: work(n_base)), (lambda: work(n_new))
    if order == "back-to-back":
        blocks = []
        for fn in (base_fn, new_fn):
            before = timed_rounds(base_fn, probe, 0)["wall"]
            block = timed_rounds(fn, rounds, warmup)
            block["probe"] = before + timed_rounds(base_fn, probe, 0)["wall"]
            blocks.append(block)
        return blocks[0], blocks[1]
    timed_rounds(base_fn, 0, warmup)
    timed_rounds(new_fn, 0, warmup)
    base: Samples = {"wall": [], "cpu": []}
    new: Samples = {"wall": [], "cpu": []}
    for _ in range(rounds):
        for into, fn in ((base, base_fn), (new, new_fn)):
            one = timed_rounds(fn, 1, 0)
            into["wall"] += one["wall"]
            into["cpu"] += one["cpu"]
    return base, new


@dataclass
class Cell:
    """The outcomes of every trial of one (slowdown, rounds) setting."""

    verdicts: list[str] = field(default_factory=list)
    ratios: list[float] = field(default_factory=list)
    spreads: list[float] = field(default_factory=list)
    ratio_only: int = 0
    p_only: int = 0
    flagged: list[str] = field(default_factory=list)  # what each "regressed" trial looked like
    probe_kept: int = 0  # --probe: regressed trials whose reference probe saw no machine drift

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


Cells = dict[tuple[str, float, int], Cell]  # (clock, slowdown, rounds) -> outcomes


def model_pair(rng: np.random.Generator, sigma: float, slowdown: float, rounds: int) -> tuple[Samples, Samples]:
    """--model: no timing, independent log-normal rounds (log-sd sigma) around target 1 and 1 + slowdown."""
    base = [float(x) for x in np.exp(rng.normal(0.0, sigma, rounds))]
    new = [float(x) for x in np.exp(rng.normal(math.log1p(slowdown), sigma, rounds))]
    return {"wall": base, "cpu": base}, {"wall": new, "cpu": new}


def run_study(args: argparse.Namespace) -> tuple[Cells, int, float]:
    n_base = 0 if args.model is not None else calibrate(args.target_ms)
    model_rng = np.random.default_rng(args.seed)
    settings = [(s, r) for s in args.slowdowns for r in args.rounds]
    cells = {(clock, s, r): Cell() for clock in ("wall", "cpu") for s, r in settings}
    rng = random.Random(args.seed)
    t_start = time.perf_counter()
    for trial in range(args.trials):
        rng.shuffle(settings)
        for slowdown, rounds in settings:
            n_new = round(n_base * (1 + slowdown))
            if args.model is not None:
                base_all, new_all = model_pair(model_rng, args.model, slowdown, rounds)
            else:
                base_all, new_all = measure_pair(n_base, n_new, rounds, args.warmup, args.order, args.probe)
            for clock in ("wall", "cpu"):
                base, new = base_all[clock], new_all[clock]
                c = compare_samples(base, new, max_regression=args.max_regression, alpha=args.alpha)
                cell = cells[(clock, slowdown, rounds)]
                cell.verdicts.append(c.verdict)
                cell.ratios.append(c.ratio)
                cell.spreads.append(max(rel_spread(base), rel_spread(new)))
                cell.ratio_only += c.ratio > 1 + args.max_regression
                cell.p_only += c.verdict != "inconclusive" and c.ratio >= 1 and c.p_value < args.alpha
                drift = math.nan
                if base_all.get("probe") and new_all.get("probe"):
                    drift = float(np.median(new_all["probe"]) / np.median(base_all["probe"]))
                if c.verdict == "regressed":
                    cell.probe_kept += abs(math.log(drift)) <= math.log1p(args.max_regression / 2)
                    cell.flagged.append(
                        f"ratio {c.ratio:.3f}, p={c.p_value:.1e}, spread base {100 * rel_spread(base):.1f}% "
                        f"new {100 * rel_spread(new):.1f}%" + (f", probe drift {drift:.3f}" if drift == drift else "")
                    )
        if args.progress and (trial + 1) % max(1, args.trials // 10) == 0:
            elapsed = time.perf_counter() - t_start
            print(f"  trial {trial + 1}/{args.trials}  ({elapsed:.0f} s)", file=sys.stderr, flush=True)
    return cells, n_base, time.perf_counter() - t_start


def table(cells: Cells, clock: str, markdown: bool, probe: bool = False) -> str:
    head = [
        "slowdown",
        "rounds",
        "trials",
        "regressed",
        "95% CI",
        "unchanged",
        "inconclusive",
        "median ratio",
        "median spread",
        "ratio>1.05 alone",
        "p<alpha alone",
    ] + (["regressed, probe steady"] if probe else [])
    rows = []
    for (_, slowdown, rounds), c in sorted((k, v) for k, v in cells.items() if k[0] == clock):
        n = len(c.verdicts)
        lo, hi = wilson(c.verdicts.count("regressed"), n)
        rows.append(
            [
                f"{100 * slowdown:.0f}%",
                str(rounds),
                str(n),
                f"{100 * c.share('regressed'):.1f}%",
                f"{100 * lo:.1f}–{100 * hi:.1f}%",
                f"{100 * c.share('unchanged'):.1f}%",
                f"{100 * c.share('inconclusive'):.1f}%",
                f"{float(np.median(c.ratios)):.3f}",
                f"{100 * float(np.median(c.spreads)):.1f}%",
                f"{100 * c.ratio_only / n:.1f}%",
                f"{100 * c.p_only / n:.1f}%",
            ]
            + ([f"{100 * c.probe_kept / n:.1f}%"] if probe else [])
        )
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
        return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:>{w}}}" for w in widths)
    return "\n".join([fmt.format(*head)] + [fmt.format(*r) for r in rows])


def verdict_on_targets(cells: Cells, clock: str, rounds: int) -> list[str]:
    out = []
    zero = [c for (k, s, _), c in cells.items() if k == clock and s == 0.0]
    if zero:
        flagged = sum(c.verdicts.count("regressed") for c in zero)
        total = sum(len(c.verdicts) for c in zero)
        rate = flagged / total
        out.append(
            f"false positives at 0% (all round counts): {flagged}/{total} = {100 * rate:.2f}% "
            f"(target ≤ 1%): {'met' if rate <= 0.01 else 'MISSED'}"
        )
    ten = cells.get((clock, 0.10, rounds))
    if ten:
        rate = ten.share("regressed")
        out.append(
            f"detection at 10% with {rounds} rounds: {100 * rate:.1f}% (target ≥ 95%): "
            f"{'met' if rate >= 0.95 else 'MISSED'}"
        )
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--trials", type=int, default=100, help="trials per (slowdown, rounds) setting (default 100)")
    p.add_argument("--rounds", type=lambda s: tuple(int(x) for x in s.split(",")), default=ROUNDS)
    p.add_argument("--slowdowns", type=lambda s: tuple(float(x) / 100 for x in s.split(",")), default=SLOWDOWNS)
    p.add_argument("--target-ms", type=float, default=3.0, help="base latency of one round (default 3 ms)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--max-regression", type=float, default=0.05)
    p.add_argument("--alpha", type=float, default=0.01)
    p.add_argument("--order", choices=("back-to-back", "interleaved"), default="back-to-back")
    p.add_argument(
        "--probe",
        type=int,
        default=0,
        metavar="N",
        help="experiment: bracket each back-to-back block with N rounds of a fixed reference workload and "
        "also report the regressed share when trials whose reference drifted by more than half the allowed "
        "regression are set aside",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the setting order (timings are real)")
    p.add_argument(
        "--model",
        type=float,
        metavar="LOGSD",
        help="no timing: draw independent log-normal rounds with this log-sd (checks the rule itself, not the machine)",
    )
    p.add_argument("--quick", action="store_true", help="20 trials, 20 rounds, 2 ms rounds: under a minute")
    p.add_argument("--markdown", action="store_true", help="also print the table as Markdown")
    p.add_argument("--progress", action="store_true", help="report progress on stderr")
    args = p.parse_args(argv)
    if args.quick:
        args.trials, args.rounds, args.target_ms = 20, (20,), 2.0
    load_before = os.getloadavg()
    cells, n_base, elapsed = run_study(args)
    load_after = os.getloadavg()
    print(
        f"regression gate power study: {args.order}, max_regression={args.max_regression:g}, alpha={args.alpha:g}, "
        + (
            f"model: independent log-normal rounds, log-sd {args.model:g}"
            if args.model is not None
            else f"workload {n_base} loop iterations ≈ {args.target_ms:g} ms, warm-up {args.warmup}"
        )
        + f", {args.trials} trials"
    )
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, Python "
        f"{platform.python_version()}, load average {load_before[0]:.2f} before, {load_after[0]:.2f} after; "
        f"took {elapsed:.0f} s"
    )
    views = [
        ("wall", "wall-clock latency per round (what the plugin gates on):"),
        ("cpu", "diagnostic: the same trials judged on the thread's CPU time per round (time.thread_time):"),
    ]
    for clock, title in views[:1] if args.model is not None else views:
        print(f"\n{title}\n")
        print(table(cells, clock, markdown=False, probe=args.probe > 0))
        print()
        for line in verdict_on_targets(cells, clock, 20):
            print(line)
        false_alarms = [f for (k, s, r), c in sorted(cells.items()) if k == clock and s == 0.0 for f in c.flagged]
        for f in false_alarms[:10]:
            print(f"  flagged at 0%: {f}")
        if args.markdown:
            print()
            print(table(cells, clock, markdown=True, probe=args.probe > 0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
