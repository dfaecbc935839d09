"""The HTML report without a browser: files, the embedded timeline data (decoded here as the page
decodes it), idle gaps and their causes, escaping, self-containment, and the report's sections."""

from __future__ import annotations

import base64
import dataclasses
import json
import math
import re
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from pytest_inferscope.checks import Plan
from pytest_inferscope.comparison import Comparison
from pytest_inferscope.events import EVENT_DTYPE, CopyKind, Kind, MemoryKind, RawTrace, copy_flags
from pytest_inferscope.merger import Timeline
from pytest_inferscope.postprocess import process
from pytest_inferscope.reporters import write_index, write_test_reports
from pytest_inferscope.reporters.files import slugify
from pytest_inferscope.reporters.html import latency_chart, write_html_report
from pytest_inferscope.reporters.lanes import (
    CATS,
    IDLE_CAUSES,
    analyzer_gaps,
    build_lanes,
    cause_code,
    idle_lanes,
    own_gaps,
    timeline_payload,
    top_kernels,
)
from pytest_inferscope.results import (
    Analysis,
    ClockFit,
    CollectorInfo,
    EventRef,
    Finding,
    LatencyStats,
    RegressionVerdict,
    Suggestion,
    TestResult,
)
from pytest_inferscope.rounds import RoundKind, kind_flags

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
MS = 1_000_000


# ---- decoding the page, as timeline.js does --------------------------------------------------


def page_payload(html: str) -> tuple[dict[str, Any], bytes]:
    """The manifest and the column bytes embedded in a report.html."""
    manifest = re.search(r'<script type="application/json" id="is-manifest">(.*?)</script>', html, re.S)
    data = re.search(r'<script type="application/octet-stream" id="is-data">(.*?)</script>', html, re.S)
    assert manifest and data, "the page has no timeline data"
    return json.loads(manifest.group(1)), base64.b64decode(data.group(1))


def lane_columns(lane: dict[str, Any], blob: bytes) -> dict[str, np.ndarray]:
    """A lane's columns as arrays; `start` made absolute, constants expanded."""
    out = {}
    for key, (dtype, offset, n) in lane["cols"].items():
        assert offset % 8 == 0, f"{key} of {lane['label']} is not 8-byte aligned"
        out[key] = np.frombuffer(blob, dtype=np.dtype(dtype).newbyteorder("<"), count=n, offset=offset)
    if lane["start_mode"] == "delta":
        out["start"] = lane["base"] + np.cumsum(out["start"].astype(np.int64))
    else:
        out["start"] = out["start"].astype(np.int64)
    out["dur"] = out["dur"].astype(np.int64)
    for key, value in lane["consts"].items():
        out[key] = np.full(lane["n"], value)
    return out


def ev(kind: int, start: int, end: int, *, name: int = 0, tid: int = 7, corr: int = 0, device: int = -1,
       stream: int = -1, value: int = 0, flags: int = 0) -> tuple[Any, ...]:  # fmt: skip
    return (start, end, value, corr, name, tid, stream, device, kind, 0, flags)


STRINGS = ["test", "round", "forward", "attn", "cudaLaunchKernel", "gemm", "Memcpy HtoD", "memset", "mark",
           "a:main (a.py:1);a:inner (a.py:5)", "cudaStreamSynchronize", "softmax", "layer", "block"]  # fmt: skip


def timeline(rows: list[tuple[Any, ...]], strings: list[str] = STRINGS) -> Timeline:
    events = np.array(rows, dtype=EVENT_DTYPE)
    events = events[np.lexsort((events["start"] - events["end"], events["start"]))]
    parent = _parents(events)
    return Timeline(events=events, parent=parent, strings=list(strings))


def _parents(events: np.ndarray) -> np.ndarray:
    """Innermost enclosing span on the same thread (spans only), as the merger gives."""
    spans = {Kind.TEST, Kind.ROUND, Kind.SCOPE, Kind.MODULE, Kind.CALL}
    parent = np.full(len(events), -1, np.int32)
    for i, e in enumerate(events):
        best = -1
        for j in range(i):
            o = events[j]
            if o["kind"] in spans and o["tid"] == e["tid"] and o["start"] <= e["start"] and e["end"] <= o["end"]:
                best = j
        parent[i] = best
    return parent


