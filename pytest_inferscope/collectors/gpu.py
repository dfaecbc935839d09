"""The one place that picks a GPU backend (native CUPTI, cupti-python, or none) and says why.

Every rejected choice keeps its reason; the chosen one (or "none") goes into the report
header and the pytest header. `INFERSCOPE_COLLECTOR=native|cupti-python` forces a
backend and fails loudly when it cannot run.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from ..events import EVENT_DTYPE
from ..gpus import GPU_OFF, device_missing

BACKENDS = ("native", "cupti-python")


class GpuBackendError(RuntimeError):
    """A GPU backend was required (INFERSCOPE_GPU=required or INFERSCOPE_COLLECTOR) and none can run."""


class GpuCollector(Protocol):
    """What a GPU backend offers. Records come back in EVENT_DTYPE, device clock domain."""

    name: str
    #: PCI bus ids of the devices the last collection synchronised, read at stop (for the link's speed).
    bus_ids: list[str]

    def start(self) -> None:
        """Enable activity collection (kernels, copies, memsets, runtime, sync, memory)."""

    def set_api_records(self, on: bool) -> None:
        """While collecting: the runtime/driver API records (each launch's CPU side) off, or on again."""

    def stop(self) -> None:
        """Synchronise the device, flush (forced too) and disable collection. Never finalize."""

    def drain(self) -> tuple[np.ndarray, list[str]]:
        """Records collected since the last drain, and the names their `name` field indexes."""
        ...

    def flush(self) -> None:
        """While collecting: hand the records of finished work to `drain`, without stopping.

        Optional: a backend without it is stopped and started again where the records are needed
        mid-collection (gpu_rounds auto after the warm-up).
        """

    def dropped(self) -> int:
        """Records CUPTI or the backend could not keep, since start."""
        ...

    def timestamp(self) -> int:
        """CUPTI's clock now, in its own units (ns unless another client replaced it)."""
        ...

    def synchronize(self) -> bool:
        """Wait for all GPU work (end of a round); False when no CUDA context was active, so nothing could be waited
        for and the round ends with its body (devsync.DeviceSync.__call__)."""

    def prime(self) -> bool:
        """Right after `start`: one tiny GPU operation per active context, waited for, so that the first round
        does not pay the first operation's cost under CUPTI (devsync.DeviceSync.prime). False when none ran.

        Optional: without it, a settling round runs instead.
        """
        ...

    def has_context(self) -> bool:
        """Whether a CUDA context is active in the process (devsync.DeviceSync.any_context), never creating one: without
        one as a collection starts, auto does not start CUPTI yet; without one after the measured rounds, the body did
        no GPU work, and no trace round runs (gpu_session.py).

        Optional: without it, CUPTI starts with the collection and the trace rounds run, as with a context.
        """
        ...

    def version(self) -> str:
        """Backend and CUPTI version, for the report header."""
        ...


@dataclass
class Choice:
    """The outcome of `select_backend`: a collector or None, and why each option was or wasn't taken."""

    collector: GpuCollector | None
    reasons: dict[str, str] = field(default_factory=dict)  # backend -> why rejected

    @property
    def name(self) -> str:
        return self.collector.name if self.collector is not None else "none"

    def describe(self) -> str:
        if self.collector is not None:
            return f"{self.collector.name} ({self.collector.version()})"
        return "not collected (" + "; ".join(v if k == "gpu" else f"{k}: {v}" for k, v in self.reasons.items()) + ")"


DEFAULT_TRACE_SIZE_MB = 100.0  # the trace_size_mb setting's default: also caps the GPU records kept between drains


def max_records_for(trace_size_mb: float | None) -> int:
    """How many GPU records `trace_size_mb` megabytes hold: the cap on records kept between drains.

    The size is the resolved `trace_size_mb` setting (option, ini key, environment or config file),
    validated there; None means the default.
    """
    size = DEFAULT_TRACE_SIZE_MB if trace_size_mb is None else trace_size_mb
    return int(size * (1 << 20)) // EVENT_DTYPE.itemsize


def require_driver() -> None:
    """Raise RuntimeError with the reason when the NVIDIA driver library cannot be loaded.

    Loading libcuda initialises nothing (unlike cuInit); RTLD_LOCAL keeps its symbols to itself.
    """
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1", mode=os.RTLD_LOCAL | os.RTLD_LAZY)
    except OSError as exc:
        raise RuntimeError(
            f"NVIDIA driver library libcuda.so.1 cannot be loaded ({exc}): no usable GPU driver"
        ) from exc


def _load(backend: str, trace_size_mb: float | None) -> GpuCollector:
    """Import and construct one backend keeping `trace_size_mb` of records; raises with the reason when it can't."""
    module = {"native": ".gpu_native", "cupti-python": ".gpu_cuptipy"}[backend]
    try:
        mod = importlib.import_module(module, __package__)
    except ImportError as exc:
        raise RuntimeError(f"not available ({exc})") from exc
    collector: GpuCollector = mod.create(max_records=max_records_for(trace_size_mb))  # RuntimeError: the reason
    return collector


def select_backend(gpu: str = "auto", forced: str | None = None, trace_size_mb: float | None = None) -> Choice:
    """Pick the GPU backend for `gpu` = auto | off | required.

    `forced` (from INFERSCOPE_COLLECTOR) names one backend; it is then the only candidate
    and a failure is an error rather than a fallback. `trace_size_mb` (the resolved setting;
    None: its default) caps the GPU records the backend keeps between drains.
    """
    if gpu == "off":
        return Choice(None, {"gpu": GPU_OFF})
    if forced is not None and forced not in BACKENDS:
        raise GpuBackendError(
            f"INFERSCOPE_COLLECTOR={forced!r} is not a GPU backend: set it to {' or '.join(BACKENDS)} to force that "
            "one, or unset it to let inferscope choose (native, else cupti-python, else CPU-only collection)."
        )
    reasons: dict[str, str] = {}
    missing = device_missing()
    if missing is not None:
        reasons["gpu"] = missing
    else:
        for backend in (forced,) if forced else BACKENDS:
            try:
                return Choice(_load(backend, trace_size_mb), reasons)
            except RuntimeError as exc:
                reasons[backend] = str(exc)
    choice = Choice(None, reasons)
    if forced is not None:
        raise GpuBackendError(
            f"INFERSCOPE_COLLECTOR={forced} was asked for but cannot run: {choice.describe()}. "
            "Unset INFERSCOPE_COLLECTOR to fall back to CPU-only collection."
        )
    if gpu == "required":
        raise GpuBackendError(
            f"GPU collection is required (--inferscope-gpu=required or INFERSCOPE_GPU=required) "
            f"but no backend can run: {choice.describe()}."
        )
    return choice
