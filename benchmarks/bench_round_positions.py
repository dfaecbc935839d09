"""Per position in a collection of warm-up + 5 calls: which calls after a collection starts cost more.

On a CUDA machine: `python3 benchmarks/bench_round_positions.py [--reps 60]`. Five modes (plain calls;
the plugin's rounds with no collector, with stack sampling; native CUPTI with trace rounds, sampling
off and on), `--reps` collections each, interleaved, for one and for three warm-up calls. Prints the
median time per position (warm-up first) against the median of the plain calls after the warm-up,
and the median of each mode's calls after the warm-up (the "per call" figure of
bench_gpu_overhead.py, whose tests are 1 warm-up + 5 calls).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CALLS = 5


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=60, help="collections per mode and warm-up count")
    args = parser.parse_args(argv)
    import torch

    from benchmarks.bench_gpu_overhead import Workloads, environment
    from pytest_inferscope.collectors import Collection, CollectionOptions
    from pytest_inferscope.collectors.gpu import Choice, select_backend
    from pytest_inferscope.rounds import row_kind

    w = Workloads(torch)
    w.warm()
    fn = w.small_forward
    native = select_backend("required", forced="native")
    cpu_only = Choice(None, {"gpu": "off for this measurement"})

    def plain(warm: int) -> list[float]:
        out = []
        for _ in range(warm + CALLS):
            t0 = time.perf_counter_ns()
            fn()
            torch.cuda.synchronize()
            out.append((time.perf_counter_ns() - t0) / 1e6)
        return out

    def collection(options: CollectionOptions, choice: Choice) -> Callable[[int], list[float]]:
        def run(warm: int) -> list[float]:
            coll = Collection(options, choice, name="positions")
            coll.start()
            coll.run_rounds(fn, CALLS, warm)
            coll.stop()
            return [r["wall_ns"] / 1e6 for r in coll.rounds if not row_kind(r).after_measured]

        return run

    modes: dict[str, Callable[[int], list[float]]] = {
        "plain calls": plain,
        "rounds, no collectors": collection(CollectionOptions(cpu="off"), cpu_only),
        "rounds, sampling": collection(CollectionOptions(), cpu_only),
        "native, trace rounds, sampling off": collection(CollectionOptions(cpu="off", trace_rounds=1), native),
        "native, trace rounds, sampling": collection(CollectionOptions(trace_rounds=1), native),
    }
    env = environment(torch)
    print(f"{env['date']}; {env['gpu']}; driver {env['driver']}; torch {env['torch']}; commit {env['commit']}")
    for warm in (1, 3):
        res: dict[str, list[list[float]]] = {m: [] for m in modes}
        for run in modes.values():  # first-use costs out of the way
            run(warm)
        for _ in range(args.reps):
            for m, run in modes.items():
                res[m].append(run(warm))
        base = statistics.median(x for r in res["plain calls"] for x in r[warm:])
        print(f"\nwarm-up {warm}: median per position against the plain calls' measured median ({base:.4f} ms)")
        for m, rows in res.items():
            cols = [statistics.median(r[i] for r in rows) / base - 1 for i in range(warm + CALLS)]
            measured = statistics.median(x for r in rows for x in r[warm:]) / base - 1
            print(f"  {m:36s} " + " ".join(f"{c:+7.1%}" for c in cols) + f" | measured median {measured:+.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
