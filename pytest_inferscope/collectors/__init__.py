"""Collection: starts the CPU, GPU and memory collectors around a body, runs its rounds, and
hands the merger a `RawTrace`.

The one piece of process-wide state is the active collection, so that
`pytest_inferscope.scope()` and `mark_event()` can be called from anywhere (the test
body, a library, another thread) without a handle. Outside a collection they cost a
function call and record nothing.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import TracebackType
from typing import Any, TypeVar

from ..buffer import GPU_RING, TraceBuffer
from ..events import Kind, MemoryFlag, RawTrace, host_clock_ns
from ..results import CollectorInfo
from ..rounds import RoundKind, kind_flags, row_kind
from ..warning import warn_once
from .cpu import Sampler, Tracer
from .devsync import DeviceSync
from .gpu import Choice, GpuBackendError
from .gpu_rounds import GpuRoundsDecision, busy_ns, decide_auto, trace_setting, work_records
from .link import link_meta
from .memory import Counters, MemoryCollector, ProcFiles
from .modules import ModuleTracker
from .schedule import RoundSchedule, Steadying, after_measured, run

R = TypeVar("R")
RAISED_FLAG = 2  # a span whose body raised

_active: Collection | None = None


def active() -> Collection | None:
    """The collection currently running in this process, if any."""
    return _active


@dataclass(frozen=True)
class CollectionOptions:
    """How to collect; resolved from the settings and the marker by the caller."""

    cpu: str = "sample"  # sample | trace | off
    sample_interval_ms: float = 10.0
    trace_size_mb: float = 100.0
    trace_spill: str | None = None
    gpu_required: bool = False
    modules: int = 0  # torch.nn.Module depth to record; 0 = off
    #: Launch calls (RUNTIME/DRIVER records) only in this many trace rounds after the measured ones,
    #: which run without them; None: recorded throughout (every round, no trace round).
    trace_rounds: int | None = None
    #: Which rounds record GPU activity: measured | trace | auto (collectors/gpu_rounds.py).
    gpu_rounds: str = "measured"
    #: Trace rounds when only they record GPU activity (trace, or auto gone lean); None: never lean.
    lean_trace_rounds: int | None = None


class _Scope:
    """A user scope; records one SCOPE span when it exits (also when the body raises)."""

    __slots__ = ("_coll", "_name", "_start")

    def __init__(self, coll: Collection, name: str) -> None:
        self._coll = coll
        self._name = coll.buffer.strings.intern(name)
        self._start = 0

    def __enter__(self) -> _Scope:
        self._start = host_clock_ns()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._coll.buffer.record(
            Kind.SCOPE,
            self._name,
            self._start,
            host_clock_ns(),
            flags=RAISED_FLAG if exc_type is not None else 0,
            tid=threading.get_native_id(),
        )


#: Rounds that start within this long of the previous round's end take its end counters as their start.
CHAIN_COUNTERS_NS = 1_000_000


class _Round:
    """The context of one round (a class, not a generator, so its frames count as the harness's)."""

    __slots__ = ("_before", "_coll", "_index", "_kind", "_start")

    def __init__(self, coll: Collection, index: int, kind: RoundKind) -> None:
        self._coll, self._index, self._kind = coll, index, kind
        self._start = 0
        self._before: Counters | None = None

    def __enter__(self) -> None:
        self._before = self._coll._counters_before()
        self._start = host_clock_ns()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._before is not None
        self._coll._end_round(self._index, self._kind, exc_type is not None, self._start, self._before)


class Collection:
    """One profiled body: `start()`, then `round()`s, `scope()`s and `mark()`s, then `stop()`."""

    def __init__(self, options: CollectionOptions, gpu: Choice | None = None, name: str = "test") -> None:
        self.options = options
        self.name = name
        self.buffer = TraceBuffer(size_mb=options.trace_size_mb, spill_dir=options.trace_spill)
        self.gpu_choice = gpu
        self.gpu = gpu.collector if gpu is not None else None
        self.gpu_error = ""
        self.memory = MemoryCollector()
        self.proc: ProcFiles | None = None  # open while collecting, on the thread that started
        self._devsync = DeviceSync()  # the end-of-round wait when no GPU backend collects
        self._after: tuple[int, Counters] | None = None  # the last round's end counters, and when they were read
        self.sampler: Sampler | None = None
        self.tracer: Tracer | None = None
        self.modules: ModuleTracker | None = None
        self.modules_note = "off"
        self.rounds: list[dict[str, Any]] = []
        self.clock_pairs: list[tuple[int, int]] = []
        self.t0 = 0
        self.t_end = 0
        self._running = False
        #: Whether launch calls are being recorded now, and how the collection used them (for the header).
        self.api_on = True
        self.api_note = ""
        #: Whether CUPTI records now; which rounds recorded GPU activity, and why (gpu_rounds.py).
        self.gpu_recording = False
        self.gpu_rounds: GpuRoundsDecision | None = None
        self._gpu_dropped = 0  # dropped by collections paused before the last one (a start resets the count)
        #: The speed probe's readings around the measured rounds, when they were made up for (drift.measure_steady).
        self.probe_ms: list[float] = []

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        global _active
        if _active is not None:
            raise RuntimeError(
                f"a collection ({_active.name!r}) is already running in this process; "
                "profiles cannot nest (use scope() inside the running one)"
            )
        tid = threading.get_native_id()
        self.memory.start()
        lean = self.options.gpu_rounds == "trace" and self.options.lean_trace_rounds is not None
        if self.gpu is not None and lean:  # CUPTI starts right before the trace rounds
            assert self.options.lean_trace_rounds is not None
            self.gpu_rounds = trace_setting(self.options.lean_trace_rounds)
        elif self.gpu is not None:
            self.start_gpu(stopping_memory=True)
        if self.gpu is not None and self.gpu_recording and self.options.trace_rounds is not None:
            try:
                self.api_records(False)
            except Exception as exc:  # then recorded throughout, as before trace rounds: said in the header
                self.api_on = True
                self.api_note = f"launch calls recorded in every round (switching them off failed: {exc})"
        if self.options.cpu == "sample":
            self.sampler = Sampler(self.buffer, self.options.sample_interval_ms, threading.get_ident(), tid)
        elif self.options.cpu == "trace":
            self.tracer = Tracer(self.buffer, tid)
        if self.options.modules > 0:
            tracker = ModuleTracker(self.buffer, self.options.modules)
            if tracker.start():
                self.modules, self.modules_note = tracker, f"torch.nn.Module forwards to depth {self.options.modules}"
            else:
                self.modules_note = "asked for, but torch was not imported (or too old for global module hooks)"
        self.proc = ProcFiles()
        _active = self
        self._running = True
        self.t0 = host_clock_ns()
        if self.sampler is not None:
            self.sampler.start()
        if self.tracer is not None:
            self.tracer.start()

    def start_gpu(self, stopping_memory: bool = False) -> None:
        """Start the GPU backend (and take a clock pair); a failure degrades to CPU-only, said once."""
        assert self.gpu is not None
        try:
            self.gpu.start()
            self.gpu_recording = True
            self._clock_pair()
        except Exception as exc:  # any backend failure degrades to CPU-only, said once
            self.gpu_error = f"{self.gpu.name} could not start: {exc}"
            self.gpu, self.gpu_recording = None, False
            if not self.options.gpu_required:
                warn_once(
                    f"gpu-start:{exc}",
                    f"inferscope: {self.gpu_error}; GPU activity is not collected for this test (CPU and "
                    "memory collection continue, and the report says why).",
                )
            if self.options.gpu_required:
                if stopping_memory:
                    self.memory.stop(0)
                raise GpuBackendError(
                    f"GPU collection is required but {self.gpu_error}. Close the other profiler "
                    "(torch.profiler, Nsight) or run without INFERSCOPE_GPU=required."
                ) from exc

    def _stop_gpu(self) -> tuple[int, int]:
        """Synchronise, take a clock pair, stop the backend and keep its records.

        Returns the GPU work records' count and the time the GPU was busy with them (ns).
        """
        assert self.gpu is not None
        if self.gpu_recording:
            self.gpu.synchronize()
            self._clock_pair()
            self.gpu_recording = False
            self.gpu.stop()
        return self._keep_gpu_records()

    def _keep_gpu_records(self) -> tuple[int, int]:
        """Drain the backend into the GPU ring; the work records' count and GPU busy time (ns)."""
        assert self.gpu is not None
        records, names = self.gpu.drain()
        self._gpu_dropped += self.gpu.dropped()
        if len(records):
            records = records.copy()
            records["name"] = self.buffer.strings.remap(names)[records["name"]]
            self.buffer.extend(records, GPU_RING)  # not the stopping thread's ring: its events would be overwritten
        return (work_records(records), busy_ns(records)) if len(records) else (0, 0)

    def after_warmup(self) -> None:
        """gpu_rounds auto: after the warm-up rounds, whether the measured rounds record GPU activity.

        The warm-up's records are flushed and counted (`gpu_rounds.decide_auto`). Lean: the backend
        stops until the rounds after the measured ones. Measured: it goes on recording, never stopped,
        since the first call after CUPTI starts again is slow; a backend that cannot flush while
        recording is stopped to count and started again (with the launch calls off).
        """
        o = self.options
        if o.gpu_rounds != "auto" or self.gpu is None or not self.gpu_recording or o.lean_trace_rounds is None:
            return
        warm = [int(r["wall_ns"]) for r in self.rounds if row_kind(r) is RoundKind.WARMUP]
        if not warm:
            self.gpu_rounds = decide_auto(0, [], o.lean_trace_rounds)
            return
        flush = getattr(self.gpu, "flush", None)
        try:
            if flush is None:
                n, busy = self._stop_gpu()
            else:
                self.gpu.synchronize()
                flush()
                n, busy = self._keep_gpu_records()
            self.gpu_rounds = decide_auto(n, warm, o.lean_trace_rounds, busy // len(warm))
            if self.gpu_rounds.mode == "trace" and self.gpu_recording:
                self._stop_gpu()
        except Exception as exc:
            self.gpu_error = f"{self.gpu.name} failed while pausing after the warm-up: {exc}"
            self.gpu = None
            return
        if self.gpu_rounds.mode == "measured" and not self.gpu_recording:
            self.gpu.synchronize()
            self.start_gpu()
            if self.gpu is not None and o.trace_rounds is not None:
                with contextlib.suppress(Exception):  # then recorded throughout, said in the header
                    self.api_records(False)

    @property
    def lean(self) -> bool:
        """Whether the measured rounds ran (or run) without GPU activity records."""
        return self.gpu is not None and self.gpu_rounds is not None and self.gpu_rounds.mode == "trace"

    def stop(self) -> RawTrace:
        """Stop every collector (idempotent) and return what was collected."""
        global _active
        if self._running:
            self.t_end = host_clock_ns()
            if self.modules is not None:
                self.modules.stop()  # spans still open close inside the test
            if self.tracer is not None:
                self.tracer.stop()
            if self.sampler is not None:
                self.sampler.stop()
            self.buffer.record(
                Kind.TEST, self.buffer.strings.intern(self.name), self.t0, self.t_end, tid=threading.get_native_id()
            )
            if self.gpu is not None:
                try:
                    self._stop_gpu()
                except Exception as exc:
                    self.gpu_error = f"{self.gpu.name} failed while stopping: {exc}"
            if self.proc is not None:
                self.proc.close()
            self._devsync.release()
            _active = None
            self._running = False
        return RawTrace(
            events=self.buffer.to_array(),
            strings=list(self.buffer.strings.strings),
            attrs=list(self.buffer.attrs),
            clock_pairs=self.clock_pairs,
            dropped=self.buffer.dropped + self._gpu_dropped,
            t0_ns=self.t0,
            meta={
                "rounds": self.rounds,
                "memory": self.memory.stop(self.sampler.rss_peak if self.sampler else 0),
                "wall_ns": self.t_end - self.t0,
                "sampler": self._sampler_meta(),
                "torch_threads": _torch_threads(),
                "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
                **link_meta(getattr(self.gpu, "bus_ids", [])),
                **self._gpu_rounds_meta(),
                "probe_ms": list(self.probe_ms),  # the speed probe around the measured rounds, when it ran
                "collectors": [c.to_dict() for c in self.collectors_info()],
            },
        )

    def _gpu_rounds_meta(self) -> dict[str, Any]:
        """`gpu_rounds`: "trace" when only the trace rounds recorded GPU activity (the analyzer reads it)."""
        if self.gpu_rounds is None:
            return {}
        traced = any(row_kind(r).after_measured for r in self.rounds)
        mode = "trace" if self.lean and traced else "measured"
        return {"gpu_rounds": mode, "gpu_rounds_decision": self.gpu_rounds.to_json()}

    def api_records(self, on: bool) -> None:
        """Launch-call records on or off (both backends' `set_api_records`); a backend without it keeps them on."""
        assert self.gpu is not None
        switch = getattr(self.gpu, "set_api_records", None)
        if switch is None:
            self.api_note = "launch calls recorded in every round (this backend cannot switch them off)"
            return
        switch(on)
        self.api_on = on

    def _clock_pair(self) -> None:
        """The tightest of three back-to-back (host, device) readings."""
        assert self.gpu is not None
        best: tuple[int, int, int] | None = None
        for _ in range(3):
            h0 = host_clock_ns()
            d = self.gpu.timestamp()
            h1 = host_clock_ns()
            if best is None or h1 - h0 < best[0]:
                best = (h1 - h0, (h0 + h1) // 2, d)
        assert best is not None
        self.clock_pairs.append((best[1], best[2]))

    def _sampler_meta(self) -> dict[str, Any]:
        if self.sampler is not None:
            return {"samples": self.sampler.samples, "cost_ns": self.sampler.cost_ns}
        if self.tracer is not None:
            return {
                "calls": self.tracer.calls,
                "hook_calls": self.tracer.hook_calls,
                "per_call_ns": Tracer.per_call_ns(),
            }
        return {}

    # -- inside the body -------------------------------------------------------

    def round(self, index: int, kind: RoundKind = RoundKind.MEASURED) -> _Round:
        """One call of the body: a ROUND span of its `kind`, the device synchronised before it ends, counters kept.

        Only MEASURED rounds are latency samples; the counters of the rounds after them (settling,
        profile, trace) are left out of the measured rounds' (rounds.RoundKind).
        """
        return _Round(self, index, kind)

    @property
    def running(self) -> bool:
        """Between `start()` and `stop()` (a nested profile that took over stops it inside the body)."""
        return self._running

    @property
    def last_round(self) -> dict[str, Any] | None:
        """The last round's counter row (its `wall_ns`, and `sync_ns`: the end-of-round device wait)."""
        return self.rounds[-1] if self.rounds else None

    def _end_round(self, index: int, kind: RoundKind, raised: bool, start: int, before: Counters) -> None:
        if not self._running:
            return  # stopped inside the body (a nested profile took over): nothing more is recorded
        # Wait for the round's GPU work (it must not leak into the next round) and record the
        # wait, so the analyzer can tell a host spinning in a sync from a host doing work.
        wait0 = host_clock_ns()
        if self.gpu is not None:
            self.gpu.synchronize()
        else:  # not collecting GPU activity, but GPU work (any framework's) must not leak into the next round
            self._devsync()
        end = host_clock_ns()
        if self.gpu is not None and self.gpu_recording:
            # A reading every round: with only the start and stop pairs the fit's residual is
            # always 0 and proves nothing; with these it shows how well the clocks agree.
            with contextlib.suppress(Exception):  # the start and stop pairs remain
                self._clock_pair()
        after = Counters.now(self.proc)
        self._after = (host_clock_ns(), after)
        tid = threading.get_native_id()
        strings = self.buffer.strings
        if end - wait0 > 1_000:
            self.buffer.record(Kind.WAIT, strings.intern("device synchronize (end of round)"), wait0, end, tid=tid)
        flags = kind_flags(kind) | (RAISED_FLAG if raised else 0)
        self.buffer.record(Kind.ROUND, strings.intern(f"round {index}"), start, end, value=index, flags=flags, tid=tid)
        self.buffer.record(Kind.MEMORY, 0, end, end, value=after.rss, flags=MemoryFlag.BOUNDARY, tid=tid)
        row: dict[str, Any] = {**before.delta(after), "index": index, "kind": kind.name, "raised": raised}
        row.update(start_ns=start - self.t0, wall_ns=end - start, sync_ns=end - wait0)
        self.rounds.append(row)

    def _counters_before(self) -> Counters:
        """The counters a round starts from: the previous round's end counters when it ended just now.

        Reading procfs right before the body slows the body (bench_round_cost.py, on the H200), so
        back-to-back rounds share one reading; after a pause (user code between rounds, through the
        fixture) the counters are read afresh, so the pause is not charged to the round.
        """
        if self._after is not None and host_clock_ns() - self._after[0] < CHAIN_COUNTERS_NS:
            return self._after[1]
        return Counters.now(self.proc)

    def run_rounds(self, body: Callable[[], R], rounds: int, warmup: int, steady: Steadying | None = None) -> R:
        """The test's rounds (`schedule.run`): warm-up, measured (made up for when `steady`), after them."""
        return run(self, body, RoundSchedule(rounds, warmup, steady))

    def trace_rounds_due(self) -> int:
        """How many trace rounds (lean: profile rounds) this collection runs: none without GPU collection or `all`."""
        if not self._running:
            return 0
        if self.lean and self.options.lean_trace_rounds is not None:
            return self.options.lean_trace_rounds
        if self.gpu is None or self.options.trace_rounds is None or self.api_on:
            return 0
        return self.options.trace_rounds

    def run_trace_rounds(self, body: Callable[[], R], first_index: int) -> tuple[R] | None:
        """After the measured rounds: the settling, profile and trace rounds (`schedule.after_measured`)."""
        return after_measured(self, body, first_index)

    def scope(self, name: str) -> _Scope:
        return _Scope(self, name)

    def mark(self, name: str, attrs: dict[str, Any]) -> None:
        t = host_clock_ns()
        value = self.buffer.add_attrs(attrs) if attrs else -1
        self.buffer.record(
            Kind.MARK, self.buffer.strings.intern(name), t, t, value=value, tid=threading.get_native_id()
        )

    # -- description -------------------------------------------------------------

    def collectors_info(self) -> list[CollectorInfo]:
        """What each collector did, for the report header (collectors/describe.py)."""
        from .describe import collectors_info

        return collectors_info(self)


def _torch_threads() -> int | None:
    """torch's intra-op thread count, when the body uses torch (never imports it)."""
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else None


def scope(name: str) -> AbstractContextManager[Any]:
    """A named scope in the running collection; a no-op outside one."""
    coll = _active
    return coll.scope(name) if coll is not None else nullcontext()


def mark_event(name: str, **attrs: Any) -> None:
    """An instant event with attributes in the running collection; a no-op outside one."""
    coll = _active
    if coll is not None:
        coll.mark(name, attrs)
