"""What the round machinery costs a CPU-only, pure-Python body per call (issue 16), through the public API.

The body is a recursive Fibonacci (no torch, no GPU): all Python, so anything the plugin does inside
the round's time, or that disturbs the body's caches between rounds, shows. `--body pipeline`: an image
preprocessing pipeline instead (PIL decode of in-memory PNGs, resize, numpy normalise and stack; numpy
alone when PIL is missing), which allocates many objects: the run also counts, per call, the garbage
collections (gc.callbacks) that ran inside the timed calls in each mode, since a plugin that allocates
between rounds moves the collector's collections out of (or into) the calls it times. `--body launch`: N in-place adds
on a 16-element torch tensor, one torch thread (each op lets the GIL go, as a CUDA launch does: a launch-like body on
a CPU; needs torch). Per "test": 1 warm-up + 10
calls; the plugin's figure is the per-round latency `measure()` records for the measured rounds, the
plain figure the same calls timed with perf_counter, its loop called from a fresh chunk of CPython's frame
stack as the plugin's rounds are (pytest_inferscope/stackbase.py: otherwise the recursion crosses the end of
a chunk at other places in the two). Modes, interleaved in a rotating order so drift hits them alike:
`default` (`measure()` with default settings: stack sampling every 10 ms), `cpu_off` (`measure(cpu="off")`:
rounds and counters only); `--modes` chooses among these and `thread`, `pending` and `signal` (the default settings
with `INFERSCOPE_SAMPLER` set: the stack sampled by a thread, in the test thread by the clock's pending calls, or in the
test thread by a signal before CPython 3.13; the default is `auto`: pending where the clock in C is built). GPU
collection is off (INFERSCOPE_GPU=off) so that the figures are the same on a machine with a GPU. Each figure: median
over repetitions of (mode median / plain median in the same repetition) - 1, its IQR and a 95% bootstrap interval of
the median beside it.
`--pin`: the whole process on one core (the sampler thread shares it with the body, as on a busy machine),
so that the scheduler moving the body between cores is not part of the noise.

    python3 benchmarks/bench_round_machinery.py [--reps 30] [--sizes 19,23] [--pin]
    python3 benchmarks/bench_round_machinery.py --processes 20 --reps 40 --pin   # the processes as the samples
    python3 benchmarks/bench_round_machinery.py --body pipeline [--reps 30] [--sizes 16,64]   # images per call
    python3 benchmarks/bench_round_machinery.py --body launch --modes thread,pending,signal,cpu_off --reps 100
"""

from __future__ import annotations

import argparse
import gc
import io
import json
import os
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from collections.abc import Callable
from typing import Any

from benchmarks._common import bootstrap_median_ci, child_json, header, pin_to_one_core, quartiles
from pytest_inferscope.stackbase import fresh_chunk

WARMUP, CALLS = 1, 10
MODES = ["default", "cpu_off"]  # against plain; --modes sets them


def fib(n: int) -> int:
    return n if n < 2 else fib(n - 1) + fib(n - 2)


def fib_of(n: int) -> Callable[[], int]:
    """`fib(n)` as a body with no arguments (a Python function, called as a test body is)."""
    return lambda: fib(n)


def make_launch(n: int) -> Callable[[], Any]:
    """n in-place adds on a 16-element tensor, one torch thread: each op lets the GIL go and takes it back."""
    import torch

    torch.set_num_threads(1)
    x = torch.zeros(16)

    def launch() -> None:
        for _ in range(n):
            x.add_(1.0)

    return launch


def make_pipeline(n: int) -> Callable[[], Any]:
    """n 224x224 RGB images, PNG-encoded in memory, through decode, resize to 112x112, normalise, stack."""
    import numpy as np

    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 255, (224, 224, 3), dtype=np.uint8) for _ in range(n)]
    mean, std = np.array([0.485, 0.456, 0.406]), np.array([0.229, 0.224, 0.225])
    try:
        from PIL import Image
    except ImportError:  # numpy alone: the same shape of work, without the codec

        def one(a: Any) -> Any:
            return ((a[::2, ::2].astype(np.float32) / 255.0 - mean) / std).transpose(2, 0, 1)

        return lambda: np.stack([one(a.copy()) for a in pixels])
    encoded = []
    for a in pixels:
        buf = io.BytesIO()
        Image.fromarray(a).save(buf, format="PNG")
        encoded.append(buf.getvalue())

    def decode(b: bytes) -> Any:
        img = Image.open(io.BytesIO(b)).convert("RGB").resize((112, 112))
        return ((np.asarray(img, dtype=np.float32) / 255.0 - mean) / std).transpose(2, 0, 1)

    return lambda: np.stack([decode(b) for b in encoded])


