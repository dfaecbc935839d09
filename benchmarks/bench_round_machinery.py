"""What the round machinery costs a CPU-only, pure-Python body per call (issue 16), through the public API.

The body is a recursive Fibonacci (no torch, no GPU): all Python, so anything the plugin does inside
the round's time, or that disturbs the body's caches between rounds, shows. Per "test": 1 warm-up + 10
calls; the plugin's figure is the per-round latency `measure()` records for the measured rounds, the
plain figure the same calls timed with perf_counter. Modes, interleaved in a rotating order so drift hits
them alike: `default` (`measure()` with default settings: stack sampling every 10 ms), `cpu_off`
(`measure(cpu="off")`: rounds and counters only). GPU collection is off (INFERSCOPE_GPU=off) so that the
figures are the same on a machine with a GPU. Each figure: median over repetitions of (mode median /
plain median in the same repetition) - 1, IQR beside it.

    python3 benchmarks/bench_round_machinery.py [--reps 30] [--sizes 19,23]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, quartiles

WARMUP, CALLS = 1, 10


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def plain(n: int) -> float:
    samples = []
    for i in range(WARMUP + CALLS):
        start = time.perf_counter_ns()
        fib(n)
        if i >= WARMUP:
            samples.append((time.perf_counter_ns() - start) / 1e6)
    return statistics.median(samples)


def profiled(n: int, cpu: str | None) -> float:
    from pytest_inferscope import measure

    result = measure(fib, n, rounds=CALLS, warmup=WARMUP, cpu=cpu)
    return statistics.median(result.latency.samples_ms)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--sizes", default="19,23", help="Fibonacci arguments (19: ~0.5-0.7 ms, 23: ~4-5 ms here)")
    args = parser.parse_args(argv)
    os.environ["INFERSCOPE_GPU"] = "off"
    print("\n".join(header("bench_round_machinery", f"python {sys.version.split()[0]}")), flush=True)
    modes = {
        "plain": lambda n: plain(n),
        "default": lambda n: profiled(n, None),
        "cpu_off": lambda n: profiled(n, "off"),
    }
    print(f"reps {args.reps}; a test = {WARMUP} warm-up + {CALLS} calls\n")
    print("| body | plain per call | default | IQR | cpu off | IQR |\n| --- | --- | --- | --- | --- | --- |")
    for n in (int(x) for x in args.sizes.split(",")):
        per: dict[str, list[float]] = {m: [] for m in modes}
        for rep in range(args.reps):
            names = list(modes)
            for mode in names[rep % len(names) :] + names[: rep % len(names)]:
                per[mode].append(modes[mode](n))
        cells = [f"fib({n})", f"{statistics.median(per['plain']):.3f} ms"]
        for mode in ("default", "cpu_off"):
            ratios = [m / p - 1 for m, p in zip(per[mode], per["plain"], strict=True)]
            lo, hi = quartiles(ratios)
            cells += [f"{statistics.median(ratios):+.1%}", f"{lo:+.1%} … {hi:+.1%}"]
        print(f"| {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
