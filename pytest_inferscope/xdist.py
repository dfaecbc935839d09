"""xdist support: workers profile their own tests; the controller gathers their results as plain data.

Registered only when pytest-xdist is present. A worker sends each result as JSON text (`TestResult.to_wire`) with the
test's call report (`attach`), and all of them again in `workeroutput` as its session ends, which replace the ones
sent before (a report file that could not be written, a reports_ms added after the report); the controller rebuilds
them here and writes the one summary and index. A worker that dies (`os._exit`, a segfault, pytest-timeout's thread
method) sends no `workeroutput`: the results it sent with its reports stay.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .results import TestResult
    from .session import InferscopeSession

_FAILED_BY_US = ("inferscope.verdict", "fail")  # a JUnit property (reporters/junit.py), sent with the report
#: The attribute of a call report that carries its test's result from a worker (taken off again by the controller).
_WIRE = "inferscope_result"


def attach(report: pytest.TestReport, result: TestResult) -> None:
    """In a worker: the result goes with the test's report (pytest serialises a report's attributes for xdist)."""
    setattr(report, _WIRE, result.to_wire())


class XdistHooks:
    """Controller-side hooks of pytest-xdist."""

    def __init__(self, session: InferscopeSession) -> None:
        self.session = session
        self.sent: dict[str, set[str]] = {}  # by worker: the tests whose results came with their reports

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
        if report.when != "call" or not report.failed or not isinstance(report.longrepr, str):
            return
        if any(tuple(p) == _FAILED_BY_US for p in report.user_properties):
            from .reporters.terminal import failure_longrepr

            # (a FailureRepr is a TerminalRepr to pytest: it reads toterminal and reprcrash, not the class)
            report.longrepr = failure_longrepr(report.longrepr, report.location)  # type: ignore[assignment]


def _worker(node: Any) -> str:
    """A worker's id (`gw0`; a worker started in place of one that died has its own)."""
    return str(getattr(getattr(node, "gateway", None), "id", node))
