"""The `inferscope` command: run, analyze, compare and config show, in-process and as the installed executable."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import pytest_inferscope
from pytest_inferscope import kineto
from pytest_inferscope.cli import _split_run, main, parse_fraction
from pytest_inferscope.events import CopyKind, Kind, MemoryKind, RawTrace, unpack_copy_flags
from pytest_inferscope.reporters import load_report, write_index, write_test_reports
from pytest_inferscope.reporters.files import slugify
from pytest_inferscope.reporters.folder import _raw_bytes
from pytest_inferscope.results import Analysis, LatencyStats, TestResult

KINETO = Path(__file__).parent.parent / "data" / "kineto"
EXE = Path(sys.executable).with_name("inferscope")

SCOPED = """
import sys
from pathlib import Path
from pytest_inferscope import mark_event, scope

Path(sys.argv[0]).with_name("argv.txt").write_text(" ".join(sys.argv[1:]))
with Path(sys.argv[0]).with_name("calls.txt").open("a") as f:
    f.write("x")
with scope("tokenize"):
    data = [i * i for i in range(20000)]
mark_event("batch_ready", size=len(data))
with scope("forward"):
    total = sum(data)
print("script output", total)
"""

RAISING = """
from pytest_inferscope import scope

def helper():
    raise ValueError("boom in helper")

with scope("before_failure"):
    sum(range(10000))
with scope("failing_part"):
    helper()
