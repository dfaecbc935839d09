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
it is released at its measured time whatever the host does. `replay.py` recomputes the round
from the graph; `whatif.py` transforms it. Pure functions of a `Timeline`; nothing here prints
or writes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from ..events import GPU_KINDS, CopyKind, Kind, MemoryKind, SyncType, unpack_copy_flags
from ..merger import Timeline
from .context import Context
from .context_gpu import COPY_CALL, SYNC_CALL
from .idle import CLOCK_SLACK_NS
from .issued import Issued
from .sampling import Samples, modules_in, sampled_modules, samples_in, segment_names
from .sampling import module_of as module_of  # re-exported: the module a sampled frame is in

#: Node kinds.
SEGMENT, CALL, BLOCKING, EXTERNAL = "segment", "call", "blocking", "external"
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


def build_round(tl: Timeline, round_i: int, link_gb_s: float = 0.0) -> RoundGraph | None:
    """The graph of one round (an index of a ROUND span); None when it has no GPU work."""
    ev = tl.events
    r0, r1 = int(ev["start"][round_i]), int(ev["end"][round_i])
    tid = int(ev["tid"][round_i])
    kind = ev["kind"]
    gpu_all = np.flatnonzero(tl.mask(*GPU_KINDS))
    in_round = (ev["start"] >= r0) & (ev["start"] < r1)
    # Every thread's calls, in one order: a thread that launches while the round's thread waits for it (the
    # autograd engine's) hands the host over and back; threads that really run side by side are rare in inference.
    calls = np.flatnonzero((kind == Kind.RUNTIME) & in_round & (ev["tid"] >= 0))
    waits = np.flatnonzero((kind == Kind.WAIT) & in_round & (ev["tid"] == tid))
    for w in waits.tolist():  # the end-of-round synchronize stands for the calls inside it
        calls = calls[(ev["start"][calls] < ev["start"][w]) | (ev["start"][calls] >= ev["end"][w])]
    call_corr = ev["corr"][calls]
    own = np.isin(ev["corr"][gpu_all], call_corr[call_corr != 0]) & (ev["corr"][gpu_all] != 0)
    g_in = (ev["start"][gpu_all] >= r0) & (ev["start"][gpu_all] < r1)
    # the ops its calls issued, wherever they ran, and the GPU work that started in it (launched by calls of
    # other rounds or threads, or by none recorded: external)
    op_idx = gpu_all[own | g_in]
    if not len(op_idx):
        return None
    op_idx = op_idx[np.argsort(ev["start"][op_idx], kind="stable")]
    external = np.flatnonzero(~own[np.searchsorted(gpu_all, op_idx)]).tolist()
    cols = _OpColumns(ev[op_idx], r0)
    graph = RoundGraph(nodes=[], ops=[], measured_ns=r1 - r0, link_gb_s=link_gb_s)
    earlier = gpu_all[(ev["start"][gpu_all] < r0) & (ev["end"][gpu_all] > r0)]
    for k, e in zip(_stream_key(ev[earlier]).tolist(), ev["end"][earlier].tolist(), strict=True):
        graph.stream_busy[k] = max(graph.stream_busy.get(k, 0), e - r0)
    graph.counted = np.flatnonzero(cols.end <= r1 - r0 + CLOCK_SLACK_NS).tolist()
    _host_nodes(tl, graph, calls, waits, op_idx, external, (r0, r1, tid), cols)
    graph.ops = _ops(tl, ev["name"][op_idx], cols, *_latencies(graph, cols))
    return graph


class _OpColumns:
    """A round's GPU records (`ev`, by start) as columns, times in ns from the round's start (`r0`): what the
    host nodes and the latencies read before the ops are made (each op made once, with every field)."""

    def __init__(self, ev: np.ndarray, r0: int) -> None:
        self.kind = ev["kind"].astype(np.int64)
        self.stream = _stream_key(ev)
        self.start = (ev["start"] - r0).astype(np.int64)
        self.end = (ev["end"] - r0).astype(np.int64)
        copy, src, dst = unpack_copy_flags(ev["flags"])
        is_copy = self.kind == Kind.MEMCPY
        self.pageable = is_copy & ((src == MemoryKind.PAGEABLE) | (dst == MemoryKind.PAGEABLE))
        self.nbytes = np.where(self.kind != Kind.KERNEL, ev["value"], 0).astype(np.int64)
        self.copy = np.where(is_copy, copy, 0).astype(np.int64)
        self.dur = (ev["end"] - ev["start"]).astype(np.int64)
        self.start_list, self.end_list = self.start.tolist(), self.end.tolist()
        self.issue_at = self.start.copy()  # when each was issued: _host_nodes sets it for the calls' ops


