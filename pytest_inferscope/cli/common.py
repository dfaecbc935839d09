"""What every `inferscope` subcommand shares: exit codes, the one-paragraph error, the parser, output helpers."""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..results import TestResult

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_REPORT = Path("inferscope-report")
#: `inferscope run`'s defaults, where neither the environment nor the config file gives the setting.
RUN_DEFAULTS: dict[str, Any] = {"report": DEFAULT_REPORT, "rounds": 1, "warmup": 0, "cpu": "sample"}


class CliError(Exception):
    """A usage or input error: str() is the one paragraph printed on stderr; the exit code is 2."""


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one paragraph (CliError) instead of usage + exit."""

    unknown_hint = ""  # said after an unrecognised argument of this command

    def error(self, message: str) -> Any:
        raise CliError(f"{self.prog}: {message}. Run '{self.prog} --help' for the usage.")

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's, but an argument this (sub)command does not know is its own error, not the top command's."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized argument{'s' if len(extras) > 1 else ''}: {' '.join(extras)}{self.unknown_hint}")
        return parsed, extras


def echo(text: str = "") -> None:
    """Print to stdout; a reader that went away (`| head`) does not turn the exit code into a traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def count(low: int) -> Callable[[str], int]:
    """An argparse type for a whole number of at least `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is less than {low}")
        return value

    return parse


def report_folder(text: str) -> Path:
    """--report DIR, by the parser of the report setting: an empty folder name is an error, as pytest's is."""
    from ..parsers import parse_path

    try:
        return parse_path(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} {exc}: give a folder path, e.g. --report out") from None


def parse_fraction(text: str) -> float:
    """--max-regression: '5%' or '0.05' -> 0.05, by the parser of the max_regression option (one for every place)."""
    from ..options import OPTIONS_BY_NAME

    spec = OPTIONS_BY_NAME["max_regression"]
    if text.strip().startswith("-"):
        raise argparse.ArgumentTypeError(f"{text!r} is negative: give the slowdown allowed, 0 or more, e.g. 5%")
    try:
        return float(spec.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} {exc}: {spec.hint}") from None


