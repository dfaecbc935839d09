"""The inferscope section of pytest's terminal summary: one row per profiled test.

`summary_lines` is the pure formatting (unit-tested without pytest); `write_terminal_summary`
only hands its lines to the TerminalReporter, coloured by verdict.
"""

from __future__ import annotations

import math
import os
import sys
import unicodedata
from collections.abc import Iterable, Set
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..results import TestResult
from ..units import fmt_count
from .fmt import (
    NO_LATENCY,
    fmt_added,
    fmt_bottleneck,
    fmt_ms,
    fmt_pct,
    host_memory_cell,
    short_verdict,
    shows_host_memory,
    sum_added,
    table_order,
    verdict_label,
    verdict_legend,
)

if TYPE_CHECKING:
    from pytest import TerminalReporter

    from ..options import Settings

#: Longest test id shown; longer ones keep their start and their test's name around an ellipsis (`fit_id`).
MAX_ID = 60
_HEADER = ("test", "median ms", "± IQR", "spread", "rounds", "bottleneck", "host memory", "vs baseline", "verdict")


def write_terminal_summary(
    tr: TerminalReporter,
    results: list[TestResult],
    report_dir: Path | None,
    header_lines: list[str],
    ab_column: str | None = None,
) -> None:
    """Write the inferscope section through `tr`, pytest's TerminalReporter."""
    if not results and not header_lines and report_dir is None:
        return
    tr.write_sep("=", "inferscope")
    for line, r in summary_table(results, ab_column, terminal_width(tr)):
        markup: dict[str, bool] = {}
        if r is not None and r.verdict == "partial":
            markup = {"yellow": True}
        elif r is not None and verdict_label(r).startswith("FAIL"):
            markup = {"red": True, "bold": True}
        tr.write_line(line, **markup)
    if len(results) > 1:  # as index.md's count, so that 300 rows need not be read to know how many failed
        counts = {v: sum(1 for r in results if r.verdict == v) for v in ("pass", "fail", "partial")}
        total = f"inferscope: {len(results)} profiled tests: " + ", ".join(f"{n} {v}" for v, n in counts.items())
        tr.write_line(total, **({"red": True, "bold": True} if counts["fail"] else {}))
    for line in header_lines:
        tr.write_line(line)
    if report_dir is not None:
        tr.write_line(f"inferscope reports: {Path(report_dir) / 'index.html'} (and index.md)")


def terminal_width(tr: TerminalReporter) -> int | None:
    """The width pytest fits its lines to, where lines wrap at it: COLUMNS, or the terminal's. None where the output
    is no terminal and COLUMNS is not set (a CI log, a file): pytest's 80 is only its fallback there, and nothing
    wraps, so the table stays as wide as it is."""
    config = getattr(tr, "config", None)
    width = getattr(config.get_terminal_writer(), "fullwidth", None) if config is not None else None
    if not isinstance(width, int) or width <= 0:
        return None
    if not os.environ.get("COLUMNS"):
        try:  # as shutil.get_terminal_size, which pytest asks: the terminal of the process's own stdout
            os.get_terminal_size(sys.__stdout__.fileno())  # type: ignore[union-attr]  # None: caught below
        except (AttributeError, ValueError, OSError):
            return None
    return width


#: The outcomes under which pytest's terminal reporter keeps the reports of tests that ran.
_OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed", "error")


