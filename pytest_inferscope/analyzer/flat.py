"""A round graph (graph.py) as arrays, and the plan that replays it stretch by stretch with array operations.

`flatten` reads a `RoundGraph`'s nodes and ops into arrays (`Flat`); `patch` rereads only the nodes and ops
a what-if changed (whatif.py edits copy on write, so the rest is the unchanged graph's). `compile_plan`
derives from a `Flat` what `replay.py` needs to replay it with a few array operations per *stretch* (the
nodes up to and including a blocking call), or None where that does not apply (replay.py then walks the
graph node by node). Pure functions; nothing here prints or writes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from operator import attrgetter

import numpy as np

from .columns import (
    BLOCKING,
    CALL,
    EXTERNAL,
    K_BLOCKING,
    K_CALL,
    K_EXTERNAL,
    K_OTHER,
    K_SEGMENT,
    SEGMENT,
    Flat,
    Modules,
    issued,
)
from .graph import ArrayGraph, HostNode, RoundGraph, gpu_ops, host_nodes


class _Codes(dict[str, int]):
    """Node kind -> code, K_OTHER for any other kind."""

    def __missing__(self, key: str) -> int:
        return K_OTHER


KIND_CODES = _Codes({SEGMENT: K_SEGMENT, CALL: K_CALL, BLOCKING: K_BLOCKING, EXTERNAL: K_EXTERNAL})


def _kinds(nodes: list[HostNode]) -> np.ndarray:
    """The nodes' kind codes (looked up without a Python call per node: a round can hold 50,000)."""
    return np.fromiter(map(KIND_CODES.__getitem__, map(attrgetter("kind"), nodes)), dtype=np.int8, count=len(nodes))


def _ints(values: list) -> np.ndarray:
    a = np.asarray(values)
    return a if a.size else np.zeros(0, dtype=np.int64)


def flat_of(g: RoundGraph) -> Flat:
    """The graph's columns: those it was built as (build.py), or its objects read into them."""
    f = g.columns if isinstance(g, ArrayGraph) else None
    return flatten(g) if f is None else f


def flatten(g: RoundGraph) -> Flat:
    """The graph as arrays."""
    nodes, ops = g.nodes, g.ops
    names: dict[str, int] = {}
    entries = [(i, names.setdefault(m, len(names)), ns) for i, n in enumerate(nodes) for m, ns in n.modules.items()]
    node, module, ns = (np.array([e[k] for e in entries], dtype=np.int64) for k in range(3))
    return Flat(
        kind=_kinds(nodes),
        dur=_ints([n.dur for n in nodes]),
        node_ops=[n.ops for n in nodes],
        waits=[n.waits for n in nodes],
        op_dur=_ints([o.dur for o in ops]),
        op_lat=_ints([o.lat for o in ops]),
        op_gap=_ints([o.gap for o in ops]),
        op_floor=_ints([o.floor for o in ops]),
        op_start=_ints([o.start for o in ops]),
        op_after=_ints([o.after for o in ops]),
        op_kind=_ints([o.kind for o in ops]),
        op_name=[o.name for o in ops],
        counted=np.asarray(g.counted, dtype=np.int64),
        node_start=_ints([n.start for n in nodes]),
        node_name=[n.name for n in nodes],
        node_sync=[n.sync for n in nodes],
        modules=Modules(node, module, ns, list(names)),
        op_stream=_ints([o.stream for o in ops]),
        op_end=_ints([o.end for o in ops]),
        op_nbytes=_ints([o.nbytes for o in ops]),
        op_copy=_ints([o.copy for o in ops]),
        op_pageable=np.array([o.pageable for o in ops], dtype=bool),
        link_gb_s=g.link_gb_s,
        other={i: n.kind for i, n in enumerate(nodes) if n.kind not in KIND_CODES},
    )


