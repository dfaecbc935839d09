"""The report folder: a test's files (`write_test_reports`, or handed to the writer's helper with
`submit_raw`), the session's index (`write_index`), and the GitHub step summary. The package's
`__init__` names these; see there for what each file holds."""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..events import Kind, RawTrace
from ..merger import Timeline
from ..results import SCHEMA_VERSION, TestResult
from . import html, markdown
from .files import atomic_open, atomic_write_bytes, atomic_write_text
from .fmt import NO_LATENCY, host_memory_figures, table_order, verdict_label
from .html import render_html_index, write_html_report, write_shared_assets
from .jsonreport import dumps, to_json
from .markdown import render_index, render_report
from .npz import npz_bytes
from .trace import THREAD_MIN_EVENTS, write_chrome_trace
from .writer import ReportWriter

_SAFE_SLUG = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
#: Below this many events raw.npz is compressed: a few kB less per test for microseconds (zip's
#: fixed headers and the JSON metadata dominate a small trace); above it, uncompressed is ~10x faster.
RAW_COMPRESS_MAX_EVENTS = 1_000
#: Kinds every timeline has whatever the test does: the test's span, its rounds, the plugin's
#: end-of-round waits, the memory readings, and CPU stack samples (whether one lands in a short
#: test is chance, and the files written must not be). A timeline of only these gets no trace file.
_OWN_KINDS = np.array([Kind.TEST, Kind.ROUND, Kind.WAIT, Kind.MEMORY, Kind.SAMPLE], dtype=np.uint8)
#: --inferscope-trace-format's values; the file is `trace.<format>`.
TRACE_FORMATS = ("json.gz", "json")


def trace_file(trace_format: str) -> str:
    """The name of a test's trace file in this format: trace.json.gz or trace.json."""
    if trace_format not in TRACE_FORMATS:
        raise ValueError(f"trace format {trace_format!r}: give one of {', '.join(TRACE_FORMATS)}")
    return f"trace.{trace_format}"


def load_templates() -> None:
    """Load and compile the templates of a test's report.html and report.md (else its first report pays it)."""
    html.load_template()
    markdown.load_template()


def has_trace(timeline: Timeline | None) -> bool:
    """Whether a test gets a trace file: its timeline holds what the test did (a scope, module, mark,
    call, GPU work or runtime call), not only what every test has (`_OWN_KINDS`).

    A trivial test's trace would be a bar per round, which report.html draws and report.json lists
    (latency samples); leaving it out saves a file, ~1 kB and ~0.5 ms per test. Samples alone are
    drawn in report.html and counted in its hotspots.
    """
    return timeline is not None and bool(len(timeline)) and not np.isin(timeline.events["kind"], _OWN_KINDS).all()


