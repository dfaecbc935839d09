"""What profiling costs on a GPU: no profiler / inferscope (native, cupti-python) / torch.profiler, side by side.

Also the home of the GPU workloads that tests/gpu/test_gpu_backends.py proves the backends on,
so the benchmark and the proof run the same code:

* `transformer`: a 12-layer encoder forward, batch 16 x 256 tokens x width 768 (GPU-bound);
* `small_forward`: a 2-layer width-128 encoder on 1 x 16 tokens (CPU-bound: launches dominate);
* `elementwise_loop`: 2,000 in-place adds on 4,096 floats (small kernels);
* `copies`: 64 MB host-to-device from pageable, then from pinned memory (for the proof only);
* `long_kernels`: spin kernels of about 1.5, 5 and 20 ms and a 4096^3 matrix product, each
  between two CUDA events, behind a 3 ms "lead" spin kernel (for the proof only). The lead keeps
  the GPU busy while the host launches the rest, so the events time the kernels and not the
  host: on the H200 the first launch after CUPTI was enabled reached the GPU 0.4-0.7 ms after
  its start event had been recorded on the idle stream.

Benchmark (one run, modes interleaved so drift hits them alike), per workload and mode:

* per call: a "test" of 1 warm-up + 5 calls. inferscope runs them as rounds of one collection
  and the per-call time is the round time the plugin records for the measured rounds (what a
  latency threshold sees, warm-up dropped as the plugin drops it); torch.profiler wraps each call
  in its own `with profile(...)`, as a per-test wrapper would. "first call" is the warm-up call (the
  first launches after CUPTI is enabled cost more); "whole test" is the test's wall time with start,
  stop and drain, and the trace round (post-processing, once per test, is reported apart).
  inferscope modes run as a marked test does by default: the launch calls (CUPTI RUNTIME/DRIVER
  records) only in one trace round after the measured ones (`--inferscope-trace-rounds=1`; its time
  is the "trace round" column); the "launch calls in every round" modes record them in every round
  (`--inferscope-trace-rounds=all`, the behaviour before trace rounds).
* steady state: the profiler runs around N calls; the time per call inside it.
* where inferscope's cost comes from: the native backend with stack sampling off, stack sampling
  alone (no GPU collection), and the native backend recording every runtime/driver API call
  (INFERSCOPE_CUPTI_ALL_API=1, as before only the traced calls were recorded).

Run on a CUDA machine: `python3 benchmarks/bench_gpu_overhead.py [--reps 12] [--json out.json]`.

Every mode runs in one process, so after the first pass every inferscope mode runs in a process
where torch.profiler has run: Kineto's CUPTI timestamp callback (GPU.md) stays installed, and
CUPTI's host cost per API record may then be lower than in a test session that never runs
torch.profiler (on the H200, 2026-11-21: every API call recorded cost 2.5 us per launch in a clean
process, about 1 us here). `--no-torch-profiler` leaves torch.profiler out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

#: Per-call overhead targets of the issue (inferscope, "in round"): fraction of the unprofiled call.
TARGETS = {"transformer": 0.01, "small_forward": 0.03, "elementwise_loop": 0.10}
STEADY_CALLS = {"transformer": 30, "small_forward": 200, "elementwise_loop": 5}

Bracket = tuple[str, Any, Any]  # (label, start CUDA event, end CUDA event)


class Workloads:
    """The GPU workloads, built once (weights from a fixed seed) and warmed up by `warm()`."""

    N_ELEMENTWISE = 2000
    COPY_BYTES = 64 << 20

    def __init__(self, torch: Any, device: str = "cuda") -> None:
        self.torch = torch
        torch.manual_seed(0)
        nn = torch.nn

        def encoder(width: int, heads: int, layers: int) -> Any:
            layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True)
            return nn.TransformerEncoder(layer, layers, enable_nested_tensor=False).to(device).eval()

        self.big, self.big_x = encoder(768, 12, 12), torch.randn(16, 256, 768, device=device)
        self.small, self.small_x = encoder(128, 4, 2), torch.randn(1, 16, 128, device=device)
        self.vec = torch.ones(4096, device=device)
        n = self.COPY_BYTES // 4
        self.pageable, self.pinned = torch.ones(n), torch.ones(n).pin_memory()
        self.dst = torch.empty(n, device=device)
        self.a, self.b = torch.randn(4096, 4096, device=device), torch.randn(4096, 4096, device=device)
        self.c = torch.empty(4096, 4096, device=device)
        self.spin_cycles: list[int] = []
        self.lead_cycles = 0

    def warm(self) -> None:
        """First calls out of the way (cuBLAS handles, module loading), and spin kernels calibrated."""
        torch = self.torch
        for fn in (self.transformer, self.small_forward, self.elementwise_loop, self.copies):
            fn()
            fn()
        torch.cuda._sleep(100_000_000)  # clocks up before calibrating
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        torch.cuda._sleep(10_000_000)
        end.record()
        torch.cuda.synchronize()
        per_ms = 10_000_000 / start.elapsed_time(end)
        self.spin_cycles = [int(per_ms * ms) for ms in (1.5, 5.0, 20.0)]
        self.lead_cycles = int(per_ms * 3.0)
        self.long_kernels()
        torch.cuda.synchronize()

    def transformer(self) -> list[Bracket]:
        with self.torch.inference_mode():
            self.big(self.big_x)
        return []

    def small_forward(self) -> list[Bracket]:
        with self.torch.inference_mode():
            self.small(self.small_x)
        return []

    def elementwise_loop(self) -> list[Bracket]:
        for _ in range(self.N_ELEMENTWISE):
            self.vec.add_(1.0)
        return []

    def copies(self) -> list[Bracket]:
        return [
            self._between("pageable", self.dst.copy_, self.pageable),
            self._between("pinned", self.dst.copy_, self.pinned, non_blocking=True),
        ]

    def long_kernels(self) -> list[Bracket]:
        sleep = self.torch.cuda._sleep
        lead = self._between("lead spin", sleep, self.lead_cycles)  # timed too, but it times the host's launch
        spins = [self._between(f"spin {c}", sleep, c) for c in self.spin_cycles]
        return [lead, *spins, self._between("matmul", self.torch.mm, self.a, self.b, out=self.c)]

    def _between(self, label: str, fn: Callable[..., object], *args: Any, **kwargs: Any) -> Bracket:
        start, end = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args, **kwargs)
        end.record()
        return (label, start, end)

    def named(self) -> dict[str, Callable[[], list[Bracket]]]:
        return {
            "transformer": self.transformer,
            "small_forward": self.small_forward,
            "elementwise_loop": self.elementwise_loop,
            "copies": self.copies,
            "long_kernels": self.long_kernels,
        }


def torch_profiler_counts(torch: Any, fn: Callable[[], object]) -> dict[str, dict[str, int]]:
    """What torch.profiler (CPU+CUDA) records for one call: kernel names and copies/memsets, with counts."""
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        fn()
        torch.cuda.synchronize()
    kernels: Counter[str] = Counter()
    copies: Counter[str] = Counter()
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            (copies if e.name.startswith(("Memcpy", "Memset")) else kernels)[e.name] += 1
    return {"kernels": dict(kernels), "copies": dict(copies)}


# -- the benchmark ---------------------------------------------------------------------------------------

#: How each profiled "test" runs: warm-up calls (not in the per-call numbers, as the plugin drops them), then calls.
WARMUP, CALLS = 1, 5


class Modes:
    """One test (warm-up + calls), or a steady run of calls, of a workload under each profiler.

    Besides the two backends as the plugin runs them (default stack sampling), partial modes say
    where inferscope's cost comes from: the native backend with sampling off, sampling alone, and
    the native backend recording every API call (INFERSCOPE_CUPTI_ALL_API=1, set around its start).
    """

    ALL_API = "native, every API call"

    def __init__(self, torch: Any, backends: list[str], torch_profiler: bool = True) -> None:
        from pytest_inferscope.collectors import CollectionOptions
        from pytest_inferscope.collectors.gpu import Choice, select_backend

        self.torch = torch
        self.torch_profiler = torch_profiler
        self.choices = {b: select_backend("required", forced=b) for b in backends}
        # sampling, GPU activity in the measured rounds, one trace round (--inferscope-gpu-rounds=measured)
        sampling, off = CollectionOptions(trace_rounds=1), CollectionOptions(cpu="off", trace_rounds=1)
        every = CollectionOptions()  # launch calls recorded in every round (--inferscope-trace-rounds=all)
        self.inferscope: dict[str, tuple[Any, Any]] = {b: (sampling, c) for b, c in self.choices.items()}
        for b, c in self.choices.items():
            self.inferscope[f"{b}, launch calls in every round"] = (every, c)
        # GPU activity only in 3 trace rounds (--inferscope-gpu-rounds=trace), and auto's per-test choice
        lean = CollectionOptions(trace_rounds=1, gpu_rounds="trace", lean_trace_rounds=3)
        for b, c in self.choices.items():
            self.inferscope[f"{b}, GPU only in trace rounds"] = (lean, c)
        if "native" in self.choices:
            auto = CollectionOptions(trace_rounds=1, gpu_rounds="auto", lean_trace_rounds=3)
            self.inferscope["native, auto"] = (auto, self.choices["native"])
            self.inferscope["native, sampling off"] = (off, self.choices["native"])
            self.inferscope[self.ALL_API] = (every, self.choices["native"])
        self.inferscope["sampling only"] = (sampling, Choice(None, {"gpu": "off for this measurement"}))
        self.acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    def names(self) -> list[str]:
        return ["none", *self.inferscope, *(["torch.profiler"] if self.torch_profiler else [])]

    def _start(self, coll: Any, mode: str) -> None:
        from pytest_inferscope.collectors.gpu_native import ALL_API_ENV

        if mode != self.ALL_API:
            coll.start()
            return
        before = os.environ.get(ALL_API_ENV)
        os.environ[ALL_API_ENV] = "1"  # read when CUPTI collection starts
        try:
            coll.start()
        finally:
            if before is None:
                del os.environ[ALL_API_ENV]
            else:
                os.environ[ALL_API_ENV] = before

    def test(self, mode: str, fn: Callable[[], object]) -> dict[str, Any]:
        """ms of one test: 'calls' (each call after warm-up), 'first' (the first call), 'whole', 'post'.

        inferscope: one collection, a round per call, times as the plugin records them (the end-of-round
        device synchronisation included). torch.profiler: one `with profile()` around each call, as a
        per-test wrapper would. none: each call then a device synchronisation.
        """
        sync, now = self.torch.cuda.synchronize, time.perf_counter_ns
        t0 = now()
        if mode in self.inferscope:
            from pytest_inferscope.collectors import Collection
            from pytest_inferscope.postprocess import Plan, process

            options, choice = self.inferscope[mode]
            coll = Collection(options, choice, name=mode)
            self._start(coll, mode)
            if choice.collector is not None and coll.gpu is None:
                raise RuntimeError(f"{mode} did not collect: {coll.gpu_session.error}")
            coll.run_rounds(fn, CALLS, WARMUP)
            raw = coll.stop()
            t1 = now()
            process(raw, Plan(nodeid=mode, rounds=CALLS, warmup=WARMUP), coll.collectors_info())
            from pytest_inferscope.rounds import RoundKind, row_kind

            kinds = [row_kind(r) for r in coll.rounds]
            walls = [r["wall_ns"] / 1e6 for r, k in zip(coll.rounds, kinds, strict=True) if not k.after_measured]
            trace = [
                r["wall_ns"] / 1e6
                for r, k in zip(coll.rounds, kinds, strict=True)
                if k in (RoundKind.PROFILE, RoundKind.TRACE)
            ]
            return {"calls": walls[WARMUP:], "first": walls[0], "whole": (t1 - t0) / 1e6, "post": (now() - t1) / 1e6,
                    "trace": trace}  # fmt: skip
        walls = []
        for _ in range(WARMUP + CALLS):
            c0 = now()
            if mode == "torch.profiler":
                with self.torch.profiler.profile(activities=self.acts):
                    fn()
                    sync()
            else:
                fn()
                sync()
            walls.append((now() - c0) / 1e6)
        return {"calls": walls[WARMUP:], "first": walls[0], "whole": (now() - t0) / 1e6}

    def steady(self, mode: str, fn: Callable[[], object], n: int) -> float:
        """ms per call with the profiler running around `n` calls (each call synchronised, as rounds are)."""
        sync, now = self.torch.cuda.synchronize, time.perf_counter_ns
        if mode in self.inferscope:
            from pytest_inferscope.collectors import Collection

            coll = Collection(*self.inferscope[mode], name=mode)
            self._start(coll, mode)
            t0 = now()
            for i in range(n):
                with coll.round(i):
                    fn()
            t1 = now()
            coll.stop()
            return (t1 - t0) / 1e6 / n
        if mode == "torch.profiler":
            with self.torch.profiler.profile(activities=self.acts):
                t0 = now()
                for _ in range(n):
                    fn()
                    sync()
                t1 = now()
            return (t1 - t0) / 1e6 / n
        t0 = now()
        for _ in range(n):
            fn()
            sync()
        return (now() - t0) / 1e6 / n


def environment(torch: Any) -> dict[str, str]:
    """GPU, driver, CUDA, torch, commit and date of this run (for docs/gpu-validation.md)."""

    def shell(*cmd: str) -> str:
        try:
            return subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return "?"

    repo = Path(__file__).resolve().parent.parent
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "gpu": torch.cuda.get_device_name(0),
        "driver": shell("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"),
        "cuda": str(torch.version.cuda),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "commit": os.environ.get("COMMIT") or shell("git", "-C", str(repo), "rev-parse", "--short", "HEAD") or "?",
    }


def run(
    reps: int, backends: list[str], torch_profiler: bool = True, workloads: list[str] | None = None
) -> dict[str, Any]:
    import torch

    w = Workloads(torch)
    w.warm()
    modes = Modes(torch, backends, torch_profiler)
    names = modes.names()
    work = {k: v for k, v in w.named().items() if k in TARGETS and (not workloads or k in workloads)}
    failed: dict[str, str] = {}
    for m in list(names):  # one untimed test of every mode: each profiler's own first-use costs out of the way
        try:
            for fn in work.values():
                modes.test(m, fn)
        except Exception as exc:  # a backend that cannot run here is reported, and the others still measured
            failed[m] = f"{type(exc).__name__}: {exc}"
            names.remove(m)
    tests: dict[str, dict[str, list[dict[str, Any]]]] = {k: {m: [] for m in names} for k in work}
    steady: dict[str, dict[str, list[float]]] = {k: {m: [] for m in names} for k in work}
    for rep in range(reps):
        order = names[rep % len(names) :] + names[: rep % len(names)]
        for key, fn in work.items():
            for m in order:
                tests[key][m].append(modes.test(m, fn))
            if rep < 2:
                for m in order:
                    steady[key][m].append(modes.steady(m, fn, STEADY_CALLS[key]))
    return {
        "environment": environment(torch),
        "versions": {b: c.describe() for b, c in modes.choices.items()},
        "reps": reps,
        "warmup_and_calls": [WARMUP, CALLS],
        "failed": failed,
        "tests": tests,
        "steady": steady,
    }


def summarise(data: dict[str, Any]) -> dict[str, dict[str, dict[str, float]]]:
    """Medians, and ratios to the unprofiled calls, per workload and mode."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for key, by_mode in data["tests"].items():
        base = statistics.median(c for t in by_mode["none"] for c in t["calls"])
        base_whole = statistics.median(t["whole"] for t in by_mode["none"])
        base_steady = statistics.median(data["steady"][key]["none"])
        # The host of a VM has good and bad spells (a CPU-bound call took 0.5 or 1.0 ms, test by test):
        # the least-disturbed test of each mode, by its median call, compares modes in the same spell.
        base_best = min(statistics.median(t["calls"]) for t in by_mode["none"])
        out[key] = {}
        for m, tests in by_mode.items():
            row = {
                "ms": statistics.median(c for t in tests for c in t["calls"]),
                "call": statistics.median(c for t in tests for c in t["calls"]) / base,
                "best": min(statistics.median(t["calls"]) for t in tests) / base_best,
                "first": statistics.median(t["first"] for t in tests) / base,
                "whole": statistics.median(t["whole"] for t in tests) / base_whole,
                "steady": statistics.median(data["steady"][key][m]) / base_steady,
            }
            if tests and "post" in tests[0]:
                row["post_ms"] = statistics.median(t["post"] for t in tests)
            traced = [x for t in tests for x in t.get("trace", [])]
            if traced:
                row["trace_ms"] = statistics.median(traced)
            out[key][m] = row
    return out


