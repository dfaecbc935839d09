"""What-ifs that change most of a round, written on its arrays (flat.Flat) rather than node by node.

A CUDA graph changes every launch call and most kernels; faster compute every kernel. Done on
objects that is a copy of most of a 50,000-node round per what-if; on arrays it is a few array
operations, and `replay.Replayer` replays the result without building objects. `ArrayTransform`
gives such a change the object interface every what-if has (`WhatIf.transform`): the changed
graph, its changed nodes and ops copied (`materialise`). Pure functions; nothing here prints or writes.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass
from itertools import chain

import numpy as np

from ..events import Kind
from .comm import COMM_KERNEL
from .flat import K_BLOCKING, K_CALL, K_SEGMENT, Flat, flatten, materialise
from .graph import RoundGraph

#: Host segments up to this long right before a launch are the framework's dispatch, which a CUDA graph skips.
DISPATCH_NS = 50_000
#: Gap between consecutive kernels replayed from a CUDA graph (when the trace shows none of its own).
GRAPH_GAP_NS = 1_000


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
    """Launches replayed from a CUDA graph: one launch per stretch between synchronisations (whatif.cuda_graph)."""
    n_ops = np.fromiter((len(x) for x in f.node_ops), dtype=np.int64, count=len(f.kind))
    launch = (f.kind == K_CALL) & (n_ops > 0)
    events = np.flatnonzero(launch | (f.kind == K_BLOCKING))
    after_launch = np.zeros(len(events), dtype=bool)
    after_launch[1:] = launch[events[:-1]]
    later = events[launch[events] & after_launch]  # launches after another in their stretch
    before = np.flatnonzero(launch)
    before = before[before > 0] - 1
    before = before[(f.kind[before] == K_SEGMENT) & (f.dur[before] > 0) & (f.dur[before] <= DISPATCH_NS)]
    if not len(later) and not len(before):
        return None
    gaps = np.sort(f.op_gap[f.op_gap > 0])
    gap = gaps[len(gaps) // 2] if len(gaps) else GRAPH_GAP_NS
    dur = f.dur.copy()
    dur[before] = 0
    dur[later] = 0
    op_gap = f.op_gap.copy()
    issued = np.fromiter(chain.from_iterable(f.node_ops[i] for i in later.tolist()), dtype=np.int64)
    op_gap[issued] = np.maximum(f.op_gap[issued], gap)
    return dataclasses.replace(f, dur=dur, op_gap=op_gap)


def host_work_arrays(f: Flat) -> Flat | None:
    """The host segments longer than the dispatch (DISPATCH_NS) cost nothing (whatif.host_off_path)."""
    hits = (f.kind == K_SEGMENT) & (f.dur > DISPATCH_NS)
    return dataclasses.replace(f, dur=np.where(hits, 0, f.dur)) if hits.any() else None


@functools.lru_cache(maxsize=4096)
def comm_name(name: str) -> bool:
    """A collective's kernel (comm.py)."""
    return bool(COMM_KERNEL.search(name))


def comm_kernels(f: Flat) -> np.ndarray:
    """Which ops are collective kernels."""
    return (f.op_kind == Kind.KERNEL) & np.fromiter(map(comm_name, f.op_name), dtype=bool, count=len(f.op_name))


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
    return np.isin(f.op_kind, (Kind.KERNEL, Kind.MEMSET)) & ~comm_kernels(f)
