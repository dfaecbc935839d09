"""The HTML report's timeline data: a `Timeline` cut into lanes of columnar, compactly typed arrays.

The browser draws straight from typed arrays, so nothing here builds a Python object per event.
Each lane (a host thread's rounds, scopes, modules, Python samples or runtime calls; a GPU
stream; a device's idle gaps) is a set of columns over its events in start order:

- `start`: ns from the timeline's start, as uint32 deltas from the previous event when they fit
  (float64 otherwise); the browser adds them up once;
- `dur` (uint32 ns, or float64 past 4.3 s), `name` (uint16/uint32 into the report's string table);
- `cat` (uint8: what to colour by, see `CATS`), `depth` (uint8: the row inside the lane), each left
  out when it is the same for every event of the lane;
- `link` (int32, GPU lanes): the index of the launch (runtime call) that issued the work, in the
  runtime lanes taken in order, or -1; `value` (float32, bytes of copies and memsets); `peer` (uint8,
  GPU lanes with a peer copy: its devices, source + 1 | destination + 1 << 4, 0 for other work; idle
  lanes with a peer wait: the device waited for + 1, 0 for other gaps).

Idle gaps are the analyzer's, with their causes (`analyzer_gaps`), or, from an analyzer without
that attribution, the gaps between merged GPU work inside a round (`own_gaps`), without a cause.

`encode` lays the columns out in one buffer (each 8-byte aligned, so the browser can view it
as typed arrays without copying) and returns the manifest describing where each column is.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..analyzer.base import Rounds
from ..events import CopyKind, Kind, kind_table, unpack_copy_flags
from ..merger import Timeline
from ..rounds import RoundKind, kinds_of
from .trace import _unique

#: Colour categories, by lane kind; the index is the `cat` value. The browser has the same lists.
CATS: dict[str, list[str]] = {
    "rounds": ["test", "measured round", "round not measured (warm-up, profile, trace)", "mark"],
    "scopes": ["scope"],
    "modules": ["module"],
    "python": ["sample", "call"],
    "runtime": ["runtime call", "synchronize", "round-end wait", "profiler overhead"],
    "stream": ["kernel", "copy HtoD", "copy DtoH", "copy DtoD", "copy (other)", "memset", "sync", "copy PtoP"],
    "idle": ["not attributed", "host wait", "launch gap", "sync stall", "round-end sync", "other", "peer wait"],
}
#: The analyzer's idle-gap causes (`analyzer/idle.py`), mapped to `CATS["idle"]`; any other is "other".
IDLE_CAUSES = {"host_wait": 1, "launch_gap": 2, "sync_stall": 3, "round_end": 4, "other": 5, "peer_wait": 6}
#: Deepest nesting drawn in a lane (deeper spans are drawn on the last row).
MAX_DEPTH = 7
_U32 = 1 << 32
# Columns are compared with `int(Kind.X)`, not the member: see events.Kind.


class Fields:
    """The event fields, each copied once into a contiguous array on first use: gathers from a
    field of the 48-byte records run several times slower than from a plain array."""

    def __init__(self, events: np.ndarray) -> None:
        self._events = events
        self._cache: dict[str, np.ndarray] = {}

    def __getitem__(self, name: str) -> np.ndarray:
        col = self._cache.get(name)
        if col is None:
            col = self._cache[name] = np.ascontiguousarray(self._events[name])
        return col


@dataclass
class Lane:
    """One lane of the timeline: its label and its events (indices into the timeline), with extra columns."""

    kind: str
    label: str
    rows: np.ndarray  # indices into timeline.events, in start order
    group: str = "cpu"  # "cpu" or "gpu"
    device: int = -1
    cols: dict[str, np.ndarray] = field(default_factory=dict)  # cat, depth, link, value; full lane length


@dataclass
class Payload:
    """What the report embeds: the manifest (JSON) and the column bytes (base64 in the page)."""

    manifest: dict[str, Any]
    blob: bytes

    def base64(self) -> bytes:
        return base64.b64encode(self.blob)


def build_lanes(tl: Timeline, f: Fields | None = None) -> list[Lane]:
    """The lanes of a timeline: host threads (the test thread first), then one per GPU stream."""
    f = f or Fields(tl.events)
    kind, tid, device = f["kind"], f["tid"], f["device"]
    lanes: list[Lane] = []
    host = np.flatnonzero((device < 0) | (kind == int(Kind.RUNTIME)))
    test_tids = set(_unique(tid[kind_table((Kind.TEST, Kind.ROUND))[kind]]))
    host_tid = tid[host]
    for t in sorted(_unique(host_tid), key=lambda t: (t not in test_tids, t)):
        same = host_tid == t
        on_thread = host if same.all() else host[same]
        k_on = kind[on_thread]
        who = ("test thread" if t in test_tids else "thread") + (f" {t}" if t >= 0 else " (unknown)")
        for name, kinds in _GROUPS.items():
            rows = on_thread[kind_table(kinds)[k_on]]
            if not len(rows):
                continue
            lane = Lane(name, f"{who} · {_LABELS[name]}", rows)
            lane.cols["cat"] = _cpu_cats(name, f, rows)
            lane.cols["depth"] = _cpu_depth(tl, f, name, rows, kinds)
            lanes.append(lane)
    gpu = np.flatnonzero((device >= 0) & kind_table((Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC))[kind])
    stream = f["stream"][gpu]
    for d in _unique(device[gpu]):
        on_device = np.flatnonzero(device[gpu] == d)
        for st in _unique(stream[on_device]):
            rows = gpu[on_device[stream[on_device] == st]]
            lane = Lane("stream", f"GPU {d} · stream {st}", rows, group="gpu", device=d)
            lane.cols["cat"] = _gpu_cats(f, rows)
            lane.cols["depth"] = _overlap_depth(f, rows)
            value = f["value"][rows]
            if value.any():
                lane.cols["value"] = value.astype(np.float32)
            peer = np.where(f["kind"][rows] == int(Kind.MEMCPY), f["flags"][rows] >> 24, 0).astype(np.uint8)
            if peer.any():  # a copy between two devices: which two (events.copy_flags' top byte)
                lane.cols["peer"] = peer
            lanes.append(lane)
    if len(gpu):
        _link_launches(f, lanes)
    return lanes


_GROUPS = {  # lane kind -> event kinds, in the order the lanes are drawn
    "rounds": (Kind.TEST, Kind.ROUND, Kind.MARK),
    "scopes": (Kind.SCOPE,),
    "modules": (Kind.MODULE,),
    "python": (Kind.SAMPLE, Kind.CALL),
    "runtime": (Kind.RUNTIME, Kind.SYNC, Kind.WAIT, Kind.OVERHEAD),
}
_LABELS = {"rounds": "rounds", "scopes": "scopes", "modules": "modules", "python": "Python", "runtime": "runtime API"}


def _cpu_cats(name: str, f: Fields, rows: np.ndarray) -> np.ndarray:
    k = f["kind"][rows]
    if name == "rounds":
        unmeasured = k == int(Kind.ROUND)
        unmeasured[unmeasured] = kinds_of(f["flags"][rows][unmeasured]) != int(RoundKind.MEASURED)
        return np.select([k == int(Kind.TEST), k == int(Kind.MARK), unmeasured], [0, 3, 2], 1).astype(np.uint8)
    if name == "python":
        return (k == int(Kind.CALL)).astype(np.uint8)
    if name == "runtime":
        return np.select([k == int(Kind.SYNC), k == int(Kind.WAIT), k == int(Kind.OVERHEAD)], [1, 2, 3], 0).astype(
            np.uint8
        )
    return np.zeros(len(rows), dtype=np.uint8)


def _cpu_depth(tl: Timeline, f: Fields, name: str, rows: np.ndarray, kinds: tuple[int, ...]) -> np.ndarray:
    """The row of each event in its lane: its nesting among spans of the lane's kinds."""
    k = f["kind"][rows]
    if name == "rounds":  # the test span on top, rounds (and marks) under it
        return ((k != int(Kind.TEST)) & bool((k == int(Kind.TEST)).any())).astype(np.uint8)
    if name == "runtime":
        return _overlap_depth(f, rows)
    depth = _span_depth(tl, f, rows, kinds)
    return np.where(k == int(Kind.SAMPLE), 0, depth).astype(np.uint8)  # samples never overlap


