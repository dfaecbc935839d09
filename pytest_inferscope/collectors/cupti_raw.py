"""CUPTI's activity buffers read raw through ctypes, for the cupti-python backend: no Python object per record.

cupti-python 13.0.1's `activity_register_callbacks` makes one Python object per record before its callback sees a
buffer: ~20-35 µs a record on an H200 host, about 25 ms of a lean ViT-B/16 test (docs/performance.md, "Session 31
on the H200 host"). `RawActivity` registers CUPTI's two buffer callbacks with the libcupti cupti-python loaded,
through ctypes, as native/_cupti.c registers its own:

- each buffer is fresh anonymous pages, which read as zero; CUPTI is told so and does not clear them itself;
- each completed buffer is walked with `cuptiActivityGetNextRecord`, and its records go to the sink as
  (kind, address) pairs, which `cupti_columns.convert` copies out a kind at a time through cupti-python's record
  dtypes and converts by columns; then the pages are unmapped;
- flushes go through ctypes too, which lets go of the GIL while CUPTI calls back from its own thread.

Enabling kinds, the API filter and the calls' names still go through cupti-python. `open_raw` says why it cannot
run (another CUPTI major version, a symbol or a dtype missing, INFERSCOPE_CUPTI_OBJECTS=1), and the collector then
reads cupti-python's objects as before.
"""

from __future__ import annotations

import ctypes
import mmap
import os
from collections.abc import Callable
from typing import Any

CUPTI_MAJOR = 13  # the record layouts cupti_records.RAW_DTYPES names are CUDA 13's
ATTR_ZEROED_OUT_ACTIVITY_BUFFER = 5  # CUPTI_ACTIVITY_ATTR_ZEROED_OUT_ACTIVITY_BUFFER
OBJECTS_ENV = "INFERSCOPE_CUPTI_OBJECTS"  # "1": read cupti-python's record objects instead
FUNCTIONS = (
    "cuptiActivityRegisterCallbacks", "cuptiActivityGetNextRecord", "cuptiActivityFlushAll",
    "cuptiActivityGetNumDroppedRecords", "cuptiGetVersion",
)  # fmt: skip

#: One completed buffer's records as (activity kind, address) pairs, and the records CUPTI says it dropped.
Sink = Callable[[list[tuple[int, int]], int], None]

_REQUESTED = ctypes.CFUNCTYPE(
    None, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t), ctypes.POINTER(ctypes.c_size_t)
)
_COMPLETED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)

_libc = ctypes.CDLL(None, use_errno=True)
_mmap = _libc.mmap
_mmap.restype = ctypes.c_void_p
_mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_munmap = _libc.munmap
_munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value
_PROT = mmap.PROT_READ | mmap.PROT_WRITE
_FLAGS = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS


def libcupti_in_process() -> str | None:
    """Path of the libcupti mapped into this process (cupti-python's, or torch's), if any."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            for line in maps:
                path = line.rsplit(None, 1)[-1] if line.count(" ") >= 5 else ""
                if "/libcupti.so" in path:
                    return path
    except OSError:
        return None
    return None


class RawActivity:
    """CUPTI's buffer callbacks, registered through ctypes with one libcupti; records reach `sink` as raw pairs.

    CUPTI's callbacks are process-wide, so one instance is registered at a time (`_current`). `walk` and the
    callbacks are methods a test can call on buffers it built itself.
    """

    _current: RawActivity | None = None

    def __init__(self, lib: Any, buffer_bytes: int) -> None:
        self._lib = lib
        self.buffer_bytes = buffer_bytes
        self._next = lib.cuptiActivityGetNextRecord
        self._next.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)]
        self._dropped = lib.cuptiActivityGetNumDroppedRecords
        self._dropped.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_size_t)]
        self._flush = lib.cuptiActivityFlushAll
        self._flush.argtypes = [ctypes.c_uint32]
        self._set_attribute = getattr(lib, "cuptiActivitySetAttribute", None)
        self._sink: Sink | None = None
        #: Buffers whose sink raised: their records are lost (the sink counts what it could not keep).
        self.failed_buffers = 0

    # -- CUPTI's callbacks (its worker thread, or the thread that flushes) -----------------------------

    def requested(self, buffer: Any, size: Any, max_records: Any) -> None:
        p = _mmap(None, self.buffer_bytes, _PROT, _FLAGS, -1, 0)
        if p is None or p == _MAP_FAILED:  # CUPTI then drops records and counts them
            p = None
        buffer[0] = p
        size[0] = self.buffer_bytes if p else 0
        max_records[0] = 0

    def completed(self, context: int | None, stream: int, buffer: int | None, size: int, valid: int) -> None:
        if not buffer:
            return
        try:
            dropped = ctypes.c_size_t(0)
            if self._dropped(context, stream, ctypes.byref(dropped)) != 0:
                dropped.value = 0
            sink = self._sink
            if sink is not None:
                sink(self.walk(buffer, valid), int(dropped.value))
        except Exception:  # nothing may escape into CUPTI's thread
            self.failed_buffers += 1
        finally:
            _munmap(buffer, size)  # `size`: what `requested` gave CUPTI

    def walk(self, buffer: int, valid: int) -> list[tuple[int, int]]:
        """The records of `valid` bytes at `buffer`, in order, as (kind, address): CUPTI's own walk."""
        record, out = ctypes.c_void_p(), []
        at, next_record, kind_at = ctypes.byref(record), self._next, ctypes.c_uint32.from_address
        while valid and next_record(buffer, valid, at) == 0:
            address = record.value
            if not address:
                break
            out.append((kind_at(address).value, address))
        return out

    # -- the collector's side ---------------------------------------------------------------------------

    def register(self, sink: Sink) -> None:
        """Have CUPTI hand every buffer to `sink` (through this instance) until `unregister`."""
        RawActivity._current = self
        self._sink = sink
        rc = self._lib.cuptiActivityRegisterCallbacks(_ON_REQUESTED, _ON_COMPLETED)
        if rc != 0:
            self._sink = None
            raise RuntimeError(f"cuptiActivityRegisterCallbacks returned {rc}")
        self._zeroed(True)
        self.failed_buffers = 0

    def unregister(self) -> None:
        """After the last flush: buffers no longer taken as zeroed (another client of this libcupti hands it its
        own); one CUPTI still completes is unmapped, its records dropped."""
        self._zeroed(False)
        self._sink = None

    def flush(self, flag: int) -> None:
        rc = self._flush(flag)
        if rc != 0:
            raise RuntimeError(f"cuptiActivityFlushAll({flag}) returned {rc}")

    def _zeroed(self, on: bool) -> None:
        if self._set_attribute is None:
            return
        size, value = ctypes.c_size_t(1), ctypes.c_uint8(int(on))
        self._set_attribute(ATTR_ZEROED_OUT_ACTIVITY_BUFFER, ctypes.byref(size), ctypes.byref(value))


@_REQUESTED
def _ON_REQUESTED(buffer: Any, size: Any, max_records: Any) -> None:
    raw = RawActivity._current
    if raw is None:  # not ours to fill: CUPTI gets no buffer and counts what it drops
        buffer[0], size[0], max_records[0] = None, 0, 0
        return
    raw.requested(buffer, size, max_records)


@_COMPLETED
def _ON_COMPLETED(context: int | None, stream: int, buffer: int | None, size: int, valid: int) -> None:
    raw = RawActivity._current
    if raw is not None:
        raw.completed(context, stream, buffer, size, valid)
    elif buffer:
        _munmap(buffer, size)


def open_raw(missing_dtypes: list[str], buffer_bytes: int, path: str | None = None) -> RawActivity | str:
    """A `RawActivity` over the libcupti in this process, or why the records must be read as cupti-python's objects.

    `missing_dtypes`: the record dtypes cupti-python lacks (RecordViews.raw_missing); `path`: the libcupti, already
    loaded, to use (the first one mapped into the process by default). Calls no CUPTI function that could initialise
    CUPTI or the driver: cuptiGetVersion only reads the library's version.
    """
    if os.environ.get(OBJECTS_ENV) == "1":
        return f"{OBJECTS_ENV}=1"
    if missing_dtypes:
        return "cupti-python lacks the record dtypes " + ", ".join(missing_dtypes)
    path = path or libcupti_in_process()
    if path is None:
        return "no libcupti is loaded in this process"
    try:
        lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
    except OSError as exc:
        return f"{path} cannot be opened through ctypes: {exc}"
    absent = [f for f in FUNCTIONS if not hasattr(lib, f)]
    if absent:
        return f"{path} lacks {', '.join(absent)}"
    version = ctypes.c_uint32(0)
    if lib.cuptiGetVersion(ctypes.byref(version)) != 0:
        return f"cuptiGetVersion failed in {path}"
    major = version.value // 10000 if version.value >= 100000 else 0
    if major != CUPTI_MAJOR:
        return f"{path} is CUPTI API version {version.value}, not CUDA {CUPTI_MAJOR}'s, whose record layouts these are"
    return RawActivity(lib, buffer_bytes)
