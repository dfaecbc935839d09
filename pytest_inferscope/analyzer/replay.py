"""Replay a round's dependency graph (graph.py): recompute when each GPU op and the round end.

The host walks its nodes in order: a segment advances its clock by its length; a call issues its
GPU ops at the call's start and advances the clock by the call's own time; a blocking call first
waits until every op it waited for has finished. An op starts when it is ready (its call's start
plus its launch-to-start time; external ops at their measured start) and the op before it on its
stream has finished (plus the gap it kept behind that op; streams the trace shows running ops
side by side are not one queue). The round ends when the host is done and
every op that ended inside the measured round has ended.

With the graph unchanged this reproduces the measured round up to what the graph leaves out
(dependencies between streams, work released by other threads): `replay_error` says how far.

Two ways compute the same thing: `replay_walk` node by node (`walk_columns`: the same walk read from a
graph's columns; `walk_round_ns`: that walk in C, native/_replay.c, where it is built), and `replay_plan` with
array operations, stretch by stretch (flat.py), for a graph and its what-if copies (`Replayer`) where the walk in
C is not built, and the arrays apply and pay off. Pure functions; nothing here prints or writes.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from .columns import K_BLOCKING, K_EXTERNAL, K_SEGMENT, issued
from .flat import KIND_CODES, Flat, Plan, compile_plan, flat_of, patch, shape_of
from .graph import RoundGraph

try:  # the walk in C (setup.py builds it where a C compiler is found); Python's otherwise
    from .._replay import walk as _native_walk
except ImportError:  # pragma: no cover - where it was not built
    _native_walk = None  # type: ignore[assignment]


@dataclass
class Replay:
    """The replayed round: its length, when the host finished, each op's start and end (ns from the round's start)."""

    round_ns: int
    host_ns: int
    op_start: list[int]
    op_end: list[int]


def replay(graph: RoundGraph) -> Replay:
    """Recompute the round from its graph (see the module docstring). One replay of a graph walks it: reading
    a graph into arrays costs more than the walk; `Replayer` pays it once for a graph and its what-ifs."""
    return replay_walk(graph)


def replay_walk(graph: RoundGraph) -> Replay:
    """The replay, node by node."""
    nodes, ops = graph.nodes, graph.ops
    code = KIND_CODES.__getitem__
    return _walk(
        [code(n.kind) for n in nodes],
        [n.dur for n in nodes],
        [n.ops for n in nodes],
        [n.waits for n in nodes],
        [(o.start, o.lat, o.floor, o.after, o.gap, o.dur) for o in ops],
        graph.counted,
    )


def walk_round_ns(f: Flat) -> int:
    """`walk_columns(f).round_ns`, walked in C (native/_replay.c) where that module is built and the columns are
    integers; in Python otherwise. The sync-bound round's 30 what-if walks took ~1.2 ms each in Python."""
    walked = _walk_native(f) if len(f.kind) >= NATIVE_MIN_NODES else None
    return walk_columns(f).round_ns if walked is None else walked[0]


#: Below this many nodes the Python walk is as fast as handing the columns to C (~25 µs either way at 50 nodes on
#: the 2-core dev VM, 2026-11-28; at 400 nodes 177 against 43 µs).
NATIVE_MIN_NODES = 64


def walk_native(f: Flat) -> Replay | None:
    """`walk_columns(f)` walked in C; None where the module is not built or a column is not integers (a what-if
    that scales times by a float)."""
    walked = _walk_native(f)
    if walked is None:
        return None
    round_ns, host_ns, start, end = walked
    return Replay(round_ns=round_ns, host_ns=host_ns, op_start=start.tolist(), op_end=end.tolist())


def _walk_native(f: Flat) -> tuple[int, int, np.ndarray, np.ndarray] | None:
    """(round, host, op starts, op ends) of `walk_native`."""
    arrays = (f.dur, f.op_start, f.op_lat, f.op_floor, f.op_after, f.op_gap, f.op_dur, f.counted)
    if _native_walk is None or any(a.dtype.kind not in "iu" for a in arrays):
        return None
    kind, ops_at, ops, waits_at, waits = _walk_links(f)
    n = len(f.op_start)
    start, end = np.empty(n, dtype=np.int64), np.empty(n, dtype=np.int64)
    dur, o_start, lat, floor, after, gap, o_dur, counted = (np.ascontiguousarray(a, dtype=np.int64) for a in arrays)
    try:
        round_ns, host_ns = _native_walk(kind, dur, ops_at, ops, waits_at, waits, o_start, lat, floor, after, gap,
                                         o_dur, counted, start, end, K_SEGMENT, K_EXTERNAL, K_BLOCKING)  # fmt: skip
    except (IndexError, ValueError, TypeError):  # an index C will not follow (Python's walk reads -1 as the last)
        return None
    return int(round_ns), int(host_ns), start, end


