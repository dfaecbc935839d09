"""Chrome trace event JSON (Perfetto, chrome://tracing) from a merged `Timeline`.

A timeline can hold millions of events, so rows are never built as Python objects: each kind
of event is one byte template whose numbers are filled in for all rows at once with numpy
(see "the vectorised row writer" below), and whose variable end (the name, the args) comes from
a small table built once per distinct name. About 0.5 s per million events on a 2-core machine,
most of it the kernel copying ~200 MB into the page cache, which a writer thread overlaps.

Processes and threads are numbered, not named, because Perfetto's JSON importer only accepts
integer pids and tids (a string such as "host" is dropped); "M" metadata events name them:
pid 1 is "host" (tid = the native thread id), pid 100 + d is "GPU d" (tid = the CUDA stream).
CPU samples show their leaf frame and point ("sf") into a shared "stackFrames" tree.
"""

from __future__ import annotations

import functools
import json
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
#: Rows formatted per numpy pass: small enough to pipeline with the writer thread, large enough
#: that numpy's per-call overhead does not matter.
CHUNK = 150_000
_STRIDE_MOD = 144  # in uint32 units: 9 cache lines; see _format
_HOST_SPANS = {Kind.TEST: b"test", Kind.ROUND: b"round", Kind.SCOPE: b"scope", Kind.MODULE: b"module",
               Kind.CALL: b"call", Kind.OVERHEAD: b"overhead"}  # fmt: skip
_GPU_CATS = {Kind.KERNEL: b"kernel", Kind.MEMCPY: b"memcpy", Kind.MEMSET: b"memset", Kind.SYNC: b"sync"}
_MIB = 1 << 20

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
        out = _Background(f)
        try:
            out.write(b'{"displayTimeUnit":"ms","otherData":%s,"traceEvents":[\n' % json.dumps(other).encode())
            frames = _Frames()
            count = _write_events(out, timeline, frames)
            meta = _metadata(timeline)
            out.write(",\n".join(meta).encode())
            out.write(b'\n],"stackFrames":{%s}}\n' % b",\n".join(frames.entries))
        finally:
            out.close()
    return count + len(meta)


class _Background:
    """Hands blocks to a second thread that writes them, so the kernel's copy of one block into
    the page cache overlaps the formatting of the next (numpy and write() release the GIL)."""

    def __init__(self, f: BinaryIO) -> None:
        self._f = f
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


