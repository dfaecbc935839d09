"""`inferscope compare A B`: the latency regression table between two runs, tests matched by id.

A side is a report.json, a report folder, an index.json or a report root (every test listed in
it), or a baseline file (`.inferscope/baselines/<name>.json`, its latest entry per test). The
verdict per test is `regression.latency_verdict`, the plugin's latency rule: regressed only when B
is significantly slower *and* its median is more than the allowed fraction slower, on the rounds
run at the machine's usual speed when both sides carry speed-probe readings, and beyond the
run-to-run noise floor when A is a baseline file with enough saved runs of the test.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..baseline import FORMAT as BASELINE_FORMAT
from ..baseline import BaselineEntry, BaselineError, BaselineStore, fingerprint, fingerprint_diff
from ..comparison import Comparison
from ..drift import probe_applies
from ..regression import latency_verdict
from ..reporters.fmt import id_order
from ..reporters.jsonreport import ReportFormatError, load_report
from ..reporters.terminal import display_width, fit_id
from ..units import fmt_ms
from .common import EXIT_FAILED, EXIT_OK, CliError, echo, read_root

#: Longest test id in the table; longer ones keep their start and their test's name around an ellipsis, as the
#: terminal summary's (`fit_id`).
MAX_ID = 60


@dataclass
class Measured:
    """One test on one side: its measured round latencies and the environment they were measured in."""

    samples_ms: list[float]
    fingerprint: dict[str, str]
    probe_ms: list[float] = field(default_factory=list)  # drift.probe_ms readings, when the run took them
    not_cpu_bound: str = ""  # drift.probe_applies: why the probe says nothing about these rounds
    history: list[BaselineEntry] = field(default_factory=list)  # a baseline file's saved runs of the test
    partial: str = ""  # the exception that cut the run short (a report's partial_reason): such a run is not compared


def _fail(label: str, path: Path, what: str) -> CliError:
    return CliError(f"inferscope compare: {label} ({path}) {what}")


def _read_json(path: Path, label: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as e:
        raise _fail(label, path, f"cannot be read: {e.strerror or e}.") from None
    except UnicodeDecodeError:
        raise _fail(label, path, "is not a UTF-8 text file; expected a report.json, index.json or baseline.") from None
    except json.JSONDecodeError as e:
        raise CliError(
            f"inferscope compare: {label} {path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg}). "
            "Was the file truncated? Re-run the tests to write it again."
        ) from None


def _from_reports(paths: list[Path], label: str) -> dict[str, Measured]:
    out: dict[str, Measured] = {}
    for p in paths:
        if not p.is_file():
            raise _fail(label, p, "is listed in the run's index.json but missing; was its folder deleted?")
        try:
            r = load_report(p)
        except ReportFormatError as e:
            raise CliError(f"inferscope compare: {label}: {e}") from None
        why = probe_applies(r.analysis.bottleneck, r.analysis.metrics.get("cpu.test_thread_working"))
        measured = Measured(list(r.latency.samples_ms), fingerprint(r.environment), list(r.latency.probe_ms), why)
        measured.partial = r.partial_reason
        out.setdefault(r.nodeid, measured)
    return out


def _from_index(index: Path, data: Any, label: str) -> dict[str, Measured]:
    """The tests of a run's index.json: from their report.json, or partial where it lists no files (a test its xdist
    worker died in, or whose files could not be written: `partial_reason` or that says why)."""
    tests = data.get("tests") if isinstance(data, dict) else None
    if not isinstance(tests, list):
        return _from_reports(_index_reports(index, data, label), label)  # (which says what is wrong)
    no_files = {
        t["nodeid"]: Measured([], {}, partial=str(t.get("partial_reason") or "its report files were not written"))
        for t in tests
        if isinstance(t, dict) and t.get("files") == {} and isinstance(t.get("nodeid"), str)
    }
    kept = [t for t in tests if not (isinstance(t, dict) and t.get("nodeid") in no_files)]
    return {**no_files, **_from_reports(_index_reports(index, {"tests": kept}, label), label)}


def _index_reports(index: Path, data: Any, label: str) -> list[Path]:
    tests = data.get("tests") if isinstance(data, dict) else None
    if not isinstance(tests, list):
        raise _fail(label, index, "has no 'tests' list; it is not an inferscope index.json.")
    paths = []
    for i, t in enumerate(tests):
        rel = (t.get("files") or {}).get("json") if isinstance(t, dict) else None
        slug = t.get("slug") if isinstance(t, dict) else None
        if not isinstance(rel, str) and not isinstance(slug, str):
            raise _fail(label, index, f"tests[{i}] names no report file ('files.json' or 'slug').")
        paths.append(index.parent / (rel if isinstance(rel, str) else f"{slug}/report.json"))
    return paths


def load_side(path: Path, label: str) -> dict[str, Measured]:
    """Test id -> measurements of one side of the comparison (see the module docstring)."""
    if path.is_dir():
        if (path / "report.json").is_file():
            return _from_reports([path / "report.json"], label)
        if (path / "index.json").is_file():
            index = path / "index.json"
            return _from_index(index, _read_json(index, label), label)
        found = sorted(path.glob("*/report.json"))
        if not found:
            raise _fail(
                label, path, "holds no report.json, index.json or test folders with a report.json; give a report "
                "folder written by `pytest --inferscope-report=DIR` or `inferscope run`.",
            )  # fmt: skip
        return _from_reports(found, label)
    if not path.is_file():
        raise _fail(label, path, "does not exist.")
    data = _read_json(path, label)
    if isinstance(data, dict) and data.get("format") == BASELINE_FORMAT:
        try:
            baseline = BaselineStore(path.parent).load(path.stem)
        except BaselineError as e:
            raise CliError(f"inferscope compare: {label}: {e}") from None
        return {
            nodeid: Measured(e.samples_ms, e.fingerprint, e.probe_ms, probe_applies(e.bottleneck, None), runs)
            for nodeid, runs in baseline.history.items()
            if runs
            for e in runs[-1:]
        }
    if isinstance(data, dict) and "tests" in data and "schema_version" in data:
        return _from_index(path, data, label)
    if isinstance(data, dict) and "nodeid" in data:
        return _from_reports([path], label)
    raise _fail(label, path, "is JSON but not an inferscope report.json, index.json or baseline file.")


def _missing(label: str, given: str, other: str) -> CliError:
    """A side that does not exist; where it names a saved baseline (`--inferscope-save-baseline=NAME`), its file, in
    a command with `other`, the other side."""
    from ..api import standalone_settings
    from ..config import ConfigError

    try:
        saved = standalone_settings().baseline_dir / f"{given}.json"
    except ConfigError:
        saved = Path(".inferscope/baselines") / f"{given}.json"
    if Path(given).name == given and saved.is_file():
        pair = f"{saved} {other}" if label == "A" else f"{other} {saved}"
        return _fail(
            label, Path(given), f"does not exist; a baseline named {given!r} is saved in {saved}: give that file, "
            f"e.g. `inferscope compare {pair}`.",
        )  # fmt: skip
    return _fail(
        label, Path(given), "does not exist; give a report folder, a report.json, an index.json or a baseline file "
        "(.inferscope/baselines/NAME.json).",
    )  # fmt: skip


def _short(nodeid: str) -> str:
    """A test id for the table: past MAX_ID, its start and its test's name with its parameters (the terminal
    summary's `fit_id`), where it kept its first and last 29 characters, cut mid-word, until 2026-11-30."""
    return fit_id(nodeid, MAX_ID)


