"""A round's dependency graph (graph.py) built from the timeline, as columns (columns.Flat): `round_graphs`.

The graph is an `ArrayGraph`: its host nodes and GPU ops are made as objects only if something reads
them; the replay and the built-in what-ifs read the columns. Pure functions of a `Timeline`; nothing
here prints or writes.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from ..events import GPU_KINDS, Kind, MemoryKind, SyncType, unique, unpack_copy_flags
from ..merger import Timeline
from .base import distinct_inverse, median, member
from .columns import K_BLOCKING, K_CALL, K_EXTERNAL, K_SEGMENT, Flat, Modules
from .context import Context
from .context_gpu import is_copy_call, is_sync_call
from .graph import DEFAULT_LAT_NS, ArrayGraph, RoundGraph, trim_recording_cost
from .idle import CLOCK_SLACK_NS
from .issued import Issued
from .sampling import Entries, entries_of, modules_in, sampled_entries, samples_in, segment_names

#: Rounds replayed at most (spread over the API rounds): enough to average out one slow round.
MAX_ROUNDS = 5
#: Host nodes replayed at most, over the rounds (fewer rounds for long ones; at least one round).
MAX_NODES = 40_000

T = TypeVar("T")

_NONE: list[int] = []  # the ops or waits of a node with none (shared: nothing changes them in place)
_RANKS = np.arange(4, dtype=np.int64)  # the pool's parts (externals, segments, items, the last segment), in order


def _stream_key(ev: np.ndarray) -> np.ndarray:
    return (ev["device"].astype(np.int64) << 32) | (ev["stream"].astype(np.int64) & 0xFFFFFFFF)


def _sync_kind(name: str, sync_type: int | None) -> str:
    if sync_type == SyncType.STREAM_SYNCHRONIZE or "StreamSynchronize" in name:
        return "stream synchronize"
    if sync_type == SyncType.EVENT_SYNCHRONIZE or "EventSynchronize" in name:
        return "event synchronize"
    if "Memcpy" in name:
        return "synchronous copy"
    return "device synchronize"


class _Found:
    """What every round's graph reads of the whole timeline, found once for all of them: the GPU records, the
    calls of any thread, the end-of-round waits, and the CUPTI synchronisation records by correlation id."""

    def __init__(self, tl: Timeline) -> None:
        ev = tl.events
        self.gpu = tl.mask(*GPU_KINDS).nonzero()[0]
        self.gpu_start, self.gpu_end, self.gpu_corr = ev["start"][self.gpu], ev["end"][self.gpu], ev["corr"][self.gpu]
        self.calls = ((ev["kind"] == int(Kind.RUNTIME)) & (ev["tid"] >= 0)).nonzero()[0]
        self.waits = (ev["kind"] == int(Kind.WAIT)).nonzero()[0]
        self._tl = tl
        self._sync_types: dict[int, tuple[int, int]] | None = None

    @property
    def sync_types(self) -> dict[int, tuple[int, int]]:
        if self._sync_types is None:
            self._sync_types = _sync_types(self._tl)
        return self._sync_types


def build_round(tl: Timeline, round_i: int, link_gb_s: float = 0.0, found: _Found | None = None) -> RoundGraph | None:
    """The graph of one round (an index of a ROUND span); None when it has no GPU work. `found`: what
    `_Found` finds in `tl`, when the caller has it."""
    ev = tl.events
    found = found or _Found(tl)
    r0, r1 = int(ev["start"][round_i]), int(ev["end"][round_i])
    tid = int(ev["tid"][round_i])
    start = ev["start"]
    # Every thread's calls, in one order: a thread that launches while the round's thread waits for it (the
    # autograd engine's) hands the host over and back; threads that really run side by side are rare in inference.
    calls = found.calls[(start[found.calls] >= r0) & (start[found.calls] < r1)]
    waits = found.waits[(start[found.waits] >= r0) & (start[found.waits] < r1) & (ev["tid"][found.waits] == tid)]
    for w in waits.tolist():  # the end-of-round synchronize stands for the calls inside it
        calls = calls[(ev["start"][calls] < ev["start"][w]) | (ev["start"][calls] >= ev["end"][w])]
    call_corr = ev["corr"][calls]
    gpu_all, gpu_corr, gpu_start = found.gpu, found.gpu_corr, found.gpu_start
    own = member(gpu_corr, call_corr[call_corr != 0]) & (gpu_corr != 0)
    g_in = (gpu_start >= r0) & (gpu_start < r1)
    # the ops its calls issued, wherever they ran, and the GPU work that started in it (launched by calls of
    # other rounds or threads, or by none recorded: external)
    op_idx = gpu_all[own | g_in]
    if not len(op_idx):
        return None
    op_idx = op_idx[ev["start"][op_idx].argsort(kind="stable")]
    external = (~own[gpu_all.searchsorted(op_idx)]).nonzero()[0].tolist()
    cols = _OpColumns(ev.take(op_idx), r0)  # (not indexing: see context_gpu.GpuView.records)
    stream_busy: dict[int, int] = {}
    earlier = gpu_all[(gpu_start < r0) & (found.gpu_end > r0)]
    if len(earlier):  # (mostly none)
        for k, e in zip(_stream_key(ev.take(earlier)).tolist(), ev["end"][earlier].tolist(), strict=True):
            stream_busy[k] = max(stream_busy.get(k, 0), e - r0)
    counted = (cols.end <= r1 - r0 + CLOCK_SLACK_NS).nonzero()[0]
    framework: set[str] = set()
    f = _host_nodes(tl, calls, waits, op_idx, external, (r0, r1, tid), cols, framework, found)
    f.op_lat, f.op_gap, f.op_after, f.op_floor = _latencies(stream_busy, cols)
    f.op_name = list(map(tl.strings.__getitem__, ev["name"][op_idx].tolist()))
    f.counted, f.link_gb_s = counted, link_gb_s
    return ArrayGraph(
        flat=f,
        measured_ns=r1 - r0,
        stream_busy=stream_busy,
        counted=counted.tolist(),
        link_gb_s=link_gb_s,
        framework=framework,
    )


class _OpColumns:
    """A round's GPU records (`ev`, by start) as columns, times in ns from the round's start (`r0`)."""

    def __init__(self, ev: np.ndarray, r0: int) -> None:
        self.kind = ev["kind"].astype(np.int64)
        self.stream = _stream_key(ev)
        self.start = (ev["start"] - r0).astype(np.int64)
        self.end = (ev["end"] - r0).astype(np.int64)
        is_copy = self.kind == int(Kind.MEMCPY)
        self.nbytes = np.where(self.kind != int(Kind.KERNEL), ev["value"], 0).astype(np.int64)
        if is_copy.any():
            copy, src, dst = unpack_copy_flags(ev["flags"])
            self.pageable = is_copy & ((src == int(MemoryKind.PAGEABLE)) | (dst == int(MemoryKind.PAGEABLE)))
            self.copy = np.where(is_copy, copy, 0).astype(np.int64)
        else:  # most rounds copy nothing: no flags to unpack
            self.pageable, self.copy = is_copy, np.zeros(len(is_copy), dtype=np.int64)
        self.dur = self.end - self.start  # (integers: the same as end - start)
        self.end_list = self.end.tolist()
        self.issue_at = self.start.copy()  # when each was issued: _host_nodes sets it for the calls' ops

    def flat(self) -> Flat:
        """The ops' columns of the graph's `Flat` (its nodes', and the ops' lat, gap, after, floor, set after)."""
        empty = np.zeros(0, dtype=np.int64)
        f = Flat(empty, empty, [], [], self.dur, empty, empty, empty, self.start, empty, self.kind, [], empty)
        f.op_stream, f.op_end, f.op_nbytes, f.op_copy, f.op_pageable = (
            self.stream,
            self.end,
            self.nbytes,
            self.copy,
            self.pageable,
        )
        return f


class _Items:
    """The host items of a round (calls and waits, in the host's order) as columns, before the segments."""

    def __init__(self, tl: Timeline, calls: np.ndarray, waits: np.ndarray, r0: int) -> None:
        ev = tl.events
        both = np.concatenate([calls, waits])
        wait = np.concatenate([np.zeros(len(calls), dtype=np.int64), np.ones(len(waits), dtype=np.int64)])
        order = np.lexsort((both, wait, ev["start"][both]))  # by start; calls first; by index
        self.idx, self.wait = both[order], wait[order]
        self.s = (ev["start"][self.idx] - r0).astype(np.int64)
        self.e = (ev["end"][self.idx] - r0).astype(np.int64)
        self.t = np.concatenate([[0], np.maximum.accumulate(np.maximum(self.e, 0))])  # the host's clock before each
        self.name_ids = ev["name"][self.idx]
        self.corrs, self.is_wait = ev["corr"][self.idx].tolist(), self.wait.tolist()
        self.names = list(map(tl.strings.__getitem__, self.name_ids.tolist()))
        for k in self.wait.nonzero()[0].tolist():
            self.names[k] = "end-of-round synchronize"
        s, e, t = self.s, self.e, self.t
        # A call inside one already on the host's clock (a driver call under its runtime call: Kineto records both)
        # adds only the time it runs past the enclosing one.
        self.dur = np.minimum(np.maximum(0, e - s), np.maximum(0, e - t[:-1]))
        self.kind = np.full(len(s), K_CALL, dtype=np.int8)
        self.waits: list[list[int]] = [_NONE] * len(s)
        self.sync = [""] * len(s)


def _host_nodes(
    tl: Timeline,
    calls: np.ndarray,
    waits: np.ndarray,
    op_idx: np.ndarray,
    external: list[int],
    rnd: tuple[int, int, int],
    cols: _OpColumns,
    framework: set[str],
    found: _Found,
) -> Flat:
    """The host's order: segments between calls, calls with their ops, blocking calls with what they waited for;
    the graph's columns, its ops' columns from `cols`."""
    ev = tl.events
    r0, r1, _ = rnd
    it = _Items(tl, calls, waits, r0)
    s, t = it.s, it.t
    ext = sorted(external, key=cols.start.tolist().__getitem__) if external else []
    ext_at = s.searchsorted(cols.start[ext], side="left")  # the item they come before
    own, counts, placed = _own_ops(ev["corr"][op_idx], np.where(it.wait > 0, 0, ev["corr"][it.idx]))
    item = np.concatenate([ext_at, np.arange(len(s)).repeat(counts)]).astype(np.int64)
    issued_ops = np.concatenate([np.array(ext, dtype=np.int64), placed])  # the externals', then the items'
    issued = Issued(cols.stream, cols.end, item, issued_ops)
    # when each op was issued: its call's start (the last call's, by two; external work: its own start)
    cols.issue_at[placed] = s.repeat(counts)
    # the items that can block: waits, sync calls, copy calls that issued ops (names looked at once each)
    sync_named, copy_named = _named(tl, it.name_ids, is_sync_call, is_copy_call)
    maybe = (it.wait > 0) | sync_named | (copy_named & (counts > 0))
    if maybe.any():
        _blocking(it, maybe.nonzero()[0], sync_named, own, found.sync_types, issued, cols)
    seg_start, seg_dur, entries = _segments(tl, s, t, r1 - r0, it.idx, calls, rnd, framework)
    n, ne, nseg = len(s), len(ext), len(seg_start)
    last = int(r1 - r0 > int(t[-1]))
    # each item after the external work released before it and the segment before it; the last segment at the end
    at = np.concatenate([ext_at, (s > t[:-1]).nonzero()[0], np.arange(n), np.full(last, n)]).astype(np.int64)
    # by `at`, then rank, then place in the pool: a stable sort of at * 4 + rank (np.lexsort of three keys costs more)
    order = (at * 4 + _RANKS.repeat([ne, nseg - last, n, last])).argsort(kind="stable")
    ordered = _picker(order.tolist())
    # the pool, in the order `at` and `rank` count it: externals, segments but the last, items, the last segment
    k_seg, k_ext = np.full(nseg, K_SEGMENT, dtype=np.int8), np.full(ne, K_EXTERNAL, dtype=np.int8)
    kind = np.concatenate([k_ext, k_seg[: nseg - last], it.kind, k_seg[nseg - last :]])
    dur = np.concatenate([np.zeros(ne, dtype=np.int64), seg_dur[: nseg - last], it.dur, seg_dur[nseg - last :]])
    start = np.concatenate([cols.start[ext], seg_start[: nseg - last], s, seg_start[nseg - last :]])
    f = cols.flat()
    f.kind, f.dur, f.node_start = kind[order], dur[order].astype(np.int64), start[order].astype(np.int64)
    f.node_ops = ordered([[j] for j in ext] + [_NONE] * (nseg - last) + own + [_NONE] * last)
    f.node_name = ordered([""] * (ne + nseg - last) + it.names + [""] * last)
    # each of the pool's places in the order; the items', the segments' (they keep their order, so the entries stay
    # by node)
    where = np.empty(len(order), dtype=np.int64)
    where[order] = np.arange(len(order))
    item_node = where[ne + nseg - last : ne + nseg - last + n]
    seg_node = np.concatenate([where[ne : ne + nseg - last], where[ne + nseg - last + n :]])
    # only blocking calls wait, or have a kind of synchronisation: a few nodes set, not a pool of each put in order
    f.waits, f.node_sync = [_NONE] * len(order), [""] * len(order)
    blocking = (it.kind == K_BLOCKING).nonzero()[0].tolist()
    for k, i in zip(blocking, item_node[blocking].tolist(), strict=True):
        f.waits[i], f.node_sync[i] = it.waits[k], it.sync[k]
    seg, module, ns, names = entries
    f.modules = Modules(seg_node[seg], module, ns, names)
    # columns.issued(f), from the pool: the externals' ops and the items' (the segments issue none)
    node = np.concatenate([where[:ne], item_node.repeat(counts)])
    by_node = node.argsort(kind="stable")
    f.issue = (np.bincount(node, minlength=len(order)), node[by_node], issued_ops[by_node])
    return f


def _picker(pick: list[int]) -> Callable[[list[T]], list[T]]:
    """`pool -> [pool[i] for i in pick]`, for several pools in the same order: operator.itemgetter's loop is C's,
    9 against 16 µs (a map of `pool.__getitem__`) a pool of ~600 nodes (2-core dev VM, 2026-11-28)."""
    if len(pick) < 2:  # an itemgetter of one index gives the item, not a tuple; of none, it cannot be made
        return lambda pool: [pool[i] for i in pick]
    get = operator.itemgetter(*pick)
    return lambda pool: list(get(pool))


def _own_ops(op_corr: np.ndarray, item_corr: np.ndarray) -> tuple[list[list[int]], np.ndarray, np.ndarray]:
    """The ops each item issued (the ops of its correlation id, none for 0), how many, and all of them in item
    order."""
    order = op_corr.argsort(kind="stable")
    by_corr = op_corr[order]
    lo = by_corr.searchsorted(item_corr, side="left")
    hi = np.where(item_corr != 0, by_corr.searchsorted(item_corr, side="right"), lo)
    ops = order.tolist()
    own = [ops[a:b] if b > a else _NONE for a, b in zip(lo.tolist(), hi.tolist(), strict=True)]
    counts = hi - lo
    at = np.arange(int(counts.sum())) + (lo - (counts.cumsum() - counts)).repeat(counts)
    return own, counts, order[at]


def _named(tl: Timeline, ids: np.ndarray, *tests: Callable[[str], bool]) -> list[np.ndarray]:
    """Each of `tests` of the name of each of `ids` (interned names), asked once per distinct name."""
    distinct = unique(ids).tolist()
    names = [tl.strings[i] for i in distinct]
    out = []
    for test in tests:
        table = np.zeros(len(tl.strings), dtype=bool)
        table[distinct] = [test(name) for name in names]
        out.append(table[ids])
    return out


def _blocking(
    it: _Items,
    ks: np.ndarray,
    sync_named: np.ndarray,
    own: list[list[int]],
    sync_types: dict[int, tuple[int, int]],
    issued: Issued,
    cols: _OpColumns,
) -> None:
    """Which of host items `ks` made a blocking call (a synchronisation, the end-of-round wait, a copy call that
    returned only after its copy finished: a pageable copy, staged, held the host), with what each waited for.
    `sync_named`: by item, whether its name is a synchronisation's; `own`: by item, the ops it issued."""
    op_end = cols.end_list
    at_all = it.e[ks] + CLOCK_SLACK_NS
    # a copy call blocked only where one of its own ops had finished when it returned
    held = [
        bool(it.is_wait[k]) or bool(sync_named[k]) or any(op_end[j] <= at for j in own[k])
        for k, at in zip(ks.tolist(), at_all.tolist(), strict=True)
    ]
    ks, at_all = ks[held], at_all[held]
    it.kind[ks] = K_BLOCKING
    ks_list = ks.tolist()
    syncs = [sync_types.get(it.corrs[k]) for k in ks_list]
    on = [
        sync[1] if sync and sync[0] == SyncType.STREAM_SYNCHRONIZE and not it.is_wait[k] else None
        for k, sync in zip(ks_list, syncs, strict=True)
    ]
    waits = issued.waited(ks, at_all, on)
    ends, befores, starts = it.e[ks].tolist(), it.t[ks].tolist(), it.s[ks].tolist()
    for k, waited, sync, end, before, start in zip(ks_list, waits, syncs, ends, befores, starts, strict=True):
        it.waits[k] = waited
        finished = max((op_end[j] for j in waited), default=start)
        it.dur[k] = min(max(0, end - max(start, finished)), max(0, end - before))
        if not it.is_wait[k] and sync_named[k]:
            it.sync[k] = _sync_kind(it.names[k], (sync or (None, None))[0])


def _segments(
    tl: Timeline,
    s: np.ndarray,
    t: np.ndarray,
    length: int,
    items: np.ndarray,
    calls: np.ndarray,
    rnd: tuple[int, int, int],
    framework: set[str],
) -> tuple[np.ndarray, np.ndarray, Entries]:
    """The host's own work between items (`s`: their starts, `t`: the host's clock before each), then to the
    round's end (`length`): their starts, lengths and the modules sampled in each (or the frame around the next
    call)."""
    samples = samples_in(tl, *rnd, framework)
    gap = (s > t[:-1]).nonzero()[0]
    a, b = t[gap], s[gap]
    tail = length > int(t[-1])
    if samples[0]:
        seg, module, ns, names = sampled_entries(a, b, samples)
        dicts = [(len(a), modules_in(int(t[-1]), length, samples, ""))] if tail else []
        if dicts and dicts[0][1]:
            seg2, module2, ns2, names2 = entries_of(dicts)
            table = {m: i for i, m in enumerate(names)}
            remap = np.array([table.setdefault(m, len(table)) for m in names2], dtype=np.int64)
            seg, ns = np.concatenate([seg, seg2]), np.concatenate([ns, ns2])
            module = np.concatenate([module, remap[module2]])
            names = list(table)
        entries: Entries = (seg, module, ns, names)
    else:
        named = segment_names(tl, calls)
        ends = zip(a.tolist(), b.tolist(), items[gap].tolist(), strict=True)
        entries = entries_of([(k, {named[i]: y - x}) for k, (x, y, i) in enumerate(ends) if named.get(i, "")])
    starts, stops = (np.concatenate((a, t[-1:])), np.concatenate((b, [length]))) if tail else (a, b)
    return starts.astype(np.int64), (stops - starts).astype(np.int64), entries


def _sync_types(tl: Timeline) -> dict[int, tuple[int, int]]:
    """CUPTI synchronisation records by correlation id: (type, stream)."""
    ev = tl.events
    s = ev.compress(ev["kind"] == int(Kind.SYNC))
    return {
        int(c): (int(f), int(st))
        for c, f, st in zip(s["corr"].tolist(), s["flags"].tolist(), s["stream"].tolist(), strict=True)
        if c
    }


def _latencies(stream_busy: dict[int, int], cols: _OpColumns) -> tuple[np.ndarray, ...]:
    """Each op's launch-to-start time, its gap after the op before it on its stream, the op it follows and its
    floor (see GpuOp): (lat, gap, after, floor). The op before it is the one that ended last (the latest of
    those) so far on its stream."""
    start, end, stream = cols.start, cols.end, cols.stream
    at = cols.issue_at  # when its call issued it (its own start when none did)
    busy: np.ndarray | int
    if not (stream != stream[0]).any():  # one stream (most rounds): its ops need no grouping
        busy, groups = stream_busy.get(int(stream[0]), 0), [np.arange(len(stream))]
    else:
        keys, inverse = distinct_inverse(stream)
        busy = np.array([stream_busy.get(k, 0) for k in keys.tolist()], dtype=np.int64)[inverse]
        groups = [(inverse == key).nonzero()[0] for key in range(len(keys))]
    slack = start + CLOCK_SLACK_NS
    floor = np.where(slack >= busy, busy, 0)
    prev = np.full(len(start), -1, dtype=np.int64)
    for sel in groups:
        ends = end[sel]
        latest = np.where(ends == np.maximum.accumulate(ends), sel, -1)  # ended last so far
        prev[sel[1:]] = np.maximum.accumulate(latest)[:-1]
    end_prev = end[prev]
    follows = (prev >= 0) & (slack >= end_prev)
    after = np.where(follows, prev, -1)
    before = np.maximum(floor, np.where(follows, end_prev, 0))
    queued = (at < before) & (start <= before + np.maximum(CLOCK_SLACK_NS, start - at))
    gap = np.where(queued, np.maximum(0, start - before), 0)
    lat = np.maximum(0, start - at)
    idle = ~queued
    typical = int(median(lat[idle])) if idle.any() else DEFAULT_LAT_NS
    lat = np.where(queued, np.minimum(lat, typical), lat)
    return lat, gap, after, floor.astype(np.int64)


def build_rounds(tl: Timeline, idx: list[int], link_gb_s: float, ref_ns: int | None = None) -> list[RoundGraph]:
    """The graphs of rounds `idx`; with `ref_ns`, trace rounds trimmed to the rounds they stand for."""
    found = _Found(tl)
    graphs = [g for g in (build_round(tl, int(i), link_gb_s, found) for i in idx) if g is not None]
    if ref_ns is not None:
        for g in graphs:
            trim_recording_cost(g, ref_ns)
    return graphs


def round_graphs(ctx: Context) -> tuple[list[RoundGraph], str]:
    """The graphs of (up to `MAX_ROUNDS` of) the rounds whose launch calls were recorded, or why there are none."""
    if not ctx.gpu.collected:
        return [], "no GPU work was recorded, so there is no round graph to replay"
    idx = ctx.rounds.api_round_idx.tolist()
    ev = ctx.timeline.events
    calls = int(np.count_nonzero((ev["kind"] == int(Kind.RUNTIME)) & ctx.rounds.in_api_rounds)) / max(1, len(idx))
    # Replaying is Python, node by node: keep it to about MAX_NODES nodes (a call and a segment per launch).
    most = max(1, min(MAX_ROUNDS, int(MAX_NODES // max(1.0, 2 * calls))))
    if len(idx) > most:
        step = len(idx) / most
        idx = [idx[int(k * step)] for k in range(most)]
    link = float(ctx.gpu.transfer["link_gb_s"])
    # trace rounds: their recorded calls cost host time the timed rounds did not pay (graph.trim_recording_cost). They
    # stand for the profile rounds; a warm-up round that stood for both (lean) stands for the measured rounds.
    r = ctx.rounds
    ref_idx = r.round_idx if r.gpu_api_same else r.gpu_round_idx
    walls = ev["end"][ref_idx] - ev["start"][ref_idx]
    ref = None if np.array_equal(ref_idx, r.api_round_idx) or not len(walls) else int(median(walls))
    graphs = build_rounds(ctx.timeline, idx, link, ref)
    if not graphs:
        return [], "no GPU work in the rounds whose launch calls were recorded"
    if not any(g.has_launch_call for g in graphs):
        return [], "the trace records no launch calls (CUDA runtime events), so GPU work cannot be tied to the host"
    return graphs, ""
