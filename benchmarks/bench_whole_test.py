"""The whole test against plain (issue 16): what runs besides the measured calls, and other designs of it.

A test is `--warmup` + `--calls` calls of a real model (`bench_real_models.build`); "whole" is its wall time
from the collection's start to the analysed result (reports not written), against the same calls plain.
Besides the project's own schedule (`default`), designs of the rounds after the measured ones that the
project does not run are measured by replacing `collectors.schedule.after_measured` for one collection;
the collection, the rounds and the analyzer are the project's:

  A  settling + 3 profile + 1 trace (the lean default until 2026-11-25)
  B  settling + 1 profile + 1 trace
  C  no settling, 3 profile + 1 trace
  D  no settling, 1 profile + 1 trace
  E  no settling, one trace round (GPU activity and launch calls together)
  unprimed  the project's schedule with the GPU not primed after CUPTI starts (a settling round instead):
            the default until 2026-11-25's fourth session
  profiled  the project's schedule with the warm-up never standing for the profile round (the default until
            2026-11-25's fifth session)

They apply only when auto takes the measured rounds lean; otherwise every design runs the project's.
Per design it prints the whole test's ratio, each kind of round's median wall time, the post-processing
(stop to result), and what the analysis read (class, GPU busy fraction, top what-if, replay error) so
that a cheaper design can be checked for reading the same. Plain and the designs run interleaved, in an
order that rotates every repetition; each figure is the median over repetitions of the ratio within one.

    python3 benchmarks/bench_whole_test.py [--reps 8] [--models vit_b16,resnet50] [--designs default,A] [--json F]
    python3 benchmarks/bench_whole_test.py --post-profile     # also: cProfile of one default test's stop-to-result
    python3 benchmarks/bench_whole_test.py --quick            # a small torch loop on the CPU: checks the script only
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header, quartiles

#: design -> (a settling round, profile rounds); "default" is the project's own schedule.
DESIGNS: dict[str, tuple[bool, int] | None] = {
    "default": None,
    "A": (True, 3),
    "B": (True, 1),
    "C": (False, 3),
    "D": (False, 1),
    "E": (False, 0),
    "unprimed": None,
    "profiled": None,
}
KINDS = ("WARMUP", "MEASURED", "SETTLING", "PROFILE", "TRACE")


def design_after(settle: bool, profiles: int) -> Callable[..., Any]:
    """An `after_measured` that runs the design when the measured rounds went lean, else the project's."""
    from pytest_inferscope.collectors import schedule
    from pytest_inferscope.rounds import RoundKind

    project = schedule.after_measured

    def after(coll: Any, body: Callable[[], Any], first: int) -> Any:
        gpu = coll.gpu_session
        if not coll.trace_rounds_due() or not gpu.lean:
            return project(coll, body, first)
        gpu.synchronize()
        if not gpu.begin_profile():
            return None
        kinds = [RoundKind.SETTLING] * settle + [RoundKind.PROFILE] * profiles
        result = None
        for i, kind in enumerate(kinds):
            with coll.round(first + i, kind):
                result = (body(),)
        gpu.synchronize()
        if not gpu.switch_launch_calls(True):
            return result
        try:
            with coll.round(first + len(kinds), RoundKind.TRACE):
                result = (body(),)
        finally:
            gpu.switch_launch_calls(False)
        return result

    return after


def profiled(design: str, call: Callable[[], Any], warmup: int, calls: int, post: cProfile.Profile | None = None
             ) -> dict[str, Any]:  # fmt: skip
    """One test under the design: its whole time, post-processing, round times by kind, and what it read."""
    from pytest_inferscope.api import Profile, collecting
    from pytest_inferscope.collectors import schedule
    from pytest_inferscope.collectors.gpu_session import GpuSession

    project, prime = schedule.after_measured, GpuSession._prime
    shape = DESIGNS[design]
    if shape is not None:
        schedule.after_measured = design_after(*shape)  # type: ignore[assignment]
    if design == "unprimed":
        GpuSession._prime = lambda self: False  # type: ignore[method-assign]
    stands_in = schedule._warmup_profiled
    if design == "profiled":
        schedule._warmup_profiled = lambda coll: False  # type: ignore[assignment]
    sink = Profile(design)
    try:
        t0 = time.perf_counter_ns()
        with collecting(design, sink, rounds=calls, warmup=warmup, report_dir=None, thresholds=None, cpu=None,
                        trace_rounds=1, gpu_rounds="auto", profile_rounds=3,
                        until_in_step=shape is None) as coll:  # fmt: skip
            coll.run_rounds(call, calls, warmup)
            t1 = time.perf_counter_ns()
            rows = list(coll.rounds)
            stood = bool(coll.gpu_session.profile_warmups)
            if post is not None:
                post.enable()
        t2 = time.perf_counter_ns()
    finally:
        if post is not None:
            post.disable()
        schedule.after_measured = project  # type: ignore[assignment]
        GpuSession._prime = prime  # type: ignore[method-assign]
        schedule._warmup_profiled = stands_in  # type: ignore[assignment]
    result = sink.result
    assert result is not None
    by_kind: dict[str, list[float]] = {}
    for row in rows:
        by_kind.setdefault(row["kind"], []).append(row["wall_ns"] / 1e6)
    a = result.analysis
    top = a.whatif[0] if a.whatif else None
    return {
        "whole": (t2 - t0) / 1e6,
        "stood": stood,
        "post": (t2 - t1) / 1e6,
        "by_kind": by_kind,
        "call": statistics.median(result.latency.samples_ms),
        "class": f"{a.bottleneck} ({a.confidence:.2f})",
        "busy": a.metrics.get("gpu.busy_fraction"),
        "top": None if top is None else f"{top.change[:40]}: {top.saved_fraction:.0%}",
        "replay_error": a.whatif_replay.get("replay_error"),
    }


