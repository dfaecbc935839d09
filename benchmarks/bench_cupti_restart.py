"""The first rounds after CUPTI starts again (issue 16): how much slower than the rounds before, and what absorbs it.

Lean mode times the measured rounds without CUPTI and starts it again after them; the first round after a
start ran 15-20% slower than the next on ViT-B/16 and ResNet-50 (H100), and was thrown away as a settling
round. This script starts the project's native collector as the schedule does (every kind, launch calls
off) after a CUPTI-recorded warm-up and 6 plain rounds, then runs what a variant asks, then times 3 rounds
(p1..p3) against the plain rounds' median:

  none          nothing (the first round pays the cost)
  sync          cuCtxSynchronize only
  torch-kernel  one tiny torch kernel, waited for
  memset        a 256-byte cuMemAlloc + cuMemsetD8 + cuCtxSynchronize + cuMemFree (what `DeviceSync.prime` does)
  memset-async  the same with cuMemsetD8Async on the null stream
  two-kernels   two tiny torch kernels of different functions

The variants rotate every repetition; each figure is the median over repetitions (IQR beside it), and
"start+prime" is the time from the collector's start to the end of the variant's work.

    python3 benchmarks/bench_cupti_restart.py [--reps 8] [--models vit_b16,resnet50]     # on a CUDA machine
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header


def variants(torch: Any, cuda: Any) -> dict[str, Callable[[], Any] | None]:
    def memset(async_: bool) -> Callable[[], None]:
        def run() -> None:
            p = ctypes.c_uint64(0)
            assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(256)) == 0
            if async_:
                assert cuda.cuMemsetD8Async(p, ctypes.c_ubyte(0), ctypes.c_size_t(256), None) == 0
            else:
                assert cuda.cuMemsetD8_v2(p, ctypes.c_ubyte(0), ctypes.c_size_t(256)) == 0
            assert cuda.cuCtxSynchronize() == 0
            assert cuda.cuMemFree_v2(p) == 0

        return run

    def kernels(n: int) -> Callable[[], None]:
        def run() -> None:
            torch.empty(1, device="cuda").add_(1)
            if n > 1:
                torch.empty(4, device="cuda").mul_(2)
            torch.cuda.synchronize()

        return run

    return {
        "none": None,
        "sync": lambda: cuda.cuCtxSynchronize(),
        "torch-kernel": kernels(1),
        "memset": memset(False),
        "memset-async": memset(True),
        "two-kernels": kernels(2),
    }


def one(call: Callable[[], Any], prime: Callable[[], Any] | None, timed: Callable[[], float]
        ) -> tuple[list[float], float]:  # fmt: skip
    """p1..p3 against the plain rounds' median, and start+prime in ms."""
    from pytest_inferscope.collectors import gpu_native

    warm = gpu_native.create()
    warm.start()
    warm.set_api_records(False)
    timed()  # the warm-up, recorded
    warm.stop()
    warm.drain()
    plain = statistics.median(timed() for _ in range(6))
    coll = gpu_native.create()
    t0 = time.perf_counter_ns()
    coll.start()
    coll.set_api_records(False)
    if prime is not None:
        prime()
    t1 = time.perf_counter_ns()
    after = [timed() / plain - 1 for _ in range(3)]
    coll.stop()
    coll.drain()
    return after, (t1 - t0) / 1e6


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--models", default="vit_b16,resnet50")
    args = ap.parse_args(argv)
    import torch

    from benchmarks.bench_real_models import build

    if not torch.cuda.is_available():
        print("bench_cupti_restart.py needs a CUDA device (none here)")
        return 2
    print("\n".join(header("bench_cupti_restart.py", f"torch {torch.__version__}")))
    cuda = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    for name in args.models.split(","):
        call = build(name, "cuda", False)

        def timed(call: Callable[[], Any] = call) -> float:
            t = time.perf_counter_ns()
            call()
            torch.cuda.synchronize()
            return (time.perf_counter_ns() - t) / 1e6

        for _ in range(3):
            timed()
        ways = variants(torch, cuda)
        rows: dict[str, list[tuple[list[float], float]]] = {v: [] for v in ways}
        names = list(ways)
        for rep in range(args.reps):
            for v in names[rep % len(names) :] + names[: rep % len(names)]:
                rows[v].append(one(call, ways[v], timed))
        print(f"\n## {name} ({args.reps} repetitions, rotated): rounds after the start against the plain rounds")
        print("| variant | p1 | p2 | p3 | start+prime ms |")
        print("| --- | --- | --- | --- | --- |")
        for v, out in rows.items():
            cells = []
            for i in range(3):
                xs = sorted(o[0][i] for o in out)
                cells.append(f"{statistics.median(xs):+.1%} [{xs[len(xs) // 4]:+.0%}, {xs[3 * len(xs) // 4]:+.0%}]")
            print(f"| {v} | {' | '.join(cells)} | {statistics.median(o[1] for o in out):.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
