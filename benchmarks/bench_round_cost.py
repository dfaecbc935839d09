"""Where a profiled round's extra time goes, on a CUDA machine: one cost at a time, one run.

The round time the plugin reports is the body plus the end-of-round device synchronisation
(collectors/__init__.py `_end_round`); the clock readings and counters come after it. On a short
CPU-bound body (bench_gpu_overhead.py's `small_forward`, about 0.4 ms on the H200) this splits
the profiled call's extra time into:

* the end-of-round synchronisation (torch.cuda.synchronize against DeviceSync through the driver,
  and the per-call retain/push/sync/pop/release of the earlier DeviceSync, kept here as `legacy`);
* the round harness alone (a Collection with no collectors) and with stack sampling;
* CUPTI's cost per launch (the native backend started around plain calls, no rounds), with and
  without driver API records;
* the whole native round, sampling off and on;

each as blocks of calls per mode, the modes interleaved so drift hits them alike; medians and
25th percentiles per call against the unprofiled call. Then single operations on an idle GPU
(median of many): the synchronisations, one CUPTI timestamp, one clock pair. And the records
one call of the workload leaves (kernels, runtime calls), which sets CUPTI's share.

Run: `python3 benchmarks/bench_round_cost.py [--workload small_forward] [--blocks 30] [--calls 40]`.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository's package importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks._common import med, quartiles
from benchmarks.bench_gpu_overhead import Workloads, environment


def legacy_sync(cuda: Any) -> None:
    """The DeviceSync of commit e34df35: every round, every active primary context retained and released."""
    count = ctypes.c_int(0)
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return
    for ordinal in range(count.value):
        dev, flags, active = ctypes.c_int(0), ctypes.c_uint(0), ctypes.c_int(0)
        cuda.cuDeviceGet(ctypes.byref(dev), ordinal)
        cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active))
        if not active.value:
            continue
        ctx, old = ctypes.c_void_p(), ctypes.c_void_p()
        cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev)
        cuda.cuCtxPushCurrent_v2(ctx)
        cuda.cuCtxSynchronize()
        cuda.cuCtxPopCurrent_v2(ctypes.byref(old))
        cuda.cuDevicePrimaryCtxRelease_v2(dev)
    current = ctypes.c_void_p()
    if cuda.cuCtxGetCurrent(ctypes.byref(current)) == 0 and current.value:
        cuda.cuCtxSynchronize()


class Modes:
    """Each mode runs `calls` calls of the body and returns their per-call times in ms."""

    def __init__(self, torch: Any, fn: Callable[[], object]) -> None:
        from pytest_inferscope.collectors import CollectionOptions
        from pytest_inferscope.collectors.devsync import DeviceSync
        from pytest_inferscope.collectors.gpu import Choice, select_backend
        from pytest_inferscope.collectors.gpu_native import create

        self.torch, self.fn = torch, fn
        self.cuda = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
        self.devsync = DeviceSync()
        self.native = select_backend("required", forced="native")
        self.no_driver = create(driver=False)
        self.sampling, self.off = CollectionOptions(), CollectionOptions(cpu="off")
        self.cpu_only = Choice(None, {"gpu": "off for this measurement"})
        self.table: dict[str, Callable[[int], list[float]]] = {
            "none (torch.cuda.synchronize)": lambda n: self._plain(n, torch.cuda.synchronize),
            "DeviceSync": lambda n: self._plain(n, self.devsync),
            "legacy DeviceSync": lambda n: self._plain(n, lambda: legacy_sync(self.cuda)),
            "rounds, no collectors": lambda n: self._rounds(n, self.off, self.cpu_only),
            "rounds, sampling only": lambda n: self._rounds(n, self.sampling, self.cpu_only),
            "CUPTI on, plain calls": lambda n: self._cupti(n, self.native.collector),
            "CUPTI on without driver records, plain calls": lambda n: self._cupti(n, self.no_driver),
            "native rounds, sampling off": lambda n: self._rounds(n, self.off, self.native),
            "native rounds": lambda n: self._rounds(n, self.sampling, self.native),
        }

    def add_study(self) -> None:
        """Modes that take one piece away at a time: what each costs, and what CUPTI costs per activity kind."""
        import gc

        from pytest_inferscope.collectors import gpu_cuptipy
        from pytest_inferscope.collectors.devsync import DeviceSync
        from pytest_inferscope.collectors.gpu import select_backend
        from pytest_inferscope.collectors.memory import Counters

        cached, real_now, real_sync = Counters.now(), Counters.now, DeviceSync.__call__

        @contextmanager
        def patched(obj: Any, name: str, value: Any) -> Iterator[None]:
            old = getattr(obj, name)
            setattr(obj, name, value)
            try:
                yield
            finally:
                setattr(obj, name, old)

        def without(obj: Any, name: str, value: Any) -> Callable[[int], list[float]]:
            def run(n: int) -> list[float]:
                with patched(obj, name, value):
                    return self._rounds(n, self.off, self.cpu_only)

            return run

        def no_gc(n: int) -> list[float]:
            gc.disable()
            try:
                return self._rounds(n, self.off, self.cpu_only)
            finally:
                gc.enable()

        assert real_now is not None and real_sync is not None
        self.table["rounds, counters not read"] = without(Counters, "now", classmethod(lambda cls, proc=None: cached))
        self.table["rounds, no synchronize"] = without(DeviceSync, "__call__", lambda self: None)
        self.table["rounds, gc off"] = no_gc
        from pytest_inferscope.collectors import Collection

        self.table["rounds, counters read at both ends (as before)"] = without(
            Collection, "_counters_before", lambda coll: real_now(coll.proc)
        )
        cuptipy = select_backend("required", forced="cupti-python").collector
        k = {label: (kind, label, False) for kind, label, _ in gpu_cuptipy.KINDS}
        subsets = {
            "all kinds": tuple(k.values()),
            "CONCURRENT_KERNEL only": (k["CONCURRENT_KERNEL"],),
            "kernel + RUNTIME": (k["CONCURRENT_KERNEL"], k["RUNTIME"]),
            "no DRIVER, SYNCHRONIZATION, MEMORY2, OVERHEAD": tuple(k[x] for x in ("CONCURRENT_KERNEL", "MEMCPY",
                                                                                "MEMSET", "RUNTIME")),
        }  # fmt: skip
        traced = cuptipy._traced_cbids(gpu_cuptipy.A_RUNTIME)[0]
        switch = cuptipy._cupti.activity_enable_runtime_api

        def per_call_only(n: int) -> list[float]:
            """Kernels, and the traced runtime calls switched on one by one with the RUNTIME kind left off."""
            with patched(gpu_cuptipy, "KINDS", (k["CONCURRENT_KERNEL"],)):
                cuptipy.start()
            for cbid in traced:
                switch(cbid, 1)
            try:
                return self._plain(n, self.torch.cuda.synchronize)
            finally:
                for cbid in traced:
                    switch(cbid, 0)
                cuptipy.stop()
                records, _ = cuptipy.drain()
                self.per_call_only_runtime += int((records["kind"] == 13).sum())

        self.per_call_only_runtime = 0
        self.table["cupti-python, kernel + traced runtime calls, no RUNTIME kind, plain calls"] = per_call_only
        statm, sync = "/proc/self/statm", self.torch.cuda.synchronize

        def read_statm() -> None:
            with open(statm, "rb") as f:
                f.read()

        self.table["plain, Counters.now() before each call (untimed)"] = lambda n: self._plain(n, sync, real_now)
        from pytest_inferscope.collectors.memory import ProcFiles

        proc = ProcFiles()
        self.table["plain, Counters.now(ProcFiles) before each call (untimed)"] = lambda n: self._plain(
            n, sync, lambda: real_now(proc)
        )
        self.table["plain, one procfs read before each call (untimed)"] = lambda n: self._plain(n, sync, read_statm)
        self.table["plain, 8 getppid() before each call (untimed)"] = lambda n: self._plain(
            n, sync, lambda: [os.getppid() for _ in range(8)]
        )
        for label, kinds in subsets.items():

            def run(n: int, kinds: Any = kinds) -> list[float]:
                with patched(gpu_cuptipy, "KINDS", kinds):
                    return self._cupti(n, cuptipy)

            self.table[f"cupti-python, {label}, plain calls"] = run
        # What timed rounds would cost if launch calls were recorded only in other ("trace") rounds:
        # the plugin's rounds with sampling, GPU records without the RUNTIME and DRIVER kinds.
        lean = tuple(v for name, v in k.items() if name not in ("RUNTIME", "DRIVER"))
        choice = select_backend("required", forced="cupti-python")

        def lean_rounds(n: int) -> list[float]:
            with patched(gpu_cuptipy, "KINDS", lean):
                return self._rounds(n, self.sampling, choice)

        self.table["cupti-python rounds, no RUNTIME or DRIVER records (sampling on)"] = lean_rounds
        self.table["cupti-python rounds, every kind (sampling on)"] = lambda n: self._rounds(n, self.sampling, choice)

    def use_trace_study(self) -> None:
        """Only the modes that say what a marked test's measured rounds cost since trace rounds.

        The plugin now times measured rounds without launch-call records and runs one trace round
        after them (`--inferscope-trace-rounds=1`). Here: that, with sampling on and off and for
        both backends; CUPTI started with launch calls switched off around plain calls; and the same
        in collections of 1 warm-up + 5 calls, as a marked test with rounds=5 runs (the first calls
        after a collection starts may cost more than later ones).
        """
        from pytest_inferscope.collectors import CollectionOptions
        from pytest_inferscope.collectors.gpu import select_backend

        cuptipy = select_backend("required", forced="cupti-python")
        traced, traced_off = CollectionOptions(trace_rounds=1), CollectionOptions(cpu="off", trace_rounds=1)
        # GPU activity only in 3 trace rounds (--inferscope-gpu-rounds=trace): the measured rounds run without CUPTI
        lean = CollectionOptions(trace_rounds=1, gpu_rounds="trace", lean_trace_rounds=3)
        lean_off = CollectionOptions(cpu="off", trace_rounds=1, gpu_rounds="trace", lean_trace_rounds=3)
        auto = CollectionOptions(trace_rounds=1, gpu_rounds="auto", lean_trace_rounds=3)
        native = self.native

        def launch_calls_off(n: int) -> list[float]:
            native.collector.start()
            native.collector.set_api_records(False)
            try:
                return self._plain(n, self.torch.cuda.synchronize)
            finally:
                native.collector.stop()
                native.collector.drain()

        self.table = {
            "none (torch.cuda.synchronize)": self.table["none (torch.cuda.synchronize)"],
            "rounds, no collectors": self.table["rounds, no collectors"],
            "rounds, sampling only": self.table["rounds, sampling only"],
            "CUPTI on (native), launch calls off, plain calls": launch_calls_off,
            "CUPTI on (native), every kind we enable, plain calls": self.table["CUPTI on, plain calls"],
            "native rounds, trace rounds, sampling off": lambda n: self._rounds(n, traced_off, native),
            "native rounds, trace rounds (a marked test)": lambda n: self._rounds(n, traced, native),
            "cupti-python rounds, trace rounds (a marked test)": lambda n: self._rounds(n, traced, cuptipy),
            "native rounds, launch calls in every round": self.table["native rounds"],
            "native lean rounds (GPU only in trace rounds), sampling off": lambda n: self._rounds(n, lean_off, native),
            "native lean rounds (GPU only in trace rounds)": lambda n: self._rounds(n, lean, native),
            "cupti-python lean rounds (GPU only in trace rounds)": lambda n: self._rounds(n, lean, cuptipy),
            "tests of 1 + 5 calls, native, auto": lambda n: self._tests(n, auto, native),
            "tests of 1 + 5 calls, sampling only": lambda n: self._tests(n, self.sampling, self.cpu_only),
            "tests of 1 + 5 calls, native, trace rounds": lambda n: self._tests(n, traced, native),
        }

    def _tests(self, n: int, options: Any, choice: Any, warmup: int = 1, calls: int = 5) -> list[float]:
        """n measured calls from collections of `warmup` + `calls` rounds each (their trace rounds left out)."""
        out: list[float] = []
        while len(out) < n:
            out.extend(self._rounds(calls, options, choice, warmup)[: n - len(out)])
        return out

    def _plain(self, n: int, sync: Callable[[], object], before: Callable[[], object] | None = None) -> list[float]:
        now, fn, out = time.perf_counter_ns, self.fn, []
        for _ in range(n):
            if before is not None:
                before()
            t0 = now()
            fn()
            sync()
            out.append((now() - t0) / 1e6)
        return out

    def _cupti(self, n: int, collector: Any) -> list[float]:
        collector.start()
        try:
            return self._plain(n, self.torch.cuda.synchronize)
        finally:
            collector.stop()
            collector.drain()

    def _rounds(self, n: int, options: Any, choice: Any, warmup: int = 0) -> list[float]:
        """The measured rounds' times of one collection of `warmup` + n rounds (warm-up and trace rounds left out)."""
        from pytest_inferscope.collectors import Collection
        from pytest_inferscope.rounds import RoundKind, row_kind

        coll = Collection(options, choice, name="round cost")
        coll.start()
        coll.run_rounds(self.fn, n, warmup)
        coll.stop()
        return [r["wall_ns"] / 1e6 for r in coll.rounds if row_kind(r) is RoundKind.MEASURED]


