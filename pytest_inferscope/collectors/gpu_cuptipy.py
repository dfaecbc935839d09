"""The cupti-python GPU backend: NVIDIA's `cupti` package behind the `GpuCollector` protocol.

The portable fallback for machines where the native extension did not build, and the
cross-check of it in tests. It produces the very records `native/_cupti.c` produces (same
kinds, names, flags and sentinel values, device clock domain), so everything after the
collector cannot tell the two apart. cupti-python hands every activity record to Python as an
object; `RecordConverter` turns each into a plain tuple inside CUPTI's buffer callback (so no
CUPTI buffer outlives its callback) and builds the EVENT_DTYPE array in one go at drain time.
That per-record Python work is why this backend costs more than the native one.

cupti-python is never required: `create()` raises RuntimeError with the reason when it is
missing or cannot load CUPTI, and `collectors.gpu.select_backend` records that reason.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import numpy as np

from ..events import EVENT_DTYPE, Domain, Kind
from .devsync import DeviceSync
from .gpu import require_driver
from .gpu_native import DEFAULT_BUFFER_MB, _foreign_profiler, _trace_size_mb, every_api_call, traced_api

# CUpti_ActivityKind and related enum values (cupti_activity.h, CUDA 13.0); the same values
# native/_cupti.c compiles against. Kept here so the converter needs no cupti import.
A_MEMCPY, A_MEMSET, A_KERNEL, A_DRIVER, A_RUNTIME = 1, 2, 3, 4, 5
A_CONCURRENT_KERNEL, A_OVERHEAD, A_SYNCHRONIZATION, A_MEMORY2 = 10, 17, 38, 49
DOMAIN_DRIVER_API, DOMAIN_RUNTIME_API = 1, 2  # CUpti_CallbackDomain
OBJECT_THREAD, OBJECT_DEVICE = 2, 3  # CUpti_ActivityObjectKind
MEMORY_OPERATION_RELEASE = 2  # CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_RELEASE
OVERHEAD_DRIVER_COMPILER = 1
THREAD_ID_TYPE_SYSTEM = 1  # CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM: gettid(), as threading.get_native_id()
FLUSH_FORCED = 1  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
BUSY_RESULTS = {26: "CUPTI_ERROR_HARDWARE_BUSY", 39: "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"}

#: (kind, label, required): what start() enables, in native/_cupti.c's order.
KINDS = (
    (A_CONCURRENT_KERNEL, "CONCURRENT_KERNEL", True),
    (A_MEMCPY, "MEMCPY", True),
    (A_MEMSET, "MEMSET", True),
    (A_RUNTIME, "RUNTIME", True),
    (A_DRIVER, "DRIVER", False),
    (A_SYNCHRONIZATION, "SYNCHRONIZATION", False),
    (A_MEMORY2, "MEMORY2", False),
    (A_OVERHEAD, "OVERHEAD", False),
)

#: activity kind -> (callback domain, label, cupti-python's per-API switch, its callback-id enum): after enabling
#: the kind, every call but the traced ones (gpu_native.TRACED_API, by CUPTI's own names) is switched off again.
API_KINDS = {
    A_RUNTIME: (DOMAIN_RUNTIME_API, "runtime", "activity_enable_runtime_api", "runtime_api_trace_cbid"),
    A_DRIVER: (DOMAIN_DRIVER_API, "driver", "activity_enable_driver_api", "driver_api_trace_cbid"),
}
CBID_SIZE_FALLBACK = 1024  # callback ids tried when cupti-python has no enum to give the size

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


class CuptiError(RuntimeError):
    """A CUPTI call made through cupti-python failed."""


class CuptiBusyError(CuptiError):
    """CUPTI is held by another profiler in this process (torch.profiler/Kineto, Nsight, ...)."""


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
    ) -> None:
        self.names: list[str] = []
        self.rows: list[Row] = []
        self.max_records = max_records
        self.dropped = 0
        self.incomplete = 0
        self._index: dict[str, int] = {}
        self._api: dict[tuple[int, int], int] = {}
        self._callback_name = callback_name
        self._demangle = demangle
        self._convert: dict[int, Callable[[Any], Row]] = {
            A_KERNEL: self._kernel,
            A_CONCURRENT_KERNEL: self._kernel,
            A_MEMCPY: self._memcpy,
            A_MEMSET: self._memset,
            A_RUNTIME: self._runtime,
            A_DRIVER: self._driver,
            A_SYNCHRONIZATION: self._sync,
            A_MEMORY2: self._memory,
            A_OVERHEAD: self._overhead,
        }

    def add(self, activities: Iterable[Any]) -> int:
        """Convert one buffer's records; kinds we did not enable (another client's) are skipped. Returns rows added."""
        rows, convert, cap = self.rows, self._convert, self.max_records
        before = len(rows)
        for a in activities:
            fn = convert.get(a.kind)
            if fn is None:
                continue
            if cap and len(rows) >= cap:
                self.dropped += 1
                continue
            try:
                rows.append(fn(a))
            except Exception:  # a record cupti-python cannot read (e.g. an undecodable name): lost, and counted
                self.dropped += 1
        return len(rows) - before

    def take(self) -> tuple[np.ndarray, list[str]]:
        """The rows since the last take as an EVENT_DTYPE array, and the whole names list."""
        rows, self.rows = self.rows, []
        events = np.array(rows, dtype=EVENT_DTYPE) if rows else np.zeros(0, dtype=EVENT_DTYPE)
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

    def _api_name(self, domain: int, cbid: int) -> int:
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
        name = self.intern(a.name or "<unnamed kernel>", self._demangle)
        return (start, end, 0, a.correlation_id, name, -1, _i32(a.stream_id), _i16(a.device_id), K_KERNEL, DEV, 0)

    def _memcpy(self, a: Any) -> Row:
        start, end, copy = a.start, a.end, a.copy_kind
        self._span(start, end)
        name = self.intern(COPY_NAMES[copy if copy < len(COPY_NAMES) else 0])
        flags = copy & 0xFF | (a.src_kind & 0xFF) << 8 | (a.dst_kind & 0xFF) << 16
        corr = a.correlation_id or a.runtime_correlation_id
        return (start, end, a.bytes, corr, name, -1, _i32(a.stream_id), _i16(a.device_id), K_MEMCPY, DEV, flags)

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
        name = self._api_name(domain, a.cbid)
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


def _status(exc: BaseException) -> int:
    status = getattr(exc, "status", None)
    return int(status) if isinstance(status, int) else -1


def _libcupti_in_process() -> str | None:
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


class CuptiPythonCollector:
    """`GpuCollector` over cupti-python: records come back as EVENT_DTYPE arrays, device clock domain."""

    name = "cupti-python"
    #: CUPTI's buffer callbacks are process-wide: one collector of this kind may collect at a time.
    _collecting: ClassVar[CuptiPythonCollector | None] = None

    def __init__(
        self, cupti: Any, buffer_mb: int = DEFAULT_BUFFER_MB, max_records: int = 0, driver: bool = True
    ) -> None:
        self._cupti = cupti
        self._buffer_size = buffer_mb << 20
        self._driver = driver
        self._converter = RecordConverter(cupti.get_callback_name, Demangler(), max_records)
        self._lock = threading.Lock()  # CUPTI's worker thread adds while the test thread may drain
        self._enabled: list[tuple[int, str]] = []
        self._choice: dict[int, tuple[list[int], int]] = {}  # kind -> (traced callback ids, CBID size)
        self._traced: dict[int, list[int]] = {}  # kind -> the callback ids the last start left enabled
        self._api_records: list[str] = []
        self._saved_tid_type: int | None = None
        self._active = False
        self._sync = DeviceSync()
        #: Time spent in CUPTI's buffer-completed callback (converting records), since the last start.
        self.callback_ns = 0

    # -- CUPTI's callbacks (its worker thread, or the thread that flushes) --------------------------

    def _requested(self) -> tuple[int, int]:
        return self._buffer_size, 0

    def _completed(self, activities: Any) -> None:
        t0 = time.perf_counter_ns()
        with self._lock:
            try:
                self._converter.add(activities)
            except Exception:  # an exception must not escape into CUPTI's thread; the buffer is counted lost
                self._converter.dropped += len(activities) if hasattr(activities, "__len__") else 1
            self._converter.dropped += self._cupti_dropped()
            self.callback_ns += time.perf_counter_ns() - t0

    def _cupti_dropped(self) -> int:
        dropped = ctypes.c_size_t(0)
        try:  # NULL context: the global queue, where every CUDA 12+ buffer lives
            self._cupti.activity_get_num_dropped_records(0, 0, ctypes.addressof(dropped))
        except Exception:
            return 0
        return int(dropped.value)

    # -- the protocol ---------------------------------------------------------------------------------

    def start(self) -> None:
        if self._active:
            raise RuntimeError("this cupti-python collector is already started")
        reason = _foreign_profiler()
        if reason is not None:
            raise CuptiBusyError(
                f"CUPTI is in use by another profiler: {reason}. Collect GPU activity with one of the two at a time."
            )
        if CuptiPythonCollector._collecting is not None:
            raise CuptiBusyError("another cupti-python collector is collecting; CUPTI allows one client per process")
        c = self._cupti
        with self._lock:
            self._converter.dropped = self._converter.incomplete = 0
            self.callback_ns = 0
        self._enabled, self._api_records = [], []
        what = "cuptiGetThreadIdType"
        try:
            self._saved_tid_type = int(c.get_thread_id_type())
            what = "cuptiSetThreadIdType(SYSTEM)"
            c.set_thread_id_type(THREAD_ID_TYPE_SYSTEM)
            what = "cuptiActivityRegisterCallbacks"
            c.activity_register_callbacks(self._requested, self._completed)
            for kind, label, required in KINDS:
                if kind == A_DRIVER and not self._driver:
                    continue
                what = f"cuptiActivityEnable({label})"
                try:
                    c.activity_enable(kind)
                except c.cuptiError as exc:
                    if required or _status(exc) in BUSY_RESULTS:
                        raise
                    continue  # optional kinds this device or driver lacks are left out; enabled() lists what ran
                self._enabled.append((kind, label))
                if kind in API_KINDS:
                    self._filter_apis(kind)
        except c.cuptiError as exc:
            self._disable()
            self._restore_thread_id_type()
            status = _status(exc)
            if status in BUSY_RESULTS:
                raise CuptiBusyError(
                    "CUPTI is in use by another profiler in this process (torch.profiler/Kineto, Nsight Systems or "
                    f"Compute, or another CUPTI client): {what} returned {BUSY_RESULTS[status]} ({status}). Stop "
                    "the other profiler, or switch inferscope's GPU collection off for this run."
                ) from exc
            raise CuptiError(f"{what} failed: {exc}") from exc
        CuptiPythonCollector._collecting = self
        self._active = True

    def stop(self) -> None:
        if not self._active:
            return
        try:
            self.synchronize()
        finally:  # a faulted device must not leave CUPTI collecting
            self._sync.release()
            self._active = False
            c, errors = self._cupti, []
            # Records of finished work first; then nothing new; then what is still open (end = 0).
            for step in ("flush", "disable", "forced flush"):
                try:
                    if step == "flush":
                        c.activity_flush_all(0)
                    elif step == "disable":
                        self._disable()
                    else:
                        c.activity_flush_all(FLUSH_FORCED)
                except Exception as exc:
                    errors.append(f"{step}: {exc}")
            self._restore_thread_id_type()  # and never cupti.finalize(): it breaks CUPTI for the rest of the process
            CuptiPythonCollector._collecting = None
            if errors:
                raise CuptiError("stopping cupti-python collection failed: " + "; ".join(errors))

    def _traced_cbids(self, kind: int) -> tuple[list[int], int]:
        """The callback ids of the traced calls of `kind`'s domain, by CUPTI's names, and the domain's CBID size."""
        if kind not in self._choice:
            domain, _, _, enum_name = API_KINDS[kind]
            size = int(getattr(getattr(self._cupti, enum_name, None), "SIZE", CBID_SIZE_FALLBACK))
            traced = []
            for cbid in range(1, size):
                try:
                    name = self._cupti.get_callback_name(domain, cbid)
                except Exception:  # an id this libcupti does not know
                    continue
                if name and traced_api(name):
                    traced.append(cbid)
            self._choice[kind] = (traced, size)
        return self._choice[kind]

    def _filter_apis(self, kind: int) -> None:
        """After activity_enable(RUNTIME or DRIVER), which records every call: all but the traced calls off again."""
        _, label, switch_name, _ = API_KINDS[kind]
        switch = getattr(self._cupti, switch_name, None)
        why = "INFERSCOPE_CUPTI_ALL_API=1" if every_api_call() else f"cupti-python lacks {switch_name}"
        if switch is not None and not every_api_call():
            traced, size = self._traced_cbids(kind)
            wanted, ok, error = set(traced), 0, None
            for cbid in range(1, size):
                try:
                    switch(cbid, int(cbid in wanted))
                    ok += 1
                except Exception as exc:  # a call this libcupti does not know: nothing to record either way
                    error = exc
            if ok:
                self._traced[kind] = traced
                self._api_records.append(f"{label}: {len(traced)} traced calls of {size - 1}")
                return
            why = f"{switch_name} failed: {error}"  # nothing took, so the kind still records every call
        self._api_records.append(f"{label}: every call ({why})")

    def _disable(self) -> None:
        for kind, _ in self._enabled:
            with contextlib.suppress(Exception):  # disabling what another client disabled is harmless
                self._cupti.activity_disable(kind)
        # Per-call enables may outlive the kind (they record on their own without it): the traced ones off too.
        for kind, cbids in self._traced.items():
            switch = getattr(self._cupti, API_KINDS[kind][2])
            for cbid in cbids:
                with contextlib.suppress(Exception):
                    switch(cbid, 0)
        self._traced = {}

    def _restore_thread_id_type(self) -> None:
        if self._saved_tid_type is not None:
            with contextlib.suppress(Exception):  # best effort: collection itself is over
                self._cupti.set_thread_id_type(self._saved_tid_type)
            self._saved_tid_type = None

    def drain(self) -> tuple[np.ndarray, list[str]]:
        with self._lock:
            return self._converter.take()

    def synchronize(self) -> None:
        self._sync()

    def dropped(self) -> int:
        return self._converter.dropped

    def incomplete(self) -> int:
        """Records still running at the forced flush (end = 0): emitted, and counted here."""
        return self._converter.incomplete

    def timestamp(self) -> int:
        return int(self._cupti.get_timestamp())

    def enabled(self) -> list[str]:
        """CUPTI activity kinds the last start enabled."""
        return [label for _, label in self._enabled]

    def api_records(self) -> str:
        """Which runtime/driver API calls the last start records: the traced ones, or every call and why."""
        return "; ".join(self._api_records)

    def version(self) -> str:
        try:
            from importlib.metadata import version

            package = f"cupti-python {version('cupti-python')}"
        except Exception:
            package = "cupti-python"
        lacks = [switch for _, _, switch, _ in API_KINDS.values() if not hasattr(self._cupti, switch)]
        apis = "launches, copies, memsets, syncs and allocations only"
        if lacks:
            apis = f"every call (cupti-python lacks {lacks[0]})"
        if every_api_call():
            apis = "every call (INFERSCOPE_CUPTI_ALL_API=1)"
        path = _libcupti_in_process()
        if path is None:
            return f"{package}; libcupti not loaded; API records: {apis}"
        number = ctypes.c_uint32(0)
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            if lib.cuptiGetVersion(ctypes.byref(number)) != 0:
                number.value = 0
        except (OSError, AttributeError):
            number.value = 0
        return f"{package}; libcupti {number.value or '?'} from {path}; API records: {apis}"


