"""The native CUPTI collector on a real GPU, driven through torch.

Skips without a usable CUDA device unless INFERSCOPE_GPU=required, which makes it fail instead.
Nothing in this process runs torch.profiler: Kineto replaces CUPTI's timestamp source process-wide
(GPU.md), so every test that involves it runs in a fresh subprocess, which also keeps the
"who initialised CUPTI first" question out of test order. Lines starting "INFERSCOPE-GPU" are
measurements for docs/gpu-validation.md (run with -s to see them).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from pytest_inferscope.collectors.gpu_native import ALL_API_ENV, traced_api
from pytest_inferscope.events import CopyKind, Domain, Kind, MemoryKind, SyncType, unpack_copy_flags

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]


def _unusable(reason: str) -> None:
    """Skip, or fail when the GPU run requires these tests (INFERSCOPE_GPU=required)."""
    if os.environ.get("INFERSCOPE_GPU") == "required":
        pytest.fail(f"INFERSCOPE_GPU=required but the native GPU tests cannot run: {reason}", pytrace=False)
    pytest.skip(reason)


def _report(what: str, **numbers: object) -> None:
    print(f"INFERSCOPE-GPU {what}: " + ", ".join(f"{k}={v}" for k, v in numbers.items()))


@pytest.fixture(scope="module")
def torch() -> Any:
    try:
        import torch
    except ImportError as exc:
        _unusable(f"torch not importable ({exc})")
    if not torch.cuda.is_available():
        _unusable(f"torch {torch.__version__} sees no CUDA device")
    torch.ones(1, device="cuda").add_(1)  # initialise CUDA before any collection
    torch.cuda.synchronize()
    return torch


@pytest.fixture(scope="module")
def native(torch: Any) -> Any:
    from pytest_inferscope.collectors import gpu_native

    try:
        collector = gpu_native.create()
    except RuntimeError as exc:
        _unusable(f"the native collector cannot run: {exc}")
    _report("backend", version=collector.version())
    return collector


def collect(native: Any, body: Callable[[], object]) -> tuple[np.ndarray, list[str]]:
    """Records of exactly what `body` ran on the GPU."""
    native.synchronize()
    native.drain()
    native.start()
    try:
        body()
    finally:
        native.stop()
    events, names = native.drain()
    assert (events["domain"] == Domain.DEVICE).all()
    return events, names


def of_kind(events: np.ndarray, kind: Kind) -> np.ndarray:
    return events[events["kind"] == kind]


def test_known_kernels_are_counted_named_and_linked_to_their_launches(native: Any, torch: Any) -> None:
    n = 300
    x = torch.ones(1 << 20, device="cuda")
    x.add_(1.0)  # module loading out of the way
    tids: list[int] = []

    def body() -> None:
        for _ in range(n):
            x.add_(1.0)

        def worker() -> None:
            tids.append(threading.get_native_id())
            for _ in range(10):
                x.mul_(1.0)

        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()

    events, names = collect(native, body)
    kernels, api = of_kind(events, Kind.KERNEL), of_kind(events, Kind.RUNTIME)
    counts = {names[i]: int(c) for i, c in zip(*np.unique(kernels["name"], return_counts=True), strict=True)}
    assert sorted(counts.values()) == [10, n], counts  # two kernels, each name interned once
    add_name = next(name for name, c in counts.items() if c == n)
    assert "add" in add_name.lower() and "elementwise" in add_name, add_name
    assert (kernels["end"] > kernels["start"]).all() and native.incomplete() == 0 and native.dropped() == 0

    launch = {int(c): a for a, c in zip(api, api["corr"], strict=True)}
    linked = [launch.get(int(c)) for c in kernels["corr"]]
    assert all(a is not None for a in linked), "every kernel has a runtime/driver record with its correlation id"
    pairs = [(k, a) for k, a in zip(kernels, linked, strict=True) if a is not None]
    lags = np.array([k["start"] - a["start"] for k, a in pairs])
    assert (lags > 0).all(), "no kernel starts before the call that launched it"
    main_tid, worker_tid = threading.get_native_id(), tids[0]
    assert all(int(a["tid"]) == (main_tid if names[k["name"]] == add_name else worker_tid) for k, a in pairs)
    assert all(a["device"] == -1 and a["stream"] == -1 for _, a in pairs)
    api_names = {names[i] for i in api["name"]}
    _report(
        "kernels",
        kernels=len(kernels),
        runtime_records=len(api),
        api_names=sorted(api_names),
        api_records=native.api_records(),
        launch_api=sorted({names[a["name"]] for _, a in pairs}),
        launch_to_start_us=f"{np.percentile(lags, 5) / 1e3:.1f}..{np.percentile(lags, 95) / 1e3:.1f} (p5..p95)",
        kinds=native.enabled(),
        names=list(counts),
    )
    assert all(traced_api(n) for n in api_names), api_names  # launches and syncs only, not cudaGetDevice & co.


def test_buffers_come_zeroed_and_every_record_survives_several_of_them(native: Any, torch: Any) -> None:
    # CUPTI zeroed each 8 MB buffer in the thread that needed one: 0.79 ms a request by its own OVERHEAD records, at
    # the first record after a start and after every flush (H200, 2026-11-28). The buffers are now fresh anonymous
    # pages that CUPTI is told read as zero (native/_cupti.c, buffer_requested); a request must cost far less than
    # clearing 8 MB, and the records of several buffers in turn must all come back.
    x = torch.ones(1 << 10, device="cuda")
    x.add_(1.0)

    def body() -> None:
        for _ in range(3):
            for _ in range(100):
                x.add_(1.0)
            native.synchronize()
            native.flush()  # each flush hands a buffer back and makes CUPTI ask for another

    events, names = collect(native, body)
    kernels = of_kind(events, Kind.KERNEL)
    assert len(kernels) == 300 and {names[i] for i in kernels["name"]} == {names[kernels["name"][0]]}
    assert native.dropped() == 0 and native.incomplete() == 0
    if "OVERHEAD" not in native.enabled():
        pytest.skip("this CUPTI records no OVERHEAD activity: the buffer requests' cost cannot be read")
    overhead = of_kind(events, Kind.OVERHEAD)
    requests = overhead[[names[i] == "Activity buffer request" for i in overhead["name"]]]
    took_us = (requests["end"] - requests["start"]) / 1e3
    _report("buffer requests", n=len(requests), took_us=[round(float(t), 1) for t in took_us])
    assert len(requests) >= 1
    assert took_us.max() < 250, f"a buffer request took {took_us.max():.0f} us: is CUPTI clearing the buffer again?"


def test_a_long_kernel_lasts_what_cuda_events_say(native: Any, torch: Any) -> None:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(100_000_000)  # clocks up before calibrating
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    torch.cuda.synchronize()
    cycles = int(10_000_000 * 100.0 / start.elapsed_time(end))  # about 100 ms

    def body() -> None:
        start.record()
        torch.cuda._sleep(cycles)
        end.record()

    events, names = collect(native, body)
    (spin,) = [k for k in of_kind(events, Kind.KERNEL) if "spin" in names[k["name"]]]
    cupti_ms, events_ms = (spin["end"] - spin["start"]) / 1e6, start.elapsed_time(end)
    _report("long kernel", cupti_ms=f"{cupti_ms:.3f}", cuda_events_ms=f"{events_ms:.3f}", name=names[spin["name"]])
    assert abs(cupti_ms - events_ms) / events_ms < 0.01


def test_pinned_and_pageable_copies_carry_their_memory_kinds(native: Any, torch: Any) -> None:
    n = 4 << 20
    pageable, pinned = torch.ones(n), torch.ones(n).pin_memory()
    events, names = collect(native, lambda: (pageable.to("cuda"), pinned.to("cuda", non_blocking=True)))
    copies = of_kind(events, Kind.MEMCPY)
    copy, src, dst = (np.asarray(a) for a in unpack_copy_flags(copies["flags"]))
    htod = copy == CopyKind.HTOD
    assert {names[i] for i in copies["name"][htod]} == {"Memcpy HtoD"}
    assert (dst[htod] == MemoryKind.DEVICE).all()
    assert copies["value"][htod & (src == MemoryKind.PAGEABLE)].sum() == n * 4
    assert copies["value"][htod & (src == MemoryKind.PINNED)].sum() == n * 4
    api = of_kind(events, Kind.RUNTIME)
    linked = {names[a["name"]] for a in api if a["corr"] in set(copies["corr"].tolist())}
    assert linked, "copies link to the runtime call that made them"
    _report("copies", records=len(copies), api=sorted(linked), ms=((copies["end"] - copies["start"]) / 1e6).round(3))


def test_memset_sync_and_memory_records(native: Any, torch: Any) -> None:
    import ctypes

    try:
        cudart = ctypes.CDLL("libcudart.so.13", mode=os.RTLD_NOLOAD | os.RTLD_NOW)  # torch's own copy
    except OSError:
        cudart = None
    buf = torch.empty(1 << 20, dtype=torch.uint8, device="cuda")
    torch.cuda.empty_cache()
    mib = 1 << 20

    def body() -> None:
        if cudart is not None:
            assert cudart.cudaMemset(ctypes.c_void_p(buf.data_ptr()), 0, ctypes.c_size_t(mib)) == 0
        event = torch.cuda.Event()
        event.record()
        event.synchronize()
        torch.cuda.current_stream().synchronize()
        torch.cuda.synchronize()
        big = torch.empty(64 * mib, dtype=torch.uint8, device="cuda")
        del big
        torch.cuda.empty_cache()

    events, names = collect(native, body)
    if cudart is not None:
        memsets = of_kind(events, Kind.MEMSET)
        assert memsets["value"].tolist() == [mib] and names[memsets["name"][0]] == "Memset"
    sync_types = set(of_kind(events, Kind.SYNC)["flags"].tolist())
    if "SYNCHRONIZATION" in native.enabled():
        assert {SyncType.EVENT_SYNCHRONIZE, SyncType.STREAM_SYNCHRONIZE, SyncType.CONTEXT_SYNCHRONIZE} <= sync_types
    memory = of_kind(events, Kind.GPU_MEMORY)
    if "MEMORY2" in native.enabled():
        assert memory["value"].max() >= 64 * mib and memory["value"].min() <= -64 * mib
        assert (memory["start"] == memory["end"]).all()
    _report("memset/sync/memory", memset=cudart is not None, sync_types=sorted(sync_types), memory=memory["value"])


def test_cupti_timestamps_are_nanoseconds_here(native: Any) -> None:
    d0, h0 = native.timestamp(), time.perf_counter_ns()
    time.sleep(0.2)
    d1, h1 = native.timestamp(), time.perf_counter_ns()
    rate = (d1 - d0) / (h1 - h0)
    _report("clock", cupti_per_host_ns=f"{rate:.5f}")
    assert abs(rate - 1) < 0.01


def test_synchronize_waits_for_torch_work(native: Any, torch: Any) -> None:
    torch.cuda._sleep(50_000_000)
    done = torch.cuda.Event()
    done.record()
    native.synchronize()
    assert done.query()


def test_collection_overhead_on_a_loop_of_small_kernels(native: Any, torch: Any) -> None:
    x = torch.ones(1024, device="cuda")

    def loop() -> None:
        for _ in range(4000):
            x.add_(1.0)
        torch.cuda.synchronize()

    def best(fn: Callable[[], object]) -> float:
        times = []
        for _ in range(3):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    loop()
    plain = best(loop)
    native.start()
    try:
        traced = best(loop)
    finally:
        native.stop()
    events, _ = native.drain()
    assert len(of_kind(events, Kind.KERNEL)) == 3 * 4000 and native.dropped() == 0
    _report(
        "overhead", plain_ms=f"{plain * 1e3:.1f}", collected_ms=f"{traced * 1e3:.1f}", ratio=f"{traced / plain:.2f}"
    )
    assert traced < 3 * plain


def test_only_the_traced_api_calls_are_recorded_and_what_that_saves(
    native: Any, torch: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """2,000 small kernels: traced calls only (the default) against every call (INFERSCOPE_CUPTI_ALL_API=1)."""
    n = 2000
    x = torch.ones(4096, device="cuda")

    def loop() -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            x.add_(1.0)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    loop()
    plain = min(loop() for _ in range(3))
    runs: dict[str, dict[str, Any]] = {}
    for mode in ("traced", "every call", "traced", "every call"):  # interleaved
        if mode == "traced":
            monkeypatch.delenv(ALL_API_ENV, raising=False)
        else:
            monkeypatch.setenv(ALL_API_ENV, "1")  # read by start()
        native.synchronize()
        native.drain()
        t0 = time.perf_counter()
        native.start()
        t1 = time.perf_counter()
        try:
            best = min(loop() for _ in range(3))
        finally:
            t2 = time.perf_counter()
            native.stop()
            t3 = time.perf_counter()
        events, names = native.drain()
        kernels, api = of_kind(events, Kind.KERNEL), of_kind(events, Kind.RUNTIME)
        assert len(kernels) == 3 * n and native.dropped() == 0, mode
        assert set(kernels["corr"].tolist()) <= set(api["corr"].tolist()), "every kernel has its launch record"
        run = runs.setdefault(mode, {"best": [], "start_ms": [], "stop_ms": []})
        run["best"].append(best)
        run["start_ms"].append(round((t1 - t0) * 1e3, 2))
        run["stop_ms"].append(round((t3 - t2) * 1e3, 2))
        run["api_per_kernel"] = round(len(api) / len(kernels), 2)
        run["names"] = sorted({names[i] for i in api["name"]})
        run["api_records"] = native.api_records()
    monkeypatch.delenv(ALL_API_ENV, raising=False)
    for mode, run in runs.items():
        best = min(run["best"])
        _report(
            f"API records, {mode}",
            plain_ms=f"{plain * 1e3:.1f}",
            collected_ms=f"{best * 1e3:.1f}",
            us_per_launch=f"{(best - plain) / n * 1e6:.2f}",
            api_records_per_kernel=run["api_per_kernel"],
            start_ms=run["start_ms"],
            stop_ms=run["stop_ms"],
            names=run["names"][:12],
            api_records=run["api_records"],
        )
    traced, every = runs["traced"], runs["every call"]
    assert all(traced_api(name) for name in traced["names"]), traced["names"]
    assert "traced calls of" in traced["api_records"] and "INFERSCOPE_CUPTI_ALL_API=1" in every["api_records"]
    assert [name for name in every["names"] if not traced_api(name)], "every call includes torch's other calls"
    assert traced["api_per_kernel"] < every["api_per_kernel"]


# -- other CUPTI clients, each in a fresh process --------------------------------------------------------

PRELUDE = """
import json, sys, time
import torch
import numpy as np
from pytest_inferscope.collectors import gpu_native
from pytest_inferscope.events import EVENT_DTYPE, Kind

