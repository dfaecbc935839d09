"""Collection: starts the CPU, GPU and memory collectors around a body, runs its rounds, and
hands the merger a `RawTrace`.

The one piece of process-wide state is the active collection, so that
`pytest_inferscope.scope()` and `mark_event()` can be called from anywhere (the test
body, a library, another thread) without a handle. Outside a collection they cost a
function call and record nothing.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from ..buffer import TraceBuffer
from ..events import Kind, MemoryFlag, RawTrace, host_clock_ns
from ..options import sampler_in_use
from ..results import CollectorInfo
from ..rounds import RAISED_FLAG, RoundKind, kind_flags, row_kind
from ..stackbase import fresh_chunk
from . import pygc
from .autograd import AutogradNodes, node_counter
from .compiles import CompileLog
from .cpu import Sampler, SamplerThread
from .cpu_tick import SignalSampler
from .devsync import DeviceSync
from .gpu import Choice, GpuBackendError, GpuCollector
from .gpu_session import GpuSession
from .memory import Counters, MemoryCollector, ProcFiles
from .modules import ModuleTracker
from .nesting import busy, current_task
from .schedule import RoundSchedule, Steadying, after_measured, after_measured_async, run, run_async
from .threads import OtherThreads
from .tracer import Tracer

if TYPE_CHECKING:
    import numpy as np

R = TypeVar("R")

_active: Collection | None = None
#: Held while a collection checks that none is running and takes the place: two threads starting at once would both
#: see none, and each record the other's scopes and marks (they go to the one active collection).
_starting = threading.Lock()


def active() -> Collection | None:
    """The collection currently running in this process, if any."""
    return _active


@dataclass(frozen=True)
class CollectionOptions:
    """How to collect; resolved from the settings and the marker by the caller."""

    cpu: str = "sample"  # sample | trace | off
    sample_interval_ms: float = 10.0
    sampler: str = "thread"  # thread | pending | signal (cpu_tick.SignalSampler, where it can) | auto (sampler_in_use)
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
    #: The profile rounds (lean) and the trace rounds end at the first in step with the measured rounds
    #: (rounds.in_step), up to `lean_trace_rounds` and rounds.TRACE_ROUNDS_MAX; False: exactly as many as
    #: given (the user gave the number).
    until_in_step: bool = False


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

    __slots__ = ("_before", "_coll", "_index", "_kind", "_nodes", "_start")

    def __init__(self, coll: Collection, index: int, kind: RoundKind) -> None:
        self._coll, self._index, self._kind = coll, index, kind
        self._start = 0
        self._before: Counters | None = None
        self._nodes: AutogradNodes | None = None

    def __enter__(self) -> None:
        if self._coll.gpu is None:
            self._coll._devsync.prepare()  # the loader's look, when one is due, before the round's time
        self._before = self._coll._counters_before()
        if self._coll.tracer is not None:
            self._coll.tracer.arm()
        if self._kind is RoundKind.MEASURED and (nodes := self._coll.autograd_nodes()) is not None:
            self._nodes = nodes
            nodes.enter()  # outside the round's clock (collectors/autograd.py)
        self._start = host_clock_ns()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # The clock first: whatever runs right after a body is slow for a while (its caches taken by the body: a
        # method call took 0.9 µs after a 0.75 ms Python body against 0.2 hot), and is not the body's time.
        body_end = host_clock_ns()
        if self._coll.tracer is not None:
            self._coll.tracer.disarm()
        if self._nodes is not None:
            self._nodes.exit()
        assert self._before is not None
        self._coll._end_round(self._index, self._kind, exc_type is not None, self._start, self._before, body_end)


class Collection:
    """One profiled body: `start()`, then `round()`s, `scope()`s and `mark()`s, then `stop()`."""

    def __init__(
        self,
        options: CollectionOptions,
        gpu: Choice | None = None,
        name: str = "test",
        sampler_thread: SamplerThread | None = None,
    ) -> None:
        """`sampler_thread`: a parked thread for the stack sampler (a session's); None: a thread of its own."""
        self.options = options
        self._sampler_thread = sampler_thread
        self.name = name
        self.buffer = TraceBuffer(size_mb=options.trace_size_mb, spill_dir=options.trace_spill)
        #: The GPU backend across the collection: its start, pauses, launch-call switches, clock pairs, stop.
        self.gpu_session = GpuSession(gpu, self.buffer, options)
        self.memory = MemoryCollector()
        self.compiles: CompileLog | None = None  # torch.compile's compilations, read at the start and the stop
        self.proc: ProcFiles | None = None  # open while collecting, on the thread that started
        self._threads: OtherThreads | None = None  # the other threads' CPU, Python threads' apart from native ones
        self.gc: pygc.GcClock | None = None  # times the test thread's garbage collections while collecting
        self._autograd: AutogradNodes | None = None  # the nodes autograd made in the measured rounds, once torch is in
        self._devsync = DeviceSync()  # the end-of-round wait when no GPU backend collects
        self._after: tuple[int, Counters] | None = None  # the last round's end counters, and when they were read
        self._events: np.ndarray | None = None  # what the first stop() read from the buffer
        self.sampler: Sampler | None = None
        self.sampler_note = ""  # why the signal sampler asked for could not be used (the thread's sampled instead)
        self.tracer: Tracer | None = None
        self.modules: ModuleTracker | None = None
        self.modules_note = "off"
        self.rounds: list[dict[str, Any]] = []
        #: Each round's end (index, flags, start, end, device wait's start, RSS, thread), for the buffer at the stop.
        self._ends: list[tuple[int, int, int, int, int, int, int]] = []
        self.t0 = 0
        self.t_end = 0
        #: The collectors' start before `t0` and their stop after `t_end` (ns): the collection's own time outside
        #: the TEST span, for the plugin's cost in the result (postprocess.added_time).
        self.start_ns = 0
        self.stop_ns = 0
        self._running = False
        self.thread = threading.get_ident()  # the thread that runs it: another thread's start is refused
        self.task: object = None  # the asyncio task that started it, if one did (another task's start is refused)
        #: The speed probe's readings around the measured rounds, when they were made up for (drift.measure_steady).
        self.probe_ms: list[float] = []

    # -- lifecycle -------------------------------------------------------------

    def start(self) -> None:
        global _active
        self.thread, self.task = threading.get_ident(), current_task()
        with _starting:
            running = _active
            if running is None:
                _active = self  # taken before the collectors start: another thread's start is refused from here on
        if running is not None:
            raise RuntimeError(busy(self.name, running))
        try:
            self._start()
        except BaseException:
            _active = None
            raise

    def _start(self) -> None:
        entered = host_clock_ns()
        tid = threading.get_native_id()
        self.memory.start()
        self.compiles = CompileLog()
        try:
            self.gpu_session.start()
        except GpuBackendError:  # required, and it could not start: the test fails here
            self.memory.stop(0)
            raise
        if self.options.cpu == "sample":
            interval, ident = self.options.sample_interval_ms, threading.get_ident()
            kind = sampler_in_use(self.options.sampler)
            unavailable = SignalSampler.unavailable(kind) if kind in ("pending", "signal") else None
            if unavailable == "":
                self.sampler = SignalSampler(self.buffer, interval, ident, tid, kind)
            else:
                self.sampler_note = unavailable or ""
                self.sampler = Sampler(self.buffer, interval, ident, tid, self._sampler_thread)
        elif self.options.cpu == "trace":
            self.tracer = Tracer(self.buffer, tid)
        if self.options.modules > 0:
            tracker = ModuleTracker(self.buffer, self.options.modules)
            if tracker.start():
                self.modules, self.modules_note = tracker, f"torch.nn.Module forwards to depth {self.options.modules}"
            else:
                self.modules_note = "asked for, but torch was not imported (or too old for global module hooks)"
        self.gc = pygc.start()
        self.proc = ProcFiles()
        self._threads = OtherThreads(tid)
        self._running = True
        self.t0 = host_clock_ns()
        self.start_ns = self.t0 - entered
        if self.sampler is not None:
            self.sampler.start()
        elif self._sampler_thread is not None:
            self._sampler_thread.quiet()  # no ticks of the session's sampler thread during these rounds
        if self.tracer is not None:
            self.tracer.start()

    @property
    def gpu(self) -> GpuCollector | None:
        """The GPU backend collecting now (None: none was chosen, or it failed: `gpu_session.error` says why)."""
        return self.gpu_session.collector

    def after_warmup(self, allow_more: bool = False) -> bool:
        """gpu_rounds auto: after the warm-up rounds, whether the measured rounds record GPU activity. False (with
        `allow_more`): one more warm-up round first (`GpuSession.after_warmup`)."""
        warm = [int(r["wall_ns"]) for r in self.rounds if row_kind(r) is RoundKind.WARMUP]
        return self.gpu_session.after_warmup(warm, allow_more)

    def stop(self) -> RawTrace:
        """Stop every collector (idempotent) and return what was collected."""
        global _active
        running = self._running
        if running:
            self.t_end = host_clock_ns()
            if self.modules is not None:
                self.modules.stop()  # spans still open close inside the test
            if self.tracer is not None:
                self.tracer.stop()
            if self.sampler is not None:
                self.sampler.stop()
            self._record_round_ends()
            self.buffer.record(
                Kind.TEST, self.buffer.strings.intern(self.name), self.t0, self.t_end, tid=threading.get_native_id()
            )
            self.gpu_session.stop()
            if self.proc is not None:
                self.proc.close()
            if self.gc is not None:
                pygc.stop(self.gc)
            self._devsync.release()
            _active = None
            self._running = False
        meta = {
            "rounds": self.rounds,
            "memory": self.memory.stop((self.sampler.rss_peak or None) if self.sampler else None),  # None: no reading
            "wall_ns": self.t_end - self.t0,
            "sampler": self._sampler_meta(),
            "torch_threads": _torch_threads(),
            "other_threads": self._threads.stop() if self._threads is not None else None,
            "cpu_affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
            **self.gpu_session.meta(any(row_kind(r).after_measured for r in self.rounds)),
            "probe_ms": list(self.probe_ms),  # the speed probe around the measured rounds, when it ran
            "torch_compile": self.compiles.stop(self.t0) if self.compiles is not None else {},
            "autograd": self._autograd.meta() if self._autograd is not None else None,
            "collectors": [c.to_dict() for c in self.collectors_info()],
        }
        if running or self._events is None:  # a later stop() returns the same events: the spills are gone by then
            self._events = self.buffer.to_array()
            self.buffer.remove_spills()  # read: left in the user's spill folder, they would pile up run after run
        events = self._events
        if running:
            self.stop_ns = host_clock_ns() - self.t_end
        meta.update(start_ns=self.start_ns, stop_ns=self.stop_ns)
        return RawTrace(
            events=events,
            strings=list(self.buffer.strings.strings),
            attrs=list(self.buffer.attrs),
            clock_pairs=self.gpu_session.clock_pairs,
            dropped=self.buffer.dropped + self.gpu_session.dropped,
            t0_ns=self.t0,
            meta=meta,
        )

    def _sampler_meta(self) -> dict[str, Any]:
        if self.sampler is not None:
            # Which sampler, its interval and the GIL's switch interval: why no sample fell in a round (the report's
            # CPU hotspots say it: analyzer/context.py, CpuView.no_samples_reason).
            # The in-thread sampler's pending calls before 3.13 wait for a GIL switch, or a nudge (`nudges` of them).
            tick = self.sampler if isinstance(self.sampler, SignalSampler) else None
            nudged = {"nudges": tick.nudges} if tick is not None and tick.nudged else {}
            return {"samples": self.sampler.samples, "cost_ns": self.sampler.cost_ns,
                    "kind": "thread" if tick is None else tick.kind, **nudged,
                    "interval_ms": self.options.sample_interval_ms,
                    "switch_interval_ms": sys.getswitchinterval() * 1000}  # fmt: skip
        if self.tracer is not None:
            return {
                "calls": self.tracer.calls,
                "hook_calls": self.tracer.hook_calls,
                "per_call_ns": Tracer.per_call_ns(),
            }
        return {}

    # -- inside the body -------------------------------------------------------

    def autograd_nodes(self) -> AutogradNodes | None:
        """The measured rounds' autograd node count (collectors/autograd.py); None until torch is imported."""
        if self._autograd is None and (counter := node_counter()) is not None:
            self._autograd = AutogradNodes(counter)
        return self._autograd

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

    def _end_round(
        self, index: int, kind: RoundKind, raised: bool, start: int, before: Counters, body_end: int
    ) -> None:
        """`body_end`: the clock read first thing after the body; the round ends there unless a device wait followed."""
        if not self._running:
            return  # stopped inside the body (a nested profile took over): nothing more is recorded
        # Wait for the round's GPU work (it must not leak into the next round) and record the
        # wait, so the analyzer can tell a host spinning in a sync from a host doing work.
        wait0 = host_clock_ns()
        # Without GPU collection, GPU work (any framework's) must not leak into the next round either. Nothing that
        # could hold GPU work (no libcuda, no context: a CPU-only test, on a GPU machine too): the round ended with
        # the body, and the look and the harness before it (~10 µs right after a 0.75 ms Python body on the 2-core
        # VM; ~1.1 µs a warm round on an H200 host, ~7 µs a trivial test's one round) are not its time.
        waited = self.gpu.synchronize() if self.gpu is not None else self._devsync()
        end = host_clock_ns() if waited else body_end
        self.gpu_session.round_clock_pair()
        after = Counters.now(self.proc)
        self._after = (host_clock_ns(), after)
        flags = kind_flags(kind) | (RAISED_FLAG if raised else 0)
        self._ends.append((index, flags, start, end, wait0, after.rss, threading.get_native_id()))
        row: dict[str, Any] = {**before.delta(after), "index": index, "kind": kind.name, "raised": raised}
        # The counters span more than the timed round (their own reading, the clock pair): kept as span_ns,
        # so the analyzer reads their times as shares of that span, not of the shorter round.
        row.update(span_ns=row["wall_ns"], start_ns=start - self.t0, wall_ns=end - start, sync_ns=max(0, end - wait0))
        self.rounds.append(row)

    def _record_round_ends(self) -> None:
        """Each round's span, its end-of-round device wait and its RSS at the end, into the buffer: written at the stop,
        not between the rounds, where the interning and three writes ran cold right after a body (~50 µs a round
        on the 2-core VM against ~5 warm, bench_outside_rounds.py; the gaps between rounds are the test's time)."""
        intern, record = self.buffer.strings.intern, self.buffer.record
        for index, flags, start, end, wait0, rss, tid in self._ends:
            if end - wait0 > 1_000:
                record(Kind.WAIT, intern("device synchronize (end of round)"), wait0, end, tid=tid)
            record(Kind.ROUND, intern(f"round {index}"), start, end, value=index, flags=flags, tid=tid)
            record(Kind.MEMORY, 0, end, end, value=rss, flags=MemoryFlag.BOUNDARY, tid=tid)
        self._ends.clear()

    def _counters_before(self) -> Counters:
        """The counters a round starts from: the previous round's end counters when it ended just now.

        Reading procfs right before the body slows the body (bench_round_cost.py, on the H200), so
        back-to-back rounds share one reading; after a pause (user code between rounds, through the
        fixture) the counters are read afresh, so the pause is not charged to the round.
        """
        if self._after is not None and host_clock_ns() - self._after[0] < CHAIN_COUNTERS_NS:
            return self._after[1]
        return Counters.now(self.proc)

    def unchain(self) -> None:
        """The next round reads its counters afresh, not from the last round's end: something not the test's ran
        since (the other side's round under A/B), which a chained row's span and run-queue wait would take in."""
        self._after = None

    def run_rounds(self, body: Callable[[], R], rounds: int, warmup: int, steady: Steadying | None = None) -> R:
        """The test's rounds (`schedule.run`): warm-up, measured (made up for when `steady`), after them; run from
        a fresh chunk of the frame stack (`stackbase.fresh_chunk`), so how deep the test was called does not move
        its body across the end of one."""
        return fresh_chunk(run, self, body, RoundSchedule(rounds, warmup, steady))

    async def run_rounds_async(
        self, body: Callable[[], Awaitable[R]], rounds: int, warmup: int, steady: Steadying | None = None
    ) -> R | None:
        """An `async def` test's rounds (`schedule.run_async`): warm-up and measured only."""
        return await run_async(self, body, RoundSchedule(rounds, warmup, steady))

    def trace_rounds_due(self) -> int:
        """How many trace rounds (lean: profile rounds) this collection runs: none without GPU collection or `all`."""
        return self.gpu_session.trace_rounds_due() if self._running else 0

    def run_trace_rounds(self, body: Callable[[], R], first_index: int) -> tuple[R] | None:
        """After the measured rounds: the settling, profile and trace rounds (`schedule.after_measured`)."""
        return after_measured(self, body, first_index)

    async def run_trace_rounds_async(self, body: Callable[[], Awaitable[R]], first_index: int) -> tuple[R] | None:
        """`run_trace_rounds` for an `async def` body, each round awaited."""
        return await after_measured_async(self, body, first_index)

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
