"""The example's per-step sync loop at several sizes, on a normal host and on a slowed one: the syncs' simulated saving.

`example_project/tests/test_gpu_bottlenecks.py::test_per_step_convergence_check_is_sync_bound` runs 200 steps of an
N x N matmul, a tanh and a norm read back with `.item()`, and asserts with `expect_fix` that removing the syncs saves at
least 15% of the round (simulated). Removing them lets the host run ahead, so the saving is largest where a step's host
work and GPU work are alike, and smaller on either side: a host slower than the one the size was chosen on takes a
host-heavy step further from the balance, a faster host (or a slower GPU) a GPU-heavy one.

Each run here is that loop through `measure(rounds=5, warmup=1)` (the test's marker), the process pinned to one core.
The host is slowed by a busy loop pinned to the same core: `nice10` (the loop at nice 10: the test thread gets ~9/10
of the core), `nice5` (~3/4, and it waits to be scheduled after each wait for the GPU) or `nice0` (~1/2). Printed per
run: the rounds' median, the class, the syncs' best simulated saving (expect_fix's figure) and the best what-if; then,
per size and host, the saving's minimum and median. CUDA only: it says so and exits 2 without a GPU.

    python3 benchmarks/bench_sync_balance.py [--sizes 1024,1152,1280,1536] [--reps 3] [--loads none,nice5,nice0]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, pin_to_one_core

STEPS = 200  # as the example's test
NICE = {"nice10": "10", "nice5": "5", "nice0": "0"}


def loop(torch: Any, n: int) -> Callable[[], list[float]]:
    """The example test's body at N x N (its weights scaled by 1/sqrt(N), as 1/32 at 1024)."""
    gen = torch.Generator(device="cuda").manual_seed(0)
    w = torch.randn(n, n, device="cuda", generator=gen) / n**0.5
    h0 = torch.randn(n, n, device="cuda", generator=gen)

    def body() -> list[float]:
        h, norms = h0, []
        with torch.inference_mode():
            for _ in range(STEPS):
                h = torch.tanh(h @ w)
                norms.append(h.norm().item())
        return norms

    return body


def loads_of(ap: argparse.ArgumentParser, text: str) -> list[str]:
    """`--loads` as a list: none and the keys of NICE (else the parser's error)."""
    loads = text.split(",")
    if unknown := [x for x in loads if x != "none" and x not in NICE]:
        ap.error(f"--loads: {', '.join(unknown)} is not one of none, {', '.join(NICE)}")
    return loads


def busy_loop(core: int, load: str) -> subprocess.Popen[bytes] | None:
    """A busy loop pinned to `core` at the load's niceness (none for "none")."""
    if load == "none":
        return None
    code = "while True: pass"
    hog = subprocess.Popen(["taskset", "-c", str(core), "nice", "-n", NICE[load], sys.executable, "-c", code])
    time.sleep(0.2)
    return hog


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1024,1152,1280,1536")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--loads", default="none,nice5,nice0")
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    loads = loads_of(ap, args.loads)
    import torch

    from pytest_inferscope import api_measure

    if not torch.cuda.is_available():
        print("bench_sync_balance.py needs a CUDA device (none here)")
        return 2
    print("\n".join(header("bench_sync_balance.py", f"torch {torch.__version__}, {torch.cuda.get_device_name()}")))
    core = pin_to_one_core()
    print(f"pinned to core {core}; {STEPS} steps a round, 5 rounds after 1 warm-up\n")
    print("| N | host | run | round ms | class | syncs' saving | best what-if |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    saved: dict[tuple[int, str], list[float]] = {}
    for rep in range(args.reps):
        for load in loads:
            hog = busy_loop(core, load)
            try:
                for n in sizes:
                    a = (r := api_measure.measure(loop(torch, n), rounds=5, warmup=1)).analysis
                    sync = max((w.saved_fraction for w in a.whatif if w.bottleneck == "sync_bound"), default=0.0)
                    saved.setdefault((n, load), []).append(sync)
                    best = f"{a.whatif[0].change[:48]}: {a.whatif[0].saved_fraction:.1%}" if a.whatif else "none"
                    median = statistics.median(r.latency.samples_ms)
                    print(f"| {n} | {load} | {rep} | {median:.2f} | {a.bottleneck} ({a.confidence:.2f}) | {sync:.1%} | "
                          f"{best} |", flush=True)  # fmt: skip
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    print("\n| N | host | runs | syncs' saving: min | median | under 15% |")
    print("| --- | --- | --- | --- | --- | --- |")
    for (n, load), xs in sorted(saved.items()):
        under = sum(x < 0.15 for x in xs)
        print(f"| {n} | {load} | {len(xs)} | {min(xs):.1%} | {statistics.median(xs):.1%} | {under} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