x = torch.ones(1 << 20, device="cuda")
x.add_(1.0)
torch.cuda.synchronize()

def ours(n=100):
    c = gpu_native.create()
    c.start()
    for _ in range(n):
        x.add_(1.0)
    c.stop()
    ev, names = c.drain()
    return int((ev["kind"] == Kind.KERNEL).sum())

def theirs(n=100):
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(n):
            x.add_(1.0)
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

def theirs_calls(n=100):
    acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(n):
            x.add_(1.0)
        torch.cuda.synchronize()
    ev = prof.events()
    return {"kernels": sum(1 for e in ev if e.device_type == torch.autograd.DeviceType.CUDA),
            "launch_calls": sum(1 for e in ev if e.name.startswith("cudaLaunchKernel")),
            "runtime_names": sorted({e.name for e in ev if e.name.startswith("cuda")})[:12]}

def rate():
    c = gpu_native.create()
    d0, h0 = c.timestamp(), time.perf_counter_ns()
    time.sleep(0.2)
    return (c.timestamp() - d0) / (time.perf_counter_ns() - h0)
"""


def run_script(body: str, check: bool = True, **env: str) -> dict[str, Any]:
    """Runs PRELUDE + body in a fresh interpreter; its last stdout line is a JSON object."""
    environ = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(body)],
        capture_output=True,
        text=True,
        env=environ,
        timeout=300,
    )
    if not check and proc.returncode != 0:
        return {"returncode": proc.returncode, "stderr": proc.stderr[-1500:]}
    assert proc.returncode == 0, proc.stderr[-4000:]
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_torch_profiler_still_records_kernels_after_our_collector(torch: Any) -> None:
    result = run_script("print(json.dumps({'ours': ours(), 'theirs': theirs_calls(), 'ours_again': ours()}))")
    _report("ours then torch.profiler", **result)
    assert result["ours"] == 100
    assert result["theirs"]["kernels"] >= 100
    assert result["theirs"]["launch_calls"] >= 100, "our per-call API switches must not outlive our collection"
    assert result["ours_again"] == 100


def test_busy_while_torch_profiler_is_active_then_usable_after(torch: Any) -> None:
    result = run_script(
        """
        out = {}
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        c = gpu_native.create()
        with torch.profiler.profile(activities=acts) as prof:
            try:
                c.start()
                out["busy"] = None
            except Exception as exc:
                out["busy"] = [type(exc).__name__, str(exc)]
            for _ in range(100):
                x.add_(1.0)
            torch.cuda.synchronize()
        out["theirs"] = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        out["rate_after_profiler"] = rate()
        out["ours_after"] = ours()
        print(json.dumps(out))
        """,
    )
    _report("busy", **result)
    assert result["busy"] is not None and result["busy"][0] == "CuptiBusyError", result["busy"]
    assert "in use by another profiler" in result["busy"][1]
    assert result["theirs"] >= 100, "our refused start must not disturb the running profiler"
    assert result["ours_after"] == 100


def test_what_cupti_itself_says_under_an_active_torch_profiler(torch: Any) -> None:
    """Measurement, not contract: the raw extension, without gpu_native's torch check, under Kineto."""
    result = run_script(
        """
        from pytest_inferscope import _cupti
        out = {}
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        raw = _cupti.Collector()
        with torch.profiler.profile(activities=acts) as prof:
            try:
                raw.start()
                out["raw_start"] = "started"
                for _ in range(100):
                    x.add_(1.0)
                torch.cuda.synchronize()
                raw.stop()
                buf, names = raw.drain()
                out["raw_kernels"] = int((np.frombuffer(buf, dtype=EVENT_DTYPE)["kind"] == Kind.KERNEL).sum())
            except Exception as exc:
                out["raw_start"] = f"{type(exc).__name__}: {exc}"
        out["theirs"] = sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
        out["theirs_next_session"] = theirs()
        out["library"] = _cupti.library()
        print(json.dumps(out))
        """,
        check=False,
    )
    _report("raw CUPTI under torch.profiler", **result)


