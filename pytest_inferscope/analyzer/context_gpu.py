"""`GpuView`, the GPU side of the context: GPU records, copies, blocking calls, launches, per-stream summary.

GPU activity (kernels, copies, memsets: busy time, counts, bytes) is read from the measured rounds;
what the launch calls tell (sync, copy and allocator calls, blocking copies, idle causes) from the
API rounds (base.py: the trace rounds when there are any), scaled to the measured rounds.

Pure functions of a `Timeline`; nothing here prints or writes.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..caching import cached_property
from ..events import GPU_KINDS, CopyKind, Kind, MemoryKind, unique, unpack_copy_flags
from ..merger import Timeline
from ..results import BreakdownPart
from .base import _MS, LAUNCH_GAP_NS, Rounds, distinct, median, union_ns
from .comm import DeviceComm, comm_mask, per_device
from .gpu_summary import copies_by_direction, gaps_between_work, merged_busy, streams
from .idle import CAUSES, CLOCK_SLACK_NS, IdleGaps, attribute_idle, idle_total_ns, no_gaps

#: Runtime/driver calls that block the calling thread until the device catches up.
SYNC_CALL = re.compile(r"Synchronize|^cudaMemcpy(2D)?$|^cuMemcpy(DtoH|HtoD|DtoD)?$|^cudaMemcpy(To|From)Symbol$")
#: Runtime/driver copy calls: the host time inside them belongs to the transfer (a pageable copy is
#: staged through a host buffer and returns only when done), not to the host's own work.
COPY_CALL = re.compile(r"^(cuda|cu)Memcpy|^cudaMemset$|^cuMemset")
#: Host time per kernel launch below which the host is busy launching rather than computing.
LAUNCH_HOST_NS = 50_000
#: Allocator calls: the caching allocator growing (or, near capacity, freeing and retrying).
ALLOC_CALL = re.compile(r"^(cudaMalloc|cudaFree|cuMemAlloc|cuMemFree|cuMemCreate|cuMemRelease|cuMemMap|cuMemUnmap)")
#: The host<->device link's peak per direction when the collection did not record one
#: (`meta["link_gb_s"]`): PCIe 5.0 x16 (the H200's), raised to the fastest copy measured in the
#: run when one went faster (NVLink-C2C on Grace Hopper). See docs/architecture.md.
LINK_NOMINAL_GB_S = 64.0
#: Copies at least this large count for the measured peak (small ones never reach link speed).
LINK_MEASURE_MIN_BYTES = 1 << 20
#: A copy call followed this soon by a synchronisation is a blocking `.to()` (copy, then stream sync).
COPY_SYNC_NS = 50_000


# Whether a call's name is a synchronisation's, a copy's, the allocator's: remembered across the tests of a process
# (a regex search per distinct name and test cost ~30 µs a ResNet-50 test, each name asked again by the round graph).
@functools.lru_cache(maxsize=4096)
def is_sync_call(name: str) -> bool:
    return bool(SYNC_CALL.search(name))


@functools.lru_cache(maxsize=4096)
def is_copy_call(name: str) -> bool:
    return bool(COPY_CALL.search(name))


@functools.lru_cache(maxsize=4096)
def is_alloc_call(name: str) -> bool:
    return bool(ALLOC_CALL.search(name))


def _compute_kind(kind: np.ndarray) -> np.ndarray:
    """Kernels and memsets (np.isin costs several times more; int, here and below: see events.Kind)."""
    return (kind == int(Kind.KERNEL)) | (kind == int(Kind.MEMSET))


#: `GpuView._copy_figures` of no copies.
_NO_COPIES: dict[str, float] = {
    "measured": 0.0, "time_ns": 0.0, "union_ns": 0, "bytes": 0.0, "pageable_count": 0.0, "pageable_ns": 0.0,
    "pageable_bytes": 0.0, "pinned_bytes": 0.0, "overlap_ns": 0,
}  # fmt: skip


def _intersection_ns(a_s: np.ndarray, a_e: np.ndarray, b_s: np.ndarray, b_e: np.ndarray) -> int:
    """Length of (union of a) intersected with (union of b)."""
    both = union_ns(np.concatenate((a_s, b_s)), np.concatenate((a_e, b_e)))
    return union_ns(a_s, a_e) + union_ns(b_s, b_e) - both


@dataclass(eq=False)
class GpuView:
    """GPU records of the GPU rounds, and what the GPU rules read about them (`Context.gpu`). Reads the timeline
    through its `Rounds`; `launch_gap_ns` is the idle attribution's (see `idle.py`)."""

    rounds: Rounds
    #: A gap between queued GPU work shorter than this is a launch gap (see `idle.py`).
    launch_gap_ns: int = LAUNCH_GAP_NS

    @property
    def timeline(self) -> Timeline:
        return self.rounds.timeline

    @cached_property
    def records(self) -> np.ndarray:
        """GPU work records inside the GPU rounds (the measured rounds, or the trace rounds when lean)."""
        tl = self.timeline
        if not self.collected:  # none to find (a CPU-only test: no need for the rounds' mask)
            return tl.events[:0].copy()
        # compress, take (here and below): indexing copies records one by one, 29 against 6 µs here (ResNet-50)
        return tl.events.compress(tl.mask(*GPU_KINDS) & self.rounds.in_gpu_rounds)

    @cached_property
    def collected(self) -> bool:
        """Whether the timeline has GPU activity at all."""
        return self.timeline.has_gpu

    @cached_property
    def comm(self) -> np.ndarray:
        """Which of `records` are collective kernels (comm.comm_mask), for the metrics and the communication rule."""
        return comm_mask(self.records, self.timeline.strings)

    @cached_property
    def comm_devices(self) -> list[DeviceComm]:
        """Communication, compute and their overlap per device that ran a collective (comm.per_device)."""
        return per_device(self.records, self.timeline.strings, self.comm)

    @cached_property
    def copies(self) -> dict[str, np.ndarray]:
        cp = self.records.compress(self.records["kind"] == int(Kind.MEMCPY))
        if not len(cp):  # (most rounds copy nothing: no flags to unpack)
            return {"all": cp, "h2d": cp, "d2h": cp, "pageable": cp}
        kind, src, dst = unpack_copy_flags(cp["flags"])
        return {
            "all": cp,
            "h2d": cp.compress(kind == int(CopyKind.HTOD)),
            "d2h": cp.compress(kind == int(CopyKind.DTOH)),
            "pageable": cp.compress((src == int(MemoryKind.PAGEABLE)) | (dst == int(MemoryKind.PAGEABLE))),
        }

    @cached_property
    def sync_calls(self) -> np.ndarray:
        """Indices of the test's blocking runtime calls (synchronisations, blocking copies) in the API rounds."""
        tl = self.timeline
        rt = self._api_calls
        if not len(rt):
            return rt
        names = self._calls_named(is_sync_call)
        parent = tl.parent[rt]
        own = tl.events["kind"][np.maximum(parent, 0)] == int(Kind.WAIT)  # our end-of-round synchronize
        return rt[names & ~(own & (parent >= 0))]

    @cached_property
    def _api_calls(self) -> np.ndarray:
        """Indices of the runtime and driver calls in the API rounds (the rounds' mask only when there is one)."""
        runtime = self.timeline.events["kind"] == int(Kind.RUNTIME)
        # (array methods: numpy's functions' wrappers cost more than the work on a short timeline)
        return (runtime & self.rounds.in_api_rounds).nonzero()[0] if np.count_nonzero(runtime) else runtime.nonzero()[0]

    @cached_property
    def _api_call_names(self) -> tuple[np.ndarray, list[int]]:
        """The name of each of `_api_calls`, and their distinct names: found once for the three patterns asked."""
        ids = self.timeline.events["name"][self._api_calls]
        return ids, distinct(ids).tolist()

    def _calls_named(self, named: Callable[[str], bool]) -> np.ndarray:
        """Which of `_api_calls` have a name `named` says yes to: asked once per distinct name of a call, not per
        event (nor per kernel name: those can be long)."""
        ids, names = self._api_call_names
        table = np.zeros(len(self.timeline.strings), dtype=bool)
        table[names] = [named(self.timeline.strings[i]) for i in names]
        return table[ids]

    @cached_property
    def copy_calls(self) -> np.ndarray:
        """Indices of the test's copy calls (any cudaMemcpy*/cuMemcpy*) in the API rounds."""
        rt = self._api_calls
        return rt[self._calls_named(is_copy_call)] if len(rt) else rt

    @cached_property
    def wait_ns(self) -> dict[str, int]:
        """Time the test thread was held by the device: its syncs, ours, its copy calls, and all together.

        Over the measured rounds. With trace rounds, the user's syncs and copy calls are read there and
        scaled (`api_scale`); "all" is the measured rounds' own end-of-round waits plus the time the
        trace rounds' syncs and copy calls held the thread outside their end-of-round waits, scaled.
        """
        ev, r = self.timeline.events, self.rounds
        starts, ends = ev["start"], ev["end"]

        def union(idx: np.ndarray) -> int:  # columns by index: indexing and joining whole records costs more
            return union_ns(starts[idx], ends[idx])

        waits = ev["kind"] == int(Kind.WAIT)
        own = (waits & r.in_rounds).nonzero()[0]
        user, copies = self.sync_calls, self.copy_calls
        round_end = union(own)
        if r.has_trace_rounds:
            own = (waits & r.in_api_rounds).nonzero()[0]
        held = np.concatenate((own, user, copies))
        scale = r.api_scale
        if not r.has_trace_rounds:
            return {"user": union(user), "round_end": round_end, "copy_calls": union(copies), "all": union(held)}
        beyond = union(held) - union(own)
        return {
            "user": round(union(user) * scale),
            "round_end": round_end,
            "copy_calls": round(union(copies) * scale),
            "all": round_end + round(beyond * scale),
        }

    @cached_property
    def launches(self) -> dict[str, float]:
        """Kernel launch statistics over the measured rounds."""
        k = self.records.compress(self.records["kind"] == int(Kind.KERNEL))
        n = len(k)
        # The host's launching time: its CPU time outside device waits (a thread spinning in a
        # synchronize burns CPU, but not launching).
        r = self.rounds
        busy = max(0.0, min(r.counters.get("thread_cpu_ns", 0.0), r.wall_ns - self.wait_ns["all"]))
        per_launch = busy / n if n and r.has_counters else float("inf")
        if r.gpu_lean and n and r.has_counters:  # kernels of the trace rounds, host time of the measured
            per_launch = busy / r.n_rounds / (n / r.n_gpu_rounds)
        return {
            "count": float(n),
            "per_round": n / r.n_gpu_rounds,
            "mean_kernel_ns": float(np.mean(k["end"] - k["start"])) if n else 0.0,
            "host_ns_per_launch": per_launch,
        }

    @property
    def launch_dominated(self) -> bool:
        """Many tiny kernels, each costing the host more than it costs the GPU: the host is busy launching."""
        if not self.collected:
            return False
        lz = self.launches
        return (
            lz["per_round"] >= 100
            and lz["host_ns_per_launch"] < LAUNCH_HOST_NS
            and lz["mean_kernel_ns"] < lz["host_ns_per_launch"]
        )

    @cached_property
    def idle(self) -> IdleGaps:
        """Every GPU idle interval of the API rounds with its cause (see `idle.py`).

        The measured rounds when they recorded the launch calls; else the trace rounds, the only ones
        whose gaps have launch calls to attribute them to. Their totals are scaled to the measured
        rounds' idle time by `idle_scale`; the intervals themselves are the trace rounds'.
        """
        if not self.collected:  # no GPU records, so no gaps: the blocking calls and the masks need not be read
            return no_gaps()
        blocking = unique(np.concatenate((self.sync_calls, self.copy_calls)))  # np.union1d's
        return attribute_idle(
            self.timeline.events, self.rounds.in_api_rounds, self.rounds.api_round_idx, blocking, self.launch_gap_ns
        )

    @cached_property
    def idle_scale(self) -> float:
        """The measured rounds' GPU idle time over the trace rounds' (1 without trace rounds).

        Each cause keeps its share of the trace rounds' idle time, applied to the measured rounds' idle
        time: the measured rounds' gaps have no launch calls to attribute, and a trace round's host is
        slower (its launch calls are recorded), so its gaps are longer, but split the same way.
        """
        if self.rounds.gpu_api_same:  # the launch calls' rounds are the GPU rounds
            return 1.0
        measured = idle_total_ns(self.timeline.events, self.rounds.in_gpu_rounds, self.rounds.gpu_round_idx)
        traced = self.idle.total_ns()
        return measured / traced if traced else 0.0

    def idle_ns(self, cause: str | None = None) -> float:
        """Idle ns of one cause (all when None) over the measured rounds, summed over devices."""
        ns = self.idle.total_ns(cause)
        return ns * self.idle_scale if self.rounds.has_trace_rounds else ns

    def idle_totals(self) -> dict[str, float]:
        return {c: self.idle_ns(c) for c in CAUSES}

    def turn_taking_ns(self) -> float:
        """`IdleGaps.turn_taking_ns` over the measured rounds (scaled like the idle time)."""
        ns = self.idle.turn_taking_ns()
        return ns * self.idle_scale if self.rounds.has_trace_rounds else ns

    def idle_per_round(self, cause: str) -> float:
        """Idle intervals of one cause per round (of the rounds they were read from)."""
        return int(np.count_nonzero(self.idle.mask(cause))) / self.rounds.n_api_rounds

    def idle_fraction(self, cause: str) -> float:
        """Idle time of one cause over the measured wall time (per device, averaged over devices)."""
        return self.idle_ns(cause) / max(1, self.rounds.gpu_wall_ns) / self._devices

    @cached_property
    def _devices(self) -> int:
        """How many devices the GPU records ran on (at least 1)."""
        return max(1, len(distinct(self.records["device"]))) if self.collected else 1

    def host_wait_fraction(self) -> float:
        """Host-wait idle over the measured wall time, less the part the host spent in allocator calls
        (cudaMalloc/cudaFree: memory pressure's time, not the host's own work)."""
        sel = self.idle.mask("host_wait")
        ev = self.timeline.events
        alloc = ev.take(self.alloc_calls)
        in_alloc = _intersection_ns(self.idle.start_ns[sel], self.idle.end_ns[sel], alloc["start"], alloc["end"])
        devices = self._devices
        rest: float = max(0, self.idle.total_ns("host_wait") - in_alloc)
        if self.rounds.has_trace_rounds:
            rest = rest * self.idle_scale
        return rest / max(1, self.rounds.gpu_wall_ns) / devices

    @cached_property
    def transfer(self) -> dict[str, float]:
        """Host<->device copies: bytes, time, bandwidth against the link, blocking copies, overlap with compute."""
        cp = self.copies
        hd = np.concatenate((cp["h2d"], cp["d2h"])) if len(cp["all"]) else cp["all"]
        nominal = float(self.timeline.meta.get("link_gb_s") or LINK_NOMINAL_GB_S)
        # Without copies (most inference rounds) every figure of them is zero, found without array operations.
        figures = self._copy_figures(hd) if len(hd) else _NO_COPIES
        measured, time_ns, nbytes = figures["measured"], figures["time_ns"], figures["bytes"]
        if not self.rounds.gpu_api_same:  # copies matched to their calls where those were recorded
            blocking, blocked_ns = self._blocking_copies(self._api_host_copies())
            scale = self.rounds.gpu_api_scale
            blocking, blocked_ns = round(blocking * scale), round(blocked_ns * scale)
        else:
            blocking, blocked_ns = self._blocking_copies(hd)
        return {
            "count": float(len(hd)),
            "bytes": nbytes,
            "time_ns": time_ns,
            "union_ns": float(figures["union_ns"]),
            "gb_per_s": nbytes / time_ns if time_ns else 0.0,
            "link_gb_s": max(nominal, measured),
            "link_source": 0.0 if measured <= nominal else 1.0,  # 1: the measured peak beat the nominal
            "pageable_count": figures["pageable_count"],
            "pageable_ns": figures["pageable_ns"],
            "pageable_bytes": figures["pageable_bytes"],
            "pinned_bytes": figures["pinned_bytes"],
            "blocking_count": float(blocking),
            "blocking_ns": float(blocked_ns),
            "overlap_ns": float(figures["overlap_ns"]),
            "exposed_ns": float(figures["union_ns"] - figures["overlap_ns"]),
            "compute_ns": float(self.compute_ns),
        }

    def _copy_figures(self, hd: np.ndarray) -> dict[str, float]:
        """`transfer`'s figures of host<->device copy records `hd`: their fastest rate over 1 MB, time, union,
        bytes, pageable ones, and their overlap with the compute."""
        ks, ke = self._compute_spans
        dur = (hd["end"] - hd["start"]).astype(float)
        nbytes = hd["value"].astype(float)
        big = (nbytes >= LINK_MEASURE_MIN_BYTES) & (dur > 0)
        copy_union = union_ns(hd["start"], hd["end"])
        # `_intersection_ns` of the copies and the compute, from the unions of each found already (two of its three)
        both = union_ns(np.concatenate((hd["start"], ks)), np.concatenate((hd["end"], ke))) if len(ks) else 0
        _, src, dst = unpack_copy_flags(hd["flags"])
        pageable = (src == int(MemoryKind.PAGEABLE)) | (dst == int(MemoryKind.PAGEABLE))
        return {
            "measured": float(np.max(nbytes[big] / dur[big])) if big.any() else 0.0,
            "time_ns": float(dur.sum()),
            "union_ns": copy_union,
            "bytes": float(nbytes.sum()),
            "pageable_count": float(np.count_nonzero(pageable)),
            "pageable_ns": float(dur[pageable].sum()),
            "pageable_bytes": float(nbytes[pageable].sum()),
            "pinned_bytes": float(nbytes[~pageable].sum()),
            "overlap_ns": copy_union + self.compute_ns - both if len(ks) else 0,
        }

    @cached_property
    def _compute_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """Starts and ends of the kernels and memsets among the records (columns: no copy of whole records)."""
        sel = _compute_kind(self.records["kind"])
        return self.records["start"][sel], self.records["end"][sel]

    @cached_property
    def compute_ns(self) -> int:
        """Their union: the time the GPU computed (the transfer summary's, the breakdown's, the metrics')."""
        return union_ns(*self._compute_spans)

    @cached_property
    def busy_ns(self) -> int:
        """The union of all the records: the time the GPU was busy (the metrics', and the summary's for one stream).
        Without copies the records are the kernels and memsets, so it is `compute_ns`, not found a second time."""
        if not len(self.copies["all"]):
            return self.compute_ns
        return union_ns(self.records["start"], self.records["end"])

    @cached_property
    def copies_ns(self) -> int:
        """The union of the copies among the records: the time the GPU copied (the metrics' and the breakdown's)."""
        return union_ns(self.copies["all"]["start"], self.copies["all"]["end"])

    def _api_host_copies(self) -> np.ndarray:
        """Host<->device copy records of the API rounds."""
        ev = self.timeline.events
        cp = ev.compress((ev["kind"] == int(Kind.MEMCPY)) & self.rounds.in_api_rounds)
        kind, _, _ = unpack_copy_flags(cp["flags"])
        return cp.compress((kind == int(CopyKind.HTOD)) | (kind == int(CopyKind.DTOH)))

    def _blocking_copies(self, hd: np.ndarray) -> tuple[int, int]:
        """Copies the host waited for: the copy call returned only after the copy ended, or a
        synchronisation right after the call did (PyTorch's blocking `.to()`). (count, host ns held)."""
        ev = self.timeline.events
        calls = ev.take(self.copy_calls)
        if not len(hd) or not len(calls):
            return 0, 0
        calls = calls.take(calls["corr"].argsort(kind="stable"))
        k = calls["corr"].searchsorted(hd["corr"])
        ok = (hd["corr"] > 0) & (k < len(calls))
        ok[ok] = calls["corr"][k[ok]] == hd["corr"][ok]
        c = calls.take(k[ok])
        h = hd.compress(ok)
        held = c["end"] >= h["end"] - CLOCK_SLACK_NS
        syncs = ev.take(self.sync_calls)
        sync_end = np.zeros(len(c), dtype=np.int64)
        if len(syncs):
            s = syncs.take(syncs["start"].argsort(kind="stable"))
            j = s["start"].searchsorted(c["end"], side="left")
            has = j < len(s)
            jj = np.minimum(j, len(s) - 1)
            near = has & (s["start"][jj] - c["end"] <= COPY_SYNC_NS) & (s["end"][jj] >= h["end"] - CLOCK_SLACK_NS)
            held |= near
            sync_end = np.where(near, s["end"][jj], 0)
        until = np.maximum(c["end"], sync_end)
        return int(np.count_nonzero(held)), int(np.sum((until - c["start"])[held]))

    @cached_property
    def alloc_calls(self) -> np.ndarray:
        """Indices of the test's allocator calls (cudaMalloc/cudaFree and the driver's) in the API rounds."""
        rt = self._api_calls
        return rt[self._calls_named(is_alloc_call)] if len(rt) else rt

    def merged_busy(self, device: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The GPU's busy intervals (kernels, copies, memsets on any stream), merged; of one device when given."""
        return merged_busy(self.records, device)

    def summary(self, memory_peak_mb: float | None = None) -> dict[str, Any]:
        """Per-stream busy time, idle gaps, copies by direction and memory kind, blocking syncs (per round);
        `memory_peak_mb` (the metric `gpu.memory_peak_mb`) as given."""
        if not self.collected:
            return {}
        tl, rounds = self.timeline, self.rounds
        n, per_round_ms = rounds.n_gpu_rounds, rounds.per_gpu_round_ms
        idx = rounds.gpu_round_idx
        gaps = gaps_between_work(self.records, np.sort(tl.events["start"][idx]) if len(idx) else None)
        idle = {
            "gaps_per_round": len(gaps) / n,
            "total_ms_per_round": per_round_ms(float(gaps.sum())),
            "longest_ms": float(gaps.max()) / _MS if len(gaps) else 0.0,
            "median_us": median(gaps) / 1e3 if len(gaps) else 0.0,
            # Every idle interval (lead-in and tail of each round too) by cause, per device: idle.py.
            "by_cause_ms_per_round": {c: per_round_ms(ns) for c, ns in self.idle_totals().items()},
        }
        syncs: dict[str, dict[str, float]] = {}
        ev = tl.events
        n_api = rounds.n_api_rounds  # the sync calls are read from the API rounds
        for i in self.sync_calls.tolist():
            entry = syncs.setdefault(tl.name(i), {"count_per_round": 0.0, "blocked_ms_per_round": 0.0})
            entry["count_per_round"] += 1 / n_api
            entry["blocked_ms_per_round"] += float(ev["end"][i] - ev["start"][i]) / _MS / n_api
        return {
            **({"rounds": rounds.gpu_rounds_label} if rounds.gpu_lean else {}),
            **({"gpu_rounds": decided} if (decided := tl.meta.get("gpu_rounds_decision")) else {}),
            "streams": streams(self.records, self.busy_ns, n, per_round_ms, rounds.gpu_wall_ns),
            "idle_gaps": idle,
            "copies": copies_by_direction(self.copies["all"], n, per_round_ms),
            "syncs": syncs,
            "round_end_wait_ms_per_round": rounds.per_round_ms(self.wait_ns["round_end"]),
            "memory_peak_mb": memory_peak_mb,
        }

    def breakdown(self, reason: str) -> list[BreakdownPart]:
        """The breakdown's GPU parts: compute and transfers per GPU round (`reason`: why there are none)."""
        if not self.collected:
            return [
                BreakdownPart("GPU compute", None, None, collected=False, reason=reason),
                BreakdownPart("Transfers (host/device copies)", None, None, collected=False, reason=reason),
            ]
        r = self.rounds
        k_ns, c_ns = self.compute_ns, self.copies_ns
        g_wall, where = max(1, r.gpu_wall_ns), f" ({r.gpu_rounds_kind} rounds)" if r.gpu_lean else ""
        return [
            BreakdownPart(f"GPU compute{where}", r.per_gpu_round_ms(k_ns), k_ns / g_wall),
            BreakdownPart(f"Transfers (host/device copies){where}", r.per_gpu_round_ms(c_ns), c_ns / g_wall),
        ]