#: The CUPTI functions start/stop/drain call through cupti-python.
USED = (
    "cuptiActivityEnable", "cuptiActivityDisable", "cuptiActivityFlushAll", "cuptiActivityRegisterCallbacks",
    "cuptiGetTimestamp", "cuptiGetThreadIdType", "cuptiSetThreadIdType", "cuptiGetCallbackName",
)  # fmt: skip


def _load_libcupti() -> str | None:
    """Have cupti-python load libcupti (the copy already in the process first) without calling CUPTI; None when fine.

    Any CUPTI call may initialise CUPTI, and through it the driver, in a process that has not
    used CUDA yet (pytest picks the backend at session start, before any fork); loading the
    library and resolving its functions does neither.
    """
    try:
        internal = importlib.import_module("cupti._internal.cupti")
        inspect: Callable[[], dict[str, int]] | None = getattr(internal, "_inspect_function_pointers", None)
        if inspect is None:  # another cupti-python layout: the first CUPTI call loads it, and start() reports that
            return None
        pointers = inspect()
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    absent = [f for f in USED if f"__{f}" in pointers and not pointers[f"__{f}"]]
    return f"the libcupti it loaded lacks {', '.join(absent)}" if absent else None


def create(
    buffer_mb: int = DEFAULT_BUFFER_MB, max_records: int | None = None, driver: bool = True
) -> CuptiPythonCollector:
    """The cupti-python collector, or RuntimeError with the reason it cannot run here.

    Same arguments as `gpu_native.create`: `max_records` defaults to INFERSCOPE_TRACE_SIZE_MB
    worth of records; `driver` also records driver API calls (JAX, CuPy and Triton launches).
    """
    try:
        cupti = importlib.import_module("cupti.cupti")
    except ImportError as exc:
        raise RuntimeError(
            f"cupti-python is not installed ({exc}); `pip install cupti-python` (or pytest-inferscope[gpu]) "
            "matching the CUDA major version of the driver"
        ) from exc
    require_driver()
    missing = _load_libcupti()
    if missing is not None:
        raise RuntimeError(f"cupti-python cannot use CUPTI here: {missing}")
    if max_records is None:
        max_records = int(_trace_size_mb() * (1 << 20)) // EVENT_DTYPE.itemsize
    return CuptiPythonCollector(cupti, buffer_mb, max_records, driver=driver)