def nothing_profiled_line(settings: Settings, tr: TerminalReporter | None = None) -> str | None:
    """The line for a run that asked for reports or a baseline but profiled nothing; None if it asked for neither.
    Where pytest could not collect a file (`tr`'s collection errors), its tests did not run, marked or not: the line
    says so rather than how to mark a test."""
    given = (
        ("--inferscope-report", settings.report),
        ("--inferscope-compare", settings.compare),
        ("--inferscope-save-baseline", settings.save_baseline),
    )
    asked = [f"{option}={value}" for option, value in given if value is not None]
    if not asked:
        return None
    line = f"inferscope: no test was profiled, so {' and '.join(asked)} had nothing to work on"
    how = (
        "Profile a test by marking it @pytest.mark.inferscope (e.g. @pytest.mark.inferscope(rounds=20)) or giving it "
        "the inferscope fixture (def test_x(inferscope): ...), or pass --inferscope-all to profile every test."
    )
    stats: dict[str, list[Any]] = tr.stats if tr is not None else {}
    # CollectReports, by file: under xdist every worker reports each
    uncollected = len({r.nodeid for r in stats.get("error", ()) if getattr(r, "when", "") == "collect"})
    if not uncollected:
        ran = len({r.nodeid for k in _OUTCOMES for r in stats.get(k, ()) if getattr(r, "when", "") != "collect"})
        if not ran:  # (xdist's workers deselect: the count is theirs, not said here)
            deselected = len(stats.get("deselected", ()))
            return f"{line}: no test ran" + (f" ({deselected} deselected by -k or -m)." if deselected else ".")
        if ran and settings.all:
            were = (
                "the 1 test that ran was neither (a doctest, or another plugin's item), which runs"
                if ran == 1
                else f"the {ran} tests that ran were neither (doctests, or other plugins' items), which run"
            )
            kinds = "test functions and unittest.TestCase methods"
            return f"{line}: --inferscope-all profiles {kinds}, and {were} unprofiled."
        return f"{line}. {how}"
    one = uncollected == 1
    files, errors, them = ("1 file", "the error", "it") if one else (f"{uncollected} files", "the errors", "them")
    line += f": pytest could not collect {files} ({errors} above), so the tests in {them} did not run, marked or not."
    if tr is not None and tr.config.getoption("continue_on_collection_errors"):  # the tests it collected ran
        return f"{line} Fix {errors}; of the tests that ran, none asked to be profiled. {how}"
    return f"{line} Fix {errors}, or pass --continue-on-collection-errors to run the tests pytest did collect."


def switched_off_line(settings: Settings) -> str | None:
    """The line for a run switched off (--inferscope-disable) that asked for what then does nothing: an A/B gate, a
    baseline, reports (None when it asked for none of them). The switch wins, and the summary says so: a CI job whose
    variables switched profiling off while its command asks for a gate must not read as gated."""
    given = (
        ("--inferscope-ab", settings.ab),
        ("--inferscope-ab-python", settings.ab_python),
        ("--inferscope-compare", settings.compare),
        ("--inferscope-save-baseline", settings.save_baseline),
        ("--inferscope-report", settings.report),
    )
    asked = [f"{option}={value}" for option, value in given if value is not None]
    if not asked:
        return None
    source = settings.sources.get("enable", "cli")
    where = "--inferscope-disable" if source.startswith("cli") else f"set by {source}"
    return (
        f"inferscope: profiling is switched off ({where}): {' and '.join(asked)} did nothing; no test was profiled, "
        "compared or gated"
    )


class SwitchedOff:
    """The plugin object of a switched-off run that asked for something: its one line in the terminal summary."""

    def __init__(self, line: str) -> None:
        self.line = line

    def pytest_terminal_summary(self, terminalreporter: TerminalReporter) -> None:
        terminalreporter.write_sep("=", "inferscope")
        terminalreporter.write_line(self.line)


def summary_lines(results: list[TestResult], ab_column: str | None = None, width: int | None = None) -> list[str]:
    """The table's lines (`summary_table`)."""
    return [line for line, _ in summary_table(results, ab_column, width)]


def summary_table(
    results: list[TestResult], ab_column: str | None = None, width: int | None = None
) -> list[tuple[str, TestResult | None]]:
    """A header and one aligned row per test, sorted by id, each line with its test (None: a header); with no results,
    one line saying so.

    `ab_column`: the title of the A/B column ("vs origin/main"), shown when the run was an A/B run. `width`: the
    terminal's (None: any), which a row wider than it is fitted to: the test ids shortened in the middle, their
    test's name kept whole (`fit_id`); where that cannot be, each test's id on a line of its own above its figures.
    The figures are never cut.
    """
    if not results:
        return [("no tests were profiled", None)]
    ordered = sorted(results, key=table_order)
    ids = short_ids([r.nodeid for r in ordered])
    rows: list[tuple[str, ...]] = [(*_HEADER[:8], ab_column or "", _HEADER[8])]
    for r, short in zip(ordered, ids, strict=True):
        lat = r.latency
        median, iqr = (fmt_ms(lat.median), f"± {fmt_ms(lat.iqr)}") if lat.samples_ms else (NO_LATENCY, "")
        spread = ("n/a" if math.isnan(lat.rel_spread) else fmt_pct(lat.rel_spread)) if lat.samples_ms else ""
        bottleneck = fmt_bottleneck(r.analysis)
        rows.append(
            (short, median, iqr, spread, str(len(lat.samples_ms)), bottleneck, host_memory_cell(r), vs_baseline(r),
             vs_ref(r), verdict_label(r))
        )  # fmt: skip
    shown = (
        True, True, True, True, True, True,
        shows_host_memory(ordered),  # where memory matters: a table that takes none stays as narrow as before
        compared(ordered),  # the column only when the run was compared with a baseline
        ab_column is not None, True,
    )  # fmt: skip
    rows = [tuple(cell for cell, keep in zip(row, shown, strict=True) if keep) for row in rows]
    tests: list[TestResult | None] = [None, *ordered]
    right = {c for c, title in enumerate(rows[0]) if title in _RIGHT}
    if width is None:
        return list(zip(_aligned(rows, range(len(rows[0])), right), tests, strict=True))
    if (
        lines := _ids_fitted(rows, tests, right, width) or _ids_above(rows, tests, right, width, alone=False)
    ) is not None:
        return lines
    # The verdicts would take a line of their own (`FAIL (max_host_memory_added_mb)`, 31 columns, at 80): they name
    # their thresholds shortly (SHORT_KEYS), each said once below the table.
    legend = [(line, None) for line in verdict_legend(ordered, width)]
    if legend:
        rows = [rows[0], *((*row[:-1], short_verdict(r)) for row, r in zip(rows[1:], ordered, strict=True))]
    lines = _ids_fitted(rows, tests, right, width) or _ids_above(rows, tests, right, width, alone=True)
    return [*(lines or []), *legend]


