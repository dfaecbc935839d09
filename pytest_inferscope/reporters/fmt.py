"""The formatting every report and the terminal summary share: milliseconds, shares, confidences, values, the
verdict's label. Without Jinja2, which only the report files need (the terminal summary of a session that writes
none imports this)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable
from typing import Any

from ..results import UNCLASSIFIED, Analysis, BreakdownPart, CheckResult, TestResult
from ..units import fmt_ms as fmt_ms  # the checks' messages write milliseconds with it too (units.py)
from ..units import fmt_pct as fmt_pct  # a finding's share too (results.Finding.explains)
from ..units import fmt_threshold


def verdict_label(result: TestResult) -> str:
    """'pass', 'FAIL (key, key)' naming the failed checks, or 'partial'."""
    if result.verdict == "partial":
        return "partial"
    failed = [c.key for c in result.failed_checks]
    if result.verdict == "fail" or failed:
        return f"FAIL ({', '.join(failed)})" if failed else "FAIL"
    return result.verdict


#: The thresholds as a verdict cell names them where the table is wider than the terminal (`short_verdict`): at 80
#: columns `FAIL (max_host_memory_added_mb)`, 31 of them, put each test's verdict on a line of its own.
SHORT_KEYS = {
    "max_latency_ms": "latency",
    "max_regression": "regression",
    "expect_bottleneck": "class",
    "expect_fix": "fix",
    "max_host_memory_mb": "RSS",
    "max_host_memory_added_mb": "RSS+",
    "max_gpu_idle": "GPU idle",
    "max_gpu_memory_mb": "GPU mem",
    "max_transfer_fraction": "copies",
    "max_kernel_launches": "launches",
    "max_h2d_bytes": "H2D",
    "max_syncs": "syncs",
    "max_overhead": "overhead",
}


def short_verdict(result: TestResult) -> str:
    """`verdict_label` with its thresholds' short names (SHORT_KEYS): 'FAIL (RSS+)'."""
    label = verdict_label(result)
    if not label.startswith("FAIL ("):
        return label
    return f"FAIL ({', '.join(SHORT_KEYS.get(c.key, c.key) for c in result.failed_checks)})"


def verdict_legend(results: Iterable[TestResult], width: int) -> list[str]:
    """The lines under a table whose verdicts are short (`short_verdict`) saying each short name's threshold, in
    lines of at most `width` where it can (ASCII: a character a column); none where no verdict shortens."""
    keys = sorted({c.key for r in results if short_verdict(r) != verdict_label(r) for c in r.failed_checks})
    said = [f"{SHORT_KEYS[k]} = {k}" for k in keys if k in SHORT_KEYS]
    if not said:
        return []
    head = "FAIL (...) names the thresholds crossed:"
    lines, line = [], head
    for part in said:
        sep = " " if line == head else "; "
        if len(f"{line}{sep}{part}") > width:  # on the next line, indented
            lines.append(line if line == head else f"{line};")
            line = f"  {part}"
        else:
            line = f"{line}{sep}{part}"
    return [*lines, line]


def rounds_text(result: TestResult) -> str:
    """The header's rounds: '20 rounds (warm-up 2)', or, where more or fewer were measured than asked for (the speed
    probe's on a busy machine, a body that raised), '27 rounds measured (20 asked for, warm-up 2)'."""
    ran, asked = len(result.latency.samples_ms), result.rounds
    if ran == asked:
        return f"{asked} round{'s' * (asked != 1)} (warm-up {result.warmup}"
    return f"{ran} round{'s' * (ran != 1)} measured ({asked} asked for, warm-up {result.warmup}"


def same_reason(above: Any, part: BreakdownPart) -> bool:
    """Whether a breakdown part not collected has the reason of the part not collected just above it, so that the
    reports say "not collected (as above)" rather than the reason again (without a GPU: GPU compute, then Transfers).
    `above` is the template loop's previous part, undefined for the first."""
    not_collected = isinstance(above, BreakdownPart) and not (above.collected and above.ms is not None)
    return not_collected and bool(part.reason) and above.reason == part.reason


