"""`inferscope analyze FILE`: re-run merger, analyzer and reporters on a saved trace.

FILE is an inferscope `raw.npz` (which keeps the test's plan, the collectors' descriptions, the
environment and the speed probe's readings; for traces saved before it did, they come from the
report.json beside it), a test's report folder or its report.json or trace.json / trace.json.gz (the raw.npz
beside it is used; a report root of one test folder is that folder), or a torch.profiler / Kineto Chrome trace
(.json or .json.gz), imported by `kineto.py`.
The trace is written in the format the environment or config file sets (INFERSCOPE_TRACE_FORMAT), as
`inferscope run` does.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .common import (
    DEFAULT_REPORT,
    EXIT_FAILED,
    EXIT_OK,
    CliError,
    ReportRoot,
    TestFolder,
    check_report_folder,
    conclude,
    read_root,
)

if TYPE_CHECKING:
    from ..events import RawTrace
    from ..results import CollectorInfo


@dataclass
class _Input:
    """What `analyze` re-runs: a raw collection and what is known about how it was collected."""

    raw: RawTrace
    nodeid: str
    collectors: list[CollectorInfo]
    environment: dict[str, Any] = field(default_factory=dict)
    rounds: int = 1
    warmup: int = 0
    thresholds: dict[str, Any] = field(default_factory=dict)
    outcome: str = "passed"
    partial: str = ""
    kineto: bool = False
    plan: dict[str, Any] | None = None  # the test's plan as the collection kept it (raw.meta["plan"])
    notes: list[str] = field(default_factory=list)  # how an imported trace's rounds were read, for the summary
    added: dict[str, float] | None = None  # what the plugin added when the test ran (its report.json's), if known


def cmd_analyze(args: argparse.Namespace) -> int:
    """`inferscope analyze`: re-run merger, analyzer, checks and reporters on FILE; exit 1 if a check fails."""
    from .. import kineto
    from ..api import standalone_settings
    from ..config import ConfigError
    from ..postprocess import Plan, added_time, process

    src = load_input(Path(args.file))
    try:
        trace_format = standalone_settings().trace_format
    except ConfigError as e:
        raise CliError(str(e)) from None
    report = args.report if args.report is not None else DEFAULT_REPORT
    check_report_folder(report, "analyze")
    if src.plan is not None:
        known = {f.name for f in dataclasses.fields(Plan)}
        plan = Plan(**{k: v for k, v in src.plan.items() if k in known})
    else:
        plan = Plan(
            nodeid=src.nodeid, rounds=src.rounds, warmup=src.warmup, thresholds=src.thresholds,
            latency_stat=str(src.thresholds.get("latency_stat", "median")),
        )  # fmt: skip
    # What the plugin added is the run's (its report.json's; else what its collection says, less the analysis's time,
    # not known), not this analysis's time summed with the run's time outside its rounds: that goes to reanalysis_ms.
    ran = src.added if src.added is not None else added_time(src.raw.meta, plan, 0)
    ran = {k: v for k, v in ran.items() if src.added is not None or k != "analysis_ms"}
    common: dict[str, Any] = {"outcome": src.outcome, "partial_reason": src.partial, "environment": src.environment,
                              "trace_format": trace_format, "recorded_added": ran}  # fmt: skip
    if src.kineto:
        result, _ = process(src.raw, plan, src.collectors, rules=kineto.RULES, report_dir=report, **common)
    else:
        result, _ = process(src.raw, plan, src.collectors, report_dir=report, **common)
    conclude(report, result, "inferscope analyze", src.notes)
    return EXIT_FAILED if result.failed_checks else EXIT_OK


def load_input(path: Path) -> _Input:
    """Find and read what `analyze` was given (see `inferscope analyze --help`); CliError when it can't."""
    from .. import kineto

    if path.is_dir():
        if (path / "raw.npz").is_file():
            return _from_npz(path / "raw.npz")
        if (path / "report.json").is_file():
            return _beside(path / "report.json")
        if not read_root(path, "raw.npz").tests():
            raise CliError(f"inferscope analyze: {path} is a folder without a raw.npz or report.json.")
        return _the_one_test(path, f"{path} is a report folder")
    if not path.is_file():
        raise CliError(f"inferscope analyze: {path}: no such file or folder.")
    if path.suffix.lower() in (".md", ".html", ".htm"):
        if path.stem == "index":
            return _the_one_test(path.parent, f"{path} is the page of a report folder")
        raise CliError(
            f"inferscope analyze: {path} is a report page, not a trace; give the test's folder ({path.parent}) or "
            "its report.json or raw.npz."
        )
    with path.open("rb") as f:
        magic = f.read(2)
    if magic == b"PK":  # a zip archive: numpy's .npz
        return _from_npz(path)
    if path.suffix.lower() == ".npz":
        what = "empty" if not magic else "not a zip archive"
        raise CliError(
            f"inferscope analyze: {path} is {what}, where a .npz (numpy's, as a report folder's raw.npz) is a zip "
            "archive; it may have been cut short or overwritten: give the raw.npz of a report folder, or re-run the "
            "test to record it again."
        )
    try:
        data = kineto.read_json(path)
    except kineto.TraceFormatError as e:
        raise CliError(f"inferscope analyze: {e}") from None
    # A Chrome trace, or the format's bare array of events (torch's EventList.export_chrome_trace writes one).
    events = isinstance(data, list) and all(isinstance(e, dict) for e in data)
    if events or (isinstance(data, dict) and "traceEvents" in data):
        other = data.get("otherData") if isinstance(data, dict) else None
        if isinstance(other, dict) and other.get("generator") == "pytest-inferscope":
            return _beside(path)  # our own trace.json(.gz): the raw collection beside it has more
        try:
            imported = kineto.import_events(data, str(path))
        except kineto.TraceFormatError as e:
            raise CliError(f"inferscope analyze: {e}") from None
        return _Input(imported.raw, path.name, imported.collectors, imported.environment, rounds=imported.steps or 1,
                      kineto=True, notes=imported.notes)  # fmt: skip
    if isinstance(data, dict) and "nodeid" in data and "schema_version" in data:
        return _beside(path)
    if isinstance(data, dict) and isinstance(data.get("tests"), list) and "schema_version" in data:
        return _the_one_test(path.parent, f"{path} is the index of a report folder")
    raise CliError(
        f"inferscope analyze: {path} is JSON but neither an inferscope report.json nor a Chrome trace "
        f'({{"traceEvents": [...]}} from torch.profiler); found: {_found(data)}.'
    )


