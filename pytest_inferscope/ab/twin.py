"""The twin: a second pytest process that runs the same tests at the other side, one round when told.

Parent side: `Twin` starts it (in this session; it ignores Ctrl-C, and the parent ends it), reads
its "ready" line after collection and drives it. Twin side:
`TwinServer`, registered in the twin by the session when INFERSCOPE_AB_TWIN is set, replaces
pytest's run loop with a loop over the parent's commands:

    parent -> twin   {"cmd": "run", "nodeid", "core", "next"} | {"cmd": "round", "index", "warmup"}
                     | {"cmd": "end", "after"} | {"cmd": "finish"} | {"cmd": "exit"}
    twin -> parent   {"type": "ready", "nodeids", "errors", "foreign", "usage", "warned"} | {"type": "started"}
                     | {"type": "round", "ms", "wait_ms", "cpu_ms"} | {"type": "error", "error"}
                     | {"type": "result", ..., "warned"}
                     | {"type": "bye", "warned"}

"next": the node id of the test the parent runs after this one (none: the last), for which the twin keeps the
fixtures the two share, as pytest does (`TwinServer._run`). "warned": the InferscopeWarnings the twin raised since
its last message, each once: its output goes to a log the parent removes, so the parent says them (controller.py).
"finish", at the parent's session end: the twin ends its session and, in its pytest_unconfigure, says "bye" with the
warnings of its session's end (`Twin.finish`).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import signal
import sys
import time
import traceback
import warnings
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..rounds import RoundKind
from ..warning import InferscopeWarning
from .channel import ENV, Channel, ChannelClosed
from .nodeids import Spec, files_for_ids, named

if TYPE_CHECKING:
    from ..collectors import Collection
    from ..results import TestResult

ENV_PACKAGES = "INFERSCOPE_AB_PACKAGES"  # "tree|name,name": packages the twin must import from tree


def twin_channel() -> Channel | None:
    """In the twin: the channel to the parent; None in any other process."""
    fds = os.environ.get(ENV)
    if not fds:
        return None
    r, w = (int(x) for x in fds.split(","))
    return Channel(r, w)


class TwinServer:
    """Twin side: serves the parent's commands instead of pytest's own run loop."""

    def __init__(self, channel: Channel, plans: Mapping[str, Any], results: Sequence[TestResult]) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent handles Ctrl-C and ends this process
        self.channel = channel
        self._plans, self._results = plans, results  # the session's, filled as the run goes
        self.errors: list[str] = []
        self.plans: set[str] = set()
        self.failure = self.skipped = ""
        self._specs: list[Spec] = []  # the tests named by node id (nodeids.py)
        self._whole: list[Path] = []  # the files and folders named whole
        self.warned: list[str] = []  # this side's InferscopeWarnings, each once
        self._told = 0  # how many of them the parent was sent
        self.finishing = False  # the parent said "finish": "bye" at pytest_unconfigure
        self._last = ""  # the node id of the last test run, whose shared fixtures may still be set up
        self._next_index = 0  # the index of the round after the last one the parent asked for
        self._after = True  # whether the parent's "end" asked for the rounds after the measured ones

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection(self, session: pytest.Session) -> None:
        """The files of the tests named by node id collected whole (the ref may lack a test: nodeids.py)."""
        config = session.config
        if config.option.pyargs:
            return
        here = config.invocation_params.dir
        self._whole = [(here / arg).resolve() for arg in config.args if "::" not in arg]
        config.args[:], self._specs = files_for_ids(config.args, here)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        """Of those files' tests, the ones named (before the session's plans are made of the items)."""
        if not self._specs:
            return
        kept = [named(item.path, item.nodeid, self._specs, self._whole) for item in items]
        if not all(kept):
            config.hook.pytest_deselected(items=[item for item, k in zip(items, kept, strict=True) if not k])
            items[:] = [item for item, k in zip(items, kept, strict=True) if k]

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            last = (report.longreprtext.strip().splitlines() or ["failed"])[-1].removeprefix("E").strip()
            self.errors.append(f"{report.nodeid or 'collection'} ({last})")

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        nodeids = sorted(self._plans)
        # Called in a `finally`: a usage error on its way out (an argument pytest cannot collect), and this process
        # exits after this line with nothing to show for it.
        raised = sys.exc_info()[1]
        usage = " ".join(str(raised).split()) if isinstance(raised, pytest.UsageError) else ""
        self.channel.send(
            type="ready", nodeids=nodeids, errors=self.errors, foreign=foreign_imports(), usage=usage,
            warned=self._untold(),
        )  # fmt: skip

    def pytest_warning_recorded(self, warning_message: warnings.WarningMessage) -> None:
        """An InferscopeWarning of this side (an extension that failed at this version, say): kept for the parent."""
        text = str(warning_message.message)
        if issubclass(warning_message.category, InferscopeWarning) and text not in self.warned:
            self.warned.append(text)

    def _untold(self) -> list[str]:
        """The warnings the parent was not sent yet."""
        new, self._told = self.warned[self._told :], len(self.warned)
        return new

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> bool:
        if session.testsfailed and not session.config.option.continue_on_collection_errors:
            return True  # the ready line carried the errors; the parent stops the run
        items = {item.nodeid: item for item in session.items}
        while True:
            try:
                msg = self.channel.recv()
            except ChannelClosed:
                return True  # the parent is gone: stop
            self.finishing = msg.get("cmd") == "finish"
            if msg.get("cmd") != "run":
                self._settle(session, None)  # the fixtures kept for a test that never came
                return True
            self._run(session, items.get(str(msg.get("nodeid"))), items.get(str(msg.get("next"))), msg)
            if self.finishing:  # said during the test's rounds
                self._settle(session, None)
                return True

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        """The warnings of this session's end (recorded by now: pytest's warnings plugin wraps pytest_sessionfinish and
        pytest_terminal_summary), sent to a parent that asked for them."""
        if self.finishing:
            with contextlib.suppress(ChannelClosed):
                self.channel.send(type="bye", warned=self._untold())

    def _run(self, session: pytest.Session, item: pytest.Item | None, nextitem: pytest.Item | None,
             msg: dict[str, Any]) -> None:  # fmt: skip
        """One test, its fixtures kept for `nextitem` as pytest keeps them here: the test the parent runs next.

        The parent may never ask for that one (it skips or fails in its setup there, or is not profiled): the next
        test asked for first tears down what it does not share with this one (`_settle`)."""
        if item is None:
            self.channel.send(type="result", missing=True, warned=self._untold())
            return
        self.core = msg.get("core")
        self.failure = self.skipped = ""
        self._settle(session, item)
        item.ihook.pytest_runtest_protocol(item=item, nextitem=nextitem if nextitem is not item else None)
        self._last = item.nodeid
        result = next((r for r in reversed(self._results) if r.nodeid == item.nodeid), None)
        metrics = result.analysis.metrics if result is not None else {}
        self.channel.send(
            type="result", error=self.failure, skipped=self.skipped, metrics=metrics, foreign=foreign_imports(),
            warned=self._untold(),
        )  # fmt: skip

    def _settle(self, session: pytest.Session, item: pytest.Item | None) -> None:
        """Tear down the fixtures the last test kept that `item` does not use (all of them for None), as pytest would
        have at that test's end had it known which test came next. A failure there is said as this side's warning:
        no test of the parent's is that teardown's. Through pytest's SetupState, which has no public way in; a pytest
        without it keeps every fixture until the session ends."""
        teardown = getattr(getattr(session, "_setupstate", None), "teardown_exact", None)
        if teardown is None:
            return
        try:
            teardown(item)
        except (KeyboardInterrupt, SystemExit):
            raise
        except BaseException as exc:
            last = (traceback.format_exception_only(type(exc), exc) or [""])[-1].strip()
            before = f"before {item.nodeid}" if item is not None else "at the session's end"
            self.warned.append(
                f"inferscope: the fixtures {self._last} left set up failed in their teardown {before} at this side: "
                f"{last}"
            )

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.failed and not self.failure:
            self.failure = f"{report.when} failed: " + (report.longreprtext.strip().splitlines() or [""])[-1]
        elif report.skipped and not self.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr or "")
            self.skipped = reason.removeprefix("Skipped: ") or "skipped"

    def run_test(self, nodeid: str, coll: Collection, body: Callable[[], Any], plan: Any) -> Any:
        """The rounds of one test, each when the parent says; pinned to the parent's core meanwhile."""
        result = None
        with pinned(self.core), quiet_heap():
            for index, kind in self._rounds_asked(coll):
                result = None  # let go before the call, as schedule.run does
                clocks = core_clocks(coll)
                try:
                    with coll.round(index, kind):
                        result = body()
                except BaseException as exc:
                    self._failed(exc)
                    raise
                self._round_done(coll, clocks)
            if self._rounds_after(coll):
                traced = coll.run_trace_rounds(body, self._next_index)
                result = result if traced is None else traced[0]
        return result

    async def run_test_async(self, nodeid: str, coll: Collection, body: Callable[[], Awaitable[Any]], plan: Any) -> Any:
        """`run_test` for an `async def` test: each round awaited in the event loop that awaits the test."""
        result = None
        with pinned(self.core), quiet_heap():
            for index, kind in self._rounds_asked(coll):
                result = None
                clocks = core_clocks(coll)
                try:
                    with coll.round(index, kind):
                        result = await body()
                except BaseException as exc:
                    self._failed(exc)
                    raise
                self._round_done(coll, clocks)
            if self._rounds_after(coll):
                traced = await coll.run_trace_rounds_async(body, self._next_index)
                result = result if traced is None else traced[0]
        return result

    def _rounds_after(self, coll: Collection) -> bool:
        """Whether to run the rounds after the measured ones, alone, once the parent ended the pairs: it runs its own
        (lockstep), and the GPU figures and the deterministic metrics of a lean test are read from them. Without
        them a lean test's twin read 0 kernel launches a round (its measured rounds record none), and every such
        test failed on `kernel_launches 0 → N` (an H200, 2026-11-30). Not when the parent is finishing the session,
        nor when this side's test ended first, nor when the body's own profile() took over."""
        return coll.running and not self.finishing and self._after

    def _rounds_asked(self, coll: Collection) -> Iterator[tuple[int, RoundKind]]:
        """The rounds the parent asks for, in turn, until it says the test ended."""
        self.channel.send(type="started")
        while True:
            msg = self.channel.recv()
            if msg.get("cmd") != "round":
                self.finishing = msg.get("cmd") == "finish"
                self._after = bool(msg.get("after", True))  # False: it ended on the other side first (_end_others)
                return
            warmup = bool(msg.get("warmup"))
            self._next_index = int(msg["index"]) + 1
            if not warmup and msg.get("first"):
                coll.after_warmup()
            coll.unchain()  # the parent's round ran since this side's last: not this side's next round's time
            yield int(msg["index"]), RoundKind.WARMUP if warmup else RoundKind.MEASURED

    def _round_done(self, coll: Collection, clocks: tuple[int, int]) -> None:
        """The round's ms, and its ms waiting for the pinned core and on it (paired.py: a busy core)."""
        last = coll.last_round
        wait, cpu = (b - a for a, b in zip(clocks, core_clocks(coll), strict=True))
        ms = float(last["wall_ns"]) / 1e6 if last else math.nan
        self.channel.send(type="round", ms=ms, wait_ms=wait / 1e6, cpu_ms=cpu / 1e6)

    def _failed(self, exc: BaseException) -> None:
        skipped = str(exc.msg) if isinstance(exc, pytest.skip.Exception) else ""  # pytest.skip() in the body
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self.channel.send(type="error", error=error, skipped=skipped)


