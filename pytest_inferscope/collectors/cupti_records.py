"""cupti-python's activity records as EVENT_DTYPE rows, field for field as native/_cupti.c decodes them.

The records come raw, as (kind, address) pairs of a buffer walked through ctypes (cupti_raw.py), or
as the object cupti-python makes of each; `RecordViews` copies either out of the buffer in bulk
through cupti-python's record dtypes, and `RecordConverter` turns each record into a plain tuple
inside CUPTI's buffer callback (so no CUPTI buffer outlives its callback) and builds the EVENT_DTYPE
array in one go at drain time. No cupti import is needed here: the enum values CUPTI's headers
define are repeated below, so the conversion is unit-tested anywhere.
"""

from __future__ import annotations

import ctypes
from collections import namedtuple
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from ..events import EVENT_DTYPE, Domain, Kind, copy_flags

# CUpti_ActivityKind and related enum values (cupti_activity.h, CUDA 13.0); the same values
# native/_cupti.c compiles against. Kept here so the converter needs no cupti import.
A_MEMCPY, A_MEMSET, A_KERNEL, A_DRIVER, A_RUNTIME, A_MEMCPY2 = 1, 2, 3, 4, 5, 22
A_CONCURRENT_KERNEL, A_OVERHEAD, A_SYNCHRONIZATION, A_MEMORY2 = 10, 17, 38, 49
DOMAIN_DRIVER_API, DOMAIN_RUNTIME_API = 1, 2  # CUpti_CallbackDomain
OBJECT_THREAD, OBJECT_DEVICE = 2, 3  # CUpti_ActivityObjectKind
MEMORY_OPERATION_RELEASE = 2  # CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
OVERHEAD_DRIVER_COMPILER = 1
COPY_NAMES = (
    "Memcpy", "Memcpy HtoD", "Memcpy DtoH", "Memcpy HtoA", "Memcpy AtoH", "Memcpy AtoA", "Memcpy AtoD",
    "Memcpy DtoA", "Memcpy DtoD", "Memcpy HtoH", "Memcpy PtoP",
)  # fmt: skip
OVERHEAD_NAMES = (
    "CUPTI overhead", "CUPTI buffer flush", "CUPTI instrumentation", "CUPTI resource", "Runtime module loading",
    "Lazy function loading", "Command buffer full", "Activity buffer request", "UVM activity init",
)  # fmt: skip

Row = tuple[int, int, int, int, int, int, int, int, int, int, int]  # EVENT_DTYPE's fields, in order
DEV = int(Domain.DEVICE)  # every row's clock domain
K_KERNEL, K_MEMCPY, K_MEMSET, K_RUNTIME = int(Kind.KERNEL), int(Kind.MEMCPY), int(Kind.MEMSET), int(Kind.RUNTIME)
K_SYNC, K_GPU_MEMORY, K_OVERHEAD = int(Kind.SYNC), int(Kind.GPU_MEMORY), int(Kind.OVERHEAD)


def strip_version(raw: str) -> str | None:
    """'cudaLaunchKernel_v7000' -> 'cudaLaunchKernel' (None when there is no _vNNNN suffix), as native does."""
    i = raw.rfind("_")
    tail = raw[i + 2 :]
    if i <= 0 or raw[i + 1 : i + 2] != "v" or not tail or not (tail.isascii() and tail.isdigit()):
        return None
    return raw[:i]


def overhead_name(kind: int) -> str:
    """The display name of a CUpti_ActivityOverheadKind."""
    if kind == OVERHEAD_DRIVER_COMPILER:
        return "Driver compiler"
    if kind & 0xFFFF == 0 and kind >> 16 < len(OVERHEAD_NAMES):
        return OVERHEAD_NAMES[kind >> 16]
    return OVERHEAD_NAMES[0]


def _i32(v: int) -> int:
    """A uint32 CUPTI id as the C side's int32 cast sees it (0xFFFFFFFF, CUPTI's 'none', becomes -1)."""
    return v - 0x100000000 if v & 0x80000000 else v


def _i16(v: int) -> int:
    """A uint32 device id as the C side's int16 cast sees it."""
    v &= 0xFFFF
    return v - 0x10000 if v & 0x8000 else v