def _ops(tl: Timeline, names: np.ndarray, c: _OpColumns, *fields: list[int]) -> list[GpuOp]:
    """The ops, from their columns and (lat, gap, after, floor) from `_latencies`."""
    columns = (
        c.kind.tolist(),
        c.stream.tolist(),
        c.dur.tolist(),
        *fields[:2],
        c.start_list,
        c.end_list,
        c.nbytes.tolist(),
        c.copy.tolist(),
        c.pageable.tolist(),
        list(map(tl.strings.__getitem__, names.tolist())),
        *fields[2:],
    )
    # positional (kind, stream, dur, lat, gap, start, end, nbytes, copy, pageable, name, after, floor): faster
    return [GpuOp(*values) for values in zip(*columns, strict=True)]


def _host_nodes(
    tl: Timeline,
    graph: RoundGraph,
    calls: np.ndarray,
    waits: np.ndarray,
    op_idx: np.ndarray,
    external: list[int],
    rnd: tuple[int, int, int],
    cols: _OpColumns,
) -> None:
    """The host's order: segments between calls, calls with their ops, blocking calls with what they waited for."""
    ev = tl.events
    r0, r1, _ = rnd
    corr_to_ops: dict[int, list[int]] = {}
    for j, c in enumerate(ev["corr"][op_idx].tolist()):
        if c:
            corr_to_ops.setdefault(c, []).append(j)
    both = np.concatenate([calls, waits])
    wait = np.concatenate([np.zeros(len(calls), dtype=np.int64), np.ones(len(waits), dtype=np.int64)])
    order = np.lexsort((both, wait, ev["start"][both]))  # by start; calls first; by index
    both, wait = both[order], wait[order]
    s, e = (ev["start"][both] - r0).astype(np.int64), (ev["end"][both] - r0).astype(np.int64)
    t = np.concatenate([[0], np.maximum.accumulate(np.maximum(e, 0))])  # the host's clock before each item
    op_start = cols.start_list
    ext = sorted(external, key=op_start.__getitem__)
    ext_at = np.searchsorted(s, cols.start[ext], side="left")  # the item they come before
    corrs, is_wait = ev["corr"][both].tolist(), wait.tolist()
    own = [[] if w else corr_to_ops.get(c, []) for c, w in zip(corrs, is_wait, strict=True)]
    name_ids = ev["name"][both]
    names = [
        "end-of-round synchronize" if w else tl.strings[k] for k, w in zip(name_ids.tolist(), is_wait, strict=True)
    ]
    # A call inside one already on the host's clock (a driver call under its runtime call: Kineto records both)
    # adds only the time it runs past the enclosing one.
    dur = np.minimum(np.maximum(0, e - s), np.maximum(0, e - t[:-1])).tolist()
    items = [HostNode(CALL, d, a, name, o, [], {}) for d, a, name, o in zip(dur, s.tolist(), names, own, strict=True)]
    issued = Issued(cols.stream, cols.end, ext, ext_at.tolist(), own)
    sync_types = _sync_types(tl)
    # the items that can block: waits, sync calls, copy calls that issued ops (names looked at once each)
    counts = np.fromiter(map(len, own), dtype=np.int64, count=len(own))
    issuing = counts > 0
    # when each op was issued: its call's start (the last call's, by two; external work: its own start)
    cols.issue_at[np.fromiter(chain.from_iterable(own), dtype=np.int64, count=int(counts.sum()))] = s.repeat(counts)
    maybe = (wait > 0) | _named(tl, name_ids, _is_sync_call) | (_named(tl, name_ids, _is_copy_call) & issuing)
    for k in np.flatnonzero(maybe).tolist():
        _blocking(items[k], k, (int(e[k]), int(t[k])), bool(is_wait[k]), sync_types.get(corrs[k]), issued, cols)
    segs = _segments(tl, graph, s, t, r1 - r0, both, calls, rnd)
    externals = [HostNode(EXTERNAL, 0, op_start[j], ops=[j]) for j in ext]
    n, last = len(items), int(r1 - r0 > int(t[-1]))
    # each item after the external work released before it and the segment before it; the last segment at the end
    at = np.concatenate([ext_at, np.flatnonzero(s > t[:-1]), np.arange(n), np.full(last, n)]).astype(np.int64)
    rank = np.repeat([0, 1, 2, 3], [len(ext), len(segs) - last, n, last])
    pool = externals + segs[: len(segs) - last] + items + segs[len(segs) - last :]
    graph.nodes.extend(map(pool.__getitem__, np.lexsort((np.arange(len(pool)), rank, at)).tolist()))


def _named(tl: Timeline, ids: np.ndarray, test: Callable[[str], bool]) -> np.ndarray:
    """`test` of the name of each of `ids` (interned names), asked once per distinct name."""
    distinct = np.unique(ids).tolist()
    table = np.zeros(len(tl.strings), dtype=bool)
    table[distinct] = [test(tl.strings[i]) for i in distinct]
    return table[ids]