def _the_one_test(folder: Path, what: str) -> _Input:
    """The test of a report root that holds one test folder; CliError naming them when it holds several (or none)."""
    root = read_root(folder, "raw.npz")
    tests = root.tests()
    if len(tests) == 1:
        return _from_npz(tests[0].path / "raw.npz")
    raise _several(what, root)


def _several(what: str, root: ReportRoot) -> CliError:
    """The error for a folder of several tests (or its index): `what` it is, one test's folder to give, and its tests:
    those its index.json lists and the older folders it does not, each with when it was written."""
    tests = root.tests()
    if not tests:
        return CliError(
            f"inferscope analyze: {what}, and it holds no test folder with a raw.npz; give one test's folder."
        )
    n = f"{len(tests)} test{'s' if len(tests) != 1 else ''}"
    give = f"analyze re-runs one test's trace: give its folder, e.g. {tests[0].path}"
    if root.index_written is None:
        return CliError(f"inferscope analyze: {what} of {n} and no index.json: {_listing(root.unlisted)}; {give}.")
    index = root.index_text("the folder's")
    parts = [f"{index}: {_listing(root.listed)}" if root.listed else f"{index} of them"]
    if root.unlisted:
        parts.append(f"{root.older()}: {_listing(root.unlisted)}")
    return CliError(f"inferscope analyze: {what} of {n}; {give}; {'; '.join(parts)}.")


def _listing(tests: list[TestFolder]) -> str:
    """'a.py::t (DIR/a...), ...': up to 5 tests, each with its folder."""
    more = f" and {len(tests) - 5} more" if len(tests) > 5 else ""
    return ", ".join(f"{t.nodeid} ({t.path})" for t in tests[:5]) + more


def _found(data: Any) -> str:
    """What a JSON value that is no trace holds, in JSON's words (floats are text here: `kineto.read_json`)."""
    if isinstance(data, dict):
        return "an object with the keys " + ", ".join(sorted(map(str, data))[:6]) if data else "an empty object"
    if data is None or isinstance(data, bool):
        return json.dumps(data)
    if isinstance(data, list):
        return "an array"
    if isinstance(data, int | float):
        return f"the number {json.dumps(data)}"
    try:
        float(data)
        return f"the number {data}"
    except ValueError:
        return "a string"


