"""Whether a pure-Python body itself runs slower inside the plugin's rounds than in a plain loop (issue 16).

`bench_round_machinery.py` compares the latency the rounds record with plain calls. This one times the body from
inside (a clock read around `fib(n)` in the body), so the round's own time is left out. It compares, in modes put in
a random order each repetition:

- `plain`: a plain loop of 1 warm-up + 10 calls, from a fresh chunk of the frame stack, as the rounds run;
- `in_collection`: the same plain loop inside a started collection (`cpu="off"`, no GPU collection), no rounds;
- `rounds`: the collection's rounds (`Collection.run_rounds`), as `measure(cpu="off")` runs them;
- `minimal_end`: the same rounds with the round's end cut down to recording its span (no counters, no device
  look, no clock pair, no row): what is left of the harness between calls.

Each process is pinned to one core and runs `--reps` repetitions; the processes (`--processes`, fresh ones, each
laying out its memory anew) are the samples: the table gives, per mode, the median over processes of each
process's median ratio to `plain`, a 95% bootstrap interval and the range.

    python3 benchmarks/bench_round_body.py [--size 19] [--reps 30] [--processes 12]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import bootstrap_median_ci, child_json, header, pin_to_one_core
from benchmarks.bench_round_machinery import fib

MODES = ("plain", "in_collection", "rounds", "minimal_end")
CALLS = 11  # 1 warm-up + 10


def child(size: int, reps: int) -> dict[str, float]:
    """One process: each mode's median ratio (the body's own time, median of its calls after the first) to plain."""
    from pytest_inferscope.api import _options, standalone_settings
    from pytest_inferscope.collectors import Collection
    from pytest_inferscope.stackbase import fresh_chunk

    pin_to_one_core()
    options = _options(standalone_settings(), "off")
    inside: list[int] = []

    def body() -> int:
        t = time.perf_counter_ns()
        out = fib(size)
        inside.append(time.perf_counter_ns() - t)
        return out

    def plain() -> None:
        for _ in range(CALLS):
            out = body()
            del out

    def minimal_end(self: Collection, index: int, kind: Any, raised: bool, start: int, before: Any, end: int) -> None:
        self._ends.append((index, 0, start, end, end, 0, 0))

    def run(mode: str) -> float:
        inside.clear()
        if mode == "plain":
            fresh_chunk(plain)
            return statistics.median(inside[1:])
        coll = Collection(options, None, name="bench_round_body")
        real_end = Collection._end_round
        if mode == "minimal_end":
            Collection._end_round = minimal_end  # type: ignore[method-assign,assignment]  # here only
        try:
            coll.start()
            if mode == "in_collection":
                fresh_chunk(plain)
            else:
                coll.run_rounds(body, CALLS - 1, 1)
            coll.stop()
        finally:
            Collection._end_round = real_end  # type: ignore[method-assign]
        return statistics.median(inside[1:])

    got: dict[str, list[float]] = {m: [] for m in MODES}
    for _ in range(reps):
        order = list(MODES)
        random.shuffle(order)
        for mode in order:
            got[mode].append(run(mode))
    ratios = {m: [a / b - 1 for a, b in zip(got[m], got["plain"], strict=True)] for m in MODES[1:]}
    return {"plain_ms": statistics.median(got["plain"]) / 1e6, **{m: statistics.median(r) for m, r in ratios.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=19, help="fib's argument (19: ~0.5-1 ms)")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--processes", type=int, default=12)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    os.environ["INFERSCOPE_GPU"] = "off"
    if args.child:
        print(json.dumps(child(args.size, args.reps)))
        return 0
    print("\n".join(header("bench_round_body", f"python {sys.version.split()[0]}")), flush=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--size", str(args.size), "--reps", str(args.reps)]
    runs: list[dict[str, float]] = []
    for k in range(args.processes):
        runs.append(child_json(cmd))
        print(
            f"process {k + 1}/{args.processes}: " + ", ".join(f"{m} {runs[-1][m]:+.2%}" for m in MODES[1:]), flush=True
        )
    plain_ms = statistics.median(r["plain_ms"] for r in runs)
    print(f"\nfib({args.size}), plain {plain_ms:.3f} ms a call; {args.processes} processes of {args.reps} repetitions, "
          "pinned; the body timed from inside, against plain\n")  # fmt: skip
    print("| mode | median of processes | 95% CI | range |\n| --- | --- | --- | --- |")
    show: Callable[[float], str] = "{:+.2%}".format
    for mode in MODES[1:]:
        meds = [r[mode] for r in runs]
        lo, hi = bootstrap_median_ci(meds)
        spread = f"{show(lo)} … {show(hi)} | {show(min(meds))} … {show(max(meds))}"
        cells = [mode, show(statistics.median(meds)), spread]
        print(f"| {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
