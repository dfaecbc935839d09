"""The memory collector: host RSS, page faults and CPU times from procfs and getrusage,
plus torch's CUDA allocator peaks when torch is loaded and CUDA is initialised.

Counters are read at every round boundary, on the test thread, right before and after the
body, and RSS every ~10 ms from the sampler thread. Opening a procfs file there is not free:
on the H200 machine (2026-11-21, bench_round_cost.py) reading the counters through open()
before each call of a 0.4 ms CPU-bound forward made the untimed call after it 6% slower (one
procfs open+read alone: 2.6%; eight plain syscalls: nothing measurable). So the round
boundaries read through `ProcFiles`: the files opened once per collection, re-read with one
pread() each.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from dataclasses import dataclass, fields
from typing import Any

from . import pygc

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
#: Bytes read of a procfs file at once: /proc/self/status is ~1.5 kB, statm and schedstat under 100 bytes.
_PROC_READ = 16384


def _field(raw: bytes, i: int) -> int:
    """The i-th whitespace-separated integer of a procfs line (0 where it is missing or garbled)."""
    try:
        return int(raw.split()[i])
    except (IndexError, ValueError):
        return 0


def _read(path: str) -> bytes:
    """A procfs file's bytes (b"" where it cannot be read), through os.open and one read: Python's buffered
    `open()` took 2-3x as long for these small files (statm 18.7 against 8.6 µs on the 2-core dev VM)."""
    fd = _open(path)
    if fd < 0:
        return b""
    try:
        return os.read(fd, _PROC_READ)
    except OSError:
        return b""
    finally:
        os.close(fd)


def read_rss() -> int:
    """Resident set size in bytes (0 where /proc is missing)."""
    return _field(_read("/proc/self/statm"), 1) * _PAGE


def read_schedstat() -> tuple[int, int]:
    """The calling thread's (ns on a CPU, ns runnable but waiting for a CPU); zeros where the kernel hides them."""
    raw = _read("/proc/thread-self/schedstat")
    return _field(raw, 0), _field(raw, 1)


def _read_hwm() -> int | None:
    """The kernel's peak RSS in bytes (VmHWM of /proc/self/status), None where it is missing."""
    raw = _read("/proc/self/status")
    at = raw.find(b"\nVmHWM:")
    if at < 0:
        return None
    try:
        return int(raw[at + 7 : raw.index(b"\n", at + 1)].split()[0]) * 1024
    except (IndexError, ValueError):
        return None