def patch(base: Flat, g: RoundGraph, nodes: set[int], ops: set[int]) -> tuple[Flat, bool]:
    """`base` (the arrays of the graph `g` was copied from) with `g`'s nodes `nodes` and ops `ops` reread, and
    whether the shape (`Shape`) is the same: no node changed kind, ops or waits, no op its `after`."""
    f = base.changed()
    same = True
    if nodes:
        idx = np.fromiter(nodes, dtype=np.int64, count=len(nodes))
        changed = [g.nodes[i] for i in idx.tolist()]
        kind = _kinds(changed)
        same = bool((kind == base.kind[idx]).all())
        f.kind, f.dur = _assign(base.kind, idx, kind), _assign(base.dur, idx, _ints([n.dur for n in changed]))
        f.node_ops, f.waits = list(base.node_ops), list(base.waits)
        for i, n in zip(idx.tolist(), changed, strict=True):
            if n.ops is not base.node_ops[i] or n.waits is not base.waits[i]:
                same_ops = n.ops == base.node_ops[i]
                same = same and same_ops and n.waits == base.waits[i]
                f.node_ops[i], f.waits[i] = n.ops, n.waits
                if not same_ops:
                    f.issue = None  # issued(f) reads the nodes' ops
    if ops:
        idx = np.fromiter(ops, dtype=np.int64, count=len(ops))
        changed_ops = [g.ops[j] for j in idx.tolist()]
        for name in ("dur", "lat", "gap", "floor", "start", "after", "kind"):
            values = _ints([getattr(o, name) for o in changed_ops])
            setattr(f, "op_" + name, _assign(getattr(base, "op_" + name), idx, values))
        f.op_name = list(base.op_name)
        f.comm = None
        for j, o in zip(idx.tolist(), changed_ops, strict=True):
            f.op_name[j] = o.name
        same = same and bool((f.op_after[idx] == base.op_after[idx]).all())
    return f, same


def _assign(a: np.ndarray, idx: np.ndarray, values: np.ndarray) -> np.ndarray:
    """A copy of `a` with a[idx] = values (floats if either is)."""
    out = a.astype(np.result_type(a, values))
    out[idx] = values
    return out


def materialise(g: RoundGraph, changed: Flat) -> RoundGraph:
    """A copy of `g` written as `changed` (its columns, changed by a what-if on arrays), as objects."""
    return RoundGraph(
        host_nodes(changed),
        gpu_ops(changed),
        g.measured_ns,
        dict(g.stream_busy),
        list(g.counted),
        g.link_gb_s,
        set(g.framework),
    )


@dataclass
class Shape:
    """What the array replay needs from a graph's structure (its nodes' kinds, ops and waits, its ops' order on
    their streams), shared by what-ifs that change only lengths. Ops are in *run order*: by stretch, then by
    chain, then as placed.

    A chain is a run of ops each following the one before it (`GpuOp.after`), placed in that order: an op
    starts at `c + the running max of (ready - c)` along its chain, `c` being the chain's durations and gaps
    before it. Stretch `t` holds run positions `bounds[t]..bounds[t+1]` and ends with blocking node
    `blocks[t]` (the last stretch: with the nodes after the last one), which waits for ops
    `waits[wptr[t]:wptr[t+1]]`.
    """

    op: np.ndarray  # the op at each run position
    node_of: np.ndarray  # by op: the node that issued it (the node count: none)
    on_host: np.ndarray  # by op: whether its ready time moves with the host
    host_run: np.ndarray  # the same by run position
    parent: np.ndarray  # by op: the op it follows on its chain (-1: none)
    by_chain: np.ndarray  # ops by chain, then as placed
    head: np.ndarray  # positions in `by_chain` that start a chain
    first: np.ndarray  # whether a run position starts a chain's part in its stretch
    last: np.ndarray  # whether it ends one
    chain: np.ndarray  # the chain at each run position (the op that starts it)
    rank: np.ndarray  # how many chain parts start before it
    bounds: list[int]
    blocks: np.ndarray
    waits: np.ndarray
    wptr: list[int]
    _stretches: list[Stretch] | None = field(default=None, repr=False, compare=False)

    def stretches(self) -> list[Stretch]:
        """Per stretch, what the array replay reads of the shape (made once per shape: its what-ifs share it)."""
        if self._stretches is None:
            out: list[Stretch] = []
            for t in range(len(self.bounds) - 1):
                a, b = self.bounds[t], self.bounds[t + 1]
                first, last = self.first[a:b].nonzero()[0], self.last[a:b].nonzero()[0]
                chain = self.chain[a:b]
                w0, w1 = self.wptr[t], self.wptr[t + 1]
                waits = self.waits[w0:w1] if w1 > w0 else None
                rank = self.rank[a:b] - self.rank[a] if b > a else self.rank[a:b]
                out.append((a, b, first, chain[first], last, chain[last], rank, self.op[a:b], waits))
            self._stretches = out
        return self._stretches