def alpha(text: str) -> float:
    """A significance level in (0, 1), for --alpha."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a significance level between 0 and 1, e.g. 0.01")
    return value


def check_report_folder(report: Path, command: str) -> None:
    """Create the report folder or raise CliError saying why it can't be used, as the command's other errors start
    (`inferscope run: `) and with its option (`--report DIR`)."""
    from ..reporters.files import ReportDirError, check_report_dir

    try:
        check_report_dir(report)
    except ReportDirError as e:
        said = str(e).replace("--inferscope-report=DIR", "--report DIR")
        said = said.replace("The inferscope report directory ", f"inferscope {command}: the report folder ", 1)
        raise CliError(said) from None


def summary_lines(result: TestResult, report: Path, notes: list[str] | None = None) -> list[str]:
    """The short summary `run` and `analyze` print: latency, bottleneck, top suggestion, what profiling added, `notes`
    on how the input was read (an imported trace's rounds), report path."""
    from ..checks import stated
    from ..reporters.fmt import NO_LATENCY, fmt_added, fmt_conf, fmt_ms
    from ..results import UNCLASSIFIED

    lat, a = result.latency, result.analysis
    n = len(lat.samples_ms)
    rounds = f"{n} round{'s' if n != 1 else ''}" + (f", warm-up {len(lat.warmup_ms)}" if lat.warmup_ms else "")
    latency = f"{fmt_ms(lat.median)} ms median ({rounds})" if n else f"{NO_LATENCY} (no measured round completed)"
    if n > 1:
        latency += f", IQR {fmt_ms(lat.iqr)} ms"
    # unclassified names no class to be confident in: why none was named, as a check's message says it
    named = stated(a) if a.bottleneck == UNCLASSIFIED else f"{a.bottleneck} (confidence {fmt_conf(a.confidence)})"
    lines = [
        f"inferscope: {result.nodeid}" + (" — PARTIAL" if result.partial_reason else ""),
        f"  latency:        {latency}",
        f"  bottleneck:     {named}",
    ]
    if a.suggestions:
        s = a.suggestions[0]
        lines.append(f"  top suggestion: {s.action} ({s.saves})")
    lines += [f"  not collected:  {c.name}: {c.reason}" for c in result.collectors if not c.active and c.reason]
    lines += [f"  FAILED check:   {c.message}" for c in result.failed_checks]
    if result.added:  # what profiling added to the script's runs, the report files included
        lines.append(f"  added:          {fmt_added(result.added)}")
    lines += [f"  note:           {note}" for note in notes or []]
    lines.append(f"  report:         {report / result.files.get('md', result.slug + '/report.md')}")
    return lines


def conclude(report: Path, result: TestResult, tool: str, notes: list[str] | None = None) -> None:
    """The end of `run` and `analyze`: the folder's index with this result, then the short summary."""
    write_index_with(report, result, tool)
    echo("\n".join(summary_lines(result, report, notes)))


def write_index_with(report: Path, result: TestResult, tool: str) -> None:
    """Write index.md/index.json for the folder: this result plus the still-readable ones listed before."""
    from ..reporters.folder import write_index
    from ..reporters.jsonreport import ReportFormatError, load_report

    results = [result]
    try:
        old = json.loads((report / "index.json").read_text(encoding="utf-8"))
        entries = old.get("tests", []) if isinstance(old, dict) else []
    except (OSError, ValueError):
        entries = []
    for entry in entries:
        rel = entry.get("files", {}).get("json") if isinstance(entry, dict) else None
        if not isinstance(rel, str) or entry.get("nodeid") == result.nodeid:
            continue
        try:
            results.append(load_report(report / rel))
        except ReportFormatError:
            continue  # its folder is gone or broken: the index only lists what can be opened
    write_index(results, report, {"tool": tool, "environment": result.environment})


@dataclass(frozen=True)
class TestFolder:
    """One test's folder in a report root."""

    nodeid: str
    path: Path
    written: float  # when its `needs` file was last written (mtime)


@dataclass
class ReportRoot:
    """A report root's test folders: those its index.json lists (the last run that wrote the index: a pytest session
    lists its own tests, `inferscope run` adds its script to the tests listed), and those it does not, left by
    earlier runs (nothing in a report folder is removed)."""

    folder: Path
    listed: list[TestFolder]
    unlisted: list[TestFolder]
    index_written: float | None  # None: no readable index.json, and every folder is unlisted

    def tests(self) -> list[TestFolder]:
        """Every test folder: those the index lists, then the others."""
        return self.listed + self.unlisted

    def older(self) -> str:
        """'3 older test folders it does not list, left by earlier runs (written ...)', or '' when there are none."""
        if not self.unlisted:
            return ""
        n = len(self.unlisted)
        first, last = min(t.written for t in self.unlisted), max(t.written for t in self.unlisted)
        span = stamp(first) if stamp(first) == stamp(last) else f"{stamp(first)} to {stamp(last)}"
        folders, runs = ("folders", "earlier runs") if n != 1 else ("folder", "an earlier run")
        return f"{n} older test {folders} it does not list, left by {runs} (written {span})"

    def index_text(self, whose: str = "its") -> str:
        """'its index.json (written ...) lists 2 tests'."""
        n = len(self.listed)
        return f"{whose} index.json (written {stamp(self.index_written or 0)}) lists {n} test{'s' if n != 1 else ''}"


def stamp(t: float) -> str:
    """A file's time as the user's clock reads it, to the minute."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(t))


def read_root(folder: Path, needs: str) -> ReportRoot:
    """The test folders in `folder` holding the file `needs` (raw.npz, report.json), split by its index.json."""
    found = {p.parent: p for p in folder.glob(f"*/{needs}") if p.is_file()}
    listed: list[TestFolder] = []
    index_written: float | None = None
    try:
        index = json.loads((folder / "index.json").read_text(encoding="utf-8"))
        index_written = (folder / "index.json").stat().st_mtime
    except (OSError, ValueError):
        index = None
    for entry in index.get("tests", []) if isinstance(index, dict) else []:
        rel = (entry.get("files") or {}).get("json") if isinstance(entry, dict) else None
        slug = entry.get("slug") if isinstance(entry, dict) else None
        path = folder / Path(rel).parent if isinstance(rel, str) else folder / slug if isinstance(slug, str) else None
        if path is not None and path in found:
            listed.append(TestFolder(str(entry.get("nodeid", path.name)), path, found.pop(path).stat().st_mtime))
    unlisted = [TestFolder(_nodeid(path), path, file.stat().st_mtime) for path, file in sorted(found.items())]
    return ReportRoot(folder, listed, unlisted, index_written)


def _nodeid(path: Path) -> str:
    """The test id of a test folder, from its report.json (the folder's name when it has none that can be read)."""
    try:
        data = json.loads((path / "report.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return path.name
    return str(data.get("nodeid", path.name)) if isinstance(data, dict) else path.name
