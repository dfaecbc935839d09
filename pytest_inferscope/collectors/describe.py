"""The report header's description of a collection: which collectors ran, in which mode, at what cost."""

from __future__ import annotations

from typing import Any, Protocol

from ..results import CollectorInfo
from ..rounds import RoundKind, row_kind
from .cpu import Sampler
from .cpu_tick import SignalSampler
from .gpu_rounds import NO_CONTEXT_AT_START
from .gpu_session import GpuSession
from .memory import MemoryCollector
from .tracer import Tracer


class _Options(Protocol):
    """What is read here of `CollectionOptions`."""

    @property
    def sample_interval_ms(self) -> float: ...
    @property
    def modules(self) -> int: ...
    @property
    def trace_rounds(self) -> int | None: ...


class Described(Protocol):
    """What is read here of a `Collection`: a protocol, so that this module does not import the package
    that imports it (no import cycle)."""

    t0: int
    t_end: int
    sampler: Sampler | None
    sampler_note: str
    tracer: Tracer | None
    gpu_session: GpuSession
    modules_note: str
    memory: MemoryCollector
    rounds: list[dict[str, Any]]

    @property
    def options(self) -> _Options: ...


def collectors_info(self: Described) -> list[CollectorInfo]:
    """The CPU, GPU and memory collectors' modes and overheads, for the report header."""
    wall = max(1, self.t_end - self.t0)
    cpu: CollectorInfo
    if self.sampler is not None:
        # A thread holding the GIL (pure Python) lets the sampler in only every few ms: say so.
        effective = wall / 1e6 / self.sampler.samples if self.sampler.samples else float("inf")
        n = self.sampler.samples
        got = f"; {n} sample{'s' if n != 1 else ''}, one per {effective:.1f} ms" if n else ""
        how = " in the test thread" if isinstance(self.sampler, SignalSampler) else ""
        if isinstance(self.sampler, SignalSampler) and self.sampler.nudges:
            # pure Python held the pending calls back (before CPython 3.13): each of these cost a GIL hand-over
            got += f", {self.sampler.nudges} after a GIL hand-over"
        cpu = CollectorInfo(
            "cpu",
            True,
            f"stack sampling every {self.options.sample_interval_ms:g} ms{how}{got}",
            reason=f"sampled by a thread, not by the test thread: {self.sampler_note}" if self.sampler_note else "",
            overhead=self.sampler.cost_ns / wall,
        )
    elif self.tracer is not None:
        cpu = CollectorInfo(
            "cpu",
            True,
            "full call tracing (sys.setprofile)",
            overhead=self.tracer.hook_calls * Tracer.per_call_ns() / wall,
        )
    else:
        cpu = CollectorInfo(
            "cpu", True, "scopes and rounds only", reason="sampling off (--inferscope-cpu=off)", overhead=0.0
        )
    session = self.gpu_session
    if session.collector is not None:
        backend = session.collector
        gpu = CollectorInfo("gpu", True, f"{backend.name} CUPTI ({backend.version()}); {_api_mode(self)}")
    else:
        reason = session.error or (session.choice.describe() if session.choice else "GPU collection not set up")
        gpu = CollectorInfo("gpu", False, "none", reason=reason.removeprefix("not collected (").removesuffix(")"))
    if self.options.modules > 0:
        cpu.mode += f"; modules: {self.modules_note}"
    mem = CollectorInfo("memory", True, self.memory.mode())
    return [cpu, gpu, mem]


def _api_mode(self: Described) -> str:
    """Which rounds recorded the launch calls, for the report header."""
    session = self.gpu_session
    decided = session.decision
    if session.no_context or session.no_work:
        note = "no trace round: " + (
            "no CUDA context was active after the measured rounds (the body did no GPU work)"
            if session.no_context
            else "neither the warm-up nor the measured rounds did GPU work (a launch call would link to nothing)"
        )
        if decided is not None and session.no_context and decided.reason.startswith(NO_CONTEXT_AT_START):
            # No context before or after (a CPU-only test on a GPU machine): what CUPTI would have done is moot
            return f"{NO_CONTEXT_AT_START}: CUPTI never started; {note}"
        return f"{decided.reason}; {note}" if decided is not None else note
    stood = [name for name, idx in (("profile", session.profile_warmups), ("trace", session.trace_warmups)) if idx]
    if decided is not None and session.lean:
        if stood:
            return f"{decided.reason}; the warm-up ran in step with the measured rounds and stood for the " + (
                "profile and trace rounds: no round ran after the measured ones"
                if len(stood) == 2
                else f"{stood[0]} round"
            )
        if session.profile_from_trace:
            return (
                f"{decided.reason}; the trace round ran first and, in step with the measured rounds, stood for the "
                "profile round"
            )
        return decided.reason
    if session.api_note:
        note = session.api_note
    elif decided is not None and decided.launch_calls:
        return decided.reason
    elif stood:
        note = "the warm-up recorded the launch calls and, in step with the measured rounds, stood for the trace round"
    elif self.options.trace_rounds is None:
        note = "launch calls recorded in every round"
    else:
        traced = sum(1 for r in self.rounds if row_kind(r) is RoundKind.TRACE)
        note = (
            f"launch calls recorded only in the {traced} trace round{'s' if traced != 1 else ''} after the measured "
            "ones (--inferscope-trace-rounds)"
        )
    return f"{decided.reason}; {note}" if decided is not None else note
