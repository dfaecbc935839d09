"""The HTML timeline's payload for a timeline of only the test's rounds, in plain Python.

A trivial test's timeline is four events: the test's span, its round, the plugin's end-of-round
wait and a memory reading. `lanes.timeline_payload` spends ~0.2-0.3 ms on it in some fifty numpy
calls, each a few microseconds whatever the size; here the same lanes and the same columns are
built from Python lists. Only for such timelines (`rounds_payload` says None otherwise): host
events of the kinds every test has, on any threads, and no idle gaps to shade. The result is
`timeline_payload`'s, byte for byte (a test compares the two on many such timelines).
"""

from __future__ import annotations

import itertools
import struct
import sys
from typing import Any

import numpy as np

from ..events import Kind
from ..merger import Timeline
from ..rounds import RoundKind, kinds_of
from .lanes import _LABELS, _U32, Gaps, Payload

#: Past this many events the numpy code is as fast.
MAX_EVENTS = 256
_ROUNDS = frozenset((Kind.TEST, Kind.ROUND, Kind.MARK))
_ALLOWED = _ROUNDS | {Kind.WAIT, Kind.MEMORY}
_ROUND_CAT = {Kind.TEST: 0, Kind.MARK: 3}  # a round: 1 measured, 2 not


def rounds_payload(tl: Timeline, gaps: Gaps | None) -> Payload | None:
    """`lanes.timeline_payload(tl, gaps)` for a timeline of only rounds (see the module), else None."""
    n = len(tl)
    if not 0 < n <= MAX_EVENTS or sys.byteorder != "little" or (gaps is not None and len(gaps.start)):
        return None
    ev = tl.events
    kind: list[int] = ev["kind"].tolist()
    if not _ALLOWED.issuperset(kind) or int(ev["device"].max()) >= 0:
        return None
    name: list[int] = ev["name"].tolist()
    if min(name) < 0 or max(name) >= len(tl.strings):
        return None
    tid: list[int] = ev["tid"].tolist()
    measured = _measured_rounds(ev, kind)
    test_tids = {t for t, k in zip(tid, kind, strict=True) if k in (Kind.TEST, Kind.ROUND)}
    lanes: list[tuple[str, str, list[int], list[int], list[int]]] = []  # kind, label, rows, cat, depth
    for t in sorted(set(tid), key=lambda t: (t not in test_tids, t)):
        who = ("test thread" if t in test_tids else "thread") + (f" {t}" if t >= 0 else " (unknown)")
        rows = [i for i in range(n) if tid[i] == t and kind[i] in _ROUNDS]
        if rows:
            has_test = any(kind[i] == Kind.TEST for i in rows)
            cat = [
                0 if kind[i] == Kind.TEST else 3 if kind[i] == Kind.MARK else 1 if i in measured else 2 for i in rows
            ]
            depth = [int(kind[i] != Kind.TEST and has_test) for i in rows]
            lanes.append(("rounds", f"{who} · {_LABELS['rounds']}", rows, cat, depth))
        rows = [i for i in range(n) if tid[i] == t and kind[i] == Kind.WAIT]
        if rows:
            lanes.append(("runtime", f"{who} · {_LABELS['runtime']}", rows, [2] * len(rows), _overlap(ev, rows)))
    return _encode(tl, name, lanes)


def _measured_rounds(ev: np.ndarray, kind: list[int]) -> set[int]:
    """The rows of the measured rounds (the others are warm-up, profile, trace ... rounds)."""
    rounds = [i for i, k in enumerate(kind) if k == Kind.ROUND]
    if not rounds:
        return set()
    kinds = kinds_of(ev["flags"][rounds]).tolist()
    return {i for i, k in zip(rounds, kinds, strict=True) if k == RoundKind.MEASURED}


def _overlap(ev: np.ndarray, rows: list[int]) -> list[int]:
    """`lanes._overlap_depth`: 1 for an event that starts before the earlier ones of its lane ended."""
    start, end = ev["start"][rows].tolist(), ev["end"][rows].tolist()
    depth, reach = [0], end[0]
    for s, e in zip(start[1:], end[1:], strict=True):
        depth.append(int(s < reach))
        reach = max(reach, e)
    return depth


def _encode(tl: Timeline, name: list[int], lanes: list[tuple[str, str, list[int], list[int], list[int]]]) -> Payload:
    """`lanes.encode` of these lanes."""
    start_all, end_all = tl.events["start"].tolist(), tl.events["end"].tolist()
    used = sorted({name[i] for lane in lanes for i in lane[2]})
    remap = {s: j for j, s in enumerate(used)}
    parts: list[bytes] = []
    size = 0

    def put(code: str, values: list[Any]) -> list[Any]:
        nonlocal size
        data = struct.pack(f"<{len(values)}{code}", *values)
        pad = -len(data) % 8
        parts.append(data + b"\0" * pad)
        where = [_DTYPES[code], size, len(values)]
        size += len(data) + pad
        return where

    out_lanes = []
    t_end = 0
    for lane_kind, label, rows, cat, depth in lanes:
        start = [start_all[i] for i in rows]
        dur = [max(end_all[i] - start_all[i], 0) for i in rows]
        base = start[0]
        deltas = [0] + [b - a for a, b in itertools.pairwise(start)]
        delta = max(deltas) < _U32
        cols = {
            "start": put("I", [d & 0xFFFFFFFF for d in deltas]) if delta else put("d", [float(s) for s in start]),
            "dur": put("I", dur) if max(dur) < _U32 else put("d", [float(d) for d in dur]),
        }
        consts: dict[str, float] = {}
        for key, code, values in (
            ("name", "H", [remap[name[i]] for i in rows]),
            ("cat", "B", cat),
            ("depth", "B", depth),
        ):
            if values.count(values[0]) == len(values):
                consts[key] = float(values[0])
            else:
                cols[key] = put(code, values)
        t_end = max(t_end, max(s + d for s, d in zip(start, dur, strict=True)))
        out_lanes.append({
            "kind": lane_kind, "label": label, "group": "cpu", "device": -1, "n": len(start), "base": base,
            "start_mode": "delta" if delta else "abs", "cols": cols, "consts": consts, "rows": max(depth) + 1,
        })  # fmt: skip
    manifest = {
        "t_end": t_end,
        "strings": [tl.strings[i] for i in used],
        "runtime_lanes": [i for i, lane in enumerate(lanes) if lane[0] == "runtime"],
        "lanes": out_lanes,
        "events": sum(len(lane[2]) for lane in lanes),
    }
    return Payload(manifest, b"".join(parts))


_DTYPES = {"I": "u4", "d": "f8", "H": "u2", "B": "u1"}
