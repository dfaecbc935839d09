"""Chrome trace event JSON (Perfetto, chrome://tracing) from a merged `Timeline`.

A timeline can hold millions of events, so rows are never built as Python objects: each kind
of event is one byte template whose numbers are filled in for all rows at once with numpy
(`rowwriter.py`), and whose variable end (the name, the args) comes from
a small table built once per distinct name: about 0.3-0.4 s and 230 MB per million events of a GPU
test on a 2-core machine. From `THREAD_MIN_EVENTS` on, a writer thread overlaps the kernel's copy
into the page cache with the formatting; a small trace (a trivial test: tens of events) is written
on the caller's thread, and kinds with few rows are formatted in plain Python (`rowwriter.SMALL_ROWS`).

Processes and threads are numbered, not named, because Perfetto's JSON importer only accepts
integer pids and tids (a string such as "host" is dropped); "M" metadata events name them:
pid 1 is "host" (tid = the native thread id), pid 100 + d is "GPU d" (tid = the CUDA stream).
CPU samples show their leaf frame and point ("sf") into a shared "stackFrames" tree. They lie in
pid 2, "host: CPU samples" (tid = the thread sampled): a sample stands for the time since the one
before it, so it crosses the rounds and scopes of its thread, and the trace viewers nest the slices
of one lane.

A launch (the runtime call) and the GPU work it issued are linked by a flow arrow, written as
the trace format's flow v2 fields on the two "X" slices themselves (`"bind_id"`, the CUPTI
correlation id, with `"flow_out":true` on the launch and `"flow_in":true` on the GPU work), which
both Perfetto's JSON importer and chrome://tracing (catapult) bind to the slice that carries
them. That costs ~35 bytes per slice instead of a separate "s" and "f" row (~210 bytes) per link.
"""

from __future__ import annotations

import functools
import json
import json.encoder
import os
import queue
import threading
from collections.abc import Callable
from enum import IntEnum
from typing import Any, BinaryIO

import numpy as np

from ..events import CopyKind, Kind, MemoryKind, copy_devices, kind_table, unique, unpack_copy_flags
from ..merger import Timeline
from ..rounds import RoundKind, kinds_of
from . import rowwriter
from .files import Writable, gzip_threads, open_target
from .rowwriter import Column, Piece, Tail

HOST_PID = 1
SAMPLES_PID = 2  # the CPU samples, a lane per thread sampled
GPU_PID_BASE = 100
#: From this many events on, a second thread writes blocks while the next ones are formatted.
#: Below it the thread's start and hand-offs cost more than the overlap saves (a trivial test's
#: trace is written in well under a millisecond without it).
THREAD_MIN_EVENTS = 50_000
_HOST_SPANS = {Kind.TEST: b"test", Kind.ROUND: b"round", Kind.SCOPE: b"scope", Kind.MODULE: b"module",
               Kind.CALL: b"call", Kind.OVERHEAD: b"overhead", Kind.WAIT: b"wait"}  # fmt: skip
_GPU_CATS = {Kind.KERNEL: b"kernel", Kind.MEMCPY: b"memcpy", Kind.MEMSET: b"memset", Kind.SYNC: b"sync"}
_GPU_WORK = [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]  # what a launch issues: the ends of its flows
_MIB = 1 << 20
_encode_str: Callable[[str], str] = json.encoder.encode_basestring_ascii  # what json.dumps uses for a str


