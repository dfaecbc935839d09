"""The reporters: the only code in the plugin that writes files or terminal output.

Per test, `write_test_reports` writes `<report_dir>/<slug>/report.md`, `report.html`, `report.json`,
`raw.npz` and, when the timeline has more than the test's rounds, `trace.json.gz` (Perfetto /
chrome://tracing open it as it is; `trace.json` with --inferscope-trace-format=json); the stylesheet
and script of every report.html are written once, to `<report_dir>/assets/`. Per session,
`write_index` writes `index.md`, `index.html` and `index.json`. Every file is written
atomically, so an interrupted run leaves the previous file or the new one, and nothing else in the
folder is touched but the trace an earlier run left in the other format (or when the test has no
trace now), removed once the new report.json no longer names it.

The names below load their module on first use (PEP 562), so importing this package, as the plugin's
terminal summary and baseline code do in every session, costs no numpy, Jinja2 or analyzer import
(docs/performance.md, "The plugin's imports").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .files import ReportDirError, check_report_dir, slugify
    from .folder import append_step_summary, index_entry, submit_raw, trace_file, write_index, write_test_reports
    from .jsonreport import ReportFormatError, load_report, to_json
    from .writer import ReportWriter, WriteError

#: Each public name, and the module of this package it lives in.
_WHERE = {
    "ReportDirError": "files",
    "check_report_dir": "files",
    "slugify": "files",
    "append_step_summary": "folder",
    "index_entry": "folder",
    "submit_raw": "folder",
    "trace_file": "folder",
    "write_index": "folder",
    "write_test_reports": "folder",
    "ReportFormatError": "jsonreport",
    "load_report": "jsonreport",
    "to_json": "jsonreport",
    "ReportWriter": "writer",
    "WriteError": "writer",
}
__all__ = [
    "ReportDirError", "ReportFormatError", "ReportWriter", "WriteError", "append_step_summary", "check_report_dir",
    "index_entry", "load_report", "slugify", "submit_raw", "to_json", "trace_file", "write_index", "write_test_reports",
]  # fmt: skip


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:  # a submodule not imported yet: `from .reporters import trace` goes on to import it
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{module}", __name__), name)