#: A stretch's run positions [a, b), the positions (from a) that start and end a chain's part and those chains,
#: each position's rank (parts before it in the stretch), the op at each position, and the ops the stretch's
#: blocking node waits for (None: none).
Stretch = tuple[int, int, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]


@dataclass
class Plan:
    """A `Shape` with the graph's lengths: by run position, each op's ready time (less the host's waits so
    far, for host ops), floor, `c` and duration; the host's clock before each blocking node and at the end,
    without waits."""

    shape: Shape
    base: np.ndarray
    floor: np.ndarray
    c: np.ndarray
    dur: np.ndarray
    host_before: list[int]
    host_total: int
    counted: np.ndarray
    n_ops: int


#: The array replay pays off from this many nodes per stretch on average (fewer: node by node is faster).
MIN_STRETCH = 24


def compile_plan(f: Flat, shape: Shape | None = None, like: tuple[Flat, Plan] | None = None) -> Plan | None:
    """The plan of `f` (`shape`: its shape, when known), or None where the array replay does not apply: float
    times, an op issued twice, an op followed by two (the chains are not chains), or stretches too short to
    pay off. `like`: arrays of the same shape and their plan, whose parts `f` shares where it shares their
    columns (a what-if that changes only the host, or only the ops)."""
    arrays = (f.dur, f.op_dur, f.op_lat, f.op_gap, f.op_floor, f.op_start, f.op_after)
    if not len(f.op_dur) or any(a.dtype.kind not in "iu" for a in arrays):
        return None
    shape = shape or shape_of(f)
    return None if shape is None else _lengths(f, shape, like if like and like[1].shape is shape else None)


def shape_of(f: Flat) -> Shape | None:
    """The shape of `f`, or None (see `compile_plan`)."""
    n_nodes, n_ops = len(f.kind), len(f.op_dur)
    blocks = (f.kind == K_BLOCKING).nonzero()[0]
    if n_nodes < MIN_STRETCH * (len(blocks) + 1):
        return None
    _, issuer, placed = issued(f)
    keep = f.kind[issuer] != K_SEGMENT
    issuer, placed = issuer[keep], placed[keep]
    if len(placed) and (placed.min() < 0 or placed.max() >= n_ops):
        return None
    times = np.bincount(placed, minlength=n_ops)  # how many nodes issued each op (np.unique sorts: ~5x dearer)
    if times.max(initial=0) > 1:
        return None
    rest = (times == 0).nonzero()[0]  # issued by no node: placed last, at their measured time
    order = np.concatenate([placed, rest])
    pos = np.empty(n_ops, dtype=np.int64)
    pos[order] = np.arange(n_ops)
    node_of = np.empty(n_ops, dtype=np.int64)
    node_of[order] = np.concatenate([issuer, np.full(len(rest), n_nodes)])
    after = f.op_after.astype(np.int64)
    linked = (after >= 0) & (after < n_ops)
    linked[linked] = pos[after[linked]] < pos[linked]
    if np.bincount(after[linked], minlength=n_ops).max(initial=0) > 1:
        return None
    return _shape(f, pos, node_of, np.where(linked, after, -1), blocks)


def _roots(parent: np.ndarray) -> np.ndarray:
    """Each op's chain (the op that starts it), by pointer jumping."""
    root = np.where(parent >= 0, parent, np.arange(len(parent)))
    while True:
        nxt = root[root]
        if np.array_equal(nxt, root):
            return root
        root = nxt