#: The reports' host memory line is written where the rounds took this many MB (the peak above the RSS before them,
#: or the RSS growth over them) or faulted this many pages in a round.
HOST_MEMORY_LINE_MB = 1.0
HOST_MEMORY_LINE_FAULTS = 100


def host_memory_text(analysis: Analysis) -> str:
    """The reports' host memory line: the process's peak RSS over the rounds (the kernel's own, or sampled), what was
    resident before them and the rise above it, the growth over the measured rounds, the page faults; "" where host
    memory was not read or the rounds took none to speak of (a trivial test's files have a budget: test_plugin's
    TRIVIAL_REPORT_BYTES)."""
    m = analysis.metrics
    peak, start, grew = m.get("mem.rss_peak_mb"), m.get("mem.rss_start_mb"), m.get("mem.rss_growth_mb")
    faults = m.get("mem.minor_faults_per_round") or 0.0
    if peak is None:
        return ""
    took = max(peak - (peak if start is None else start), abs(grew or 0.0))
    if took < HOST_MEMORY_LINE_MB and faults < HOST_MEMORY_LINE_FAULTS:
        return ""  # the rounds took no memory to speak of (a trivial test's reports stay small)
    how = {
        1.0: "sampled every 10 ms at most: a shorter spike may be missed",
        2.0: "read at the rounds' start and end only: a peak inside them is missed",
    }.get(m.get("mem.rss_peak_sampled") or 0.0, "kernel's exact peak")
    parts = [f"Host memory: peak RSS {peak:.1f} MB (whole process; {how})"]
    if start is not None:
        parts[0] += f" = {start:.1f} MB before the rounds + {max(0.0, peak - start):.1f} MB"
    if grew is not None:
        parts.append(f"{'fell' if grew < 0 else 'grew'} {abs(grew):.1f} MB over the measured rounds")
    parts.append(f"{faults:,.0f} page faults a round")
    return "; ".join(parts) + "."


def table_order(result: TestResult) -> tuple[Any, ...]:
    """The tables' order (the terminal's, index.md's, index.html's, index.json's, the job summary's): by test id, the
    numbers in it as numbers, so a sweep reads `[bf16-1]`, `[bf16-2]`, `[bf16-16]`, `[bf16-128]` as pytest ran it
    (by the characters alone, 128 came before 16, and 16 before 1); the same under xdist as serially."""
    return id_order(result.nodeid)


def id_order(nodeid: str) -> tuple[Any, ...]:
    """`table_order` of a test id (`inferscope compare`'s table, whose sides are ids)."""
    parts = re.split(r"(\d+)", nodeid)
    return tuple((0, int(p), p) if i % 2 else (1, 0, p) for i, p in enumerate(parts))


#: The host memory thresholds: a test with one has the tables' host memory column (`shows_host_memory`).
HOST_MEMORY_KEYS = ("max_host_memory_mb", "max_host_memory_added_mb")


def shows_host_memory(results: list[TestResult]) -> bool:
    """Whether the tables (the terminal's, index.md's, index.html's) have a host memory column: where a test has a host
    memory threshold, or its rounds took HOST_MEMORY_LINE_MB or more above the RSS before them (the reports' line)."""
    for r in results:
        m = r.analysis.metrics
        peak, start = m.get("mem.rss_peak_mb"), m.get("mem.rss_start_mb")
        if any(c.key in HOST_MEMORY_KEYS for c in r.checks):
            return True
        if peak is not None and start is not None and peak - start >= HOST_MEMORY_LINE_MB:
            return True
    return False


