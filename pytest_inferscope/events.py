"""The event record every collector writes and every later stage reads.

One fixed-layout numpy record per event, so a million events are one array, not a
million Python objects. Names are interned into a `StringTable`; free-form attributes
(from `mark_event`) live in a side list indexed by the record's `value` field.
"""

from __future__ import annotations

import enum
import functools
import time
from collections.abc import Iterable
from typing import IO, Any

import numpy as np

#: The host clock every host-side event uses (CLOCK_MONOTONIC on Linux).
host_clock_ns = time.perf_counter_ns


class Kind(enum.IntEnum):
    """What a record describes. Spans have start < end; instants have start == end.

    Compare a numpy column with `int(Kind.X)`, not the member: for an IntEnum operand numpy looks up
    `__array_ufunc__` on its class, which on Python 3.11 goes through `EnumType.__getattr__` and raises,
    ~5 µs a comparison (a trivial test's analysis made ~30 of them).
    """

    TEST = 1  # the profiled test body, all rounds
    ROUND = 2  # one call of the test body; value = round index, flags: its rounds.RoundKind (and RAISED)
    SCOPE = 3  # a user scope (`scope()` / fixture)
    MODULE = 4  # a torch.nn.Module forward
    MARK = 5  # `mark_event`; value = index into the attrs list
    SAMPLE = 6  # CPU stack sample; name = folded stack, [start, end) = time it stands for, value = leaf's line,
    #             flags: `sample_flags` (the thread's CPU time over it)
    MEMORY = 7  # host memory counter; value = RSS bytes, flags = MemoryFlag
    CALL = 8  # a Python function call (full call tracing mode), or an imported trace's op or frame; flags: CallFlag
    KERNEL = 10  # GPU kernel
    MEMCPY = 11  # GPU copy; value = bytes, flags: `copy_flags` (kind, memory kinds, a peer copy's devices)
    MEMSET = 12  # GPU memset; value = bytes
    RUNTIME = 13  # CUDA runtime/driver API call on the host (CPU side of a launch)
    SYNC = 14  # synchronisation record; flags = SyncType
    GPU_MEMORY = 15  # GPU allocation (value > 0) or free (value < 0), bytes
    OVERHEAD = 16  # profiler overhead record (CUPTI buffer flush, ...)
    WAIT = 17  # the host blocked waiting for the device (the plugin's own end-of-round synchronize)


SPAN_KINDS = (Kind.TEST, Kind.ROUND, Kind.SCOPE, Kind.MODULE, Kind.CALL, Kind.WAIT)
GPU_KINDS = (Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET)


class Domain(enum.IntEnum):
    """Which clock a record's timestamps are in, until the merger puts it on the host's."""

    HOST = 0
    DEVICE = 1  # CUPTI timestamps


class CopyKind(enum.IntEnum):
    """CUPTI_ACTIVITY_MEMCPY_KIND_* (low byte of a MEMCPY record's flags)."""

    UNKNOWN = 0
    HTOD = 1
    DTOH = 2
    HTOA = 3
    ATOH = 4
    ATOA = 5
    ATOD = 6
    DTOA = 7
    DTOD = 8
    HTOH = 9
    PTOP = 10


class MemoryKind(enum.IntEnum):
    """CUPTI_ACTIVITY_MEMORY_KIND_* (source byte and destination byte of a copy's flags)."""

    UNKNOWN = 0
    PAGEABLE = 1
    PINNED = 2
    DEVICE = 3
    ARRAY = 4
    MANAGED = 5
    DEVICE_STATIC = 6
    MANAGED_STATIC = 7


class SyncType(enum.IntEnum):
    """CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_*."""

    UNKNOWN = 0
    EVENT_SYNCHRONIZE = 1
    STREAM_WAIT_EVENT = 2
    STREAM_SYNCHRONIZE = 3
    CONTEXT_SYNCHRONIZE = 4


class CallFlag(enum.IntFlag):
    """Flags of a CALL record."""

    FRAME = 0  # a Python function
    OP = 1  # an operator (an imported torch.profiler trace's `cpu_op`: aten::mm, ...)