def _walk_links(f: Flat) -> tuple[np.ndarray, ...]:
    """The nodes as the walk in C reads them: kinds, their ops and their waits as offsets and values. Read once
    for a graph and kept on `f` (`Flat.links`), so that its what-ifs on arrays, which change lengths only and
    share the nodes' kinds, ops and waits, skip it: ~45 of a walk's ~75 µs on a ResNet-50 round (2-core dev VM,
    2026-11-28). Kept with the very objects it was read from, and read again where any of them is another."""
    counts, _, ops = issued(f)
    kept = f.links
    if kept is not None and kept[0] is f.kind and kept[1] is f.waits and kept[2] is f.issue:
        return kept[3]
    ops_at = np.zeros(len(counts) + 1, dtype=np.int64)
    counts.cumsum(out=ops_at[1:])
    blocks = (f.kind == K_BLOCKING).nonzero()[0]  # only blocking nodes wait
    lists = [f.waits[b] for b in blocks.tolist()]
    waits_at = np.zeros(len(f.kind) + 1, dtype=np.int64)
    waits_at[blocks + 1] = [len(w) for w in lists]
    waits_at.cumsum(out=waits_at)
    waits = np.fromiter(itertools.chain.from_iterable(lists), dtype=np.int64, count=int(waits_at[-1]))
    kind = np.ascontiguousarray(f.kind, dtype=np.int8)
    links = (kind, ops_at, np.ascontiguousarray(ops, dtype=np.int64), waits_at, waits)
    f.links = (f.kind, f.waits, f.issue, links)
    return links


def walk_columns(f: Flat) -> Replay:
    """`replay_walk` of the graph written as `f`, read from its columns: no node or op objects made (a what-if
    the array replay does not take, e.g. a round of many short stretches, was 2/3 making them)."""
    times = zip(*(a.tolist() for a in (f.op_start, f.op_lat, f.op_floor, f.op_after, f.op_gap, f.op_dur)), strict=True)
    return _walk(f.kind.tolist(), f.dur.tolist(), f.node_ops, f.waits, list(times), f.counted.tolist())


def _walk(
    kinds: list[int],
    durs: list[int],
    node_ops: list[list[int]],
    node_waits: list[list[int]],
    ops: list[tuple[int, int, int, int, int, int]],
    counted: list[int],
) -> Replay:
    """The walk: nodes as kind codes (flat.py), lengths, ops and waits; ops as (start, lat, floor, after, gap, dur).
    An op not placed yet ends at `_FAR` (before anything), so it neither delays its stream's next op nor a wait."""
    n, far = len(ops), _FAR
    start, end = [0] * n, [far] * n
    segment, external, blocking = K_SEGMENT, K_EXTERNAL, K_BLOCKING
    h = 0
    for kind, dur, issued_ops, waits in zip(kinds, durs, node_ops, node_waits, strict=True):
        if kind == segment:
            h += dur
            continue
        for j in issued_ops:  # a round can issue 25,000 ops
            o_start, lat, floor, after, gap, o_dur = ops[j]
            s = o_start if kind == external else h + lat
            if floor > s:
                s = floor
            if after >= 0 and end[after] + gap > s:
                s = end[after] + gap
            start[j], end[j] = s, s + o_dur
        if kind == external:
            continue
        if kind == blocking:
            for j in waits:
                if end[j] > h:
                    h = end[j]
        h += dur
    for j in range(n):  # an op no node issued (not expected): at its measured time and floor, after its stream's op
        if end[j] == far:
            o_start, _, floor, after, gap, o_dur = ops[j]
            s = max(o_start, floor)
            if after >= 0 and end[after] != far:
                s = max(s, end[after] + gap)
            start[j], end[j] = s, s + o_dur
    last = max((end[j] for j in counted), default=0)
    return Replay(round_ns=max(h, last), host_ns=h, op_start=start, op_end=end)


_FAR = -(2**62)


def replay_plan(p: Plan) -> Replay:
    """The replay of a compiled graph: per stretch, each op's start along its chain is a running max."""
    host, start, end = _run_plan(p)
    op_start = np.empty(p.n_ops, dtype=np.int64)
    op_start[p.shape.op] = start
    return Replay(round_ns=_round_ns(p, host, end), host_ns=host, op_start=op_start.tolist(), op_end=end.tolist())


def _round_ns(p: Plan, host: int, end: np.ndarray) -> int:
    return max(host, int(end[p.counted].max()) if len(p.counted) else 0)