def _num(x: float, fmt: str) -> str:
    return "n/a" if x is None or not math.isfinite(x) else format(x, fmt)


def _row(nodeid: str, c: Comparison) -> list[str]:
    ratio = "n/a"
    if math.isfinite(c.ratio):
        ratio = f"{c.ratio:.3f} ({100 * (c.ratio - 1):+.1f}%)"
    ci = f"[{_num(c.ci_low, '.3f')}, {_num(c.ci_high, '.3f')}]" if math.isfinite(c.ci_low) else ""
    medians = f"{fmt_ms(c.base_median, c.new_median)} → {fmt_ms(c.new_median, c.base_median)}"  # as the reports
    return [_short(nodeid), medians, ratio, ci, _num(c.p_value, ".2g"), c.verdict]


def _tests(n: int) -> str:
    return f"{n} test{'s' if n != 1 else ''}"


def table(rows: list[list[str]]) -> list[str]:
    """Rows as aligned text columns (the first row is the header)."""
    widths = [max(display_width(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [
        "  ".join(cell + " " * (w - display_width(cell)) for cell, w in zip(r, widths, strict=True)).rstrip()
        for r in rows
    ]


def cmd_compare(args: argparse.Namespace) -> int:
    """`inferscope compare`: print the regression table of A against B; exit 1 if a test regressed."""
    for label, given, other in (("A", args.a, args.b), ("B", args.b, args.a)):
        if not Path(given).exists():
            raise _missing(label, given, other)
    a = load_side(Path(args.a), "A")
    b = load_side(Path(args.b), "B")
    common = [t for t in sorted(a) if t in b]
    if not common:
        raise CliError(
            f"inferscope compare: A ({args.a}, {_tests(len(a))}) and B ({args.b}, {_tests(len(b))}) have no test id in "
            "common, so nothing can be compared; check that both come from the same test suite."
        )
    rows = [["test", "median ms before → after", "ratio", f"{100 * (1 - args.alpha):g}% CI", "p", "verdict"]]
    notes: list[str] = []
    verdicts: dict[str, int] = {}
    for nodeid in sorted({*a, *b}, key=id_order):  # as the plugin's tables
        if nodeid not in b or nodeid not in a:
            rows.append([_short(nodeid), f"only in {'A' if nodeid in a else 'B'}", "", "", "", ""])
            continue
        base, new = a[nodeid], b[nodeid]
        if base.partial or new.partial:  # as the plugin's gate: a run whose body raised is neither saved nor compared
            side, reason = ("A", base.partial) if base.partial else ("B", new.partial)
            rows.append([_short(nodeid), f"partial in {side}", "", "", "", "inconclusive"])
            verdicts["inconclusive"] = verdicts.get("inconclusive", 0) + 1
            notes.append(
                f"  {_short(nodeid)}: not compared: the test raised in {side} ({reason}), so its rounds are partial."
            )
            continue
        entry = BaselineEntry(nodeid, base.samples_ms, fingerprint=base.fingerprint, probe_ms=base.probe_ms)
        c, steady, _, _ = latency_verdict(
            entry,
            new.samples_ms,
            new.probe_ms,
            not_cpu_bound=new.not_cpu_bound,
            history=base.history,
            max_regression=args.max_regression,
            alpha=args.alpha,
        )
        rows.append(_row(nodeid, c))
        verdicts[c.verdict] = verdicts.get(c.verdict, 0) + 1
        if c.verdict != "unchanged" or c.ratio > 1 + args.max_regression:  # a slowdown short of significance too
            notes.append(f"  {_short(nodeid)}: {c.reason}" + (f" Machine speed: {steady}." if steady else ""))
    diffs = sorted({d for t in common for d in fingerprint_diff(a[t].fingerprint, b[t].fingerprint)})
    if diffs:
        print(
            "warning: A (the baseline) and B (this run) were measured in different environments, so a latency "
            "change may come from that: " + " ".join(diffs),
            file=sys.stderr,
        )
    notes += [n for label, side in (("A", args.a), ("B", args.b)) if (n := _not_listed(label, Path(side)))]
    echo("\n".join(table(rows)))
    if notes:
        echo("\n".join(["", *notes]))
    counts = ", ".join(f"{verdicts.get(v, 0)} {v}" for v in ("regressed", "improved", "unchanged", "inconclusive"))
    only = f"{len(set(a) - set(b))} only in A, {len(set(b) - set(a))} only in B"
    echo(f"\n{counts}; {only} (max regression {100 * args.max_regression:g}%, alpha {args.alpha:g})")
    return EXIT_FAILED if verdicts.get("regressed") else EXIT_OK


def _not_listed(label: str, path: Path) -> str:
    """A note when a side read through an index.json sits among test folders the index does not list (left by earlier
    runs), which were not compared; '' otherwise."""
    folder = path if path.is_dir() else path.parent
    if (path.is_dir() and (path / "report.json").is_file()) or not (folder / "index.json").is_file():
        return ""
    if path.is_file() and path.name != "index.json":
        return ""
    root = read_root(folder, "report.json")
    if not root.unlisted:
        return ""
    names = ", ".join(t.nodeid for t in root.unlisted[:5])
    more = f" and {len(root.unlisted) - 5} more" if len(root.unlisted) > 5 else ""
    were = "was" if len(root.unlisted) == 1 else "were"
    return f"  {label} ({path}): {root.index_text()}; {root.older()}, {were} not compared: {names}{more}."
