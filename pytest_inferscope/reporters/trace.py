"""Chrome trace event JSON (Perfetto, chrome://tracing) from a merged `Timeline`.

A timeline can hold millions of events, so rows are never built as Python objects: each kind
of event is one byte template whose numbers are filled in for all rows at once with numpy
(see "the vectorised row writer" below), and whose variable end (the name, the args) comes from
a small table built once per distinct name: about 0.3-0.4 s and 230 MB per million events of a GPU
test on a 2-core machine. From `THREAD_MIN_EVENTS` on, a writer thread overlaps the kernel's copy
into the page cache with the formatting; a small trace (a trivial test: tens of events) is written
on the caller's thread, and kinds with few rows are formatted in plain Python (`SMALL_ROWS`).

Processes and threads are numbered, not named, because Perfetto's JSON importer only accepts
integer pids and tids (a string such as "host" is dropped); "M" metadata events name them:
pid 1 is "host" (tid = the native thread id), pid 100 + d is "GPU d" (tid = the CUDA stream).
CPU samples show their leaf frame and point ("sf") into a shared "stackFrames" tree.

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
from collections.abc import Callable, Sequence
from enum import IntEnum
from typing import Any, BinaryIO

import numpy as np

from ..events import CopyKind, Kind, MemoryKind, unpack_copy_flags
from ..merger import Timeline
from .files import atomic_open

HOST_PID = 1
GPU_PID_BASE = 100
#: From this many events on, a second thread writes blocks while the next ones are formatted.
#: Below it the thread's start and hand-offs cost more than the overlap saves (a trivial test's
#: trace is written in well under a millisecond without it).
THREAD_MIN_EVENTS = 50_000
#: Rows formatted per numpy pass: small enough to pipeline with the writer thread, large enough
#: that numpy's per-call overhead does not matter.
CHUNK = 150_000
#: Up to this many rows of one kind are formatted one by one in Python, not with numpy.
SMALL_ROWS = 48
_STRIDE_MOD = 144  # in uint32 units: 9 cache lines; see _format
_HOST_SPANS = {Kind.TEST: b"test", Kind.ROUND: b"round", Kind.SCOPE: b"scope", Kind.MODULE: b"module",
               Kind.CALL: b"call", Kind.OVERHEAD: b"overhead", Kind.WAIT: b"wait"}  # fmt: skip
_GPU_CATS = {Kind.KERNEL: b"kernel", Kind.MEMCPY: b"memcpy", Kind.MEMSET: b"memset", Kind.SYNC: b"sync"}
_GPU_WORK = [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]  # what a launch issues: the ends of its flows
_MIB = 1 << 20
_encode_str: Callable[[str], str] = json.encoder.encode_basestring_ascii  # what json.dumps uses for a str

# A column is (values, milli): milli=True prints value / 1000 with three decimals (ns -> us).
Column = tuple[np.ndarray, bool]
Piece = bytes | Column
Tail = Callable[[int], bytes]


def write_chrome_trace(timeline: Timeline, path: str | os.PathLike[str], title: str = "") -> int:
    """Write `timeline` as a Chrome trace JSON file (atomically); return the number of trace events."""
    other = {"title": title, "generator": "pytest-inferscope", "dropped_events": int(timeline.dropped),
             "incomplete_events": int(timeline.incomplete), "clock": timeline.clock.to_dict(),
             "t0_ns": int(timeline.t0_ns)}  # fmt: skip
    with atomic_open(path) as f:
        out: _Writer = _Background(f) if len(timeline) >= THREAD_MIN_EVENTS else _Direct(f)
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

    def __init__(self, f: BinaryIO) -> None:
        self._f = f

    def write(self, block: Any) -> None:
        self._f.write(block)

    def close(self) -> None:
        pass


_Direct = _Writer


class _Background(_Writer):
    """Hands blocks to a second thread that writes them, so the kernel's copy of one block into
    the page cache overlaps the formatting of the next (numpy and write() release the GIL)."""

    def __init__(self, f: BinaryIO) -> None:
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
        table = np.zeros(256, dtype=bool)
        table[list(kinds)] = True
        return table[self.kind]

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


def _write_events(f: _Writer, tl: Timeline, c: _Cols, frames: _Frames) -> int:
    """Every event as a trace row, kind by kind; returns the number of rows."""
    ev = tl.events
    kind, name, corr, value, present = c.kind, c.name, c.corr, ev["value"], c.present
    # JSON string literals of the names, made on first use: most of a big table is never used.
    names: Callable[[int], bytes] = functools.cache(lambda i: _quote(tl.strings[i]))
    start, dur = c.start, c.dur
    count = 0

    def rows(sel: np.ndarray, template: bytes, cols: list[Column], key: Any = None, tail: Tail | None = None) -> None:
        """Rows of `template` whose '#' marks are filled from `cols` (full-length, picked by `sel`)."""
        nonlocal count
        literal = template.split(b"#")
        pieces: list[Piece] = [literal[0]]
        picked: dict[int, np.ndarray] = {}  # a column used twice is picked (and formatted) once
        for (column, milli), lit in zip(cols, literal[1:], strict=True):
            if id(column) not in picked:
                picked[id(column)] = column[sel]
            pieces += [(picked[id(column)], milli), lit]
        count += _emit(f, len(sel), pieces, key, tail)

    def name_tail(i: int) -> bytes:
        return b'"name":%s},\n' % names(i)

    def span(cat: bytes, gpu: bool) -> tuple[bytes, list[Column]]:
        pid: list[Column] = [(c.gpu_pid, False)] if gpu else []
        t = b'{"ph":"X","cat":"%s","pid":%s,"tid":#,"ts":#,"dur":#' % (cat, b"#" if gpu else b"%d" % HOST_PID)
        return t, [*pid, (c.stream if gpu else c.tid, False), (start, True), (dur, True)]

    for k, cat in _HOST_SPANS.items():
        if not present[k]:
            continue
        sel = np.flatnonzero(kind == k)
        t, cols = span(cat, False)
        if k == Kind.ROUND:
            warmup = np.zeros(len(ev), dtype=np.uint8)  # full length, as `rows` wants, but filled only here
            warmup[sel] = ev["flags"][sel] & 1
            t, cols = t + b',"args":{"round":#,"warmup":#}', [*cols, (value, False), (warmup, False)]
        rows(sel, t + b",", cols, name[sel], name_tail)

    # A sample's name is its folded stack "outer;...;leaf": the slice shows the leaf and points
    # ("sf") into the shared stackFrames tree instead of repeating the stack in every row.
    if present[Kind.SAMPLE]:
        sel = np.flatnonzero(kind == Kind.SAMPLE)
        t, cols = span(b"sample", False)
        rows(sel, t + b",", cols, name[sel], lambda i: frames.sample_tail(tl.strings[i]))

    # Flows: from the launch (runtime call) to the GPU work it issued, matched by correlation id.
    # The first launch of a correlation id starts the flow; every GPU record with that id ends one.
    flow_out = flow_in = None
    if present[Kind.RUNTIME] and present[list(_GPU_WORK)].any():
        gpu = np.flatnonzero(c.of(*_GPU_WORK) & (corr != 0))
        rts = np.flatnonzero((kind == Kind.RUNTIME) & (corr != 0))
        if len(gpu) and len(rts):
            launch = _first_with(corr[rts], corr[gpu])
            found = launch >= 0
            flow_in, flow_out = np.zeros(len(ev), bool), np.zeros(len(ev), bool)
            flow_in[gpu[found]] = True
            flow_out[rts[launch[found]]] = True

    def linked(sel: np.ndarray, flow: np.ndarray | None) -> list[tuple[np.ndarray, bytes]]:
        """`sel` split into (rows without a flow, b""), (rows with one, their flow fields)."""
        if flow is None:
            return [(sel, b"")]
        on = flow[sel]
        fields = b',"bind_id":#,"flow_out":true' if flow is flow_out else b',"bind_id":#,"flow_in":true'
        return [(sel[~on], b""), (sel[on], fields)]

    for mask, cat, flow in (
        (kind == Kind.RUNTIME if present[Kind.RUNTIME] else None, b"runtime", flow_out),
        ((kind == Kind.SYNC) & c.on_host if present[Kind.SYNC] else None, b"sync", None),
    ):
        if mask is None:
            continue
        for sel, flow_fields in linked(np.flatnonzero(mask), flow):
            t, cols = span(cat, False)
            cols += [(corr, False)] * (1 + bool(flow_fields))  # bind_id is the correlation id
            rows(sel, t + flow_fields + b',"args":{"correlation":#},', cols, name[sel], name_tail)

    for k, cat in _GPU_CATS.items():
        if not present[k]:
            continue
        of_kind = np.flatnonzero((kind == k) & ~c.on_host if k == Kind.SYNC else kind == k)
        for sel, flow_fields in linked(of_kind, flow_in):
            t, cols = span(cat, True)
            t, cols = t + flow_fields + b',"args":{"correlation":#', [*cols, *[(corr, False)] * (1 + bool(flow_fields))]
            if k == Kind.MEMCPY:
                # The name and the copy's direction together pick the tail, so key on both.
                pairs = (name[sel].astype(np.int64) << 32) | (ev["flags"][sel] & 0xFFFFFF)
                uniq, key = np.unique(pairs, return_inverse=True)
                tails = [b'%s},"name":%s},\n' % (_copy_args(p & 0xFFFFFF), names(p >> 32)) for p in uniq.tolist()]
                rows(sel, t + b',"bytes":#,', [*cols, (value, False)], key.reshape(-1), tails.__getitem__)
            elif k == Kind.MEMSET:
                rows(sel, t + b',"bytes":#},', [*cols, (value, False)], name[sel], name_tail)
            else:
                rows(sel, t + b"},", cols, name[sel], name_tail)

    if present[Kind.MARK]:
        sel = np.flatnonzero(kind == Kind.MARK)
        marks = [(int(n), int(v)) for n, v in zip(name[sel].tolist(), value[sel].tolist(), strict=True)]
        t = b'{"ph":"i","s":"t","cat":"mark","pid":%d,"tid":#,"ts":#,' % HOST_PID
        rows(sel, t, [(c.tid, False), (start, True)],
             np.arange(len(sel)), lambda i: _mark_tail(names(marks[i][0]), tl.attrs, marks[i][1]))  # fmt: skip

    counter = b'{"ph":"C","pid":%d,"ts":#,"name":"%s","args":{"%s MiB":#}},\n'
    if present[Kind.MEMORY]:
        sel = np.flatnonzero(kind == Kind.MEMORY)
        rss = [(start[sel], True), (value[sel] * 1000 // _MIB, True)]
        rows(np.arange(len(sel)), counter % (HOST_PID, b"host memory", b"RSS"), rss)
    if present[Kind.GPU_MEMORY]:
        gpu_mem = np.flatnonzero(kind == Kind.GPU_MEMORY)
        for d in _unique(c.device[gpu_mem]):
            sel = gpu_mem[c.device[gpu_mem] == d]
            allocated = np.cumsum(value[sel]) * 1000 // _MIB  # allocations minus frees, in time order
            t = counter % (GPU_PID_BASE + max(d, 0), b"GPU memory", b"allocated")
            rows(np.arange(len(sel)), t, [(start[sel], True), (allocated, True)])  # columns per row already
    return count


def _first_with(keys: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """For each wanted value, the position of its first occurrence in `keys`, or -1 (non-negative ints)."""
    lo, hi = int(keys.min()), int(keys.max())
    if hi - lo < 4 * len(keys) + (1 << 16):  # correlation ids count up: a table is ~5x faster than a search
        first = np.full(hi - lo + 1, len(keys), dtype=np.int64)
        np.minimum.at(first, keys.astype(np.int64) - lo, np.arange(len(keys)))
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
    return [int(x) for x in np.unique(a)]


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


@functools.lru_cache(maxsize=256)
def _copy_args(flags: int) -> bytes:
    """The args of a copy with these flags (direction, memory kinds), as JSON members."""
    copy, src, dst = (int(x) for x in unpack_copy_flags(flags))

    def label(enum: type[IntEnum], v: int) -> str:
        return enum(v).name if v in enum._value2member_map_ else str(v)

    direction = label(CopyKind, copy)  # HTOD -> HtoD, as CUPTI and Nsight write it
    direction = f"{direction[0]}to{direction[3]}" if len(direction) == 4 and direction[1:3] == "TO" else direction
    args = {
        "direction": direction,
        "src_kind": label(MemoryKind, src).lower(),
        "dst_kind": label(MemoryKind, dst).lower(),
    }
    return json.dumps(args, sort_keys=True)[1:-1].encode()


def _mark_tail(name: bytes, attrs: list[dict[str, Any]], index: int) -> bytes:
    a = attrs[index] if 0 <= index < len(attrs) else {}
    return b'"name":%s,"args":%s},\n' % (name, json.dumps(a, sort_keys=True, default=str).encode())


# ---- the vectorised row writer -------------------------------------------------------------
#
# Rows are built four bytes at a time: the fixed part of n rows is a (units, n) array of
# little-endian uint32, one line per 4-byte unit, filled line by line and transposed once on the
# way out. Numbers start on a unit boundary (spaces before them) and are written four digits per
# table look-up; templates and tails are padded with spaces to whole units. JSON allows all
# those spaces: they only ever stand after ':' or ',' or before the next row.

_U4 = np.dtype("<u4")


def _tables() -> tuple[np.ndarray, np.ndarray]:
    """Look-up tables: 4 characters per uint32 for 0..9999 (zero-padded | leading group | last
    group), and '.' plus 3 digits for 0..999."""
    r = np.arange(10000)
    zero = (np.stack([r // 1000, r // 100 % 10, r // 10 % 10, r % 10], axis=1) + 48).astype(np.uint8)
    ndigits = 1 + (r >= 10).astype(int) + (r >= 100) + (r >= 1000)
    last = zero.copy()
    last[np.arange(4)[None, :] < (4 - ndigits)[:, None]] = ord(" ")
    leading = last.copy()
    leading[0] = ord(" ")  # nothing left to print in a group to the left of the last one
    groups = np.concatenate([zero, leading, last]).view(_U4).reshape(-1)
    frac = np.concatenate([np.full((1000, 1), ord("."), np.uint8), zero[:1000, 1:]], axis=1)
    return groups, frac.view(_U4).reshape(-1)


_GROUPS, _FRAC = _tables()


def _emit(f: _Writer, n: int, pieces: Sequence[Piece], key: np.ndarray | None, tail_of: Tail | None) -> int:
    """Write n rows: the pieces in order, then `tail_of(key[i])` if given."""
    if n == 0:
        return 0
    if n <= SMALL_ROWS:
        return _emit_small(f, n, pieces, key, tail_of)
    tables: dict[int, np.ndarray] = {}
    if key is not None and tail_of is not None:
        # Tails are built once per distinct key actually used, not per row and not per string.
        used = np.flatnonzero(np.bincount(key))
        compact = np.zeros(int(used[-1]) + 1, dtype=np.intp)
        compact[used] = np.arange(len(used))
        tails = [t + b" " * (-len(t) % 4) for t in map(tail_of, used.tolist())]
        lengths = np.fromiter(map(len, tails), dtype=np.int64, count=len(tails)) // 4
        # One table per tail length; `local` is a tail's row in the table of its length.
        local = np.zeros(len(tails), dtype=np.intp)
        for units in np.unique(lengths).tolist():
            ids = np.flatnonzero(lengths == units)
            local[ids] = np.arange(len(ids))
            tables[units] = np.frombuffer(b"".join(tails[i] for i in ids.tolist()), _U4).reshape(len(ids), units)
        key = compact[key]
        row_len = lengths[key]
        if len(tables) > 1:
            # Rows with the same tail length are written as one block, so bring them together.
            order = np.argsort(row_len.astype(np.uint16) if lengths.max() < 1 << 16 else row_len, kind="stable")
            pieces = _pick(pieces, order)
            key, row_len = key[order], row_len[order]
        key = local[key]
    for a in range(0, n, CHUNK):
        b = min(a + CHUNK, n)
        fixed = _format(_pick(pieces, slice(a, b)), b - a)
        if key is None:
            f.write(np.ascontiguousarray(fixed.T).data)
            continue
        lens = row_len[a:b]
        cuts = (np.flatnonzero(np.diff(lens)) + 1).tolist()
        for lo, hi in zip([0, *cuts], [*cuts, b - a], strict=True):
            tail = tables[int(lens[lo])][key[a + lo : a + hi]]
            # One copy does both jobs: transposes the fixed part to rows and appends the tails.
            f.write(np.concatenate((fixed[:, lo:hi].T, tail), axis=1).data)
    return n


def _emit_small(f: _Writer, n: int, pieces: Sequence[Piece], key: np.ndarray | None, tail_of: Tail | None) -> int:
    """`_emit` for a few rows, one Python row at a time: numpy's per-call cost would dominate."""
    columns = [p if isinstance(p, bytes) else (p[0].tolist(), p[1]) for p in pieces]
    tails: dict[int, bytes] = {}
    keys: list[int] = []
    if key is not None and tail_of is not None:
        keys = key.tolist()
        tails = {k: tail_of(k) for k in sorted(set(keys))}  # in _emit's order: frame ids come out the same
    rows = []
    for i in range(n):
        row = [p if isinstance(p, bytes) else _py_number(p[0][i], p[1]) for p in columns]
        if keys:
            row.append(tails[keys[i]])
        rows.append(b"".join(row))
    f.write(b"".join(rows))
    return n