def core_clocks(coll: Collection) -> tuple[int, int]:
    """This thread's ns runnable but waiting for a core (schedstat) and ns on a CPU, read before and after a round.

    Read around the round, not taken from the round's counter row, whose span reaches back over the other side's round
    when rounds chain (`Collection._counters_before`). The CPU time is what a preemption leaves out of a round's wall
    time (paired.py: a busy pinned core). The schedstat file is the collection's, kept open on the thread that runs
    the rounds (`memory.ProcFiles`), so no file is opened right before the body.
    """
    if coll.proc is not None:
        return coll.proc.runqueue_ns(), time.thread_time_ns()
    from ..collectors.memory import read_schedstat  # here: the collectors package (numpy) loads only when a test runs

    return read_schedstat()[1], time.thread_time_ns()


@contextlib.contextmanager
def pinned(core: int | None) -> Any:
    """This thread on one CPU core for the block, its previous cores restored afterwards."""
    if core is None or not hasattr(os, "sched_setaffinity"):
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {int(core)})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


@contextlib.contextmanager
def quiet_heap() -> Any:
    """The objects alive before the rounds out of the garbage collector's way while they run.

    The two processes' heaps differ (this side holds pytest's reports and every result so far), and
    a full collection walks the whole heap: unchecked, the bigger side's rounds would pay more for
    the same garbage. gc.freeze() moves what exists now to the permanent generation, so a collection
    during the rounds costs both sides what their bodies allocate.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def foreign_imports() -> list[str]:
    """In the twin: the checkout's packages it imported from anywhere but the worktree (e.g. site-packages)."""
    spec = os.environ.get(ENV_PACKAGES, "")
    tree, _, names = spec.partition("|")
    if not tree or not names:
        return []
    out = []
    for name in names.split(","):
        mod = sys.modules.get(name)
        where = getattr(mod, "__file__", None)
        if where and not Path(where).resolve().is_relative_to(Path(tree).resolve()):
            out.append(f"{name} from {where}")
    return out
