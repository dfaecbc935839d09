"""pytest-inferscope: performance regression testing of PyTorch inference, as a pytest plugin.

Outside pytest: `scope(name)`, `mark_event(name, **attrs)`, `profile(name)`,
`measure(fn, *args, rounds=..., warmup=...)` and, for an async function, `await measure_async(fn, ...)`;
`compare(before, after)` judges two results, `write_report(result, report_dir)` writes a result's report files after
the call. They load on first use, so importing the package (as pytest does for every session) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .warning import InferscopeWarning

if TYPE_CHECKING:
    from .api import mark_event, measure, measure_async, profile, scope
    from .api_compare import compare
    from .api_report import write_report

__all__ = [
    "InferscopeWarning", "compare", "mark_event", "measure", "measure_async", "profile", "scope", "write_report",
]  # fmt: skip
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name == "compare":
        from .api_compare import compare

        return compare
    if name == "write_report":
        from .api_report import write_report

        return write_report
    if name in ("scope", "mark_event", "profile", "measure", "measure_async"):
        from . import api

        return getattr(api, name)
    raise AttributeError(f"module 'pytest_inferscope' has no attribute {name!r}")