def _pick(pieces: Sequence[Piece], index: slice | np.ndarray) -> list[Piece]:
    """`pieces` with each column indexed by `index`, once per column: a column used twice stays
    one object, which `_format` then formats once."""
    done: dict[int, np.ndarray] = {}
    out: list[Piece] = []
    for p in pieces:
        if isinstance(p, bytes):
            out.append(p)
            continue
        if id(p[0]) not in done:
            done[id(p[0])] = p[0][index]
        out.append((done[id(p[0])], p[1]))
    return out


def _format(pieces: Sequence[Piece], n: int) -> np.ndarray:
    """The fixed part of n rows as a (units, n) uint32 array whose column i is row i."""
    template = bytearray()
    fields: list[tuple[int, int, np.ndarray, np.ndarray | None, np.ndarray | None]] = []
    seen: dict[tuple[int, bool], bytes | tuple[int, int]] = {}  # column -> its literal, or (unit, units)
    copies: list[tuple[int, int, int]] = []  # (to unit, from unit, units): a column printed again
    for p in pieces:
        if isinstance(p, bytes):
            template += p
            continue
        values, milli = p
        again = seen.get((id(values), milli))
        if isinstance(again, bytes):
            template += again
            continue
        if again is not None:
            template += b" " * (-len(template) % 4)
            copies.append((len(template) // 4, *again))
            template += b" " * (4 * again[1])
            continue
        values = values.astype(np.int64, copy=False)
        lo, hi = int(values.min()), int(values.max())
        if lo == hi:  # the same in every row: a literal
            literal = seen[(id(p[0]), milli)] = _py_number(lo, milli)
            template += literal
            continue
        template += b" " * (-len(template) % 4)
        neg = values < 0 if lo < 0 else None
        mag = np.abs(values) if neg is not None else values
        frac = None
        if milli:
            mag, frac = _div1000(mag)
        groups = -(-(len(str(int(mag.max()))) + (neg is not None)) // 4)
        fields.append((len(template) // 4, groups, mag, frac, neg))
        seen[(id(p[0]), milli)] = (len(template) // 4, groups + milli)
        template += b" " * (4 * groups) + (b".000" if milli else b"")
    template += b" " * (-len(template) % 4)
    units = len(template) // 4
    # The line stride is kept off multiples of 4 KiB: the transposing copy runs several times
    # slower when all lines of a column fall into the same cache sets.
    stride = n + (_STRIDE_MOD - n) % 1024
    out = np.empty((units, stride), dtype=_U4)[:, :n]
    out[:] = np.frombuffer(bytes(template), dtype=_U4)[:, None]
    for unit, groups, mag, frac, neg in fields:
        # uint32 division by a constant is vectorised by numpy; int64 division is far slower.
        v = mag.astype(np.uint32) if int(mag.max()) < 1 << 32 else mag.astype(np.uint64)
        q = np.empty_like(v)
        for k in range(groups):
            np.floor_divide(v, 10000, out=q)
            lead = (q == 0).astype(v.dtype)  # the group holding the number's first digit
            lead *= 20000 if k == 0 else 10000
            idx = v - q * 10000 + lead
            np.take(_GROUPS, idx, out=out[unit + groups - 1 - k], mode="clip")
            v, q = q, v
        if frac is not None:
            np.take(_FRAC, frac, out=out[unit + groups], mode="clip")
        if neg is not None:
            rows = np.flatnonzero(neg)
            ndigits = np.searchsorted(10 ** np.arange(1, 19, dtype=np.int64), mag[rows], side="right") + 1
            pos = 4 * (unit + groups) - 1 - ndigits  # byte of the '-' in the row
            out.view(np.uint8)[pos // 4, 4 * rows + pos % 4] = ord("-")
    for to, src, n_units in copies:
        out[to : to + n_units] = out[src : src + n_units]
    return out


def _div1000(mag: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(mag // 1000, mag % 1000) for mag >= 0, through float64: int64 division is slow in numpy."""
    if int(mag.max()) >= 1 << 52:
        return mag // 1000, mag % 1000
    whole = (mag * 1e-3).astype(np.int64)
    frac = mag - whole * 1000
    # The float quotient can be one off near a multiple of 1000; correct those rows.
    low, high = frac < 0, frac >= 1000
    if low.any() or high.any():
        whole += high.view(np.int8) - low.view(np.int8)
        frac = mag - whole * 1000
    return whole, frac


def _py_number(v: int, milli: bool) -> bytes:
    if not milli:
        return b"%d" % v
    sign, m = ("-" if v < 0 else ""), abs(v)
    return b"%s%d.%03d" % (sign.encode(), m // 1000, m % 1000)