def _gpu_cats(f: Fields, rows: np.ndarray) -> np.ndarray:
    k = f["kind"][rows]
    copy = unpack_copy_flags(f["flags"][rows])[0]
    kinds = [
        copy == int(CopyKind.HTOD),
        copy == int(CopyKind.DTOH),
        copy == int(CopyKind.DTOD),
        copy == int(CopyKind.PTOP),
    ]
    copy_cat = np.select(kinds, [1, 2, 3, 7], 4)
    return np.select([k == int(Kind.MEMCPY), k == int(Kind.MEMSET), k == int(Kind.SYNC)], [copy_cat, 5, 6], 0).astype(
        np.uint8
    )


def _span_depth(tl: Timeline, f: Fields, rows: np.ndarray, kinds: tuple[int, ...]) -> np.ndarray:
    """How many enclosing spans of the same kinds each span has (walks the parent links level by level)."""
    same = kind_table(kinds)[f["kind"]]
    depth = np.zeros(len(rows), dtype=np.int64)
    p = tl.parent[rows].astype(np.int64)
    for _ in range(64):  # hierarchies are shallow; the bound only guards against a cycle
        live = p >= 0
        if not live.any():
            break
        depth[live] += same[p[live]]
        p[live] = tl.parent[p[live]]
    return np.minimum(depth, MAX_DEPTH).astype(np.uint8)


