"""`Rounds`: the rounds of a timeline and their counters, the context's view that the GPU and CPU views read first.

Trace rounds (RoundKind.TRACE; `--inferscope-trace-rounds`) run after the measured ones with the
GPU launch calls recorded, which the measured rounds are timed without. Everything taken from the
launch calls (launch linkage, sync and copy calls, allocator calls, idle causes) comes from the
*API rounds*: the trace rounds when there are any, else the measured rounds (launch calls recorded
in every round, and every trace recorded before trace rounds existed). `api_scale` turns a total
over the API rounds into one over the measured rounds (per round, as many rounds).

GPU activity (kernels, copies, memsets) is read from the *GPU rounds* (`gpu_round_idx`): the measured
rounds, unless only the trace rounds recorded any (`--inferscope-gpu-rounds=trace`, meta "gpu_rounds"),
then the trace rounds, per trace round and as fractions of their own wall time (`gpu_wall_ns`).

Pure functions of a `Timeline`; nothing here prints or writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..caching import cached_property
from ..events import Kind
from ..merger import Timeline
from ..results import EventRef, LatencyStats
from ..rounds import RAISED_FLAG, RoundKind, allowance, in_step, kinds_of, row_kind
from .arrays import distinct, distinct_inverse, first_seen, median, member, overlap_ns, union_ns

__all__ = ["LAUNCH_GAP_NS", "MIN_COUNTED_MS", "Rounds", "distinct", "distinct_inverse", "event_refs", "first_seen",
           "median", "member", "overlap_ns", "union_ns"]  # fmt: skip

_MS = 1e6
_MB = 1024 * 1024
#: Default for gaps between queued GPU work counted as launch gaps (HolisticTraceAnalysis's
#: "kernel wait"); a launch-to-start latency of 14-17 µs was measured on the H200.
LAUNCH_GAP_NS = 30_000
#: The CPU counters say nothing about less on- or off-CPU time than this per round (rules.py), nor split rounds
#: shorter than it in the breakdown (context.py): a trivial test's 6 µs round read as 63% off CPU, and a 3 µs `pass`
#: body from 50% to 98% on it (the thread's CPU clock and the wall clock are read µs apart, and the counters' own
#: reads take µs).
MIN_COUNTED_MS = 0.05


@dataclass(eq=False)
class Rounds:
    """A timeline seen through its rounds: which are measured, trace, profile and GPU rounds; counters, latency.

    The context's first view (`Context.rounds`); the GPU and CPU views read the timeline through it.
    """

    timeline: Timeline

    # Which rounds are which, and how many, are cached properties like the masks that read them: the analysis
    # asks for them ~160 times a test (gpu_lean alone 39 times, gpu_api_same and its np.array_equal 4), ~0.1 ms
    # as properties on the 2-core dev VM (2026-11-28). The timeline's meta must not change once they are read.

    # -- rounds ----------------------------------------------------------------

    @cached_property
    def _round_spans(self) -> tuple[np.ndarray, np.ndarray]:
        """The ROUND spans' indices and their RoundKind."""
        ev = self.timeline.events
        # int, here and below: see events.Kind. Array methods (nonzero, searchsorted, sum ...) rather than numpy's
        # functions: those functions' wrappers cost more than the work on a short timeline (a trivial test's).
        rounds = (ev["kind"] == int(Kind.ROUND)).nonzero()[0]
        return rounds, kinds_of(ev["flags"][rounds])

    @cached_property
    def _measured(self) -> np.ndarray:
        rounds, kinds = self._round_spans
        return rounds[kinds == int(RoundKind.MEASURED)]

    @cached_property
    def _raised(self) -> np.ndarray:
        """Mask over the measured rounds: the body raised in it."""
        return (self.timeline.events["flags"][self._measured] & RAISED_FLAG) != 0

    @cached_property
    def _compiled(self) -> np.ndarray:
        """Mask over the measured rounds: torch.compile started compiling in it (collectors/compiles.py's records)."""
        m = self._measured
        mask = np.zeros(len(m), dtype=bool)
        data = self.timeline.meta.get("torch_compile")
        if not len(m) or not isinstance(data, dict) or not data.get("compiles"):
            return mask
        ev = self.timeline.events
        at = np.array([int(c["start_ns"]) for c in data["compiles"]], dtype=np.int64)
        order = ev["start"][m].argsort()
        starts, ends = ev["start"][m][order], ev["end"][m][order]
        k = starts.searchsorted(at, side="right") - 1
        inside = (k >= 0) & (at < ends[np.maximum(k, 0)])
        mask[order[k[inside]]] = True
        return mask

    @cached_property
    def round_idx(self) -> np.ndarray:
        """Indices of the measured rounds (else the warm-up rounds; else every round). Of the measured rounds, not one
        whose body raised (`raised_idx`) nor one torch.compile compiled in (`compiled_idx`) while another completed
        without: the compiler's work is not the model's (a cold compile's C++ build read as off_cpu_wait, dynamo's
        tracing as cpu_bound), nor is a round cut short. Where every measured round compiled, those that completed."""
        m = self._measured
        if len(m):
            for keep in (~(self._raised | self._compiled), ~self._raised):
                if keep.any():
                    return m[keep]
            return m
        rounds, kinds = self._round_spans
        warmup = rounds[kinds == int(RoundKind.WARMUP)]
        return warmup if len(warmup) else rounds

    @cached_property
    def _left_out(self) -> np.ndarray:
        """Mask over the measured rounds: not in `round_idx`."""
        return ~member(self._measured, self.round_idx)

    @cached_property
    def raised_idx(self) -> np.ndarray:
        """Indices of the measured rounds whose body raised while another measured round completed: cut short, and
        maybe doing other work than the rounds that completed (an exception's handling, a branch they never took),
        they are left out of everything measured, as of the latency (`no_measured_round`: where none completed)."""
        return self._measured[self._left_out & self._raised]

    @cached_property
    def compiled_idx(self) -> np.ndarray:
        """Indices of the measured rounds left out because torch.compile compiled in them (`round_idx`); they stay
        latency samples, and the torch_compile finding tells them."""
        return self._measured[self._left_out & ~self._raised]

    @cached_property
    def _left_out_rows(self) -> set[int]:
        """The per-round counters' rows (their "index") of the measured rounds left out of `round_idx`."""
        left = self._measured[self._left_out]
        return set(self.timeline.events["value"][left].tolist()) if len(left) else set()

    @cached_property
    def trace_idx(self) -> np.ndarray:
        """Indices of the trace rounds (launch calls recorded; not latency samples), those in step with the
        measured rounds while there is one (rounds.in_step: a round slowed by something else misleads the
        what-ifs).

        Without trace rounds, the warm-up rounds the schedule read as standing for one (meta "trace_warmups":
        collectors/schedule.py `_warmups_stand_in`): they recorded the launch calls and ran in step."""
        return self._in_step(RoundKind.TRACE, "trace_warmups")

    @cached_property
    def profile_idx(self) -> np.ndarray:
        """Indices of the profile rounds: lean mode's GPU rounds (`--inferscope-gpu-rounds=trace`).

        The settling round right after CUPTI starts is not one of them, nor a profile round out of step
        with the measured rounds (rounds.in_step: slowed by something besides its GPU records) while
        another is in step.

        Without profile rounds, the warm-up rounds the schedule read as standing for one (meta "profile_warmups":
        their indices; collectors/schedule.py `_warmups_stand_in`): they recorded GPU activity and ran in step with
        the measured rounds.
        """
        return self._in_step(RoundKind.PROFILE, "profile_warmups")

    def _in_step(self, kind: RoundKind, standing: str) -> np.ndarray:
        """The rounds of `kind` in step with the measured rounds, or all of them when none is; without any, the
        warm-up rounds listed in the meta's `standing` (those that stood for them)."""
        rounds = self._rounds_of(kind)
        warmups = self.timeline.meta.get(standing)
        if not len(rounds) and warmups:
            spans, kinds = self._round_spans
            warm = spans[kinds == int(RoundKind.WARMUP)]
            return warm[member(self.timeline.events["value"][warm], np.asarray(warmups, dtype=np.int64))]
        if len(rounds) < 2:
            return rounds
        ev = self.timeline.events
        spans, kinds = self._round_spans
        measured = spans[kinds == int(RoundKind.MEASURED)]
        walls = ev["end"][measured] - ev["start"][measured]
        decision = self.timeline.meta.get("gpu_rounds_decision") or {}
        lean = self.timeline.meta.get("gpu_rounds") == "trace"
        cost = allowance(kind, lean, float(decision.get("estimated_cost") or 0.0))
        keep = [i for i in rounds if in_step(int(ev["end"][i] - ev["start"][i]), walls, cost)]
        return np.asarray(keep, dtype=rounds.dtype) if keep else rounds

    def _rounds_of(self, kind: RoundKind) -> np.ndarray:
        rounds, kinds = self._round_spans
        extra = rounds[kinds == int(kind)]
        return extra if len(extra) < len(rounds) else np.zeros(0, dtype=rounds.dtype)

    @cached_property
    def has_trace_rounds(self) -> bool:
        """Whether the launch calls were read from rounds other than the measured ones."""
        return bool(len(self.trace_idx)) or self.gpu_lean

    @cached_property
    def api_round_idx(self) -> np.ndarray:
        """The rounds the launch calls are read from: the trace rounds, else the measured rounds.

        In lean mode without trace rounds (a backend that cannot switch the launch calls off records
        them in the profile rounds), the profile rounds.
        """
        if len(self.trace_idx):
            return self.trace_idx
        return self.profile_idx if self.gpu_lean else self.round_idx

    @cached_property
    def n_api_rounds(self) -> int:
        return max(1, len(self.api_round_idx))

    @cached_property
    def api_scale(self) -> float:
        """Measured rounds per API round: a total over the API rounds times this is one over the measured rounds."""
        return self.n_rounds / self.n_api_rounds if self.has_trace_rounds else 1.0

    def per_api_round_ms(self, ns: float) -> float:
        return ns / _MS / self.n_api_rounds

    # -- the rounds GPU activity is read from ------------------------------------------

    @cached_property
    def gpu_lean(self) -> bool:
        """Whether only rounds after the measured ones recorded GPU activity (`--inferscope-gpu-rounds`).

        The raw trace's meta says "gpu_rounds": "trace"; the GPU rounds are then the profile rounds
        (or, in traces recorded before there were any, the trace rounds).
        """
        if self.timeline.meta.get("gpu_rounds") != "trace":
            return False
        return bool(len(self.profile_idx) or len(self.trace_idx))

    @cached_property
    def gpu_round_idx(self) -> np.ndarray:
        """The rounds GPU activity is read from: the measured rounds, or the profile rounds when lean."""
        if not self.gpu_lean:
            return self.round_idx
        return self.profile_idx if len(self.profile_idx) else self.trace_idx

    @cached_property
    def n_gpu_rounds(self) -> int:
        return max(1, len(self.gpu_round_idx))

    @cached_property
    def in_gpu_rounds(self) -> np.ndarray:
        """Mask of events inside the rounds GPU activity is read from (`gpu_round_idx`)."""
        if not self.gpu_lean:
            return self.in_rounds
        # Lean with the launch calls recorded in the profile rounds (no trace rounds): the API rounds' mask, found
        # once (each is a search of every event, ~20 µs for ResNet-50 on the 2-core dev VM, 2026-11-28).
        return self.in_api_rounds if self.gpu_api_same else self._inside(self.gpu_round_idx)

    @cached_property
    def gpu_api_same(self) -> bool:
        """Whether the GPU rounds are the rounds the launch calls were read from (no scaling between them)."""
        return not self.has_trace_rounds or np.array_equal(self.gpu_round_idx, self.api_round_idx)

    @cached_property
    def gpu_api_scale(self) -> float:
        """GPU rounds per API round: a total over the API rounds times this is one over the GPU rounds."""
        return 1.0 if self.gpu_api_same else self.n_gpu_rounds / self.n_api_rounds

    @cached_property
    def gpu_wall_ns(self) -> int:
        """Wall time of the rounds GPU activity is read from: what GPU fractions are fractions of."""
        if not self.gpu_lean:
            return self.wall_ns
        return max(1, _span_ns(self.timeline.events, self.gpu_round_idx))

    def per_gpu_round_ms(self, ns: float) -> float:
        return ns / _MS / self.n_gpu_rounds

    @property
    def gpu_rounds_label(self) -> str:
        """Which rounds the GPU figures come from, for reports."""
        if not self.gpu_lean:
            return "the measured rounds"
        n, what = len(self.gpu_round_idx), self.gpu_rounds_kind
        return f"the {n} {what} round{'s' if n != 1 else ''}, per {what} round"

    @property
    def gpu_rounds_kind(self) -> str:
        """ "measured", "profile", "warm-up" (standing for the profile round) or "trace": the kind of the rounds GPU
        activity is read from."""
        if not self.gpu_lean:
            return "measured"
        if not len(self.profile_idx):
            return "trace"
        return "profile" if len(self._rounds_of(RoundKind.PROFILE)) else "warm-up"

    @cached_property
    def round_ms(self) -> np.ndarray:
        ev, idx = self.timeline.events, self.round_idx
        return (ev["end"][idx] - ev["start"][idx]) / _MS

    @cached_property
    def latency(self) -> LatencyStats:
        ev = self.timeline.events
        rounds, kinds = self._round_spans
        warm = rounds[kinds == int(RoundKind.WARMUP)]
        # the rounds after the measured ones (but the settling round), out-of-step profile rounds too
        trace = np.sort(np.concatenate((self._rounds_of(RoundKind.PROFILE), self._rounds_of(RoundKind.TRACE))))
        # The measured rounds only (where none completed, the rounds analysed are the warm-up's: no samples), and of
        # them not one whose body raised: the call did not finish (an assertion, a timeout cut it short).
        done = (kinds == int(RoundKind.MEASURED)) & ((ev["flags"][rounds] & RAISED_FLAG) == 0)
        stats = LatencyStats.from_samples(  # (lists of floats: from_samples makes floats of numpy's scalars)
            ((ev["end"][rounds[done]] - ev["start"][rounds[done]]) / _MS).tolist(),
            ((ev["end"][warm] - ev["start"][warm]) / _MS).tolist(),
            ((ev["end"][trace] - ev["start"][trace]) / _MS).tolist(),
        )
        stats.probe_ms = [float(x) for x in self.timeline.meta.get("probe_ms") or []]  # drift's readings, if any
        return stats

    @cached_property
    def n_rounds(self) -> int:
        return max(1, len(self.round_idx))

    @cached_property
    def wall_ns(self) -> int:
        """Measured wall time: the sum of the measured rounds (or the whole test without rounds)."""
        ev = self.timeline.events
        if len(self.round_idx):
            return _span_ns(ev, self.round_idx)
        tests = (ev["kind"] == int(Kind.TEST)).nonzero()[0]
        return _span_ns(ev, tests) if len(tests) else 1

    @cached_property
    def in_rounds(self) -> np.ndarray:
        """Mask of events that happen inside a measured round (a sample happens when it was taken: its end)."""
        return self._inside(self.round_idx)

    @cached_property
    def in_api_rounds(self) -> np.ndarray:
        """Mask of events inside the rounds the launch calls are read from (`api_round_idx`)."""
        return self._inside(self.api_round_idx) if self.has_trace_rounds else self.in_rounds

    @cached_property
    def _at(self) -> np.ndarray:
        """When each event happened, for the masks of the rounds: its start (a sample's end: when it was taken)."""
        ev = self.timeline.events
        at = ev["start"].copy()
        samples = (ev["kind"] == int(Kind.SAMPLE)).nonzero()[0]  # (few: not a choice over every event)
        at[samples] = ev["end"][samples] - 1
        return at

    def _inside(self, round_idx: np.ndarray) -> np.ndarray:
        ev = self.timeline.events
        if not len(round_idx):
            return np.ones(len(ev), dtype=bool)
        at = self._at
        if len(round_idx) == 1:  # one round (a lean test's API or GPU round): two comparisons, no search
            return (at >= ev["start"][round_idx[0]]) & (at < ev["end"][round_idx[0]])
        starts, ends = ev["start"][round_idx], ev["end"][round_idx]
        order = starts.argsort()
        rs, re = starts[order], ends[order]
        k = rs.searchsorted(at, side="right") - 1
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
        pairs = [(r, row_kind(r)) for r in rows]
        plain = [(r, k) for r, k in pairs if not k.after_measured] or pairs
        measured = [r for r, k in plain if k is not RoundKind.WARMUP]  # and not one left out of `round_idx`
        left = self._left_out_rows
        measured = [r for r in measured if r.get("index") not in left] or measured or [r for r, _ in plain]
        # Each row's counters read once, summed column by column in the rows' order (a generator per counter and a
        # call per value: 80 against 48 µs for ResNet-50's 11 rows, 2-core dev VM, 2026-11-28).
        columns = list(zip(*map(_in_round, measured), strict=True)) or [()] * len(_COUNTERS)
        out = {k: float(sum(column)) for k, column in zip(_COUNTERS, columns, strict=True)}
        out["rounds"] = float(len(measured))
        if measured:
            out["rss_first"] = float(measured[0].get("rss_start", 0))
            out["rss_last"] = float(measured[-1].get("rss_end", 0))
        return out

    @cached_property
    def rss_per_round(self) -> np.ndarray:
        rows = [r for r in self.timeline.meta.get("rounds", []) if row_kind(r) is RoundKind.MEASURED]
        left = self._left_out_rows
        rows = [r for r in rows if r.get("index") not in left] or rows  # as `round_idx`
        return np.array([r.get("rss_end", 0) for r in rows], dtype=float)

    @cached_property
    def rss_line(self) -> tuple[float, float]:
        """The least-squares line through the measured rounds' RSS: its slope (bytes per round) and R²; (0, 0) under
        three rounds. In closed form (np.polyfit's, ~5x faster on 10 rounds); the memory rule and what-if read it."""
        rss = self.rss_per_round
        n = len(rss)
        if n < 3:
            return 0.0, 0.0
        x = np.arange(n) - (n - 1) / 2
        y = rss - rss.mean()
        slope = float(x @ y) / float(x @ x)
        ss, rest = float(y @ y), y - slope * x
        return slope, 1.0 - float(rest @ rest) / ss if ss > 0 else 0.0

    def per_round_ms(self, ns: float) -> float:
        return ns / _MS / self.n_rounds


