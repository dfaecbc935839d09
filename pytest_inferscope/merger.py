"""The timeline merger: one clock, one order, one scope hierarchy.

`merge(raw)` is a pure function from a `RawTrace` to a `Timeline`:

1. fit host time = rate * device time + offset from the paired clock readings (measured
   every collection, never assumed: a process-wide CUPTI timestamp callback, such as the
   one torch.profiler installs, changes the device clock's rate);
2. put every device record on the host clock and drop records that never finished;
3. check causality: no GPU record may start before the runtime call that issued it;
4. sort by start (longer spans first on ties) and make times relative to the test's start;
5. build the span hierarchy (test > round > user scope > module) per thread, and give
   every other event its innermost enclosing span (GPU work: the span of its launch).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .caching import cached_property
from .events import EVENT_DTYPE, GPU_KINDS, SPAN_KINDS, Domain, Kind, RawTrace, copy_events, kind_table, unique
from .results import ClockFit

#: A fit whose paired readings miss it by more than this is not trusted for GPU times.
MAX_RESIDUAL_NS = 50_000
#: A device clock whose rate differs from the host's by more than this is reported.
RATE_TOLERANCE = 1e-3

_SUM, _MAX, _MIN = np.add.reduce, np.maximum.reduce, np.minimum.reduce


@dataclass
class Timeline:
    """Every event on the host clock in ns from the collection's start, sorted by start."""

    events: np.ndarray
    parent: np.ndarray  # int32: index of the innermost enclosing span, -1 for none
    strings: list[str]
    attrs: list[dict[str, Any]] = field(default_factory=list)
    clock: ClockFit = field(default_factory=ClockFit)
    dropped: int = 0
    incomplete: int = 0  # device records with no end (still running at the forced flush)
    t0_ns: int = 0
    meta: dict[str, Any] = field(default_factory=dict)  # per-round counters, memory, sampler (from the collection)

    def __len__(self) -> int:
        return len(self.events)

    def mask(self, *kinds: int) -> np.ndarray:
        """Events of the given kinds (a lookup table indexed by kind: np.isin costs ~10x more; its `take`, not indexing,
        which casts the uint8 kinds to intp first: 3.8 against 6.6 µs for ViT-B/16's 1547 events, 2-core dev VM)."""
        return kind_table(kinds).take(self.events["kind"])

    def name(self, i: int) -> str:
        return self.strings[int(self.events["name"][i])]

    @cached_property
    def has_gpu(self) -> bool:
        return bool(self.mask(*GPU_KINDS).any())


def fit_clock(pairs: list[tuple[int, int]], has_device_events: bool) -> ClockFit:
    """Least-squares fit of host_ns against device_ns, with the worst residual."""
    if not has_device_events:
        return ClockFit(pairs=len(pairs))
    if not pairs:
        return ClockFit(ok=False, note="device events but no clock readings: GPU times cannot be placed")
    # Subtract integer references first: raw timestamps are ~1e18 and float64 would lose 256 ns.
    h_ref, d_ref = int(pairs[0][0]), int(pairs[0][1])
    h = np.array([p[0] - h_ref for p in pairs], dtype=np.float64)
    d = np.array([p[1] - d_ref for p in pairs], dtype=np.float64)
    n = len(pairs)
    # The reductions are the ufuncs' own (np.add.reduce is what np.sum, np.mean and ndarray.mean run, to the bit):
    # np.ptp, np.mean and np.sum's wrappers cost ~40 against ~14 µs for the fit of a test's 6 readings (2-core dev
    # VM, 2026-11-28).
    if n == 1 or _MAX(d) == _MIN(d):  # np.ptp(d) == 0: the readings are finite
        offset = float(_SUM(h - d) / n)
        return ClockFit(
            rate=1.0,
            offset_ns=offset,
            host_ref_ns=h_ref,
            device_ref_ns=d_ref,
            residual_ns=float(_MAX(np.abs(h - d - offset))),
            pairs=n,
            note="one clock reading: offset only, rate assumed 1",
        )
    d0, h0 = _SUM(d) / n, _SUM(h) / n
    rate = float(_SUM((d - d0) * (h - h0)) / _SUM((d - d0) ** 2))
    offset = float(h0 - rate * d0)
    residual = float(_MAX(np.abs(h - (rate * d + offset))))
    ok = residual <= MAX_RESIDUAL_NS
    notes = []
    if abs(rate - 1.0) > RATE_TOLERANCE:
        notes.append(
            f"device clock runs at {rate:.6f}x the host's (another CUPTI client, such as "
            "torch.profiler, may have replaced CUPTI's timestamps); corrected by the fit"
        )
    if not ok:
        notes.append(
            f"fit residual {residual / 1e3:.1f} us exceeds {MAX_RESIDUAL_NS / 1e3:.0f} us: GPU times not trusted"
        )
    return ClockFit(
        rate=rate,
        offset_ns=offset,
        host_ref_ns=h_ref,
        device_ref_ns=d_ref,
        residual_ns=residual,
        pairs=n,
        ok=ok,
        note="; ".join(notes) or "fitted from paired readings",
    )