def _overlap_depth(f: Fields, rows: np.ndarray) -> np.ndarray:
    """Row 1 for an event that starts before the previous ones of its lane ended (nested or concurrent), else 0."""
    if len(rows) < 2:
        return np.zeros(len(rows), dtype=np.uint8)
    end = np.maximum.accumulate(f["end"][rows])
    depth = np.zeros(len(rows), dtype=np.uint8)
    depth[1:] = f["start"][rows][1:] < end[:-1]
    return depth


def _link_launches(f: Fields, lanes: list[Lane]) -> None:
    """Give each GPU lane a `link` column: the position of its launch among the runtime lanes' events."""
    from .trace import _first_with

    runtime = [lane.rows for lane in lanes if lane.kind == "runtime"]
    gpu_lanes = [lane for lane in lanes if lane.group == "gpu"]
    if not runtime or not gpu_lanes:
        return
    corr = f["corr"]
    launches = np.concatenate(runtime)
    has = np.flatnonzero((f["kind"][launches] == int(Kind.RUNTIME)) & (corr[launches] != 0))
    work = np.concatenate([lane.rows for lane in gpu_lanes])
    link = np.full(len(work), -1, dtype=np.int32)
    with_id = np.flatnonzero(corr[work] != 0)
    if len(has) and len(with_id):
        first = _first_with(corr[launches[has]], corr[work[with_id]])  # one table for every GPU lane
        found = first >= 0
        link[with_id[found]] = has[first[found]]
    at = 0
    for lane in gpu_lanes:
        mine = link[at : at + len(lane.rows)]
        at += len(lane.rows)
        if (mine >= 0).any():
            lane.cols["link"] = mine


@dataclass
class Gaps:
    """GPU idle intervals to shade: start and end (ns, the timeline's clock), device, and cause
    (codes into `CATS["idle"]`); `attributed` says whether the causes came from the analyzer."""

    start: np.ndarray
    end: np.ndarray
    device: np.ndarray
    cat: np.ndarray
    attributed: bool = False
    peer: np.ndarray | None = None  # for a peer wait, the device waited for (-1 for the other gaps)


def analyzer_gaps(gaps: Any, causes: Sequence[str]) -> Gaps | None:
    """The analyzer's idle attribution (arrays `start_ns`, `end_ns`, `device`, `cause` with codes into
    `causes`) as `Gaps`, or None when it has not the shape expected (then the gaps are unattributed)."""
    try:
        start, end = np.asarray(gaps.start_ns, np.int64), np.asarray(gaps.end_ns, np.int64)
        device, code = np.asarray(gaps.device, np.int64), np.asarray(gaps.cause, np.int64)
    except (AttributeError, TypeError, ValueError):
        return None
    if not (len(start) == len(end) == len(device) == len(code)) or (len(code) and int(code.max()) >= len(causes)):
        return None
    table = np.array([cause_code(c) for c in causes] or [0], dtype=np.uint8)
    peer = np.asarray(getattr(gaps, "peer", np.full(len(start), -1)), np.int64)
    cat = table[code] if len(code) else np.zeros(0, np.uint8)
    return Gaps(start, end, device, cat, attributed=True, peer=peer if len(peer) == len(start) else None)