def _blocking(
    node: HostNode,
    k: int,
    times: tuple[int, int],
    wait: bool,
    sync: tuple[int, int] | None,
    issued: Issued,
    cols: _OpColumns,
) -> None:
    """Host item `k` made a blocking call (a synchronisation, the end-of-round wait, a copy call that returned
    only after its copy finished: a pageable copy, staged, held the host), with what it waited for. `times`:
    its end and the host's clock before it."""
    end, before = times
    op_end = cols.end_list
    if not wait and not _is_sync_call(node.name) and not any(op_end[j] <= end + CLOCK_SLACK_NS for j in node.ops):
        return
    node.kind = BLOCKING
    on = sync[1] if sync and sync[0] == SyncType.STREAM_SYNCHRONIZE and not wait else None
    node.waits = issued.finished(k, end + CLOCK_SLACK_NS, on) or issued.finished(k, end + CLOCK_SLACK_NS)
    finished = max((op_end[j] for j in node.waits), default=node.start)
    node.dur = min(max(0, end - max(node.start, finished)), max(0, end - before))
    if not wait and _is_sync_call(node.name):
        node.sync = _sync_kind(node.name, (sync or (None, None))[0])


def _segments(
    tl: Timeline,
    graph: RoundGraph,
    s: np.ndarray,
    t: np.ndarray,
    length: int,
    items: np.ndarray,
    calls: np.ndarray,
    rnd: tuple[int, int, int],
) -> list[HostNode]:
    """The host's own work between items (`s`: their starts, `t`: the host's clock before each), then to the
    round's end (`length`), with the modules sampled in each (or the frame around the next call)."""
    samples = samples_in(tl, *rnd, graph.framework)
    names = segment_names(tl, calls) if not samples[0] else {}
    gap = np.flatnonzero(s > t[:-1])
    a, b = t[gap], s[gap]
    if samples[0]:
        mods = sampled_modules(a, b, samples)
        # positional (kind, dur, start, name, ops, waits, modules): faster than keywords, 25,000 times a round
        out = [HostNode(SEGMENT, y - x, x, "", [], [], m) for x, y, m in zip(a.tolist(), b.tolist(), mods, strict=True)]
    else:
        ends = zip(a.tolist(), b.tolist(), items[gap].tolist(), strict=True)
        out = [_segment(x, y, samples, names.get(i, "")) for x, y, i in ends]
    if length > int(t[-1]):
        out.append(_segment(int(t[-1]), length, samples, ""))
    return out


@functools.lru_cache(maxsize=4096)
def _is_sync_call(name: str) -> bool:
    return bool(SYNC_CALL.search(name))


@functools.lru_cache(maxsize=4096)
def _is_copy_call(name: str) -> bool:
    return bool(COPY_CALL.search(name))


def _sync_types(tl: Timeline) -> dict[int, tuple[int, int]]:
    """CUPTI synchronisation records by correlation id: (type, stream)."""
    ev = tl.events
    s = ev[ev["kind"] == Kind.SYNC]
    return {
        int(c): (int(f), int(st))
        for c, f, st in zip(s["corr"].tolist(), s["flags"].tolist(), s["stream"].tolist(), strict=True)
        if c
    }


def _segment(a: int, b: int, samples: Samples, name: str) -> HostNode:
    return HostNode(SEGMENT, b - a, a, modules=modules_in(a, b, samples, name))


def _latencies(graph: RoundGraph, cols: _OpColumns) -> tuple[list[int], ...]:
    """Each op's launch-to-start time, its gap after the op before it on its stream, the op it follows and its
    floor (see GpuOp): (lat, gap, after, floor). The op before it is the one that ended last (the latest of
    those) so far on its stream."""
    start, end, stream = cols.start, cols.end, cols.stream
    at = cols.issue_at  # when its call issued it (its own start when none did)
    keys, inverse = np.unique(stream, return_inverse=True)
    busy = np.array([graph.stream_busy.get(k, 0) for k in keys.tolist()], dtype=np.int64)[inverse]
    floor = np.where(start + CLOCK_SLACK_NS >= busy, busy, 0)
    prev = np.full(len(start), -1, dtype=np.int64)
    for key in range(len(keys)):
        sel = np.flatnonzero(inverse == key)
        latest = np.where(end[sel] == np.maximum.accumulate(end[sel]), sel, -1)  # ended last so far
        prev[sel[1:]] = np.maximum.accumulate(latest)[:-1]
    follows = (prev >= 0) & (start + CLOCK_SLACK_NS >= end[prev])
    after = np.where(follows, prev, -1)
    before = np.maximum(floor, np.where(follows, end[prev], 0))
    queued = (at < before) & (start <= before + np.maximum(CLOCK_SLACK_NS, start - at))
    gap = np.where(queued, np.maximum(0, start - before), 0)
    lat = np.maximum(0, start - at)
    typical = int(np.median(lat[~queued])) if (~queued).any() else DEFAULT_LAT_NS
    lat = np.where(queued, np.minimum(lat, typical), lat)
    return lat.tolist(), gap.tolist(), after.tolist(), floor.tolist()


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
    calls = [n for n in g.nodes if n.kind == CALL]
    durs = [n.dur for n in calls]
    total = sum(durs)
    excess = g.measured_ns - ref_ns
    if excess <= 0 or total <= 0:
        return 0
    keep = max(MIN_CALL_SHARE, 1.0 - excess / total)
    trimmed = [int(d * keep) for d in durs]
    for n, d in zip(calls, trimmed, strict=True):
        n.dur = d
    taken = total - sum(trimmed)
    g.measured_ns -= taken
    return taken


