"""pytest-inferscope: performance regression testing of PyTorch inference, as a pytest plugin.

Outside pytest: `scope(name)`, `mark_event(name, **attrs)`, `profile(name)`,
`measure(fn, *args, rounds=..., warmup=...)` and, for an async function, `await measure_async(fn, ...)`;
`compare(before, after)` judges two results, `write_report(result, report_dir)` writes a result's report files after
the call. They load on first use, so importing the package (as pytest does for every session) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .warning import InferscopeWarning

if TYPE_CHECKING:
    from .api import mark_event, profile, scope
    from .api_compare import compare
    from .api_measure import measure, measure_async
    from .api_report import write_report

__all__ = [
    "InferscopeWarning", "compare", "mark_event", "measure", "measure_async", "profile", "scope", "write_report",
]  # fmt: skip
__version__ = "0.1.0"


#: Where each name of the public API lives; loaded on first use.
_WHERE = {
    "compare": "api_compare",
    "write_report": "api_report",
    "measure": "api_measure",
    "measure_async": "api_measure",
    "scope": "api",
    "mark_event": "api",
    "profile": "api",
}


def __getattr__(name: str) -> Any:
    # import_module, not `from . import api_measure`: that takes the package's attribute, which outlives the module's
    # entry in sys.modules where a host takes it out (pytester's in-process runs do), and hands back a module whose
    # collection state is no longer the one `scope` and the plugin use.
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'pytest_inferscope' has no attribute {name!r}")