def host_memory_cell(result: TestResult) -> str:
    """A table's host memory cell: what the rounds took above the RSS before them ('+60.0 MB'), or, for a test whose
    max_host_memory_mb is what it failed on or its only host memory threshold, the process's peak RSS it compared
    ('612.3 MB'); '—' where host memory was not read."""
    m = result.analysis.metrics
    peak, start = m.get("mem.rss_peak_mb"), m.get("mem.rss_start_mb")
    if peak is None:
        return "—"
    checks = {c.key: c.status for c in result.checks}
    whole = checks.get("max_host_memory_mb") == "failed" or (
        "max_host_memory_mb" in checks and checks.get("max_host_memory_added_mb") != "failed"
    )
    if whole or start is None:
        return f"{peak:.1f} MB"
    added = f"{max(0.0, peak - start):.1f}"
    return "0 MB" if added == "0.0" else f"+{added} MB"  # nothing added reads as the other columns' zero ('± 0')


def host_memory_figures(result: TestResult) -> dict[str, float | None] | None:
    """index.json's host memory of a test, in MB, the figures its thresholds compare: `rss_peak` the process's peak RSS
    over the rounds (max_host_memory_mb), `rss_start` its RSS before them, `added` the peak above it, never below 0
    (max_host_memory_added_mb; None where the start was not read); None where host memory was not read."""
    m = result.analysis.metrics
    peak, start = m.get("mem.rss_peak_mb"), m.get("mem.rss_start_mb")
    if peak is None:
        return None
    return {"rss_peak": peak, "rss_start": start, "added": None if start is None else max(0.0, peak - start)}


#: The latency of a test none of whose measured rounds completed (the body raised in the first, or in the warm-up),
#: the same in every table: the terminal's, index.md's and index.html's, the job summary's (with no IQR or spread
#: beside it); the reports say "none (no measured round completed)" and, at the top, where the body raised.
NO_LATENCY = "none"


def fmt_conf(c: float | None) -> str:
    """A confidence in [0, 1] as a whole percentage."""
    return "n/a" if c is None or not math.isfinite(c) else f"{c * 100:.0f}%"


def fmt_bottleneck(analysis: Analysis) -> str:
    """A table's bottleneck cell: the class with its confidence, 'cpu_bound (85%)'; 'unclassified' alone, which names
    no class to be confident in (its report says why: `Analysis.unclassified_reason`)."""
    if analysis.bottleneck == UNCLASSIFIED:
        return UNCLASSIFIED
    return f"{analysis.bottleneck} ({fmt_conf(analysis.confidence)})"


def fmt_value(v: Any) -> str:
    """Any evidence, limit or measured value, compactly: floats to 4 significant digits."""
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "n/a" if not math.isfinite(v) else f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list | tuple):
        shown = ", ".join(fmt_value(x) for x in v[:8])
        return f"[{shown}{', …' if len(v) > 8 else ''}]"
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)


def check_limit(check: CheckResult) -> str:
    """The Checks table's Limit cell: as the check's message writes it, in its unit (`units.fmt_threshold`)."""
    return fmt_threshold(check.key, check.limit, _change(check)) or fmt_value(check.limit)


def check_measured(check: CheckResult) -> str:
    """The Checks table's Measured cell: as the check's message writes it, apart from the limit where they would read
    alike; a regression's ratio as the median's change ("+98.0%"), which its limit allows."""
    change = _change(check)
    shown = fmt_threshold(check.key, change, check.limit) or fmt_value(check.measured)
    return f"+{shown}" if change is not check.measured and change > 0 else shown


def _change(check: CheckResult) -> Any:
    """The measured value as the limit reads it: max_regression's ratio (1.98) as the change (0.98)."""
    m = check.measured
    ratio = check.key == "max_regression" and isinstance(m, int | float) and not isinstance(m, bool)
    return m - 1 if ratio else m


