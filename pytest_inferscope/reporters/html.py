"""HTML reports (report.html per test, index.html per session) from the Jinja2 templates shipped here.

Nothing is fetched from the network. In a report folder (`write_test_reports`) every report.html
takes the stylesheet and the timeline's script from `<report dir>/assets/` (`write_shared_assets`,
~24 kB written once per folder instead of once per test); `write_html_report` called without
`shared` inlines them, so that page is one self-contained file. index.html always inlines its
stylesheet. The timeline's events are not HTML: they travel as typed-array columns in base64
(`lanes.py`) and are drawn on a <canvas> by `templates/timeline.js`, which draws only what the
view needs and bins the rest per pixel.

Numbers are formatted by the same filters as the Markdown report, so the two always agree.
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import jinja2
from markupsafe import Markup

from ..merger import Timeline
from ..results import LatencyStats, RegressionVerdict, TestResult
from .files import atomic_write_bytes, open_target
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
    older_text,
    rounds_text,
    same_reason,
    shows_host_memory,
    table_order,
    verdict_label,
)
from .lanes import CATS, Fields, Gaps, Payload, analyzer_gaps, cause_code, timeline_payload, top_kernels
from .lanes_rounds import rounds_payload
from .markdown import TEMPLATES, compiled_templates, trace_name

#: Marks where the base64 data goes in the rendered page (written around, never through Jinja). Every
#: text from a test is escaped and the manifest has "<" as \u003c, so nothing else can contain it.
_DATA_MARK = "<!--inferscope-data-->"

#: The folder of a report directory that holds the shared stylesheet and script.
ASSETS_FOLDER = "assets"


def write_shared_assets(report_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Make sure `<report_dir>/assets/` holds the stylesheet and script; return their URLs from a test's folder.

    The file names carry a hash of the content (`report-<hash>.css`), so a report.html written by
    another version of the plugin into the same folder keeps the assets it was written with, and a
    file that exists already is complete (written atomically) and is not written again (one stat
    per file and test: a folder emptied between two tests gets them again).
    """
    folder = os.path.join(os.fspath(report_dir), ASSETS_FOLDER)
    urls: dict[str, str] = {"folder": f"../{ASSETS_FOLDER}/"}
    for key, (name, data) in _asset_files().items():
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            os.makedirs(folder, exist_ok=True)
            atomic_write_bytes(path, data)
        urls[key] = f"../{ASSETS_FOLDER}/{name}"
    return urls


@functools.cache
def _asset_files() -> dict[str, tuple[str, bytes]]:
    """The shared assets: key in the template -> (file name with a content hash, bytes)."""
    out = {}
    for key, text in _assets().items():
        data = str(text).encode()
        stem, ext = key.rsplit("_", 1)
        out[key] = (f"{stem}-{hashlib.sha256(data).hexdigest()[:12]}.{ext}", data)
    return out


def write_html_report(
    result: TestResult,
    timeline: Timeline | None,
    path: str | os.PathLike[str] | BinaryIO,
    idle: Any = None,
    shared: dict[str, str] | None = None,
) -> None:
    """Write a test's report.html (atomically; or into a file object): the report, and the timeline when one is given.

    `idle` is the analyzer's idle attribution (`analyzer.idle_gaps`), if the caller has it; else it
    is computed here (with the default launch-gap threshold), or, with an analyzer that has none,
    the gaps are shaded without a cause. `shared`: the URLs `write_shared_assets` returned, to
    link the stylesheet and script instead of inlining them (None: one self-contained page).
    """
    fields = Fields(timeline.events) if timeline is not None else None  # shared: each column copied once
    payload, gaps = None, None
    if timeline is not None and len(timeline):
        gaps = _attributed_gaps(timeline, idle)
        payload = rounds_payload(timeline, gaps)  # a timeline of only rounds: the same payload, in Python
        if payload is None:
            payload = timeline_payload(timeline, gaps, fields)
    page = _env().get_template("report.html.j2").render(
        r=result, lat=result.latency, a=result.analysis, verdict=verdict_label(result),
        suggestions=result.analysis.suggestions,  # report.md's order: the simulated fixes first (analyzer)
        kernels=top_kernels(timeline, f=fields) if timeline is not None else [],
        chart=latency_chart(result.latency, result.regression),
        manifest=_script_json(payload.manifest if payload is not None else None),
        data=Markup(_DATA_MARK), assets=_assets(), shared=shared, idle=_idle_summary(result, payload, gaps), cats=CATS,
        trace_name=trace_name(result),
    )  # fmt: skip
    head, _, tail = page.partition(_DATA_MARK)
    with open_target(path) as f:
        f.write(head.encode())
        if payload is not None:
            f.write(payload.base64())
        f.write(tail.encode())


