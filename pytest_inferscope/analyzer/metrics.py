"""The analysis's flat metrics (dotted names): what checks, custom rules and reports read.

Every key is always present (None when not measured), so a custom rule can name any of them.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

import numpy as np

from ..events import Kind
from .base import _MB, union_ns
from .compiles import compile_metrics
from .idle import CAUSES

if TYPE_CHECKING:
    from .context import Context


#: The process CPU time (ns, over the measured rounds) under which its user/system split is not used. The kernel
#: splits a thread's CPU time into user and system by where its timer ticks land (1 to 10 ms apart), so over a few
#: ms the split is a tick or two: a pure-Python call of 5 ms read 39-53% system time now and then on the 2-core VM
#: (1 call in 300 alone, 1 in 30 with a busy loop on its core, 2026-11-29), and was then not called CPU-bound.
KERNEL_SPLIT_MIN_NS = 25_000_000


def compute_metrics(ctx: Context) -> dict[str, float | None]:
    """Flat, dotted metric names, computed from the context once per analysis."""
    lat = ctx.rounds.latency
    m: dict[str, float | None] = {
        f"latency_ms.{k}": getattr(lat, k) for k in ("median", "mean", "p90", "p99", "min", "max", "iqr", "stdev")
    }
    _cpu_metrics(ctx, m)
    _memory_metrics(ctx, m)
    m.update(compile_metrics(ctx.timeline, ctx.rounds.n_rounds))
    if ctx.gpu.collected:
        _gpu_metrics(ctx, m)
    else:
        m.update({f"gpu.{k}": None for k in GPU_METRICS})
    m["trace.dropped_events"] = float(ctx.timeline.dropped)
    # Metrics from collectors other plugins added (hooks.py, pytest_inferscope_collectors).
    extra = ctx.timeline.meta.get("extra_metrics")
    if isinstance(extra, dict):
        m.update({str(k): None if v is None else float(v) for k, v in extra.items() if k not in m})
    if not ctx.rounds.has_counters:
        # Absent is not zero: without per-round counters the CPU and host-memory metrics are unknown.
        for key in m:
            if key.startswith(("cpu.", "mem.")) and key != "cpu.samples":
                m[key] = None
    return m


def _cpu_metrics(ctx: Context, m: dict[str, float | None]) -> None:
    """The test thread's and the process's CPU: busy, working, waiting, threads against cores."""
    c, wall = ctx.rounds.counters, max(1, ctx.rounds.wall_ns)
    m["rounds"] = float(len(ctx.rounds.round_idx))
    cpu = c.get("thread_cpu_ns", 0.0)
    waits = ctx.gpu.wait_ns
    m["cpu.test_thread_busy"] = cpu / wall
    # A thread spinning in a CUDA sync burns CPU time while it waits: busy time outside the
    # waits is what the host really spent working.
    # Time runnable but waiting for a core (other processes, too many threads) is demand for
    # CPU the machine did not meet: the body is still CPU-bound, on a crowded machine.
    runq = c.get("runqueue_ns", 0.0)
    m["cpu.test_thread_runqueue"] = runq / wall
    working = min(cpu + runq, max(0.0, wall - waits["all"]))
    m["cpu.test_thread_working"] = working / wall
    # The kernel share of the process's CPU time, applied to the test thread: user-mode work. Known only over
    # KERNEL_SPLIT_MIN_NS of CPU: below it the working time is not discounted.
    proc_cpu = c.get("user_ns", 0.0) + c.get("sys_ns", 0.0)
    split = c.get("sys_ns", 0.0) / proc_cpu if proc_cpu >= KERNEL_SPLIT_MIN_NS else None
    m["cpu.test_thread_user_busy"] = working / wall * (1.0 - split if split is not None else 1.0)
    m["cpu.torch_threads"] = float(ctx.timeline.meta.get("torch_threads") or 0) or None
    m["cpu.other_threads_native"] = _native_share(ctx.timeline.meta.get("other_threads"))
    m["host.wait_fraction"] = waits["all"] / wall
    m["host.sync_fraction"] = waits["user"] / wall
    m["host.syncs_per_round"] = len(ctx.gpu.sync_calls) / ctx.rounds.n_api_rounds  # read where the calls were recorded
    m["host.copy_call_fraction"] = waits["copy_calls"] / wall
    m["cpu.process_utilisation"] = proc_cpu / wall
    m["cpu.kernel_fraction"] = split
    m["cpu.cores"] = _machine_cores()
    cores = float(available_cores(ctx))
    m["cpu.available_cores"] = cores
    threads = m["cpu.torch_threads"]
    m["cpu.threads_per_core"] = threads / cores if threads else None
    m["cpu.involuntary_switches_per_round"] = c.get("nivcsw", 0.0) / ctx.rounds.n_rounds
    samples = (ctx.timeline.events["kind"] == int(Kind.SAMPLE)).nonzero()[0]  # int, here and below: see events.Kind
    m["cpu.samples"] = float(np.count_nonzero(ctx.rounds.in_rounds[samples]))


def _native_share(other: object) -> float | None:
    """The share of the process's other threads' CPU time over the collection that native threads (not Python ones:
    torch's intra-op pool, a native library's workers) spent (collectors/threads.py); None where not recorded, or where
    a Python thread ended unnoted and its time was not told from theirs (`native_ns` None)."""
    if not isinstance(other, dict) or other.get("native_ns") is None:
        return None
    native, python = float(other["native_ns"]), float(other.get("python_ns") or 0)
    return native / (native + python) if native + python > 0 else None


#: How the peak RSS was read (the memory collector's `rss_peak_source`), as mem.rss_peak_sampled says it.
_PEAK_SOURCES = {"sampled": 1.0, "start and end only": 2.0}


def _memory_metrics(ctx: Context, m: dict[str, float | None]) -> None:
    """Host RSS and faults per round; the GPU memory torch's allocator reported."""
    c = ctx.rounds.counters
    mem = ctx.timeline.meta.get("memory", {})
    m["mem.rss_peak_mb"] = mem.get("rss_peak", 0) / _MB if mem else None
    m["mem.rss_start_mb"] = mem["rss_start"] / _MB if "rss_start" in mem else None  # resident before the rounds
    peak, start = m["mem.rss_peak_mb"], m["mem.rss_start_mb"]
    m["mem.rss_peak_added_mb"] = max(0.0, peak - start) if peak is not None and start is not None else None
    source = mem.get("rss_peak_source")  # the kernel's exact VmHWM (0), sampled (1: a short spike may be missed), or
    m["mem.rss_peak_sampled"] = None if source is None else _PEAK_SOURCES.get(source, 0.0)  # the ends only (2)
    m["mem.rss_growth_mb"] = (c.get("rss_last", 0.0) - c.get("rss_first", 0.0)) / _MB if "rss_first" in c else None
    m["mem.minor_faults_per_round"] = c.get("minflt", 0.0) / ctx.rounds.n_rounds
    m["mem.major_faults"] = c.get("majflt", 0.0)
    m["gpu.memory_peak_mb"] = mem.get("gpu_allocated_peak") / _MB if mem.get("gpu_allocated_peak") else None
    reserved, total = mem.get("gpu_reserved_peak"), mem.get("gpu_total")
    m["gpu.memory_reserved_peak_mb"] = reserved / _MB if reserved else None
    m["gpu.memory_total_mb"] = total / _MB if total else None
    m["gpu.memory_used_fraction"] = reserved / total if reserved and total else None
    # Reserved by torch's caching allocator but not allocated at the peak: cached or fragmented.
    m["gpu.allocator_cached_fraction"] = (
        max(0.0, 1.0 - mem.get("gpu_allocated_peak", 0) / reserved) if reserved else None
    )