#: The frame a CPU sample taken during Python's garbage collection ends in (collectors/cpu.py), under the call whose
#: allocation set it off.
GC_FRAME = "gc:collect (Python's garbage collector)"

#: A SAMPLE record's flags: bit 0 set where the sampler read the thread's CPU clock, and the µs the thread was on a CPU
#: over the time the sample stands for in bits 1-30. 0: not known (a trace recorded before, an imported one).
SAMPLE_CPU_KNOWN = 1
#: Bit 31: the thread was at work at the sample's instant (on a CPU, or runnable), so the time it spent off a CPU since
#: the sample before lies before, not at this stack (a body that slept, then computed). Unset: waiting there, or not
#: known (a trace recorded before 2026-11-30, whose µs never reached bit 31: 2^30 µs, 18 minutes on a CPU, one sample).
SAMPLE_AT_WORK = 1 << 31
_SAMPLE_CPU_MAX_US = (1 << 30) - 1


def sample_flags(on_cpu_ns: int, at_work: bool = False) -> int:
    """A sample's flags for the thread's CPU time over the time it stands for, and whether it was at work at the end."""
    on_cpu_us = min(max(0, on_cpu_ns) // 1000, _SAMPLE_CPU_MAX_US)
    return SAMPLE_CPU_KNOWN | on_cpu_us << 1 | (SAMPLE_AT_WORK if at_work else 0)


def sample_on_cpu_ns(flags: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inverse of `sample_flags`, vectorised: (whether it is known, the ns on a CPU)."""
    f = np.asarray(flags, dtype=np.uint32)
    return (f & SAMPLE_CPU_KNOWN).astype(bool), ((f >> 1) & _SAMPLE_CPU_MAX_US).astype(np.int64) * 1000


def sample_at_work(flags: np.ndarray) -> np.ndarray:
    """Whether each sample's thread was on a CPU at its instant (`SAMPLE_AT_WORK`), vectorised."""
    return (np.asarray(flags, dtype=np.uint32) & SAMPLE_AT_WORK).astype(bool)


class MemoryFlag(enum.IntFlag):
    """Flags of a MEMORY record."""

    RSS = 0
    BOUNDARY = 1  # read at a round boundary (the others are periodic samples)


EVENT_DTYPE = np.dtype(
    [
        ("start", "<i8"),  # ns in the record's clock domain
        ("end", "<i8"),  # ns; equal to start for instants
        ("value", "<i8"),  # kind-specific (bytes, RSS, round index, attrs index)
        ("corr", "<u4"),  # CUPTI correlation id; 0 when none
        ("name", "<i4"),  # index into the StringTable
        ("tid", "<i4"),  # host thread (native id), or -1
        ("stream", "<i4"),  # CUDA stream id, or -1 for host records
        ("device", "<i2"),  # CUDA device, or -1 for host records
        ("kind", "u1"),  # Kind
        ("domain", "u1"),  # Domain
        ("flags", "<u4"),  # kind-specific
    ]
)


#: A copy's devices are kept in the flags' top byte as device + 1 in 4 bits each (0: not known), so the
#: devices 0 to 14 fit; a copy recorded before there were peer copies, or by a source that does not say,
#: has 0 there, as has every copy that is not between two devices.
MAX_PEER_DEVICE = 14


def copy_flags(copy: int, src: int, dst: int, src_device: int = -1, dst_device: int = -1) -> int:
    """Pack a copy's direction, its source and destination memory kinds, and for a copy between two
    devices (`CopyKind.PTOP`) the devices it copies from and to (-1: not known; over MAX_PEER_DEVICE: not kept).

    Bits 0-7 copy kind, 8-15 source memory kind, 16-23 destination memory kind, 24-27 source device + 1,
    28-31 destination device + 1. The first three bytes mean what they meant before peer copies.
    """

    def nibble(device: int) -> int:
        return device + 1 if 0 <= device <= MAX_PEER_DEVICE else 0

    return (copy & 0xFF) | (src & 0xFF) << 8 | (dst & 0xFF) << 16 | nibble(src_device) << 24 | nibble(dst_device) << 28


def unpack_copy_flags(flags: np.ndarray | int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Inverse of `copy_flags`, vectorised: (copy kind, source kind, destination kind)."""
    f = np.asarray(flags, dtype=np.uint32)
    return f & 0xFF, (f >> 8) & 0xFF, (f >> 16) & 0xFF


def copy_devices(flags: np.ndarray | int) -> tuple[np.ndarray, np.ndarray]:
    """The devices a copy reads from and writes to, vectorised (int16, -1 where the flags do not say)."""
    f = np.asarray(flags, dtype=np.uint32)
    return ((f >> 24) & 0xF).astype(np.int16) - 1, ((f >> 28) & 0xF).astype(np.int16) - 1


def peer_copies(flags: np.ndarray) -> np.ndarray:
    """Mask of the copies from one device to another whose devices are known (MEMCPY records' flags)."""
    src, dst = copy_devices(flags)
    return (src >= 0) & (dst >= 0) & (src != dst)


def copy_direction(flags: int) -> str:
    """A copy's direction as reports show it: "HtoD", or for a peer copy its devices, "PtoP 0→1"."""
    copy = int(flags) & 0xFF
    name = CopyKind(copy).name if copy in CopyKind._value2member_map_ else "UNKNOWN"
    label = {"UNKNOWN": "copy"}.get(name, name[0] + "to" + name[3])
    src, dst = (int(x) for x in copy_devices(int(flags)))
    if src >= 0 and dst >= 0:
        return f"{label} {src}→{dst}"
    return label


class StringTable:
    """Interns names so records carry an int32, not a str."""

    def __init__(self, strings: Iterable[str] = ()) -> None:
        self._index: dict[str, int] = {}
        self.strings: list[str] = []
        for s in strings:
            self.intern(s)

    def intern(self, s: str) -> int:
        i = self._index.get(s)
        if i is None:
            i = self._index[s] = len(self.strings)
            self.strings.append(s)
        return i

    def __getitem__(self, i: int) -> str:
        return self.strings[i]

    def __len__(self) -> int:
        return len(self.strings)


@functools.lru_cache(maxsize=64)
def kind_table(kinds: tuple[int, ...]) -> np.ndarray:
    """A lookup table indexed by an event's kind (uint8), True for `kinds`: `kind_table(k)[events["kind"]]` is
    np.isin's mask at a tenth of its cost. Built once per set of kinds, and read-only."""
    table = np.zeros(256, dtype=bool)
    table[[int(k) for k in kinds]] = True
    table.flags.writeable = False
    return table


def empty_events(n: int = 0) -> np.ndarray:
    return np.zeros(n, dtype=EVENT_DTYPE)


# Copies of EVENT_DTYPE arrays go through their bytes: numpy copies a structured array field by field, through the
# dtype's cast, whichever way (.copy(), a slice assignment, np.concatenate, a boolean index), even between arrays of
# the same dtype. For 625 records (ResNet-50's warm-up drain): .copy() 26.3 against 4.5 µs as bytes, a slice
# assignment 28.8 against 2.0, np.concatenate of three parts 62.7 against 9.5 (numpy 2.4, the 2-core dev VM,
# 2026-11-28); `compress` and `take` (6-7 µs) select without that cast.


def event_bytes(events: np.ndarray) -> np.ndarray:
    """One-dimensional EVENT_DTYPE `events` as their bytes (a view where they are contiguous)."""
    if events.dtype != EVENT_DTYPE or events.ndim != 1:
        raise TypeError(f"EVENT_DTYPE records in one dimension expected, got {events.dtype} in {events.ndim}")
    return np.ascontiguousarray(events).view(np.uint8)


def copy_events(events: np.ndarray) -> np.ndarray:
    """A new array of the same records."""
    return event_bytes(events).copy().view(EVENT_DTYPE)


def concat_events(parts: list[np.ndarray]) -> np.ndarray:
    """`np.concatenate(parts)` of EVENT_DTYPE arrays (an empty array for no part)."""
    if not parts:
        return empty_events()
    return np.concatenate([event_bytes(p) for p in parts]).view(EVENT_DTYPE)


def put_events(dest: np.ndarray, at: int, events: np.ndarray) -> None:
    """`dest[at : at + len(events)] = events`, for a contiguous EVENT_DTYPE `dest` with room for them."""
    if at < 0 or at + len(events) > len(dest):
        raise IndexError(f"{len(events)} records do not fit at {at} of {len(dest)}")
    event_bytes(dest[at : at + len(events)])[:] = event_bytes(events)


def unique(a: np.ndarray) -> np.ndarray:
    """The distinct values of an array of integers (or floats without NaN), sorted, as `np.unique(a)` gives them.

    Not `np.unique` itself: numpy 2.4's plain call asks `np.ma.is_masked` first, and that first use imports
    numpy.ma, 10-30 ms once a process on the 2-core dev VM, which every profiling session paid (2026-11-28).
    """
    s = np.sort(a, axis=None)
    keep = np.ones(len(s), dtype=bool)
    np.not_equal(s[1:], s[:-1], out=keep[1:])
    return s[keep]


class RawTrace:
    """What one collection leaves for the merger: events in their own clocks, plus clock pairs.

    `clock_pairs` are (host_ns, device_ns) readings taken back to back at the start and
    end of the collection; the merger fits one clock to the other from them.
    """

    def __init__(
        self,
        events: np.ndarray,
        strings: list[str],
        attrs: list[dict[str, object]] | None = None,
        clock_pairs: list[tuple[int, int]] | None = None,
        dropped: int = 0,
        t0_ns: int = 0,
        meta: dict[str, object] | None = None,
    ) -> None:
        self.events = events
        self.strings = strings
        self.attrs = attrs or []
        self.clock_pairs = clock_pairs or []
        self.dropped = dropped
        self.t0_ns = t0_ns
        #: Collection facts that are not events: per-round counters, memory peaks, collectors.
        self.meta: dict[str, object] = meta or {}

    def arrays(self) -> dict[str, np.ndarray]:
        """The arrays a .npz file of this trace holds, by name (`save`; `reporters.npz` for a small one)."""
        import json

        def utf8(value: object) -> np.ndarray:
            # UTF-8 bytes: a numpy str array would store 4 bytes per character.
            return np.frombuffer(json.dumps(value, default=str).encode(), dtype=np.uint8)

        arrays = {"events": self.events, "strings": utf8(self.strings)}
        # No marks, no clock pairs (no GPU): no member; each empty one cost ~170 bytes of a trivial test's raw.npz.
        if self.attrs:
            arrays["attrs"] = utf8(self.attrs)
        if self.clock_pairs:
            arrays["clock_pairs"] = np.array(self.clock_pairs, dtype=np.int64).reshape(-1, 2)
        arrays["meta"] = np.array([self.dropped, self.t0_ns], dtype=np.int64)
        arrays["info"] = utf8(self.meta)
        return arrays

    def save(self, path: str | IO[bytes], compress: bool = True) -> None:
        """Write to a .npz file that `load` (and `inferscope analyze`) read back.

        Uncompressed is ~10x faster to write (a million events: ~0.1 s against ~1 s).
        """
        arrays: dict[str, Any] = self.arrays()  # Any: numpy's stubs would match a name to allow_pickle
        (np.savez_compressed if compress else np.savez)(path, **arrays)

    @classmethod
    def load(cls, path: str | IO[bytes]) -> RawTrace:
        import json

        def text(value: np.ndarray) -> str:
            # UTF-8 bytes (current), or a numpy str scalar (files written before 0.1.0 was released).
            return value.tobytes().decode() if value.dtype == np.uint8 else str(value)

        with np.load(path, allow_pickle=False) as z:
            if z["events"].dtype != EVENT_DTYPE:
                raise ValueError(f"{path}: events have layout {z['events'].dtype}, expected {EVENT_DTYPE}")
            dropped, t0 = (int(x) for x in z["meta"])
            return cls(
                events=z["events"],
                strings=json.loads(text(z["strings"])),
                attrs=json.loads(text(z["attrs"])) if "attrs" in z else [],  # left out when empty
                clock_pairs=[(int(h), int(d)) for h, d in z["clock_pairs"]] if "clock_pairs" in z else [],
                dropped=dropped,
                t0_ns=t0,
                meta=json.loads(text(z["info"])) if "info" in z else {},
            )
