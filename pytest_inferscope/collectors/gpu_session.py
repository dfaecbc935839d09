"""The GPU backend across one collection: when it records, the launch-call switch, clock pairs, one failure policy.

The `Collection` (collectors/__init__.py) owns one `GpuSession`. It starts the backend with the
collection (or, when the measured rounds are lean, leaves it off until the rounds after them),
pauses or flushes it after the warm-up for gpu_rounds auto (collectors/gpu_rounds.py), switches the
launch-call records for the profile and trace rounds (collectors/schedule.py calls `begin_profile`
and `launch_calls` at those boundaries), takes the clock pairs, and stops and drains it into the
trace buffer. A backend that fails to start, to pause after the warm-up or to stop and drain goes
through `_fail`, the one place that decides what that does to the test.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any, Protocol

import numpy as np

from ..buffer import GPU_RING, TraceBuffer
from ..events import copy_events, host_clock_ns, unique
from ..warning import warn_once
from . import gpu_rounds
from .gpu import Choice, GpuBackendError, GpuCollector
from .gpu_rounds import (
    GpuRoundsDecision,
    busy_ns,
    decide_auto,
    no_context_setting,
    trace_setting,
    undecided,
    work_records,
)
from .link import link_meta


class _Options(Protocol):
    """What is read here of `CollectionOptions` (a protocol: the package imports this module, not back)."""

    @property
    def gpu_required(self) -> bool: ...
    @property
    def trace_rounds(self) -> int | None: ...
    @property
    def gpu_rounds(self) -> str: ...
    @property
    def lean_trace_rounds(self) -> int | None: ...
    @property
    def until_in_step(self) -> bool: ...


class GpuSession:
    """One collection's GPU backend, from the collection's start to its stop (`collector` None: none collects)."""

    def __init__(self, choice: Choice | None, buffer: TraceBuffer, options: _Options) -> None:
        self.choice = choice
        self.collector: GpuCollector | None = choice.collector if choice is not None else None  # None once failed
        self.buffer, self.options = buffer, options
        self.error = ""  # why the backend stopped collecting, for the report header
        self.recording = False  # whether CUPTI records now
        #: Whether launch calls are being recorded now, and how the collection used them (for the header).
        self.api_on = True
        self.api_note = ""
        self.decision: GpuRoundsDecision | None = None  # which rounds recorded GPU activity, and why
        self.primed = False  # lean: the first GPU operation after CUPTI's start was paid outside the rounds
        #: Lean: the warm-up rounds (their indices) that stand for the profile round, which then does not run: they
        #: recorded GPU activity as a profile round does and ran in step with the measured rounds (schedule.py).
        self.profile_warmups: list[int] = []
        #: Lean, the warm-up standing for neither: the trace rounds ran first, and the last ran in step within a profile
        #: round's allowance, so no profile round ran (schedule.py `_trace_then_profile`; the analyzer reads the trace
        #: rounds' GPU figures where there is no profile round).
        self.profile_from_trace = False
        #: auto: the warm-up recorded the launch calls too (`gpu_rounds.WARMUP_LAUNCH_CALLS`), and those of its rounds
        #: that ran in step with the measured rounds stand for the trace round, which then does not run (schedule.py).
        self.warmup_launch_calls = False
        self.trace_warmups: list[int] = []
        self._primes: list[tuple[int, int]] = []  # the primes' device-clock windows: their records are not kept
        self.clock_pairs: list[tuple[int, int]] = []
        self.dropped = 0  # records the backend could not keep, summed at each drain (a start resets its count)
        self._warm = (0, 0)  # auto: the warm-up's work records and GPU busy ns counted so far
        #: No CUDA context was active after the measured rounds: no trace round ran (None: not asked yet).
        self.no_context: bool | None = None
        self.work_kept = 0  # GPU work records (kernels, copies, memsets) kept so far
        #: auto: neither the warm-up nor the measured rounds did GPU work: no trace round ran (None: not asked yet).
        self.no_work: bool | None = None

    # -- the one failure policy -------------------------------------------------------------------

    def _fail(self, what: str, exc: Exception, starting: bool = False) -> None:
        """The backend failed `what` ("could not start", "failed while stopping", ...).

        It is dropped for the rest of the collection (stopped first, best effort, when it was
        recording: left on, it would slow the rounds and refuse the next collection's start), the
        reason kept for the report header and said once as a warning. A failed start raises
        GpuBackendError instead when GPU collection is required (INFERSCOPE_GPU=required): the test
        cannot be measured as asked. A later failure cannot undo the rounds that ran: it is said.
        """
        assert self.collector is not None
        collector, self.collector = self.collector, None
        self.error = f"{collector.name} {what}: {exc}"
        if self.recording:
            self.recording = False
            with contextlib.suppress(Exception):  # the failure that matters is the one being reported
                collector.stop()
        if starting and self.options.gpu_required:
            raise GpuBackendError(
                f"GPU collection is required but {self.error}. Close the other profiler "
                "(torch.profiler, Nsight) or run without INFERSCOPE_GPU=required."
            ) from exc
        warn_once(
            f"gpu:{what}:{exc}",
            f"inferscope: {self.error}; GPU activity is not collected for the rest of this test (CPU and memory "
            "collection continue, and the report header says why).",
        )

    # -- the collection's start and stop ----------------------------------------------------------

    def start(self) -> None:
        """At the collection's start: CUPTI starts unless the measured rounds are lean; launch calls off when asked."""
        o = self.options
        if self.collector is None:
            return
        if o.gpu_rounds == "trace" and o.lean_trace_rounds is not None:  # CUPTI starts right before the trace rounds
            self.decision = trace_setting(o.lean_trace_rounds, o.until_in_step)
            return
        if o.gpu_rounds == "auto" and o.lean_trace_rounds is not None and not self._has_context():
            # No CUDA context yet: no GPU work before the body starts one. Lean, as "trace" is: CUPTI starts after the
            # measured rounds if the body started CUDA, else never (`trace_rounds_due`); its start, switches and
            # stop (~1 ms a test on the H200 host) are not paid by a CPU-only test.
            self.decision = no_context_setting(o.lean_trace_rounds, o.until_in_step)
            return
        self._start()
        self.warmup_launch_calls = self.recording and self._warmup_traces()
        if self.recording and o.trace_rounds is not None and not self.warmup_launch_calls:
            self._launch_calls_off()
        if self.recording and o.gpu_rounds == "auto":
            self._prime_unrecorded()  # so that the warm-up can stand for a profile round (schedule.py)

    def _warmup_traces(self) -> bool:
        """Whether auto's warm-up records the launch calls, so that it may stand for the trace round: where the number
        of trace rounds is not given (`until_in_step`) and the backend can switch them off for the measured rounds."""
        o = self.options
        can_switch = getattr(self.collector, "set_api_records", None) is not None
        traced = o.trace_rounds is not None  # else (`all`) the launch calls are recorded in every round anyway
        return o.gpu_rounds == "auto" and o.until_in_step and traced and can_switch and gpu_rounds.WARMUP_LAUNCH_CALLS

    def _start(self) -> None:
        """Start the backend (every kind recorded, launch calls too) and take a clock pair."""
        assert self.collector is not None
        try:
            self.collector.start()
            self.recording, self.api_on = True, True
            self.clock_pair()
        except Exception as exc:
            self._fail("could not start", exc, starting=True)

    def stop(self) -> None:
        """At the collection's stop: the backend stopped and its records kept (nothing once it failed)."""
        if self.collector is not None:
            try:
                self._stop()
            except Exception as exc:
                self._fail("failed while stopping", exc)

    def _stop(self) -> tuple[int, int]:
        """Synchronise, take a clock pair, stop the backend and keep its records.

        Returns the GPU work records' count and the time the GPU was busy with them (ns).
        """
        assert self.collector is not None
        if self.recording:
            self.collector.synchronize()
            self.clock_pair()
            self.recording = False
            self.collector.stop()
        return self._keep_records()

    def _keep_records(self) -> tuple[int, int]:
        """Drain the backend into the GPU ring; the work records' count and GPU busy time (ns)."""
        assert self.collector is not None
        records, names = self.collector.drain()
        self.dropped += self.collector.dropped()
        if len(records):
            # a copy of its own to rename (the backend's may be read-only), without the primes' records (events.py:
            # numpy's copies of records go field by field; compress does not)
            records = records.compress(~self._in_primes(records)) if self._primes else copy_events(records)
        if len(records):
            records["name"] = self._trace_names(names, records["name"])
            self.buffer.extend(records, GPU_RING)  # not the stopping thread's ring: its events would be overwritten
        work = work_records(records) if len(records) else 0
        self.work_kept += work
        return (work, busy_ns(records)) if work else (0, 0)

    def _trace_names(self, names: list[str], ids: np.ndarray) -> np.ndarray:
        """The backend's name ids `ids` as this trace's. Only the names they use are interned: the backend keeps every
        name the process has met (a suite's kernels), and interning them all put every earlier test's kernel names in
        each test's trace, and cost each drain a look-up per name."""
        used = unique(ids)
        table = np.zeros(len(names), dtype=np.int32)
        intern = self.buffer.strings.intern
        table[used] = [intern(names[i]) for i in used.tolist()]
        return table[ids]

    def meta(self, after_measured_ran: bool) -> dict[str, Any]:
        """The raw trace's GPU meta: the link, and `gpu_rounds` ("trace" when only the rounds after the
        measured ones recorded GPU activity: the analyzer reads it) with the decision."""
        out = link_meta(getattr(self.collector, "bus_ids", []))
        ran = after_measured_ran or bool(self.profile_warmups)  # rounds after the measured ones, or warm-ups for them
        if self.decision is not None:
            mode = "trace" if self.lean and ran else "measured"
            out.update(gpu_rounds=mode, gpu_rounds_decision=self.decision.to_json())
        if self.profile_warmups and self.lean and ran:
            out["profile_warmups"] = list(self.profile_warmups)  # the analyzer reads them as profile rounds
        if self.trace_warmups and (ran or not self.lean):
            out["trace_warmups"] = list(self.trace_warmups)  # ... and these as trace rounds
        return out

    # -- between the rounds -------------------------------------------------------------------------

    @property
    def lean(self) -> bool:
        """Whether the measured rounds ran (or run) without GPU activity records."""
        return self.collector is not None and self.decision is not None and self.decision.mode == "trace"

    def after_warmup(self, warm_ns: list[int], allow_more: bool = False) -> bool:
        """gpu_rounds auto: after the warm-up rounds (`warm_ns`: their wall times), whether the measured rounds
        record GPU activity. False (only with `allow_more`, once): one warm-up round left the decision open
        (`gpu_rounds.undecided`); run one more, with CUPTI recording, and ask again.

        The warm-up's records are flushed and counted (`gpu_rounds.decide_auto`). Lean: the backend
        stops until the rounds after the measured ones. Measured: it goes on recording, never stopped,
        since the first call after CUPTI starts again is slow; a backend that cannot flush while
        recording is stopped to count and started again (with the launch calls off). The launch calls are
        switched on when the decision says so (no trace round then), and the GPU is primed: the first measured
        round after the flush ran 1.4-5.3 ms slower than the rest on GPT-2 forward (H200, 2026-11-28).
        """
        o = self.options
        if o.gpu_rounds != "auto" or self.collector is None or not self.recording or o.lean_trace_rounds is None:
            return True
        if not warm_ns:
            self.decision = decide_auto(0, [], o.lean_trace_rounds, until_in_step=o.until_in_step)
            return True
        flush = getattr(self.collector, "flush", None)
        try:
            n, busy = self._stop() if flush is None else self._flush_kept(flush)
            n, busy = n + self._warm[0], busy + self._warm[1]
            one_round = allow_more and flush is not None and len(warm_ns) == 1
            if one_round and undecided(n, warm_ns[0], busy, o.until_in_step):
                self._warm = (n, busy)
                return False
            self.decision = decide_auto(
                n, warm_ns, o.lean_trace_rounds, busy // len(warm_ns), until_in_step=o.until_in_step
            )
            if self._warm != (0, 0):
                extra = " (one more warm-up round ran: the first, mostly first-time work, left the decision open)"
                self.decision = dataclasses.replace(self.decision, reason=self.decision.reason + extra)
            if self.decision.mode == "trace" and self.recording:
                self._stop()
        except Exception as exc:
            self._fail("failed while pausing after the warm-up", exc)
            return True
        if self.decision.mode == "measured" and not self.recording:
            self.collector.synchronize()
            self._start()
            if self.collector is not None and o.trace_rounds is not None and not self.decision.launch_calls:
                self._launch_calls_off()
        if self.decision.mode == "measured" and self.recording:
            self._measured_from_here()
        return True

    def _measured_from_here(self) -> None:
        """auto, measured: the launch calls on when the decision records them in the measured rounds; then the prime.
        Switching them on failed: they stay off and the trace round runs, as the decision without them would. Left on
        by the warm-up (`warmup_launch_calls`) where the decision does not record them: off."""
        assert self.collector is not None and self.decision is not None
        if not self.decision.launch_calls and self.api_on and self.warmup_launch_calls:
            self._launch_calls_off()
        elif self.decision.launch_calls and not self.api_on:
            try:
                self.launch_calls(True)
            except Exception as exc:
                self.decision = dataclasses.replace(
                    self.decision,
                    launch_calls=False,
                    reason=f"{self.decision.reason}; switching the launch calls on failed ({exc}), so they are "
                    "recorded in the trace round after the measured ones",
                )
        self._prime()

    def trace_rounds_due(self) -> int:
        """How many trace rounds (lean: profile rounds) run after the measured ones: none without GPU collection,
        with trace_rounds `all`, with the launch calls on throughout, when no CUDA context was active after
        the measured rounds (`no_context`), or when auto's warm-up and measured rounds did no GPU work (`_no_work`)."""
        o = self.options
        if self.lean and o.lean_trace_rounds is not None:
            n = o.lean_trace_rounds
        elif self.collector is None or o.trace_rounds is None or self.api_on:
            return 0
        else:
            n = o.trace_rounds
        return n if n and not self._no_context() and not self._no_work() else 0

    def _no_context(self) -> bool:
        """Whether no CUDA context is active in the process, asked once, after the measured rounds: then the body did
        no GPU work (a CPU-only test on a GPU machine), and a trace round would only call it once more, with the
        launch calls switched on and off around it (~1 ms a test on the H200 host), to record nothing."""
        if self.no_context is None:
            self.no_context = not self._has_context()
        return self.no_context

    def _no_work(self) -> bool:
        """auto, the number of trace rounds not given: whether neither the warm-up nor the measured rounds did GPU work,
        asked once, after the measured rounds (their records flushed and kept here). A CPU-only test in a process where
        CUDA is up (an earlier test's) had a trace round that called it once more to link no GPU work to its launches:
        151 ms for the example project's pipeline test on the H200 host (2026-11-29)."""
        if self.no_work is None:
            o, flush = self.options, getattr(self.collector, "flush", None)
            self.no_work = False
            if o.gpu_rounds == "auto" and o.until_in_step and self.recording and not self.work_kept and flush:
                try:
                    self._flush_kept(flush)
                except Exception as exc:
                    self._fail("failed while flushing after the measured rounds", exc)
                    return True  # no backend left to trace with
                self.no_work = not self.work_kept
        return self.no_work

    def _flush_kept(self, flush: Callable[[], None]) -> tuple[int, int]:
        """Wait for the GPU, `flush` the backend's records and keep them: their count and GPU busy time (ns)."""
        assert self.collector is not None
        self.collector.synchronize()
        flush()
        return self._keep_records()

    def _has_context(self) -> bool:
        """The backend's `has_context`; True where it has none or it failed (CUPTI then runs as it always did)."""
        has = getattr(self.collector, "has_context", None)
        if has is None:
            return True
        try:
            return bool(has())
        except Exception:
            return True

    def begin_profile(self, launch_calls: bool = False) -> bool:
        """Lean, after the measured rounds: CUPTI starts, launch calls off if asked; False: it could not start.

        Launch calls off first: the profile rounds record GPU activity as measured rounds do by default,
        so their host is not slowed by the launch-call records (+6-9% on small bodies). `launch_calls`: left on,
        for the trace rounds that follow at once (a warm-up without the launch calls stood for the profile round;
        two switches of ~0.2 ms fewer).
        """
        self._start()
        if self.collector is None:
            return False
        if self.options.trace_rounds is not None and not launch_calls:
            self._launch_calls_off()
        self.primed = self._prime()
        return True

    def _prime(self) -> bool:
        """The backend's `prime` (the first GPU operation's cost under CUPTI paid outside any round); False when
        it has none, it failed, or the warm-up did no GPU work: the schedule then runs a settling round.

        Only after a warm-up that did GPU work (auto gone lean): the prime's memset is a GPU record, and in the
        timeline of a body without GPU work it would read as GPU activity (`GpuContext.collected`) and move the
        diagnosis off the CPU (the example's tokenizer lost its cpu_bound class that way, H100 2026-11-25)."""
        decision = self.decision
        if decision is None or not decision.records_per_round:
            return False
        return self._prime_unrecorded()

    def _prime_unrecorded(self) -> bool:
        """The backend's `prime`, its records left out of the trace: the prime's memset, kept, would read as GPU work
        in the timeline of a body that does none (`GpuContext.collected`: the example's tokenizer lost its cpu_bound
        class that way, H100 2026-11-25). Its window on the device clock, from before the prime to after it (the
        prime synchronises), is remembered and every record inside it dropped at the drain (`_in_primes`); GPU work
        of another thread in those microseconds would go with it. False when the backend has no prime, or it failed.
        """
        assert self.collector is not None
        prime = getattr(self.collector, "prime", None)
        if prime is None:
            return False
        try:
            d0 = self.collector.timestamp()
            primed = bool(prime())
            self._primes.append((d0, self.collector.timestamp()))
            return primed
        except Exception:
            return False

    def _in_primes(self, records: np.ndarray) -> np.ndarray:
        """Mask of the records that lie inside a prime's window (`_prime_unrecorded`)."""
        inside = np.zeros(len(records), dtype=bool)
        for d0, d1 in self._primes:
            inside |= (records["start"] >= d0) & (records["end"] <= d1)
        return inside

    def synchronize(self) -> bool:
        """Wait for all GPU work of the process; False when no CUDA context was active (nothing to wait for)."""
        assert self.collector is not None
        return self.collector.synchronize()

    def round_clock_pair(self) -> None:
        """After a round, while recording: a clock pair. With only the start and stop pairs the fit's
        residual is always 0 and proves nothing; with these it shows how well the clocks agree."""
        if self.collector is not None and self.recording:
            with contextlib.suppress(Exception):  # the start and stop pairs remain
                self.clock_pair()

    # -- helpers --------------------------------------------------------------------------------------

    def _launch_calls_off(self) -> None:
        """Launch-call records off; when that fails they stay on throughout, said in the header."""
        try:
            self.launch_calls(False)
        except Exception as exc:
            self.api_on = True
            self.api_note = f"launch calls recorded in every round (switching them off failed: {exc})"

    def switch_launch_calls(self, on: bool) -> bool:
        """`launch_calls(on)` around the trace rounds; when the backend fails to switch, the header says so,
        it is said once, and False: the trace rounds are skipped (the GPU activity recorded stays)."""
        try:
            self.launch_calls(on)
            return True
        except Exception as exc:
            state = "on" if on else "off"
            self.api_note = f"launch calls not switched {state} around the trace rounds ({exc})"
            then = (
                "no trace round ran: launches, syncs and idle causes are not analysed" if on else "the trace rounds ran"
            )
            warn_once(
                f"gpu:launch-calls:{exc}",
                f"inferscope: the GPU backend could not switch its launch-call records {state} ({exc}); {then}. "
                "The report header says so.",
            )
            return False

    def launch_calls(self, on: bool) -> None:
        """Launch-call records on or off (both backends' `set_api_records`); a backend without it keeps them on."""
        assert self.collector is not None
        switch = getattr(self.collector, "set_api_records", None)
        if switch is None:
            self.api_note = "launch calls recorded in every round (this backend cannot switch them off)"
            return
        switch(on)
        self.api_on = on

    def clock_pair(self) -> None:
        """The tightest of three back-to-back (host, device) readings."""
        assert self.collector is not None
        best: tuple[int, int, int] | None = None
        for _ in range(3):
            h0 = host_clock_ns()
            d = self.collector.timestamp()
            h1 = host_clock_ns()
            if best is None or h1 - h0 < best[0]:
                best = (h1 - h0, (h0 + h1) // 2, d)
        assert best is not None
        self.clock_pairs.append((best[1], best[2]))
