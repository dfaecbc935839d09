"""Markdown reports (report.md per test, index.md per session) from the Jinja2 templates shipped here.

The templates do the layout; the number formatting they share (milliseconds, shares, confidences)
is `fmt`'s, so a change of format is made once for every report; this module adds the table cells.
"""

from __future__ import annotations

import contextlib
import functools
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2
import jinja2.bccache

from ..results import CheckResult, TestResult
from .fmt import (
    NO_LATENCY,
    check_limit,
    check_measured,
    fmt_added,
    fmt_bottleneck,
    fmt_conf,
    fmt_ms,
    fmt_pct,
    fmt_value,
    host_memory_cell,
    host_memory_text,
    md_cell,
    md_code,
    md_name,
    md_text,
    older_text,
    rounds_text,
    same_reason,
    shows_host_memory,
    table_order,
    verdict_label,
)

TEMPLATES = Path(__file__).with_name("templates")
#: Events listed under a finding; the rest are counted, and all are in the trace (trace.json.gz).
MAX_FINDING_EVENTS = 10
_CHECK_ORDER = {"failed": 0, "not_evaluated": 1, "passed": 2}


def trace_name(result: TestResult) -> str:
    """The name of the test's trace file in its folder (trace.json.gz or trace.json), or "" when it has none."""
    return result.files.get("trace", "").replace("\\", "/").rsplit("/", 1)[-1]


def render_report(result: TestResult) -> str:
    """The report.md text of one test."""
    checks = sorted(result.checks, key=lambda c: _CHECK_ORDER.get(c.status, 1))  # sorted() is stable
    template = _env().get_template("report.md.j2")
    return template.render(
        r=result, lat=result.latency, a=result.analysis, checks=checks, verdict=verdict_label(result),
        max_events=MAX_FINDING_EVENTS, trace_name=trace_name(result),
    )  # fmt: skip


def render_index(results: list[TestResult], session: dict[str, Any], older: int = 0) -> str:
    """The index.md text of a session: one row per profiled test, linked to its report; `older`: the test folders of
    earlier runs in the folder, not listed (`folder.older_test_folders`)."""
    rows = sorted(results, key=table_order)
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("pass", "fail", "partial")}
    from .failure import failure_lines
    from .terminal import ab_column, compared, vs_baseline, vs_ref

    template = _env().get_template("index.md.j2")
    return template.render(
        results=rows, session=session, counts=counts, verdict=verdict_label, link=report_link,
        vs=vs_baseline if compared(rows) else None,
        ab_head=ab_column(rows), vs_ref=vs_ref, older=older_text(older),
        memory=host_memory_cell if shows_host_memory(rows) else None, failures=failure_lines(rows),
    )  # fmt: skip


def report_link(result: TestResult) -> str:
    """Relative URL of a result's report.md, from the report directory."""
    rel = result.files.get("md") or f"{result.slug}/report.md"
    return quote(rel.replace("\\", "/"))


def load_template() -> None:
    """Load and compile report.md's template now, not at the first test's report."""
    _env().get_template("report.md.j2")


@functools.cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=False,  # Markdown, not HTML
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        auto_reload=False,  # the templates ship with the package: no stat() of them per report
    )
    env.filters.update(
        ms=fmt_ms,
        pct=fmt_pct,
        conf=fmt_conf,
        bottleneck=fmt_bottleneck,
        cell=md_cell,
        value=fmt_value,
        check_limit=check_limit,
        check_measured=check_measured,
        text=md_text,
        added=fmt_added,
        name=md_name,
        code=md_code,
    )
    env.filters["failed_keys"] = lambda checks: [c.key for c in checks if c.status == "failed"]
    env.globals.update(
        rounds_text=rounds_text, no_latency=NO_LATENCY, host_memory=host_memory_text, same_reason=same_reason
    )
    env.tests["failed"] = lambda c: isinstance(c, CheckResult) and c.status == "failed"
    env.bytecode_cache = compiled_templates(env)
    return env


class _CompiledTemplates(jinja2.FileSystemBytecodeCache):
    """Jinja2's cache of compiled templates in the user's temp folder, its keys salted with what the
    compiled code depends on besides the template's source (which Jinja2 checks itself); a cache
    that cannot be read or written is no cache, never an error."""

    def __init__(self, salt: str) -> None:
        super().__init__()  # `<temp>/_jinja2-cache-<uid>`, made 0700 and checked to be the user's
        self.salt = salt

    def get_cache_key(self, name: str, filename: str | None = None) -> str:
        return super().get_cache_key(name, f"{filename}\0{self.salt}")

    def load_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().load_bytecode(bucket)

    def dump_bytecode(self, bucket: jinja2.bccache.Bucket) -> None:
        with contextlib.suppress(OSError):
            super().dump_bytecode(bucket)


def compiled_templates(env: jinja2.Environment) -> jinja2.BytecodeCache | None:
    """A cache of `env`'s compiled templates between sessions, or None where there can be none.

    Compiling report.html.j2, report.md.j2 and the two index templates takes ~100 ms, once per
    session (per xdist worker): 0.2 ms per test in a session of 500 trivial tests. Loading them
    compiled takes ~1 ms. The salt holds the environment's options that change the compiled code.
    """
    options = ("autoescape", "trim_blocks", "lstrip_blocks", "keep_trailing_newline", "newline_sequence", "optimized")
    salt = repr(
        (jinja2.__version__, [(k, getattr(env, k, None)) for k in options], env.undefined.__name__,
         sorted(env.filters), sorted(env.tests), env.finalize is not None)
    )  # fmt: skip
    try:
        return _CompiledTemplates(salt)
    except (OSError, RuntimeError):  # no private temp folder (RuntimeError: Jinja2 found it unsafe)
        return None