def _write_events(f: _Background, tl: Timeline, frames: _Frames) -> int:
    """Every event as a trace row, kind by kind; returns the number of rows."""
    ev = tl.events
    kind, name, corr, value = ev["kind"], ev["name"], ev["corr"], ev["value"]
    # JSON string literals of the names, made on first use: most of a big table is never used.
    names: Callable[[int], bytes] = functools.cache(lambda i: json.dumps(tl.strings[i]).encode())
    tid = np.maximum(ev["tid"], 0)  # Perfetto wants uint32 tids; -1 means "unknown thread"
    gpu_pid = GPU_PID_BASE + np.maximum(ev["device"].astype(np.int64), 0)
    stream = np.maximum(ev["stream"], 0)
    start, dur = ev["start"], ev["end"] - ev["start"]
    on_host = ev["device"] < 0
    count = 0

    def rows(sel: np.ndarray, template: bytes, cols: list[Column], key: Any = None, tail: Tail | None = None) -> None:
        """Rows of `template` whose '#' marks are filled from `cols` (full-length, picked by `sel`)."""
        nonlocal count
        literal = template.split(b"#")
        pieces: list[Piece] = [literal[0]]
        for (c, milli), lit in zip(cols, literal[1:], strict=True):
            pieces += [(c[sel], milli), lit]
        count += _emit(f, len(sel), pieces, key, tail)

    def name_tail(i: int) -> bytes:
        return b'"name":%s},\n' % names(i)

    def span(cat: bytes, gpu: bool) -> tuple[bytes, list[Column]]:
        pid: list[Column] = [(gpu_pid, False)] if gpu else []
        t = b'{"ph":"X","cat":"%s","pid":%s,"tid":#,"ts":#,"dur":#' % (cat, b"#" if gpu else b"%d" % HOST_PID)
        return t, [*pid, (stream if gpu else tid, False), (start, True), (dur, True)]

    for k, cat in _HOST_SPANS.items():
        sel = np.flatnonzero(kind == k)
        t, cols = span(cat, False)
        if k == Kind.ROUND:
            t, cols = t + b',"args":{"round":#,"warmup":#}', [*cols, (value, False), (ev["flags"] & 1, False)]
        rows(sel, t + b",", cols, name[sel], name_tail)

    # A sample's name is its folded stack "outer;...;leaf": the slice shows the leaf and points
    # ("sf") into the shared stackFrames tree instead of repeating the stack in every row.
    sel = np.flatnonzero(kind == Kind.SAMPLE)
    t, cols = span(b"sample", False)
    rows(sel, t + b",", cols, name[sel], lambda i: frames.sample_tail(tl.strings[i]))

    for mask, cat in ((kind == Kind.RUNTIME, b"runtime"), ((kind == Kind.SYNC) & on_host, b"sync")):
        sel = np.flatnonzero(mask)
        t, cols = span(cat, False)
        rows(sel, t + b',"args":{"correlation":#},', [*cols, (corr, False)], name[sel], name_tail)

    for k, cat in _GPU_CATS.items():
        sel = np.flatnonzero((kind == k) & ~on_host if k == Kind.SYNC else kind == k)
        t, cols = span(cat, True)
        t, cols = t + b',"args":{"correlation":#', [*cols, (corr, False)]
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

    sel = np.flatnonzero(kind == Kind.MARK)
    marks = [(int(n), int(v)) for n, v in zip(name[sel].tolist(), value[sel].tolist(), strict=True)]
    rows(sel, b'{"ph":"i","s":"t","cat":"mark","pid":%d,"tid":#,"ts":#,' % HOST_PID, [(tid, False), (start, True)],
         np.arange(len(sel)), lambda i: _mark_tail(names(marks[i][0]), tl.attrs, marks[i][1]))  # fmt: skip

    counter = b'{"ph":"C","pid":%d,"ts":#,"name":"%s","args":{"%s MiB":#}},\n'
    sel = np.flatnonzero(kind == Kind.MEMORY)
    rss = [(start[sel], True), (value[sel] * 1000 // _MIB, True)]
    rows(np.arange(len(sel)), counter % (HOST_PID, b"host memory", b"RSS"), rss)
    gpu_mem = np.flatnonzero(kind == Kind.GPU_MEMORY)
    for d in _unique(ev["device"][gpu_mem]):
        sel = gpu_mem[ev["device"][gpu_mem] == d]
        allocated = np.cumsum(value[sel]) * 1000 // _MIB  # allocations minus frees, in time order
        t = counter % (GPU_PID_BASE + max(d, 0), b"GPU memory", b"allocated")
        rows(np.arange(len(sel)), t, [(start[sel], True), (allocated, True)])  # columns per row already

    # Flows: from the launch (runtime call) to the GPU work it issued, matched by correlation id.
    gpu = np.flatnonzero(np.isin(kind, [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET]) & (corr != 0))
    rts = np.flatnonzero((kind == Kind.RUNTIME) & (corr != 0))
    if len(gpu) and len(rts):
        by_corr = rts[np.argsort(corr[rts], kind="stable")]
        pos = np.minimum(np.searchsorted(corr[by_corr], corr[gpu]), len(by_corr) - 1)
        found = corr[by_corr][pos] == corr[gpu]
        g, r = gpu[found], by_corr[pos[found]]
        ids, each = (np.arange(1, len(g) + 1), False), np.arange(len(g))
        flow = b'{"ph":"%s",%s"cat":"launch","name":"launch","id":#,"pid":'
        rows(each, flow % (b"s", b"") + b'%d,"tid":#,"ts":#},\n' % HOST_PID, [ids, (tid[r], False), (start[r], True)])
        cols = [ids, (gpu_pid[g], False), (stream[g], False), (start[g], True)]
        rows(each, flow % (b"f", b'"bp":"e",') + b'#,"tid":#,"ts":#},\n', cols)
    return count


def _metadata(tl: Timeline) -> list[str]:
    """ "M" events naming the processes and threads (always at least the host process)."""
    ev = tl.events
    on_host = ev["device"] < 0
    out = [_meta("process_name", HOST_PID, 0, "host"), _meta("process_sort_index", HOST_PID, 0, 0)]
    test_tids = set(_unique(ev["tid"][np.isin(ev["kind"], [Kind.TEST, Kind.ROUND])]))
    for tid in _unique(np.maximum(ev["tid"][on_host], 0)):
        label = "test thread" if tid in test_tids else "thread"
        out.append(_meta("thread_name", HOST_PID, tid, f"{label} {tid}" if tid else "unknown thread"))
    on_dev = np.flatnonzero(~on_host)
    devices, streams = np.maximum(ev["device"][on_dev], 0), np.maximum(ev["stream"][on_dev], 0)
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
                self.entries.append(b'"%d":{"category":"python","name":%s%s}' % (node, json.dumps(frame).encode(), up))
            parent = node
        return b'"name":%s,"sf":%d},\n' % (json.dumps(frame).encode(), parent)


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


def _emit(f: _Background, n: int, pieces: Sequence[Piece], key: np.ndarray | None, tail_of: Tail | None) -> int:
    """Write n rows: the pieces in order, then `tail_of(key[i])` if given."""
    if n == 0:
        return 0
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
            pieces = [p if isinstance(p, bytes) else (p[0][order], p[1]) for p in pieces]
            key, row_len = key[order], row_len[order]
        key = local[key]
    for a in range(0, n, CHUNK):
        b = min(a + CHUNK, n)
        fixed = _format([p if isinstance(p, bytes) else (p[0][a:b], p[1]) for p in pieces], b - a)
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


def _format(pieces: Sequence[Piece], n: int) -> np.ndarray:
    """The fixed part of n rows as a (units, n) uint32 array whose column i is row i."""
    template = bytearray()
    fields: list[tuple[int, int, np.ndarray, np.ndarray | None, np.ndarray | None]] = []
    for p in pieces:
        if isinstance(p, bytes):
            template += p
            continue
        values, milli = p
        values = values.astype(np.int64, copy=False)
        lo, hi = int(values.min()), int(values.max())
        if lo == hi:  # the same in every row: a literal
            template += _py_number(lo, milli)
            continue
        template += b" " * (-len(template) % 4)
        neg = values < 0 if lo < 0 else None
        mag = np.abs(values) if neg is not None else values
        frac = None
        if milli:
            mag, frac = _div1000(mag)
        groups = -(-(len(str(int(mag.max()))) + (neg is not None)) // 4)
        fields.append((len(template) // 4, groups, mag, frac, neg))
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