#: The GPU metrics (after "gpu."), None when no GPU work was recorded.
GPU_METRICS = (
    "busy_fraction",
    "compute_fraction",
    "communication_fraction",
    "communication_exposed_fraction",
    "communication_overlap",
    "idle_fraction",
    "kernel_launches_per_round",
    "transfer_fraction",
    "h2d_bytes_per_round",
    "d2h_bytes_per_round",
    "allocations_per_round",
    *(f"idle_{cause}_fraction" for cause in CAUSES),
    "transfer_gb_per_s",
    "link_gb_per_s",
    "link_utilisation",
    "pageable_copy_bytes_fraction",
    "blocking_copies_per_round",
    "copy_overlap_fraction",
    "alloc_call_fraction",
)


def _gpu_metrics(ctx: Context, m: dict[str, float | None]) -> None:
    """From the GPU rounds: the measured rounds, or the profile rounds when lean (base.py `gpu_round_idx`)."""
    wall, n_gpu = max(1, ctx.rounds.gpu_wall_ns), ctx.rounds.n_gpu_rounds
    busy = ctx.gpu.busy_ns
    cp = ctx.gpu.copies
    # Collective kernels (NCCL) occupy the GPU while waiting for peers: communication, not compute (comm.py).
    comm = ctx.gpu.comm
    kind = ctx.gpu.records["kind"]
    m["gpu.busy_fraction"] = busy / wall
    if comm.any():
        compute = ((kind == int(Kind.KERNEL)) | (kind == int(Kind.MEMSET))) & ~comm  # columns: no copy of records
        compute_ns = union_ns(ctx.gpu.records["start"][compute], ctx.gpu.records["end"][compute])
    else:  # without collectives, the kernels' and memsets' union the transfer summary and the breakdown read too
        compute_ns = ctx.gpu.compute_ns
    m["gpu.compute_fraction"] = compute_ns / wall
    devices = ctx.gpu.comm_devices
    m["gpu.communication_fraction"] = max((d.comm_ns for d in devices), default=0) / wall
    m["gpu.communication_exposed_fraction"] = max((d.exposed_ns for d in devices), default=0) / wall
    total = sum(d.comm_ns for d in devices)
    m["gpu.communication_overlap"] = sum(d.overlap_ns for d in devices) / total if total else None
    m["gpu.idle_fraction"] = 1.0 - busy / wall
    m["gpu.kernel_launches_per_round"] = np.count_nonzero(ctx.gpu.records["kind"] == int(Kind.KERNEL)) / n_gpu
    m["gpu.transfer_fraction"] = ctx.gpu.copies_ns / wall
    m["gpu.h2d_bytes_per_round"] = float(cp["h2d"]["value"].sum()) / n_gpu
    m["gpu.d2h_bytes_per_round"] = float(cp["d2h"]["value"].sum()) / n_gpu
    ev = ctx.timeline.events
    allocs = (ev["kind"] == int(Kind.GPU_MEMORY)).nonzero()[0]  # (few: the rest is read of them only)
    allocs = allocs[(ev["value"][allocs] > 0) & ctx.rounds.in_gpu_rounds[allocs]]
    m["gpu.allocations_per_round"] = float(len(allocs)) / n_gpu
    for cause in CAUSES:
        m[f"gpu.idle_{cause}_fraction"] = ctx.gpu.idle_fraction(cause)
    t = ctx.gpu.transfer
    m["gpu.transfer_gb_per_s"] = t["gb_per_s"] if t["count"] else None
    m["gpu.link_gb_per_s"] = t["link_gb_s"]
    m["gpu.link_utilisation"] = t["gb_per_s"] / t["link_gb_s"] if t["count"] else None
    m["gpu.pageable_copy_bytes_fraction"] = t["pageable_bytes"] / t["bytes"] if t["bytes"] else None
    m["gpu.blocking_copies_per_round"] = t["blocking_count"] / n_gpu
    m["gpu.copy_overlap_fraction"] = t["overlap_ns"] / t["union_ns"] if t["union_ns"] else None
    alloc = ev.take(ctx.gpu.alloc_calls)  # (not indexing: see GpuView.records)
    scale = ctx.rounds.gpu_api_scale  # allocator calls are read in the API rounds
    m["gpu.alloc_call_fraction"] = union_ns(alloc["start"], alloc["end"]) * scale / wall


@functools.cache
def _machine_cores() -> float:
    """The machine's CPU count: the same for the whole process, and os.cpu_count() reads sysfs each call (~8 µs)."""
    return float(os.cpu_count() or 1)


def available_cores(ctx: Context) -> int:
    """Cores this process may run on: as recorded at collection, else its CPU affinity here."""
    recorded = ctx.timeline.meta.get("cpu_affinity")
    if isinstance(recorded, int | float) and recorded > 0:
        return int(recorded)
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1