def _shape(f: Flat, pos: np.ndarray, node_of: np.ndarray, parent: np.ndarray, blocks: np.ndarray) -> Shape:
    n_nodes, n_ops = len(f.kind), len(f.op_dur)
    on_host = node_of < n_nodes
    on_host[on_host] = f.kind[node_of[on_host]] != K_EXTERNAL
    root = _roots(parent)
    by_chain = np.lexsort((pos, root))
    stretch = blocks.searchsorted(node_of, side="left")
    run = np.lexsort((pos, root, stretch))
    s_run, r_run = stretch[run], root[run]
    new = np.ones(n_ops, dtype=bool)
    new[1:] = (s_run[1:] != s_run[:-1]) | (r_run[1:] != r_run[:-1])
    # what each blocking node waits for: the ops among its waits placed by then (as the walk sees them)
    wait_lists = [f.waits[b] for b in blocks.tolist()]
    of_block = np.arange(len(blocks)).repeat([len(x) for x in wait_lists])
    waits = np.fromiter(chain.from_iterable(wait_lists), dtype=np.int64, count=len(of_block))
    ok = (waits >= 0) & (waits < n_ops)
    ok[ok] = node_of[waits[ok]] <= blocks[of_block[ok]]
    wptr = np.concatenate([[0], np.bincount(of_block[ok], minlength=len(blocks)).cumsum()])
    return Shape(
        op=run,
        node_of=node_of,
        on_host=on_host,
        host_run=on_host[run],
        parent=parent,
        by_chain=by_chain,
        head=(parent[by_chain] < 0).nonzero()[0],
        first=new,
        last=np.append(new[1:], True),
        chain=r_run,
        rank=new.cumsum() - 1,
        bounds=s_run.searchsorted(np.arange(len(blocks) + 2)).tolist(),
        blocks=blocks,
        waits=waits[ok],
        wptr=[*wptr.tolist(), int(wptr[-1])],  # the last stretch waits for nothing
    )


def _lengths(f: Flat, sh: Shape, like: tuple[Flat, Plan] | None) -> Plan:
    lf, lp = like if like is not None else (None, None)

    def shared(*columns: str) -> bool:  # the same arrays as `like`'s: its plan's parts from them hold for `f`
        return lf is not None and all(getattr(f, c) is getattr(lf, c) for c in columns)

    host = (lp.base, lp.host_before, lp.host_total) if lp and shared("kind", "dur", "op_lat", "op_start") else None
    base, host_before, host_total = host or _host_part(f, sh)
    c, dur = (lp.c, lp.dur) if lp and shared("op_dur", "op_gap") else _chain_part(f, sh)
    floor = lp.floor if lp and shared("op_floor") else f.op_floor.astype(np.int64)[sh.op]
    return Plan(sh, base, floor, c, dur, host_before, host_total, f.counted, len(f.op_dur))


def _host_part(f: Flat, sh: Shape) -> tuple[np.ndarray, list[int], int]:
    """By run position each op's ready time (less the host's waits); the host's clock before each blocking
    node and at the end, without waits."""
    adv = np.where(f.kind == K_EXTERNAL, 0, f.dur).astype(np.int64)
    host = np.concatenate([[0], adv.cumsum()])  # the host's clock before each node, without waits
    base = f.op_start.astype(np.int64)
    base = np.where(sh.on_host, host[np.minimum(sh.node_of, len(host) - 1)] + f.op_lat, base)
    return base[sh.op], host[sh.blocks].tolist(), int(host[-1])


def _chain_part(f: Flat, sh: Shape) -> tuple[np.ndarray, np.ndarray]:
    """By run position `c` (along each chain, the durations and gaps before each op) and each op's duration."""
    n_ops = len(f.op_dur)
    parent = sh.parent
    w = np.where(parent >= 0, f.op_dur[np.maximum(parent, 0)] + f.op_gap, 0)[sh.by_chain]
    csum = w.cumsum()
    c = np.empty(n_ops, dtype=np.int64)
    c[sh.by_chain] = csum - np.repeat(csum[sh.head] - w[sh.head], np.diff(np.append(sh.head, n_ops)))
    return c[sh.op], f.op_dur.astype(np.int64)[sh.op]
