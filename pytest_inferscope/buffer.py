"""The trace buffer: numpy rings of a bounded size, one per writing thread, no lock on the hot path.

Collectors write here and nowhere else. A ring starts small and doubles as it fills, up to the
buffer's size; a ring of that size that fills either wraps (the oldest events are overwritten and
counted as dropped) or, when a spill directory is given, writes its full contents to disk and
starts again, losing nothing. The dropped count always reaches the report.

Two kinds of writer do not get a thread's ring. GPU drains go to a ring of their own (named
"gpu"), so a GPU-heavy test cannot overwrite the events of the thread that stops the collection.
ROUND spans (the latency samples every check reads) go to a ring that grows instead of wrapping:
they are few, and losing one would change the verdict silently.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .events import EVENT_DTYPE, Domain, Kind, StringTable, concat_events, put_events

DEFAULT_SIZE_MB = 100
_MB = 1024 * 1024
#: Kinds never dropped: recorded in a growing ring rather than the writer's wrapping one.
KEPT_KINDS = frozenset({int(Kind.ROUND)})
_KEPT_START = 64  # the kept ring's first capacity; it doubles when full
#: A thread's (or the GPU drain's) ring's first capacity: 768 kB. The rings were made at the buffer's size (100 MB)
#: at once, and the GPU drain's first extend into its ring cost ~0.37 ms a ResNet-50 test on the H200 host (0.02 ms
#: with rings that start small, the same call, 2026-11-28, benchmarks/bench_outside_rounds.py). Why is not pinned
#: down: numpy asks for huge pages from 4 MB, but a lone event written to a fresh 100 MB array took 8.6 us there.
_RING_START = 16384
GPU_RING = "gpu"


class _Ring:
    """One thread's ring. Only its owning thread writes to it."""

    __slots__ = ("cap", "data", "dropped", "label", "pos", "spilled", "wrapped")

    def __init__(self, capacity: int, label: str) -> None:
        self.data = np.empty(capacity, dtype=EVENT_DTYPE)
        self.cap = capacity  # len(self.data)
        self.pos = 0
        self.wrapped = False
        self.dropped = 0
        self.spilled: list[Path] = []
        self.label = label

    def grow(self, limit: int | None = None, need: int = 1) -> None:
        """Double the capacity (more when `need` more events must fit), to at most `limit`, keeping every event."""
        size = max(16, 2 * self.cap, self.pos + need)
        bigger = np.empty(size if limit is None else min(limit, size), dtype=EVENT_DTYPE)
        put_events(bigger, 0, self.data[: self.pos])
        self.data, self.cap = bigger, len(bigger)

    def ordered(self) -> np.ndarray:
        if not self.wrapped:
            return self.data[: self.pos]
        return concat_events([self.data[self.pos :], self.data[: self.pos]])