def write_chrome_trace(
    timeline: Timeline, path: str | os.PathLike[str] | BinaryIO, title: str = "", *, compress: bool = False
) -> int:
    """Write `timeline` as a Chrome trace JSON file (atomically; or into a file object); return the number of events.

    `compress`: gzip it (trace.json.gz); a big trace on up to four threads (`files.ParallelGzipStream`) fed by the
    writer thread, so it overlaps the formatting.
    """
    other = {"title": title, "generator": "pytest-inferscope", "dropped_events": int(timeline.dropped),
             "incomplete_events": int(timeline.incomplete), "clock": timeline.clock.to_dict(),
             "t0_ns": int(timeline.t0_ns)}  # fmt: skip
    big = len(timeline) >= THREAD_MIN_EVENTS
    with open_target(path, compress=compress, threads=gzip_threads() if big else 1) as f:
        out: _Writer = _Background(f) if big else _Direct(f)
        try:
            out.write(b'{"displayTimeUnit":"ms","otherData":%s,"traceEvents":[\n' % json.dumps(other).encode())
            frames = _Frames()
            cols = _Cols(timeline.events)
            count = _write_events(out, timeline, cols, frames)
            meta = _metadata(cols)
            out.write(",\n".join(meta).encode())
            out.write(b'\n],"stackFrames":{%s}}\n' % b",\n".join(frames.entries))
        finally:
            out.close()
    return count + len(meta)


class _Writer:
    """Where the formatted blocks go: straight to the file (this class), or through a thread."""

    def __init__(self, f: Writable) -> None:
        self._f = f

    def write(self, block: Any) -> None:
        self._f.write(block)

    def close(self) -> None:
        pass


_Direct = _Writer


class _Background(_Writer):
    """Hands blocks to a second thread that writes them, so the kernel's copy of one block into
    the page cache overlaps the formatting of the next (numpy and write() release the GIL)."""

    def __init__(self, f: Writable) -> None:
        super().__init__(f)
        self._queue: queue.Queue[Any] = queue.Queue(maxsize=4)  # bounds the memory held in blocks
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="inferscope-trace-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (block := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._f.write(block)
                except BaseException as e:  # handed to the caller by write() or close()
                    self._error = e

    def write(self, block: Any) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(block)

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error


class _Cols:
    """The event fields the writer reads, each copied once into a contiguous array on first use:
    comparisons and gathers on a field of the 48-byte records run several times slower."""

    def __init__(self, events: np.ndarray) -> None:
        self.ev = events

    @functools.cached_property
    def kind(self) -> np.ndarray:
        return np.ascontiguousarray(self.ev["kind"])

    @functools.cached_property
    def present(self) -> np.ndarray:
        """A table indexed by kind: True for the kinds that have events."""
        return np.bincount(self.kind, minlength=256) > 0

    def of(self, *kinds: int) -> np.ndarray:
        """Events of these kinds, as a boolean mask (a table lookup: np.isin costs ~10x more)."""
        return kind_table(kinds)[self.kind]

    @functools.cached_property
    def name(self) -> np.ndarray:
        return np.ascontiguousarray(self.ev["name"])

    @functools.cached_property
    def corr(self) -> np.ndarray:
        return np.ascontiguousarray(self.ev["corr"])

    @functools.cached_property
    def start(self) -> np.ndarray:
        return np.ascontiguousarray(self.ev["start"])

    @functools.cached_property
    def dur(self) -> np.ndarray:
        return self.ev["end"] - self.start

    @functools.cached_property
    def tid(self) -> np.ndarray:
        """Perfetto wants uint32 tids; -1 ("unknown thread") becomes 0."""
        return np.maximum(self.ev["tid"], 0)

    @functools.cached_property
    def device(self) -> np.ndarray:
        return np.ascontiguousarray(self.ev["device"])

    @functools.cached_property
    def on_host(self) -> np.ndarray:
        return self.device < 0

    @functools.cached_property
    def gpu_pid(self) -> np.ndarray:
        return np.maximum(self.device, 0).astype(np.int32) + GPU_PID_BASE

    @functools.cached_property
    def stream(self) -> np.ndarray:
        return np.maximum(self.ev["stream"], 0)


