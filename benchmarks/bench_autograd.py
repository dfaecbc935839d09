"""What autograd left on costs a small CPU model's call, and what the plugin's count of it costs (rules_autograd.py).

Modes, each a block of `--calls` calls, put in a random order every repetition (interleaved):

- `grad`: the model called as a plain test body would call it, grad mode on and the parameters requiring grad (autograd
  records every op and saves tensors for a backward that never comes);
- `no_grad`: under `torch.no_grad()`;
- `inference`: under `torch.inference_mode()`.

And, apart, what the count costs a measured round (`collectors/autograd.py`: autograd's node counter read before and
after the round's clock), µs per round, and the nodes one `grad` call makes.

Models: a 4-layer MLP (256 wide) and a tiny conv net (3 conv layers of 16 channels on 3x32x32), batch 1 and 8, torch
on one thread and the process pinned to one core.

    python3 benchmarks/bench_autograd.py [--reps 30] [--calls 50] [--quick]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch
from _common import header, pin_to_one_core

from pytest_inferscope.collectors.autograd import AutogradNodes, node_counter


def mlp() -> torch.nn.Module:
    layers: list[torch.nn.Module] = []
    for _ in range(4):
        layers += [torch.nn.Linear(256, 256), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers)


def convnet() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(16, 10),
    )  # fmt: skip


def block(call: Callable[[], object], calls: int) -> float:
    """µs per call over a block of `calls` calls."""
    t = time.perf_counter_ns()
    for _ in range(calls):
        call()
    return (time.perf_counter_ns() - t) / calls / 1e3


def modes(model: torch.nn.Module, x: torch.Tensor) -> dict[str, Callable[[], object]]:
    def no_grad() -> object:
        with torch.no_grad():
            return model(x)

    def inference() -> object:
        with torch.inference_mode():
            return model(x)

    return {"grad": lambda: model(x), "no_grad": no_grad, "inference": inference}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=30)
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--quick", action="store_true")
    a = p.parse_args()
    if a.quick:
        a.reps, a.calls = 5, 10
    print("\n".join(header("autograd left on: its cost and the check's", f"torch {torch.__version__}")))
    core = pin_to_one_core()
    torch.set_num_threads(1)
    print(f"pinned to core {core}, torch threads 1, {a.reps} repetitions of {a.calls} calls per mode\n")
    rng = random.Random(0)
    print("| model | batch | grad (µs/call) | no_grad | inference | grad / inference | autograd nodes a call |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for name, make, shape in (("MLP 4x256", mlp, (256,)), ("conv 3x16", convnet, (3, 32, 32))):
        for batch in (1, 8):
            torch.manual_seed(0)
            model, x = make().eval(), torch.randn(batch, *shape)
            fns = modes(model, x)
            for fn in fns.values():
                block(fn, a.calls)  # warm
            times: dict[str, list[float]] = {k: [] for k in fns}
            for _ in range(a.reps):
                order = list(fns)
                rng.shuffle(order)
                for k in order:
                    times[k].append(block(fns[k], a.calls))
            med = {k: statistics.median(v) for k, v in times.items()}
            counter = node_counter()
            assert counter is not None
            nodes = AutogradNodes(counter)
            nodes.enter()
            model(x)
            nodes.exit()
            print(
                f"| {name} | {batch} | {med['grad']:.1f} | {med['no_grad']:.1f} | {med['inference']:.1f} | "
                f"{med['grad'] / med['inference']:.2f} | {nodes.nodes} nodes |"
            )
    counter = node_counter()
    assert counter is not None
    nodes, off = AutogradNodes(counter), []
    for _ in range(a.reps * 100):
        t = time.perf_counter_ns()
        nodes.enter()
        nodes.exit()
        off.append((time.perf_counter_ns() - t) / 1e3)
    print(f"\nthe count a measured round pays (enter + exit, outside its clock): "
          f"median {statistics.median(off):.2f} µs, min {min(off):.2f} µs")  # fmt: skip


if __name__ == "__main__":
    main()
