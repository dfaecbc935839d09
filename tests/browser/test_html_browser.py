"""The HTML reports in a real browser (headless Chromium): they load without console errors or network
requests, the timeline draws (the screenshot's pixels), and zoom, pan and "go to event" move the view."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from chromium_cdp import Browser, Page, png_pixels

from pytest_inferscope.checks import Plan
from pytest_inferscope.events import RawTrace
from pytest_inferscope.postprocess import process
from pytest_inferscope.reporters import write_index
from pytest_inferscope.results import CollectorInfo, TestResult

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
READY = "window.inferscopeTimeline && window.inferscopeTimeline.draws > 0"
#: Colours timeline.js fills kernels (by name) and module spans with.
KERNEL_COLOURS = {"#3d7cc9", "#5591d6", "#2f69b0", "#6ea3de", "#2a5c9c"}
MODULE_COLOURS = {"#8b6cc4", "#a083d6", "#7559b0", "#b59be0"}
COLLECTORS = [CollectorInfo("cpu", True, "sampling 10 ms", overhead=0.004), CollectorInfo("memory", True, "procfs")]


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Reports of a GPU test (synthetic, and recorded on an H200), a CPU-only test (recorded), and their index."""
    out = tmp_path_factory.mktemp("reports")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from synthetic import make_raw_trace
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    gpu = [*COLLECTORS, CollectorInfo("gpu", True, "native CUPTI")]
    results: list[TestResult] = []
    for raw, plan, coll in (
        (make_raw_trace(30_000, seed=4), Plan("tests/test_bert.py::test_infer[cuda]", 17, 3, {}), gpu),
        (RawTrace.load(str(DATA / "sync_bound/trace.npz")), Plan("tests/test_s.py::test_sync", 5, 1, {}), gpu),
        (RawTrace.load(str(DATA / "memory_bound/trace.npz")), Plan("tests/test_m.py::test_grow", 5, 1, {}), COLLECTORS),
    ):  # fmt: skip
        results.append(process(raw, plan, coll, report_dir=out)[0])
    write_index(results, out, {"collectors": "cpu sampling; gpu native"})
    pages = {name: out / r.files["html"] for name, r in zip(("gpu", "recorded", "cpu"), results, strict=True)}
    return {**pages, "index": out / "index.html"}


@pytest.fixture
def gpu_page(browser: Browser, reports: dict[str, Path]) -> Iterator[Page]:
    page = browser.open(reports["gpu"].as_uri())
    page.wait_for(READY)
    yield page
    page.close()


def view(page: Page) -> tuple[float, float]:
    t0, t1 = page.evaluate("window.inferscopeTimeline.getView()")
    return float(t0), float(t1)


def after(page: Page, action: Any) -> tuple[float, float]:
    """Do `action`, wait for the timeline to redraw, return the new view."""
    draws = page.evaluate("window.inferscopeTimeline.draws")
    action()
    page.wait_for(f"window.inferscopeTimeline.draws > {draws}", timeout=10)
    return view(page)


def rect(page: Page, selector: str, document: bool = False) -> dict[str, float]:
    """An element's box in the viewport (for input events), or in the document (for screenshot clips)."""
    return dict(page.evaluate(f"(() => {{ const r = document.querySelector({selector!r}).getBoundingClientRect();"
                              f"const dx = {'scrollX' if document else 0}, dy = {'scrollY' if document else 0};"
                              "return {x: r.x + dx, y: r.y + dy, width: r.width, height: r.height}; })()"))  # fmt: skip


def timeline_pixels(page: Page) -> np.ndarray:
    return png_pixels(page.screenshot(clip=rect(page, "#is-timeline", document=True)))[..., :3]


def colours(px: np.ndarray) -> dict[str, int]:
    """Pixel count per colour."""
    packed = (px[..., 0].astype(np.uint32) << 16) | (px[..., 1].astype(np.uint32) << 8) | px[..., 2]
    values, counts = np.unique(packed, return_counts=True)
    return {f"#{int(v):06x}": int(n) for v, n in zip(values, counts, strict=True)}


def pixels_of(px: np.ndarray, palette: set[str]) -> int:
    return sum(n for c, n in colours(px).items() if c in palette)


@pytest.mark.parametrize("which", ["gpu", "recorded", "cpu", "index"])
def test_reports_load_without_errors_or_network(browser: Browser, reports: dict[str, Path], which: str) -> None:
    url = reports[which].as_uri()
    page = browser.open(url)
    try:
        if which != "index":
            page.wait_for(READY)
            assert page.evaluate("window.inferscopeTimeline.events") > (1000 if which != "cpu" else 50)
        assert page.evaluate("document.title").startswith("inferscope")
        assert page.console_errors() == []
        # Nothing fetched from the network: no CDN, no fonts. A test's report.html takes the stylesheet
        # and script from the report folder's assets/ (written once per folder); index.html inlines its own.
        assets = reports[which].parent.parent.joinpath("assets").as_uri() + "/"
        extra = [u for u in page.requests() if u != url]
        assert page.requests()[0] == url
        names = sorted(u.rsplit("/", 1)[1].split("-")[0] for u in extra)
        assert names == ([] if which == "index" else ["report", "timeline"])
        assert all(u.startswith(assets) for u in extra)
    finally:
        page.close()