def own_gaps(tl: Timeline, f: Fields | None = None) -> Gaps:
    """Unattributed idle gaps, for when the analyzer gives none: per device, the gaps between its merged
    GPU work (kernels, copies, memsets on any stream) inside a round."""
    f = f or Fields(tl.events)
    kind, device = f["kind"], f["device"]
    work = (device >= 0) & kind_table((Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET))[kind]
    rounds = np.sort(f["start"][kind == int(Kind.ROUND)])
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for d in _unique(device[work]):
        sel = np.flatnonzero(work & (device == d))
        s, e = f["start"][sel], f["end"][sel]
        if len(s) > 1 and (s[1:] < s[:-1]).any():  # a timeline is in start order; a hand-made one may not be
            order = np.argsort(s, kind="stable")
            s, e = s[order], e[order]
        run_end = np.maximum.accumulate(e)
        new = np.ones(len(s), dtype=bool)
        new[1:] = s[1:] > run_end[:-1]
        idx = np.flatnonzero(new)
        busy_s, busy_e = s[idx], np.append(run_end[idx[1:] - 1], run_end[-1])
        keep = busy_s[1:] > busy_e[:-1]
        if len(rounds):
            rid = np.searchsorted(rounds, busy_s, side="right") - 1
            keep &= rid[1:] == rid[:-1]
        parts.append((busy_e[:-1][keep], busy_s[1:][keep], np.full(int(keep.sum()), d)))
    if not parts:
        z = np.zeros(0, np.int64)
        return Gaps(z, z, z, np.zeros(0, np.uint8))
    start, end, dev = (np.concatenate(x) for x in zip(*parts, strict=True))
    return Gaps(start, end, dev, np.zeros(len(start), np.uint8))


def idle_lanes(gaps: Gaps) -> list[Lane]:
    """One lane per device of its idle gaps, coloured by cause, in time order."""
    lanes = []
    for d in _unique(gaps.device):
        sel = np.flatnonzero(gaps.device == d)
        sel = sel[np.argsort(gaps.start[sel], kind="stable")]
        keep = sel[gaps.end[sel] > gaps.start[sel]]
        if not len(keep):
            continue
        lane = Lane("idle", f"GPU {d} · idle", np.arange(len(keep)), group="gpu", device=d)
        lane.cols = {"start": gaps.start[keep], "dur": gaps.end[keep] - gaps.start[keep], "cat": gaps.cat[keep]}
        if gaps.peer is not None and (gaps.peer[keep] >= 0).any():
            lane.cols["peer"] = (gaps.peer[keep] + 1).astype(np.uint8)
        lanes.append(lane)
    return lanes


def cause_code(label: Any) -> int:
    """A cause's code in `CATS["idle"]`: "host_wait", "Host wait" and "host-wait" are one cause."""
    return IDLE_CAUSES.get(str(label).strip().lower().replace(" ", "_").replace("-", "_"), IDLE_CAUSES["other"])


