"""The dependency graph of one round: what the host did in order, what GPU work each call issued, what it waited for.

A round with its launch calls recorded (a trace round, or every round of a trace recorded with
`--inferscope-trace-rounds=all`, or an imported torch.profiler step) becomes a `RoundGraph`:

- **host nodes**, in the test thread's own order: *segments* (the host's own work between two
  API calls, with the Python modules sampled in it), *calls* (launch, copy, memset, allocator
  calls: host time, and the GPU work they issued, by correlation id), *blocking calls*
  (synchronisations, blocking copies, the plugin's end-of-round wait: they return only after
  the GPU work they waited for has finished);
- **GPU ops** (kernels, copies, memsets), each on its stream (in stream order), with the time
  from its launch call's start to its own start when it did not queue behind earlier work
  (`lat`), and its gap after the previous op of its stream when it did (`gap`).

GPU work whose launch call was not recorded, or was issued by another thread, is *external*:
it is released at its measured time whatever the host does. `build.py` builds a round's graph
as columns (`ArrayGraph`: its objects made only when read); `replay.py` recomputes the round from
the graph; `whatif.py` transforms it. Pure functions; nothing here prints or writes.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..events import CopyKind, Kind
from .columns import BLOCKING, CALL, EXTERNAL, K_BLOCKING, K_CALL, K_EXTERNAL, K_SEGMENT, KIND_OF, SEGMENT, Flat, issued
from .sampling import module_of as module_of  # re-exported: the module a sampled frame is in

__all__ = ["BLOCKING", "CALL", "EXTERNAL", "SEGMENT"]  # re-exported: the node kinds (columns.py)

#: The node kinds that can be copy calls; the copies the link carries (copy_is_host_link); a copy's op kind.
CALLS, HOST_LINK, MEMCPY = (CALL, BLOCKING), (CopyKind.HTOD, CopyKind.DTOH), int(Kind.MEMCPY)
#: Launch-to-start time assumed for queued work when no op of the round started on an idle stream
#: (14-17 µs measured on the H200, docs/gpu-validation.md).
DEFAULT_LAT_NS = 15_000
#: A device-to-host copy up to this size that a blocking call waited for is a read (`.item()`, `.tolist()`).
READ_BYTES = 64 * 1024


@dataclass
class GpuOp:
    """One kernel, copy or memset of the round; times in ns from the round's start."""

    kind: int  # Kind.KERNEL / MEMCPY / MEMSET
    stream: int  # device << 32 | stream: the queue it runs in order on
    dur: int
    lat: int  # from its launch call's start to its start, had it not queued
    gap: int  # after the previous op of its stream, when it queued behind it
    start: int  # measured
    end: int  # measured
    nbytes: int = 0
    copy: int = 0  # CopyKind for a copy
    pageable: bool = False
    name: str = ""
    #: The op it follows on its stream (-1: none, or the trace shows them overlapping, so the stream is not one queue).
    after: int = -1
    #: Its stream was busy until then with work launched before the round (fixed whatever the round does).
    floor: int = 0


@dataclass
class HostNode:
    """One step of the host's own order (see the module docstring)."""

    kind: str  # SEGMENT, CALL, BLOCKING or EXTERNAL
    dur: int  # host ns; for a blocking call, its time after what it waited for finished
    start: int  # measured, ns from the round's start
    name: str = ""
    ops: list[int] = field(default_factory=list)  # GPU ops it issued (EXTERNAL: released at their own time)
    waits: list[int] = field(default_factory=list)  # GPU ops a blocking call waited for
    modules: dict[str, int] = field(default_factory=dict)  # a segment's sampled ns by Python module
    sync: str = ""  # a blocking call's kind of synchronisation ("" for copies and the round's end)


@dataclass
class Derived:
    """A graph copied from `base` with only nodes `nodes` and ops `ops` changed (the rest are base's objects)."""

    base: RoundGraph
    nodes: set[int]
    ops: set[int]


@dataclass
class RoundGraph:
    """A round as a dependency graph; `measured_ns` is its measured length."""

    nodes: list[HostNode]
    ops: list[GpuOp]
    measured_ns: int
    #: When each stream was busy until at the round's start (work launched in an earlier round).
    stream_busy: dict[int, int] = field(default_factory=dict)
    #: The round ends when its host ends and every op that ended inside it (measured) has ended.
    counted: list[int] = field(default_factory=list)
    link_gb_s: float = 0.0
    #: Modules of `HostNode.modules` that are the framework's Python (torch, transformers), not the user's.
    framework: set[str] = field(default_factory=set)
    #: A what-if's copy: the graph it was copied from and the nodes and ops it changed (replay.Replayer).
    derived: Derived | None = field(default=None, repr=False, compare=False)

    @property
    def launch_calls(self) -> int:
        return sum(1 for n in self.nodes if _launched(n))

    @property
    def has_launch_call(self) -> bool:
        """Whether a call issued GPU work (`launch_calls > 0`, found at the first)."""
        return any(map(_launched, self.nodes))


def _launched(n: HostNode) -> bool:
    return n.kind != SEGMENT and bool(n.ops) and n.kind != EXTERNAL


