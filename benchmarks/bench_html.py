"""The HTML report at 1,000,000 events: writing it (Python), and opening, drawing and zooming it (Chromium).

For synthetic traces (`benchmarks/synthetic.py`) of 1,000,000 and 100,000 events, merged and
analysed once, each repetition times on a fresh file:

* `write_html_report(result, timeline, path)`: lanes, idle gaps, the typed-array columns, base64,
  the Jinja2 page, the atomic write (what `write_test_reports` adds for report.html), once as
  `write_test_reports` calls it today (the analyzer's idle attribution recomputed inside), once
  given the attribution the analysis already made (`idle=Context.gpu.idle`);
* its parts: `timeline_payload` (lanes + idle gaps + columns) and `top_kernels`.

Then, unless --no-browser, the 1,000,000-event report is opened in headless Chromium over the
DevTools protocol (tests/browser/chromium_cdp.py), in a new tab per repetition:

* time to the first drawn timeline, measured by the page from navigation start (`ready_ms`: parse
  of the ~23 MB page, base64 decode, lane arrays, first draw) and its parts (`decode_ms`,
  `build_ms`, `first_draw_ms`), plus the wall time seen from Python;
* a zoom: a wheel event over the timeline (zoom in ~2.7x), then two more (deeper views mix binned
  and one-by-one drawing), each timed from the event to the finished redraw (`last_draw_ms` in the
  page, and the wall time from Python, which includes the protocol round trips).

    python benchmarks/bench_html.py             # about a minute
    python benchmarks/bench_html.py --quick     # one repetition
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import _common
from _common import med

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
for _p in (str(ROOT), str(HERE), str(ROOT / "tests" / "browser")):
    if _p not in sys.path:
        sys.path.insert(0, _p)

from synthetic import make_raw_trace  # noqa: E402

from pytest_inferscope.analyzer import Context, analyze  # noqa: E402
from pytest_inferscope.analyzer.idle import CAUSES  # noqa: E402
from pytest_inferscope.merger import merge  # noqa: E402
from pytest_inferscope.reporters.html import write_html_report  # noqa: E402
from pytest_inferscope.reporters.lanes import analyzer_gaps, timeline_payload, top_kernels  # noqa: E402
from pytest_inferscope.results import CollectorInfo, TestResult  # noqa: E402


def result_for(tl: object, n: int) -> TestResult:
    ctx = Context(tl)  # type: ignore[arg-type]
    analysis = analyze(tl, ctx=ctx)  # type: ignore[arg-type]
    return TestResult(
        nodeid=f"bench::synthetic[{n}]", slug=f"synthetic-{n}", outcome="passed", verdict="pass", rounds=17, warmup=3,
        latency=ctx.rounds.latency, analysis=analysis, event_count=n,
        collectors=[CollectorInfo("cpu", True, "sampling 1 ms"), CollectorInfo("gpu", True, "synthetic")],
    )  # fmt: skip


def fmt(xs: list[float]) -> str:
    return f"{med(xs):,.0f} ({min(xs):,.0f} – {max(xs):,.0f})"


def python_side(sizes: list[int], reps: int, out: Path) -> Path:
    print("\n## Python: ms, median (best – worst)")
    print("| events | write_html_report | same, idle given | timeline_payload | top_kernels | report.html |")
    print("| --- | --- | --- | --- | --- | --- |")
    biggest = out / "missing"
    for n in sizes:
        tl = merge(make_raw_trace(n, seed=0))
        result = result_for(tl, n)
        idle = Context(tl).gpu.idle
        gaps = analyzer_gaps(idle, CAUSES)
        write, given, payload, kernels = [], [], [], []
        path = out / f"report-{n}.html"
        for _ in range(reps):
            t = time.perf_counter()
            write_html_report(result, tl, path)
            write.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            write_html_report(result, tl, path, idle=idle)
            given.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            timeline_payload(tl, gaps)
            payload.append((time.perf_counter() - t) * 1e3)
            t = time.perf_counter()
            top_kernels(tl)
            kernels.append((time.perf_counter() - t) * 1e3)
        size = path.stat().st_size
        print(
            f"| {n:,} | {fmt(write)} | {fmt(given)} | {fmt(payload)} | {fmt(kernels)} | "
            f"{size / 1e6:.1f} MB, {size / n:.1f} B/event |"
        )
        biggest = path if n == max(sizes) else biggest
    return biggest


def browser_side(path: Path, reps: int) -> None:
    from chromium_cdp import Browser, find_chromium

    exe = find_chromium()
    if exe is None:
        print("\n(no Chromium found: browser timings skipped)")
        return
    b = Browser(exe)
    print(f"\n## Chromium ({b.version}, headless, software rendering), {path.name}: ms")
    rows: dict[str, list[float]] = {}
    try:
        for _ in range(reps):
            t = time.perf_counter()
            page = b.open(path.as_uri(), 1400, 1000)
            page.wait_for("window.inferscopeTimeline && window.inferscopeTimeline.draws > 0", timeout=120)
            rows.setdefault("open → first draw, wall from Python", []).append((time.perf_counter() - t) * 1e3)
            timing = page.evaluate("window.inferscopeTimeline.timing")
            for k in ("ready_ms", "decode_ms", "build_ms", "first_draw_ms"):
                rows.setdefault(f"page: {k}", []).append(float(timing[k]))
            box = page.evaluate("(() => { const r = document.getElementById('is-canvas').getBoundingClientRect();"
                                "return [r.x + r.width * 0.6, r.y + 40]; })()")  # fmt: skip
            for step in (1, 2, 3):
                draws = page.evaluate("window.inferscopeTimeline.draws")
                t = time.perf_counter()
                page.wheel(box[0], box[1], -500 if step == 1 else -1200)
                page.wait_for(f"window.inferscopeTimeline.draws > {draws}", timeout=60)
                wall = (time.perf_counter() - t) * 1e3
                span = page.evaluate("(() => { const v = window.inferscopeTimeline.getView(); return v[1] - v[0]; })()")
                rows.setdefault(f"zoom {step}: wall from Python", []).append(wall)
                rows.setdefault(f"zoom {step}: page draw (last_draw_ms)", []).append(
                    float(page.evaluate("window.inferscopeTimeline.timing.last_draw_ms"))
                )
                rows.setdefault(f"zoom {step}: ms in view", []).append(span / 1e6)
            errors = page.console_errors()
            if errors:
                print("console errors:", errors)
            page.close()
    finally:
        b.close()
    for k, xs in rows.items():
        print(f"| {k} | {med(xs):,.1f} ({min(xs):,.1f} – {max(xs):,.1f}) |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one repetition")
    ap.add_argument("--no-browser", action="store_true", help="Python side only")
    args = ap.parse_args()
    import numpy as np

    print("\n".join(_common.header("HTML report: generation and browser timings", f"numpy {np.__version__}")))
    reps = 1 if args.quick else 5
    with tempfile.TemporaryDirectory(prefix="inferscope-bench-html-") as tmp:
        biggest = python_side([1_000_000, 100_000], reps, Path(tmp))
        if not args.no_browser:
            browser_side(biggest, 1 if args.quick else 3)
        os.sync()


if __name__ == "__main__":
    main()