def test_synchronize_waits_for_cupy_work(torch: Any) -> None:
    if importlib.util.find_spec("cupy") is None:
        pytest.skip("CuPy not installed")
    result = run_script(
        """
        import cupy
        a = cupy.ones((4096, 4096), dtype=cupy.float32)
        for _ in range(20):
            a = a @ a / 4096
        done = cupy.cuda.Event()
        done.record()
        gpu_native.create().synchronize()
        print(json.dumps({"done": bool(done.done)}))
        """
    )
    assert result["done"]


def test_what_synchronize_means_for_jax(torch: Any) -> None:
    """Measurement, not contract: JAX may still hold work it has not yet submitted to the GPU."""
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX not installed")
    result = run_script(
        """
        import jax, jax.numpy as jnp
        a = jnp.ones((4096, 4096), dtype=jnp.float32)
        for _ in range(20):
            a = a @ a / 4096
        gpu_native.create().synchronize()
        print(json.dumps({"ready_after_synchronize": bool(a.is_ready()), "device": str(a.devices())}))
        """,
        check=False,
        XLA_PYTHON_CLIENT_PREALLOCATE="false",  # JAX would otherwise take 75% of the GPU
    )
    _report("synchronize under JAX", **result)


def test_the_collection_records_the_pcie_link_sysfs_gives(torch: Any) -> None:
    from pytest_inferscope.collectors import Collection, CollectionOptions
    from pytest_inferscope.collectors.gpu import select_backend
    from pytest_inferscope.collectors.link import pcie_link

    coll = Collection(CollectionOptions(cpu="off"), select_backend("required", forced="native"), name="link")
    coll.start()
    coll.run_rounds(lambda: torch.ones(1 << 20, device="cuda").add_(1), 2, 0)
    raw = coll.stop()
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    bus = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    expected = pcie_link(bus)
    _report("link", bus=bus, recorded=raw.meta.get("link"), gb_s=raw.meta.get("link_gb_s"), sysfs=expected)
    if expected is None:
        assert "link_gb_s" not in raw.meta
    else:
        assert raw.meta["link_gb_s"] == round(expected[0], 2)
        assert raw.meta["link"].lower() == expected[1].lower()  # CUDA may spell the bus id in capitals


