"""The memory collector: host RSS, page faults and CPU times from procfs and getrusage,
plus torch's CUDA allocator peaks when torch is loaded and CUDA is initialised.

Reads are cheap (one small file or one syscall) so they run at every round boundary and
every ~10 ms from the sampler thread.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def read_rss() -> int:
    """Resident set size in bytes (0 where /proc is missing)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except (OSError, IndexError, ValueError):
        return 0


def read_schedstat() -> tuple[int, int]:
    """The calling thread's (ns on a CPU, ns runnable but waiting for a CPU); zeros where the kernel hides them."""
    try:
        with open("/proc/thread-self/schedstat", "rb") as f:
            on_cpu, waiting, _ = f.read().split()
        return int(on_cpu), int(waiting)
    except (OSError, ValueError):
        return 0, 0


def _read_hwm() -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return None


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM); False where the kernel doesn't allow it."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


@dataclass
class Counters:
    """Process counters at one instant; differences between two give a round's costs."""

    wall_ns: int
    thread_cpu_ns: int  # the calling (test) thread's CPU time
    user_ns: int  # whole process
    sys_ns: int
    minflt: int
    majflt: int
    nvcsw: int
    nivcsw: int
    runqueue_ns: int  # the calling thread's time runnable but waiting for a core (contention)
    rss: int

    @classmethod
    def now(cls) -> Counters:
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return cls(
            runqueue_ns=read_schedstat()[1],
            wall_ns=time.perf_counter_ns(),
            thread_cpu_ns=time.thread_time_ns(),
            user_ns=int(ru.ru_utime * 1e9),
            sys_ns=int(ru.ru_stime * 1e9),
            minflt=ru.ru_minflt,
            majflt=ru.ru_majflt,
            nvcsw=ru.ru_nvcsw,
            nivcsw=ru.ru_nivcsw,
            rss=read_rss(),
        )

    def delta(self, later: Counters) -> dict[str, int]:
        d = {k: getattr(later, k) - v for k, v in asdict(self).items()}
        d["rss_start"], d["rss_end"] = self.rss, later.rss
        del d["rss"]
        return d


def _torch_cuda() -> Any | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch.cuda if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    except Exception:
        return None


class MemoryCollector:
    """Brackets a collection: peaks and totals for the report, per-round counters for the analyzer."""

    def __init__(self) -> None:
        self.hwm_reset = False
        self.rss_start = 0
        self.torch_cuda_device: int | None = None

    def start(self) -> None:
        self.hwm_reset = reset_peak()
        self.rss_start = read_rss()
        cuda = _torch_cuda()
        if cuda is not None:
            self.torch_cuda_device = cuda.current_device()
            cuda.reset_peak_memory_stats()

    def stop(self, sampled_peak: int) -> dict[str, Any]:
        """Summary for the trace's metadata: RSS start/end/peak and torch allocator peaks."""
        rss_end = read_rss()
        hwm = _read_hwm() if self.hwm_reset else None
        out: dict[str, Any] = {
            "rss_start": self.rss_start,
            "rss_end": rss_end,
            "rss_peak": max(v for v in (hwm, sampled_peak, rss_end, self.rss_start) if v is not None),
            "rss_peak_source": "kernel VmHWM (reset at start)" if hwm is not None else "sampled",
        }
        cuda = _torch_cuda()
        if cuda is not None and self.torch_cuda_device is not None:
            out["gpu_allocated_peak"] = int(cuda.max_memory_allocated(self.torch_cuda_device))
            out["gpu_reserved_peak"] = int(cuda.max_memory_reserved(self.torch_cuda_device))
            out["gpu_total"] = int(cuda.get_device_properties(self.torch_cuda_device).total_memory)
        return out

    def mode(self) -> str:
        return "procfs + getrusage" + (" + torch CUDA allocator" if _torch_cuda() is not None else "")
