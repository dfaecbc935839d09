"""xdist support: workers profile their own tests; the controller gathers their results as plain data.

Registered only when pytest-xdist is present. Workers put their results in `workeroutput` as JSON text
(`to_wire`); the controller rebuilds them here and writes the one summary and index.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .results import TestResult
    from .session import InferscopeSession


def to_wire(results: list[TestResult]) -> list[str]:
    """The results as JSON text for execnet, which sends only plain types: a result holds what the user's hooks
    and libraries gave (torch's version is a str subclass, numpy scalars), sent as the JSON they write as."""
    return [json.dumps(r.to_dict(), default=_plain) for r in results]


def _plain(value: Any) -> Any:
    item = getattr(value, "item", None)  # numpy scalars
    return item() if callable(item) else str(value)


class XdistHooks:
    """Controller-side hooks of pytest-xdist."""

    def __init__(self, session: InferscopeSession) -> None:
        self.session = session

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        from .results import TestResult

        data = getattr(node, "workeroutput", {}).get("inferscope_results", [])
        for d in data:
            result = TestResult.from_dict(json.loads(d))
            self.session.results.append(result)
            self.session.note_environment_change(result)  # the summary line the workers cannot write
        for note in getattr(node, "workeroutput", {}).get("inferscope_ab_notes", []):
            if note not in self.session.notes:  # every worker sees the tests removed since the ref: said once
                self.session.notes.append(note)