class TraceBuffer:
    """Per-thread event rings of `size_mb` megabytes each.

    The seeds' interface (`enqueue(dict) -> bool`, `read_all() -> list[dict]`) is kept
    for convenience; collectors use the fast `record()` and the bulk `extend()`.
    `enqueue`/`record` return False when the event overwrote an older one.
    """

    def __init__(
        self,
        size_mb: float = DEFAULT_SIZE_MB,
        strings: StringTable | None = None,
        spill_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        if size_mb <= 0:
            raise ValueError(f"trace buffer size must be positive, got {size_mb} MB")
        self.capacity = max(16, int(size_mb * _MB) // EVENT_DTYPE.itemsize)
        self.strings = strings if strings is not None else StringTable()
        self.attrs: list[dict[str, Any]] = []
        self.spill_dir = Path(spill_dir) if spill_dir is not None else None
        self._local = threading.local()
        self._rings: list[_Ring] = []
        self._named: dict[str, _Ring] = {}
        self._lock = threading.Lock()  # taken once per new ring, never per event
        self._kept = _Ring(_KEPT_START, "rounds")
        self._kept_lock = threading.Lock()  # rounds may end on several threads; a few per test
        self._rings.append(self._kept)

    # -- writing ---------------------------------------------------------------

    def _ring(self, label: str | None = None) -> _Ring:
        ring: _Ring | None = getattr(self._local, "ring", None)
        if ring is None:
            ring = _Ring(min(self.capacity, _RING_START), label or threading.current_thread().name)
            with self._lock:
                self._rings.append(ring)
            self._local.ring = ring
        return ring

    def _named_ring(self, label: str) -> _Ring:
        """The ring of a writer that is not a thread (a GPU drain), created on first use."""
        with self._lock:
            ring = self._named.get(label)
            if ring is None:
                ring = self._named[label] = _Ring(min(self.capacity, _RING_START), label)
                self._rings.append(ring)
        return ring

    def _record_kept(self, row: tuple[int, ...]) -> None:
        with self._kept_lock:
            ring = self._kept
            if ring.pos >= ring.cap:
                ring.grow()
            ring.data[ring.pos] = row
            ring.pos += 1

    def _make_room(self, ring: _Ring, need: int = 1) -> None:
        """A full ring grows while it is smaller than the buffer's size; then it either spills to disk (nothing lost)
        or wraps (what follows overwrites the oldest)."""
        if ring.cap < self.capacity:
            ring.grow(self.capacity, need)
        elif self.spill_dir is not None:
            self._spill(ring)
        else:
            ring.pos = 0
            ring.wrapped = True

    def _spill(self, ring: _Ring) -> None:
        self.spill_dir.mkdir(parents=True, exist_ok=True)  # type: ignore[union-attr]
        fd, name = tempfile.mkstemp(prefix="inferscope-spill-", suffix=".npy", dir=self.spill_dir)
        with os.fdopen(fd, "wb") as f:
            np.save(f, ring.ordered())
        ring.spilled.append(Path(name))
        ring.pos = 0
        ring.wrapped = False

    def record(
        self,
        kind: int,
        name: int,
        start: int,
        end: int,
        value: int = 0,
        flags: int = 0,
        tid: int = -1,
        corr: int = 0,
        stream: int = -1,
        device: int = -1,
        domain: int = Domain.HOST,
    ) -> bool:
        """Append one event to the calling thread's ring (the hot path); ROUND spans are never dropped."""
        row = (start, end, value, corr, name, tid, stream, device, kind, domain, flags)
        if kind in KEPT_KINDS:
            self._record_kept(row)
            return True
        ring = self._ring()
        if ring.pos >= ring.cap:
            self._make_room(ring)
        if ring.wrapped:
            ring.dropped += 1  # this write overwrites the oldest kept event
        ring.data[ring.pos] = row
        ring.pos += 1
        return not ring.wrapped

    def enqueue(self, event: Mapping[str, Any]) -> bool:
        """Seeds' interface: a dict with at least type/kind, name and start (ns)."""
        kind = event.get("kind", event.get("type"))
        if isinstance(kind, str):
            kind = Kind[kind.upper()]
        start = int(event.get("start", event.get("start_ns", 0)))
        end = int(event.get("end", event.get("end_ns", start)))
        attrs = event.get("attrs")
        value = int(event.get("value", 0))
        if attrs is not None:
            value = len(self.attrs)
            self.attrs.append(dict(attrs))
        return self.record(
            int(kind),
            self.strings.intern(str(event.get("name", ""))),
            start,
            end,
            value=value,
            flags=int(event.get("flags", 0)),
            tid=int(event.get("tid", -1)),
            corr=int(event.get("corr", 0)),
            stream=int(event.get("stream", -1)),
            device=int(event.get("device", -1)),
            domain=int(event.get("domain", Domain.HOST)),
        )

    def add_attrs(self, attrs: Mapping[str, Any]) -> int:
        """Store free-form attributes; the index goes into a record's value."""
        self.attrs.append(dict(attrs))  # list.append is atomic under the GIL
        return len(self.attrs) - 1

    def extend(self, records: np.ndarray, ring_name: str | None = None) -> int:
        """Append an array of EVENT_DTYPE records; returns how many older events it overwrote.

        `ring_name` names a ring of its own (GPU_RING for a GPU drain); None: the calling thread's.
        """
        if records.dtype != EVENT_DTYPE:
            raise TypeError(f"extend() takes EVENT_DTYPE records, got {records.dtype}")
        ring = self._named_ring(ring_name) if ring_name is not None else self._ring()
        lost = done = 0
        n = len(records)
        while done < n:
            if ring.pos >= ring.cap:
                self._make_room(ring, n - done)
            take = min(n - done, ring.cap - ring.pos)
            if ring.wrapped:
                lost += take
            put_events(ring.data, ring.pos, records[done : done + take])
            ring.pos += take
            done += take
        ring.dropped += lost
        return lost

    # -- reading (after collection, from one thread) -----------------------------

    @property
    def dropped(self) -> int:
        return sum(r.dropped for r in self._rings)

    def __len__(self) -> int:
        n = 0
        for ring in self._rings:
            n += len(ring.data) if ring.wrapped else ring.pos
            n += sum(int(np.load(p, mmap_mode="r").shape[0]) for p in ring.spilled)
        return n

    def to_array(self) -> np.ndarray:
        """Every kept event, each ring in insertion order, rings one after another."""
        parts: list[np.ndarray] = []
        for ring in list(self._rings):
            parts.extend(np.load(p) for p in ring.spilled)
            parts.append(ring.ordered())
        return concat_events(parts)

    def read_all(self) -> list[dict[str, Any]]:
        """Seeds' interface: every kept event as a dict (slow; for tests and small traces)."""
        out = []
        for row in self.to_array():
            d = {field: row[field].item() for field in EVENT_DTYPE.names or ()}
            d["type"] = Kind(d["kind"]).name.lower()
            d["name"] = self.strings[d["name"]]
            out.append(d)
        return out

    def remove_spills(self) -> None:
        """Delete the spill files once `to_array()` has read them (the events it returned are the only copy then)."""
        for ring in self._rings:
            for p in ring.spilled:
                p.unlink(missing_ok=True)
            ring.spilled.clear()

    def clear(self) -> None:
        """Forget every event (rings stay allocated for the next test); delete spill files."""
        self.remove_spills()
        for ring in self._rings:
            ring.pos = 0
            ring.wrapped = False
            ring.dropped = 0
        self.attrs = []