class _Rows:
    """Writes rows of byte templates whose '#' marks are filled from columns; counts them."""

    def __init__(self, f: _Writer, tl: Timeline, c: _Cols) -> None:
        self.f, self.tl, self.c, self.count = f, tl, c, 0
        # JSON string literals of the names, made on first use: most of a big table is never used.
        self.names: Callable[[int], bytes] = functools.cache(lambda i: _quote(tl.strings[i]))

    def __call__(
        self, sel: np.ndarray, template: bytes, cols: list[Column], key: Any = None, tail: Tail | None = None
    ) -> None:
        """Rows of `template` whose '#' marks are filled from `cols` (full-length, picked by `sel`)."""
        literal = template.split(b"#")
        pieces: list[Piece] = [literal[0]]
        picked: dict[int, np.ndarray] = {}  # a column used twice is picked (and formatted) once
        for (column, milli), lit in zip(cols, literal[1:], strict=True):
            if id(column) not in picked:
                picked[id(column)] = column[sel]
            pieces += [(picked[id(column)], milli), lit]
        self.count += rowwriter.emit(self.f, len(sel), pieces, key, tail)

    def name_tail(self, i: int) -> bytes:
        return b'"name":%s},\n' % self.names(i)

    def span(self, cat: bytes, gpu: bool, host_pid: int = HOST_PID) -> tuple[bytes, list[Column]]:
        """An "X" slice's template and columns: on the host (`host_pid`, the thread) or a GPU (its pid, the stream)."""
        c = self.c
        pid: list[Column] = [(c.gpu_pid, False)] if gpu else []
        t = b'{"ph":"X","cat":"%s","pid":%s,"tid":#,"ts":#,"dur":#' % (cat, b"#" if gpu else b"%d" % host_pid)
        return t, [*pid, (c.stream if gpu else c.tid, False), (c.start, True), (c.dur, True)]


def _write_events(f: _Writer, tl: Timeline, c: _Cols, frames: _Frames) -> int:
    """Every event as a trace row, kind by kind; returns the number of rows."""
    rows = _Rows(f, tl, c)
    _host_rows(rows, frames)
    flow_in, flow_out = _flows(c)
    _call_rows(rows, flow_out)
    _gpu_rows(rows, flow_in)
    _mark_rows(rows)
    _counter_rows(rows)
    return rows.count


def _host_rows(rows: _Rows, frames: _Frames) -> None:
    """Host spans (test, rounds, scopes, modules, ...) and CPU samples."""
    c, ev = rows.c, rows.tl.events
    for k, cat in _HOST_SPANS.items():
        if not c.present[k]:
            continue
        sel = np.flatnonzero(c.kind == k)
        t, cols = rows.span(cat, False)
        if k == Kind.ROUND:
            kinds = kinds_of(ev["flags"][sel])
            t += b',"args":{"round":#,"kind":"%s"},'
            for kind in unique(kinds).tolist():  # a few rounds: one template per kind
                name = RoundKind(kind).name.lower().encode()
                rows(
                    sel[kinds == kind],
                    t % name,
                    [*cols, (ev["value"], False)],
                    c.name[sel[kinds == kind]],
                    rows.name_tail,
                )
            continue
        rows(sel, t + b",", cols, c.name[sel], rows.name_tail)
    # A sample's name is its folded stack "outer;...;leaf": the slice shows the leaf and points
    # ("sf") into the shared stackFrames tree instead of repeating the stack in every row.
    if c.present[Kind.SAMPLE]:
        sel = np.flatnonzero(c.kind == Kind.SAMPLE)
        t, cols = rows.span(b"sample", False, SAMPLES_PID)
        rows(sel, t + b",", cols, c.name[sel], lambda i: frames.sample_tail(rows.tl.strings[i]))