class GcInCalls:
    """Counts the garbage collections that start while a timed call runs (`gc.callbacks`)."""

    def __init__(self) -> None:
        self.inside = False
        self.counts = [0, 0, 0]
        gc.callbacks.append(self._seen)

    def _seen(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and self.inside:
            self.counts[info["generation"]] += 1

    def wrap(self, body: Callable[[], Any]) -> Callable[[], Any]:
        def timed() -> Any:
            self.inside = True
            try:
                return body()
            finally:
                self.inside = False

        return timed

    def take(self) -> list[int]:
        out, self.counts = self.counts, [0, 0, 0]
        return out


def plain(body: Callable[[], Any]) -> float:
    """The calls timed as the plugin's rounds time them: the call's result is let go after its time is taken
    (before the next call), not inside it. Letting go of the pipeline's 2.4 MB output inside the time made
    plain 4.6% slower than the plugin's rounds (the free gives memory back to the system)."""
    samples = []
    for i in range(WARMUP + CALLS):
        start = time.perf_counter_ns()
        out = body()
        end = time.perf_counter_ns()
        del out
        if i >= WARMUP:
            samples.append((end - start) / 1e6)
    return statistics.median(samples)


def profiled(body: Callable[[], Any], cpu: str | None, sampler: str | None = None) -> float:
    from pytest_inferscope import measure

    if sampler is not None:
        os.environ["INFERSCOPE_SAMPLER"] = sampler
    try:
        result = measure(body, rounds=CALLS, warmup=WARMUP, cpu=cpu)
    finally:
        if sampler is not None:
            del os.environ["INFERSCOPE_SAMPLER"]
    return statistics.median(result.latency.samples_ms)


def run_sizes(args: argparse.Namespace, sizes: str) -> dict[str, dict[str, Any]]:
    """Each size's plain median (ms), the modes' per-repetition ratios and the collections in the calls."""
    gcs = GcInCalls()
    modes = {
        "plain": lambda body: fresh_chunk(plain, body),
        "default": lambda body: profiled(body, None),
        "thread": lambda body: profiled(body, None, "thread"),
        "pending": lambda body: profiled(body, None, "pending"),
        "signal": lambda body: profiled(body, None, "signal"),
        "cpu_off": lambda body: profiled(body, "off"),
    }
    modes = {m: f for m, f in modes.items() if m == "plain" or m in MODES}
    out: dict[str, dict[str, Any]] = {}
    for n in (int(x) for x in sizes.split(",")):
        call = {"fib": fib_of, "pipeline": make_pipeline, "launch": make_launch}[args.body](n)
        body = gcs.wrap(call)
        per: dict[str, list[float]] = {m: [] for m in modes}
        collected: dict[str, list[int]] = {m: [0, 0, 0] for m in modes}
        for rep in range(args.reps):
            names = list(modes)
            for mode in names[rep % len(names) :] + names[: rep % len(names)]:
                gcs.take()
                per[mode].append(modes[mode](body))
                collected[mode] = [a + b for a, b in zip(collected[mode], gcs.take(), strict=True)]
        label = {"fib": f"fib({n})", "pipeline": f"pipeline({n} images)", "launch": f"launch-like({n} torch ops)"}[
            args.body
        ]
        out[label] = {
            "plain_ms": statistics.median(per["plain"]),
            "ratios": {m: [x / p - 1 for x, p in zip(per[m], per["plain"], strict=True)] for m in MODES},
            "collected": collected,
        }
    return out


def over_processes(args: argparse.Namespace, sizes: str) -> int:
    """`--processes K`: K fresh processes one after another, each its own repetitions; a process's figure is the
    median of its repetitions, and the table gives the median over processes, a 95% bootstrap interval of it, and
    the range. Each process lays out its memory anew (address randomisation, hash seeds), which moved one process's
    median by a few per cent against the next on the 2-core VM: the processes are the samples."""
    child = [sys.executable, str(Path(__file__).resolve()), "--child", "--reps", str(args.reps), "--sizes", sizes]
    child += ["--body", args.body, "--modes", ",".join(MODES)] + (["--pin"] if args.pin else [])
    got: list[dict[str, dict[str, Any]]] = []
    for k in range(args.processes):
        got.append(child_json(child))
        figures = "; ".join(
            f"{label} " + " ".join(f"{m} {statistics.median(r['ratios'][m]):+.1%}" for m in MODES)
            for label, r in got[-1].items()
        )
        print(f"process {k + 1}/{args.processes}: {figures}", flush=True)
    print(f"\n{args.processes} processes of {args.reps} repetitions; a test = {WARMUP} warm-up + {CALLS} calls\n")
    print("| body | plain per call | " + " | ".join(f"{m}, median of processes | 95% CI | range" for m in MODES) + " |")
    print("| --- " * (2 + 3 * len(MODES)) + "|")
    for label in got[0]:
        cells = [label, f"{statistics.median(g[label]['plain_ms'] for g in got):.3f} ms"]
        for mode in MODES:
            meds = [statistics.median(g[label]["ratios"][mode]) for g in got]
            lo, hi = bootstrap_median_ci(meds)
            cells += [
                f"{statistics.median(meds):+.1%}",
                f"{lo:+.1%} … {hi:+.1%}",
                f"{min(meds):+.1%} … {max(meds):+.1%}",
            ]
        print(f"| {' | '.join(cells)} |", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=30)
    parser.add_argument("--sizes", default=None, help="fib arguments (default 19,23: ~0.5-0.7 and ~4-5 ms here) "
                        "or images per call with --body pipeline (default 16,64), torch ops with --body launch "
                        "(default 1500)")  # fmt: skip
    parser.add_argument("--body", choices=("fib", "pipeline", "launch"), default="fib")
    parser.add_argument("--pin", action="store_true", help="run the whole process on one core")
    parser.add_argument("--processes", type=int, default=0, help="K fresh processes, each --reps repetitions")
    parser.add_argument("--modes", default="default,cpu_off",
                        help="against plain: default, thread, pending, signal, cpu_off")  # fmt: skip
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    MODES[:] = [m for m in args.modes.split(",") if m]
    if not MODES or set(MODES) - {"default", "thread", "pending", "signal", "cpu_off"}:
        parser.error(
            f"--modes {args.modes!r}: give one or more of default, thread, pending, signal, cpu_off, comma-separated"
        )
    os.environ["INFERSCOPE_GPU"] = "off"
    sizes = args.sizes or {"fib": "19,23", "pipeline": "16,64", "launch": "1500"}[args.body]
    if args.child:
        if args.pin:
            pin_to_one_core()
        print(json.dumps(run_sizes(args, sizes)))
        return 0
    print("\n".join(header("bench_round_machinery", f"python {sys.version.split()[0]}")), flush=True)
    if args.processes:
        return over_processes(args, sizes)
    if args.pin:
        print(f"pinned to core {pin_to_one_core()}")
    print(f"reps {args.reps}; a test = {WARMUP} warm-up + {CALLS} calls\n")
    print("| body | plain per call | " + " | ".join(f"{m} | IQR | 95% CI" for m in MODES)
          + " | collections in the calls, gen 0/1/2 per call: plain, " + ", ".join(MODES) + " |")  # fmt: skip
    print("| --- " * (3 + 3 * len(MODES)) + "|")
    for label, r in run_sizes(args, sizes).items():
        cells = [label, f"{r['plain_ms']:.3f} ms"]
        for mode in MODES:
            ratios = r["ratios"][mode]
            lo, hi = quartiles(ratios)
            clo, chi = bootstrap_median_ci(ratios)
            cells += [f"{statistics.median(ratios):+.1%}", f"{lo:+.1%} … {hi:+.1%}", f"{clo:+.1%} … {chi:+.1%}"]
        calls = args.reps * (WARMUP + CALLS)
        cells.append(", ".join("/".join(f"{c / calls:.2f}" for c in r["collected"][m]) for m in r["collected"]))
        print(f"| {' | '.join(cells)} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