PAGEABLE_HTOD = copy_flags(CopyKind.HTOD, MemoryKind.PAGEABLE, MemoryKind.DEVICE)


def gpu_timeline() -> Timeline:
    """Two rounds (the first a warm-up) of nested scopes and modules, launches, kernels on two streams, copies."""
    rows = [ev(Kind.TEST, 0, 20 * MS, name=0)]
    for r in range(2):
        t = r * 10 * MS
        rows += [
            ev(
                Kind.ROUND,
                t,
                t + 10 * MS,
                name=1,
                value=r,
                flags=kind_flags(RoundKind.WARMUP if r == 0 else RoundKind.MEASURED),
            ),
            ev(Kind.SCOPE, t + MS, t + 9 * MS, name=2),
            ev(Kind.SCOPE, t + 2 * MS, t + 4 * MS, name=3),  # nested in "forward"
            ev(Kind.MODULE, t + 2 * MS, t + 8 * MS, name=12),
            ev(Kind.MODULE, t + 3 * MS, t + 7 * MS, name=13),
            ev(Kind.MODULE, t + 4 * MS, t + 5 * MS, name=12),
            ev(Kind.SAMPLE, t, t + MS, name=9),
            ev(Kind.MARK, t + 5 * MS, t + 5 * MS, name=8),
        ]
        for k in range(3):
            c = 100 * r + k + 1
            launch = t + 2 * MS + k * MS
            rows += [
                ev(Kind.RUNTIME, launch, launch + 20_000, name=4, corr=c),
                ev(Kind.KERNEL, launch + 50_000, launch + 550_000, name=5 if k != 2 else 11, corr=c, device=0,
                   stream=7, tid=-1),
            ]  # fmt: skip
        rows += [
            ev(Kind.RUNTIME, t + 6 * MS, t + 6 * MS + 10_000, name=4, corr=100 * r + 9),
            ev(Kind.MEMCPY, t + 6 * MS + 20_000, t + 6 * MS + 420_000, name=6, corr=100 * r + 9, device=0,
               stream=13, tid=-1, value=4 << 20, flags=PAGEABLE_HTOD),
            ev(Kind.MEMSET, t + 7 * MS, t + 7 * MS + 30_000, name=7, device=0, stream=13, tid=-1, value=1024),
            ev(Kind.SYNC, t + 8 * MS, t + 9 * MS, name=10),  # the host blocked in a synchronize
            ev(Kind.RUNTIME, t + 8 * MS + 100, t + 8 * MS + 900, name=4),  # overlaps the sync: a second row
            ev(Kind.MEMORY, t, t, value=1 << 30),  # counters are not drawn
        ]  # fmt: skip
    return timeline(rows)


def result_for(nodeid: str = "tests/test_model.py::test_forward[cuda]", **extra: Any) -> TestResult:
    save = [Suggestion("Pin the batch", "pageable copies", 1.5, "transfers"),
            Suggestion("Use CUDA graphs", "launch overhead", 4.0, "launch_overhead"),
            Suggestion("Fuse softmax", "small kernels", 0.2, "launch_overhead")]  # fmt: skip
    finding = Finding("transfers", "Copies from pageable memory", "4 MB per round from pageable memory.",
                      "transfer_bound", 0.3, 0.8, evidence={"pageable_copies": 1, "h2d_mb_per_round": 4.0},
                      events=[EventRef("memcpy", "Memcpy HtoD", 16.02, 0.4)], suggestions=save[:1])  # fmt: skip
    ranked = sorted(save, key=lambda s: -s.saving_ms)  # as rank_suggestions gives them
    analysis = Analysis("transfer_bound", 0.8, findings=[finding], suggestions=ranked)
    r = TestResult(
        nodeid=nodeid, slug=slugify(nodeid), outcome="passed", verdict="pass", rounds=1, warmup=1,
        latency=LatencyStats.from_samples([10.0], [10.5]), analysis=analysis,
        collectors=[CollectorInfo("cpu", True, "sampling 10 ms", overhead=0.004),
                    CollectorInfo("gpu", False, "none", reason="no NVIDIA GPU or driver on this machine")],
        clock=ClockFit(rate=1.0000003, residual_ns=2_345.0, pairs=6, note="fitted from paired readings"),
        dropped_events=4321, event_count=57,
    )  # fmt: skip
    for k, v in extra.items():
        setattr(r, k, v)
    return r