def plain(call: Callable[[], Any], sync: Callable[[], None], warmup: int, calls: int) -> dict[str, Any]:
    """The same calls timed plain, as `bench_real_models.plain` times them."""
    from benchmarks.bench_real_models import plain as timed

    samples, whole = timed(call, sync, warmup, calls)
    return {"whole": whole, "call": statistics.median(samples)}


def toy(device: str) -> Callable[[], Any]:
    """--quick: 50 small linear layers, a few ms on a CPU."""
    import torch

    lin = torch.nn.Linear(256, 256).to(device)
    x = torch.randn(64, 256, device=device)

    def call() -> Any:
        with torch.no_grad():
            y = x
            for _ in range(50):
                y = torch.relu(lin(y))
            return y

    return call


def bench(name: str, args: argparse.Namespace, device: str) -> dict[str, Any]:
    import torch

    from benchmarks.bench_real_models import build

    call = toy(device) if args.quick else build(name, device, False)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    for _ in range(3):
        call()
    sync()
    modes = ["plain", *args.designs]
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for rep in range(args.reps):
        for mode in modes[rep % len(modes) :] + modes[: rep % len(modes)]:
            run = plain(call, sync, args.warmup, args.calls) if mode == "plain" else (
                profiled(mode, call, args.warmup, args.calls))  # fmt: skip
            runs[mode].append(run)
    base = runs["plain"]
    print(f"\n## {name}: plain {statistics.median(r['call'] for r in base):.2f} ms a call, "
          f"{statistics.median(r['whole'] for r in base):.1f} ms the whole test")  # fmt: skip
    print("| design | per call | whole | IQR | post ms | round ms by kind | rounds of each kind | warm-up stood in "
          "| class | busy | top |")  # fmt: skip
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for d in args.designs:
        rs = runs[d]
        call_r = statistics.median(r["call"] / p["call"] - 1 for r, p in zip(rs, base, strict=True))
        whole = [r["whole"] / p["whole"] - 1 for r, p in zip(rs, base, strict=True)]
        lo, hi = quartiles(whole)
        kinds = ", ".join(
            f"{k.lower()} {statistics.median(statistics.median(r['by_kind'][k]) for r in rs if k in r['by_kind']):.2f}"
            for k in KINDS
            if any(k in r["by_kind"] for r in rs)
        )
        counts = sorted({"/".join(str(len(r["by_kind"].get(k, []))) for k in KINDS[2:]) for r in rs})
        busy = [r["busy"] for r in rs if r["busy"] is not None]
        busy_s = f"{min(busy):.3f}–{max(busy):.3f}" if busy else "-"
        print(f"| {d} | {call_r:+.1%} | {statistics.median(whole):+.1%} | {lo:+.0%} … {hi:+.0%} | "
              f"{statistics.median(r['post'] for r in rs):.1f} | {kinds} | {' '.join(counts)} (settle/profile/trace) | "
              f"{sum(r.get('stood', False) for r in rs)}/{len(rs)} | "
              f"{sorted({r['class'] for r in rs})} | {busy_s} | {rs[-1]['top']} |")  # fmt: skip
    if args.post_profile:
        prof = cProfile.Profile()
        profiled("default", call, args.warmup, args.calls, post=prof)
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(30)
        print(f"\ncProfile of one default test's stop to result ({name}):\n{out.getvalue()}")
    return runs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=8)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--models", default="vit_b16,resnet50,gpt2_generate,gpt2_forward")
    ap.add_argument("--designs", default="default,A,B,C,D,E")
    ap.add_argument("--post-profile", action="store_true")
    ap.add_argument("--quick", action="store_true", help="a small loop on the CPU, 2 repetitions: checks the script")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    args.designs = [d for d in args.designs.split(",") if d]
    unknown = [d for d in args.designs if d not in DESIGNS]
    if unknown:
        ap.error(f"unknown designs {unknown}; designs: {', '.join(DESIGNS)}")
    import torch

    device = "cuda" if torch.cuda.is_available() and not args.quick else "cpu"
    if args.quick:
        args.reps, args.models = 2, "toy"
    print("\n".join(header("bench_whole_test.py", f"torch {torch.__version__}, device {device}")))
    out = {m: bench(m, args, device) for m in args.models.split(",")}
    if args.json:
        args.json.write_text(json.dumps(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
