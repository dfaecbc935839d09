"""What a test spends outside its rounds, through `measure()` as a user calls it (issue 16), every step timed in place.

Runs `--tests` tests of 1 warm-up + `--calls` calls of a real model (`bench_real_models.build`) through `measure()`
(the plugin's defaults), with the GPU session's, the native collector's, the collection's, the memory collector's,
the sampler's and the post-processing's steps wrapped in timers (monkeypatched for this process only). Prints per
test the whole, the rounds' walls and what lies outside them: `setup` (the call to the collection's start), `first`
(its start to the first round), `gap_after_warmup` (auto's decision, the flush, CUPTI's stop), `gaps_measured` (between
the measured rounds), `tail` (the last round to the collection's stop) and `post` (the stop to the result), and what
the result says the plugin added (`added.*`: `TestResult.added`'s rounds besides, time outside the rounds and analysis,
which `outside` holds besides `measure()`'s own steps); then the medians of those and of every step. The first two
tests (imports, first uses) are left out of the medians.

`TREE=/path/to/other/tree` imports that tree's package instead (two trees compared in one machine's run).
`--prime split` times the prime's driver calls one by one, `--prime kept` keeps its allocation across tests (what
that would save), `--prime none` runs none (what the warm-up pays without it); `--buffer-mb N` sets the native
collector's CUPTI buffer size; `--no-flush` makes auto stop CUPTI to count instead of flushing it; `--cpu` spins the
CPU for 8 ms instead of a model (a smoke test).

    python3 benchmarks/bench_outside_rounds.py [--model resnet50] [--tests 12] [--calls 10] [--prime as-is]
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, os.environ.get("TREE") or str(Path(__file__).resolve().parent.parent))

from benchmarks._common import header

STEPS: dict[str, list[float]] = defaultdict(list)


def wrap(owner: Any, names: tuple[str, ...], prefix: str) -> None:
    """bench_session_phases' timers, into this script's STEPS (there since 8cad8b3, so a TREE= of then has it too)."""
    from benchmarks.bench_session_phases import timers

    timers(owner, names, prefix, STEPS)


_KEPT: dict[int, int] = {}


def prime_split(self: Any, kept: bool = False) -> bool:
    """DeviceSync.prime with each driver call timed (and, `kept`, the allocation kept across tests)."""
    from pytest_inferscope.collectors.devsync import _PRIME

    def t(key: str, fn: Any, *a: Any) -> int:
        t0 = time.perf_counter_ns()
        rc = fn(*a)
        STEPS["prime." + key].append((time.perf_counter_ns() - t0) / 1e6)
        return rc

    cuda = self._driver(in_round=False)
    if cuda is None or not all(hasattr(cuda, n) for n in _PRIME):
        return False
    if not t("contexts", self._contexts, cuda):
        return False
    for ordinal, ctx in self._held.items():
        t("push", cuda.cuCtxPushCurrent_v2, ctypes.c_void_p(ctx))
        try:
            size = ctypes.c_size_t(256)
            if kept and ordinal in _KEPT:
                ptr = ctypes.c_uint64(_KEPT[ordinal])
            else:
                ptr = ctypes.c_uint64(0)
                self._check(t("alloc", cuda.cuMemAlloc_v2, ctypes.byref(ptr), size), "cuMemAlloc")
            self._check(t("memset", cuda.cuMemsetD8_v2, ptr, ctypes.c_ubyte(0), size), "cuMemsetD8")
            self._check(t("sync", cuda.cuCtxSynchronize), "cuCtxSynchronize")
            if kept:
                _KEPT[ordinal] = ptr.value
            else:
                t("free", cuda.cuMemFree_v2, ptr)
        finally:
            cuda.cuCtxPopCurrent_v2(self._popped_ref)
    return bool(self._held)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet50")
    ap.add_argument("--tests", type=int, default=12)
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--prime", default="as-is", choices=("split", "kept", "none", "as-is"))
    ap.add_argument("--cpu", action="store_true", help="a CPU spin of 8 ms instead of a model (smoke test)")
    ap.add_argument("--buffer-mb", type=int, default=None, help="the native collector's CUPTI buffer size")
    ap.add_argument("--no-flush", action="store_true", help="after the warm-up: stop (and count) instead of flush")
    args = ap.parse_args()
    from pytest_inferscope import api, collectors, measure, postprocess
    from pytest_inferscope.collectors import cpu, devsync, gpu_native, gpu_session, memory
    from pytest_inferscope.events import host_clock_ns
    from pytest_inferscope.rounds import RoundKind

    if args.cpu:

        def call() -> None:
            end = time.perf_counter() + 0.008
            while time.perf_counter() < end:
                pass

        sync = lambda: None  # noqa: E731
        what = "cpu spin 8 ms"
    else:
        import torch

        from benchmarks.bench_real_models import build

        call, sync, what = build(args.model, "cuda", False), torch.cuda.synchronize, torch.cuda.get_device_name()
    import pytest_inferscope

    print("package:", pytest_inferscope.__file__, "tree commit:", os.environ.get("TREE_COMMIT", "this"))
    print(
        "\n".join(
            header(
                "bench_outside_rounds.py",
                f"{what}; prime {args.prime}; buffer {args.buffer_mb} MB; no-flush {args.no_flush}",
            )
        )
    )
    for _ in range(3):
        call()
    sync()
    wrap(gpu_session.GpuSession, ("start", "after_warmup", "stop", "_keep_records", "_stop", "_prime_unrecorded",
                                  "launch_calls", "clock_pair", "round_clock_pair", "synchronize", "meta"),
         "session.")  # fmt: skip
    native: tuple[str, ...] = ("start", "stop", "set_api_records", "drain", "synchronize", "timestamp")
    if args.no_flush:
        del gpu_native.NativeGpuCollector.flush
    else:
        native += ("flush",)
    wrap(gpu_native.NativeGpuCollector, native, "native.")
    if args.buffer_mb is not None:
        defaults = gpu_native.create.__defaults__ or ()
        gpu_native.create.__defaults__ = (args.buffer_mb, *defaults[1:])
    wrap(gpu_session.GpuSession, ("_trace_names", "_in_primes"), "session.")
    wrap(gpu_session, ("busy_ns", "work_records", "decide_auto", "undecided"), "rounds.")
    from pytest_inferscope import buffer as B

    wrap(B.TraceBuffer, ("extend", "to_array"), "buffer.")
    wrap(devsync.DeviceSync, ("release", "pci_bus_ids"), "devsync.")
    if args.prime == "none":
        devsync.DeviceSync.prime = lambda self: False  # type: ignore[method-assign]
    elif args.prime != "as-is":
        devsync.DeviceSync.prime = lambda self: prime_split(self, kept=args.prime == "kept")  # type: ignore[method-assign]
    wrap(
        collectors.Collection,
        ("start", "stop", "__init__", "collectors_info", "after_warmup", "_end_round"),
        "collection.",
    )
    wrap(memory.MemoryCollector, ("start", "stop"), "memory.")
    wrap(memory.Counters, ("now",), "counters.")
    wrap(cpu.Sampler, ("start", "stop"), "sampler.")
    wrap(postprocess, ("merge", "analyze", "judge", "process"), "post.")
    wrap(api, ("collect_environment", "standalone_settings", "_gpu_choice", "process"), "api.")
    seen: dict[str, Any] = {}
    stop = collectors.Collection.stop

    def keep(self: Any) -> Any:
        seen["coll"] = self
        return stop(self)

    collectors.Collection.stop = keep  # type: ignore[method-assign]
    rows = []
    groups = ("only the warm-up", "rounds after")
    by_group: dict[str, dict[str, list[float]]] = {g: defaultdict(list) for g in groups}
    counts = dict.fromkeys(groups, 0)
    for i in range(args.tests + 2):
        mark = {k: len(v) for k, v in STEPS.items()}
        t_in = host_clock_ns()
        result = measure(call, rounds=args.calls, warmup=1, name="acct")
        t_out = host_clock_ns()
        c = seen["coll"]
        rr = c.rounds
        starts = [c.t0 + r["start_ns"] for r in rr]
        ends = [s + r["wall_ns"] for s, r in zip(starts, rr, strict=True)]
        walls = sum(r["wall_ns"] for r in rr)
        kinds = "/".join(r["kind"][:2].lower() for r in rr if r["kind"] != "MEASURED")
        row = {
            "whole": (t_out - t_in) / 1e6,
            "rounds": walls / 1e6,
            "outside": (t_out - t_in - walls) / 1e6,
            "setup": (c.t0 - t_in) / 1e6,
            "first": (starts[0] - c.t0) / 1e6,
            "gap_after_warmup": (starts[1] - ends[0]) / 1e6,
            "gaps_measured": sum(starts[k + 1] - ends[k] for k in range(1, len(rr) - 1)) / 1e6,
            "tail": (c.t_end - ends[-1]) / 1e6,
            "post": (t_out - c.t_end) / 1e6,
            "warmup_wall": rr[0]["wall_ns"] / 1e6,
            "measured_median": statistics.median(r["wall_ns"] for r in rr if r["kind"] == "MEASURED") / 1e6,
        }
        # what the result says the plugin added (TestResult.added, since a742f96): `outside` but measure()'s own steps
        added = getattr(result, "added", None) or {}
        row.update(
            {f"added.{k}": added[k] for k in ("extra_rounds_ms", "outside_rounds_ms", "analysis_ms") if k in added}
        )
        g = c.gpu_session
        print(
            f"test {i}: {'  '.join(f'{k} {v:.2f}' for k, v in row.items())}; rounds besides: {kinds}; "
            f"mode {g.decision.mode if g.decision else '-'}; stood for {g.profile_warmups}/{g.trace_warmups}"
        )
        if i < 2:  # the first tests pay imports and first uses
            for k, n in mark.items():
                del STEPS[k][n:]
            for k in [k for k in STEPS if k not in mark]:
                STEPS[k].clear()
            continue
        rows.append(row)
        g = groups[any(RoundKind[r["kind"]].after_measured for r in rr)]
        counts[g] += 1
        for k, v in STEPS.items():  # this test's ms in each step
            by_group[g][k].append(sum(v[mark.get(k, 0) :]))
    print("\n| part | median ms | min |\n| --- | --- | --- |")
    for k in rows[0]:
        v = [r[k] for r in rows]
        print(f"| {k} | {statistics.median(v):.3f} | {min(v):.3f} |")
    print("\n| step | calls per test | median ms | ms per test |\n| --- | --- | --- | --- |")
    for key, ms in sorted(STEPS.items()):
        if ms:
            print(f"| {key} | {len(ms) / len(rows):.1f} | {statistics.median(ms):.3f} | {sum(ms) / len(rows):.3f} |")
    # The same steps, ms per test by the median, apart for the tests whose warm-up stood for every round after the
    # measured ones (a quiet host's lean test) and those that ran such rounds (CUPTI started and stopped again).
    names = sorted(k for k, ms in STEPS.items() if ms)
    print("\n| step, ms per test (median) | " + " | ".join(f"{g} ({n} tests)" for g, n in counts.items()) + " |")
    print("| --- | --- | --- |")
    for key in names:
        cells = [
            f"{statistics.median(v[key] + [0.0] * (counts[g] - len(v[key]))):.3f}" if counts[g] else "-"
            for g, v in by_group.items()
        ]
        print(f"| {key} | {' | '.join(cells)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
