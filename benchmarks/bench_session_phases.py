"""Where a GPU test's time goes outside its rounds (issue 16): the GPU session's steps, timed in place.

Runs `--tests` tests (1 warm-up + `--calls` calls, the plugin's defaults: auto, the number of trace rounds not
given, profile and trace rounds until one is in step; `--trace-rounds 1`: one trace round, as before session 17) of
a real model (`bench_real_models.build`) through `collecting`, with the GPU session's methods, the native
collector's, the collection's stop and the post-processing's merge and analyze wrapped in timers (monkeypatched
for this process only). Prints, per test, the rounds that ran and what the warm-up stood for, then each step's
calls per test and its median duration, and the post-processing (stop to result).

    python3 benchmarks/bench_session_phases.py [--model vit_b16] [--tests 9] [--calls 10] [--trace-rounds 1]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header

SESSION = (
    "start",
    "after_warmup",
    "begin_profile",
    "stop",
    "_keep_records",
    "_prime_unrecorded",
    "launch_calls",
    "clock_pair",
    "synchronize",
)
NATIVE = ("start", "stop", "set_api_records", "flush", "drain", "prime", "synchronize")


def timers(owner: Any, names: tuple[str, ...], prefix: str, into: dict[str, list[float]]) -> None:
    """Wrap `owner`'s methods `names` so each call's duration (ms) lands in `into[prefix + name]`."""
    for name in names:
        orig = getattr(owner, name)

        def wrapper(*a: Any, _orig: Callable[..., Any] = orig, _key: str = prefix + name, **k: Any) -> Any:
            t0 = time.perf_counter_ns()
            try:
                return _orig(*a, **k)
            finally:
                into[_key].append((time.perf_counter_ns() - t0) / 1e6)

        setattr(owner, name, wrapper)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="vit_b16")
    ap.add_argument("--tests", type=int, default=9)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--trace-rounds", type=int, default=None, help="default: not given, as the plugin's default")
    args = ap.parse_args(argv)
    import torch

    from benchmarks.bench_real_models import build
    from pytest_inferscope import collectors, postprocess
    from pytest_inferscope.api import Profile, collecting
    from pytest_inferscope.collectors import gpu_native, gpu_session
    from pytest_inferscope.options import LEAN_TRACE_ROUNDS

    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print("\n".join(header("bench_session_phases.py", f"torch {torch.__version__}, {gpu}")))
    steps: dict[str, list[float]] = defaultdict(list)
    timers(gpu_session.GpuSession, SESSION, "session.", steps)
    timers(gpu_native.NativeGpuCollector, NATIVE, "native.", steps)
    timers(collectors.Collection, ("stop", "start"), "collection.", steps)
    timers(postprocess, ("merge", "analyze"), "post.", steps)  # looked up in the module by `judge`
    call = build(args.model, "cuda", False)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    posts = []
    profile_rounds = LEAN_TRACE_ROUNDS if args.trace_rounds is None else args.trace_rounds
    for i in range(args.tests):
        sink = Profile("phases")
        block = collecting("phases", sink, rounds=args.calls, warmup=1, report_dir=None, thresholds=None, cpu=None,
                           trace_rounds=args.trace_rounds, gpu_rounds="auto", profile_rounds=profile_rounds,
                           until_in_step=args.trace_rounds is None)  # fmt: skip  # as measure() does
        with block as coll:
            coll.run_rounds(call, args.calls, 1)
            t1 = time.perf_counter_ns()
            rows = list(coll.rounds)
        posts.append((time.perf_counter_ns() - t1) / 1e6)
        kinds = "/".join(r["kind"][:2].lower() for r in rows if r["kind"] != "MEASURED")
        g = coll.gpu_session
        walls = {k: [r["wall_ns"] / 1e6 for r in rows if r["kind"] == k] for k in ("WARMUP", "MEASURED")}
        mode = g.decision.mode if g.decision is not None else "-"
        warm = ", ".join(f"{w:.2f}" for w in walls["WARMUP"])
        print(f"test {i}: {mode}; rounds besides the measured: {kinds or 'none'}; the warm-up ({warm} ms; measured "
              f"median {statistics.median(walls['MEASURED']):.2f} ms) stood for the profile round: "
              f"{g.profile_warmups or 'no'}, the trace round: {g.trace_warmups or 'no'}; "
              f"post-processing {posts[-1]:.1f} ms")  # fmt: skip
    print(f"\n{args.model}: post-processing median {statistics.median(posts):.1f} ms")
    print("| step | calls per test | median ms | ms per test |\n| --- | --- | --- | --- |")
    for key, ms in sorted(steps.items()):
        print(f"| {key} | {len(ms) / args.tests:.1f} | {statistics.median(ms):.3f} | {sum(ms) / args.tests:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
