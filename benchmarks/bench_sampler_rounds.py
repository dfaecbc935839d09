"""What each stack sampler costs a test outside its measured calls, and the rounds after them (issue 16).

One process, one model (`bench_real_models.build`), `measure(rounds=10, warmup=1)` with each sampler in turn
(`INFERSCOPE_SAMPLER`: `thread`, `signal`), alternated every repetition so a host's slow spell falls on both.
Per test it prints the warm-up's wall against the measured rounds' median (a warm-up out of step stands for
neither the profile nor the trace round: `collectors/schedule.py`), the rounds after the measured ones, the whole
test (the call to `measure()` to its result) and what the result says the plugin added (`added`: outside the
rounds, analysis). Then the medians per sampler, and the pairs: how often the signal's whole test was the shorter.

    python3 benchmarks/bench_sampler_rounds.py --model vit_b16 --reps 24
    python3 benchmarks/bench_sampler_rounds.py --cpu-smoke --reps 2   # a small MLP on the CPU: checks the script only
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import header
from bench_real_models import build

SAMPLERS = ("thread", "signal")


def one_test(call: Any, sampler: str, seen: dict[str, Any]) -> dict[str, Any]:
    """One `measure()` with `sampler`; its rounds read from the collection `seen` kept at its stop."""
    from pytest_inferscope import measure

    os.environ["INFERSCOPE_SAMPLER"] = sampler
    try:
        began = time.perf_counter_ns()
        result = measure(call, rounds=10, warmup=1, name=f"sampler_{sampler}")
        whole = (time.perf_counter_ns() - began) / 1e6
    finally:
        del os.environ["INFERSCOPE_SAMPLER"]
    rounds = seen["collection"].rounds
    warm = [r["wall_ns"] / 1e6 for r in rounds if r["kind"] == "WARMUP"]
    measured = [r["wall_ns"] / 1e6 for r in rounds if r["kind"] == "MEASURED"]
    after = [f"{r['kind'][:2]}{r['wall_ns'] / 1e6:.2f}" for r in rounds if r["kind"] not in ("WARMUP", "MEASURED")]
    cpu = next(c for c in result.collectors if c.name == "cpu")
    return {
        "warmup": round(warm[0], 3),
        "measured": round(statistics.median(measured), 3),
        "after": " ".join(after),
        "whole": round(whole, 2),
        "outside": result.added.get("outside_rounds_ms", 0.0),
        "analysis": result.added.get("analysis_ms", 0.0),
        "added": result.added.get("added_ms", 0.0),
        "cpu": cpu.mode,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit_b16")
    ap.add_argument("--reps", type=int, default=24)
    ap.add_argument("--cpu-smoke", action="store_true", help="a small MLP on the CPU, to check the script")
    args = ap.parse_args()
    import torch

    import pytest_inferscope.collectors as collectors

    device = "cpu" if args.cpu_smoke else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device: run on a GPU machine, or pass --cpu-smoke to check the script")
    print(
        "\n".join(
            header(
                "bench_sampler_rounds", f"{'an MLP' if args.cpu_smoke else args.model} on {device}; {args.reps} pairs"
            )
        )
    )
    if args.cpu_smoke:  # no model library needed
        mlp, x = (
            torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256)),
            torch.ones(64, 256),
        )
        call = lambda: mlp(x)  # noqa: E731
    else:
        call = build(args.model, device, False)
    for _ in range(5):
        call()
    if device == "cuda":
        torch.cuda.synchronize()
    seen: dict[str, Any] = {}
    stop = collectors.Collection.stop

    def keep(self: Any) -> Any:
        seen["collection"] = self
        return stop(self)

    collectors.Collection.stop = keep  # type: ignore[method-assign]  # this process only: the rounds' walls
    rows: dict[str, list[dict[str, Any]]] = {s: [] for s in SAMPLERS}
    for i in range(args.reps + 1):  # the first pair warms up, untold
        for sampler in SAMPLERS if i % 2 == 0 else SAMPLERS[::-1]:
            row = one_test(call, sampler, seen)
            if i:
                rows[sampler].append(row)
                print(i, sampler, json.dumps(row), flush=True)
    print(f"\n## {'mlp (cpu smoke)' if args.cpu_smoke else args.model}: medians over {args.reps} tests each")
    for sampler, got in rows.items():
        over = statistics.median(r["warmup"] - r["measured"] for r in got)
        after = sum(1 for r in got if r["after"])
        print(
            f"{sampler:7s} warm-up over the measured rounds {over:+.2f} ms; measured {statistics.median(r['measured'] for r in got):.2f} ms; "  # noqa: E501
            f"rounds after them in {after}/{len(got)} tests ({sum(len(r['after'].split()) for r in got)} rounds); "
            f"whole {statistics.median(r['whole'] for r in got):.1f} ms; outside the rounds "
            f"{statistics.median(r['outside'] for r in got):.2f} ms; analysis {statistics.median(r['analysis'] for r in got):.2f} ms"  # noqa: E501
        )
    pairs = [s["whole"] - t["whole"] for s, t in zip(rows["signal"], rows["thread"], strict=True)]
    print(f"signal - thread, whole test: median of the pairs {statistics.median(pairs):+.2f} ms; "
          f"the signal's shorter in {sum(1 for d in pairs if d < 0)}/{len(pairs)}")  # fmt: skip


if __name__ == "__main__":
    main()