class Demangler:
    """Itanium C++ demangling through libstdc++'s `__cxa_demangle`, as native/_cupti.c does; None when not mangled."""

    def __init__(self) -> None:
        self._fn: Any = None
        self._free: Any = None
        for lib in (None, "libstdc++.so.6"):
            try:
                fn = ctypes.CDLL(lib)["__cxa_demangle"]  # by item: inside a class, .__name would be mangled
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_void_p
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            free = ctypes.CDLL(None).free
            free.argtypes, free.restype = [ctypes.c_void_p], None
            self._fn, self._free = fn, free
            break

    def __call__(self, raw: str) -> str | None:
        if self._fn is None or not raw.startswith("_Z"):
            return None
        status = ctypes.c_int(-1)
        out = self._fn(raw.encode("utf-8", "surrogateescape"), None, None, ctypes.byref(status))
        try:
            if status.value != 0 or not out:
                return None
            return ctypes.string_at(out).decode("utf-8", "replace")
        finally:
            if out:
                self._free(out)


class RecordConverter:
    """Turns cupti-python activity objects into EVENT_DTYPE rows, field for field as native/_cupti.c decodes them.

    `add` keeps one tuple per record; `take` builds the array from them in one call. Names are
    interned by the string CUPTI gives (kernel names shown demangled, API names without their
    `_vNNNN` suffix), so the names list only grows and indices never move. `callback_name`
    maps (callback domain, cbid) to CUPTI's API name; `max_records` (0: none) caps the rows kept
    between takes, beyond which records count in `dropped`.
    """

    def __init__(
        self,
        callback_name: Callable[[int, int], str],
        demangle: Callable[[str], str | None],
        max_records: int = 0,
        views: RecordViews | None = None,
    ) -> None:
        self.names: list[str] = []
        self.rows: list[Row] = []  # records converted one by one (objects)
        self.chunks: list[np.ndarray] = []  # raw buffers converted by columns (cupti_columns.add_raw)
        self.count = 0  # rows kept since the last take, both ways
        self.max_records = max_records
        self.dropped = 0
        self.incomplete = 0
        self._index: dict[str, int] = {}
        self._api: dict[tuple[int, int], int] = {}
        self._callback_name = callback_name
        self.demangle = demangle
        self.views = views  # reads a buffer's records in bulk where it can (RecordViews)
        self._convert: dict[int, Callable[[Any], Row]] = {
            A_KERNEL: self._kernel,
            A_CONCURRENT_KERNEL: self._kernel,
            A_MEMCPY: self._memcpy,
            A_MEMCPY2: self._peer_copy,
            A_MEMSET: self._memset,
            A_RUNTIME: self._runtime,
            A_DRIVER: self._driver,
            A_SYNCHRONIZATION: self._sync,
            A_MEMORY2: self._memory,
            A_OVERHEAD: self._overhead,
        }

    def add(self, activities: Iterable[Any]) -> int:
        """Convert one buffer's records; kinds we did not enable (another client's) are skipped. Returns rows added."""
        if not isinstance(activities, Sequence):
            activities = list(activities)
        records = self.views.read(activities) if self.views is not None else None
        return self._add(activities if records is None else records)

    def _add(self, records: Iterable[Any]) -> int:
        rows, convert, cap = self.rows, self._convert, self.max_records
        before = len(rows)
        for a in records:
            fn = convert.get(a.kind)
            if fn is None:
                continue
            if cap and self.count >= cap:
                self.dropped += 1
                continue
            try:
                rows.append(fn(a))
                self.count += 1
            except Exception:  # a record cupti-python cannot read (e.g. an undecodable name): lost, and counted
                self.dropped += 1
        return len(rows) - before

    def take(self) -> tuple[np.ndarray, list[str]]:
        """The rows since the last take as an EVENT_DTYPE array, and the whole names list."""
        rows, chunks, self.rows, self.chunks, self.count = self.rows, self.chunks, [], [], 0
        if rows:
            chunks.append(np.array(rows, dtype=EVENT_DTYPE))
        events = np.concatenate(chunks) if chunks else np.zeros(0, dtype=EVENT_DTYPE)
        return events, list(self.names)

    def intern(self, raw: str, display: Callable[[str], str | None] | None = None) -> int:
        i = self._index.get(raw)
        if i is None:
            shown = display(raw) if display is not None else None
            i = self._index[raw] = len(self.names)
            self.names.append(shown if shown is not None else raw)
        return i

    def _span(self, start: int, end: int) -> None:
        if end == 0 or end < start:  # still running at a forced flush: kept, and counted
            self.incomplete += 1

    def api_name(self, domain: int, cbid: int) -> int:
        """The name index of the API call `cbid` of `domain`, without its `_vNNNN` suffix."""
        key = (domain, cbid)
        i = self._api.get(key)
        if i is None:
            try:
                raw = self._callback_name(domain, cbid)
            except Exception:
                raw = ""
            if not raw:
                raw = f"{'driver' if domain == DOMAIN_DRIVER_API else 'runtime'} API cbid {cbid}"
            i = self._api[key] = self.intern(raw, strip_version)
        return i

    # One function per record kind, each returning EVENT_DTYPE's fields in order:
    # (start, end, value, corr, name, tid, stream, device, kind, domain, flags).

    def _kernel(self, a: Any) -> Row:
        start, end = a.start, a.end
        self._span(start, end)
        name = self.intern(a.name or "<unnamed kernel>", self.demangle)
        return (start, end, 0, a.correlation_id, name, -1, _i32(a.stream_id), _i16(a.device_id), K_KERNEL, DEV, 0)

    def _memcpy(self, a: Any) -> Row:
        start, end, copy = a.start, a.end, a.copy_kind
        self._span(start, end)
        name = self.intern(COPY_NAMES[copy if copy < len(COPY_NAMES) else 0])
        flags = copy & 0xFF | (a.src_kind & 0xFF) << 8 | (a.dst_kind & 0xFF) << 16
        corr = a.correlation_id or a.runtime_correlation_id
        return (start, end, a.bytes, corr, name, -1, _i32(a.stream_id), _i16(a.device_id), K_MEMCPY, DEV, flags)

    def _peer_copy(self, a: Any) -> Row:
        """A copy between two devices (CUpti_ActivityMemcpyPtoP4): a MEMCPY row whose flags also say the devices."""
        start, end, copy = a.start, a.end, a.copy_kind
        self._span(start, end)
        name = self.intern(COPY_NAMES[copy if copy < len(COPY_NAMES) else 0])
        flags = copy_flags(copy, a.src_kind, a.dst_kind, a.src_device_id, a.dst_device_id)
        stream, device = _i32(a.stream_id), _i16(a.device_id)
        return (start, end, a.bytes, a.correlation_id, name, -1, stream, device, K_MEMCPY, DEV, flags)

    def _memset(self, a: Any) -> Row:
        start, end = a.start, a.end
        self._span(start, end)
        name = self.intern("Memset")
        stream, device = _i32(a.stream_id), _i16(a.device_id)
        return (start, end, a.bytes, a.correlation_id, name, -1, stream, device, K_MEMSET, DEV, a.memory_kind)

    def _runtime(self, a: Any) -> Row:
        return self._call(a, DOMAIN_RUNTIME_API)

    def _driver(self, a: Any) -> Row:
        return self._call(a, DOMAIN_DRIVER_API)

    def _call(self, a: Any, domain: int) -> Row:
        start, end = a.start, a.end
        self._span(start, end)
        name = self.api_name(domain, a.cbid)
        corr, tid = a.correlation_id, _i32(a.thread_id)
        return (start, end, a.return_value, corr, name, tid, -1, -1, K_RUNTIME, DEV, domain)

    def _sync(self, a: Any) -> Row:
        start, end = a.start, a.end
        self._span(start, end)
        name = self.intern("Synchronization")
        event, stream = _i32(a.cuda_event_id), _i32(a.stream_id)
        return (start, end, event, a.correlation_id, name, -1, stream, -1, K_SYNC, DEV, a.type)

    def _memory(self, a: Any) -> Row:
        t = a.timestamp
        release = a.memory_operation_type == MEMORY_OPERATION_RELEASE
        name = self.intern("Memory free" if release else "Memory alloc")
        value = -a.bytes if release else a.bytes
        stream, device = _i32(a.stream_id), _i16(a.device_id)
        return (t, t, value, a.correlation_id, name, -1, stream, device, K_GPU_MEMORY, DEV, a.memory_kind)

    def _overhead(self, a: Any) -> Row:
        start, end, kind, obj = a.start, a.end, a.overhead_kind, a.object_kind
        self._span(start, end)
        tid = device = -1
        if obj == OBJECT_THREAD:
            tid = _i32(a.object_id.pt.thread_id)
        elif obj >= OBJECT_DEVICE:
            device = _i16(a.object_id.dcs.device_id)
        name = self.intern(overhead_name(kind))
        return (start, end, 0, a.correlation_id, name, tid, -1, device, K_OVERHEAD, DEV, kind)