def write_test_reports(
    result: TestResult,
    timeline: Timeline | None,
    report_dir: Path,
    raw: RawTrace | None = None,
    idle: Any = None,
    writer: ReportWriter | None = None,
    raw_submitted: bool = False,
    trace_format: str = "json.gz",
) -> dict[str, str]:
    """Write one test's report files; return {"md", "html", "json"[, "trace"][, "raw"]} -> path relative to report_dir.

    The trace (`trace_file(trace_format)`: trace.json.gz, gzipped, or trace.json) is written when the
    timeline has more than the test's rounds (`has_trace`); a trace file of ours that report.json does
    not name (the other format's, from an earlier run) is removed after report.md is written.
    `raw` (the collection before merging) is kept as `raw.npz`, so `inferscope analyze` can
    re-run merger, analyzer and reporters from disk. `idle` is the analyzer's GPU idle attribution
    (`Context.gpu.idle`), shaded in report.html; when not given, report.html computes it.

    With a `writer`, a small test's files (below `THREAD_MIN_EVENTS` events) are formatted here and
    put on disk by the writer; the caller must `writer.wait()` before relying on them.
    `raw_submitted`: `submit_raw` handed raw.npz to the writer already.

    The same dict is stored in `result.files` (and so in report.json). A partial result (the test
    raised) is written the same way; its report says so at the top.
    """
    if not _SAFE_SLUG.fullmatch(result.slug or ""):
        raise ValueError(f"{result.nodeid}: slug {result.slug!r} is not a safe folder name; use slugify(nodeid)")
    folder = Path(report_dir) / result.slug
    n_events = max(len(timeline) if timeline is not None else 0, len(raw.events) if raw is not None else 0)
    small = n_events < THREAD_MIN_EVENTS
    trace = trace_file(trace_format) if has_trace(timeline) else None
    if writer is not None and small:
        return _submit_test_reports(result, timeline, Path(report_dir), folder, raw, idle, writer, raw_submitted, trace)
    folder.mkdir(parents=True, exist_ok=True)
    files = {k: f"{result.slug}/report.{k}" for k in ("md", "html", "json")}
    saving: _Saving | None = None
    if raw_submitted:
        files["raw"] = f"{result.slug}/raw.npz"
    elif raw is not None:
        files["raw"] = f"{result.slug}/raw.npz"
        if timeline is not None and len(timeline) >= THREAD_MIN_EVENTS:
            # A big raw.npz (mostly the kernel copying pages) is written while the trace is formatted.
            saving = _Saving(raw, folder / "raw.npz")
        else:
            _save_raw(raw, folder / "raw.npz")
    try:
        if trace is not None:
            assert timeline is not None
            # The trace before report.json: if the disk fills up, report.json does not point to a missing trace.
            # A big trace is gzipped here, on the writer thread of `write_chrome_trace` (see docs/performance.md).
            write_chrome_trace(timeline, folder / trace, title=result.nodeid, compress=trace.endswith(".gz"))
            files["trace"] = f"{result.slug}/{trace}"
    finally:
        if saving is not None:
            saving.wait()
    result.files = dict(files)
    shared = write_shared_assets(report_dir)
    write_html_report(result, timeline, folder / "report.html", idle=idle, shared=shared)
    atomic_write_text(folder / "report.json", to_json(result))
    atomic_write_text(folder / "report.md", render_report(result))
    for name in _stale_traces(trace):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / name)
    return files


def _stale_traces(trace: str | None) -> list[str]:
    """The trace files of ours a test's folder must not keep: every format's but the one just written."""
    return [n for n in map(trace_file, TRACE_FORMATS) if n != trace]


def submit_raw(raw: RawTrace, report_dir: Path, slug: str, nodeid: str, writer: ReportWriter) -> bool:
    """Hand a small test's raw.npz to the writer before it is analysed (its folder and first file are
    then made while the analysis runs); False for a big one, which `write_test_reports` writes."""
    if len(raw.events) >= THREAD_MIN_EVENTS or not _SAFE_SLUG.fullmatch(slug):
        return False
    writer.submit(nodeid, Path(report_dir) / slug, [("raw.npz", _raw_bytes(raw))])
    return True


def _raw_bytes(raw: RawTrace) -> bytes:
    """A small test's raw.npz, built in memory (`npz.npz_bytes`: `RawTrace.load` reads it as `RawTrace.save`'s)."""
    return npz_bytes(raw.arrays(), compress=len(raw.events) < RAW_COMPRESS_MAX_EVENTS)


def _submit_test_reports(
    result: TestResult,
    timeline: Timeline | None,
    report_dir: Path,
    folder: Path,
    raw: RawTrace | None,
    idle: Any,
    writer: ReportWriter,
    raw_submitted: bool,
    trace: str | None,
) -> dict[str, str]:
    """`write_test_reports` through the writer: the same files in the same order, each handed over
    as soon as it is formatted, so the writer works while the next one is."""
    files = {k: f"{result.slug}/report.{k}" for k in ("md", "html", "json")}

    def submit(name: str, data: bytes, compress: bool = False) -> None:
        writer.submit(result.nodeid, folder, [(name, data)], compress=compress)

    if raw is not None or raw_submitted:
        files["raw"] = f"{result.slug}/raw.npz"
        if not raw_submitted:
            assert raw is not None
            submit("raw.npz", _raw_bytes(raw))
    if trace is not None:
        assert timeline is not None
        buf = io.BytesIO()
        write_chrome_trace(timeline, buf, title=result.nodeid)
        submit(trace, buf.getvalue(), compress=trace.endswith(".gz"))  # gzipped by the helper, off pytest's path
        files["trace"] = f"{result.slug}/{trace}"
    result.files = dict(files)
    buf = io.BytesIO()
    write_html_report(result, timeline, buf, idle=idle, shared=write_shared_assets(report_dir))
    submit("report.html", buf.getvalue())
    submit("report.json", to_json(result).encode())
    submit("report.md", render_report(result).encode())
    writer.remove(result.nodeid, folder, _stale_traces(trace))
    return files


