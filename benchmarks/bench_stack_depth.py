"""Whether how deep a body is called moves its latency: CPython's frame-stack chunks (issue 16).

CPython 3.11-3.14 frees a chunk of its frame stack as the first frame in it returns, so a body whose calls go up and
down across a chunk's end allocates and frees a chunk at every crossing (python/cpython#142183), and where that end
falls in the body depends on the depth it is called from. This sweeps that depth: the body is called from 0 to
`--depths` frames deeper, in a plain loop (each call timed, the median of `--calls`) and through `measure()`
(1 warm-up + `--calls` rounds, `cpu="off"`, the median round), both at every depth, and each depth's figure is the
fastest of `--sweeps` sweeps (the machine's noise only adds time). It prints the typical figure and the depths whose
figure is over 1.5 times it.

    python3 benchmarks/bench_stack_depth.py [--bodies fib,torch] [--depths 300] [--step 2] [--sweeps 3] [--quick]

`fib`: a recursive Fibonacci, fib(15). `torch` (when torch is installed): a nested `nn.Sequential` of small Linear +
ReLU blocks, three levels of nesting, on the CPU with one thread.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header


def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def _torch_body() -> Callable[[], Any]:
    import torch
    from torch import nn

    torch.set_num_threads(1)

    def block(level: int) -> nn.Module:
        if level == 0:
            return nn.Sequential(*[nn.Sequential(nn.Linear(8, 8), nn.ReLU()) for _ in range(4)])
        return nn.Sequential(block(level - 1), block(level - 1))

    model = nn.Sequential(block(3)).eval()
    x = torch.randn(1, 8)

    def body() -> Any:
        with torch.no_grad():
            return model(x)

    return body


BODIES: dict[str, Callable[[], Callable[[], Any]]] = {"fib": lambda: lambda: _fib(15), "torch": _torch_body}


def _at_depth(depth: int, fn: Callable[[], float]) -> float:
    return fn() if depth == 0 else _at_depth(depth - 1, fn)


def plain(body: Callable[[], Any], calls: int) -> float:
    """Median µs of `calls` calls after one."""
    body()
    out = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        body()
        out.append(time.perf_counter_ns() - t)
    return statistics.median(out) / 1e3


def measured(body: Callable[[], Any], calls: int) -> float:
    from pytest_inferscope import measure

    result = measure(body, rounds=calls, warmup=1, cpu="off", gpu_rounds="measured")
    return statistics.median(result.latency.samples_ms) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bodies", default="fib,torch")
    parser.add_argument("--depths", type=int, default=300)
    parser.add_argument("--step", type=int, default=2)
    parser.add_argument("--sweeps", type=int, default=3)
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fib only, 150 depths, one sweep: a smoke test")
    args = parser.parse_args()
    if args.quick:
        args.bodies, args.depths, args.step, args.sweeps = "fib", 150, 3, 1
    sys.setrecursionlimit(max(sys.getrecursionlimit(), args.depths + 1000))
    print("\n".join(header("bench_stack_depth", f"python {sys.version.split()[0]}")), flush=True)
    depths = list(range(0, args.depths, args.step))
    for name in args.bodies.split(","):
        try:
            body = BODIES[name]()
        except ImportError as exc:
            print(f"## {name}: skipped ({exc})")
            continue
        modes: dict[str, Callable[[Callable[[], Any], int], float]] = {"plain": plain, "measure()": measured}
        best: dict[str, dict[int, float]] = {m: {} for m in modes}
        for _ in range(args.sweeps):
            for d in depths:
                for mode, fn in modes.items():
                    us = _at_depth(d, functools.partial(fn, body, args.calls))
                    best[mode][d] = min(best[mode].get(d, us), us)
        print(f"## {name}: depths 0-{depths[-1]} step {args.step}, fastest of {args.sweeps} sweeps")
        for mode, by_depth in best.items():
            typical = statistics.median(by_depth.values())
            slow = [f"{d} ({us / typical:.1f}x)" for d, us in by_depth.items() if us > 1.5 * typical]
            print(f"{mode:10} typical {typical:8.1f} us, slowest {max(by_depth.values()):8.1f} us; "
                  f"over 1.5x at: {', '.join(slow) or 'none'}")  # fmt: skip


if __name__ == "__main__":
    main()