#: The record each activity kind the converters read comes as from CUPTI 13 (the structs native/_cupti.c decodes),
#: by the name of cupti-python's dtype for it, and that struct's size in cupti_activity.h (CUDA 13.0).
RAW_DTYPES = {
    A_KERNEL: ("activity_kernel10_dtype", 216),
    A_CONCURRENT_KERNEL: ("activity_kernel10_dtype", 216),
    A_MEMCPY: ("activity_memcpy6_dtype", 96),
    A_MEMCPY2: ("activity_memcpy_pto_p4_dtype", 96),
    A_MEMSET: ("activity_memset4_dtype", 88),
    A_RUNTIME: ("activity_api_dtype", 40),
    A_DRIVER: ("activity_api_dtype", 40),
    A_SYNCHRONIZATION: ("activity_synchronization2_dtype", 56),
    A_MEMORY2: ("activity_memory4_dtype", 128),
    A_OVERHEAD: ("activity_overhead3_dtype", 56),
}


class RecordViews:
    """cupti-python's activity objects read in bulk, through their `ptr` and cupti-python's record dtypes.

    Each field read through a cupti-python object goes through `numpy.record.__getattribute__`. Here the records of
    one class in a buffer are copied out at their addresses with one numpy gather, and each becomes a named tuple of
    the fields the converters read (READ; nested structs and unions as nested ones, a `name` pointer as its string),
    which they read as they read the objects. 600 records (API and kernel, cupti-python 13.0.1's classes over memory,
    the 2-core VM) converted in 13.5-13.8 ms one by one against 2.8-4.5 ms in bulk; on an H200 a lean ViT-B/16 test
    spent 33.1 against 50.9 ms outside its rounds (2026-11-29). `read` gives None (the objects are read as before)
    when a class has no dtype of that name in the module, or anything else is unexpected.
    """

    def __init__(self, module: Any) -> None:
        # ActivityKernel10 -> activity_kernel10_dtype, ActivityMemcpyPtoP4 -> activity_memcpy_pto_p4_dtype
        self._dtypes = {
            name[: -len("_dtype")].replace("_", "").lower(): getattr(module, name)
            for name in dir(module)
            if name.startswith("activity_") and name.endswith("_dtype")
        }
        self._layouts: dict[type, _Layout | None] = {}
        self._raw: dict[int, _Layout] = {}  # activity kind -> its layout, for raw buffers (RAW_DTYPES)
        self.raw_missing: list[str] = []  # why raw buffers cannot be read with these dtypes
        shared: dict[str, _Layout] = {}
        for kind, (name, size) in RAW_DTYPES.items():
            dtype = getattr(module, name, None)
            if dtype is None or getattr(dtype, "itemsize", None) != size:
                got = "none" if dtype is None else f"{getattr(dtype, 'itemsize', '?')} bytes"
                self.raw_missing.append(f"{name} ({got}, CUDA 13.0's record is {size})")
            elif name not in shared:
                shared[name] = _Layout(np.dtype(dtype))
            if name in shared:
                self._raw[kind] = shared[name]
        self.raw_missing = sorted(set(self.raw_missing))

    def raw_layout(self, kind: int) -> _Layout | None:
        """How the records of activity kind `kind` are read from a raw buffer (RAW_DTYPES), or None."""
        return self._raw.get(kind)

    def read(self, activities: Sequence[Any]) -> list[Any] | None:
        try:
            return self._read(activities)
        except Exception:  # the objects are read one by one instead
            return None

    def _read(self, activities: Sequence[Any]) -> list[Any] | None:
        by_class: dict[type, list[int]] = {}  # each class's records, by their place in the buffer
        for i, a in enumerate(activities):
            by_class.setdefault(type(a), []).append(i)
        out: list[Any] = [None] * len(activities)
        for cls, where in by_class.items():
            layout = self._layouts.get(cls, ...)
            if layout is ...:
                dtype = self._dtypes.get(cls.__name__.lower())
                layout = self._layouts[cls] = _Layout(dtype) if dtype is not None else None
            if layout is None:
                return None
            for i, record in zip(where, layout.records([activities[i].ptr for i in where]), strict=True):
                out[i] = record
        return out