def _beside(path: Path) -> _Input:
    raw = path.parent / "raw.npz"
    if not raw.is_file() and not _ours(path):
        raise CliError(
            f"inferscope analyze: {path} is not an inferscope report.json (one has 'nodeid' and 'schema_version'), "
            "and there is no raw.npz beside it; give a test's folder in a report folder written by "
            "`pytest --inferscope-report=DIR` or `inferscope run`."
        )
    if not raw.is_file():
        raise CliError(
            f"inferscope analyze: {path} has no raw.npz beside it, so there is nothing to re-analyse; it was "
            "written before raw traces were kept, or the file was removed. Re-run the test to record one."
        )
    return _from_npz(raw)


def _ours(report_json: Path) -> bool:
    """Whether a report.json is one inferscope wrote (its two keys; how well formed is for reading it to say)."""
    try:
        data = json.loads(report_json.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return isinstance(data, dict) and "nodeid" in data and "schema_version" in data


def _from_npz(path: Path) -> _Input:
    """Our raw.npz, with the plan, collectors and environment from the report.json beside it when there is one."""
    import zipfile

    import numpy as np

    from ..events import GPU_KINDS, Kind, RawTrace
    from ..reporters.jsonreport import ReportFormatError, load_report
    from ..results import CollectorInfo
    from ..rounds import RoundKind, kinds_of

    try:
        raw = RawTrace.load(str(path))
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:
        # numpy's own words (allow_pickle, ...) mean nothing here: what kind of file it is, and what to do
        if isinstance(e, OSError):
            why = e.strerror or str(e).rstrip(".")
        elif zipfile.is_zipfile(path):
            why = "a zip archive, but its arrays are not those inferscope writes"
        else:
            why = "it starts as a zip archive does, but is not a whole one"
        raise CliError(
            f"inferscope analyze: {path} is not a readable inferscope raw trace (.npz): {why}. It may be truncated "
            "or another program's file; give the raw.npz of a report folder, or re-run the test to record it again."
        ) from None
    r = None
    if (path.parent / "report.json").is_file():
        try:
            r = load_report(path.parent / "report.json")
        except ReportFormatError as e:
            raise CliError(f"inferscope analyze: {e}") from None
    plan, described, env = raw.meta.get("plan"), raw.meta.get("collectors"), raw.meta.get("environment")
    if isinstance(plan, dict) and isinstance(described, list):  # the trace says how it was made
        return _Input(raw, str(plan.get("nodeid", path.parent.name)), [CollectorInfo.from_dict(c) for c in described],
                      env if isinstance(env, dict) else {}, outcome=r.outcome if r else "passed",
                      partial=r.partial_reason if r else "", plan=plan, added=r.added if r else None)  # fmt: skip
    if r is not None:  # saved before the trace kept its plan: from the report beside it
        return _Input(raw, r.nodeid, r.collectors, r.environment, r.rounds, r.warmup, r.thresholds, r.outcome,
                      r.partial_reason, added=r.added)  # fmt: skip
    ev = raw.events
    tests = ev[ev["kind"] == Kind.TEST]
    nodeid = raw.strings[int(tests["name"][0])] if len(tests) else path.parent.name
    rounds = ev[ev["kind"] == Kind.ROUND]
    warm = int(np.count_nonzero(kinds_of(rounds["flags"]) == RoundKind.WARMUP))
    has_gpu = bool(np.isin(ev["kind"], np.asarray(GPU_KINDS, dtype=np.uint8)).any())
    sampler = raw.meta.get("sampler")
    sampler = sampler if isinstance(sampler, dict) else {}
    mode = "stack sampling" if "samples" in sampler else "full call tracing" if "calls" in sampler else "scopes only"
    why = "no report.json beside the trace"
    collectors = [
        CollectorInfo("cpu", True, mode),
        CollectorInfo("gpu", True, "recorded GPU activity")
        if has_gpu
        else CollectorInfo("gpu", False, "none", reason=f"no GPU records in the trace ({why})"),
        CollectorInfo("memory", bool(raw.meta.get("memory")), "recorded" if raw.meta.get("memory") else "none"),
    ]
    return _Input(raw, nodeid, collectors, rounds=max(1, len(rounds) - warm), warmup=warm)