def _flows(c: _Cols) -> tuple[np.ndarray | None, np.ndarray | None]:
    """(GPU records, launch calls) with a flow arrow, as full-length masks; None when no flow.

    Flows go from the launch (runtime call) to the GPU work it issued, matched by correlation id:
    the first launch of a correlation id starts the flow; every GPU record with that id ends one.
    """
    kind, corr = c.kind, c.corr
    if not (c.present[Kind.RUNTIME] and c.present[list(_GPU_WORK)].any()):
        return None, None
    gpu = np.flatnonzero(c.of(*_GPU_WORK) & (corr != 0))
    rts = np.flatnonzero((kind == Kind.RUNTIME) & (corr != 0))
    if not (len(gpu) and len(rts)):
        return None, None
    launch = _first_with(corr[rts], corr[gpu])
    found = launch >= 0
    flow_in, flow_out = np.zeros(len(kind), bool), np.zeros(len(kind), bool)
    flow_in[gpu[found]] = True
    flow_out[rts[launch[found]]] = True
    return flow_in, flow_out


def _linked(sel: np.ndarray, flow: np.ndarray | None, out: bool) -> list[tuple[np.ndarray, bytes]]:
    """`sel` split into (rows without a flow, b""), (rows with one, their flow fields: out of a launch, or in)."""
    if flow is None:
        return [(sel, b"")]
    on = flow[sel]
    fields = b',"bind_id":#,"flow_out":true' if out else b',"bind_id":#,"flow_in":true'
    return [(sel[~on], b""), (sel[on], fields)]


def _call_rows(rows: _Rows, flow_out: np.ndarray | None) -> None:
    """Runtime/driver API calls (flows start here) and synchronisations seen on the host."""
    c = rows.c
    for mask, cat, flow in (
        (c.kind == Kind.RUNTIME if c.present[Kind.RUNTIME] else None, b"runtime", flow_out),
        ((c.kind == Kind.SYNC) & c.on_host if c.present[Kind.SYNC] else None, b"sync", None),
    ):
        if mask is None:
            continue
        for sel, flow_fields in _linked(np.flatnonzero(mask), flow, out=True):
            t, cols = rows.span(cat, False)
            cols += [(c.corr, False)] * (1 + bool(flow_fields))  # bind_id is the correlation id
            rows(sel, t + flow_fields + b',"args":{"correlation":#},', cols, c.name[sel], rows.name_tail)


def _gpu_rows(rows: _Rows, flow_in: np.ndarray | None) -> None:
    """Kernels, copies, memsets and device-side synchronisations, on their GPU and stream (flows end here)."""
    c, ev = rows.c, rows.tl.events
    for k, cat in _GPU_CATS.items():
        if not c.present[k]:
            continue
        of_kind = np.flatnonzero((c.kind == k) & ~c.on_host if k == Kind.SYNC else c.kind == k)
        for sel, flow_fields in _linked(of_kind, flow_in, out=False):
            t, cols = rows.span(cat, True)
            t, cols = (
                t + flow_fields + b',"args":{"correlation":#',
                [*cols, *[(c.corr, False)] * (1 + bool(flow_fields))],
            )
            if k == Kind.MEMCPY:
                # The name and the copy's direction together pick the tail, so key on both.
                pairs = (c.name[sel].astype(np.int64) << 32) | ev["flags"][sel].astype(np.int64)
                uniq, key = np.unique(pairs, return_inverse=True)
                tails = [b'%s},"name":%s},\n' % (_copy_args(p & _FLAGS), rows.names(p >> 32)) for p in uniq.tolist()]
                rows(sel, t + b',"bytes":#,', [*cols, (ev["value"], False)], key.reshape(-1), tails.__getitem__)
            elif k == Kind.MEMSET:
                rows(sel, t + b',"bytes":#},', [*cols, (ev["value"], False)], c.name[sel], rows.name_tail)
            else:
                rows(sel, t + b"},", cols, c.name[sel], rows.name_tail)