def _save_raw(raw: RawTrace, path: Path) -> None:
    """raw.npz without the writer (`measure(report_dir=...)`, `inferscope analyze`): a small one built in memory
    (`_raw_bytes`: a trivial test's 341 against 741 µs through `RawTrace.save`, dev VM), a big one streamed."""
    if len(raw.events) < THREAD_MIN_EVENTS:
        atomic_write_bytes(path, _raw_bytes(raw))
        return
    with atomic_open(path) as f:
        raw.save(f, compress=len(raw.events) < RAW_COMPRESS_MAX_EVENTS)


class _Saving:
    """`_save_raw` on a second thread; `wait()` returns when it is done and raises what it raised."""

    def __init__(self, raw: RawTrace, path: Path) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(raw, path), name="inferscope-raw-writer", daemon=True)
        self._thread.start()

    def _run(self, raw: RawTrace, path: Path) -> None:
        try:
            _save_raw(raw, path)
        except BaseException as e:  # handed to the caller by wait()
            self._error = e

    def wait(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise self._error


def write_index(results: list[TestResult], report_dir: Path, session: dict[str, Any]) -> Path:
    """Write index.md, index.html and index.json for a session's profiled tests; return the path of index.md.
    `session`: lines about the session (collectors, environment); what the plugin added to the tests joins them."""
    from .terminal import added_time_text

    if added := added_time_text(results):
        session = {**session, "the plugin added": added}
    report_dir = Path(report_dir)
    report_dir.mkdir(parents=True, exist_ok=True)
    index = {
        "schema_version": SCHEMA_VERSION,
        "session": session,
        "tests": [index_entry(r) for r in sorted(results, key=table_order)],
    }
    atomic_write_text(report_dir / "index.json", dumps(index))
    older = older_test_folders(results, report_dir)
    md = report_dir / "index.md"
    atomic_write_text(md, render_index(results, session, older))
    atomic_write_text(report_dir / "index.html", render_html_index(results, session, older))
    return md


def environment_line(session: Mapping[str, Any], results: list[TestResult]) -> str:
    """The index's environment line: the session's reading of the machine, except a key each test read for itself
    (`torch_threads`, at its collection's stop): there the values the tests had, "by test" where they differ."""
    env = dict(session)
    for key, value in env.items():
        seen = {str(r.environment[key]) for r in results if key in r.environment}
        if len(seen) > 1:
            env[key] = "by test: " + ", ".join(sorted(seen, key=lambda v: (len(v), v)))
        elif seen and seen != {str(value)}:
            env[key] = seen.pop()
    return ", ".join(f"{k} {v}" for k, v in sorted(env.items()))


def older_test_folders(results: list[TestResult], report_dir: Path) -> int:
    """How many test folders (with a report.json) in `report_dir` the index of `results` does not list: left there by
    earlier runs, since nothing in a report folder is removed. One listing of the folder, and a look into each
    folder that is not one of the results' (`inferscope analyze DIR` names them, with when they were written)."""
    ours = {"assets"} | {(r.files.get("json") or r.slug).replace("\\", "/").split("/")[0] for r in results}
    try:
        with os.scandir(report_dir) as entries:
            return sum(
                1
                for e in entries
                if e.name not in ours and e.is_dir() and os.path.isfile(os.path.join(e.path, "report.json"))
            )
    except OSError:  # (the index is written; the count is only said)
        return 0


def index_entry(result: TestResult) -> dict[str, Any]:
    """One test's line of index.json: the figures CI dashboards read, and where its files are."""
    lat = result.latency
    return {
        "nodeid": result.nodeid,
        "slug": result.slug,
        "verdict": result.verdict,
        "verdict_label": verdict_label(result),
        "outcome": result.outcome,
        "rounds": result.rounds,
        "measured_rounds": len(lat.samples_ms),
        "warmup": result.warmup,
        "latency_ms": {k: getattr(lat, k) for k in ("median", "iqr", "mean", "p90", "p99", "min", "max")}
        | {"rel_spread": lat.rel_spread},
        "bottleneck": result.analysis.bottleneck,
        "confidence": result.analysis.confidence,
        "failed_checks": [c.key for c in result.failed_checks],
        "checks": {c.key: c.status for c in result.checks},
        "dropped_events": result.dropped_events,
        "host_memory_mb": host_memory_figures(result),  # every test's, though the tables show them where they matter
        "earlier_runs": result.earlier_runs,
        "partial_reason": result.partial_reason,
        "files": dict(result.files),
        # what the plugin added, ms, with reports_ms (not in its report.json); a count as a count, though a result
        # read back by an older version (every figure a float) holds it as 0.0
        "added": {k: int(v) if k == "extra_rounds" else v for k, v in result.added.items()},
        "vs_baseline": _vs_baseline(result),
        "vs_ref": _vs_ref(result),
    }


def _vs_baseline(result: TestResult) -> dict[str, Any] | None:
    """index.json's comparison with the baseline (the index pages' and the terminal's "vs baseline"), or None."""
    reg = result.regression
    if reg is None:
        return None
    ratio = reg.latency.ratio
    return {
        "baseline": reg.baseline_name, "verdict": reg.verdict,
        "median_change": ratio - 1 if math.isfinite(ratio) else None,  # +0.283: 28.3% slower than the baseline
        "baseline_median_ms": reg.latency.base_median, "median_ms": reg.latency.new_median,
    }  # fmt: skip


def _vs_ref(result: TestResult) -> dict[str, Any] | None:
    """index.json's A/B verdict (the index pages' and the terminal's "vs REF"), or None outside an A/B run."""
    ab = result.ab
    if ab is None:
        return None
    ratio = ab.get("ratio")
    return {
        "ref": ab.get("ref"), "verdict": ab.get("verdict"),
        "median_change": ratio - 1 if isinstance(ratio, float) and math.isfinite(ratio) else None,  # of the pairs'
        "p_value": ab.get("p_value"), "pairs": ab.get("pairs"),
    }  # fmt: skip


def append_step_summary(
    path: Path, results: list[TestResult], report_dir: Path | None, not_compared: str | None = None
) -> None:
    """Append the session's table to a GitHub Actions job summary ($GITHUB_STEP_SUMMARY).

    Appended, not replaced: other steps of the job write to the same file. The failures come first, one line each:
    the test's id and how it failed (`failure_lines`, as index.md lists them); the whole messages are in the job's
    log and the reports. `not_compared`: why an A/B run did not compare with --inferscope-compare's baseline, said
    under the table.
    """
    from .failure import failure_lines
    from .fmt import fmt_bottleneck, fmt_ms, md_name, md_text
    from .terminal import ab_column, compared, vs_baseline, vs_ref

    ordered = sorted(results, key=table_order)
    failed = [(r.nodeid, what) for r, what in failure_lines(results)]
    lines = ["## inferscope", ""]
    if failed:
        tests = len({nodeid for nodeid, _ in failed})
        lines += [f"**{tests} test{'s' * (tests != 1)} failed:**", ""]
        lines += [*(f"- {md_name(nodeid)}: {md_text(what)}" for nodeid, what in failed), ""]
    ab = ab_column(results)  # an A/B run: a column against the other side
    vs = compared(results)  # a run compared with a baseline: a column against it
    extra_head = (" vs baseline |" if vs else "") + (f" {ab} |" if ab else "")
    lines += [
        f"| Test | Median (ms) | ± IQR |{extra_head} Bottleneck | Verdict |",
        "|---|---|---|" + "---|" * (vs + bool(ab)) + "---|---|",
    ]
    for r in ordered:
        lat = r.latency
        extra = (f" {vs_baseline(r)} |" if vs else "") + (f" {vs_ref(r)} |" if ab else "")
        median, iqr = (fmt_ms(lat.median), fmt_ms(lat.iqr)) if lat.samples_ms else (NO_LATENCY, "")  # (a partial's)
        lines.append(
            f"| {md_name(r.nodeid)} | {median} | {iqr} |{extra} {fmt_bottleneck(r.analysis)} | {verdict_label(r)} |"
        )
    if not_compared is not None:
        lines += ["", f"inferscope A/B: {md_text(not_compared)}."]
    if report_dir is not None:
        lines += ["", f"Reports: `{report_dir / 'index.md'}`"]
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n\n")