#: The fields the converters read (RecordConverter's `_kernel` ... `_overhead`): a record's other fields (a kernel
#: record has 50, padding arrays among them) are left out of its named tuple.
READ = frozenset(
    ("kind", "start", "end", "correlation_id", "runtime_correlation_id", "name", "stream_id", "device_id", "copy_kind",
     "src_kind", "dst_kind", "bytes", "src_device_id", "dst_device_id", "memory_kind", "cbid", "thread_id",
     "return_value", "type", "cuda_event_id", "timestamp", "memory_operation_type", "overhead_kind", "object_kind",
     "object_id")
)  # fmt: skip


class _Layout:
    """One record dtype: how its records are copied out of a buffer and made into named tuples of the fields read."""

    def __init__(self, dtype: np.dtype) -> None:
        self.dtype = dtype
        self._fields = [n for n in dtype.names or () if n in READ]
        self._offsets = np.arange(dtype.itemsize, dtype=np.int64)
        self._strings: dict[int, str] = {}  # one buffer's `name` pointers, read once each
        self._make = _maker(dtype, self._fields, self._strings)

    def gather(self, ptrs: Sequence[int] | np.ndarray) -> np.ndarray:
        """The records at `ptrs`, copied out in one gather as an array of the dtype (the buffer goes back to CUPTI
        after its callback)."""
        at = np.asarray(ptrs, dtype=np.int64)
        lo = int(at.min())
        span = int(at.max()) - lo + self.dtype.itemsize
        memory = np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(lo))
        return memory[(at - lo)[:, None] + self._offsets].view(self.dtype).ravel()

    def records(self, ptrs: list[int]) -> list[Any]:
        self._strings.clear()  # (not kept across buffers: an address may later hold another name)
        return [self._make(t) for t in self.gather(ptrs)[self._fields].tolist()]


def _maker(
    dtype: np.dtype, fields: list[str] | None = None, strings: dict[int, str] | None = None
) -> Callable[[tuple[Any, ...]], Any]:
    """tuple (a record's `tolist()` of `fields`, all of them unless given) -> named tuple of those fields; nested
    structs made the same way, and an integer field `name` (a `const char *`) read as its string ('' for NULL), as
    cupti-python's objects give them (`strings`: those read so far, by address)."""
    names = tuple(fields) if fields is not None else dtype.names or ()
    record = namedtuple("Record", names, rename=True)  # type: ignore[misc]  # fields known only at run time
    nested = {i: _maker(dtype[n]) for i, n in enumerate(names) if dtype[n].names}
    read = {} if strings is None else strings
    pointer = names.index("name") if "name" in names and dtype["name"].kind in "iu" else -1
    if not nested and pointer < 0:
        return record._make

    def make(t: tuple[Any, ...]) -> Any:
        values = list(t)
        for i, sub in nested.items():
            values[i] = sub(values[i])
        if pointer >= 0:
            address = values[pointer]
            text = read.get(address)
            if text is None:
                text = read[address] = ctypes.string_at(address).decode("utf-8", "replace") if address else ""
            values[pointer] = text
        return record._make(values)

    return make