def _to_host(ev: np.ndarray, fit: ClockFit) -> None:
    dev = ev["domain"] == int(Domain.DEVICE)  # int: see events.Kind
    if not dev.any():
        return
    for col in ("start", "end"):
        # Integer differences from the reference are small enough for float64 to hold exactly.
        rel = (ev[col][dev] - fit.device_ref_ns).astype(np.float64)
        ev[col][dev] = np.rint(rel * fit.rate + fit.offset_ns).astype(np.int64) + fit.host_ref_ns
    ev["domain"][dev] = Domain.HOST


_GPU = kind_table(GPU_KINDS)
_SPAN = kind_table(SPAN_KINDS)


def causality_violations(ev: np.ndarray, launches: Launches | None = None) -> int:
    """GPU records that start before the runtime call with their correlation id (the first such call, in `ev`'s
    order); `launches`: `_launches(ev)`, where the caller has it."""
    rec, call, _ = _launches(ev) if launches is None else launches
    gpu = _GPU[ev["kind"][rec]]
    start = ev["start"]
    return int(np.count_nonzero(start[rec[gpu]] < start[call[gpu]]))


#: Records issued by runtime calls, each with its call (indices into the events), and whether no two calls share a
#: correlation id.
Launches = tuple[np.ndarray, np.ndarray, bool]


def _launches(ev: np.ndarray) -> Launches:
    """Each record a runtime call issued (GPU work, and any other device record with a correlation id) with the
    first call, in `ev`'s order, that has its correlation id; and whether no two calls share an id, so that the
    call found is the only one, whatever the order (then the hierarchy, after the events are put in order, can
    read the same pairs instead of looking again)."""
    # Single columns only: indexing whole structured records is several times slower.
    kind, corr = ev["kind"], ev["corr"]
    issued = corr != 0
    runtime = kind == int(Kind.RUNTIME)  # int: see events.Kind
    rt = (runtime & issued).nonzero()[0]
    rec = ((_GPU[kind] | (ev["device"] >= 0)) & ~runtime & issued).nonzero()[0]
    if not len(rt) or not len(rec):
        return rec[:0], rec[:0], True
    rt = rt[corr[rt].argsort(kind="stable")]
    rc, rec_corr = corr[rt], corr[rec]
    pos = np.minimum(rc.searchsorted(rec_corr), len(rc) - 1)
    found = rc[pos] == rec_corr
    return rec[found], rt[pos[found]], not (rc[1:] == rc[:-1]).any()


