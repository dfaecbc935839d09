"""What every rule reads: the measured rounds, their counters, and aggregates computed once.

Pure functions of a `Timeline`; nothing here prints or writes.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..events import GPU_KINDS, WARMUP_FLAG, CopyKind, Kind, MemoryKind, unpack_copy_flags
from ..merger import Timeline
from ..results import BreakdownPart, EventRef, Hotspot, LatencyStats, ScopeStat

_MS = 1e6
_MB = 1024 * 1024
#: Python files that are the framework rather than the user's code, for "framework overhead".
FRAMEWORK_MARKERS = ("(torch/", "(transformers/", "(accelerate/", "/torch/", "/transformers/")
#: Runtime/driver calls that block the calling thread until the device catches up.
SYNC_CALL = re.compile(r"Synchronize|^cudaMemcpy(2D)?$|^cuMemcpy(DtoH|HtoD|DtoD)?$|^cudaMemcpy(To|From)Symbol$")
#: Runtime/driver copy calls: the host time inside them belongs to the transfer (a pageable copy is
#: staged through a host buffer and returns only when done), not to the host's own work.
COPY_CALL = re.compile(r"^(cuda|cu)Memcpy|^cudaMemset$|^cuMemset")
#: Host time per kernel launch below which the host is busy launching rather than computing.
LAUNCH_HOST_NS = 50_000


def union_ns(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total length of the union of [start, end) intervals."""
    if len(starts) == 0:
        return 0
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    # A new run begins where a start lies past everything before it.
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    run_ends = np.append(run_end[idx[1:] - 1], run_end[-1])
    return int(np.sum(run_ends - s[idx]))


