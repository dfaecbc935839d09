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

from ..events import Kind
from .comm import is_comm_kernel
from .flat import K_BLOCKING, K_CALL, K_SEGMENT, Flat, flatten, issued, materialise
from .graph import CALL, Derived, GpuOp, HostNode, RoundGraph

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
        f = flatten(g)
        changed = self.on_arrays(f)
        return None if changed is None else materialise(g, f, changed)


def cuda_graph_arrays(f: Flat) -> Flat | None:
    """Each stretch between synchronisations captured in a CUDA graph and replayed (whatif.cuda_graph).

    Inside the captured region, from the stretch's first launch call to its last, the other launch calls
    and the host segments between them cost nothing (a replay skips the framework's dispatch and the
    model's Python alike), and each op issued there runs `GRAPH_GAP_NS` after the one before it. A
    dispatch segment (up to DISPATCH_NS) right before a launch goes too; the host's work before and
    after the region stays.
    """
    n = len(f.kind)
    n_ops, issuer, placed = issued(f)
    launch = (f.kind == K_CALL) & (n_ops > 0)
    li = np.flatnonzero(launch)
    if not len(li):
        return None
    stretch = np.cumsum(f.kind == K_BLOCKING)[li]
    new = np.ones(len(li), dtype=bool)
    new[1:] = stretch[1:] != stretch[:-1]
    first, last = li[new], li[np.append(new[1:], True)]
    mark = np.zeros(n + 1, dtype=np.int64)  # +1 after each region's first launch, -1 after its last
    np.add.at(mark, first + 1, 1)
    np.add.at(mark, last + 1, -1)
    inside = np.cumsum(mark)[:n] > 0
    before = li[li > 0] - 1
    before = before[(f.kind[before] == K_SEGMENT) & (f.dur[before] <= DISPATCH_NS)]
    hit = inside & ((f.kind == K_SEGMENT) | launch)
    hit[before] = True
    hit &= f.dur > 0
    replayed = np.flatnonzero(inside & launch)
    if not hit.any() and not len(replayed):
        return None
    dur = np.where(hit, 0, f.dur)
    op_gap = f.op_gap.copy()
    replayed_node = np.zeros(n, dtype=bool)
    replayed_node[replayed] = True
    op_gap[placed[replayed_node[issuer]]] = GRAPH_GAP_NS
    return dataclasses.replace(f, dur=dur, op_gap=op_gap)


def host_work_arrays(f: Flat) -> Flat | None:
    """The host segments longer than the dispatch (DISPATCH_NS) cost nothing (whatif.host_off_path)."""
    hits = (f.kind == K_SEGMENT) & (f.dur > DISPATCH_NS)
    return dataclasses.replace(f, dur=np.where(hits, 0, f.dur)) if hits.any() else None


def comm_kernels(f: Flat) -> np.ndarray:
    """Which ops are collective kernels (comm.py); kept in `f.comm` for the what-ifs that ask again."""
    if f.comm is None:
        named = np.fromiter(map(is_comm_kernel, f.op_name), dtype=bool, count=len(f.op_name))
        f.comm = (f.op_kind == Kind.KERNEL) & named
    return f.comm


def faster(select: Callable[[Flat], np.ndarray], factor: float | None) -> Callable[[Flat], Flat | None]:
    """The ops `select` picks `factor` times faster (None: free)."""

    def on_arrays(f: Flat) -> Flat | None:
        hits = select(f)
        if not hits.any():
            return None
        dur = f.op_dur.copy()
        dur[hits] = 0 if factor is None else np.round(f.op_dur[hits] / factor)
        return dataclasses.replace(f, op_dur=dur)

    return on_arrays


def compute(f: Flat) -> np.ndarray:
    """Kernels and memsets, collectives left out."""
    return ((f.op_kind == Kind.KERNEL) | (f.op_kind == Kind.MEMSET)) & ~comm_kernels(f)


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
