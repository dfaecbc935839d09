"""`write_report(result, report_dir)`: a result's report files written after the call, by the code that
`measure(report_dir=...)` writes them with, for a notebook that measures first, looks, then wants the report."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .api import report_folder, standalone_settings
from .arguments import check_report_dir_argument
from .results import TestResult
from .warning import InferscopeWarning

if TYPE_CHECKING:
    from .merger import Timeline


def write_report(result: TestResult, report_dir: str | os.PathLike[str] | None = None) -> Path:
    """Write `result`'s report files (report.md, report.html, report.json; the trace and raw.npz where its raw
    collection is at hand) to `<report_dir>/<its name>/`, as `measure(report_dir=...)` does; return report.md's path.

    `report_dir` left out: INFERSCOPE_REPORT or the config file's report:. The folder's other files stay; a later
    write of the same name replaces its report files. `result.report_dir` and `result.files` then say where they are.
    The raw collection is the one `measure()` or `profile()` kept (`result.raw`), or the raw.npz of the folder the
    result was written to or read back from (`load_report`); without either, the reports are written without the
    trace and raw.npz, and an InferscopeWarning says why. What the plugin added (`result.added`) is the measurement's:
    writing later adds nothing to it.
    """
    if not isinstance(result, TestResult):
        raise TypeError(
            f"write_report(result={result!r:.80}): {type(result).__name__}, not a result; give the TestResult that "
            "measure() or measure_async() returned, profile()'s .result, or one read back with "
            "pytest_inferscope.reporters.load_report('DIR/NAME/report.json')."
        )
    caller = f"write_report({result.nodeid!r})"
    check_report_dir_argument("write_report", report_dir)
    settings = standalone_settings()
    out = report_folder("write_report", report_dir, settings)
    if out is None:
        raise ValueError(
            f"{caller}: no report folder: give one, write_report(result, 'inferscope-report'), or set "
            "INFERSCOPE_REPORT (or the config file's report:)."
        )
    from .reporters.folder import write_test_reports

    raw, timeline, why_not = _raw_of(result)
    # The files as measure(report_dir=) wrote them: `added` before the report files (a first write's reports_ms is
    # in the result, not in its files, and a later write is no part of the measurement).
    shown = dataclasses.replace(result, added=_before_reports(result.added))
    write_test_reports(shown, timeline, out, raw=raw, trace_format=settings.trace_format)
    if raw is None:  # an older run's raw.npz of this name would be read as this result's by `inferscope analyze`
        with contextlib.suppress(FileNotFoundError):
            os.unlink(out / result.slug / "raw.npz")
    result.files, result.report_dir = shown.files, out
    if why_not:
        warnings.warn(
            InferscopeWarning(
                f"{caller}: {why_not}, so {out / result.slug} has report.md, report.html and report.json, but no "
                "trace or raw.npz, and report.html draws no timeline; measure with report_dir= (or keep the result, "
                "which holds its raw collection, in this process) to have them."
            ),
            stacklevel=2,
        )
    return out / result.files["md"]


def _raw_of(result: TestResult) -> tuple[Any, Timeline | None, str]:
    """The raw collection of `result` (an events.RawTrace) and its timeline, or None, None and why there are none."""
    from .events import RawTrace
    from .merger import merge

    if result.raw is not None:
        return result.raw, merge(result.raw), ""
    if result.report_dir is None:
        return None, None, "its raw collection was not kept (a result built or read back without its folder)"
    path = result.report_dir / result.slug / "raw.npz"
    if not path.is_file():
        return None, None, f"its raw collection is not kept and {path} is gone"

    try:
        raw = RawTrace.load(str(path))
        timeline = merge(raw)
    except Exception as e:  # any unreadable file is said as one, with numpy's words
        return None, None, f"its raw collection is not kept and {path} cannot be read ({type(e).__name__}: {e})"
    plan = raw.meta.get("plan")
    ours = isinstance(plan, dict) and plan.get("nodeid") == result.nodeid and len(timeline) == result.event_count
    if not ours:  # the same name measured again into that folder since
        return None, None, f"its raw collection is not kept and {path} is another run's"
    return raw, timeline, ""


def _before_reports(added: dict[str, float]) -> dict[str, float]:
    """`TestResult.added` as its report files hold it: without the time writing them (`reports_ms`)."""
    if "reports_ms" not in added:
        return dict(added)
    out = {k: v for k, v in added.items() if k != "reports_ms"}
    if "added_ms" in out:
        out["added_ms"] = round(out["added_ms"] - added["reports_ms"], 3)
    return out