def table(data: dict[str, Any]) -> str:
    """The Markdown table for docs/performance.md and docs/gpu-validation.md."""
    s = summarise(data)
    lines = [
        "| workload | profiler | ms per call | per call | per call, least-disturbed test | first call | whole test "
        "| steady state | trace round (ms) | post-processing |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for key, rows in s.items():
        for m, r in rows.items():
            cols = ("call", "best", "first", "whole", "steady")
            pct = [f"{(r[k] - 1) * 100:+.1f}%" if m != "none" else "" for k in cols]
            post = f"{r['post_ms']:.1f} ms" if "post_ms" in r else ""
            trace = f"{r['trace_ms']:.2f}" if "trace_ms" in r else ""
            lines.append(f"| {key} | {m} | {r['ms']:.2f} | " + " | ".join(pct) + f" | {trace} | {post} |")
    lines.append("")
    for key, target in TARGETS.items():
        for m in data["versions"]:
            if key in s and m in s[key]:
                got, best = s[key][m]["call"] - 1, s[key][m]["best"] - 1
                verdict = (
                    "meets" if got <= target else "meets in the least-disturbed test" if best <= target else "MISSES"
                )
                lines.append(
                    f"- {key}, {m}: {got * 100:+.1f}% per call ({best * 100:+.1f}% least disturbed), "
                    f"target {target * 100:.0f}%: {verdict}"
                )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--reps", type=int, default=12, help="interleaved repetitions per mode and workload")
    parser.add_argument("--backends", default="native,cupti-python", help="inferscope GPU backends to compare")
    parser.add_argument(
        "--no-torch-profiler",
        action="store_true",
        help="leave torch.profiler out, so no inferscope mode runs after it in this process (Kineto leaves its "
        "CUPTI timestamp callback installed, and CUPTI's per-record cost may then differ from a test session's)",
    )
    parser.add_argument("--json", type=Path, help="also write every measurement here")
    parser.add_argument("--workloads", default="", help=f"comma-separated, of {', '.join(TARGETS)} (default: all)")
    parser.add_argument("--warmup", type=int, default=WARMUP, help=f"warm-up calls per test (default {WARMUP})")
    args = parser.parse_args(argv)
    globals()["WARMUP"] = args.warmup  # read by Modes.test and the summary
    data = run(
        args.reps,
        [b for b in args.backends.split(",") if b],
        torch_profiler=not args.no_torch_profiler,
        workloads=[k for k in args.workloads.split(",") if k],
    )
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1))
    env = data["environment"]
    summary = {"environment": env, "versions": data["versions"], "failed": data["failed"], "summary": summarise(data)}
    print("BENCH " + json.dumps(summary))
    for mode, why in data["failed"].items():
        print(f"{mode} could not be measured: {why}")
    print(f"\n{env['date']}; {env['gpu']}; driver {env['driver']}; CUDA {env['cuda']}; torch {env['torch']}; "
          f"commit {env['commit']}; {data['reps']} tests of {WARMUP} + {CALLS} calls per mode, interleaved "
          "(medians; steady state: 2 runs)\n")  # fmt: skip
    print(table(data))
    return 0


if __name__ == "__main__":
    sys.exit(main())