"""


def script(folder: Path, text: str, name: str = "job.py") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def only_report(out: Path) -> Path:
    (folder,) = [p for p in out.iterdir() if p.is_dir() and p.name != "assets"]  # assets/: shared by report.html
    return folder


def make_result(nodeid: str, samples: list[float], **env: str) -> TestResult:
    return TestResult(
        nodeid=nodeid, slug=slugify(nodeid), outcome="passed", verdict="pass", rounds=len(samples), warmup=0,
        latency=LatencyStats.from_samples(samples), analysis=Analysis(bottleneck="cpu_bound", confidence=0.9),
        environment={"python": "3.11.7", "torch": "2.13.0", **env},
    )  # fmt: skip


def write_run(folder: Path, results: list[TestResult]) -> Path:
    for r in results:
        write_test_reports(r, None, folder)
    write_index(results, folder, {})
    return folder


BASE = [10.0, 10.2, 9.9, 10.1, 9.8, 10.05, 9.95, 10.15]


# --- run ---------------------------------------------------------------------------------------


def test_run_writes_reports_with_the_scripts_scopes(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = script(work, SCOPED)
    rc = main(["run", str(job), "--report", "out", "--size", "8", "--", "--rounds", "2"])
    out = capsys.readouterr().out
    assert rc == 0
    assert (work / "argv.txt").read_text() == "--size 8 --rounds 2"  # ours taken out, the rest passed on
    folder = only_report(work / "out")
    md = (folder / "report.md").read_text()
    assert "| tokenize | scope | 1 |" in md and "| forward | scope | 1 |" in md
    assert "batch_ready" in md
    assert {"report.md", "report.json", "raw.npz", "trace.json.gz"} <= {p.name for p in folder.iterdir()}
    index = json.loads((work / "out" / "index.json").read_text())
    assert [t["nodeid"] for t in index["tests"]] == [str(job)]
    assert "script output" in out and "latency:" in out and "bottleneck:" in out
    assert f"report:         {Path('out') / folder.name / 'report.md'}" in out
    # what profiling added, the report files included (known once they are written)
    (added,) = [line for line in out.splitlines() if line.startswith("  added:          ")]
    # (rounds added after the measured ones, as the speed probe or a second trace round adds on a busy machine, are said
    # first: "): 6 more rounds in 1 of them 1.92 ms, outside the rounds ...")
    assert re.search(r"of the calls asked for\): (\d+ more rounds? [^,]*, )?outside the rounds ", added), added
    assert ", writing reports " in added


def test_run_rounds_and_warmup_run_the_script_again(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = script(work, SCOPED)
    assert main(["run", "--rounds", "3", "--warmup", "1", "--cpu", "off", str(job), "--report", "out"]) == 0
    assert (work / "calls.txt").read_text() == "xxxx"
    result = load_report(only_report(work / "out") / "report.json")
    assert (result.rounds, result.warmup, len(result.latency.samples_ms)) == (3, 1, 3)
    assert "median (3 rounds, warm-up 1)" in capsys.readouterr().out


def test_a_raising_script_gets_a_partial_report_and_exit_1(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = script(work, RAISING)
    assert main(["run", str(job), "--report", "out"]) == 1
    captured = capsys.readouterr()
    assert 'raise ValueError("boom in helper")' in captured.err and "ValueError: boom in helper" in captured.err
    assert "runpy" not in captured.err and "cli/run.py" not in captured.err  # only the script's frames
    assert "report is partial" in captured.err and "PARTIAL" in captured.out
    folder = only_report(work / "out")
    result = load_report(folder / "report.json")
    assert result.verdict == "partial" and result.partial_reason == "ValueError: boom in helper"
    md = (folder / "report.md").read_text()
    assert "Partial report" in md and "before_failure" in md and "failing_part" in md


@pytest.mark.parametrize(("code", "rc"), [("0", 0), ("None", 0), ("3", 1), ("'fatal: no model'", 1)])
def test_system_exit_zero_is_normal(work: Path, capsys: pytest.CaptureFixture[str], code: str, rc: int) -> None:
    job = script(work, f"import sys\nsys.exit({code})\n")
    assert main(["run", str(job), "--report", "out"]) == rc
    err = capsys.readouterr().err
    assert ("fatal: no model" in err) == (code == "'fatal: no model'")
    assert (load_report(only_report(work / "out") / "report.json").verdict == "partial") == (rc == 1)


def test_run_usage_errors_are_one_paragraph(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "afile").write_text("")
    job = script(work, "pass\n")
    cases = [
        (["run", "missing.py"], "missing.py is not found"),
        (["run"], "no SCRIPT or -m MODULE given"),
        (["run", "--rounds", "0", str(job)], "argument --rounds: 0 is less than 1"),
        (["run", str(job), "--report", "afile"], "'afile' exists but is a file"),
    ]
    if hasattr(os, "mkfifo"):  # a pipe, as `inferscope run <(...)` gives: it is there, and was "not found"
        os.mkfifo(work / "pipe.py")
        said = "pipe.py is not a regular file (a pipe, a device or a socket); give the path"
        cases.append((["run", str(work / "pipe.py")], said))
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and err.count("\n") == 1, err


@pytest.mark.parametrize("command", ["run", "analyze"])
def test_an_unusable_report_folder_is_said_by_the_command(
    command: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Every other error of the command starts "inferscope run: "; this one started "The inferscope report directory".
    (work / "afile").write_text("")
    job = script(work, "pass\n")
    assert main(["run", str(job), "--report", "out"]) == 0
    capsys.readouterr()
    given = str(job) if command == "run" else str(work / "out")
    assert main([command, given, "--report", "afile"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"inferscope {command}: the report folder 'afile' exists but is a file, not a folder; "), err
    assert err.rstrip().endswith("or pass another folder with --report DIR.") and err.count("\n") == 1, err


def test_required_gpu_that_cannot_run_is_a_usage_error(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    if any(os.path.exists(p) for p in ("/dev/nvidia0", "/proc/driver/nvidia/version")):
        pytest.skip("an NVIDIA GPU is present, so INFERSCOPE_GPU=required may be satisfied")
    monkeypatch.setenv("INFERSCOPE_GPU", "required")
    job = script(work, SCOPED)
    assert main(["run", str(job)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("inferscope run: GPU collection is required") and err.count("\n") == 1, err
    assert not (work / "calls.txt").exists()  # the script never ran


def test_split_run_keeps_the_scripts_arguments() -> None:
    assert _split_run(["--cpu", "off", "s.py", "-v", "--report=o", "x", "--", "--report", "y"]) == (
        ["--cpu", "off", "--report=o"], ["s.py"], ["-v", "x", "--report", "y"],
    )  # fmt: skip
    assert _split_run(["--rounds", "2", "-m", "pkg.bench", "-m", "x", "--rounds", "3"]) == (
        ["--rounds", "2", "--rounds", "3"], ["-m", "pkg.bench"], ["-m", "x"],
    )  # fmt: skip
    assert _split_run(["--help"]) == (["--help"], [], [])


def test_run_a_module_as_python_m_does(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`inferscope run -m MODULE ARGS`: found from the working directory, run as __main__ with its arguments; a
    package runs its __main__.py; a traceback shows the module's own frames."""
    (work / "mypkg").mkdir()
    (work / "mypkg" / "__init__.py").write_text("")
    script(work / "mypkg", SCOPED, "bench.py")
    script(work / "mypkg", "from mypkg import bench  # noqa\n", "__main__.py")
    script(work / "mypkg", RAISING, "broken.py")
    assert main(["run", "--rounds", "2", "-m", "mypkg.bench", "--size", "8", "--report", "out"]) == 0
    assert (work / "mypkg" / "argv.txt").read_text() == "--size 8"
    assert (work / "mypkg" / "calls.txt").read_text() == "xx"
    result = load_report(only_report(work / "out") / "report.json")
    assert result.nodeid == "mypkg.bench" and len(result.latency.samples_ms) == 2
    assert {s.path for s in result.analysis.scopes} >= {"tokenize", "forward"}
    assert "inferscope: mypkg.bench" in capsys.readouterr().out

    assert main(["run", "-m", "mypkg", "--report", "pkg"]) == 0  # its __main__.py, importing bench
    assert load_report(only_report(work / "pkg") / "report.json").nodeid == "mypkg"

    assert main(["run", "-m", "mypkg.broken", "--report", "broken"]) == 1
    err = capsys.readouterr().err
    assert 'raise ValueError("boom in helper")' in err and "runpy" not in err
    assert "inferscope run: mypkg.broken raised ValueError; the report is partial" in err

    for argv, message in [
        (["run", "-m", "nope"], "no module named 'nope'"),
        (["run", "-m"], "-m needs a module name"),
        (["run"], "no SCRIPT or -m MODULE given"),
    ]:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and err.count("\n") == 1, err