def _widths(rows: list[tuple[str, ...]]) -> list[int]:
    """Each column's width: its widest cell's."""
    return [max(display_width(row[c]) for row in rows) for c in range(len(rows[0]))]


def _ids_fitted(
    rows: list[tuple[str, ...]], tests: list[TestResult | None], right: Set[int], width: int
) -> list[tuple[str, TestResult | None]] | None:
    """The table in `width` with its test ids shortened (`fit_id`), a line a test; None where a test's name would
    not fit whole beside the figures, or two ids would read alike."""
    widths = _widths(rows)
    rest = sum(widths[1:]) + len(_SEP) * (len(widths) - 1)  # the figures' columns, each after a separator
    if widths[0] + rest <= width:
        return list(zip(_aligned(rows, range(len(widths)), right), tests, strict=True))
    fitted = [fit_id(row[0], width - rest) for row in rows[1:]]
    whole = all(f.endswith(test_name(row[0])) for f, row in zip(fitted, rows[1:], strict=True))
    if not whole or len(set(fitted)) != len(fitted):
        return None
    rows = [rows[0], *((f, *row[1:]) for f, row in zip(fitted, rows[1:], strict=True))]
    return list(zip(_aligned(rows, range(len(widths)), right), tests, strict=True))


def _ids_above(
    rows: list[tuple[str, ...]], tests: list[TestResult | None], right: Set[int], width: int, alone: bool
) -> list[tuple[str, TestResult | None]] | None:
    """The table in `width` with each test's id on a line of its own, its figures below it (`summary_table`); the
    verdicts beside the ids where they would be alone on a line, and where they do not fit there either, on a line
    of their own if `alone`, else None."""
    widths = _widths(rows)
    # Too narrow for the ids beside the figures: each test's id on a line of its own, its figures indented below it,
    # on as many lines as they need (the columns that fit the width on each, aligned with the header's).
    bands: list[list[int]] = [[]]
    for c in range(1, len(widths)):
        if bands[-1] and len(_SEP) + sum(widths[k] + len(_SEP) for k in bands[-1]) + widths[c] > width:
            bands.append([])
        bands[-1].append(c)
    ids = [rows[0][0], *(fit_id(row[0], width) for row in rows[1:])]
    verdict, at = len(widths) - 1, max(display_width(i) for i in ids)
    beside = len(bands) > 1 and bands[-1] == [verdict] and at + len(_SEP) + widths[verdict] <= width
    if beside:  # on the id's line, in a column of their own: a line a test less, and the whole of each
        bands.pop()
        ids = [
            f"{i}{' ' * (at - display_width(i))}{_SEP}{row[verdict]}".rstrip() for i, row in zip(ids, rows, strict=True)
        ]
    elif bands[-1] == [verdict] and len(bands) > 1 and not alone:
        return None
    lines = [_aligned(rows, band, right) for band in bands]  # per band, a line per row
    out: list[tuple[str, TestResult | None]] = []
    for i, test in enumerate(tests):
        out.append((ids[i], test))
        out += [(_SEP + band[i], test) for band in lines]
    return out


#: Between two columns of the table, and before the figures of a test whose id is on the line above.
_SEP = "  "
#: The columns whose numbers line up on the right.
_RIGHT = frozenset({"median ms", "spread", "rounds", "host memory"})