def read_html(tmp_path: Path, result: TestResult, tl: Timeline | None) -> str:
    """A report.html written on its own (self-contained: stylesheet and script inlined)."""
    path = tmp_path / "report.html"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_html_report(result, tl, path)
    return path.read_text(encoding="utf-8")


# ---- the files -----------------------------------------------------------------------------


def test_report_html_is_written_beside_the_others_and_listed(tmp_path: Path) -> None:
    results = [result_for(), result_for("tests/test_b.py::test_other")]
    for r in results:
        files = write_test_reports(r, gpu_timeline(), tmp_path)
        assert files["html"] == f"{r.slug}/report.html" and (tmp_path / files["html"]).is_file()
        assert json.loads((tmp_path / r.slug / "report.json").read_text())["files"]["html"] == files["html"]
    write_index(results, tmp_path, {"collectors": "cpu sampling"})
    index = (tmp_path / "index.html").read_text()
    for r in results:
        assert f'href="{r.slug}/report.html"' in index and r.nodeid in index
    assert json.loads((tmp_path / "index.json").read_text())["tests"][0]["files"]["html"].endswith("report.html")
    assert "<script" not in index  # the index needs no script at all


def test_reports_in_a_folder_share_one_stylesheet_and_script(tmp_path: Path) -> None:
    """Every report.html of a report folder links assets/ (content-hashed names, written once), not inlined."""
    results = [result_for(), result_for("tests/test_b.py::test_other")]
    for r in results:
        write_test_reports(r, gpu_timeline(), tmp_path)
    assets = sorted(p.name for p in (tmp_path / "assets").iterdir())
    assert [a.split("-")[0] for a in assets] == ["report", "timeline"]
    assert re.fullmatch(r"report-[0-9a-f]{12}\.css", assets[0]) and assets[1].endswith(".js")
    before = {p: p.stat().st_mtime_ns for p in (tmp_path / "assets").iterdir()}
    write_test_reports(result_for("tests/test_c.py::test_third"), gpu_timeline(), tmp_path)
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "assets").iterdir()} == before  # not written again
    page = (tmp_path / results[0].files["html"]).read_text()
    assert f'<link rel="stylesheet" href="../assets/{assets[0]}">' in page
    assert f'<script src="../assets/{assets[1]}"></script>' in page
    css = (tmp_path / "assets" / assets[0]).read_text()
    assert ".timeline" in css and css not in page and "inferscopeTimeline" not in page  # nothing inlined twice
    # Nothing from the network, and no inline script to allow: the page's own script is the shared file.
    assert "script-src 'self' file:;" in page and not re.search(r"https?://(?!www\.w3\.org/2000/svg)", page)
    assert len(page.encode()) < len(read_html(tmp_path / "alone", results[0], gpu_timeline()).encode()) - 20_000


def test_what_every_page_would_repeat_is_in_the_shared_script(tmp_path: Path) -> None:
    """The timeline's toolbar and its categories' names are the same in every test's page: the shared script has them
    (a trivial test's files have a budget: test_plugin's TRIVIAL_REPORT_BYTES), built into the page as it loads."""
    r = result_for()
    write_test_reports(r, gpu_timeline(), tmp_path)
    page = (tmp_path / r.files["html"]).read_text()
    (js,) = (tmp_path / "assets").glob("timeline-*.js")
    manifest = json.loads(re.search(r'id="is-manifest">(.*?)</script>', page, re.S).group(1))  # type: ignore[union-attr]
    assert "cats" not in manifest and 'id="is-toolbar"' in page and "data-act" not in page
    script = js.read_text()
    assert all(json.dumps(c) in script for names in CATS.values() for c in names)
    assert all(f'"{a}"' in script for a in ("in", "out", "left", "right", "fit")) and "is-range" in script
    # A page written alone (no report folder) inlines the same script.
    assert script in read_html(tmp_path / "alone", r, gpu_timeline())


