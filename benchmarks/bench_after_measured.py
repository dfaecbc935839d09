"""The rounds a GPU test runs after its measured ones, on a normal host and on slowed ones: which, and in step or not.

Under auto (the default), a lean test's warm-up stands for the profile and trace rounds when it ran in step with the
measured rounds (`rounds.in_step`, with the allowance for its records); otherwise a profile round runs, up to three
until one is in step, then a trace round, up to two the same way (`collectors/schedule.py`). This runs tests of
1 warm-up + `--calls` calls of real models (`bench_real_models.build`) through `measure()`, the process pinned to one
core, with a busy loop pinned to the same core at `nice10`, `nice5` or `nice0` (`bench_sync_balance.busy_loop`), or
none, and prints per test the rounds after the measured ones as P/T (profile/trace) with + or - (in or out of step) and
each one's time over the measured rounds' median; then, per model and host, how many tests ran which, and of the tests
whose first two profile rounds were both out of step, how many had a third in step: what a rule that stopped at two
rounds out of step would lose. The first two tests of each model are left out (first uses). CUDA
only: it says so and exits 2 without a GPU.

    python3 benchmarks/bench_after_measured.py [--models resnet50,vit_b16] [--loads none,nice10,nice5,nice0]
        [--tests 24] [--calls 10] [--json PATH]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import Counter
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, pin_to_one_core
from benchmarks.bench_sync_balance import busy_loop, loads_of


def rounds_after(meta: dict[str, Any]) -> list[tuple[str, bool, float]]:
    """The profile and trace rounds of one collection's meta: (P or T, in step, wall over the measured median)."""
    from pytest_inferscope.rounds import RoundKind, allowance, in_step, row_kind

    rows = meta.get("rounds") or []
    measured = [int(r["wall_ns"]) for r in rows if row_kind(r) is RoundKind.MEASURED]
    cost = float((meta.get("gpu_rounds_decision") or {}).get("estimated_cost") or 0.0)
    lean = meta.get("gpu_rounds") == "trace"
    out = []
    for r in rows:
        kind = row_kind(r)
        if kind in (RoundKind.PROFILE, RoundKind.TRACE) and measured:
            ok = in_step(int(r["wall_ns"]), measured, allowance(kind, lean, cost))
            out.append((kind.name[0], ok, int(r["wall_ns"]) / statistics.median(measured)))
    return out


def third_after_two_out(seqs: list[list[tuple[str, bool, float]]]) -> tuple[int, int]:
    """Of the tests whose first two profile rounds were out of step (so a third ran): how many, and how many in step."""
    n = ok = 0
    for seq in seqs:
        of = [s for s in seq if s[0] == "P"]
        if len(of) >= 3 and not of[0][1] and not of[1][1]:
            n += 1
            ok += bool(of[2][1])
    return n, ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50,vit_b16")
    ap.add_argument("--loads", default="none,nice10,nice5,nice0")
    ap.add_argument("--tests", type=int, default=24)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--json", type=Path, default=None, help="write every test's rounds and added figures here")
    args = ap.parse_args(argv)
    loads = loads_of(ap, args.loads)
    import torch

    from benchmarks.bench_real_models import build
    from pytest_inferscope import collectors, measure

    if not torch.cuda.is_available():
        print("bench_after_measured.py needs a CUDA device (none here)")
        return 2
    kept: dict[str, Any] = {}
    stop = collectors.Collection.stop

    def keep_meta(self: Any) -> Any:  # the collection's meta, which the result does not carry
        raw = stop(self)
        kept["meta"] = raw.meta
        return raw

    collectors.Collection.stop = keep_meta  # type: ignore[method-assign]  # this process only
    print("\n".join(header("bench_after_measured.py", f"torch {torch.__version__}, {torch.cuda.get_device_name()}")))
    core = pin_to_one_core()
    print(f"pinned to core {core}; tests of 1 warm-up + {args.calls} calls through measure(), defaults\n")
    records = []
    for model in args.models.split(","):
        call = build(model, "cuda", False)
        for load in loads:
            hog = busy_loop(core, load)
            try:
                for i in range(args.tests):
                    r = measure(call, rounds=args.calls, warmup=1, name=model)
                    seq = rounds_after(kept["meta"])
                    records.append({"model": model, "load": load, "test": i, "rounds": seq, "added": r.added,
                                    "class": r.analysis.bottleneck})  # fmt: skip
                    shown = " ".join(f"{k}{'+' if ok else '-'}{x:.2f}" for k, ok, x in seq) or "-"
                    print(f"{model} {load} test {i}: {r.analysis.bottleneck}, after the measured rounds: {shown}",
                          flush=True)  # fmt: skip
            finally:
                if hog is not None:
                    hog.kill()
                    hog.wait()
    print("\n| model | host | tests | only the warm-up | sequences (P/T: profile/trace, + in step) | asked ms "
          "| added ms | a third profile round in step after two out |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for model in args.models.split(","):
        for load in loads:
            rs = [x for x in records if x["model"] == model and x["load"] == load and x["test"] >= 2]
            if not rs:
                continue
            seqs = [x["rounds"] for x in rs]
            shapes = Counter(" ".join(f"{k}{'+' if ok else '-'}" for k, ok, _ in s) for s in seqs if s)
            asked = statistics.median(x["added"].get("asked_ms", 0.0) for x in rs)
            added = statistics.median(x["added"].get("added_ms", 0.0) for x in rs)
            n, ok = third_after_two_out(seqs)
            print(f"| {model} | {load} | {len(rs)} | {sum(not s for s in seqs)} | "
                  f"{', '.join(f'{k} {v}' for k, v in shapes.most_common())} | {asked:.1f} | {added:.1f} | "
                  f"{ok} of {n} |")  # fmt: skip
    if args.json is not None:
        args.json.write_text(json.dumps(records, default=str, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
