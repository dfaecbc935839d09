"""What `python_gc`'s suggestions save when applied, against what the finding predicts (docs/scenarios.md, "Savings
checked again: the garbage collector (session 40)").

Each repetition runs, through `measure()` in this one process, the problem body (N objects with reference cycles a
call, kept in a list until the call's end, as a request's object graph is) and its fixes one after the other, in an
order that turns with the repetition: the cycles broken; `gc.freeze()` after the setup; `gc.disable()` around the
call with a young collection at its end (in the round); `gc.disable()` around the call alone (its garbage collected at
the next allocation, between the rounds, as a collection between batches would be); the young generation's threshold
raised for the call (the same: the collection comes after the call). `--heap K`: K
long-lived objects made before (a loaded model's Python side), which full collections walk; `--chain K`: the objects
let go K at a time as the call goes (garbage young) instead of at its end. Prints, per variant, the
mean round, the collector's ms, collections (full), objects collected a round, and the problem's predicted savings.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import header

from pytest_inferscope import measure


class Node:
    def __init__(self, i: int, cyclic: bool) -> None:
        self.i = i
        self.tags = [i, i + 1]
        if cyclic:
            self.me = self  # a cycle: only the collector frees it


def _graph(n: int, cyclic: bool) -> int:
    if CHAIN:  # garbage as it goes: each chain of CHAIN objects let go as the next begins
        for start in range(0, n, CHAIN):
            nodes = [Node(i, cyclic) for i in range(start, min(n, start + CHAIN))]
        return n
    nodes = [Node(i, cyclic) for i in range(n)]
    return len(nodes)


CHAIN = 0  # --chain


def variants(n: int) -> dict[str, Any]:
    def cycles() -> int:
        return _graph(n, True)

    def no_cycles() -> int:
        return _graph(n, False)

    def disabled() -> int:
        gc.disable()
        try:
            return _graph(n, True)
        finally:
            gc.enable()
            gc.collect(0)  # the call's garbage, in one young collection (in the round: the work is still done)

    def disable_between() -> int:
        gc.disable()
        try:
            return _graph(n, True)
        finally:
            gc.enable()  # the call's garbage is collected at the next allocation: between the rounds, not in one

    def threshold() -> int:
        old = gc.get_threshold()
        gc.set_threshold(10 * n, old[1], old[2])
        try:
            return _graph(n, True)
        finally:
            gc.set_threshold(*old)

    return {"cycles": cycles, "no_cycles": no_cycles, "freeze": cycles, "disable": disabled,
            "disable_between": disable_between, "threshold": threshold}  # fmt: skip


def one(name: str, fn: Any, rounds: int, report: str | None = None) -> dict[str, Any]:
    gc.collect()
    if name == "freeze":
        gc.freeze()
    try:
        r = measure(fn, rounds=rounds, warmup=1, name=name, report_dir=report)
    finally:
        gc.unfreeze()
    f = next((f for f in r.analysis.findings if f.rule == "python_gc"), None)
    sug = [(s.action.split(":")[0][:60], s.saving_ms) for s in r.analysis.suggestions if s.rule == "python_gc"]
    return {
        "mean": r.latency.mean,
        "gc_ms": f.evidence.get("collector time per round (ms)", 0.0) if f else 0.0,
        "ev": dict(f.evidence) if f else {},
        "sug": sug,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=60_000)
    ap.add_argument("--heap", type=int, default=0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--chain", type=int, default=0, help="objects let go in groups of this many (0: at the end)")
    ap.add_argument("--report", help="the last repetition's reports (raw.npz) go here")
    a = ap.parse_args()
    if a.quick:
        a.n, a.reps, a.rounds = 10_000, 1, 3
    global CHAIN
    CHAIN = a.chain
    print("\n".join(header("python_gc's suggestions applied", f"python {sys.version.split()[0]}")))
    heap = [{"w": i} for i in range(a.heap)]  # long-lived: the full collections walk it (unless frozen)
    vs = variants(a.n)
    names = list(vs)
    rows: dict[str, list[dict[str, Any]]] = {k: [] for k in names}
    for rep in range(a.reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for k in order:
            rows[k].append(one(k, vs[k], a.rounds, a.report if rep == a.reps - 1 else None))
        base = rows["cycles"][-1]
        line = [f"rep {rep}: cycles {base['mean']:.1f} ms (gc {base['gc_ms']:.1f}; {base['ev']})"]
        for k in names[1:]:
            x = rows[k][-1]
            line.append(f"  {k}: {x['mean']:.1f} ms, saves {base['mean'] - x['mean']:.1f} (gc {x['gc_ms']:.1f})")
        line.append(f"  predicted: {base['sug']}")
        print("\n".join(line), flush=True)
    print("medians:")
    for k in names:
        print(f"  {k}: round {statistics.median(x['mean'] for x in rows[k]):.1f} ms, "
              f"gc {statistics.median(x['gc_ms'] for x in rows[k]):.1f} ms")  # fmt: skip
    del heap


if __name__ == "__main__":
    main()