# --- analyze -----------------------------------------------------------------------------------


def test_analyze_our_raw_trace_and_report_folder(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(script(work, SCOPED)), "--rounds", "2", "--report", "first"]) == 0
    folder = only_report(work / "first")
    original = load_report(folder / "report.json")
    for i, given in enumerate([folder / "raw.npz", folder, folder / "report.json", folder / "trace.json.gz"]):
        capsys.readouterr()
        assert main(["analyze", str(given), "--report", f"again{i}"]) == 0, given
        again = load_report(only_report(work / f"again{i}") / "report.json")
        assert again.nodeid == original.nodeid and again.rounds == 2
        assert again.latency.samples_ms == original.latency.samples_ms  # the same rounds, re-analysed
        assert [s.path for s in again.analysis.scopes] == [s.path for s in original.analysis.scopes]
        assert f"again{i}" in capsys.readouterr().out


def test_analyze_says_what_the_plugin_added_when_the_test_ran(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It said `added: 45.8 ms ...: outside the rounds 17.9 ms, analysis 1.54 ms, writing reports 26.3 ms`: the run's
    # time outside its rounds summed with the re-analysis's own time, neither what the run cost nor what analyze did.
    assert main(["run", str(script(work, SCOPED)), "--rounds", "2", "--report", "first"]) == 0
    folder = only_report(work / "first")
    ran = load_report(folder / "report.json").added
    capsys.readouterr()
    assert main(["analyze", str(folder), "--report", "again"]) == 0
    out = capsys.readouterr().out
    again = only_report(work / "again")
    added = load_report(again / "report.json").added
    assert {k: v for k, v in added.items() if k != "reanalysis_ms"} == ran  # the run's figures, as it wrote them
    assert added["reanalysis_ms"] > 0  # this analysis's own time, apart
    (line,) = [x for x in out.splitlines() if x.strip().startswith("added:")]
    assert " when the test ran (" in line and "; re-analysing it took " in line, line
    assert "writing reports" not in line  # the run's report files were never timed in its report.json
    assert " when the test ran (" in (again / "report.md").read_text()
    (entry,) = json.loads((work / "again" / "index.json").read_text())["tests"]
    assert entry["added"]["added_ms"] == ran["added_ms"]  # analyze's report files go to reanalysis_ms
    assert entry["added"]["reanalysis_ms"] > added["reanalysis_ms"]
    # A raw.npz alone: what its collection says (outside the rounds, the rounds); the run's analysis is not known.
    (work / "copy").mkdir()
    (folder / "raw.npz").rename(work / "copy" / "raw.npz")
    assert main(["analyze", str(work / "copy" / "raw.npz"), "--report", "bare"]) == 0
    bare = load_report(only_report(work / "bare") / "report.json").added
    assert bare["outside_rounds_ms"] == ran["outside_rounds_ms"] and "analysis_ms" not in bare
    assert bare["added_ms"] == pytest.approx(ran["added_ms"] - ran["analysis_ms"], abs=0.002)
    assert bare["reanalysis_ms"] > 0


def test_analyze_of_a_report_root_with_one_test_analyses_it(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # `inferscope run job.py --report first && inferscope analyze first` was an error: "first is a report folder of
    # 1 test; ... give its folder, e.g. first/job.py".
    assert main(["run", str(script(work, SCOPED)), "--rounds", "2", "--report", "first"]) == 0
    original = load_report(only_report(work / "first") / "report.json")
    for i, given in enumerate([work / "first", work / "first" / "index.json", work / "first" / "index.md"]):
        capsys.readouterr()
        assert main(["analyze", str(given), "--report", f"again{i}"]) == 0, capsys.readouterr().err
        again = load_report(only_report(work / f"again{i}") / "report.json")
        assert again.nodeid == original.nodeid and again.latency.samples_ms == original.latency.samples_ms


def test_analyze_reads_and_writes_a_plain_trace_json_when_the_setting_says_so(
    work: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INFERSCOPE_TRACE_FORMAT", "json")
    assert main(["run", str(script(work, SCOPED)), "--rounds", "2", "--report", "plain"]) == 0
    folder = only_report(work / "plain")
    assert load_report(folder / "report.json").files["trace"] == f"{folder.name}/trace.json"
    assert json.loads((folder / "trace.json").read_text())["traceEvents"]
    assert main(["analyze", str(folder / "trace.json"), "--report", "again"]) == 0
    again = only_report(work / "again")
    assert (again / "trace.json").is_file() and not (again / "trace.json.gz").exists()
    monkeypatch.setenv("INFERSCOPE_TRACE_FORMAT", "zip")
    capsys.readouterr()
    assert main(["analyze", str(folder / "trace.json"), "--report", "again"]) == 2
    assert "set the trace format to json.gz or json" in capsys.readouterr().err


def test_analyze_a_raw_trace_alone(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(script(work, SCOPED)), "--rounds", "2", "--warmup", "1", "--report", "first"]) == 0
    (work / "copy").mkdir()
    original = load_report(only_report(work / "first") / "report.json")
    (only_report(work / "first") / "raw.npz").rename(work / "copy" / "raw.npz")  # no report.json beside it
    assert main(["analyze", str(work / "copy" / "raw.npz"), "--report", "again"]) == 0
    result = load_report(only_report(work / "again") / "report.json")
    assert result.nodeid == str(work / "job.py")
    assert (result.rounds, result.warmup, len(result.latency.samples_ms)) == (2, 1, 2)
    # The trace says how it was made: the plan, the collectors as they described themselves, the machine.
    assert [c.to_dict() for c in result.collectors] == [c.to_dict() for c in original.collectors]
    assert result.environment == original.environment and result.environment
    assert result.thresholds == original.thresholds
    assert {s.path for s in result.analysis.scopes} == {"tokenize", "forward"}
    (work / "copy" / "raw.npz").write_bytes(b"PK\x03\x04 truncated")
    assert main(["analyze", str(work / "copy" / "raw.npz")]) == 2
    assert "is not a readable inferscope raw trace (.npz)" in capsys.readouterr().err


def test_analyze_reads_a_raw_trace_built_by_the_report_writers_npz(work: Path) -> None:
    """A small test's raw.npz is built by `reporters.npz` (not numpy's zip writer): analyze reads it the same."""
    assert main(["run", str(script(work, SCOPED)), "--rounds", "2", "--report", "first"]) == 0
    raw = RawTrace.load(only_report(work / "first") / "raw.npz")
    for name, build in (("ours", _raw_bytes), ("numpy", None)):
        (work / name).mkdir()
        if build is None:
            raw.save(str(work / name / "raw.npz"))
        else:
            (work / name / "raw.npz").write_bytes(build(raw))
        assert main(["analyze", str(work / name / "raw.npz"), "--report", f"again-{name}"]) == 0
    ours, numpy = (load_report(only_report(work / f"again-{n}") / "report.json") for n in ("ours", "numpy"))
    # What the plugin added is the run's, read from the trace (its analysis's time not known there); the analysis just
    # run is apart, this run's.
    for timed in (ours, numpy):
        assert timed.added.pop("reanalysis_ms") > 0 and "analysis_ms" not in timed.added
        assert timed.added["added_ms"] >= timed.added["outside_rounds_ms"] > 0
    assert ours.to_dict() == numpy.to_dict()


def test_analyze_rechecks_the_recorded_thresholds(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(script(work, SCOPED)), "--report", "first"]) == 0
    report_json = only_report(work / "first") / "report.json"
    raw = RawTrace.load(str(report_json.parent / "raw.npz"))  # the trace keeps the plan it was made with
    raw.meta["plan"]["thresholds"] = {"max_latency_ms": 1e-6}  # type: ignore[index]  # as if the test had been marked
    raw.save(str(report_json.parent / "raw.npz"))
    capsys.readouterr()
    assert main(["analyze", str(report_json), "--report", "again"]) == 1
    assert "FAILED check:   max_latency_ms: median latency" in capsys.readouterr().out


def test_analyze_gpu_shaped_kineto_trace(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["analyze", str(KINETO / "gpu_steps.json"), "--report", "out"]) == 0
    folder = only_report(work / "out")
    result = load_report(folder / "report.json")
    m = result.analysis.metrics
    assert result.rounds == 2 and len(result.latency.samples_ms) == 2
    assert m["gpu.kernel_launches_per_round"] == 2.0  # one runtime and one driver launch per step
    assert m["gpu.h2d_bytes_per_round"] == 4194304
    assert m["gpu.compute_fraction"] == pytest.approx(0.65)  # kernels + memset, per 1 ms step
    assert result.analysis.bottleneck == "gpu_bound"
    rules = {f.rule for f in result.analysis.findings}
    assert {"gpu_saturation", "transfers", "kineto_import"} <= rules and "off_cpu_wait" not in rules
    assert m["cpu.test_thread_busy"] is None  # not measured, not zero
    # what the trace cannot tell is no time of the rounds: not "explains 0.0% of the measured time"
    assert not next(f for f in result.analysis.findings if f.rule == "kineto_import").share_measured
    assert result.environment["gpu_model"] == "NVIDIA H200"
    md = (folder / "report.md").read_text()
    assert "CPU (test thread on CPU): not collected (the collection kept no per-round CPU counters" in md
    assert "Not measured: a torch.profiler (Kineto) trace records no per-round CPU time" in md
    assert "ampere_sgemm_128x64_tn" in md and "put on one clock by Kineto" in md
    assert "bottleneck:     gpu_bound" in capsys.readouterr().out


def test_analyze_recorded_cpu_kineto_trace(work: Path) -> None:
    assert main(["analyze", str(KINETO / "cpu_steps.json.gz"), "--report", "out"]) == 0
    folder = only_report(work / "out")
    result = load_report(folder / "report.json")
    assert len(result.latency.samples_ms) == 3  # ProfilerStep#1..#3
    assert {"forward", "preprocess"} <= {s.path for s in result.analysis.scopes}
    assert result.analysis.bottleneck and result.analysis.metrics["gpu.busy_fraction"] is None
    # The class comes from the ops' spans alone: nothing invented from the CPU counters a Kineto trace lacks.
    assert [f.rule for f in result.analysis.findings if f.cause is not None] == ["kineto_host"]
    assert (folder / "trace.json.gz").stat().st_size > 0 and (folder / "raw.npz").is_file()
    gpu = next(c for c in result.collectors if c.name == "gpu")
    assert not gpu.active and "no GPU activity" in gpu.reason


def test_kineto_records_map_to_our_kinds() -> None:
    trace = kineto.load(KINETO / "gpu_steps.json")
    ev, names = trace.raw.events, trace.raw.strings
    (copy,) = ev[(ev["kind"] == Kind.MEMCPY) & (ev["start"] == ev["start"][ev["kind"] == Kind.MEMCPY].min())]
    kind, src, dst = unpack_copy_flags(int(copy["flags"]))
    assert (int(kind), int(src), int(dst)) == (CopyKind.HTOD, MemoryKind.PAGEABLE, MemoryKind.DEVICE)
    assert (int(copy["value"]), int(copy["stream"]), int(copy["device"]), int(copy["corr"])) == (4194304, 7, 0, 101)
    assert int(copy["end"] - copy["start"]) == 200_000  # µs -> ns
    # Timestamps are converted from their decimal text: exact to the ns where a float would not be.
    assert kineto._ns("1718012345678901.123") == 1718012345678901123 and kineto._ns("2.5e-3") == 2
    rounds = ev[ev["kind"] == Kind.ROUND]
    assert sorted(names[int(n)] for n in rounds["name"]) == ["ProfilerStep#1", "ProfilerStep#2"]
    assert trace.counts["runtime"] == 10 and trace.counts["ignored"] == 10  # flows, metadata, GPU annotations
    assert "Linear_0" in {names[int(n)] for n in ev["name"][ev["kind"] == Kind.MODULE]}
    # Without ProfilerStep annotations the whole trace is one round.
    one = kineto.import_events(
        {"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1.5, "dur": 2, "tid": 1}]}, "t"
    )
    (only,) = one.raw.events[one.raw.events["kind"] == Kind.ROUND]
    assert (int(only["start"]), int(only["end"])) == (1500, 3500) and one.steps == 0


def test_malformed_traces_are_exit_2_naming_the_position(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "cut.json").write_text('{"traceEvents": [\n  {"ph": "X", "ts": 1,\n')
    with gzip.open(work / "bad.json.gz", "wt") as f:
        f.write('{"traceEvents": [\n\n  {"ph": "X" "ts": 1}]}')
    (work / "nots.json").write_text(
        json.dumps({"traceEvents": [{"ph": "M", "name": "x"}, {"ph": "X", "cat": "kernel", "name": "k", "dur": 3}]})
    )
    (work / "nolist.json").write_text('{"events": []}')
    cases = [
        ("cut.json", f"{work / 'cut.json'}:3:1: not valid JSON"),
        ("bad.json.gz", f"{work / 'bad.json.gz'}:3:14: not valid JSON (line 3, column 14 of the decompressed JSON"),
        ("nots.json", "traceEvents[1] (ph 'X', cat 'kernel', name 'k') has no 'ts'"),
        ("nolist.json", "neither an inferscope report.json nor a Chrome trace"),
    ]
    for name, message in cases:
        assert main(["analyze", str(work / name)]) == 2, name
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1 and "Traceback" not in err, err
    assert not (work / "inferscope-report").exists() or not any((work / "inferscope-report").iterdir())


# --- compare -----------------------------------------------------------------------------------


def test_compare_two_runs_prints_a_table(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    job = script(work, SCOPED)
    for run in ("a", "b"):
        assert main(["run", "./" + job.name, "--rounds", "5", "--report", run]) == 0
    capsys.readouterr()
    rc = main(["compare", "a", "b"])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["test", "median", "ms", "before", "→", "after", "ratio", "99%", "CI", "p", "verdict"]
    (row,) = [line for line in lines if line.startswith("job.py ")]
    verdict = row.split()[-1]
    assert verdict in ("regressed", "improved", "unchanged", "inconclusive")
    assert rc == (1 if verdict == "regressed" else 0)
    # The same run on both sides is unchanged, whichever way it is given.
    assert main(["compare", "a", str(work / "a" / "index.json")]) == 0
    assert "1.000 (+0.0%)" in capsys.readouterr().out


def test_compare_finds_an_injected_slowdown(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(work / "base", [make_result("t.py::test_a", BASE), make_result("t.py::test_old", BASE)])
    slow = [x * 1.5 for x in BASE]
    write_run(work / "new", [make_result("t.py::test_a", slow), make_result("t.py::test_new", BASE)])
    assert main(["compare", "base", "new", "--max-regression", "5%"]) == 1
    out = capsys.readouterr().out
    assert "1.500 (+50.0%)" in out and "regressed" in out
    assert "t.py::test_old  only in A" in out and "t.py::test_new  only in B" in out
    assert "1 regressed, 0 improved, 0 unchanged, 0 inconclusive; 1 only in A, 1 only in B" in out
    # Allowing 60% makes the same slowdown acceptable.
    assert main(["compare", str(work / "base" / "index.json"), "new", "--max-regression", "0.6"]) == 0


def test_compare_keeps_a_long_ids_test_name_and_writes_medians_as_the_reports(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A long id kept its first and last 29 characters, cut mid-word ('tests/models/test_transfor…-7b-bf16]'), and the
    medians read '.3f' ('0.000 → 0.001' for sub-microsecond calls): the table now shortens ids as the terminal summary
    does (start and test name kept) and writes medians with `units.fmt_ms`, as every other table."""
    from pytest_inferscope.reporters.terminal import test_name
    from pytest_inferscope.units import fmt_ms

    ids = [
        f"tests/models/test_transformer_models.py::TestTransformerInference::test_generate[llama-{n}]" for n in (7, 13)
    ]
    fast = [x * 1e-5 for x in BASE]  # ~0.1 microsecond calls
    write_run(work / "base", [make_result(i, fast) for i in ids])
    write_run(work / "new", [make_result(i, [x * 1.5 for x in fast]) for i in ids])
    main(["compare", "base", "new"])
    lines = capsys.readouterr().out.splitlines()
    rows = [line for line in lines if line.startswith("tests/")]
    assert len(rows) == 2
    before, after = LatencyStats.from_samples(fast).median, LatencyStats.from_samples([x * 1.5 for x in fast]).median
    for nodeid, row in zip(ids, rows, strict=True):
        shown = row.split("  ")[0]
        assert len(shown) <= 60 and shown.endswith("…::" + test_name(nodeid)), shown
        assert f"{fmt_ms(before, after)} → {fmt_ms(after, before)}" in row, row


def test_compare_leaves_a_partial_run_uncompared_as_the_gate_does(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_run(work / "base", [make_result("t.py::test_a", BASE)])
    cut = make_result("t.py::test_a", [x * 1.5 for x in BASE][:6])  # six rounds, 50% slower, then it raised
    cut.verdict, cut.outcome, cut.partial_reason = "partial", "failed", "ValueError: boom"
    write_run(work / "new", [cut])
    assert main(["compare", "base", "new"]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("t.py::test_a ")]
    assert row.split()[1:] == ["partial", "in", "B", "inconclusive"]
    assert "t.py::test_a: not compared: the test raised in B (ValueError: boom)" in out
    assert "0 regressed, 0 improved, 0 unchanged, 1 inconclusive" in out


def test_compare_leaves_a_test_without_report_files_uncompared(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """index.json lists a test whose xdist worker died in it (or whose files could not be written) with no files:
    compare stopped at it ("is listed in the run's index.json but missing; was its folder deleted?")."""
    from pytest_inferscope.xdist import crashed

    write_run(work / "base", [make_result("t.py::test_a", BASE), make_result("t.py::test_b", BASE)])
    died = crashed("t.py::test_b", "gw1", 8, 0)
    ran = make_result("t.py::test_a", BASE)
    write_run(work / "new", [ran])
    write_index([ran, died], work / "new", {})
    assert main(["compare", "base", "new"]) == 0
    out = capsys.readouterr().out
    (row,) = [line for line in out.splitlines() if line.startswith("t.py::test_b ")]
    assert row.split()[1:] == ["partial", "in", "B", "inconclusive"]
    assert "t.py::test_b: not compared: the test raised in B (worker 'gw1' crashed while running this test" in out


def test_compare_reads_baseline_files(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from pytest_inferscope.baseline import BaselineStore

    path = BaselineStore(work / "baselines").save("main", [make_result("t.py::test_a", BASE)], {"python": "3.11.7"})
    write_run(work / "new", [make_result("t.py::test_a", [x * 1.5 for x in BASE])])
    assert main(["compare", str(path), "new"]) == 1
    assert "regressed" in capsys.readouterr().out


def test_compare_warns_about_different_environments(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = work / "a" / "report.json"
    b = work / "b" / "report.json"
    for path, torch in ((a, "2.13.0"), (b, "2.14.0")):
        path.parent.mkdir()
        r = make_result("t.py::test_a", BASE, torch=torch)
        write_test_reports(r, None, path.parent)
        (path.parent / r.slug / "report.json").rename(path)
    assert main(["compare", str(a), str(b)]) == 0
    err = capsys.readouterr().err
    assert "different environments" in err and "'2.13.0'" in err and "'2.14.0'" in err


def test_compare_input_errors(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_run(work / "a", [make_result("t.py::test_a", BASE)])
    write_run(work / "b", [make_result("t.py::test_b", BASE)])
    (work / "broken.json").write_text('{"nodeid": ')
    (work / "empty").mkdir()
    cases = [
        (["compare", "a", "b"], "have no test id in common"),
        (["compare", "a", "nope"], "B (nope) does not exist"),
        (["compare", "a", "broken.json"], "broken.json:1:12: not valid JSON"),
        (["compare", "a", "empty"], "holds no report.json, index.json"),
        (["compare", "a", "a", "--max-regression", "5"], "'5' is ambiguous: write 5% for a percentage"),
        (["compare", "a", "a", "--alpha", "2"], "not a significance level"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err, err


def test_parse_fraction() -> None:
    assert parse_fraction("5%") == pytest.approx(0.05) and parse_fraction("0.05") == 0.05
    assert parse_fraction("150%") == pytest.approx(1.5)


# --- config show -------------------------------------------------------------------------------


def test_the_config_show_transcript_in_the_cli_page_is_what_it_prints(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/cli.md showed sample_interval_ms 1.0 as the default (it is 10 ms) and a table without the later settings.
    doc = (Path(__file__).parents[2] / "docs" / "cli.md").read_text(encoding="utf-8")
    transcript = doc.split("$ INFERSCOPE_GPU=off inferscope config show\n", 1)[1].split("```", 1)[0]
    (work / "pyproject.toml").write_text(
        '[tool.pytest.ini_options]\naddopts = "--inferscope-report=out"\ninferscope_cpu = "trace"\n'
    )
    (work / ".inferscope.yaml").write_text("rounds: 20\nwarmup: 3\n")
    monkeypatch.chdir(work)
    monkeypatch.setenv("INFERSCOPE_GPU", "off")
    assert main(["config", "show"]) == 0
    assert capsys.readouterr().out.replace(str(work), "/tmp/doc/proj") == transcript


def test_config_show_prints_each_value_and_its_source(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (work / ".inferscope.yaml").write_text("rounds: 7\ncpu: trace\n")
    (work / "pytest.ini").write_text("[pytest]\naddopts = -q --inferscope-warmup=4\ninferscope_gpu = off\n")
    monkeypatch.setenv("INFERSCOPE_TRACE_SIZE_MB", "50")
    monkeypatch.setenv("INFERSCOPE_CPU", "off")  # env beats the config file
    (work / "sub").mkdir()
    monkeypatch.chdir(work / "sub")  # pytest would find the ini file above and make its folder the rootdir
    assert main(["config", "show", "--inferscope-all"]) == 0
    out = capsys.readouterr().out
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in out.splitlines()[5:] if line.strip()}
    assert f"rootdir: {work}" in out and f"pytest ini file: {work / 'pytest.ini'} [pytest]" in out
    assert f"inferscope config file: {work / '.inferscope.yaml'}" in out
    assert rows["rounds"] == ["7", f"file {work / '.inferscope.yaml'}:1"]
    assert rows["cpu"] == ["off", "env INFERSCOPE_CPU"]
    assert rows["trace_size_mb"] == ["50.0", "env INFERSCOPE_TRACE_SIZE_MB"]
    assert rows["gpu"] == ["off", "ini inferscope_gpu"]
    assert rows["warmup"] == ["4", "cli --inferscope-warmup (from addopts in pytest.ini)"]
    assert rows["all"] == ["true", "cli --inferscope-all"]
    assert rows["latency_stat"] == ["median", "default"]


def test_config_show_finds_pyproject_ini_options(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "pyproject.toml").write_text('[tool.pytest.ini_options]\ninferscope_rounds = "9"\ninferscope_rund = "1"\n')
    (work / "deep" / "er").mkdir(parents=True)
    assert main(["config", "show", "--rootdir", str(work / "deep" / "er")]) == 0
    captured = capsys.readouterr()
    assert f"pytest ini file: {work / 'pyproject.toml'} [tool.pytest.ini_options]" in captured.out
    assert "9" in captured.out and "ini inferscope_rounds" in captured.out
    assert "unknown ini key 'inferscope_rund' (did you mean 'inferscope_rounds'?)" in captured.err


@pytest.mark.skipif(pytest.version_tuple[:2] < (9, 2), reason="plain TOML values for plugin ini keys need pytest 9.2")
def test_config_show_takes_native_toml_values(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "pytest.toml").write_text("[pytest]\ninferscope_all = true\ninferscope_rounds = 9\n")
    assert main(["config", "show", "--rootdir", str(work)]) == 0
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in capsys.readouterr().out.splitlines() if line.strip()}
    assert rows["all"] == ["true", "ini inferscope_all"] and rows["rounds"] == ["9", "ini inferscope_rounds"]
    (work / "pytest.toml").write_text("[pytest]\ninferscope_rounds = 0\n")
    assert main(["config", "show", "--rootdir", str(work)]) == 2
    assert capsys.readouterr().err.startswith(f"{work / 'pytest.toml'}: pytest ini option inferscope_rounds = 0 is out")


def test_config_errors_are_exit_2(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INFERSCOPE_ROUNDS", "abc")
    assert main(["config", "show"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("INFERSCOPE_ROUNDS='abc' is not a whole number") and "Traceback" not in err
    monkeypatch.delenv("INFERSCOPE_ROUNDS")
    (work / ".inferscope.yaml").write_text("trace-size: 3\n")
    assert main(["config", "show"]) == 2
    assert "unknown setting 'trace-size'" in capsys.readouterr().err


# --- help and the installed executable -------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        ([], "run       profile a Python script"),
        (["run"], "1  the script raised or exited with a non-zero status"),
        (["analyze"], "torch.profiler / Kineto Chrome trace"),
        (["compare"], "1  a test regressed"),
        (["config", "show"], "--inferscope-gpu {auto,off,required}"),
    ],
)
def test_help(argv: list[str], expect: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*argv, "--help"]) == 0
    out = capsys.readouterr().out
    assert expect in out and "exit codes:\n  0  ok" in out and "2  usage or input error" in out


def run_exe(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    assert EXE.is_file(), f"the console script is not installed next to {sys.executable}: pip install -e ."
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERSCOPE_")}
    # The installed entry point, importing the package under test (not whichever checkout was installed).
    env["PYTHONPATH"] = os.pathsep.join([str(Path(pytest_inferscope.__file__).parents[1]), env.get("PYTHONPATH", "")])
    return subprocess.run([str(EXE), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def test_executable_smoke(work: Path) -> None:
    job = script(work, SCOPED)
    ran = run_exe("run", str(job), "--rounds", "2", cwd=work)
    assert ran.returncode == 0, ran.stderr
    assert "| tokenize | scope |" in (only_report(work / "inferscope-report") / "report.md").read_text()
    analyzed = run_exe("analyze", str(KINETO / "gpu_steps.json"), "--report", "k", cwd=work)
    assert analyzed.returncode == 0 and "gpu_bound" in analyzed.stdout, analyzed.stderr
    compared = run_exe("compare", "inferscope-report", "inferscope-report", cwd=work)
    assert compared.returncode == 0 and "unchanged" in compared.stdout, compared.stderr
    shown = run_exe("config", "show", cwd=work)
    assert shown.returncode == 0 and "sample_interval_ms" in shown.stdout, shown.stderr
    bad = run_exe("analyze", "missing.json", cwd=work)
    assert bad.returncode == 2 and bad.stderr.strip().endswith("missing.json: no such file or folder.")


def test_pytest_itself_prints_the_settings_it_resolved_and_collects_nothing(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\naddopts = --inferscope-warmup=2\ninferscope_cpu = off\n")
    pytester.makepyfile("def test_never_run():\n    raise AssertionError('collected')\n")
    result = pytester.runpytest("--inferscope-show-config", "--inferscope-rounds=4", "-o", "inferscope_gpu=off")
    assert result.ret == 0 and "collected" not in result.stdout.str()
    result.stdout.re_match_lines(
        [
            rf"pytest ini file: {re.escape(str(pytester.path / 'tox.ini'))} \[pytest\]",
            r"rounds +4 +cli --inferscope-rounds$",
            r"warmup +2 +cli --inferscope-warmup \(from addopts in tox.ini\)$",
            r"gpu +off +ini inferscope_gpu \(from -o\)$",  # -o overrides: pytest's own ini handling, its source said
            r"cpu +off +ini inferscope_cpu$",
        ],
        consecutive=False,
    )
    assert "--inferscope-show-config" not in pytester.runpytest("--help").stdout.str()  # internal to config show
