"""The cupti-python GPU backend: NVIDIA's `cupti` package behind the `GpuCollector` protocol.

The portable fallback for machines where the native extension did not build, and the
cross-check of it in tests. It produces the very records `native/_cupti.c` produces (same
kinds, names, flags and sentinel values, device clock domain), so everything after the
collector cannot tell the two apart. CUPTI's buffers reach it raw, through ctypes (cupti_raw.py),
where that can run; otherwise cupti-python hands every activity record to Python as an object
(~20-35 µs a record on an H200 host). Either way `RecordConverter` turns each record into a plain
tuple inside CUPTI's buffer callback (so no CUPTI buffer outlives its callback) and builds the
EVENT_DTYPE array in one go at drain time (cupti_records.py). That per-record Python work is why
this backend costs more than the native one.

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
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np

from .cupti_columns import add_raw
from .cupti_raw import RawActivity, libcupti_in_process, open_raw
from .cupti_records import (
    A_CONCURRENT_KERNEL,
    A_DRIVER,
    A_MEMCPY,
    A_MEMCPY2,
    A_MEMORY2,
    A_MEMSET,
    A_OVERHEAD,
    A_RUNTIME,
    A_SYNCHRONIZATION,
    DOMAIN_DRIVER_API,
    DOMAIN_RUNTIME_API,
    Demangler,
    RecordConverter,
    RecordViews,
)
from .devsync import DeviceSync
from .gpu import max_records_for, require_driver
from .gpu_native import DEFAULT_BUFFER_MB, _foreign_profiler, every_api_call, traced_api

THREAD_ID_TYPE_SYSTEM = 1  # CUPTI_ACTIVITY_THREAD_ID_TYPE_SYSTEM: gettid(), as threading.get_native_id()
FLUSH_FORCED = 1  # CUPTI_ACTIVITY_FLAG_FLUSH_FORCED
BUSY_RESULTS = {26: "CUPTI_ERROR_HARDWARE_BUSY", 39: "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED"}
#: The first buffer CUPTI asks for after a start or a flush; each next one twice the last, up to `buffer_mb`.
#: cupti-python's own buffer manager allocates the buffers (malloc), so CUPTI clears each one it is handed, all of
#: it, in the thread that needed it (the native backend hands it zeroed pages instead: native/README.md); a short
#: collection fills a fraction of even this first one (a lean ViT-B/16 warm-up: ~300 GPU and ~300 API records).
FIRST_BUFFER_BYTES = 1 << 20

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
    (A_MEMCPY2, "MEMCPY2", False),  # peer copies, between two devices
)

#: activity kind -> (callback domain, label, cupti-python's per-API switch, its callback-id enum): after enabling
#: the kind, every call but the traced ones (gpu_native.TRACED_API, by CUPTI's own names) is switched off again.
API_KINDS = {
    A_RUNTIME: (DOMAIN_RUNTIME_API, "runtime", "activity_enable_runtime_api", "runtime_api_trace_cbid"),
    A_DRIVER: (DOMAIN_DRIVER_API, "driver", "activity_enable_driver_api", "driver_api_trace_cbid"),
}
CBID_SIZE_FALLBACK = 1024  # callback ids tried when cupti-python has no enum to give the size


class CuptiError(RuntimeError):
    """A CUPTI call made through cupti-python failed."""


class CuptiBusyError(CuptiError):
    """CUPTI is held by another profiler in this process (torch.profiler/Kineto, Nsight, ...)."""


def _status(exc: BaseException) -> int:
    status = getattr(exc, "status", None)
    return int(status) if isinstance(status, int) else -1


class CuptiPythonCollector:
    """`GpuCollector` over cupti-python: records come back as EVENT_DTYPE arrays, device clock domain."""

    name = "cupti-python"
    #: CUPTI's buffer callbacks are process-wide: one collector of this kind may collect at a time.
    _collecting: ClassVar[CuptiPythonCollector | None] = None

    def __init__(
        self,
        cupti: Any,
        buffer_mb: int = DEFAULT_BUFFER_MB,
        max_records: int = 0,
        driver: bool = True,
        raw: bool | RawActivity = False,
    ) -> None:
        self._cupti = cupti
        self._buffer_size = buffer_mb << 20
        self._next_buffer = min(FIRST_BUFFER_BYTES, self._buffer_size)  # CUPTI's next request (`_requested`)
        self._driver = driver
        views = RecordViews(cupti)
        self._converter = RecordConverter(cupti.get_callback_name, Demangler(), max_records, views)
        #: `raw`: CUPTI's buffers through ctypes where that can run (cupti_raw.py); else cupti-python's objects,
        #: and `objects_reason` says why.
        opened = raw if isinstance(raw, RawActivity) else "not asked for"
        if raw is True:
            opened = open_raw(views.raw_missing, self._buffer_size)
        self._raw: RawActivity | None = opened if isinstance(opened, RawActivity) else None
        self.objects_reason = opened if isinstance(opened, str) else ""
        self._lock = threading.Lock()  # CUPTI's worker thread adds while the test thread may drain
        self._enabled: list[tuple[int, str]] = []
        self._choice: dict[int, tuple[list[int], int]] = {}  # kind -> (traced callback ids, CBID size)
        self._traced: dict[int, list[int]] = {}  # kind -> the callback ids the last start left enabled
        self._api_records: list[str] = []
        self._api_started: list[tuple[int, str]] = []  # the API kinds start() enabled: set_api_records' domain
        self._saved_tid_type: int | None = None
        self._active = False
        self._sync = DeviceSync()
        #: PCI bus ids of the devices the last collection synchronised (read at stop, for the link's speed).
        self.bus_ids: list[str] = []
        #: Time spent in CUPTI's buffer-completed callback (converting records), since the last start.
        self.callback_ns = 0

    # -- CUPTI's callbacks (its worker thread, or the thread that flushes) --------------------------

    def _requested(self) -> tuple[int, int]:
        """A buffer's size (and no cap on its records): FIRST_BUFFER_BYTES after a start or a flush, then doubling
        up to `buffer_mb` (two threads asking at once may both get the same size: harmless)."""
        size = self._next_buffer
        self._next_buffer = min(size * 2, self._buffer_size)
        return size, 0

    def _first_buffer_next(self) -> None:
        self._next_buffer = min(FIRST_BUFFER_BYTES, self._buffer_size)

    def _completed(self, activities: Any) -> None:
        t0 = time.perf_counter_ns()
        with self._lock:
            try:
                self._converter.add(activities)
            except Exception:  # an exception must not escape into CUPTI's thread; the buffer is counted lost
                self._converter.dropped += len(activities) if hasattr(activities, "__len__") else 1
            self._converter.dropped += self._cupti_dropped()
            self.callback_ns += time.perf_counter_ns() - t0

    def _completed_raw(self, records: list[tuple[int, int]], dropped: int) -> None:
        """A buffer through ctypes (cupti_raw.RawActivity): its records as (kind, address) pairs."""
        t0 = time.perf_counter_ns()
        with self._lock:
            try:
                add_raw(self._converter, records)
            except Exception:  # as in _completed: the buffer's records are counted lost
                self._converter.dropped += len(records)
            self._converter.dropped += dropped
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
        self._first_buffer_next()
        self._enabled, self._api_records = [], []
        what = "cuptiGetThreadIdType"
        try:
            self._saved_tid_type = int(c.get_thread_id_type())
            what = "cuptiSetThreadIdType(SYSTEM)"
            c.set_thread_id_type(THREAD_ID_TYPE_SYSTEM)
            what = "cuptiActivityRegisterCallbacks"
            if self._raw is not None:
                self._raw.register(self._completed_raw)  # RuntimeError with CUPTI's result
            else:
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
        except (c.cuptiError, RuntimeError) as exc:
            self._disable()
            if self._raw is not None:
                self._raw.unregister()
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
        self._api_started = [(k, label) for k, label in self._enabled if k in API_KINDS]
        self._active = True

    def stop(self) -> None:
        if not self._active:
            return
        try:
            self.synchronize()
        finally:  # a faulted device must not leave CUPTI collecting
            self.bus_ids = self._sync.pci_bus_ids()
            self._sync.release()
            self._active = False
            errors: list[str] = []
            # Records of finished work first; then nothing new; then what is still open (end = 0).
            for step in ("flush", "disable", "forced flush"):
                try:
                    if step == "flush":
                        self._flush_all(0)
                    elif step == "disable":
                        self._disable()
                    else:
                        self._flush_all(FLUSH_FORCED)
                except Exception as exc:
                    errors.append(f"{step}: {exc}")
            if self._raw is not None:
                self._raw.unregister()
            self._restore_thread_id_type()  # and never cupti.finalize(): it breaks CUPTI for the rest of the process
            CuptiPythonCollector._collecting = None
            if errors:
                raise CuptiError("stopping cupti-python collection failed: " + "; ".join(errors))

    def set_api_records(self, on: bool) -> None:
        """While collecting: the runtime/driver API records (each launch's CPU side) off, or on again."""
        if not self._active:
            raise RuntimeError("set_api_records needs a started collector")
        c = self._cupti
        for kind, label in self._api_started:
            enabled = any(k == kind for k, _ in self._enabled)
            if not on and enabled:
                c.activity_disable(kind)
                switch = getattr(c, API_KINDS[kind][2])
                for cbid in self._traced.pop(kind, []):
                    switch(cbid, 0)
                self._enabled = [(k, x) for k, x in self._enabled if k != kind]
            elif on and not enabled:
                described = list(self._api_records)
                c.activity_enable(kind)
                self._enabled.append((kind, label))
                self._filter_apis(kind)
                self._api_records = described  # what start() wrote still holds

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

    def flush(self) -> None:
        if not self._active:
            return
        try:
            self._flush_all(0)
        except Exception as exc:
            raise CuptiError(f"flushing cupti-python's records failed: {exc}") from exc
        self._first_buffer_next()  # CUPTI asks for a new buffer at the next record

    def _flush_all(self, flag: int) -> None:
        """cuptiActivityFlushAll: through ctypes with raw buffers (the GIL let go while CUPTI calls back)."""
        if self._raw is not None:
            self._raw.flush(flag)
        else:
            self._cupti.activity_flush_all(flag)

    def drain(self) -> tuple[np.ndarray, list[str]]:
        with self._lock:
            return self._converter.take()

    def synchronize(self) -> bool:
        return self._sync()

    def prime(self) -> bool:
        return self._sync.prime()

    def has_context(self) -> bool:
        return self._sync.any_context()

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
        records = "raw buffers (ctypes)" if self._raw is not None else f"cupti-python's objects ({self.objects_reason})"
        path = libcupti_in_process()
        if path is None:
            return f"{package}; libcupti not loaded; API records: {apis}; records: {records}"
        number = ctypes.c_uint32(0)
        try:
            lib = ctypes.CDLL(path, mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            if lib.cuptiGetVersion(ctypes.byref(number)) != 0:
                number.value = 0
        except (OSError, AttributeError):
            number.value = 0
        return f"{package}; libcupti {number.value or '?'} from {path}; API records: {apis}; records: {records}"


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

    Same arguments as `gpu_native.create`: `max_records` defaults to the default trace size's
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
        max_records = max_records_for(None)
    return CuptiPythonCollector(cupti, buffer_mb, max_records, driver=driver, raw=True)