def _aligned(rows: list[tuple[str, ...]], columns: Iterable[int], right: Set[int]) -> list[str]:
    """The rows' cells of `columns` as lines, each column as wide as its widest cell, those in `right` on the right."""
    cols = list(columns)
    widths = {c: max(display_width(row[c]) for row in rows) for c in cols}
    pad = {c: [" " * (widths[c] - display_width(row[c])) for row in rows] for c in cols}
    return [_SEP.join(pad[c][i] + row[c] if c in right else row[c] + pad[c][i] for c in cols).rstrip()
            for i, row in enumerate(rows)]  # fmt: skip


def display_width(text: str) -> int:
    """The terminal columns `text` takes: two for a wide character (CJK), none for a combining one."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _head(text: str, width: int) -> str:
    """The start of `text` that takes at most `width` columns."""
    taken = 0
    for i, c in enumerate(text):
        taken += display_width(c)
        if taken > width:
            return text[:i]
    return text


def _tail(text: str, width: int) -> str:
    """The end of `text` that takes at most `width` columns."""
    return _head(text[::-1], width)[::-1]


def test_name(test_id: str) -> str:
    """The test's own name in its id, with its parameters: what follows the last '::' ('test_y[cuda-8]')."""
    bracket = test_id.find("[")
    cut = test_id.rfind("::", 0, bracket if bracket >= 0 else len(test_id))
    return test_id[cut + 2 :] if cut >= 0 else test_id