def _hierarchy(ev: np.ndarray, launches: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """Parent index of every event (see the module docstring, step 5). `launches`: each record a runtime call issued
    with that call, as indices into `ev`, where the caller has them (`_launches`, without shared ids)."""
    n = len(ev)
    parent = np.full(n, -1, dtype=np.int32)
    kind = ev["kind"]
    is_span = _SPAN[kind]
    span_idx = is_span.nonzero()[0]  # methods, not np.flatnonzero ...: those wrappers outcost a short timeline's work
    starts, ends, tids = ev["start"], ev["end"], ev["tid"]

    # Per thread: walk the spans in order with a stack; record where the innermost
    # active span changes, as a step function of time.
    steps: dict[int, tuple[list[int], list[int]]] = {}
    stacks: dict[int, list[tuple[int, int]]] = {}  # tid -> [(span index, its end)]
    # Plain lists: reading numpy scalars one at a time costs ~10x more in this loop.
    span_parent = []
    for i, tid, s, e in zip(
        span_idx.tolist(), tids[span_idx].tolist(), starts[span_idx].tolist(), ends[span_idx].tolist(), strict=True
    ):
        stack = stacks.get(tid)
        if stack is None:
            stack = stacks[tid] = []
            steps[tid] = ([], [])
        times, active = steps[tid]
        while stack and stack[-1][1] <= s:
            _, top_end = stack.pop()
            times.append(top_end)
            active.append(stack[-1][0] if stack else -1)
        span_parent.append(stack[-1][0] if stack else -1)
        stack.append((i, e))
        times.append(s)
        active.append(i)
    if span_parent:
        parent[span_idx] = span_parent
    for tid, stack in stacks.items():
        times, active = steps[tid]
        while stack:
            _, top_end = stack.pop()
            times.append(top_end)
            active.append(stack[-1][0] if stack else -1)

    # Top-level spans of other threads hang under the test thread's span at that time.
    rounds = (kind == int(Kind.ROUND)).nonzero()[0]  # int: see events.Kind
    test_tid = int(tids[rounds[0]]) if len(rounds) else None
    if test_tid is not None and test_tid in steps and len(steps) > 1:
        t_times = np.asarray(steps[test_tid][0], dtype=np.int64)
        t_active = np.asarray(steps[test_tid][1], dtype=np.int32)
        orphans = span_idx[(parent[span_idx] == -1) & (tids[span_idx] != test_tid)]
        if len(orphans):
            k = t_times.searchsorted(starts[orphans], side="right") - 1
            parent[orphans] = np.where(k >= 0, t_active[np.maximum(k, 0)], -1)

    # Host leaves (samples, marks, memory, runtime calls): innermost span of their thread, or of the test thread
    # for a thread without spans; each table searched once, for all the threads that read it.
    leaves = (~is_span & (ev["device"] < 0)).nonzero()[0]
    if len(leaves):
        leaf_tids = tids[leaves]
        readers: dict[int, list[int]] = {}
        distinct_tids = unique(leaf_tids).tolist()
        for tid in distinct_tids:
            key = tid if tid in steps else test_tid
            if key is not None and key in steps:
                readers.setdefault(key, []).append(tid)
        for key, group in readers.items():
            if len(group) == len(distinct_tids):
                sel = leaves
            else:
                sel = leaves[np.logical_or.reduce([leaf_tids == tid for tid in group])]
            times_a = np.asarray(steps[key][0], dtype=np.int64)
            active_a = np.asarray(steps[key][1], dtype=np.int32)
            # A sample's stack was seen when it was taken, at its end.
            at = np.where(kind[sel] == int(Kind.SAMPLE), ends[sel] - 1, starts[sel])
            k = times_a.searchsorted(at, side="right") - 1
            parent[sel] = np.where(k >= 0, active_a[np.maximum(k, 0)], -1)

    _launch_parents(ev, parent, launches)
    return parent


def _launch_parents(ev: np.ndarray, parent: np.ndarray, launches: tuple[np.ndarray, np.ndarray] | None) -> None:
    """Set each device record's parent to the span its runtime call ran in (the first call with its correlation id,
    in the timeline's order); `launches`: the records with their calls, where the caller has them."""
    if launches is not None:
        rec, call = launches
        dev = ev["device"][rec] >= 0  # (GPU records without a device are leaves, parented as such)
        parent[rec[dev]] = parent[call[dev]]
        return
    runtime = ev["kind"] == int(Kind.RUNTIME)  # int: see events.Kind
    dev = ((ev["device"] >= 0) & ~runtime).nonzero()[0]
    if len(dev):
        corr_col = ev["corr"]
        rt = (runtime & (corr_col != 0)).nonzero()[0]
        if len(rt):
            rt = rt[corr_col[rt].argsort(kind="stable")]
            corr = corr_col[rt]
            dev_corr = corr_col[dev]
            pos = np.minimum(corr.searchsorted(dev_corr), len(corr) - 1)
            found = (corr[pos] == dev_corr) & (dev_corr != 0)
            parent[dev[found]] = parent[rt[pos[found]]]


def _order(ev: np.ndarray) -> np.ndarray:
    """Indices sorting by start, longer spans first on equal starts (so parents precede children).

    A stable sort on start is cheap here (each thread's ring is already in order); only the
    runs of equal starts need the second key, so only they go through lexsort.
    """
    start = ev["start"]
    order = start.argsort(kind="stable")
    s = start[order]
    tie = s[1:] == s[:-1]
    if tie.any():
        pos = (np.concatenate((tie, [False])) | np.concatenate(([False], tie))).nonzero()[0]
        sub = order[pos]
        order[pos] = sub[np.lexsort((ev["start"][sub] - ev["end"][sub], ev["start"][sub]))]
    return order


def _check_causality(ev: np.ndarray, fit: ClockFit) -> Launches:
    """Count in `fit` the GPU records that start before their launch call (and say so in its note); the launches
    found, for the hierarchy."""
    launches = _launches(ev)
    fit.causality_violations = causality_violations(ev, launches)
    if fit.causality_violations:
        fit.note += f"; {fit.causality_violations} GPU records start before their launch call"
    return launches


def _in_order(launches: Launches | None, order: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The launches' (record, call) pairs as indices into the events put in `order`; None where calls share a
    correlation id (which call is first depends on the order: the hierarchy looks again, in the new one)."""
    if launches is None or not launches[2]:
        return None
    where = np.empty(len(order), dtype=np.intp)
    where[order] = np.arange(len(order))
    return where[launches[0]], where[launches[1]]


def _copy_records(events: np.ndarray) -> np.ndarray:
    """The collection's records as a new EVENT_DTYPE array, for the merger to change in place.

    Records already of EVENT_DTYPE are copied as bytes (`events.copy_events`: numpy's own copy of a structured array
    goes field by field through the dtype's cast); others are cast.
    """
    if events.dtype == EVENT_DTYPE and events.ndim == 1:
        return copy_events(events)
    return np.array(events, dtype=EVENT_DTYPE, copy=True)


def merge(raw: RawTrace) -> Timeline:
    """Put a raw collection on one clock, in one order, with its hierarchy."""
    ev = _copy_records(raw.events)
    has_device = bool(np.count_nonzero(ev["domain"] == int(Domain.DEVICE)))  # int: see events.Kind
    fit = fit_clock(raw.clock_pairs, has_device)
    incomplete_mask = ev["end"] < ev["start"]  # e.g. end == 0 from a forced flush
    incomplete = int(np.count_nonzero(incomplete_mask))
    if incomplete:
        ev = np.compress(~incomplete_mask, ev)
    launches = None
    if has_device:
        if fit.ok:
            _to_host(ev, fit)
            launches = _check_causality(ev, fit)
        else:
            # Keep the CPU-side results rather than report GPU times on a wrong clock.
            ev = np.compress(ev["domain"] != int(Domain.DEVICE), ev)
    elif "clock_note" in raw.meta:
        # GPU records already on the host clock (an imported trace): say who aligned them, and check them.
        fit.note = str(raw.meta["clock_note"])
        launches = _check_causality(ev, fit)
    ev["start"] -= raw.t0_ns
    ev["end"] -= raw.t0_ns
    order = _order(ev)
    ev = ev.take(order)
    return Timeline(
        events=ev,
        parent=_hierarchy(ev, _in_order(launches, order)),
        strings=list(raw.strings),
        attrs=list(raw.attrs),
        clock=fit,
        dropped=raw.dropped,
        incomplete=incomplete,
        t0_ns=raw.t0_ns,
        meta=dict(raw.meta),
    )


class TimelineMerger:
    """The seeds' interface over `merge`, for callers that hold CPU and GPU events apart."""

    def __init__(self, raw: RawTrace) -> None:
        self.raw = raw
        self._timeline: Timeline | None = None

    def synchronize_clocks(self) -> ClockFit:
        return self.get_unified_timeline().clock

    def get_unified_timeline(self) -> Timeline:
        if self._timeline is None:
            self._timeline = merge(self.raw)
        return self._timeline