def _mark_rows(rows: _Rows) -> None:
    c, tl = rows.c, rows.tl
    if not c.present[Kind.MARK]:
        return
    sel = np.flatnonzero(c.kind == Kind.MARK)
    marks = [(int(n), int(v)) for n, v in zip(c.name[sel].tolist(), tl.events["value"][sel].tolist(), strict=True)]
    t = b'{"ph":"i","s":"t","cat":"mark","pid":%d,"tid":#,"ts":#,' % HOST_PID
    rows(sel, t, [(c.tid, False), (c.start, True)],
         np.arange(len(sel)), lambda i: _mark_tail(rows.names(marks[i][0]), tl.attrs, marks[i][1]))  # fmt: skip


def _counter_rows(rows: _Rows) -> None:
    """Host RSS and, per GPU, the memory allocated (allocations minus frees), as counters."""
    c, value, start = rows.c, rows.tl.events["value"], rows.c.start
    counter = b'{"ph":"C","pid":%d,"ts":#,"name":"%s","args":{"%s MiB":#}},\n'
    if c.present[Kind.MEMORY]:
        sel = np.flatnonzero(c.kind == Kind.MEMORY)
        rss = [(start[sel], True), (value[sel] * 1000 // _MIB, True)]
        rows(np.arange(len(sel)), counter % (HOST_PID, b"host memory", b"RSS"), rss)
    if c.present[Kind.GPU_MEMORY]:
        gpu_mem = np.flatnonzero(c.kind == Kind.GPU_MEMORY)
        for d in _unique(c.device[gpu_mem]):
            sel = gpu_mem[c.device[gpu_mem] == d]
            allocated = np.cumsum(value[sel]) * 1000 // _MIB  # allocations minus frees, in time order
            t = counter % (GPU_PID_BASE + max(d, 0), b"GPU memory", b"allocated")
            rows(np.arange(len(sel)), t, [(start[sel], True), (allocated, True)])  # columns per row already


def _first_with(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each wanted value, the position of its first occurrence in `keys`, or -1 (non-negative ints)."""
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo < 4 * len(keys) + (1 << 16):  # correlation ids count up: a table is ~5x faster than a search
        first = np.full(hi - lo + 1, len(keys), dtype=np.int64)
        at_key = keys.astype(np.int64) - lo
        if np.bincount(at_key).max() <= 1:  # every id once (the usual case): a plain scatter, ~10x faster than .at
            first[at_key] = np.arange(len(keys))
        else:
            np.minimum.at(first, at_key, np.arange(len(keys)))
        at = wanted.astype(np.int64) - lo
        inside = (at >= 0) & (at <= hi - lo)
        out = np.full(len(wanted), len(keys), dtype=np.int64)
        out[inside] = first[at[inside]]
    else:
        order = np.argsort(keys, kind="stable")  # equal keys keep their order: the first comes first
        pos = np.minimum(np.searchsorted(keys[order], wanted), len(keys) - 1)
        out = np.where(keys[order][pos] == wanted, order[pos], len(keys))
    out[out == len(keys)] = -1
    return out


def _metadata(c: _Cols) -> list[str]:
    """ "M" events naming the processes and threads (always at least the host process)."""
    out = [_meta("process_name", HOST_PID, 0, "host"), _meta("process_sort_index", HOST_PID, 0, 0)]
    test_tids = set(_unique(c.tid[c.of(Kind.TEST, Kind.ROUND)]))
    for tid in _unique(c.tid[c.on_host]):
        label = "test thread" if tid in test_tids else "thread"
        out.append(_meta("thread_name", HOST_PID, tid, f"{label} {tid}" if tid else "unknown thread"))
    if c.present[Kind.SAMPLE]:
        out += [
            _meta("process_name", SAMPLES_PID, 0, "host: CPU samples"),
            _meta("process_sort_index", SAMPLES_PID, 0, 0),
        ]
        for tid in _unique(c.tid[c.kind == Kind.SAMPLE]):
            label = "test thread" if tid in test_tids else "thread"
            out.append(_meta("thread_name", SAMPLES_PID, tid, f"samples of {label} {tid}"))
    on_dev = np.flatnonzero(~c.on_host)
    devices, streams = np.maximum(c.device[on_dev], 0), c.stream[on_dev]
    for d in _unique(devices):
        pid = GPU_PID_BASE + d
        out += [_meta("process_name", pid, 0, f"GPU {d}"), _meta("process_sort_index", pid, 0, 1 + d)]
        out += [_meta("thread_name", pid, s, f"stream {s}") for s in _unique(streams[devices == d])]
    return out


def _meta(what: str, pid: int, tid: int, value: str | int) -> str:
    arg = "sort_index" if what.endswith("sort_index") else "name"
    return json.dumps({"ph": "M", "name": what, "pid": pid, "tid": tid, "args": {arg: value}})


def _unique(a: np.ndarray) -> list[int]:
    """Distinct values, cheaply for the usual case of few values in a narrow range."""
    if a.size == 0:
        return []
    if a.size > 64:  # runs of one value (a thread's events, a stream's) count once
        keep = np.empty(a.size, dtype=bool)
        keep[0] = True
        np.not_equal(a[1:], a[:-1], out=keep[1:])
        a = a[keep]
    lo, hi = int(a.min()), int(a.max())
    if hi - lo < 1 << 16:
        return (np.flatnonzero(np.bincount((a - lo).astype(np.int64))) + lo).tolist()
    return [int(x) for x in unique(a)]


class _Frames:
    """Chrome's "stackFrames" dictionary (id -> frame name and parent id), grown as stacks are used."""

    def __init__(self) -> None:
        self._frames: dict[tuple[int, str], int] = {}  # (parent id or -1, frame) -> id
        self.entries: list[bytes] = []

    def sample_tail(self, stack: str) -> bytes:
        parent = -1
        frame = ""
        for frame in stack.split(";"):
            node = self._frames.get((parent, frame))
            if node is None:
                node = self._frames[(parent, frame)] = len(self.entries) + 1
                up = b',"parent":"%d"' % parent if parent > 0 else b""
                self.entries.append(b'"%d":{"category":"python","name":%s%s}' % (node, _quote(frame), up))
            parent = node
        return b'"name":%s,"sf":%d},\n' % (_quote(frame), parent)


def _quote(text: str) -> bytes:
    """`text` as a JSON string literal, as json.dumps writes it (ASCII, escaped), without its overhead."""
    return _encode_str(text).encode()


_FLAGS = 0xFFFF_FFFF  # a record's 32 flag bits (the rest of a copy's key is its name)


@functools.lru_cache(maxsize=256)
def _copy_args(flags: int) -> bytes:
    """The args of a copy with these flags (direction, memory kinds; a peer copy's devices), as JSON members."""
    copy, src, dst = (int(x) for x in unpack_copy_flags(flags))

    def label(enum: type[IntEnum], v: int) -> str:
        return enum(v).name if v in enum._value2member_map_ else str(v)

    direction = label(CopyKind, copy)  # HTOD -> HtoD, as CUPTI and Nsight write it
    direction = f"{direction[0]}to{direction[3]}" if len(direction) == 4 and direction[1:3] == "TO" else direction
    args: dict[str, object] = {
        "direction": direction,
        "src_kind": label(MemoryKind, src).lower(),
        "dst_kind": label(MemoryKind, dst).lower(),
    }
    src_device, dst_device = (int(x) for x in copy_devices(flags))
    if src_device >= 0 and dst_device >= 0:  # a peer copy: "PtoP 0→1", and the two devices
        args["direction"] = f"{direction} {src_device}\u2192{dst_device}"
        args["src_device"], args["dst_device"] = src_device, dst_device
    return json.dumps(args, sort_keys=True)[1:-1].encode()


def _mark_tail(name: bytes, attrs: list[dict[str, Any]], index: int) -> bytes:
    a = attrs[index] if 0 <= index < len(attrs) else {}
    return b'"name":%s,"args":%s},\n' % (name, json.dumps(a, sort_keys=True, default=str).encode())