@dataclass
class Context:
    """A timeline seen through its measured (non-warm-up) rounds."""

    timeline: Timeline
    gpu_reason: str = "no GPU data was collected"
    metrics: dict[str, float | None] = field(default_factory=dict)

    # -- rounds ----------------------------------------------------------------

    @cached_property
    def round_idx(self) -> np.ndarray:
        """Indices of the measured rounds (all rounds when every round was a warm-up)."""
        ev = self.timeline.events
        rounds = np.flatnonzero(ev["kind"] == Kind.ROUND)
        measured = rounds[(ev["flags"][rounds] & WARMUP_FLAG) == 0]
        return measured if len(measured) else rounds

    @cached_property
    def round_ms(self) -> np.ndarray:
        ev = self.timeline.events[self.round_idx]
        return (ev["end"] - ev["start"]) / _MS

    @cached_property
    def latency(self) -> LatencyStats:
        ev = self.timeline.events
        rounds = np.flatnonzero(ev["kind"] == Kind.ROUND)
        warm = rounds[(ev["flags"][rounds] & WARMUP_FLAG) != 0]
        return LatencyStats.from_samples(list(self.round_ms), list((ev["end"][warm] - ev["start"][warm]) / _MS))

    @property
    def n_rounds(self) -> int:
        return max(1, len(self.round_idx))

    @cached_property
    def wall_ns(self) -> int:
        """Measured wall time: the sum of the measured rounds (or the whole test without rounds)."""
        if len(self.round_idx):
            ev = self.timeline.events[self.round_idx]
            return int(np.sum(ev["end"] - ev["start"]))
        tests = self.timeline.events[self.timeline.events["kind"] == Kind.TEST]
        return int(np.sum(tests["end"] - tests["start"])) if len(tests) else 1

    @cached_property
    def in_rounds(self) -> np.ndarray:
        """Mask of events that happen inside a measured round (a sample happens when it was taken: its end)."""
        ev = self.timeline.events
        if not len(self.round_idx):
            return np.ones(len(ev), dtype=bool)
        at = np.where(ev["kind"] == Kind.SAMPLE, ev["end"] - 1, ev["start"])
        r = ev[self.round_idx]
        order = np.argsort(r["start"])
        rs, re = r["start"][order], r["end"][order]
        k = np.searchsorted(rs, at, side="right") - 1
        ok = k >= 0
        return ok & (at < re[np.maximum(k, 0)])

    @property
    def has_counters(self) -> bool:
        """Whether the collection kept per-round process counters (an imported trace has none)."""
        return bool(self.timeline.meta.get("rounds"))

    @cached_property
    def counters(self) -> dict[str, float]:
        """Sums of the per-round process counters over the measured rounds."""
        rows: list[dict[str, Any]] = list(self.timeline.meta.get("rounds", []))
        measured = [r for r in rows if not r.get("warmup")] or rows
        keys = ("wall_ns", "thread_cpu_ns", "user_ns", "sys_ns", "minflt", "majflt", "nvcsw", "nivcsw", "runqueue_ns")
        out = {k: float(sum(r.get(k, 0) for r in measured)) for k in keys}
        out["rounds"] = float(len(measured))
        if measured:
            out["rss_first"] = float(measured[0].get("rss_start", 0))
            out["rss_last"] = float(measured[-1].get("rss_end", 0))
        return out

    @cached_property
    def rss_per_round(self) -> np.ndarray:
        rows = [r for r in self.timeline.meta.get("rounds", []) if not r.get("warmup")]
        return np.array([r.get("rss_end", 0) for r in rows], dtype=float)

    # -- CPU samples ------------------------------------------------------------

    @cached_property
    def sample_weights(self) -> dict[int, float]:
        """Sampled ns per folded-stack name id, inside measured rounds."""
        ev = self.timeline.events
        sel = (ev["kind"] == Kind.SAMPLE) & self.in_rounds
        names, dur = ev["name"][sel], (ev["end"][sel] - ev["start"][sel]).astype(float)
        if not len(names):
            return {}
        weights = np.bincount(names, weights=dur)
        nz = np.flatnonzero(weights)
        return {int(i): float(weights[i]) for i in nz}

    @cached_property
    def hotspots(self) -> list[Hotspot]:
        self_ns: dict[str, float] = {}
        total_ns: dict[str, float] = {}
        for name, w in self.sample_weights.items():
            frames = self.timeline.strings[name].split(";")
            if frames == ["<harness>"]:
                continue
            self_ns[frames[-1]] = self_ns.get(frames[-1], 0.0) + w
            for f in set(frames):
                total_ns[f] = total_ns.get(f, 0.0) + w
        n, wall = self.n_rounds, max(1, self.wall_ns)
        spots = [
            Hotspot(
                function=f,
                self_ms=self_ns.get(f, 0.0) / _MS / n,
                total_ms=t / _MS / n,
                share=self_ns.get(f, 0.0) / wall,
            )
            for f, t in total_ns.items()
        ]
        spots.sort(key=lambda h: (h.self_ms, h.total_ms), reverse=True)
        return spots

    @cached_property
    def framework_ns(self) -> float:
        """Sampled time whose innermost frame is in the framework's Python code."""
        total = 0.0
        for name, w in self.sample_weights.items():
            leaf = self.timeline.strings[name].rsplit(";", 1)[-1]
            if any(m in leaf for m in FRAMEWORK_MARKERS):
                total += w
        return total

    # -- scopes -----------------------------------------------------------------

    def path(self, i: int) -> str:
        """Scope path of a scope or module span: the names of its enclosing scopes and modules."""
        return self._paths[i]

    @cached_property
    def _paths(self) -> dict[int, str]:
        """Paths of every scope and module span, each built once from its parent's."""
        tl = self.timeline
        ev = tl.events
        idx = np.flatnonzero(tl.mask(Kind.SCOPE, Kind.MODULE))
        memo: dict[int, str] = {}
        names, parents, kinds = ev["name"][idx].tolist(), tl.parent[idx].tolist(), ev["kind"].tolist()
        for i, name, p in zip(idx.tolist(), names, parents, strict=True):  # in start order: parents come first
            own = tl.strings[name]
            memo[i] = f"{memo[p]}/{own}" if p >= 0 and kinds[p] in (Kind.SCOPE, Kind.MODULE) and p in memo else own
        return memo

    def _gpu_inside(self) -> tuple[dict[int, float], dict[int, float]]:
        """GPU ns and kernel launches per scope/module span, its children's included.

        A GPU record's parent is the span its launch ran in (the merger's doing), so the
        per-parent sums (one bincount) are propagated up the span tree, innermost spans first.
        """
        tl = self.timeline
        ev = tl.events
        if not self.has_gpu:
            return {}, {}
        gpu = np.flatnonzero(tl.mask(*GPU_KINDS) & self.in_rounds)
        parents = tl.parent[gpu]
        keep = parents >= 0
        gpu, parents = gpu[keep], parents[keep]
        n = len(ev)
        ns = np.bincount(parents, weights=(ev["end"][gpu] - ev["start"][gpu]).astype(float), minlength=n)
        count = np.bincount(parents, weights=(ev["kind"][gpu] == Kind.KERNEL).astype(float), minlength=n)
        spans = np.flatnonzero(tl.mask(Kind.SCOPE, Kind.MODULE, Kind.ROUND, Kind.TEST, Kind.WAIT, Kind.CALL))
        span_parent = tl.parent[spans].tolist()
        for i, p in zip(spans[::-1].tolist(), span_parent[::-1], strict=True):  # reverse start order: bottom-up
            if p >= 0 and ns[i]:
                ns[p] += ns[i]
                count[p] += count[i]
        touched = spans[ns[spans] > 0].tolist()
        return {i: float(ns[i]) for i in touched}, {i: float(count[i]) for i in touched}

    @cached_property
    def scopes(self) -> list[ScopeStat]:
        tl = self.timeline
        ev = tl.events
        idx = np.flatnonzero(tl.mask(Kind.SCOPE, Kind.MODULE) & self.in_rounds)
        paths = self._paths
        agg: dict[tuple[str, str], list[float]] = {}
        kinds, durs = ev["kind"][idx].tolist(), (ev["end"][idx] - ev["start"][idx]).tolist()
        gpu_ns, launches = self._gpu_inside()
        gpu_agg: dict[tuple[str, str], list[float]] = {}
        for i, k, d in zip(idx.tolist(), kinds, durs, strict=True):
            key = (paths[i], "scope" if k == Kind.SCOPE else "module")
            agg.setdefault(key, []).append(float(d))
            g = gpu_agg.setdefault(key, [0.0, 0.0])
            g[0] += gpu_ns.get(i, 0.0)
            g[1] += launches.get(i, 0.0)
        wall, n = max(1, self.wall_ns), self.n_rounds
        has_gpu = self.has_gpu
        out = [
            ScopeStat(
                path=p,
                kind=k,
                count=len(d),
                total_ms=sum(d) / _MS / n,
                mean_ms=sum(d) / len(d) / _MS,
                share=sum(d) / wall,
                gpu_ms=gpu_agg[(p, k)][0] / _MS / n if has_gpu else None,
                launches=gpu_agg[(p, k)][1] / n if has_gpu else None,
            )
            for (p, k), d in agg.items()
        ]
        out.sort(key=lambda s: s.total_ms, reverse=True)
        return out

    # -- GPU --------------------------------------------------------------------

    @cached_property
    def gpu(self) -> np.ndarray:
        """GPU work records inside measured rounds."""
        ev = self.timeline.events
        return ev[np.isin(ev["kind"], np.asarray(GPU_KINDS, dtype=np.uint8)) & self.in_rounds]

    @property
    def has_gpu(self) -> bool:
        return self.timeline.has_gpu

    @cached_property
    def copies(self) -> dict[str, np.ndarray]:
        cp = self.gpu[self.gpu["kind"] == Kind.MEMCPY]
        kind, src, dst = unpack_copy_flags(cp["flags"])
        return {
            "all": cp,
            "h2d": cp[kind == CopyKind.HTOD],
            "d2h": cp[kind == CopyKind.DTOH],
            "pageable": cp[(src == MemoryKind.PAGEABLE) | (dst == MemoryKind.PAGEABLE)],
        }

    @cached_property
    def test_tid(self) -> int | None:
        ev = self.timeline.events
        return int(ev["tid"][self.round_idx[0]]) if len(self.round_idx) else None

    @cached_property
    def sync_calls(self) -> np.ndarray:
        """Indices of the test's blocking runtime calls (synchronisations, blocking copies) in measured rounds."""
        tl = self.timeline
        ev = tl.events
        rt = np.flatnonzero((ev["kind"] == Kind.RUNTIME) & self.in_rounds)
        if not len(rt):
            return rt
        names = self._name_table(SYNC_CALL)[ev["name"][rt]]
        own = ev["kind"][np.maximum(tl.parent[rt], 0)] == Kind.WAIT  # our end-of-round synchronize
        return rt[names & ~(own & (tl.parent[rt] >= 0))]

    def _name_table(self, pattern: re.Pattern[str]) -> np.ndarray:
        """Whether each interned name matches: one regex per distinct name, not per event."""
        return np.fromiter((bool(pattern.search(s)) for s in self.timeline.strings), dtype=bool,
                           count=len(self.timeline.strings))  # fmt: skip

    @cached_property
    def copy_calls(self) -> np.ndarray:
        """Indices of the test's copy calls (any cudaMemcpy*/cuMemcpy*) in measured rounds."""
        tl = self.timeline
        ev = tl.events
        rt = np.flatnonzero((ev["kind"] == Kind.RUNTIME) & self.in_rounds)
        return rt[self._name_table(COPY_CALL)[ev["name"][rt]]] if len(rt) else rt

    @cached_property
    def wait_ns(self) -> dict[str, int]:
        """Time the test thread was held by the device: its syncs, ours, its copy calls, and all together."""
        ev = self.timeline.events
        own = ev[(ev["kind"] == Kind.WAIT) & self.in_rounds]
        user = ev[self.sync_calls]
        copies = ev[self.copy_calls]
        held = np.concatenate((own, user, copies))
        return {
            "user": union_ns(user["start"], user["end"]),
            "round_end": union_ns(own["start"], own["end"]),
            "copy_calls": union_ns(copies["start"], copies["end"]),
            "all": union_ns(held["start"], held["end"]),
        }

    @cached_property
    def launches(self) -> dict[str, float]:
        """Kernel launch statistics over the measured rounds."""
        k = self.gpu[self.gpu["kind"] == Kind.KERNEL]
        n = len(k)
        busy = self.counters.get("thread_cpu_ns", 0.0)
        return {
            "count": float(n),
            "per_round": n / self.n_rounds,
            "mean_kernel_ns": float(np.mean(k["end"] - k["start"])) if n else 0.0,
            "host_ns_per_launch": busy / n if n and self.has_counters else float("inf"),
        }

    @property
    def launch_dominated(self) -> bool:
        """Many tiny kernels, each costing the host more than it costs the GPU: the host is busy launching."""
        lz = self.launches
        return (
            self.has_gpu
            and lz["per_round"] >= 100
            and lz["host_ns_per_launch"] < LAUNCH_HOST_NS
            and lz["mean_kernel_ns"] < lz["host_ns_per_launch"]
        )

    # -- helpers for rules ---------------------------------------------------------

    def per_round_ms(self, ns: float) -> float:
        return ns / _MS / self.n_rounds

    def refs(self, idx: np.ndarray | list[int], limit: int = 5) -> list[EventRef]:
        """The longest of the given events, as report references."""
        ev = self.timeline.events
        idx = np.asarray(idx, dtype=np.int64)
        if not len(idx):
            return []
        dur = ev["end"][idx] - ev["start"][idx]
        top = idx[np.argsort(-dur, kind="stable")[:limit]]
        return [
            EventRef(
                kind=Kind(int(ev["kind"][i])).name.lower(),
                name=self.timeline.name(int(i)),
                start_ms=float(ev["start"][i]) / _MS,
                duration_ms=float(ev["end"][i] - ev["start"][i]) / _MS,
            )
            for i in top
        ]

    def merged_busy(self) -> tuple[np.ndarray, np.ndarray]:
        """The GPU's busy intervals (kernels, copies, memsets on any stream), merged."""
        g = self.gpu
        if not len(g):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        order = np.argsort(g["start"], kind="stable")
        s, e = g["start"][order], g["end"][order]
        run_end = np.maximum.accumulate(e)
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] > run_end[:-1]
        idx = np.flatnonzero(new)
        return s[idx], np.append(run_end[idx[1:] - 1], run_end[-1])

    def gpu_summary(self) -> dict[str, Any]:
        """Per-stream busy time, idle gaps, copies by direction and memory kind, blocking syncs (per round)."""
        if not self.has_gpu:
            return {}
        tl, g, n = self.timeline, self.gpu, self.n_rounds
        streams = []
        key = (g["device"].astype(np.int64) << 32) | (g["stream"].astype(np.int64) & 0xFFFFFFFF)
        for k in np.unique(key).tolist():
            dev, stream = k >> 32, int(np.int32(np.uint32(k & 0xFFFFFFFF)))
            sel = g[key == k]
            busy = union_ns(sel["start"], sel["end"])
            streams.append(
                {
                    "device": dev,
                    "stream": stream,
                    "kernels_per_round": float(np.count_nonzero(sel["kind"] == Kind.KERNEL)) / n,
                    "copies_per_round": float(np.count_nonzero(sel["kind"] == Kind.MEMCPY)) / n,
                    "busy_ms_per_round": self.per_round_ms(busy),
                    "busy_share": busy / max(1, self.wall_ns),
                }
            )
        # Idle gaps: between merged busy intervals inside the same round.
        s, e = self.merged_busy()
        gaps = s[1:] - e[:-1]
        if len(self.round_idx) and len(gaps):
            r = tl.events[self.round_idx]
            rid = np.searchsorted(np.sort(r["start"]), s, side="right") - 1
            gaps = gaps[rid[1:] == rid[:-1]]
        gaps = gaps[gaps > 0]
        idle = {
            "gaps_per_round": len(gaps) / n,
            "total_ms_per_round": self.per_round_ms(float(gaps.sum())),
            "longest_ms": float(gaps.max()) / _MS if len(gaps) else 0.0,
            "median_us": float(np.median(gaps)) / 1e3 if len(gaps) else 0.0,
        }
        copies = {}
        cp = self.copies["all"]
        kind, src, dst = unpack_copy_flags(cp["flags"])
        for label, mask in (
            ("HtoD", kind == CopyKind.HTOD),
            ("DtoH", kind == CopyKind.DTOH),
            ("DtoD", kind == CopyKind.DTOD),
            ("other", ~np.isin(kind, [1, 2, 8])),
        ):
            sel = cp[mask]
            if not len(sel):
                continue
            host_side = np.where(kind[mask] == CopyKind.DTOH, dst[mask], src[mask])
            dur = float(np.sum(sel["end"] - sel["start"]))
            copies[label] = {
                "count_per_round": len(sel) / n,
                "mb_per_round": float(np.sum(sel["value"])) / _MB / n,
                "ms_per_round": self.per_round_ms(dur),
                "gb_per_s": float(np.sum(sel["value"])) / dur if dur else 0.0,
                "pageable_per_round": np.count_nonzero(host_side == MemoryKind.PAGEABLE) / n,
                "pinned_per_round": np.count_nonzero(host_side == MemoryKind.PINNED) / n,
            }
        syncs: dict[str, dict[str, float]] = {}
        ev = tl.events
        for i in self.sync_calls.tolist():
            entry = syncs.setdefault(tl.name(i), {"count_per_round": 0.0, "blocked_ms_per_round": 0.0})
            entry["count_per_round"] += 1 / n
            entry["blocked_ms_per_round"] += float(ev["end"][i] - ev["start"][i]) / _MS / n
        return {
            "streams": streams,
            "idle_gaps": idle,
            "copies": copies,
            "syncs": syncs,
            "round_end_wait_ms_per_round": self.per_round_ms(self.wait_ns["round_end"]),
            "memory_peak_mb": self.metrics.get("gpu.memory_peak_mb"),
        }

    def breakdown(self) -> list[BreakdownPart]:
        """The report's Timeline Breakdown, per measured round (parts may overlap)."""
        wall = max(1, self.wall_ns)
        c = self.counters
        cpu_ns = c.get("thread_cpu_ns", 0.0)
        if self.has_counters:
            parts = [
                BreakdownPart("CPU (test thread on CPU)", self.per_round_ms(cpu_ns), cpu_ns / wall),
                BreakdownPart(
                    "CPU wait (test thread off CPU)",
                    self.per_round_ms(max(0.0, wall - cpu_ns)),
                    max(0.0, wall - cpu_ns) / wall,
                ),
            ]
        else:
            why = "the collection kept no per-round CPU counters (e.g. an imported torch.profiler trace)"
            parts = [
                BreakdownPart("CPU (test thread on CPU)", None, None, collected=False, reason=why),
                BreakdownPart("CPU wait (test thread off CPU)", None, None, collected=False, reason=why),
            ]
        if self.has_gpu:
            kernels = self.gpu[np.isin(self.gpu["kind"], [Kind.KERNEL, Kind.MEMSET])]
            k_ns = union_ns(kernels["start"], kernels["end"])
            cp = self.copies["all"]
            c_ns = union_ns(cp["start"], cp["end"])
            parts.append(BreakdownPart("GPU compute", self.per_round_ms(k_ns), k_ns / wall))
            parts.append(BreakdownPart("Transfers (host/device copies)", self.per_round_ms(c_ns), c_ns / wall))
        else:
            parts.append(BreakdownPart("GPU compute", None, None, collected=False, reason=self.gpu_reason))
            parts.append(
                BreakdownPart("Transfers (host/device copies)", None, None, collected=False, reason=self.gpu_reason)
            )
        if self.sample_weights:
            fw = self.framework_ns
            parts.append(
                BreakdownPart(
                    "Framework (torch modules and the native ops they call, sampled)", self.per_round_ms(fw), fw / wall
                )
            )
        else:
            parts.append(
                BreakdownPart(
                    "Framework (torch modules and the native ops they call, sampled)",
                    None,
                    None,
                    collected=False,
                    reason="no CPU stack samples (sampling off or rounds too short)",
                )
            )
        return parts

    def compute_metrics(self) -> dict[str, float | None]:
        """Flat, dotted metric names: what checks, custom rules and reports read."""
        lat, c, wall = self.latency, self.counters, max(1, self.wall_ns)
        m: dict[str, float | None] = {
            f"latency_ms.{k}": getattr(lat, k) for k in ("median", "mean", "p90", "p99", "min", "max", "iqr", "stdev")
        }
        m["rounds"] = float(len(self.round_idx))
        cpu = c.get("thread_cpu_ns", 0.0)
        waits = self.wait_ns
        m["cpu.test_thread_busy"] = cpu / wall
        # A thread spinning in a CUDA sync burns CPU time while it waits: busy time outside the
        # waits is what the host really spent working.
        # Time runnable but waiting for a core (other processes, too many threads) is demand for
        # CPU the machine did not meet: the body is still CPU-bound, on a crowded machine.
        runq = c.get("runqueue_ns", 0.0)
        m["cpu.test_thread_runqueue"] = runq / wall
        working = min(cpu + runq, max(0.0, wall - waits["all"]))
        m["cpu.test_thread_working"] = working / wall
        # The kernel share of the process's CPU time, applied to the test thread: user-mode work.
        proc_cpu = c.get("user_ns", 0.0) + c.get("sys_ns", 0.0)
        m["cpu.test_thread_user_busy"] = working / wall * (c.get("user_ns", 0.0) / proc_cpu if proc_cpu else 1.0)
        m["cpu.torch_threads"] = float(self.timeline.meta.get("torch_threads") or 0) or None
        m["host.wait_fraction"] = waits["all"] / wall
        m["host.sync_fraction"] = waits["user"] / wall
        m["host.syncs_per_round"] = len(self.sync_calls) / self.n_rounds
        m["host.copy_call_fraction"] = waits["copy_calls"] / wall
        m["cpu.process_utilisation"] = (c.get("user_ns", 0.0) + c.get("sys_ns", 0.0)) / wall
        proc = c.get("user_ns", 0.0) + c.get("sys_ns", 0.0)
        m["cpu.kernel_fraction"] = c.get("sys_ns", 0.0) / proc if proc else 0.0
        m["cpu.cores"] = float(os.cpu_count() or 1)
        m["cpu.involuntary_switches_per_round"] = c.get("nivcsw", 0.0) / self.n_rounds
        m["cpu.samples"] = float(np.count_nonzero((self.timeline.events["kind"] == Kind.SAMPLE) & self.in_rounds))
        mem = self.timeline.meta.get("memory", {})
        m["mem.rss_peak_mb"] = mem.get("rss_peak", 0) / _MB if mem else None
        m["mem.rss_growth_mb"] = (c.get("rss_last", 0.0) - c.get("rss_first", 0.0)) / _MB if "rss_first" in c else None
        m["mem.minor_faults_per_round"] = c.get("minflt", 0.0) / self.n_rounds
        m["mem.major_faults"] = c.get("majflt", 0.0)
        m["gpu.memory_peak_mb"] = mem.get("gpu_allocated_peak") / _MB if mem.get("gpu_allocated_peak") else None
        if self.has_gpu:
            busy = union_ns(self.gpu["start"], self.gpu["end"])
            cp = self.copies
            compute = self.gpu[np.isin(self.gpu["kind"], [Kind.KERNEL, Kind.MEMSET])]
            m["gpu.busy_fraction"] = busy / wall
            m["gpu.compute_fraction"] = union_ns(compute["start"], compute["end"]) / wall
            m["gpu.idle_fraction"] = 1.0 - busy / wall
            m["gpu.kernel_launches_per_round"] = np.count_nonzero(self.gpu["kind"] == Kind.KERNEL) / self.n_rounds
            m["gpu.transfer_fraction"] = union_ns(cp["all"]["start"], cp["all"]["end"]) / wall
            m["gpu.h2d_bytes_per_round"] = float(np.sum(cp["h2d"]["value"])) / self.n_rounds
            m["gpu.d2h_bytes_per_round"] = float(np.sum(cp["d2h"]["value"])) / self.n_rounds
            ev = self.timeline.events
            allocs = (ev["kind"] == Kind.GPU_MEMORY) & (ev["value"] > 0) & self.in_rounds
            m["gpu.allocations_per_round"] = float(np.count_nonzero(allocs)) / self.n_rounds
        else:
            for k in (
                "busy_fraction",
                "compute_fraction",
                "idle_fraction",
                "kernel_launches_per_round",
                "transfer_fraction",
                "h2d_bytes_per_round",
                "d2h_bytes_per_round",
                "allocations_per_round",
            ):
                m[f"gpu.{k}"] = None
        m["trace.dropped_events"] = float(self.timeline.dropped)
        if not self.has_counters:
            # Absent is not zero: without per-round counters the CPU and host-memory metrics are unknown.
            for key in m:
                if key.startswith(("cpu.", "mem.")) and key != "cpu.samples":
                    m[key] = None
        return m