#: The per-round counters `Rounds.counters` sums.
_COUNTERS = (
    "wall_ns", "thread_cpu_ns", "user_ns", "sys_ns", "minflt", "majflt", "nvcsw", "nivcsw", "runqueue_ns",
    "gc_ns", "gc_collections", "gc_full", "gc_collected", "gc_freeing_ns", "gc_full_ns",
)  # fmt: skip
#: The per-round counters that are times: read over the counters' span, then given as shares of the round.
_TIMES = frozenset(("thread_cpu_ns", "user_ns", "sys_ns", "runqueue_ns", "gc_ns", "gc_freeing_ns", "gc_full_ns"))


def _in_round(row: dict[str, Any]) -> list[float]:
    """A round's counters (`_COUNTERS`); the times scaled from the counters' span (`span_ns`: from the reading before
    the round to the one after it) to the round's own wall time. Without this a sub-millisecond round read more CPU
    time than it lasted (the readings' own cost, ~0.1 ms on a 2-core VM: 284% busy for a 0.05 ms body). A trace
    recorded before span_ns was kept reads as before."""
    span, wall = row.get("span_ns", 0), row.get("wall_ns", 0)
    if not (wall > 0 and span >= wall):
        return [float(row.get(key, 0)) for key in _COUNTERS]
    # The test thread is on CPU at most the whole span: more is its CPU clock and the wall clock read a few µs apart
    # (the readings of a 20 µs `pass` round read 104% busy on the 2-core VM, 2026-11-29).
    cpu = min(float(row.get("thread_cpu_ns", 0)), float(span))
    return [
        (cpu if key == "thread_cpu_ns" else float(row.get(key, 0))) * (wall / span if key in _TIMES else 1.0)
        for key in _COUNTERS
    ]


def _span_ns(ev: np.ndarray, idx: np.ndarray) -> int:
    """The summed length of the events at `idx` (columns: indexing whole records costs several times more)."""
    return int((ev["end"][idx] - ev["start"][idx]).sum())


def event_refs(timeline: Timeline, idx: np.ndarray | list[int], limit: int = 5) -> list[EventRef]:
    """The longest of the given events, as report references."""
    ev = timeline.events
    idx = np.asarray(idx, dtype=np.int64)
    if not len(idx):
        return []
    dur = ev["end"][idx] - ev["start"][idx]
    top = idx[(-dur).argsort(kind="stable")[:limit]]
    # the columns as lists, not a numpy scalar read per field: 19 against 28 µs for five refs (2-core dev VM)
    kinds, names = ev["kind"][top].tolist(), ev["name"][top].tolist()
    starts, ends = ev["start"][top].tolist(), ev["end"][top].tolist()
    return [
        EventRef(
            kind=Kind(k).name.lower(),
            name=timeline.strings[name],
            start_ms=float(start) / _MS,
            duration_ms=float(end - start) / _MS,
        )
        for k, name, start, end in zip(kinds, names, starts, ends, strict=True)
    ]