def render_html_index(results: list[TestResult], session: dict[str, Any], older: int = 0) -> str:
    """The index.html text of a session: one row per profiled test, linked to its report.html; `older`: as
    index.md's."""
    from .failure import failure_lines
    from .terminal import ab_column, compared, vs_baseline, vs_ref

    rows = sorted(results, key=table_order)
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in ("pass", "fail", "partial")}
    return _env().get_template("index.html.j2").render(
        results=rows, session=session, counts=counts, verdict=verdict_label, link=html_link, assets=_assets(),
        spark=sparkline, vs=vs_baseline if compared(rows) else None, ab_head=ab_column(rows), vs_ref=vs_ref,
        older=older_text(older),
        memory=host_memory_cell if shows_host_memory(rows) else None, failures=failure_lines(rows),
    )  # fmt: skip


def html_link(result: TestResult) -> str:
    """Relative URL of a result's report.html, from the report directory."""
    rel = result.files.get("html") or f"{result.slug}/report.html"
    return quote(rel.replace("\\", "/"))


def _attributed_gaps(timeline: Timeline, idle: Any) -> Gaps | None:
    """The analyzer's GPU idle intervals with their causes; None where this analyzer attributes none."""
    try:
        from ..analyzer import idle_gaps
        from ..analyzer.idle import CAUSES
    except ImportError:  # an analyzer without idle attribution: the gaps are shaded without a cause
        return None
    return analyzer_gaps(idle if idle is not None else idle_gaps(timeline), CAUSES)


def _idle_summary(result: TestResult, payload: Payload | None, gaps: Gaps | None) -> dict[str, Any]:
    """What the page says about idle gaps: whether they are shaded and attributed, the ms per round by cause, and
    whether the timeline has GPU work or launches at all (without, the page says nothing of gaps and launch lines)."""
    summary = (result.analysis.gpu or {}).get("idle_gaps") or {}
    by_cause = summary.get("by_cause_ms_per_round") if isinstance(summary, dict) else None
    kinds = {lane["kind"] for lane in payload.manifest["lanes"]} if payload is not None else set()
    shown = "idle" in kinds
    rows = []
    if isinstance(by_cause, dict):
        for cause, ms in by_cause.items():
            code = cause_code(cause)
            rows.append({"label": CATS["idle"][code], "code": code, "ms": ms})
    gpu = bool(kinds & {"stream", "runtime"})  # GPU work or launches: the note on idle gaps and launch lines applies
    return {"shown": shown, "attributed": gaps is not None and gaps.attributed, "by_cause": rows, "gpu": gpu}


