"""`inferscope analyze` on CPU torch.profiler traces recorded as users record them (tests/data/kineto_cpu/README.md)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from pytest_inferscope.cli import main
from pytest_inferscope.reporters import load_report

DATA = Path(__file__).parent.parent / "data" / "kineto_cpu"


def only_report(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir() and p.name != "assets"]
    return folder


#: torch.profiler's key_averages() for the session that wrote steps.pt.trace.json.gz (README.md): (self CPU, CPU total)
#: in µs over its 3 steps, for functions that ran in the steps only.
STEPS_KEY_AVERAGES = {
    "aten::addmm": (105.509, 130.337),
    "aten::mul": (52.005, 120.628),
    "aten::_to_copy": (45.520, 71.896),
    "torch/nn/modules/container.py(248): forward": (42.780, 368.480),
}


def test_hotspots_of_a_trace_with_stacks_are_its_calls_by_self_time(work: Path) -> None:
    assert main(["analyze", str(DATA / "steps.pt.trace.json.gz"), "--report", "out"]) == 0
    result = load_report(only_report(work / "out") / "report.json")
    assert len(result.latency.samples_ms) == 3
    spots = result.analysis.hotspots
    assert [h.function for h in spots[:4]] == list(STEPS_KEY_AVERAGES)  # the largest self times, as torch's table
    for h in spots[:4]:
        self_us, total_us = STEPS_KEY_AVERAGES[h.function]
        assert (h.self_ms * 3, h.total_ms * 3) == pytest.approx((self_us / 1000, total_us / 1000), abs=1e-6)
    assert spots == sorted(spots, key=lambda h: -h.self_ms) and 0 < spots[0].share < 1


def events_of(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    data = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return data["traceEvents"] if isinstance(data, dict) else data


def step_share(path: Path, covered: Callable[[dict[str, Any]], bool]) -> float:
    """The share of the ProfilerStep spans' time covered by the main thread's events that `covered` picks (µs
    intervals merged one by one)."""
    ev = [e for e in events_of(path) if e.get("ph") == "X"]
    steps = [e for e in ev if e["name"].startswith("ProfilerStep#")]
    picked = sorted((float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in ev
                    if e["tid"] == steps[0]["tid"] and covered(e))  # fmt: skip
    inside = 0.0
    for s in steps:
        a, b = float(s["ts"]), float(s["ts"]) + float(s["dur"])
        end = a
        for x, y in picked:
            x, y = max(x, end), min(y, b)
            if y > x:
                inside += y - x
                end = y
    return inside / sum(float(s["dur"]) for s in steps)


def test_a_cpu_only_trace_is_cpu_bound_by_its_ops_share_of_the_steps(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = DATA / "steps.pt.trace.json.gz"
    assert main(["analyze", str(trace), "--report", "out"]) == 0
    assert "bottleneck:     cpu_bound" in capsys.readouterr().out
    a = load_report(only_report(work / "out") / "report.json").analysis
    (host,) = [f for f in a.findings if f.rule == "kineto_host"]
    assert host.cause == "cpu_bound" and a.bottleneck == "cpu_bound"
    assert host.share == pytest.approx(step_share(trace, lambda e: e.get("cat") == "cpu_op"), abs=1e-4)
    assert "aten::addmm" in host.summary and "aten::addmm" in a.suggestions[0].action


def test_steps_that_wait_for_the_dataloader_say_so(work: Path) -> None:
    trace = DATA / "loader.json.gz"
    assert main(["analyze", str(trace), "--report", "out"]) == 0
    a = load_report(only_report(work / "out") / "report.json").analysis
    (loader,) = [f for f in a.findings if f.rule == "kineto_dataloader"]
    waits = step_share(trace, lambda e: e["name"].startswith("enumerate(DataLoader)#"))
    assert loader.share == pytest.approx(waits, abs=1e-4) and waits > 0.5
    assert a.findings[0].rule == "kineto_dataloader"  # the largest share
    assert a.bottleneck == "unclassified"  # the ops are a few % of the steps: nothing to call CPU-bound
    assert any("num_workers" in s.action for s in a.suggestions)


def test_the_dataloader_finding_tells_loading_in_the_main_thread_from_waiting_for_workers(work: Path) -> None:
    # torch names the annotation after the iterator: _SingleProcessDataLoaderIter (num_workers=0: the main thread
    # loads the batch, the time is that work) or _MultiProcessingDataLoaderIter (the main thread waits for workers).
    events = events_of(DATA / "loader.json.gz")
    for e in events:
        e["name"] = e["name"].replace("_MultiProcessingDataLoaderIter", "MyLoaderIter")
    (work / "custom.json").write_text(json.dumps({"traceEvents": events}))
    found = {}
    for name, trace in (("main", DATA / "loader_main.json.gz"), ("workers", DATA / "loader.json.gz"),
                        ("custom", work / "custom.json")):  # fmt: skip
        assert main(["analyze", str(trace), "--report", name]) == 0
        a = load_report(only_report(work / name) / "report.json").analysis
        (found[name],) = [f for f in a.findings if f.rule == "kineto_dataloader"]
    main_thread, workers, custom = found["main"], found["workers"], found["custom"]
    assert "_SingleProcessDataLoaderIter" in main_thread.evidence["annotation"]
    assert "in the main thread" in main_thread.title and "num_workers=0" in main_thread.summary
    assert "not a wait" in main_thread.summary and "wait" not in main_thread.title.lower()
    assert "worker processes" in main_thread.suggestions[0].action and "loading" in main_thread.suggestions[0].rationale
    assert "workers" in workers.title and "waiting for" in workers.summary and "num_workers=0" not in workers.summary
    assert "more worker processes" in workers.suggestions[0].action
    assert "worker processes, or loading the batch in this thread" in custom.summary  # can't tell: both


@pytest.mark.parametrize(
    ("edit", "hint"),
    [
        (lambda d: d.update(deviceProperties=[{"id": 0, "name": "NVIDIA A100-PG509-200"}]),
         "deviceProperties lists NVIDIA A100-PG509-200"),
        (lambda d: d["traceEvents"].append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 1.0,
                                            "dur": 1.0, "pid": 1, "tid": 1, "args": {"correlation": 7}}),
         "1 CUDA runtime or driver call but no kernel, copy or memset"),
        (lambda d: d["traceEvents"].extend({"ph": "X", "cat": "mtia_runtime", "name": "launch", "ts": 1.0, "dur": 1.0,
                                            "pid": 1, "tid": 1} for _ in range(2)),
         "2 mtia_runtime events"),
    ],
)  # fmt: skip
def test_a_trace_with_device_work_it_did_not_record_is_not_called_cpu_bound(
    work: Path, capsys: pytest.CaptureFixture[str], edit: Callable[[dict[str, Any]], None], hint: str
) -> None:
    # The host's time in ops may be waits for the device (a copy to the host, a sync) that the trace did not record.
    data = {"traceEvents": events_of(DATA / "steps.pt.trace.json.gz")}
    edit(data)
    (work / "t.json").write_text(json.dumps(data))
    assert main(["analyze", "t.json", "--report", "out"]) == 0
    out = capsys.readouterr().out
    assert "bottleneck:     unclassified" in out and "not collected:  gpu: the torch.profiler trace has no GPU" in out
    assert hint in out and "ProfilerActivity.CUDA" in out
    a = load_report(only_report(work / "out") / "report.json").analysis
    (host,) = [f for f in a.findings if f.rule == "kineto_host"]
    assert host.cause is None and hint in host.summary and not host.suggestions


def test_a_trace_without_profilerstep_spans_says_how_to_get_them(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["analyze", str(DATA / "no_steps.json.gz"), "--report", "out"]) == 0
    out = capsys.readouterr().out
    (note,) = [line for line in out.splitlines() if line.startswith("  note:")]
    assert "no ProfilerStep spans, so the whole trace" in note and "is one round" in note
    assert "schedule=torch.profiler.schedule(" in note and "prof.step()" in note
    md = (only_report(work / "out") / "report.md").read_text()
    assert "no ProfilerStep spans, so the whole trace" in md


def test_the_findings_of_a_trace_without_steps_speak_of_the_trace(work: Path) -> None:
    # No ProfilerStep: the one round is the whole trace, so "each step" and "ms/step" would name what is not there.
    data = {"traceEvents": [e for e in events_of(DATA / "loader.json.gz") if not e["name"].startswith("ProfilerStep#")]}
    (work / "loader_no_steps.json").write_text(json.dumps(data))
    cases = ((DATA / "no_steps.json.gz", "kineto_host"), (work / "loader_no_steps.json", "kineto_dataloader"))
    for trace, rule in cases:
        assert main(["analyze", str(trace), "--report", rule]) == 0
        a = load_report(only_report(work / rule) / "report.json").analysis
        (f,) = [f for f in a.findings if f.rule == rule]
        words = " ".join([f.title, f.summary, *map(str, f.evidence), *map(str, f.evidence.values()),
                          *(s.rationale for s in f.suggestions)])  # fmt: skip
        assert "step" not in words.replace("ProfilerStep", ""), words
        assert "the whole trace" in f.summary.lower() and "trace" in f.title
    assert main(["analyze", str(DATA / "steps.pt.trace.json.gz"), "--report", "steps"]) == 0  # (with steps: steps)
    (host,) = [f for f in load_report(only_report(work / "steps") / "report.json").analysis.findings
               if f.rule == "kineto_host"]  # fmt: skip
    assert host.title.startswith("The steps") and "each step (" in host.summary


def test_the_empty_step_a_short_loop_leaves_is_not_a_round(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = DATA / "short_loop.json.gz"
    steps = {e["name"]: e for e in events_of(trace) if e.get("ph") == "X" and e["name"].startswith("ProfilerStep#")}
    assert main(["analyze", str(trace), "--report", "out"]) == 0
    out = capsys.readouterr().out
    result = load_report(only_report(work / "out") / "report.json")
    expected = sorted(float(steps[f"ProfilerStep#{n}"]["dur"]) / 1000 for n in (1, 2, 3))
    assert sorted(result.latency.samples_ms) == pytest.approx(expected, abs=1e-6)
    (note,) = [line for line in out.splitlines() if line.startswith("  note:")]
    assert "ProfilerStep#4" in note and "holds no op, annotation or GPU work" in note and "not a round" in note


def test_a_trace_whose_only_step_is_empty_is_refused_saying_why(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(DATA / "last_cycle.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert "last_cycle.json: its only ProfilerStep (ProfilerStep#5) holds no op, annotation or GPU work" in err
    assert "repeat=1" in err and not (work / "inferscope-report").exists()


def test_an_eventlist_export_a_bare_array_without_categories_is_read(work: Path) -> None:
    # prof.events().export_chrome_trace() writes [{"name", "ph": "X", "ts", "dur", "tid", "pid": "CPU functions"}]
    trace = DATA / "eventlist.json"
    steps = sorted(float(e["dur"]) / 1000 for e in events_of(trace) if e["name"].startswith("ProfilerStep#"))
    assert main(["analyze", str(trace), "--report", "out"]) == 0
    result = load_report(only_report(work / "out") / "report.json")
    assert sorted(result.latency.samples_ms) == pytest.approx(steps, abs=1e-6) and len(steps) == 3
    assert {"preprocess", "forward"} <= {s.path for s in result.analysis.scopes}
    assert "aten::addmm" in {h.function for h in result.analysis.hotspots}
    assert result.analysis.bottleneck == "cpu_bound"


def test_older_layouts_of_a_kineto_trace_read_as_the_current_one(work: Path) -> None:
    # A bare array of the events; no deviceProperties and displayTimeUnit "ns" (display only: ts and dur stay µs).
    events = events_of(DATA / "steps.pt.trace.json.gz")
    (work / "bare.json").write_text(json.dumps(events))
    (work / "old.json").write_text(json.dumps({"displayTimeUnit": "ns", "traceEvents": events}))
    assert main(["analyze", str(DATA / "steps.pt.trace.json.gz"), "--report", "now"]) == 0
    now = load_report(only_report(work / "now") / "report.json")
    for name in ("bare", "old"):
        assert main(["analyze", f"{name}.json", "--report", name]) == 0
        then = load_report(only_report(work / name) / "report.json")
        assert then.latency.samples_ms == now.latency.samples_ms and then.analysis.bottleneck == now.analysis.bottleneck


def test_an_empty_or_cut_short_trace_is_one_paragraph_saying_what_to_do(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = (DATA / "steps.pt.trace.json.gz").read_bytes()
    (work / "cut.json.gz").write_bytes(data[: len(data) // 2])
    cases = [
        (str(DATA / "empty.json"), ["empty.json: torch.profiler recorded nothing", "11 events of other kinds",
                                    "inside `with torch.profiler.profile(...)`"]),
        ("cut.json.gz", ["cut.json.gz: a gzip file cut short", "Export the trace again"]),
    ]  # fmt: skip
    for name, parts in cases:
        assert main(["analyze", name]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert all(p in err for p in parts), err