def test_a_report_without_a_timeline_says_so(tmp_path: Path) -> None:
    html = read_html(tmp_path, result_for(), None)
    assert "No timeline" in html and 'id="is-data"' not in html
    assert "Clock sync" in html and "4,321 dropped" in html


# ---- the timeline data -----------------------------------------------------------------------


def test_every_drawn_event_is_in_exactly_one_lane_with_its_times_and_name(tmp_path: Path) -> None:
    tl = gpu_timeline()
    manifest, blob = page_payload(read_html(tmp_path, result_for(), tl))
    got = []
    for lane in manifest["lanes"]:
        if lane["kind"] == "idle":
            continue
        c = lane_columns(lane, blob)
        got += [
            (int(s), int(d), manifest["strings"][int(n)])
            for s, d, n in zip(c["start"], c["dur"], c["name"], strict=True)
        ]
    e = tl.events
    drawn = e["kind"] != Kind.MEMORY
    want = [
        (int(s), int(t - s), tl.strings[n])
        for s, t, n in zip(e["start"][drawn], e["end"][drawn], e["name"][drawn], strict=True)
    ]
    assert sorted(got) == sorted(want) and manifest["events"] == len(want)


def test_lanes_host_above_gpu_one_per_stream_with_nesting_rows(tmp_path: Path) -> None:
    tl = gpu_timeline()
    manifest, blob = page_payload(read_html(tmp_path, result_for(), tl))
    lanes = {lane["label"]: lane for lane in manifest["lanes"]}
    labels = [lane["label"] for lane in manifest["lanes"]]
    assert labels == [
        "test thread 7 · rounds", "test thread 7 · scopes", "test thread 7 · modules", "test thread 7 · Python",
        "test thread 7 · runtime API", "GPU 0 · stream 7", "GPU 0 · stream 13", "GPU 0 · idle",
    ]  # fmt: skip
    modules = lane_columns(lanes["test thread 7 · modules"], blob)
    assert modules["depth"].tolist() == [0, 1, 2] * 2 and lanes["test thread 7 · modules"]["rows"] == 3
    assert lane_columns(lanes["test thread 7 · scopes"], blob)["depth"].tolist() == [0, 1] * 2
    rounds = lane_columns(lanes["test thread 7 · rounds"], blob)
    cats = [CATS["rounds"][int(c)] for c in rounds["cat"]]
    assert cats == ["test", "round not measured (warm-up, profile, trace)", "mark", "measured round", "mark"]
    runtime = lane_columns(lanes["test thread 7 · runtime API"], blob)
    names = [manifest["strings"][int(n)] for n in runtime["name"]]
    assert [CATS["runtime"][int(c)] for c in runtime["cat"]][names.index("cudaStreamSynchronize")] == "synchronize"
    assert runtime["depth"].max() == 1  # the call inside the synchronize sits on a second row
    copies = lane_columns(lanes["GPU 0 · stream 13"], blob)
    assert [CATS["stream"][int(c)] for c in copies["cat"]] == ["copy HtoD", "memset"] * 2
    assert copies["value"].tolist() == [4 << 20, 1024] * 2


