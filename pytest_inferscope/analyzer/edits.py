"""The what-ifs' edits of a round graph: on its arrays, for what-ifs that change most of a round, and
copy on write (`Edit`), for those that change a few nodes.

A CUDA graph changes every launch call and most kernels; faster compute every kernel. Done on
objects that is a copy of most of a 50,000-node round per what-if; on arrays it is a few array
operations, and `replay.Replayer` replays the result without building objects. `ArrayTransform`
gives such a change the object interface every what-if has (`WhatIf.transform`): the changed
graph, its changed nodes and ops copied (`materialise`). `Edit` copies only the nodes and ops a
what-if changes, and says which (`RoundGraph.derived`), so that `Replayer` rereads only those.
Pure functions; nothing here prints or writes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from ..events import CopyKind, Kind
from .comm import is_comm_kernel
from .context_gpu import is_alloc_call
from .flat import K_BLOCKING, K_CALL, K_SEGMENT, Flat, flat_of, issued, materialise
from .graph import CALL, READ_BYTES, Derived, GpuOp, HostNode, RoundGraph

T = TypeVar("T")

#: Host segments up to this long right before a launch are the framework's dispatch, which a CUDA graph skips.
DISPATCH_NS = 50_000
#: Gap between consecutive ops replayed from a CUDA graph: 0.38-0.42 us median measured on the H200 (ResNet-50
#: and ViT-B/16 graphs, 2026-11-25), against 1.5-1.7 us between the same kernels launched one by one.
GRAPH_GAP_NS = 400


@dataclass(frozen=True)
class ArrayTransform:
    """A what-if's transform written on arrays: `on_arrays` returns the changed arrays (lengths only: no node
    changes kind, ops or waits, no op its `after`), or None where the change does not apply."""

    on_arrays: Callable[[Flat], Flat | None]

    def __call__(self, g: RoundGraph) -> RoundGraph | None:
        changed = self.on_arrays(flat_of(g))
        return None if changed is None else materialise(g, changed)


def cuda_graph_arrays(f: Flat) -> Flat | None:
    """Each stretch between synchronisations captured in a CUDA graph and replayed (whatif.cuda_graph).

    Inside the captured region, from the stretch's first launch call to its last, the other launch calls
    and the host segments between them cost nothing (a replay skips the framework's dispatch and the
    model's Python alike), and each op issued there runs `GRAPH_GAP_NS` after the one before it. A
    dispatch segment (up to DISPATCH_NS) right before a launch goes too; the host's work before and
    after the region stays.
    """
    kind, n = f.kind, len(f.kind)
    n_ops, issuer, placed = issued(f)
    launch = (kind == K_CALL) & (n_ops > 0)
    li = launch.nonzero()[0]
    if not len(li):
        return None
    stretch = (kind == K_BLOCKING).cumsum()[li]
    new = np.empty(len(li), dtype=bool)  # (np.ones' wrappers cost more than the work here)
    new[0] = True
    np.not_equal(stretch[1:], stretch[:-1], out=new[1:])
    ends = np.empty(len(li), dtype=bool)  # each stretch's last launch (np.append's wrappers: 3.4 against 1 µs)
    ends[:-1], ends[-1] = new[1:], True
    first, last = li[new], li[ends]
    mark = np.zeros(n + 1, dtype=np.int64)  # +1 after each region's first launch, -1 after its last
    # (`first` and `last` are each distinct, so a fancy-indexed add is np.add.at's: ~10 µs less)
    mark[first + 1] += 1
    mark[last + 1] -= 1
    inside = mark.cumsum()[:n] > 0
    before = li[li > 0] - 1
    segment = kind == K_SEGMENT
    before = before[segment[before] & (f.dur[before] <= DISPATCH_NS)]
    hit = inside & (segment | launch)
    hit[before] = True
    hit &= f.dur > 0
    replayed = inside & launch
    if not hit.any() and not replayed.any():
        return None
    dur = np.where(hit, 0, f.dur)
    op_gap = f.op_gap.copy()
    op_gap[placed[replayed[issuer]]] = GRAPH_GAP_NS
    return f.changed(dur=dur, op_gap=op_gap)


def host_work_arrays(f: Flat) -> Flat | None:
    """The host segments longer than the dispatch (DISPATCH_NS) cost nothing (whatif.host_off_path)."""
    hits = (f.kind == K_SEGMENT) & (f.dur > DISPATCH_NS)
    return f.changed(dur=np.where(hits, 0, f.dur)) if hits.any() else None


def comm_kernels(f: Flat) -> np.ndarray:
    """Which ops are collective kernels (comm.py); kept in `f.comm` for the what-ifs that ask again."""
    if f.comm is None:
        # each distinct name asked once; most rounds run no collective, and need no look per op
        collectives = {name for name in set(f.op_name) if is_comm_kernel(name)}
        if not collectives:
            f.comm = np.zeros(len(f.op_name), dtype=bool)
        else:
            named = np.fromiter((name in collectives for name in f.op_name), dtype=bool, count=len(f.op_name))
            f.comm = (f.op_kind == int(Kind.KERNEL)) & named
    return f.comm


def faster(select: Callable[[Flat], np.ndarray], factor: float | None) -> Callable[[Flat], Flat | None]:
    """The ops `select` picks `factor` times faster (None: free)."""

    def on_arrays(f: Flat) -> Flat | None:
        hits = select(f)
        if not hits.any():
            return None
        dur = f.op_dur.copy()
        dur[hits] = 0 if factor is None else np.round(f.op_dur[hits] / factor)
        return f.changed(op_dur=dur)

    return on_arrays


def compute(f: Flat) -> np.ndarray:
    """Kernels and memsets, collectives left out."""
    return ((f.op_kind == int(Kind.KERNEL)) | (f.op_kind == int(Kind.MEMSET))) & ~comm_kernels(f)


def syncs_removed(kind: str) -> Callable[[Flat], Flat | None]:
    """The blocking calls of synchronisation `kind` wait for nothing and cost nothing, and the reads they waited
    for (`_reads`) go too (whatif.remove_syncs)."""

    def on_arrays(f: Flat) -> Flat | None:
        blocks = (f.kind == K_BLOCKING).nonzero()[0]
        hit = [b for b in blocks.tolist() if f.node_sync[b] == kind]
        if not hit:
            return None
        stretch = np.concatenate([[0], blocks[:-1] + 1])[blocks.searchsorted(hit)]  # after the block before
        nodes, ops = _reads(f, hit, stretch.tolist())
        dur, kinds, waits = f.dur.copy(), f.kind.copy(), list(f.waits)
        dur[hit], kinds[hit], dur[nodes] = 0, K_CALL, 0
        for b in hit:
            waits[b] = []
        op_dur = f.op_dur
        if len(ops):
            op_dur = op_dur.copy()
            op_dur[ops] = 0
        return f.changed(kind=kinds, dur=dur, waits=waits, op_dur=op_dur)

    return on_arrays


def _reads(f: Flat, blocks: list[int], stretch: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The reads each of `blocks` waited for, issued in its own stretch (nodes `stretch` to the block): small
    device-to-host copies. Their host nodes (the copy call, the segments from it to the block, and the segment
    right before the call when it is no longer than DISPATCH_NS: the framework's dispatch of the read) and their
    ops."""
    assert f.op_copy is not None and f.op_nbytes is not None
    is_read = (f.op_kind == int(Kind.MEMCPY)) & (f.op_copy == int(CopyKind.DTOH)) & (f.op_nbytes > 0)
    is_read &= f.op_nbytes <= READ_BYTES
    _, issuer, placed = issued(f)
    sel = is_read[placed]
    issuers: dict[int, list[int]] = {}  # each read op's issuing nodes
    for c, j in zip(issuer[sel].tolist(), placed[sel].tolist(), strict=True):
        issuers.setdefault(j, []).append(c)
    read, kind, dur = is_read.tolist(), f.kind, f.dur
    nodes: list[int] = []
    ops: list[int] = []
    mark = np.zeros(len(kind) + 1, dtype=np.int64)  # +1 where a read's segments start, -1 after them
    for b, first in zip(blocks, stretch, strict=True):
        wanted = {j for j in f.waits[b] if read[j]}
        calls = {c for j in wanted for c in issuers.get(j, ()) if first <= c < b and kind[c] == K_CALL}
        for c in calls:
            ops += [j for j in f.node_ops[c] if j in wanted]
            nodes.append(c)
            mark[c + 1] += 1
            mark[b] -= 1
            if c > 0 and kind[c - 1] == K_SEGMENT and dur[c - 1] <= DISPATCH_NS:
                nodes.append(c - 1)
    segments = ((mark.cumsum()[:-1] > 0) & (kind == K_SEGMENT)).nonzero()[0]
    return np.concatenate([np.array(nodes, dtype=np.int64), segments]), np.array(ops, dtype=np.int64)


def allocator_free(f: Flat) -> Flat | None:
    """The GPU allocator's calls cost nothing and wait for nothing (whatif.no_allocator)."""
    alloc = {name for name in set(f.node_name) if is_alloc_call(name)}
    if not alloc:  # most rounds: nothing to change, found without a Python step per node
        return None
    named = np.fromiter((name in alloc for name in f.node_name), dtype=bool, count=len(f.node_name))
    hits = named & ((f.kind == K_CALL) | (f.kind == K_BLOCKING))
    if not hits.any():
        return None
    dur = np.where(hits, 0, f.dur)
    if not (f.kind[hits] == K_BLOCKING).any():  # calls only: the same shape
        return f.changed(dur=dur)
    waits = [[] if h else w for h, w in zip(hits.tolist(), f.waits, strict=True)]
    return f.changed(dur=dur, kind=np.where(hits, K_CALL, f.kind).astype(f.kind.dtype), waits=waits)


def module_removed(module: str) -> Callable[[Flat], Flat | None]:
    """The host segments lose the time sampled in `module` (whatif.remove_module)."""

    def on_arrays(f: Flat) -> Flat | None:
        m = f.modules
        # the module's entries (its names are distinct: one index at most; np.isin took ~28 µs a call)
        sel = m.module == m.names.index(module) if module in m.names else np.zeros(len(m.module), dtype=bool)
        node, ns = m.node[sel], m.ns[sel]
        keep = f.kind[node] == K_SEGMENT
        node, ns = node[keep], ns[keep]
        new = np.maximum(0, f.dur[node] - ns)
        if not (new != f.dur[node]).any():
            return None
        dur = f.dur.copy()
        dur[node] = new
        return f.changed(dur=dur)

    return on_arrays


def _clone(x: T) -> T:
    y = object.__new__(type(x))
    y.__dict__.update(x.__dict__)
    return y


class Edit:
    """A copy of a graph that clones a node or an op only when a transformation changes it (copy on write: a
    round can hold 50,000 nodes, and most what-ifs change a few of them). Lists and dicts inside a node are
    shared: a transformation assigns new ones (`n.ops = [...]`), never changes them in place."""

    def __init__(self, g: RoundGraph) -> None:
        self.base = g
        self.g = dataclasses.replace(g, nodes=list(g.nodes), ops=list(g.ops), derived=None)
        self._nodes: set[int] = set()
        self._ops: set[int] = set()

    def node(self, i: int) -> HostNode:
        if i not in self._nodes:
            self.g.nodes[i] = _clone(self.g.nodes[i])
            self._nodes.add(i)
        return self.g.nodes[i]

    def op(self, j: int) -> GpuOp:
        if j not in self._ops:
            self.g.ops[j] = _clone(self.g.ops[j])
            self._ops.add(j)
        return self.g.ops[j]

    def result(self) -> RoundGraph | None:
        """The changed graph, or None when nothing changed (the what-if does not apply)."""
        if not self._nodes and not self._ops:
            return None
        self.g.derived = Derived(self.base, self._nodes, self._ops)
        return self.g


def unblock(out: Edit, i: int, dur: int) -> None:
    """Node `i` of the copy a call that waits for nothing, `dur` long."""
    n = out.node(i)
    n.kind, n.waits, n.dur = CALL, [], dur
