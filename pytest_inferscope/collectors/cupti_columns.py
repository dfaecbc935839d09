"""A raw CUPTI buffer's records as EVENT_DTYPE rows, a record kind at a time, in numpy columns.

The raw buffers of the cupti-python backend (cupti_raw.py) come as (kind, address) pairs; the records of each kind
are copied out in one gather through cupti-python's record dtype (`RecordViews.raw_layout`) and converted here by
columns, field for field as `RecordConverter`'s per-record functions (and native/_cupti.c) convert them: the same
rows, names included, which tests/unit/test_cupti_raw.py holds against the native decoder and against cupti-python's
own record objects. Names are interned once per distinct value (a kernel's name pointer, an API call's id).
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from ..events import EVENT_DTYPE, MAX_PEER_DEVICE
from .cupti_records import (
    A_CONCURRENT_KERNEL,
    A_DRIVER,
    A_KERNEL,
    A_MEMCPY,
    A_MEMCPY2,
    A_MEMORY2,
    A_MEMSET,
    A_OVERHEAD,
    A_RUNTIME,
    A_SYNCHRONIZATION,
    COPY_NAMES,
    DEV,
    DOMAIN_DRIVER_API,
    DOMAIN_RUNTIME_API,
    K_GPU_MEMORY,
    K_KERNEL,
    K_MEMCPY,
    K_MEMSET,
    K_OVERHEAD,
    K_RUNTIME,
    K_SYNC,
    MEMORY_OPERATION_RELEASE,
    OBJECT_DEVICE,
    OBJECT_THREAD,
    overhead_name,
)

if TYPE_CHECKING:
    from .cupti_records import RecordConverter

Columns = dict[str, Any]  # EVENT_DTYPE field -> a column, or one value for every row


def add_raw(conv: RecordConverter, pairs: list[tuple[int, int]]) -> int:
    """Convert one raw buffer's records, given as (kind, address) pairs (cupti_raw.py), into `conv`'s rows (its
    `chunks`, in the buffer's order). Returns the rows added. A record whose kind is converted but no dtype reads is
    lost and counted."""
    if conv.views is None:
        raise RuntimeError("reading raw records needs cupti-python's record dtypes (RecordViews)")
    rows = convert(conv, pairs)
    conv.chunks.append(rows)
    return len(rows)


def convert(conv: RecordConverter, pairs: list[tuple[int, int]]) -> np.ndarray:
    """One raw buffer's records as EVENT_DTYPE rows in the buffer's order. Kinds not converted are left out; records
    over the converter's cap, or of a kind with no dtype to read it, are counted in its `dropped`."""
    views = conv.views
    assert views is not None
    kinds = np.fromiter((k for k, _ in pairs), dtype=np.int64, count=len(pairs))
    ours = np.flatnonzero(np.isin(kinds, _KINDS))
    if conv.max_records:
        room = max(0, conv.max_records - conv.count)
        conv.dropped += max(0, len(ours) - room)
        ours = ours[:room]
    out = np.zeros(len(ours), dtype=EVENT_DTYPE)
    out["domain"] = DEV
    kept = np.ones(len(ours), dtype=bool)
    addresses = np.fromiter((a for _, a in pairs), dtype=np.int64, count=len(pairs))[ours]
    ours_kinds = kinds[ours]
    _, first = np.unique(ours_kinds, return_index=True)
    for kind in ours_kinds[np.sort(first)].tolist():  # (in the order the kinds first come: their names interned so)
        where = np.flatnonzero(ours_kinds == kind)
        layout = views.raw_layout(kind)
        if layout is None:  # cupti-python has no dtype for it (the collector reads objects then: RecordViews)
            conv.dropped += len(where)
            kept[where] = False
            continue
        for field, column in _CONVERT[kind](conv, layout.gather(addresses[where])).items():
            out[field][where] = column
    rows = out[kept]
    conv.count += len(rows)
    return rows


def _i32(v: np.ndarray) -> np.ndarray:
    """uint32 ids as the C side's int32 cast sees them (0xFFFFFFFF, CUPTI's 'none', becomes -1)."""
    return v.astype(np.uint32).view(np.int32)


def _i16(v: np.ndarray) -> np.ndarray:
    """uint32 device ids as the C side's int16 cast sees them."""
    return (v.astype(np.uint32) & 0xFFFF).astype(np.uint16).view(np.int16)


def _span(conv: RecordConverter, start: np.ndarray, end: np.ndarray) -> None:
    conv.incomplete += int(np.count_nonzero((end == 0) | (end < start)))  # still running at a forced flush


def _interned(values: np.ndarray, name_of: Callable[[int], int]) -> np.ndarray:
    """Each value's name index, `name_of` asked once per distinct value."""
    distinct, index = np.unique(values, return_inverse=True)
    return np.array([name_of(int(v)) for v in distinct.tolist()], dtype=np.int32)[index]


def _kernel(conv: RecordConverter, a: np.ndarray) -> Columns:
    start, end = a["start"], a["end"]
    _span(conv, start, end)

    def name(address: int) -> int:
        text = ctypes.string_at(address).decode("utf-8", "replace") if address else ""
        return conv.intern(text or "<unnamed kernel>", conv.demangle)

    return {"start": start, "end": end, "corr": a["correlation_id"], "name": _interned(a["name"], name), "tid": -1,
            "stream": _i32(a["stream_id"]), "device": _i16(a["device_id"]), "kind": K_KERNEL}  # fmt: skip


def _copy_name(conv: RecordConverter, copy: int) -> int:
    return conv.intern(COPY_NAMES[copy if copy < len(COPY_NAMES) else 0])


def _memcpy(conv: RecordConverter, a: np.ndarray) -> Columns:
    start, end, copy = a["start"], a["end"], a["copy_kind"].astype(np.int64)
    _span(conv, start, end)
    flags = copy & 0xFF | (a["src_kind"].astype(np.int64) & 0xFF) << 8 | (a["dst_kind"].astype(np.int64) & 0xFF) << 16
    corr = np.where(a["correlation_id"] != 0, a["correlation_id"], a["runtime_correlation_id"])
    return {"start": start, "end": end, "value": a["bytes"], "corr": corr,
            "name": _interned(copy, lambda c: _copy_name(conv, c)), "tid": -1, "stream": _i32(a["stream_id"]),
            "device": _i16(a["device_id"]), "kind": K_MEMCPY, "flags": flags}  # fmt: skip


def _peer_copy(conv: RecordConverter, a: np.ndarray) -> Columns:
    """A copy between two devices: a MEMCPY row whose flags also say the devices (events.copy_flags, by columns)."""
    start, end, copy = a["start"], a["end"], a["copy_kind"].astype(np.int64)
    _span(conv, start, end)

    def nibble(device: np.ndarray) -> np.ndarray:
        d = device.astype(np.int64)
        return np.where((d >= 0) & (d <= MAX_PEER_DEVICE), d + 1, 0)

    flags = (copy & 0xFF | (a["src_kind"].astype(np.int64) & 0xFF) << 8 | (a["dst_kind"].astype(np.int64) & 0xFF) << 16
             | nibble(a["src_device_id"]) << 24 | nibble(a["dst_device_id"]) << 28)  # fmt: skip
    return {"start": start, "end": end, "value": a["bytes"], "corr": a["correlation_id"],
            "name": _interned(copy, lambda c: _copy_name(conv, c)), "tid": -1, "stream": _i32(a["stream_id"]),
            "device": _i16(a["device_id"]), "kind": K_MEMCPY, "flags": flags}  # fmt: skip


def _memset(conv: RecordConverter, a: np.ndarray) -> Columns:
    start, end = a["start"], a["end"]
    _span(conv, start, end)
    return {"start": start, "end": end, "value": a["bytes"], "corr": a["correlation_id"],
            "name": conv.intern("Memset"), "tid": -1, "stream": _i32(a["stream_id"]), "device": _i16(a["device_id"]),
            "kind": K_MEMSET, "flags": a["memory_kind"]}  # fmt: skip


def _calls(domain: int) -> Callable[[RecordConverter, np.ndarray], Columns]:
    def calls(conv: RecordConverter, a: np.ndarray) -> Columns:
        start, end = a["start"], a["end"]
        _span(conv, start, end)
        return {"start": start, "end": end, "value": a["return_value"], "corr": a["correlation_id"],
                "name": _interned(a["cbid"], lambda cbid: conv.api_name(domain, cbid)), "tid": _i32(a["thread_id"]),
                "stream": -1, "device": -1, "kind": K_RUNTIME, "flags": domain}  # fmt: skip

    return calls


def _sync(conv: RecordConverter, a: np.ndarray) -> Columns:
    start, end = a["start"], a["end"]
    _span(conv, start, end)
    return {"start": start, "end": end, "value": _i32(a["cuda_event_id"]), "corr": a["correlation_id"],
            "name": conv.intern("Synchronization"), "tid": -1, "stream": _i32(a["stream_id"]), "device": -1,
            "kind": K_SYNC, "flags": a["type"]}  # fmt: skip


def _memory(conv: RecordConverter, a: np.ndarray) -> Columns:
    t = a["timestamp"]
    release = a["memory_operation_type"] == MEMORY_OPERATION_RELEASE
    alloc, free = conv.intern("Memory alloc"), conv.intern("Memory free")
    size = a["bytes"].astype(np.int64)
    return {"start": t, "end": t, "value": np.where(release, -size, size), "corr": a["correlation_id"],
            "name": np.where(release, free, alloc), "tid": -1, "stream": _i32(a["stream_id"]),
            "device": _i16(a["device_id"]), "kind": K_GPU_MEMORY, "flags": a["memory_kind"]}  # fmt: skip


def _overhead(conv: RecordConverter, a: np.ndarray) -> Columns:
    start, end, obj = a["start"], a["end"], a["object_kind"]
    _span(conv, start, end)
    ids = a["object_id"]
    tid = np.where(obj == OBJECT_THREAD, _i32(ids["pt"]["thread_id"]), -1)
    device = np.where((obj != OBJECT_THREAD) & (obj >= OBJECT_DEVICE), _i16(ids["dcs"]["device_id"]), -1)
    kind = a["overhead_kind"]
    return {"start": start, "end": end, "corr": a["correlation_id"],
            "name": _interned(kind, lambda k: conv.intern(overhead_name(k))), "tid": tid, "device": device,
            "stream": -1, "kind": K_OVERHEAD, "flags": kind}  # fmt: skip


_CONVERT: dict[int, Callable[[RecordConverter, np.ndarray], Columns]] = {
    A_KERNEL: _kernel,
    A_CONCURRENT_KERNEL: _kernel,
    A_MEMCPY: _memcpy,
    A_MEMCPY2: _peer_copy,
    A_MEMSET: _memset,
    A_RUNTIME: _calls(DOMAIN_RUNTIME_API),
    A_DRIVER: _calls(DOMAIN_DRIVER_API),
    A_SYNCHRONIZATION: _sync,
    A_MEMORY2: _memory,
    A_OVERHEAD: _overhead,
}
_KINDS = np.array(sorted(_CONVERT), dtype=np.int64)