def test_the_timeline_draws_lanes_in_their_colours(gpu_page: Page) -> None:
    px = timeline_pixels(gpu_page)
    plot = px[:, 210:]  # right of the lane labels
    background = np.all(plot == 255, axis=-1)
    assert background.mean() < 0.9, "the timeline is (almost) blank"
    assert len(colours(plot)) > 20
    assert pixels_of(plot, KERNEL_COLOURS) > 200 and pixels_of(plot, MODULE_COLOURS) > 200


def test_wheel_zooms_around_the_cursor_and_drag_pans(gpu_page: Page) -> None:
    page = gpu_page
    box = rect(page, "#is-canvas")
    t0, t1 = view(page)
    x, y = box["x"] + 200 + (box["width"] - 208) * 0.75, box["y"] + 60  # 3/4 of the way along the plot
    at = t0 + (t1 - t0) * 0.75
    before = timeline_pixels(page)
    z0, z1 = after(page, lambda: page.wheel(x, y, -500))  # wheel up: zoom in
    assert (z1 - z0) < 0.5 * (t1 - t0)
    assert z0 + (z1 - z0) * 0.75 == pytest.approx(at, rel=0.01)  # the time under the cursor stays put
    assert not np.array_equal(before, timeline_pixels(page))
    page.mouse("mousePressed", x, y, button="left", clickCount=1)
    p0, p1 = after(page, lambda: page.mouse("mouseMoved", x - 300, y, button="left"))
    page.mouse("mouseReleased", x - 300, y, button="left", clickCount=1)
    assert p1 - p0 == pytest.approx(z1 - z0, rel=1e-6) and p0 > z0  # dragged left: later times come into view
    assert page.console_errors() == []


def test_buttons_and_keys_zoom_and_fit(gpu_page: Page) -> None:
    page = gpu_page
    t0, t1 = view(page)
    plus = rect(page, 'button[data-act="in"]')
    z0, z1 = after(page, lambda: page.click(plus["x"] + plus["width"] / 2, plus["y"] + plus["height"] / 2))
    assert z1 - z0 == pytest.approx((t1 - t0) / 2, rel=1e-6)
    page.evaluate("document.getElementById('is-timeline').focus()")
    o0, o1 = after(page, lambda: page.key("-"))
    assert o1 - o0 == pytest.approx(t1 - t0, rel=1e-6)
    after(page, lambda: page.key("+"))
    assert after(page, lambda: page.key("0")) == pytest.approx((t0, t1))
    assert page.evaluate("document.getElementById('is-range').textContent").endswith("in view)")


def test_a_findings_event_row_brings_the_event_into_view(gpu_page: Page) -> None:
    page = gpu_page
    if not page.evaluate("document.querySelectorAll('tr.goto').length"):
        pytest.skip("the analyzer listed no events for this trace")
    start, dur = (float(x) * 1e6 for x in page.evaluate("Object.values(document.querySelector('tr.goto').dataset)"))
    f0, f1 = view(page)  # the whole test, as the page opens
    t0, t1 = after(page, lambda: page.evaluate("document.querySelector('tr.goto').click()"))
    assert t0 <= start and start + dur <= t1  # the whole event in view
    assert t1 - t0 == pytest.approx(max(3 * dur, 0.2e6), rel=1e-3) and t1 - t0 < f1 - f0


def test_cpu_report_draws_host_lanes_only(browser: Browser, reports: dict[str, Path]) -> None:
    page = browser.open(reports["cpu"].as_uri())
    try:
        page.wait_for(READY)
        plot = timeline_pixels(page)[:, 210:]
        assert np.all(plot == 255, axis=-1).mean() < 0.95
        assert pixels_of(plot, KERNEL_COLOURS) < 20  # a stray anti-aliased pixel at most: no GPU lanes
        assert page.console_errors() == []
    finally:
        page.close()


def test_report_html_copied_alone_says_where_its_assets_are(
    browser: Browser, reports: dict[str, Path], tmp_path: Path
) -> None:
    """report.html without the report folder's assets/: the page says so (the stylesheet would hide the note)."""
    alone = tmp_path / "alone" / "report.html"
    alone.parent.mkdir()
    alone.write_bytes(reports["cpu"].read_bytes())
    page = browser.open(alone.as_uri())
    try:
        page.wait_for("document.readyState === 'complete'")
        assert page.evaluate("getComputedStyle(document.querySelector('.assets-missing')).display") != "none"
    finally:
        page.close()
    page = browser.open(reports["cpu"].as_uri())
    try:
        page.wait_for(READY)
        assert page.evaluate("getComputedStyle(document.querySelector('.assets-missing')).display") == "none"
    finally:
        page.close()