class _Buffer:
    """Columns laid out one after another, each padded to 8 bytes so typed arrays can view them in place."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.size = 0

    def put(self, arr: np.ndarray) -> list[Any]:
        data = np.ascontiguousarray(arr).tobytes()
        where = [arr.dtype.str.lstrip("<|="), self.size, len(arr)]
        pad = -len(data) % 8
        self.parts.append(data + b"\0" * pad)
        self.size += len(data) + pad
        return where


def encode(tl: Timeline, lanes: list[Lane], f: Fields | None = None) -> Payload:
    """The manifest and the column buffer of `lanes` (see the module docstring)."""
    f = f or Fields(tl.events)
    buf = _Buffer()
    counts = np.zeros(len(tl.strings), dtype=np.int64)
    for lane in lanes:
        if lane.kind != "idle":
            counts += np.bincount(f["name"][lane.rows], minlength=len(counts))[: len(counts)]
    names = np.flatnonzero(counts)  # the strings in use, in table order
    remap = np.zeros(len(counts), dtype=np.uint32)
    remap[names] = np.arange(len(names), dtype=np.uint32)
    name_dtype = np.uint16 if len(names) < 1 << 16 else np.uint32
    out_lanes = []
    t_end = 0
    for lane in lanes:
        if lane.kind == "idle":
            start, dur = lane.cols["start"].astype(np.int64), lane.cols["dur"].astype(np.int64)
            columns = {k: v for k, v in lane.cols.items() if k in ("cat", "peer")}
        else:
            start = np.asarray(f["start"][lane.rows], dtype=np.int64)
            dur = np.asarray(f["end"][lane.rows], dtype=np.int64) - start
            columns = {"name": remap[f["name"][lane.rows]].astype(name_dtype), **lane.cols}
        dur = np.maximum(dur, 0)
        base = int(start[0]) if len(start) else 0
        deltas = np.diff(start, prepend=base)
        delta = bool(len(start)) and int(deltas.max()) < _U32  # start order: deltas are never negative
        cols = {
            "start": buf.put(deltas.astype(np.uint32) if delta else start.astype(np.float64)),
            "dur": buf.put(dur.astype(np.uint32) if not len(dur) or int(dur.max()) < _U32 else dur.astype(np.float64)),
        }
        consts: dict[str, float] = {}
        for key, arr in columns.items():
            if key != "link" and len(arr) and (arr == arr[0]).all():
                consts[key] = float(arr[0])  # the same for every event: one number, not a column
            else:
                cols[key] = buf.put(arr)
        if len(start):
            t_end = max(t_end, int((start + dur).max()))
        out_lanes.append({
            "kind": lane.kind, "label": lane.label, "group": lane.group, "device": lane.device, "n": len(start),
            "base": base, "start_mode": "delta" if delta else "abs", "cols": cols, "consts": consts,
            "rows": int(lane.cols["depth"].max()) + 1 if "depth" in lane.cols and len(start) else 1,
        })  # fmt: skip
    manifest = {
        "t_end": t_end,
        "strings": [tl.strings[i] for i in names.tolist()],
        "runtime_lanes": [i for i, lane in enumerate(lanes) if lane.kind == "runtime"],
        "lanes": out_lanes,
        "events": int(sum(len(lane.rows) for lane in lanes if lane.kind != "idle")),
    }
    return Payload(manifest, b"".join(buf.parts))


def timeline_payload(tl: Timeline, gaps: Gaps | None = None, f: Fields | None = None) -> Payload:
    """Lanes, idle gaps (`gaps`, else `own_gaps`) and their encoding: everything the report's timeline needs."""
    f = f or Fields(tl.events)
    lanes = build_lanes(tl, f)
    gpu_end = max((i for i, lane in enumerate(lanes) if lane.group == "gpu"), default=len(lanes) - 1)
    lanes[gpu_end + 1 : gpu_end + 1] = idle_lanes(gaps if gaps is not None else own_gaps(tl, f))
    return encode(tl, lanes, f)


def top_kernels(tl: Timeline, limit: int = 15, f: Fields | None = None) -> list[dict[str, Any]]:
    """The kernels with the most GPU time inside the rounds GPU activity is read from, per round, longest first.

    Those are the analyzer's GPU rounds (`Rounds.gpu_round_idx`): the measured rounds, or the profile
    rounds in lean mode. A trace with no ROUND span counts all its kernels as one round.
    """
    f = f or Fields(tl.events)
    kind = f["kind"]
    k = np.flatnonzero(kind == int(Kind.KERNEL))
    if not len(k):
        return []
    rounds = Rounds(tl).gpu_round_idx
    if len(rounds):
        rs, re_ = f["start"][rounds], f["end"][rounds]
        order = np.argsort(rs)
        rs, re_ = rs[order], re_[order]
        pos = np.searchsorted(rs, f["start"][k], side="right") - 1
        inside = (pos >= 0) & (f["start"][k] < re_[np.maximum(pos, 0)])
        k = k[inside]
    if not len(k):
        return []
    n = max(1, len(rounds))
    names = f["name"][k]
    dur = (f["end"][k] - f["start"][k]).astype(np.float64)
    total = np.bincount(names, weights=dur)
    count = np.bincount(names)
    all_ns = float(dur.sum()) or 1.0
    top = np.argsort(-total, kind="stable")[: min(limit, int(np.count_nonzero(count)))]
    longest = {i: float(dur[names == i].max()) for i in top.tolist()}  # np.maximum.at is slow; few names here
    return [
        {
            "name": tl.strings[int(i)],
            "count_per_round": float(count[i]) / n,
            "ms_per_round": float(total[i]) / 1e6 / n,
            "mean_us": float(total[i]) / float(count[i]) / 1e3,
            "max_us": longest[i] / 1e3,
            "share": float(total[i]) / all_ns,
        }
        for i in top.tolist()
    ]