def build_rounds(tl: Timeline, idx: list[int], link_gb_s: float, ref_ns: int | None = None) -> list[RoundGraph]:
    """The graphs of rounds `idx`; with `ref_ns`, trace rounds trimmed to the rounds they stand for."""
    graphs = [g for g in (build_round(tl, int(i), link_gb_s) for i in idx) if g is not None]
    if ref_ns is not None:
        for g in graphs:
            trim_recording_cost(g, ref_ns)
    return graphs


def copy_is_host_link(op: GpuOp) -> bool:
    """A host<->device copy (what the link carries)."""
    return op.kind == MEMCPY and op.copy in HOST_LINK


def reads(g: RoundGraph, sync: int, stretch: int, dispatch_ns: int) -> tuple[list[int], list[int]]:
    """The reads blocking node `sync` waited for, issued in its own stretch (nodes `stretch` to `sync`): small
    device-to-host copies. Their host nodes (the copy call, the segments from it to the sync, and the segment
    right before the call when it is no longer than `dispatch_ns`: the framework's dispatch of the read) and
    their ops."""
    nodes: list[int] = []
    ops: list[int] = []
    wanted = {j for j in g.nodes[sync].waits if _is_read(g.ops[j])}
    if not wanted:
        return nodes, ops
    for call in range(stretch, sync):
        n = g.nodes[call]
        if n.kind != CALL or wanted.isdisjoint(n.ops):
            continue
        read = [j for j in n.ops if j in wanted]
        ops += read
        nodes += [call] + [k for k in range(call + 1, sync) if g.nodes[k].kind == SEGMENT]
        if call > 0 and g.nodes[call - 1].kind == SEGMENT and g.nodes[call - 1].dur <= dispatch_ns:
            nodes.append(call - 1)
    return nodes, ops


def _is_read(o: GpuOp) -> bool:
    return o.kind == Kind.MEMCPY and o.copy == CopyKind.DTOH and 0 < o.nbytes <= READ_BYTES


#: Rounds replayed at most (spread over the API rounds): enough to average out one slow round.
MAX_ROUNDS = 5
#: Host nodes replayed at most, over the rounds (fewer rounds for long ones; at least one round).
MAX_NODES = 40_000


def round_graphs(ctx: Context) -> tuple[list[RoundGraph], str]:
    """The graphs of (up to `MAX_ROUNDS` of) the rounds whose launch calls were recorded, or why there are none."""
    if not ctx.gpu.collected:
        return [], "no GPU work was recorded, so there is no round graph to replay"
    idx = ctx.rounds.api_round_idx.tolist()
    ev = ctx.timeline.events
    calls = int(np.count_nonzero((ev["kind"] == Kind.RUNTIME) & ctx.rounds.in_api_rounds)) / max(1, len(idx))
    # Replaying is Python, node by node: keep it to about MAX_NODES nodes (a call and a segment per launch).
    most = max(1, min(MAX_ROUNDS, int(MAX_NODES // max(1.0, 2 * calls))))
    if len(idx) > most:
        step = len(idx) / most
        idx = [idx[int(k * step)] for k in range(most)]
    link = float(ctx.gpu.transfer["link_gb_s"])
    # trace rounds: their recorded calls cost host time the timed rounds did not pay (graph.trim_recording_cost)
    walls = ev["end"][ctx.rounds.gpu_round_idx] - ev["start"][ctx.rounds.gpu_round_idx]
    ref = None if ctx.rounds.gpu_api_same or not len(walls) else int(np.median(walls))
    graphs = build_rounds(ctx.timeline, idx, link, ref)
    if not graphs:
        return [], "no GPU work in the rounds whose launch calls were recorded"
    if not any(g.has_launch_call for g in graphs):
        return [], "the trace records no launch calls (CUDA runtime events), so GPU work cannot be tied to the host"
    return graphs, ""