def test_each_gpu_record_links_to_the_launch_with_its_correlation_id(tmp_path: Path) -> None:
    tl = gpu_timeline()
    manifest, blob = page_payload(read_html(tmp_path, result_for(), tl))
    runtime = [lane_columns(manifest["lanes"][i], blob) for i in manifest["runtime_lanes"]]
    launch_starts = np.concatenate([c["start"] for c in runtime])
    e = tl.events
    corr_of_launch = {
        int(s): int(c) for s, c, k in zip(e["start"], e["corr"], e["kind"], strict=True) if k == Kind.RUNTIME
    }
    corr_of_work = {(int(s), int(t)): int(c) for s, t, c in zip(e["start"], e["end"], e["corr"], strict=True) if c}
    linked = 0
    for lane in manifest["lanes"]:
        if lane["kind"] != "stream":
            continue
        c = lane_columns(lane, blob)
        for s, d, link in zip(c["start"], c["dur"], c.get("link", np.full(lane["n"], -1)), strict=True):
            want = corr_of_work.get((int(s), int(s + d)))
            if want is None:
                assert link == -1  # the memsets were issued by no recorded launch
                continue
            assert corr_of_launch[int(launch_starts[link])] == want
            linked += 1
    assert linked == 8


def test_times_past_four_seconds_keep_every_nanosecond(tmp_path: Path) -> None:
    big = 5_000_000_001  # past 2**32 ns as a gap and as a duration: the lane falls back to float64
    tl = timeline([ev(Kind.SCOPE, 3, 10, name=2), ev(Kind.SCOPE, big + 17, 2 * big, name=2)])
    manifest, blob = page_payload(read_html(tmp_path, result_for(), tl))
    (lane,) = manifest["lanes"]
    c = lane_columns(lane, blob)
    assert lane["start_mode"] == "abs" and lane["cols"]["dur"][0] == "f8"
    assert c["start"].tolist() == [3, big + 17] and c["dur"].tolist() == [7, big - 17]


def test_without_the_analyzers_attribution_the_gaps_inside_rounds_are_shaded_unattributed() -> None:
    gaps = own_gaps(gpu_timeline())
    # Per round: kernels at 2.05-2.55, 3.05-3.55, 4.05-4.55 ms, the copy 6.02-6.42, the memset 7.0-7.03.
    per_round = [(2.55, 3.05), (3.55, 4.05), (4.55, 6.02), (6.42, 7.0)]
    want = [(round((t + a) * MS), round((b - a) * MS)) for t in (0, 10) for a, b in per_round]
    (lane,) = idle_lanes(gaps)
    assert (
        list(zip(lane.cols["start"].tolist(), lane.cols["dur"].tolist(), strict=True)) == want
    )  # nothing between rounds
    assert set(lane.cols["cat"].tolist()) == {0} and not gaps.attributed


def test_the_analyzers_causes_map_to_the_legend() -> None:
    causes = ("host_wait", "launch_gap", "sync_stall", "round_end", "other", "something new")
    raw = SimpleNamespace(start_ns=[0, 10, 20, 30, 40, 50], end_ns=[5, 15, 25, 35, 45, 55], device=[0] * 6,
                          cause=[0, 1, 2, 3, 4, 5])  # fmt: skip
    gaps = analyzer_gaps(raw, causes)
    assert gaps is not None and gaps.attributed
    assert [CATS["idle"][c] for c in gaps.cat] == [
        "host wait",
        "launch gap",
        "sync stall",
        "round-end sync",
        "other",
        "other",
    ]
    assert analyzer_gaps(SimpleNamespace(start_ns=[0], end_ns=[1], device=[0], cause=[9]), causes) is None
    assert analyzer_gaps(SimpleNamespace(start_ns=[0, 1], end_ns=[1], device=[0], cause=[0]), causes) is None
    assert analyzer_gaps(object(), causes) is None


def test_the_page_shades_the_analyzers_idle_intervals_by_cause(tmp_path: Path) -> None:
    from pytest_inferscope.analyzer import idle_gaps
    from pytest_inferscope.analyzer.idle import CAUSES

    tl = gpu_timeline()
    html = read_html(tmp_path, result_for(), tl)
    manifest, blob = page_payload(html)
    (lane,) = [lane for lane in manifest["lanes"] if lane["kind"] == "idle"]
    c = lane_columns(lane, blob)
    got = [(int(s), int(d), CATS["idle"][int(k)]) for s, d, k in zip(c["start"], c["dur"], c["cat"], strict=True)]
    want = [(s, e - s, CATS["idle"][cause_code(cause)]) for s, e, cause in idle_gaps(tl).rows()]
    assert got == sorted(want) and {g[2] for g in got} - {"not attributed"}
    assert all(10 * MS <= s < 20 * MS for s, _, _ in got)  # the measured round only, as the analyzer counts
    assert "shaded by cause" in html
    assert set(CAUSES) <= set(IDLE_CAUSES)  # every cause the analyzer names has its own colour