class ArrayGraph(RoundGraph):
    """A round graph built as columns (`flat`): its node and op objects are made when first read. The replay
    and the built-in what-ifs work on the columns, so most analyses never make them (`columns`)."""

    def __init__(
        self,
        nodes: list[HostNode] | None = None,
        ops: list[GpuOp] | None = None,
        measured_ns: int = 0,
        *args: Any,
        flat: Flat | None = None,
        **kwargs: Any,
    ) -> None:
        self.flat = flat
        self._nodes, self._ops = nodes, ops
        super().__init__(nodes or [], ops or [], measured_ns, *args, **kwargs)

    @property  # the dataclass field, made on first read
    def nodes(self) -> list[HostNode]:
        if self._nodes is None:
            assert self.flat is not None
            self._nodes = host_nodes(self.flat)
        return self._nodes

    @nodes.setter
    def nodes(self, value: list[HostNode]) -> None:
        if value or self.flat is None:  # RoundGraph.__init__ sets [] for columns not yet read
            self._nodes = value

    @property  # the dataclass field, made on first read
    def ops(self) -> list[GpuOp]:
        if self._ops is None:
            assert self.flat is not None
            self._ops = gpu_ops(self.flat)
        return self._ops

    @ops.setter
    def ops(self, value: list[GpuOp]) -> None:
        if value or self.flat is None:
            self._ops = value

    def __eq__(self, other: object) -> bool:
        """Equal to any RoundGraph with the same fields (not only to another ArrayGraph)."""
        if not isinstance(other, RoundGraph):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(RoundGraph) if f.compare)

    __hash__ = None  # type: ignore[assignment]  # mutable, as RoundGraph

    @property
    def columns(self) -> Flat | None:
        """The columns, while they are the graph (its objects not read: they could have been changed since)."""
        return self.flat if self._nodes is None and self._ops is None else None

    @property
    def has_launch_call(self) -> bool:
        f = self.columns
        if f is None:
            return super().has_launch_call
        issuing = issued(f)[0] > 0
        return bool((issuing & (f.kind != K_SEGMENT) & (f.kind != K_EXTERNAL)).any())


def host_nodes(f: Flat) -> list[HostNode]:
    """The host nodes written in `f` (each with lists and dicts of its own)."""
    assert f.node_start is not None
    n = len(f.kind)
    kinds = [KIND_OF.get(k, "") for k in f.kind.tolist()]
    for i, kind in f.other.items():
        kinds[i] = kind
    modules: list[dict[str, int]] = [{} for _ in range(n)]
    m = f.modules
    for i, k, ns in zip(m.node.tolist(), m.module.tolist(), m.ns.tolist(), strict=True):
        modules[i][m.names[k]] = ns
    columns = (kinds, f.dur.tolist(), f.node_start.tolist(), f.node_name, f.node_ops, f.waits, modules, f.node_sync)
    rows = zip(*columns, strict=True)
    return [HostNode(k, d, s, name, list(o), list(w), mods, sync) for k, d, s, name, o, w, mods, sync in rows]


def gpu_ops(f: Flat) -> list[GpuOp]:
    """The GPU ops written in `f`."""
    assert f.op_stream is not None and f.op_end is not None and f.op_nbytes is not None
    assert f.op_copy is not None and f.op_pageable is not None
    columns = (
        f.op_kind.tolist(),
        f.op_stream.tolist(),
        f.op_dur.tolist(),
        f.op_lat.tolist(),
        f.op_gap.tolist(),
        f.op_start.tolist(),
        f.op_end.tolist(),
        f.op_nbytes.tolist(),
        f.op_copy.tolist(),
        f.op_pageable.tolist(),
        f.op_name,
        f.op_after.tolist(),
        f.op_floor.tolist(),
    )
    # positional (kind, stream, dur, lat, gap, start, end, nbytes, copy, pageable, name, after, floor): faster
    return [GpuOp(*values) for values in zip(*columns, strict=True)]


#: Of each recorded call, at least this share is kept when a trace round's excess is taken off its calls.
MIN_CALL_SHARE = 0.1


def trim_recording_cost(g: RoundGraph, ref_ns: int) -> int:
    """Take a trace round's excess over `ref_ns` off its launch calls; returns the ns taken off.

    A trace round records the launch calls, and recording them costs each call host time that the
    rounds it stands for (the measured rounds, or the profile rounds in lean mode) did not pay: the
    ViT-B/16 and sync-loop trace rounds ran 10-25 % longer on the H100. Its graph would replay that
    slower host and dilute every saving. The excess is taken off the calls (where the records' cost
    is paid), in proportion to their length, keeping MIN_CALL_SHARE of each; the graph then stands
    for its measured round less what was taken off.
    """
    f = g.columns if isinstance(g, ArrayGraph) else None
    calls = [] if f is not None else [n for n in g.nodes if n.kind == CALL]
    is_call = f.kind == K_CALL if f is not None else np.zeros(0, dtype=bool)
    durs = f.dur[is_call] if f is not None else np.array([n.dur for n in calls], dtype=np.int64)
    total = int(durs.sum())
    excess = g.measured_ns - ref_ns
    if excess <= 0 or total <= 0:
        return 0
    keep = max(MIN_CALL_SHARE, 1.0 - excess / total)
    trimmed = (durs * keep).astype(np.int64)  # int(d * keep), each
    if f is not None:
        f.dur[is_call] = trimmed
    else:
        for n, d in zip(calls, trimmed.tolist(), strict=True):
            n.dur = d
    taken = total - int(trimmed.sum())
    g.measured_ns -= taken
    return taken


def copy_is_host_link(op: GpuOp) -> bool:
    """A host<->device copy (what the link carries)."""
    return op.kind == MEMCPY and op.copy in HOST_LINK


def sync_kinds(graphs: list[RoundGraph]) -> list[str]:
    """The kind of synchronisation (`HostNode.sync`) of each blocking call that has one, graph by graph."""
    out: list[str] = []
    for g in graphs:
        f = g.columns if isinstance(g, ArrayGraph) else None
        if f is None:
            out += [n.sync for n in g.nodes if n.kind == BLOCKING and n.sync]
        else:
            out += [s for s in map(f.node_sync.__getitem__, (f.kind == K_BLOCKING).nonzero()[0].tolist()) if s]
    return out
