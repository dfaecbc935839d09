"""What every rule reads: the measured rounds, their counters, and aggregates computed once.

`Context` joins the rounds (`base.py`), the GPU view (`context_gpu.py`) and, here, CPU samples,
scopes and the breakdown; the metrics are computed in `metrics.py`. Pure functions of a
`Timeline`; nothing here prints or writes.
"""

from __future__ import annotations

import linecache
import re
from functools import cached_property

import numpy as np

from ..events import GPU_KINDS, Kind
from ..results import BreakdownPart, Hotspot, ScopeStat
from .base import _MS, LAUNCH_GAP_NS, RoundsContext, union_ns
from .context_gpu import COPY_CALL, LAUNCH_HOST_NS, SYNC_CALL, GpuContext

__all__ = ["COPY_CALL", "LAUNCH_GAP_NS", "LAUNCH_HOST_NS", "SYNC_CALL", "Context", "RoundsContext", "union_ns"]

#: Python files that are the framework rather than the user's code, for "framework overhead".
FRAMEWORK_MARKERS = ("(torch/", "(transformers/", "(accelerate/", "/torch/", "/transformers/")


class Context(GpuContext):
    """A timeline seen through its measured rounds: every rule's input (`analyze` fills `metrics`)."""

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

    def samples_inside(
        self, starts: np.ndarray, ends: np.ndarray, lines: bool = False, api: bool = False
    ) -> list[tuple[str, float]]:
        """User frames (innermost) of the samples taken inside the given intervals, by sampled ms per round.

        With `api`, the intervals lie in the API rounds (idle gaps, sync calls: base.py), whose samples
        are read and counted per API round.

        With `lines`, each frame is named at the line it was on when sampled (the sampler keeps it in
        the sample's value), followed by that line's source where the file can be read here:
        "mod:fn (path.py:42: `x.item()`)". Traces recorded before the sampler kept lines name the function.
        """
        ev = self.timeline.events
        sel = np.flatnonzero((ev["kind"] == Kind.SAMPLE) & (self.in_api_rounds if api else self.in_rounds))
        per_round = self.per_api_round_ms if api else self.per_round_ms
        if not len(sel) or not len(starts):
            return []
        order = np.argsort(starts)
        s, e = starts[order], ends[order]
        at = ev["end"][sel] - 1
        k = np.searchsorted(s, at, side="right") - 1
        inside = (k >= 0) & (at < e[np.maximum(k, 0)])
        tally: dict[str, float] = {}
        for i in sel[inside].tolist():
            leaf = self.timeline.name(i).rsplit(";", 1)[-1]
            if lines and ev["value"][i] > 0:
                leaf = at_line(leaf, int(ev["value"][i]))
            tally[leaf] = tally.get(leaf, 0.0) + float(ev["end"][i] - ev["start"][i])
        return sorted(((k_, per_round(v)) for k_, v in tally.items()), key=lambda kv: -kv[1])

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
        """GPU ns and kernel launches per scope/module span of the API rounds, its children's included.

        A GPU record's parent is the span its launch ran in (the merger's doing, from the launch
        calls: so the API rounds), so the per-parent sums (one bincount) are propagated up the span
        tree, innermost spans first.
        """
        tl = self.timeline
        ev = tl.events
        if not self.has_gpu:
            return {}, {}
        gpu = np.flatnonzero(tl.mask(*GPU_KINDS) & self.in_api_rounds)
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
        # GPU time per scope: from the API rounds (their GPU records know their launch's span), per API round.
        api_idx = idx
        if self.has_trace_rounds:
            api_idx = np.flatnonzero(tl.mask(Kind.SCOPE, Kind.MODULE) & self.in_api_rounds)
        for i, k in zip(api_idx.tolist(), ev["kind"][api_idx].tolist(), strict=True):
            g = gpu_agg.setdefault((paths[i], "scope" if k == Kind.SCOPE else "module"), [0.0, 0.0])
            g[0] += gpu_ns.get(i, 0.0)
            g[1] += launches.get(i, 0.0)
        wall, n, n_api = max(1, self.wall_ns), self.n_rounds, self.n_api_rounds
        has_gpu = self.has_gpu
        out = [
            ScopeStat(
                path=p,
                kind=k,
                count=len(d),
                total_ms=sum(d) / _MS / n,
                mean_ms=sum(d) / len(d) / _MS,
                share=sum(d) / wall,
                gpu_ms=gpu_agg.get((p, k), [0.0, 0.0])[0] / _MS / n_api if has_gpu else None,
                launches=gpu_agg.get((p, k), [0.0, 0.0])[1] / n_api if has_gpu else None,
            )
            for (p, k), d in agg.items()
        ]
        out.sort(key=lambda s: s.total_ms, reverse=True)
        return out

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
            g_wall, where = max(1, self.gpu_wall_ns), f" ({self.gpu_rounds_kind} rounds)" if self.gpu_lean else ""
            parts.append(BreakdownPart(f"GPU compute{where}", self.per_gpu_round_ms(k_ns), k_ns / g_wall))
            parts.append(
                BreakdownPart(f"Transfers (host/device copies){where}", self.per_gpu_round_ms(c_ns), c_ns / g_wall)
            )
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


_LABEL_LINE = re.compile(r"^(?P<head>.*) \((?P<path>.+):(?P<line>\d+)\)$")


def at_line(label: str, line: int) -> str:
    """'mod:fn (path.py:10)' at line 42 -> 'mod:fn (path.py:42: `source of line 42`)' (the source where readable)."""
    m = _LABEL_LINE.match(label)
    if m is None:
        return label
    source = linecache.getline(m["path"], line).strip()
    shown = f": `{source[:77] + '...' if len(source) > 80 else source}`" if source else ""
    return f"{m['head']} ({m['path']}:{line}{shown})"