def test_a_timeline_without_gpu_work_says_nothing_of_gpu_idle_gaps_and_launch_lines(tmp_path: Path) -> None:
    gpu = gpu_timeline()
    host = gpu.events[gpu.events["kind"] <= int(Kind.SAMPLE)]  # the test, rounds, scopes, modules, marks, samples
    assert len(host) and (host["kind"] == int(Kind.ROUND)).any()
    html = read_html(tmp_path / "cpu", result_for(), timeline([tuple(e) for e in host.tolist()]))
    assert 'id="is-timeline"' in html and "idle gaps to shade" not in html and "Lines join" not in html
    with_gpu = read_html(tmp_path / "gpu", result_for(), gpu)
    assert "GPU idle time in the measured rounds is shaded by cause" in with_gpu and "Lines join each" in with_gpu


def test_an_analyzer_without_idle_attribution_still_gets_its_gaps_shaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pytest_inferscope.analyzer as analyzer

    monkeypatch.delattr(analyzer, "idle_gaps")
    html = read_html(tmp_path, result_for(), gpu_timeline())
    manifest, _ = page_payload(html)
    (lane,) = [lane for lane in manifest["lanes"] if lane["kind"] == "idle"]
    assert lane["n"] == 8 and lane["consts"] == {"cat": 0.0}
    assert "their causes were not attributed" in html


def test_idle_shading_agrees_with_the_analyzer_on_a_realistic_trace(tmp_path: Path) -> None:
    raw = synthetic(20_000)
    result, _ = process(raw, Plan(nodeid="t::gpu", rounds=17, warmup=3, thresholds={}), [], report_dir=tmp_path)
    manifest, blob = page_payload((tmp_path / result.files["html"]).read_text())
    (lane,) = [lane for lane in manifest["lanes"] if lane["kind"] == "idle"]
    ours = float(lane_columns(lane, blob)["dur"].sum()) / MS / 17
    summary = result.analysis.gpu["idle_gaps"]
    assert ours == pytest.approx(sum(summary["by_cause_ms_per_round"].values()), rel=1e-6)
    page = (tmp_path / result.files["html"]).read_text()
    for cause in summary["by_cause_ms_per_round"]:
        assert f'idle-{cause_code(cause)}"></i>{CATS["idle"][cause_code(cause)]}</td><td class="num">' in page


def test_payload_is_compact(tmp_path: Path) -> None:
    raw = synthetic(50_000)
    result, tl = process(raw, Plan(nodeid="t::gpu", rounds=17, warmup=3, thresholds={}), [], report_dir=tmp_path)
    size = (tmp_path / result.files["html"]).stat().st_size
    per_event = size / len(tl)
    print(f"\nreport.html: {size / 1e6:.2f} MB for {len(tl):,} events, {per_event:.1f} bytes per event")
    assert per_event < 30  # typed columns in base64 (about 22 bytes at 1M); JSON objects would take ~150


# ---- the page --------------------------------------------------------------------------------


def test_page_is_self_contained(tmp_path: Path) -> None:
    html = read_html(tmp_path, result_for(), gpu_timeline())
    assert "Content-Security-Policy" in html and "default-src 'none'" in html  # the browser refuses any fetch
    assert not re.search(r"<script[^>]*\bsrc=|<link\b|@import|url\(|https?://(?!www\.w3\.org/2000/svg)", html)