def _run_plan(p: Plan) -> tuple[int, np.ndarray, np.ndarray]:
    """The host's end, each op's start by run position and its end by op (see `replay_plan`)."""
    sh = p.shape
    start = np.empty(p.n_ops, dtype=np.int64)  # by run position
    end = np.zeros(p.n_ops, dtype=np.int64)  # by op
    carry = np.full(p.n_ops, _FAR, dtype=np.int64)  # by chain: its running max so far
    # Less each op's chain lengths before it (c), once for every stretch: its ready time (the host's waits so far
    # added where it moves with the host) and its floor. Integers: max(x + w, f) - c == max(x - c + w, f - c).
    ready, floor = p.base - p.c, p.floor - p.c
    wait = 0  # how long the host has waited so far
    for t, (a, b, first, chain_first, last, chain_last, rank, ops, waits) in enumerate(sh.stretches()):
        if b > a:
            v = ready[a:b] + wait * sh.host_run[a:b] if wait else ready[a:b].copy()
            np.maximum(v, floor[a:b], out=v)
            v[first] = np.maximum(v[first], carry[chain_first])
            _running_max(v, rank, first)
            carry[chain_last] = v[last]
            v += p.c[a:b]
            start[a:b] = v
            end[ops] = v + p.dur[a:b]
        if waits is not None:  # the last stretch waits for nothing
            wait = max(wait, int(end[waits].max()) - p.host_before[t])
    return p.host_total + wait, start, end


def _running_max(v: np.ndarray, rank: np.ndarray, first: np.ndarray) -> None:
    """v[k] = max(v[i..k]) in place, `i` the start of k's part (`first`: where the parts start, by position;
    `rank`: parts before it)."""
    lo, hi = int(v.min()), int(v.max())
    big = hi - lo + 1
    if (int(rank[-1]) + 1) * big + abs(lo) + abs(hi) < 2**62:
        off = rank * big  # each part above every earlier one: one running max serves them all
        v += off
        np.maximum.accumulate(v, out=v)
        v -= off
        return
    bounds = [*first.tolist(), len(v)]
    for i, k in itertools.pairwise(bounds):
        np.maximum.accumulate(v[i:k], out=v[i:k])


class Replayer:
    """Replays a graph and the what-if copies of it (`RoundGraph.derived`), rereading only what a copy changed.

    Walked in C where that walk is built (`walk_round_ns`); else by the array plan, sharing the shape (flat.Shape)
    where a copy keeps it. The C walk replays a graph of any size faster than its plan is compiled and run: at
    ResNet-50's 616 nodes 30-57 against 62-142 µs a what-if, and 260 µs for the shape and plan first; at 50,000
    nodes 1.3 against 2.5 ms, and 5.5 ms for the shape (2-core dev VM, 2026-11-28). The two give the same times
    (tests/unit/test_replay_equivalence.py)."""

    def __init__(self, graph: RoundGraph) -> None:
        self.graph = graph
        self.flat = flat_of(graph)
        self.walks = _native_walk is not None
        self.shape = shape_of(self.flat) if len(self.flat.op_dur) and not self.walks else None
        self.plan = compile_plan(self.flat, self.shape) if self.shape else None  # what-ifs share its parts

    def round_ns(self, graph: RoundGraph) -> int:
        """The replayed round of `graph` (this one, a copy of it, or any other graph)."""
        d = graph.derived
        if graph is self.graph:
            plan = self.plan
            if plan is None:  # walked: as objects (made from the columns, where the graph was built as them)
                return walk_round_ns(self.flat)
        elif d is not None and d.base is self.graph:
            f, same = patch(self.flat, graph, d.nodes, d.ops)
            if self.walks:
                return walk_round_ns(f)
            plan = compile_plan(f, self.shape if same and self.shape else None)
        else:
            return replay(graph).round_ns
        return replay_walk(graph).round_ns if plan is None else _plan_round_ns(plan)

    def round_ns_of(self, f: Flat) -> int:
        """The replayed round of this graph with the lengths of `f` (its arrays, changed: edits.ArrayTransform)."""
        if self.walks:
            return walk_round_ns(f)
        base = self.flat
        same = f.kind is base.kind and f.node_ops is base.node_ops and f.waits is base.waits
        same = same and f.op_after is base.op_after and self.shape is not None
        plan = compile_plan(f, self.shape, (base, self.plan)) if same and self.plan else compile_plan(f)
        if plan is None:
            return walk_round_ns(f)
        return _plan_round_ns(plan)


def _plan_round_ns(p: Plan) -> int:
    """`replay_plan(p).round_ns`, without the per-op lists."""
    host, _, end = _run_plan(p)
    return _round_ns(p, host, end)


def replay_error(graphs: list[RoundGraph]) -> float:
    """(replayed - measured) / measured over the given rounds, unchanged: how well the graph explains them."""
    measured = sum(g.measured_ns for g in graphs)
    replayed = sum(replay(g).round_ns for g in graphs)
    return (replayed - measured) / measured if measured else 0.0