def each_op(torch: Any, modes: Modes, n: int) -> dict[str, float]:
    """µs per single operation on an idle GPU, median of n, with and without CUPTI collecting."""
    from pytest_inferscope.collectors import Collection

    def per(op: Callable[[], object]) -> float:
        out = []
        for _ in range(n):
            t0 = time.perf_counter_ns()
            op()
            out.append((time.perf_counter_ns() - t0) / 1e3)
        return med(out)

    ops = {
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "DeviceSync": modes.devsync,
        "legacy DeviceSync": lambda: legacy_sync(modes.cuda),
    }
    out = {k: per(v) for k, v in ops.items()}
    coll = Collection(modes.off, modes.native, name="ops")
    coll.start()
    try:
        for k, v in ops.items():
            out[f"{k}, CUPTI on"] = per(v)
        out["CUPTI timestamp, CUPTI on"] = per(modes.native.collector.timestamp)
        out["clock pair (3 readings), CUPTI on"] = per(coll.gpu_session.clock_pair)
    finally:
        coll.stop()
    return out


def records_per_call(torch: Any, modes: Modes, calls: int = 20) -> dict[str, float]:
    from pytest_inferscope.events import Kind

    collector = modes.native.collector
    collector.start()
    for _ in range(calls):
        modes.fn()
    torch.cuda.synchronize()
    collector.stop()
    records, _ = collector.drain()
    kinds = records["kind"]
    return {k.name.lower(): float((kinds == k).sum()) / calls for k in (Kind.KERNEL, Kind.RUNTIME, Kind.MEMCPY)}