def _script_json(value: Any) -> Markup:
    """JSON that is safe inside a <script> element ("</script>" in a kernel name cannot end it)."""
    text = json.dumps(value, separators=(",", ":"), allow_nan=False, default=str)
    return Markup(text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


_CATS_MARK = "/* lanes.CATS */ {}"


@functools.cache
def _assets() -> dict[str, Markup]:
    """The stylesheet and script, read once, inlined into every page."""
    out = {}
    for name in ("report.css", "timeline.js"):
        text = (TEMPLATES / name).read_text(encoding="utf-8")
        if name == "timeline.js":  # the categories' names, the same for every page (lanes.CATS), once in the script
            if _CATS_MARK not in text:
                raise ValueError(f"{TEMPLATES / name}: has no {_CATS_MARK!r} to write the categories' names into")
            text = text.replace(_CATS_MARK, json.dumps(CATS, ensure_ascii=False))
        if "</" + ("style" if name.endswith("css") else "script") in text.lower():
            raise ValueError(f"{TEMPLATES / name}: contains a closing tag and cannot be inlined")
        out[name.replace(".", "_")] = Markup(text)
    return out


def latency_chart(
    lat: LatencyStats, regression: RegressionVerdict | None, width: int = 560, height: int = 150
) -> Markup:
    """An inline SVG: one bar per round (warm-up grey, trace rounds hatched), this run's median, and the baseline's."""
    samples = [("warm-up", x) for x in lat.warmup_ms] + [("round", x) for x in lat.samples_ms]
    samples += [("trace", x) for x in lat.trace_ms]  # after the measured rounds, as they ran
    samples = [(k, x) for k, x in samples if x is not None and math.isfinite(x)]
    if not samples:
        return Markup('<p class="muted">No round completed: nothing to chart.</p>')
    base_median = regression.latency.base_median if regression is not None else None
    if base_median is not None and not math.isfinite(base_median):
        base_median = None
    # Scaled to the measured rounds (and the baseline): a slow first warm-up must not flatten them;
    # a bar above the scale is cut, marked, and keeps its value in its tooltip.
    scaled = [x for k, x in samples if k == "round"] or [x for _, x in samples]
    top = max(scaled + ([base_median] if isinstance(base_median, int | float) else []))
    top = _nice_ceiling(top * 1.08)
    left, bottom, right, up = 46, 20, 8, 8
    w, h = width - left - right, height - bottom - up
    step = w / len(samples)
    bar = max(1.0, step * 0.72)

    def y(v: float) -> float:
        return up + h - h * v / top

    parts = [
        f'<svg class="chart" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="latency per round">'
    ]
    for tick in (0, top / 2, top):
        parts.append(
            f'<line x1="{left}" x2="{left + w}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" class="grid"/>'
            f'<text x="{left - 4}" y="{y(tick) + 3:.1f}" class="tick" text-anchor="end">{fmt_ms(tick)}</text>'
        )
    for i, (k, v) in enumerate(samples):
        x = left + i * step + (step - bar) / 2
        n = i - len(lat.warmup_ms) + 1
        label = {
            "warm-up": f"warm-up {i + 1}",
            "trace": f"trace round {n - len(lat.samples_ms)} (launch calls recorded; not a sample)",
        }.get(k, f"round {n}")
        shown = min(v, top)
        css = {"warm-up": "warm", "trace": "trace"}.get(k, "bar")
        parts.append(
            f'<rect class="{css}" x="{x:.1f}" y="{y(shown):.1f}" width="{bar:.1f}" '
            f'height="{max(0.5, up + h - y(shown)):.1f}"><title>{label}: {fmt_ms(v)} ms</title></rect>'
        )
        if v > top:
            parts.append(
                f'<text class="tick cut" x="{x + bar / 2:.1f}" y="{up + 9:.1f}" text-anchor="middle">'
                f"▲<title>{label}: {fmt_ms(v)} ms, above the scale</title></text>"
            )
    lines = [("median", lat.median, "this run's median")]
    if base_median is not None and regression is not None:
        lines.append(("baseline", float(base_median), f"baseline {regression.baseline_name} median"))
    for cls, v, what in lines:
        if v is None or not math.isfinite(v):
            continue
        parts.append(
            f'<line class="{cls}" x1="{left}" x2="{left + w}" y1="{y(v):.1f}" y2="{y(v):.1f}">'
            f"<title>{Markup.escape(what)}: {fmt_ms(v)} ms</title></line>"
        )
    parts.append(
        f'<text x="{left}" y="{height - 5}" class="tick">round →</text>'
        f'<text x="{left + w}" y="{height - 5}" class="tick" text-anchor="end">ms per round</text></svg>'
    )
    return Markup("".join(parts))


def sparkline(lat: LatencyStats, width: int = 120, height: int = 24) -> Markup:
    """A tiny inline SVG of the measured rounds' latency, for the index."""
    xs = [x for x in lat.samples_ms if x is not None and math.isfinite(x)]
    if len(xs) < 2:
        return Markup("")
    lo, hi = min(xs), max(xs)
    span = (hi - lo) or 1.0
    pts = " ".join(
        f"{i * (width - 2) / (len(xs) - 1) + 1:.1f},{height - 2 - (v - lo) / span * (height - 4):.1f}"
        for i, v in enumerate(xs)
    )
    return Markup(
        f'<svg class="spark" viewBox="0 0 {width} {height}" width="{width}" height="{height}" role="img" '
        f'aria-label="latency per round, {fmt_ms(lo)} to {fmt_ms(hi)} ms"><polyline points="{pts}"/></svg>'
    )


def _nice_ceiling(v: float) -> float:
    """The smallest 1, 2, 2.5 or 5 × 10^k at or above v (chart axes)."""
    if v <= 0 or not math.isfinite(v):
        return 1.0
    mag = 10 ** math.floor(math.log10(v))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= v)


def load_template() -> None:
    """Load and compile report.html's template now, not at the first test's report."""
    _env().get_template("report.html.j2")


@functools.cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,  # the templates ship with the package: no stat() of them per report
    )
    env.filters.update(
        ms=fmt_ms,
        pct=fmt_pct,
        conf=fmt_conf,
        value=fmt_value,
        check_limit=check_limit,
        check_measured=check_measured,
        bytes=_fmt_bytes,
        unit=_unit,
        added=fmt_added,
        bottleneck=fmt_bottleneck,
    )
    env.globals.update(
        rounds_text=rounds_text, no_latency=NO_LATENCY, host_memory=host_memory_text, same_reason=same_reason
    )
    env.bytecode_cache = compiled_templates(env)
    return env


def _unit(x: float) -> float:
    """`x` held to [0, 1] (a meter's width): what Jinja's `[[x, 0] | max, 1] | min` gives, at a tenth of the cost."""
    return min(max(x, 0), 1)


def _fmt_bytes(n: float | None) -> str:
    if n is None or not math.isfinite(n):
        return "n/a"
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n:.0f} B"