def reset_peak() -> bool:
    """Reset the kernel's peak-RSS counter (VmHWM); False where the kernel doesn't allow it."""
    try:
        fd = os.open("/proc/self/clear_refs", os.O_WRONLY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        return os.write(fd, b"5") == 1
    except OSError:
        return False
    finally:
        os.close(fd)


class RssFile:
    """/proc/self/statm kept open: the RSS in one pread(). The stack sampler reads it every ~10 ms on its own thread,
    where every system call hands the GIL to the test thread and back; opening, reading and closing the file each
    time made three hand-overs of the sample's four (session 15: 150-180 µs of the sampler's CPU a reading)."""

    def __init__(self) -> None:
        self._statm = _open("/proc/self/statm")

    def rss(self) -> int:
        """Resident set size in bytes (0 where /proc is missing)."""
        return _field(_pread(self._statm), 1) * _PAGE

    def close(self) -> None:
        if self._statm >= 0:
            os.close(self._statm)
        self._statm = -1


class ProcFiles(RssFile):
    """/proc/self/statm and the opening thread's schedstat, kept open and re-read with pread()."""

    def __init__(self) -> None:
        super().__init__()
        self._schedstat = _open("/proc/thread-self/schedstat")

    def runqueue_ns(self) -> int:
        """The opening thread's ns runnable but waiting for a CPU (0 where the kernel hides it)."""
        return _field(_pread(self._schedstat), 1)

    def close(self) -> None:
        super().close()
        if self._schedstat >= 0:
            os.close(self._schedstat)
        self._schedstat = -1


def _pread(fd: int) -> bytes:
    try:
        return os.pread(fd, 128, 0) if fd >= 0 else b""
    except OSError:
        return b""


def _open(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


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
    gc_ns: int = 0  # the test thread's time in Python's garbage collector (pygc), and its collections
    gc_collections: int = 0
    gc_full: int = 0
    gc_collected: int = 0
    gc_freeing_ns: int = 0  # the part of gc_ns in collections that freed objects, and in full ones
    gc_full_ns: int = 0

    @classmethod
    def now(cls, proc: ProcFiles | None = None) -> Counters:
        """The counters now; `proc` (opened on the calling thread) reads procfs without opening files."""
        ru = resource.getrusage(resource.RUSAGE_SELF)
        gc_ns, gc_collections, gc_full, gc_collected, gc_freeing_ns, gc_full_ns = pygc.totals()
        return cls(
            runqueue_ns=proc.runqueue_ns() if proc is not None else read_schedstat()[1],
            wall_ns=time.perf_counter_ns(),
            thread_cpu_ns=time.thread_time_ns(),
            user_ns=int(ru.ru_utime * 1e9),
            sys_ns=int(ru.ru_stime * 1e9),
            minflt=ru.ru_minflt,
            majflt=ru.ru_majflt,
            nvcsw=ru.ru_nvcsw,
            nivcsw=ru.ru_nivcsw,
            rss=proc.rss() if proc is not None else read_rss(),
            gc_ns=gc_ns,
            gc_collections=gc_collections,
            gc_full=gc_full,
            gc_collected=gc_collected,
            gc_freeing_ns=gc_freeing_ns,
            gc_full_ns=gc_full_ns,
        )

    def delta(self, later: Counters) -> dict[str, int]:
        """`later` minus these counters, field by field, and the RSS at both ends (after every round: no
        `dataclasses.asdict`, which deep-copies: 20 µs against 2 µs a round on the 2-core VM)."""
        d = {k: getattr(later, k) - getattr(self, k) for k in _DIFFERENCED}
        d["rss_start"], d["rss_end"] = self.rss, later.rss
        return d


#: The counters a round's row holds as differences (the RSS is kept at both ends instead).
_DIFFERENCED = tuple(f.name for f in fields(Counters) if f.name != "rss")


def _torch_cuda() -> Any | None:
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        return torch.cuda if torch.cuda.is_available() and torch.cuda.is_initialized() else None
    except Exception:
        return None


def allocator_peaks(cuda: Any, device: int) -> dict[str, int]:
    """torch's caching allocator on `device`: its peaks since the collection's start, and the device's memory.

    What `max_memory_allocated` and `max_memory_reserved` give, read from one nested copy of the allocator's
    statistics: each of those flattens all of them first (0.5 ms a call on the H200 host, 2026-11-28)."""
    stats = cuda.memory_stats_as_nested_dict(device)

    def peak(key: str) -> int:
        return int(stats.get(key, {}).get("all", {}).get("peak", 0))

    return {
        "gpu_allocated_peak": peak("allocated_bytes"),
        "gpu_reserved_peak": peak("reserved_bytes"),
        "gpu_total": _total_memory(cuda, device),
    }


_TOTAL_MEMORY: dict[int, int] = {}  # by device: it does not change


def _total_memory(cuda: Any, device: int) -> int:
    if device not in _TOTAL_MEMORY:
        _TOTAL_MEMORY[device] = int(cuda.get_device_properties(device).total_memory)
    return _TOTAL_MEMORY[device]


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

    def stop(self, sampled_peak: int | None) -> dict[str, Any]:
        """Summary for the trace's metadata: RSS start/end/peak and torch allocator peaks. `sampled_peak`: the stack
        sampler's highest RSS reading, None where no sampler ran (then, without VmHWM, only the ends are read)."""
        rss_end = read_rss()
        hwm = _read_hwm() if self.hwm_reset else None
        if hwm is not None:
            source = "kernel VmHWM (reset at start)"
        else:
            source = "sampled" if sampled_peak is not None else "start and end only"
        out: dict[str, Any] = {
            "rss_start": self.rss_start,
            "rss_end": rss_end,
            "rss_peak": max(v for v in (hwm, sampled_peak, rss_end, self.rss_start) if v is not None),
            "rss_peak_source": source,
        }
        cuda = _torch_cuda()
        if cuda is not None and self.torch_cuda_device is not None:
            out.update(allocator_peaks(cuda, self.torch_cuda_device))
        return out

    def mode(self) -> str:
        return "procfs + getrusage" + (" + torch CUDA allocator" if _torch_cuda() is not None else "")