@contextmanager
def _timed(label: str) -> Iterator[None]:
    t0 = time.perf_counter()
    yield
    print(f"({label}: {time.perf_counter() - t0:.1f} s)", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workload", default="small_forward", choices=["small_forward", "elementwise_loop"])
    parser.add_argument("--blocks", type=int, default=30, help="interleaved blocks per mode")
    parser.add_argument("--calls", type=int, default=40, help="calls per block")
    parser.add_argument("--study", action="store_true", help="also the modes that take one piece away at a time")
    parser.add_argument(
        "--trace-study", action="store_true", help="only the modes of a marked test's rounds since trace rounds"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    import torch

    w = Workloads(torch)
    w.warm()
    fn = w.named()[args.workload]
    modes = Modes(torch, fn)
    if args.study:
        modes.add_study()
    if args.trace_study:
        modes.use_trace_study()
    names = list(modes.table)
    times: dict[str, list[float]] = {m: [] for m in names}
    with _timed("interleaved blocks"):
        for m in names:  # one untimed block each: first-use costs out of the way
            modes.table[m](5)
        for b in range(args.blocks):
            for m in names[b % len(names) :] + names[: b % len(names)]:
                times[m].extend(modes.table[m](args.calls))
    with _timed("single operations"):
        ops = each_op(torch, modes, 2000)
    recs = records_per_call(torch, modes)
    env = environment(torch)
    base = med(times[names[0]])
    base_q1 = quartiles(times[names[0]])[0]
    print(f"{env['date']}; {env['gpu']}; driver {env['driver']}; torch {env['torch']}; commit {env['commit']}; "
          f"workload {args.workload}; {args.blocks} blocks of {args.calls} calls per mode, interleaved\n")  # fmt: skip
    print("| mode | ms per call (median) | vs none | 25th percentile vs none |")
    print("| --- | --- | --- | --- |")
    for m in names:
        md, q1 = med(times[m]), quartiles(times[m])[0]
        print(f"| {m} | {md:.4f} | {(md / base - 1) * 100:+.1f}% | {(q1 / base_q1 - 1) * 100:+.1f}% |")
    print("\n| single operation, idle GPU | µs (median of 2000) |\n| --- | --- |")
    for k, v in ops.items():
        print(f"| {k} | {v:.2f} |")
    if args.study:
        print(f"\nruntime records with the RUNTIME kind off: {modes.per_call_only_runtime}")
    print("\nrecords per call: " + ", ".join(f"{k} {v:g}" for k, v in recs.items()))
    if args.json is not None:
        args.json.write_text(json.dumps({"environment": env, "times": times, "ops": ops, "records": recs}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