def test_names_cannot_break_out_of_the_page(tmp_path: Path) -> None:
    evil = '</script><img src=x onerror="alert(1)">&amp;'
    tl = timeline([ev(Kind.SCOPE, 0, 10, name=0)], strings=[evil])
    r = result_for(nodeid=f"tests/t.py::test[{evil}]")
    r.analysis.findings[0].evidence["<b>key</b>"] = evil
    html = read_html(tmp_path, r, tl)
    assert "<img" not in html and "&lt;img src=x" in html
    manifest, _ = page_payload(html)
    assert manifest["strings"] == [evil]


def test_header_findings_suggestions_and_tables(tmp_path: Path) -> None:
    tl = gpu_timeline()
    html = read_html(tmp_path, result_for(), tl)
    assert re.search(r"fit residual <b>2\.3 µs</b> over 6 paired readings", html)
    assert "4,321 dropped" in html and "no NVIDIA GPU or driver on this machine" in html
    assert "h2d_mb_per_round" in html and 'data-start-ms="16.02"' in html  # evidence, and its event to go to
    order = [html.index(a) for a in ("Use CUDA graphs", "Pin the batch", "Fuse softmax")]
    assert order == sorted(order)  # suggestions in the analysis's order: by time saved
    kernels = html[html.index('id="kernels"') : html.index('id="scopes"')]
    assert kernels.index(">gemm<") < kernels.index(">softmax<")  # gemm: 2 launches per round, softmax 1


def test_top_kernels_count_the_measured_rounds_only() -> None:
    (gemm, softmax) = top_kernels(gpu_timeline())
    assert gemm["name"] == "gemm" and gemm["count_per_round"] == 2 and gemm["ms_per_round"] == pytest.approx(1.0)
    assert softmax["count_per_round"] == 1 and softmax["share"] == pytest.approx(1 / 3)
    assert gemm["mean_us"] == pytest.approx(500.0) and gemm["max_us"] == pytest.approx(500.0)


def lean_timeline() -> Timeline:
    """Lean mode: a warm-up and two measured rounds timed without CUPTI, then a settling and two profile rounds."""
    kinds = [RoundKind.WARMUP, RoundKind.MEASURED, RoundKind.MEASURED, RoundKind.SETTLING, RoundKind.PROFILE,
             RoundKind.PROFILE]  # fmt: skip
    rows = [ev(Kind.TEST, 0, 60 * MS, name=0)]
    for r, kind in enumerate(kinds):
        t = r * 10 * MS
        rows.append(ev(Kind.ROUND, t, t + 10 * MS, name=1, value=r, flags=kind_flags(kind)))
        if kind in (RoundKind.WARMUP, RoundKind.SETTLING, RoundKind.PROFILE):  # CUPTI on
            rows.append(ev(Kind.KERNEL, t + MS, t + 3 * MS, name=5, device=0, stream=7, tid=-1))
    tl = timeline(rows)
    tl.meta["gpu_rounds"] = "trace"
    return tl


def test_top_kernels_of_a_lean_trace_count_the_profile_rounds_only() -> None:
    (gemm,) = top_kernels(lean_timeline())  # not the warm-up's, nor the settling round's
    assert gemm["count_per_round"] == 1 and gemm["ms_per_round"] == pytest.approx(2.0)
    measured = timeline([r for r in lean_timeline().events.tolist()])
    assert top_kernels(measured) == []  # without "gpu_rounds": "trace", the measured rounds: no kernel in them


def test_the_rounds_lane_marks_every_round_that_is_not_a_latency_sample() -> None:
    lane = next(lane for lane in build_lanes(lean_timeline()) if lane.kind == "rounds")
    labels = CATS["rounds"]
    cats = [labels[c] for c in lane.cols["cat"][1:].tolist()]  # after the test span
    unmeasured = labels[2]
    assert cats == [unmeasured, "measured round", "measured round", unmeasured, unmeasured, unmeasured]


def test_latency_chart_is_scaled_to_the_measured_rounds_and_cuts_a_slow_warm_up() -> None:
    lat = LatencyStats.from_samples([10.0, 11.0, 12.0], warmup_ms=[170.0])
    svg = str(latency_chart(lat, None))
    assert svg.count('class="tick cut"') == 1 and "warm-up 1: 170" in svg  # cut, value kept in the tooltip
    heights = [float(m) for m in re.findall(r'<rect class="bar"[^>]* height="([0-9.]+)"', svg)]
    assert len(heights) == 3 and min(heights) > 60  # the measured bars use the chart's height, not 1/14th of it
    assert "tick cut" not in str(latency_chart(LatencyStats.from_samples([10.0, 11.0], warmup_ms=[11.5]), None))


