"""xdist support: workers profile their own tests; the controller gathers their results as plain data.

Registered only when pytest-xdist is present. A worker sends each result as JSON text (`TestResult.to_wire`) with the
test's call report (`WorkerHooks`), and all of them again in `workeroutput` as its session ends, which replace the ones
sent before (a report file that could not be written, a reports_ms added after the report); the controller rebuilds
them here and writes the one summary and index. A worker that dies (`os._exit`, a segfault, pytest-timeout's thread
method) sends no `workeroutput`: the results it sent with its reports stay.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .results import TestResult
    from .session import InferscopeSession

_FAILED_BY_US = ("inferscope.verdict", "fail")  # a JUnit property (reporters/junit.py), sent with the report
#: The attribute of a call report that carries its test's result from a worker (taken off again by the controller).
_WIRE = "inferscope_result"
#: The attribute of a profiled test's setup report: [rounds, warm-up] of its plan (a crash's result says them).
_PLANNED = "inferscope_planned"


def register(config: pytest.Config, session: InferscopeSession) -> None:
    """The controller's hooks, or a worker's."""
    worker = hasattr(config, "workerinput")
    config.pluginmanager.register(WorkerHooks(session) if worker else XdistHooks(session), "inferscope-session-xdist")


class WorkerHooks:
    """A worker's: which tests it profiles, said with their setup reports (a test it dies in has no other), and each
    result, sent with its test's call report (pytest serialises a report's attributes for xdist)."""

    def __init__(self, session: InferscopeSession) -> None:
        self.session = session

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        results = self.session.results
        before = results[-1] if results else None
        rep = yield  # (registered after the session: its report wrapper, which makes the result, ran inside this one)
        if call.when == "setup" and (plan := self.session.plans.get(item.nodeid)) is not None:
            setattr(rep, _PLANNED, [plan.rounds, plan.warmup])
        elif call.when == "call" and results and results[-1] is not before and results[-1].nodeid == item.nodeid:
            setattr(rep, _WIRE, results[-1].to_wire())
        return rep


class XdistHooks:
    """Controller-side hooks of pytest-xdist."""

    def __init__(self, session: InferscopeSession) -> None:
        self.session = session
        self.sent: dict[str, set[str]] = {}  # by worker: the tests whose results came with their reports
        self.running: dict[str, tuple[int, int]] = {}  # profiled tests set up and not torn down: rounds, warm-up

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        from .results import TestResult, keep_last_run

        output = getattr(node, "workeroutput", None) or {}  # none from a worker that died
        if "inferscope_results" in output:  # its final results replace those sent with the reports
            sent = self.sent.pop(_worker(node), set())
            self.session.results[:] = [r for r in self.session.results if r.nodeid not in sent]
        for d in output.get("inferscope_results", []):
            result = TestResult.from_wire(d)
            keep_last_run(self.session.results, result)
            self.session.baselines.note_environment_change(result)  # the summary line the workers cannot write
        for note in getattr(node, "workeroutput", {}).get("inferscope_ab_notes", []):
            if note not in self.session.notes:  # every worker sees the tests removed since the ref: said once
                self.session.notes.append(note)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """The result a worker sent with the report, taken off it (JUnit XML, a report log see the report without it);
        a test a worker's plugin failed comes back with its reason as text; pytest reads its one-line forms (pytest
        8's short summary reason, `--tb=line`'s line) from a failure's `reprcrash`, so it gets one again here
        (`failure_longrepr`)."""
        if (wire := report.__dict__.pop(_WIRE, None)) is not None:
            from .results import TestResult, keep_last_run

            result = TestResult.from_wire(wire)
            keep_last_run(self.session.results, result)  # (pytest-rerunfailures: the run before it goes)
            self.session.baselines.note_environment_change(result)
            self.sent.setdefault(_worker(getattr(report, "node", None)), set()).add(result.nodeid)
        if (planned := report.__dict__.pop(_PLANNED, None)) is not None:
            self.running[report.nodeid] = (int(planned[0]), int(planned[1]))
        elif report.when == "teardown":
            self.running.pop(report.nodeid, None)
        elif report.when == "???" and report.nodeid in self.running:  # xdist's report of the test a worker died in
            rounds, warmup = self.running.pop(report.nodeid)
            worker = _worker(getattr(report, "node", None))
            self.session.results.append(crashed(report.nodeid, worker, rounds, warmup))
        if report.when != "call" or not report.failed or not isinstance(report.longrepr, str):
            return
        if any(tuple(p) == _FAILED_BY_US for p in report.user_properties):
            from .reporters.terminal import failure_longrepr

            # (a FailureRepr is a TerminalRepr to pytest: it reads toterminal and reprcrash, not the class)
            report.longrepr = failure_longrepr(report.longrepr, report.location)  # type: ignore[assignment]


def _worker(node: Any) -> str:
    """A worker's id (`gw0`; a worker started in place of one that died has its own)."""
    return str(getattr(getattr(node, "gateway", None), "id", node))


def crashed(nodeid: str, worker: str, rounds: int, warmup: int) -> TestResult:
    """The result of a profiled test its worker died in: partial, no round recorded, no report files."""
    from .reporters.files import slugify
    from .results import Analysis, LatencyStats, TestResult

    reason = (
        f"worker {worker!r} crashed while running this test (a segfault, os._exit(), pytest-timeout's thread method, "
        "the OOM killer): no round was recorded and no report written"
    )
    return TestResult(
        nodeid, slugify(nodeid), "failed", "partial", rounds, warmup, LatencyStats([]), Analysis("unclassified", 0.0),
        partial_reason=reason,
    )  # fmt: skip
