"""xdist support: workers profile their own tests; the controller gathers their results as plain data.

Registered only when pytest-xdist is present. Workers put their results in `workeroutput` as JSON text
(`TestResult.to_wire`); the controller rebuilds them here and writes the one summary and index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .session import InferscopeSession


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
            self.session.note_environment_change(result)  # the summary line the workers cannot write
        for note in getattr(node, "workeroutput", {}).get("inferscope_ab_notes", []):
            if note not in self.session.notes:  # every worker sees the tests removed since the ref: said once
                self.session.notes.append(note)