def test_api_records_switch_off_for_some_launches_and_on_again(native: Any, torch: Any) -> None:
    """The building block of timed rounds without launch-call records: GPU records go on, launch calls stop."""
    x = torch.ones(4096, device="cuda")
    switch_ms: list[float] = []

    def body() -> None:
        for n, on in ((10, None), (20, False), (30, True)):
            if on is not None:
                torch.cuda.synchronize()
                t0 = time.perf_counter()
                native.set_api_records(on)
                switch_ms.append((time.perf_counter() - t0) * 1e3)
            for _ in range(n):
                x.add_(1)
        torch.cuda.synchronize()

    events, names = collect(native, body)
    kernels = events[events["kind"] == Kind.KERNEL]
    launches = events[(events["kind"] == Kind.RUNTIME) & np.isin(events["name"], [
        i for i, n in enumerate(names) if n.startswith("cudaLaunchKernel")])]  # fmt: skip
    linked = np.isin(kernels["corr"], launches["corr"])
    _report("api records switched", kernels=len(kernels), launches=len(launches), linked=int(linked.sum()),
            off_ms=round(switch_ms[0], 3), on_ms=round(switch_ms[1], 3))  # fmt: skip
    assert len(kernels) == 60 and len(launches) == 40 and int(linked.sum()) == 40
    order = np.argsort(kernels["start"])
    assert list(linked[order]) == [True] * 10 + [False] * 20 + [True] * 30
    assert "runtime:" in native.api_records()
