"""The native GPU backend: the `_cupti` C extension behind the `GpuCollector` protocol.

The extension decodes CUPTI's activity buffers in C into EVENT_DTYPE records (no Python object
per record), which is why it is the fast path; this module holds the policy around it: whether
it can run here, the record cap, refusing to start under another profiler, and synchronising
the device whichever framework queued the work (devsync.py).
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from types import ModuleType
from typing import Any

import numpy as np

from ..events import EVENT_DTYPE
from .devsync import DeviceSync
from .gpu import max_records_for, require_driver

DEFAULT_BUFFER_MB = 8  # per CUPTI buffer; CUPTI asks for more buffers as it fills them

#: Set to 1 to record every runtime/driver API call, not only the traced ones (for debugging; costs host time).
ALL_API_ENV = "INFERSCOPE_CUPTI_ALL_API"
#: The runtime/driver API calls recorded: kernel launches (GPU work finds its launch by correlation id), copies,
#: memsets, synchronisations and allocations, the calls the analysis reads; matched against CUPTI's callback name
#: less its suffixes (`api_base_name`). torch makes about six other calls per op (cudaGetDevice, cudaGetLastError,
#: ...), and each record costs CUPTI host time. native/_cupti.c compiles the same choice as a list of callback ids
#: (`_cupti.TRACED_APIS`), which tests/unit/test_native.py checks against this pattern and the CUPTI headers.
TRACED_API = re.compile(
    r"^(?:__)?cu(?:da)?(?:Launch(?:Kernel(?:Ex|ExC)?|CooperativeKernel(?:MultiDevice)?|Grid(?:Async)?)?|GraphLaunch)$"
    r"|^cu(?:da)?Mem(?:cpy|set)|^cuda(?:Malloc|Free)|^cuMem(?:Alloc|Free)|^cu(?:da|Mem)HostAlloc$"
    r"|^cu(?:da)?StreamWaitEvent$|Synchronize$"
)
_API_SUFFIXES = re.compile(r"(?:_v\d+|_ptsz|_ptds)+$")


def api_base_name(name: str) -> str:
    """A CUPTI callback name less its version/stream suffixes: 'cuMemcpyHtoDAsync_v2_ptsz' -> 'cuMemcpyHtoDAsync'."""
    return _API_SUFFIXES.sub("", name)


def traced_api(name: str) -> bool:
    """Whether a runtime/driver API call (CUPTI's callback name, suffixed or not) is recorded by default."""
    return bool(TRACED_API.search(api_base_name(name)))


def every_api_call() -> bool:
    """INFERSCOPE_CUPTI_ALL_API=1: record every API call (read at each start, as native/_cupti.c does)."""
    return os.environ.get(ALL_API_ENV) == "1"


def _foreign_profiler() -> str | None:
    """Why CUPTI looks held by torch.profiler in this process, or None.

    With the same libcupti as Kineto, CUPTI would accept our callbacks and silently take
    Kineto's records (and Kineto ours), so an active torch.profiler is refused here rather than
    left to CUPTI, which reports only clients outside the process's copy (Nsight).
    """
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if getattr(torch.autograd.profiler, "_is_profiler_enabled", False) or torch._C._autograd._profiler_enabled():
            return "torch.profiler (Kineto) is active in this process"
    except (AttributeError, RuntimeError):  # a torch without these internals: let CUPTI decide
        return None
    return None


class NativeGpuCollector:
    """`GpuCollector` over `_cupti.Collector`: records come back as EVENT_DTYPE arrays, device clock domain."""

    name = "native"

    def __init__(self, module: ModuleType, collector: Any) -> None:
        self._mod = module
        self._c = collector
        self._sync = DeviceSync()
        #: PCI bus ids of the devices the last collection synchronised (read at stop, for the link's speed).
        self.bus_ids: list[str] = []

    def start(self) -> None:
        reason = _foreign_profiler()
        if reason is not None:
            raise self._mod.CuptiBusyError(
                f"CUPTI is in use by another profiler: {reason}. Collect GPU activity with one of the two at a time."
            )
        self._c.start()

    def stop(self) -> None:
        try:
            self.synchronize()
        finally:  # a faulted device must not leave CUPTI collecting
            self.bus_ids = self._sync.pci_bus_ids()
            self._sync.release()
            self._c.stop()

    def set_api_records(self, on: bool) -> None:
        """While collecting: the runtime/driver API records (each launch's CPU side) off, or on again."""
        self._c.set_api_records(on)

    def flush(self) -> None:
        self._c.flush()

    def drain(self) -> tuple[np.ndarray, list[str]]:
        buf, names = self._c.drain()
        return np.frombuffer(buf, dtype=EVENT_DTYPE), names

    def synchronize(self) -> bool:
        return self._sync()

    def prime(self) -> bool:
        return self._sync.prime()

    def has_context(self) -> bool:
        return self._sync.any_context()

    def dropped(self) -> int:
        return int(self._c.dropped())

    def incomplete(self) -> int:
        """Records still running at the forced flush (end = 0): emitted, and counted here."""
        return int(self._c.incomplete())

    def timestamp(self) -> int:
        return int(self._c.timestamp())

    def enabled(self) -> list[str]:
        """CUPTI activity kinds the last start enabled."""
        return list(self._c.enabled())

    def api_records(self) -> str:
        """Which runtime/driver API calls the last start records: the traced ones, or every call and why."""
        return str(self._c.api_records())

    def version(self) -> str:
        return str(self._mod.version())


def create(
    buffer_mb: int = DEFAULT_BUFFER_MB, max_records: int | None = None, driver: bool = True
) -> NativeGpuCollector:
    """The native collector, or RuntimeError with the reason it cannot run here.

    `max_records` defaults to the default trace size's worth of records (`max_records_for`); beyond it, records are
    counted in `dropped()`. `driver` also records driver API calls, which JAX and Triton launch
    through (torch's launches come as runtime calls either way).
    """
    try:
        _cupti = importlib.import_module("pytest_inferscope._cupti")
    except ImportError as exc:
        raise RuntimeError(
            f"native extension not built ({exc}); reinstall where the CUDA toolkit headers are "
            "(INFERSCOPE_FORCE_NATIVE_BUILD=1 shows why a build fails)"
        ) from exc
    try:
        _cupti.load()
    except _cupti.CuptiError as exc:
        raise RuntimeError(str(exc)) from exc
    require_driver()
    if max_records is None:
        max_records = max_records_for(None)
    collector = _cupti.Collector(buffer_mb << 20, max_records, driver=driver)
    return NativeGpuCollector(_cupti, collector)
