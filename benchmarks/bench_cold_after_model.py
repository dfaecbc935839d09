"""What a test's post-processing and its rounds' ends pay cold, right after a model's calls (issue 16).

A profiled test analyses its trace right after its rounds, and reads its counters right after each round's body:
both run after the model's code, not after themselves, as a benchmark repeating them back to back would. This
script records `--tests` traces of the model through `measure()` (1 warm-up + 10 calls, the plugin's defaults),
then, in repetitions with the order rotated:

  main    11 calls of the model (each synchronised), then `judge()` of a trace in the calling thread, as a test does
  pinned  the same calls, then the same `judge()` handed to a worker thread pinned to another core, which ran every
          earlier analysis (its core's caches are not the model's: does the analysis run warmer there?)
  free    the same, to a worker thread the scheduler places
  warm    `judge()` right after another `judge()` of the same trace (what `bench_analysis.py` times)

Printed: each mode's median, p10 and p90 over repetitions, from the caller's side (the hand-over included) and, for
the workers, inside them. Then what each system call of `Counters.now` (a round's end: `getrusage`, two `pread`s of
procfs, the thread's CPU clock) costs back to back and right after one call of the model.

    python3 benchmarks/bench_cold_after_model.py --model vit_b16 [--tests 6] [--reps 8]   # on a CUDA machine
    python3 benchmarks/bench_cold_after_model.py --cpu-smoke                              # the script, on the CPU
"""

from __future__ import annotations

import argparse
import os
import queue
import resource
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

MODES = ("main", "pinned", "free", "warm")


class Worker:
    """A thread that runs `judge()` of the traces it is handed, on `cpu` when given; returns each one's ns."""

    def __init__(self, judge: Callable[[Any], Any], cpu: int | None) -> None:
        self.jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.done: queue.SimpleQueue[int] = queue.SimpleQueue()
        self.judge, self.cpu = judge, cpu
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        if self.cpu is not None:
            os.sched_setaffinity(threading.get_native_id(), {self.cpu})
        while True:
            raw = self.jobs.get()
            t = time.perf_counter_ns()
            self.judge(raw)
            self.done.put(time.perf_counter_ns() - t)

    def __call__(self, raw: Any) -> int:
        self.jobs.put(raw)
        return self.done.get()


def record(call: Callable[[], Any], tests: int, out: Path) -> list[Any]:
    """`tests` traces of `call` through `measure()`, each test's report folder in `out`; the traces loaded."""
    from pytest_inferscope.api import measure
    from pytest_inferscope.events import RawTrace

    for i in range(tests):
        measure(call, rounds=10, warmup=1, name=f"t{i}", report_dir=out)
    return [RawTrace.load(p) for p in sorted(out.rglob("raw.npz"))]


def spread(values: list[float]) -> str:
    v = sorted(values)
    return f"median {statistics.median(v):.2f} ms  p10 {v[len(v) // 10]:.2f}  p90 {v[9 * len(v) // 10]:.2f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--model", default="vit_b16")
    p.add_argument("--tests", type=int, default=6, help="traces recorded, each analysed in every repetition")
    p.add_argument("--reps", type=int, default=8)
    p.add_argument("--cpu-smoke", action="store_true", help="a small model on the CPU, to check the script")
    args = p.parse_args()
    from bench_sampler_signal import model_call

    from pytest_inferscope.checks import Plan
    from pytest_inferscope.collectors.memory import Counters, ProcFiles
    from pytest_inferscope.postprocess import judge

    call, sync = model_call("bench_cold_after_model", args.model, args.cpu_smoke)
    with tempfile.TemporaryDirectory() as tmp:
        raws = record(call, args.tests, Path(tmp))
    plan = Plan(nodeid="x", rounds=10, warmup=1)

    def analyse(raw: Any) -> None:
        judge(raw, plan)

    def model() -> None:
        for _ in range(11):
            call()
            sync()

    cpus = sorted(os.sched_getaffinity(0))
    workers = {"pinned": Worker(analyse, cpus[-1] if len(cpus) > 1 else None), "free": Worker(analyse, None)}
    for raw in raws:  # every path once, untimed
        analyse(raw)
        for w in workers.values():
            w(raw)
    caller: dict[str, list[float]] = {m: [] for m in MODES}
    inside: dict[str, list[float]] = {m: [] for m in workers}
    for rep in range(args.reps):
        for raw in raws:
            for mode in MODES[rep % len(MODES) :] + MODES[: rep % len(MODES)]:
                if mode == "warm":
                    analyse(raw)
                else:
                    model()
                t = time.perf_counter_ns()
                if mode in workers:
                    inside[mode].append(workers[mode](raw) / 1e6)
                else:
                    analyse(raw)
                caller[mode].append((time.perf_counter_ns() - t) / 1e6)
    print(f"{len(raws)} traces, {args.reps} repetitions; pinned worker on CPU {cpus[-1]} of {len(cpus)}")
    for mode in MODES:
        extra = f"  (inside the worker: {spread(inside[mode])})" if mode in inside else ""
        print(f"judge {mode:6s} {spread(caller[mode])}{extra}")
    print(f"threads in the process: {len(os.listdir('/proc/self/task'))}")
    proc = ProcFiles()
    parts: dict[str, Callable[[], Any]] = {
        "getrusage(SELF)": lambda: resource.getrusage(resource.RUSAGE_SELF),
        "schedstat pread": proc.runqueue_ns,
        "statm pread": proc.rss,
        "thread_time_ns": time.thread_time_ns,
        "Counters.now": lambda: Counters.now(proc),
    }
    for after_call in (False, True):
        cost: dict[str, list[int]] = {k: [] for k in parts}
        for _ in range(20):
            for name, read in parts.items():
                if after_call:
                    call()
                    sync()
                t = time.perf_counter_ns()
                read()
                cost[name].append(time.perf_counter_ns() - t)
        where = "right after a call" if after_call else "back to back"
        print(f"{where}: " + ", ".join(f"{k} {statistics.median(v) / 1e3:.1f} µs" for k, v in cost.items()))
    proc.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