def fmt_added(added: dict[str, float], tests: int = 0) -> str:
    """What the plugin added to a test (`TestResult.added`), in words: '12.4 ms (15.5% over the 80.1 ms of the calls
    asked for): 1 more round 8.10 ms, outside the rounds 2.30 ms, analysis 2.00 ms' (a second and more in seconds;
    the first test of a process also says what loading the plugin took; a re-analysis's, '... when the test ran (...):
    ...; re-analysing it took 1.54 ms').
    With `tests`: the sums of that many tests' (`sum_added`: '1.05 s to the 200 profiled tests (...): ...')."""

    def t(key: str) -> str:
        value = added.get(key) or 0.0
        return f"{value / 1e3:.2f} s" if value >= 1000 else f"{fmt_ms(value)} ms"

    asked = added.get("asked_ms") or 0.0
    ratio = (added.get("added_ms") or 0.0) / asked if asked else 0.0
    over = f"{ratio:,.0f}x" if ratio >= 10 else f"{fmt_pct(ratio)} over"  # trivial calls: 5 ms on 0.003 ms
    share = f" ({over} the {t('asked_ms')} of the calls asked for)"
    theirs = f" (other plugins' collectors {t('collectors_ms')})" if added.get("collectors_ms") else ""
    parts = [f"outside the rounds {t('outside_rounds_ms')}{theirs}"]
    if "analysis_ms" in added:  # (not known for a raw trace re-analysed without its report.json)
        parts.append(f"analysis {t('analysis_ms')}")
    extra = int(added.get("extra_rounds") or 0)
    if extra:
        where = f" in {int(added.get('extra_tests') or 0)} of them" if tests else ""
        parts.insert(0, f"{extra} more round{'s' * (extra != 1)}{where} {t('extra_rounds_ms')}")
    if "reports_ms" in added:
        parts.append(f"writing reports {t('reports_ms')}")
    if added.get("load_ms"):  # the first profiled test of a process: the plugin's code loaded, the machine read
        parts.append(f"loading the plugin {t('load_ms')} (once a process)")
    whom = f" to the {tests} profiled test{'s' * (tests != 1)}" if tests else ""
    again = ""
    if "reanalysis_ms" in added:  # `inferscope analyze`: the run's figures, and the re-analysis's time apart
        whom += " when they ran" if tests > 1 else " when it ran" if tests else " when the test ran"
        again = f"; re-analysing {'them' if tests > 1 else 'it'} took {t('reanalysis_ms')}"
    return f"{t('added_ms')}{whom}{share if asked else ''}: {', '.join(parts)}{again}"


def sum_added(results: list[TestResult]) -> tuple[dict[str, float], int]:
    """The `added` figures of `results` summed (`extra_tests`: how many ran more rounds), and how many had them."""
    added = [r.added for r in results if r.added]
    total: dict[str, float] = {}
    for a in added:
        for k, v in a.items():
            total[k] = total.get(k, 0.0) + (v or 0.0)
    total["extra_tests"] = sum(1 for a in added if a.get("extra_rounds"))
    return total, len(added)


def md_cell(v: Any) -> str:
    """Text safe inside a Markdown table cell: one line, pipes escaped."""
    text = v if isinstance(v, str) else fmt_value(v)
    return " ".join(text.split()).replace("|", "\\|") or " "


def md_text(v: Any) -> str:
    """Inline text that must not start Markdown constructs: brackets and backticks escaped."""
    return str(v).replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]").replace("`", "\\`")


#: What starts Markdown inline syntax in a name: emphasis (`*`, and `_` where it is not inside a word, as in
#: `__init__`), links, code spans, raw HTML, and the backslash itself.
_MD_INLINE = re.compile(r"[\\`*\[\]<>]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def md_name(v: Any) -> str:
    """A name the user chose (a test id, a scope, a mark, a function) as literal text in a Markdown table cell."""
    return md_cell(_MD_INLINE.sub(lambda m: "\\" + m.group(0), str(v)))


def md_code(v: Any) -> str:
    """`v` as one inline code span, whatever backticks it holds (CommonMark: a longer fence, padded by a space)."""
    text = " ".join(str(v).split())
    fence = "`" * (1 + max((len(run) for run in re.findall("`+", text)), default=0))
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def older_text(n: int) -> str:
    """The indexes' line on the older test folders they do not list ('' for none)."""
    if not n:
        return ""
    if n == 1:
        return "1 older test folder from an earlier run is in this folder (not listed)"
    return f"{n} older test folders from earlier runs are in this folder (not listed)"