def test_latency_chart_draws_every_round_and_the_baseline() -> None:
    lat = LatencyStats.from_samples([10.0, 11.0, 12.0], [15.0])
    svg = latency_chart(lat, None)
    assert svg.count('<rect class="bar"') == 3 and svg.count('<rect class="warm"') == 1
    assert 'class="median"' in svg and 'class="baseline"' not in svg
    c = Comparison("unchanged", 11 / 9, 1.1, 1.3, 0.2, "", 9.0, 11.0, 3, 3)
    compared = latency_chart(lat, RegressionVerdict("t", "unchanged", "", c, baseline_name="main"))
    assert 'class="baseline"' in compared and "baseline main median: 9.00 ms" in compared
    nan = dataclasses.replace(c, base_median=math.nan)  # a baseline without rounds: no line
    assert 'class="baseline"' not in latency_chart(lat, RegressionVerdict("t", "inconclusive", "", nan))
    assert "nothing to chart" in latency_chart(LatencyStats.from_samples([]), None)
    heights = [float(h) for h in re.findall(r'class="bar" x="[\d.]+" y="[\d.]+" width="[\d.]+" height="([\d.]+)"', svg)]
    assert heights == sorted(heights) and not math.isclose(heights[0], heights[-1])


def test_partial_report_says_so_in_the_page(tmp_path: Path) -> None:
    r = result_for(verdict="partial", partial_reason="RuntimeError: boom")
    html = read_html(tmp_path, r, gpu_timeline())
    assert "Partial report" in html and "RuntimeError: boom" in html


def test_a_recorded_cpu_only_trace_gives_cpu_lanes_only(tmp_path: Path) -> None:
    raw = RawTrace.load(str(DATA / "memory_bound" / "trace.npz"))
    result, tl = process(raw, Plan(nodeid="t::cpu", rounds=5, warmup=1, thresholds={}), [], report_dir=tmp_path)
    manifest, _ = page_payload((tmp_path / result.files["html"]).read_text())
    assert {lane["group"] for lane in manifest["lanes"]} == {"cpu"}
    samples = [lane for lane in manifest["lanes"] if lane["kind"] == "python"]
    assert samples and sum(lane["n"] for lane in samples) == int(np.count_nonzero(tl.events["kind"] == Kind.SAMPLE))
    assert [lane.kind for lane in build_lanes(tl) if lane.group != "cpu"] == []
    assert timeline_payload(tl).manifest["events"] == int(np.count_nonzero(tl.events["kind"] != Kind.MEMORY))


def test_a_trace_recorded_on_a_gpu_links_its_launches(tmp_path: Path) -> None:
    raw = RawTrace.load(str(DATA / "sync_bound" / "trace.npz"))
    result, tl = process(raw, Plan(nodeid="t::sync", rounds=5, warmup=1, thresholds={}), [], report_dir=tmp_path)
    manifest, blob = page_payload((tmp_path / result.files["html"]).read_text())
    streams = [lane for lane in manifest["lanes"] if lane["kind"] == "stream"]
    linked = sum(int((lane_columns(lane, blob).get("link", np.array([-1])) >= 0).sum()) for lane in streams)
    e = tl.events
    launched = set(e["corr"][(e["kind"] == Kind.RUNTIME) & (e["corr"] != 0)].tolist())
    work = e["corr"][np.isin(e["kind"], [Kind.KERNEL, Kind.MEMCPY, Kind.MEMSET, Kind.SYNC]) & (e["device"] >= 0)]
    assert linked == int(np.isin(work, list(launched)).sum()) > 1000


def synthetic(n: int) -> RawTrace:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from synthetic import make_raw_trace
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return make_raw_trace(n, seed=1)
