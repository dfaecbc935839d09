"""xdist support: workers profile their own tests; the controller gathers their results as plain data.

Registered only when pytest-xdist is present. Workers put their results in `workeroutput` as JSON text
(`TestResult.to_wire`); the controller rebuilds them here and writes the one summary and index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pytest

    from .session import InferscopeSession

_FAILED_BY_US = ("inferscope.verdict", "fail")  # a JUnit property (reporters/junit.py), sent with the report


class XdistHooks:
    """Controller-side hooks of pytest-xdist."""

    def __init__(self, session: InferscopeSession) -> None:
        self.session = session

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        from .results import TestResult

        data = getattr(node, "workeroutput", {}).get("inferscope_results", [])
        for d in data:
            result = TestResult.from_wire(d)
            self.session.results.append(result)
            self.session.baselines.note_environment_change(result)  # the summary line the workers cannot write
        for note in getattr(node, "workeroutput", {}).get("inferscope_ab_notes", []):
            if note not in self.session.notes:  # every worker sees the tests removed since the ref: said once
                self.session.notes.append(note)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """A test a worker's plugin failed comes back with its reason as text; pytest reads its one-line forms (pytest
        8's short summary reason, `--tb=line`'s line) from a failure's `reprcrash`, so it gets one again here
        (`failure_longrepr`)."""
        if report.when != "call" or not report.failed or not isinstance(report.longrepr, str):
            return
        if any(tuple(p) == _FAILED_BY_US for p in report.user_properties):
            from .reporters.terminal import failure_longrepr

            # (a FailureRepr is a TerminalRepr to pytest: it reads toterminal and reprcrash, not the class)
            report.longrepr = failure_longrepr(report.longrepr, report.location)  # type: ignore[assignment]