def fit_id(test_id: str, width: int) -> str:
    """`test_id` in at most `width` characters: cut in the middle, its start and its test's name (`test_name`) kept,
    the name whole where it fits; else the name itself cut in the middle."""
    if display_width(test_id) <= width:
        return test_id
    name = test_name(test_id)
    for tail in (test_id[-len(name) - 2 :], name) if name != test_id else ():  # with its '::' where there is room
        if display_width(tail) < width:
            return _head(test_id, width - 1 - display_width(tail)) + "…" + tail
    head = _head(name, (2 * (width - 1) + 2) // 3)  # of the name, more of its start (the function) than of its end
    return head + "…" + _tail(name, width - 1 - display_width(head))


def compared(results: list[TestResult]) -> bool:
    """Whether any test was compared with a baseline: the tables' "vs baseline" column only then (else all "—")."""
    return any(r.regression is not None for r in results)


def vs_baseline(result: TestResult) -> str:
    """'+3.1% unchanged', '+22% regressed', or '—' when the test was not compared."""
    reg = result.regression
    if reg is None:
        return "—"
    ratio = reg.latency.ratio
    change = f"{100 * (ratio - 1):+.1f}% " if isinstance(ratio, float) and math.isfinite(ratio) else ""
    return f"{change}{reg.verdict}"


def vs_ref(result: TestResult) -> str:
    """The A/B column: '+3.1% unchanged', '+22% regressed', 'new', or '—' when the test ran no A/B."""
    ab = result.ab
    if ab is None:
        return "—"
    ratio = ab.get("ratio")
    change = f"{100 * (ratio - 1):+.1f}% " if isinstance(ratio, float) and math.isfinite(ratio) else ""
    return f"{change}{ab.get('verdict')}"


def ab_column(results: Iterable[TestResult]) -> str | None:
    """The title of the A/B column of the index pages and the step summary ("vs HEAD~1 (3f2a9c1d0e)"), or None outside
    an A/B run."""
    ab = next((r.ab for r in results if r.ab), None)
    return f"vs {ab.get('ref')}" if ab else None


def short_ids(nodeids: list[str]) -> list[str]:
    """Test ids without their folders (unless that makes two alike), shortened past MAX_ID (`fit_id`)."""

    def strip(nodeid: str) -> str:
        path, sep, rest = nodeid.partition("::")
        return path.rsplit("/", 1)[-1] + sep + rest

    short = [strip(n) for n in nodeids]
    clash = {s for s in short if short.count(s) > 1}
    out = []
    for full, s in zip(nodeids, short, strict=True):
        s = full if s in clash else s
        out.append(fit_id(s, MAX_ID))
    return out


def extra_rounds_lines(results: list[TestResult]) -> list[str]:
    """One summary line when the speed probe made tests run more rounds than requested, and why."""
    # A/B tests add pairs by their own sequential rule (ab/paired.py), not for the speed probe
    extra = {r.nodeid: len(r.latency.samples_ms) - r.rounds for r in results if r.ab is None}
    extra = {k: v for k, v in extra.items() if v > 0}
    if not extra:
        return []
    worst = max(extra, key=lambda k: extra[k])
    return [
        f"inferscope: the machine was busy: {fmt_count(len(extra), 'test')} ran {sum(extra.values())} rounds more than "
        f"requested (most: {worst}, +{extra[worst]}) to get their requested rounds at its usual speed "
        "(speed probe; at most --inferscope-round-cap times the rounds). Their latency statistics cover every "
        "round that ran; the regression gate compares the steady ones."
    ]


def rerun_lines(results: list[TestResult], indexed: bool = True) -> list[str]:
    """One summary line when tests ran more than once (pytest-rerunfailures, a test given twice): their runs' verdicts
    in order, since the table, the index and a saved baseline hold only the last (`indexed`: index.json is written,
    where the rest are; plain text, as the index's HTML shows the line too)."""
    rerun = [r for r in results if r.earlier_runs]
    if not rerun:
        return []
    shown = "; ".join(f"{r.nodeid}: {', '.join(r.earlier_runs)}, then {r.verdict}" for r in rerun[:3])
    where = ' ("earlier_runs" in index.json)' if indexed else ""
    more = f"; and {len(rerun) - 3} more{where}" if len(rerun) > 3 else ""
    return [
        f"inferscope: {fmt_count(len(rerun), 'test')} ran more than once in this session (a rerun plugin: "
        f"pytest-rerunfailures); the table, the index and a saved baseline hold each one's last run. {shown}{more}"
    ]


#: Where `added_time_text` sends a reader for each test's figures: plain text, as the index's HTML shows it too.
PER_TEST_ADDED = ' (per test: "added" in index.json)'


def added_time_text(results: list[TestResult], indexed: bool = True) -> str:
    """What the plugin added to the profiled tests' time (`TestResult.added`), summed, in words ('' when unknown);
    `indexed`: an index.json is written, where each test's figures are."""
    total, n = sum_added(results)
    return f"{fmt_added(total, n)}{PER_TEST_ADDED if indexed else ''}" if n else ""


def added_time_line(results: list[TestResult], indexed: bool) -> list[str]:
    """The summary's line of `added_time_text`, when there is one."""
    text = added_time_text(results, indexed)
    return [f"inferscope: the plugin added {text}"] if text else []


def tracer_lines(results: list[TestResult]) -> list[str]:
    """One summary line when a Python tracer or profiler (coverage, a debugger) ran beside the profiled tests."""
    tracers = sorted({str(r.environment["tracer"]) for r in results if r.environment.get("tracer")})
    if not tracers:
        return []
    return [
        f"inferscope: a Python tracer or profiler was active ({'; '.join(tracers)}): every Python line or call of the "
        "tests paid for it, so their latency is not what it is without it. A baseline saved without it is not "
        "compared with this run, nor one saved with it with a run without it."
    ]


def compile_lines(results: list[TestResult], indexed: bool = True) -> list[str]:
    """One summary line when torch.compile compiled in tests' measured rounds (the analysis's compile.measured_rounds,
    analyzer/rules_compile.py): their rows read the compile round's spread and the other rules' class, which the line
    says why of (`indexed`: reports are written, whose torch_compile finding tells the rest)."""
    compiled = [(r, int(n)) for r in results if (n := r.analysis.metrics.get("compile.measured_rounds") or 0)]
    if not compiled:
        return []
    one = len(compiled) == 1
    shown = ", ".join(f"{r.nodeid} ({n} of {len(r.latency.samples_ms) or r.rounds} rounds)" for r, n in compiled[:3])
    more = f"; and {len(compiled) - 3} more" if len(compiled) > 3 else ""
    tests, its = ("1 test", "its") if one else (f"{len(compiled)} tests", "their")
    reports = "report" if one else "reports"
    where = f"; the torch_compile finding of {its} {reports} says which rounds and why" if indexed else ""
    return [
        f"inferscope: {tests} compiled (torch.compile) in {its} measured rounds, so {its} latency and spread include "
        f"the compilation: {shown}{more}. Run more warm-up rounds (warmup=, --inferscope-warmup) or keep the input "
        f"shapes fixed{where}."
    ]


def session_lines(results: list[TestResult], indexed: bool) -> list[str]:
    """The summary's lines about the session's tests: measured rounds that compiled, rounds the speed probe added,
    reruns, a tracer beside them, what the plugin added (`indexed`: the session writes index.json and the reports,
    which the lines may point to)."""
    added = added_time_line(results, indexed)
    return [*compile_lines(results, indexed), *extra_rounds_lines(results), *rerun_lines(results, indexed),
            *tracer_lines(results), *added]  # fmt: skip
