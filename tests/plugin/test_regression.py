"""Regression gating as a user sees it: save a baseline, compare against it, fail on a regression."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

BODY = """
import os, time, pytest

@pytest.mark.inferscope(rounds=12, warmup=1)
def test_model():
    time.sleep(float(os.environ["SLEEP_S"]))
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(test_model=BODY)
    return pytester


def run(p: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, sleep: float, *args: str) -> pytest.RunResult:
    monkeypatch.setenv("SLEEP_S", str(sleep))
    return p.runpytest("-p", "no:randomly", *args)


def test_save_then_compare_unchanged_passes(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # 50 ms calls: waking from a sleep on a busy 2-core CI machine (two xdist workers) was late by ~0.7 ms in a
    # whole run, +6.9% on 10 ms calls and flagged against the 5% allowed; the same lateness is ~1.4% of 50 ms.
    saved = run(project, monkeypatch, 0.05, "--inferscope-save-baseline=main")
    saved.assert_outcomes(passed=1)
    saved.stdout.fnmatch_lines(["*saved baseline 'main' (1 test) to *main.json"])  # "(1 tests)" until 2026-11-30
    stored = json.loads((project.path / ".inferscope" / "baselines" / "main.json").read_text())
    (entries,) = stored["tests"].values()
    assert len(entries) == 1 and len(entries[0]["samples_ms"]) == 12

    again = run(project, monkeypatch, 0.05, "--inferscope-compare=main", "--junitxml=junit.xml")
    again.assert_outcomes(passed=1)
    summary = again.stdout.str().split("= inferscope =")[1]
    assert "vs baseline" in summary and ("unchanged" in summary or "improved" in summary)
    props = {p.get("name"): p.get("value") for p in ET.parse(project.path / "junit.xml").getroot().iter("property")}
    assert props["inferscope.regression.verdict"] in ("unchanged", "improved")
    assert props["inferscope.check.max_regression"] == "passed"


def test_a_baseline_restored_from_a_ci_cache_into_another_checkout_and_host_is_compared(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CI saves the baseline in one job and restores it from a cache in another: another absolute path of the
    checkout and another hostname. Neither is part of a test's key or fingerprint, so the test is compared."""
    import platform
    import shutil
    import socket

    run(project, monkeypatch, 0.05, "--inferscope-save-baseline=main").assert_outcomes(passed=1)
    job2 = project.path / "runner-b" / "_work" / "repo"
    job2.mkdir(parents=True)
    shutil.copy(project.path / "test_model.py", job2)
    shutil.copytree(project.path / ".inferscope", job2 / ".inferscope")  # the cache's restore
    monkeypatch.chdir(job2)
    monkeypatch.setattr(socket, "gethostname", lambda: "runner-b")
    monkeypatch.setattr(platform, "node", lambda: "runner-b")
    again = run(project, monkeypatch, 0.05, "--inferscope-compare=main", f"--rootdir={job2}", "--junitxml=junit.xml")
    again.assert_outcomes(passed=1)
    props = {p.get("name"): p.get("value") for p in ET.parse(job2 / "junit.xml").getroot().iter("property")}
    assert props["inferscope.regression.verdict"] in ("unchanged", "improved"), props


def test_an_injected_slowdown_fails_the_test_with_the_evidence(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(project, monkeypatch, 0.01, "--inferscope-save-baseline=main").assert_outcomes(passed=1)
    summary_file = project.path / "step-summary.md"
    summary_file.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary_file))
    slow = run(project, monkeypatch, 0.02, "--inferscope-compare=main", "--inferscope-max-regression=5%",
               "--junitxml=junit.xml")  # fmt: skip
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(
        [
            "*max_regression: Performance regression against baseline 'main'*",
            "*latency: median * ms (12 rounds) → * ms (12 rounds), +*% (ratio *; one-sided Mann–Whitney p=*",
        ]
    )
    props = {p.get("name"): p.get("value") for p in ET.parse(project.path / "junit.xml").getroot().iter("property")}
    assert props["inferscope.regression.verdict"] == "regressed" and float(props["inferscope.regression.ratio"]) > 1.5
    text = summary_file.read_text()
    assert text.startswith("earlier step\n") and "## inferscope" in text and "regressed" in text

    # saving again appends to the history, never rewrites it
    run(project, monkeypatch, 0.02, "--inferscope-save-baseline=main").assert_outcomes(passed=1)
    stored = json.loads((project.path / ".inferscope" / "baselines" / "main.json").read_text())
    (entries,) = stored["tests"].values()
    assert len(entries) == 2


def test_a_missing_baseline_is_a_usage_error_listing_what_exists(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(project, monkeypatch, 0.001, "--inferscope-save-baseline=main").assert_outcomes(passed=1)
    result = run(project, monkeypatch, 0.001, "--inferscope-compare=mian")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "mian" in err and "main" in err


def test_a_corrupt_baseline_is_a_usage_error_and_stays_untouched(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = project.path / ".inferscope" / "baselines"
    folder.mkdir(parents=True)
    (folder / "main.json").write_bytes(b'{"format": "pytest-inferscope-baseline", "tests": {')
    for args in (("--inferscope-compare=main",), ("--inferscope-save-baseline=main",)):
        result = run(project, monkeypatch, 0.001, *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, args  # before any test runs
        assert "main.json" in result.stderr.str() and "corrupt" in result.stderr.str()
        assert (folder / "main.json").read_bytes() == b'{"format": "pytest-inferscope-baseline", "tests": {'


@pytest.mark.parametrize("folder", ["test_model.py", "test_model.py/baselines"])
def test_a_baseline_folder_that_is_a_file_is_a_usage_error_before_the_tests(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, folder: str
) -> None:
    file = project.path / "test_model.py"
    source = file.read_text()
    for args in ("--inferscope-compare=main", "--inferscope-save-baseline=main"):
        result = run(project, monkeypatch, 0.001, f"--inferscope-baseline-dir={folder}", args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR, args  # before any test runs, not "not saved" after them
        said = "is a file" if folder == "test_model.py" else f"cannot be made: {str(file)!r} is a file"
        where = str(project.path / folder)
        result.stderr.fnmatch_lines([f"ERROR: The baseline folder {where!r} {said}, not a folder; *baseline-dir=DIR."])
        assert "Not a directory" not in result.stderr.str() and file.read_text() == source


def test_nothing_to_save_fails_the_run_and_says_why(pytester: pytest.Pytester) -> None:
    pytester.makepyfile("import pytest\n\n@pytest.mark.inferscope(rounds=2)\ndef test_x():\n    assert False\n")
    result = pytester.runpytest("--inferscope-save-baseline=main")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*baseline 'main' NOT saved*"])
    assert not (pytester.path / ".inferscope" / "baselines" / "main.json").exists()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["serial", "xdist"])
def test_an_interrupted_save_appends_the_tests_that_completed_and_keeps_the_others(
    pytester: pytest.Pytester, workers: list[str]
) -> None:
    """Ctrl-C (here a KeyboardInterrupt in a test's body) ends the session early: the baseline gets an entry for each
    test that completed, none for the interrupted one, and every entry it held before stays (docs/ci.md)."""
    if workers:
        pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        from pathlib import Path
        import pytest

        @pytest.mark.parametrize("n", range(2))
        def test_a(n):
            pass

        def test_b_interrupted():
            if Path("interrupt").exists():
                raise KeyboardInterrupt

        def test_c():
            pass
        """
    )
    args = (
        "-p",
        "no:randomly",
        *workers,
        "--inferscope-all",
        "--inferscope-rounds=2",
        "--inferscope-save-baseline=main",
    )
    pytester.runpytest_subprocess("-p", "no:xdist", *args[2 + len(workers) :]).assert_outcomes(passed=4)
    (pytester.path / "interrupt").write_text("")
    result = pytester.runpytest_subprocess(*args)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    saved = json.loads((pytester.path / ".inferscope" / "baselines" / "main.json").read_text())["tests"]
    runs = {nodeid.rpartition("::")[2]: len(entries) for nodeid, entries in saved.items()}
    assert runs["test_b_interrupted"] == 1 and all(runs[f"test_a[{n}]"] in (1, 2) for n in range(2)), runs
    completed = [name for name, n in runs.items() if n == 2]
    assert runs["test_c"] in (1, 2) and len(runs) == 4 and completed, runs  # (xdist: test_c may have run too)
    tests = f"{len(completed)} test{'' if len(completed) == 1 else 's'}"  # "(1 tests)" until 2026-11-30
    result.stdout.fnmatch_lines([f"inferscope: saved baseline 'main' ({tests})*"])


def test_a_test_missing_from_the_baseline_is_not_evaluated_with_the_reason(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(project, monkeypatch, 0.001, "--inferscope-save-baseline=main").assert_outcomes(passed=1)
    project.makepyfile(test_new="import pytest\n\n@pytest.mark.inferscope(rounds=5)\ndef test_new():\n    pass\n")
    # A wide allowed regression: test_model's 1 ms sleep stretches on a loaded machine, and this test is
    # about test_new, which the baseline does not have.
    result = run(project, monkeypatch, 0.001, "--inferscope-compare=main", "--inferscope-max-regression=100%",
                 "--inferscope-report=out")  # fmt: skip
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "inferscope: 1 of the 2 profiled tests is not in baseline 'main', so not compared: test_new.py::test_new. "
            "Save them into it with --inferscope-save-baseline=main.",
        ]
    )
    (report,) = (project.path / "out").glob("test_new*/report.json")
    checks = {c["key"]: c for c in json.loads(report.read_text())["checks"]}
    assert checks["max_regression"]["status"] == "not_evaluated"
    assert "is not in baseline 'main'" in checks["max_regression"]["message"]


def test_tests_the_baseline_does_not_hold_are_named_in_the_summary(pytester: pytest.Pytester) -> None:
    """A baseline saved under pytest-repeat's --count holds `test_a[1-2]` and `test_a[2-2]`; compared without it, the
    run's `test_a` is in none of it. Nothing in the terminal said so: the table had no `vs baseline` column and no line
    named the tests left out, so a run that gated nothing read as gated. The summary now names them, and where none
    was found, what the baseline holds."""
    pytester.makepyfile(
        test_r="""
        import pytest

        @pytest.mark.inferscope(rounds=2, warmup=0)
        @pytest.mark.parametrize("rep", ["1-2", "2-2"])
        def test_a(rep):
            pass
        """
    )
    pytester.runpytest("-p", "no:randomly", "--inferscope-save-baseline=main").assert_outcomes(passed=2)
    pytester.makepyfile(
        test_r="""
        import pytest

        @pytest.mark.inferscope(rounds=2, warmup=0)
        def test_a():
            pass
        """
    )
    result = pytester.runpytest("-p", "no:randomly", "--inferscope-compare=main")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        [
            "inferscope: --inferscope-compare=main compared no test: the 1 profiled test is not in baseline 'main' "
            "(test_r.py::test_a), which holds 2 tests (test_r.py::test_a[1-2], test_r.py::test_a[2-2]). A test id "
            "must match exactly (a parameter, or pytest-repeat's [1-3], makes another id); save them into it with "
            "--inferscope-save-baseline=main.",
        ]
    )


def test_a_baseline_from_another_environment_is_not_compared_silently(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(project, monkeypatch, 0.002, "--inferscope-save-baseline=main").assert_outcomes(passed=1)
    path = project.path / ".inferscope" / "baselines" / "main.json"
    stored = json.loads(path.read_text())
    for entries in stored["tests"].values():
        entries[-1]["fingerprint"]["cpu_model"] = "Some Other CPU 9000"
    path.write_text(json.dumps(stored))
    result = run(project, monkeypatch, 0.004, "--inferscope-compare=main", "--inferscope-report=out")
    result.assert_outcomes(passed=1)  # a 2x slowdown, but on another machine's numbers: not a failure
    result.stdout.fnmatch_lines(["*environment differs from baseline 'main'*Some Other CPU 9000*not compared*"])
    # the differences are clauses of one sentence: no sentence's full stop inside the parentheses ("'.)", "'.;")
    result.stdout.fnmatch_lines(["*baseline 'Some Other CPU 9000', this run '*'): latency was not compared*"])
    (report,) = (project.path / "out").glob("*/report.json")
    data = json.loads(report.read_text())
    assert data["regression"]["verdict"] == "inconclusive"
    assert {c["key"]: c["status"] for c in data["checks"]}["max_regression"] == "not_evaluated"


def test_xdist_gives_the_serial_runs_summary_index_and_junit_properties(pytester: pytest.Pytester) -> None:
    pytest.importorskip("xdist")
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("n", range(4))
        @pytest.mark.inferscope(rounds=3, max_latency_ms=10_000)
        def test_p(n):
            sum(range(5000 * (n + 1)))
        """
    )

    def shape(*args: str) -> tuple[list[str], list[str], dict[str, list[str]]]:
        out = pytester.path / f"out{len(args)}"
        result = pytester.runpytest(*args, f"--inferscope-report={out}", f"--junitxml={out}.xml", "-p", "no:randomly")
        result.assert_outcomes(passed=4)
        summary = result.stdout.str().split("= inferscope =")[1].splitlines()
        rows = sorted(line.split()[0] for line in summary if "::test_p[" in line)
        index = sorted(line.split("](")[0] for line in (out / "index.md").read_text().splitlines() if "test_p" in line)
        props: dict[str, list[str]] = {}
        for case in ET.parse(f"{out}.xml").getroot().iter("testcase"):
            values = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
            # A body this small may or may not be classified (how many stacks its three
            # rounds sampled); the reason is there exactly when the class is not.
            unclassified = values.get("inferscope.bottleneck") == "unclassified"
            assert ("inferscope.unclassified_reason" in values) == unclassified, values
            props[case.get("name", "")] = sorted(set(values) - {"inferscope.unclassified_reason"})
        return rows, index, props

    serial = shape()
    parallel = shape("-n", "2")
    assert len(serial[0]) == 4 and serial == parallel


CPU_BODY = """
import os, pytest

@pytest.mark.inferscope(rounds=30, warmup=2)
def test_cpu():
    acc = 1
    for _ in range(int(os.environ["WORK"])):
        acc = (acc * 31 + 7) % 1_000_003
"""


def test_cpu_bound_rounds_are_gated_on_steady_rounds_against_the_historys_floor(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_cpu=CPU_BODY)
    monkeypatch.setenv("WORK", "15000")
    for _ in range(3):  # main saves three runs: the history the noise floor comes from
        pytester.runpytest("-p", "no:randomly", "--inferscope-save-baseline=main").assert_outcomes(passed=1)
    stored = json.loads((pytester.path / ".inferscope" / "baselines" / "main.json").read_text())
    (entries,) = stored["tests"].values()
    # Before round 1 and after each of 30, or more when rounds were added at a busy moment.
    assert all(len(e["probe_ms"]) == len(e["samples_ms"]) + 1 and 30 <= len(e["samples_ms"]) <= 90 for e in entries)
    assert all(0 < x < 50 for e in entries for x in e["probe_ms"])

    # The code got 10x slower: on a loaded machine a 3x slowdown's rounds (~3.5 ms) can vary by more than
    # half their median, which the gate rightly calls inconclusive ("spread too high").
    monkeypatch.setenv("WORK", "150000")
    slow = pytester.runpytest("-p", "no:randomly", "--inferscope-compare=main", "--inferscope-report=out")
    slow.assert_outcomes(failed=1)
    slow.stdout.fnmatch_lines(
        [
            "*Performance regression against baseline 'main'*",
            "*machine speed: * of the baseline's * rounds and * of this run's * ran at the machine's usual speed*",
        ]
    )
    (report,) = (pytester.path / "out").glob("*/report.json")
    data = json.loads(report.read_text())
    assert len(data["latency"]["probe_ms"]) == len(data["latency"]["samples_ms"]) + 1 >= 31
    # A saved run measured on a busy machine is left out of the floor, and the report says so.
    floor, out = data["regression"]["noise_floor"], slow.stdout.str()
    if floor is not None:
        assert floor > 1.0 and "run-to-run noise floor: ratio" in out
    else:
        assert "warning: no run-to-run noise floor: only" in out


#: A body that sleeps WORK / 10 µs: its rounds vary little even on a loaded machine, where a CPU loop's vary so
#: much (IQR over 100% of the median on a loaded CI runner) that the gate rightly calls them inconclusive.
SLEEP_BODY = """
import os, time, pytest

@pytest.mark.inferscope(rounds=30, warmup=2)
def test_cpu():
    time.sleep(int(os.environ["WORK"]) / 1e7)
"""


def test_speed_probe_off_records_no_readings_and_still_gates(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile(test_cpu=SLEEP_BODY)
    monkeypatch.setenv("WORK", "15000")
    off = ("-p", "no:randomly", "--inferscope-speed-probe=off")
    pytester.runpytest(*off, "--inferscope-save-baseline=main").assert_outcomes(passed=1)
    stored = json.loads((pytester.path / ".inferscope" / "baselines" / "main.json").read_text())
    assert [e["probe_ms"] for e in next(iter(stored["tests"].values()))] == [[]]
    # 30x slower: a loaded machine's wait for a core on waking adds several ms to the 1.5 ms rounds (81.6% spread,
    # 2.87 ms median on a loaded 2-core VM), and a 3x slower body's read "+218.8% inconclusive" beside it
    monkeypatch.setenv("WORK", "450000")
    slow = pytester.runpytest(*off, "--inferscope-compare=main")
    slow.assert_outcomes(failed=1)
    assert "machine speed:" not in slow.stdout.str()


BUSY_CONFTEST = """
import importlib, itertools, pytest

@pytest.fixture(autouse=True)
def busy_machine(monkeypatch):
    # A scripted machine: every fourth speed-probe reading of each test is a busy moment (1.8x slower).
    # (The module as imported now: pytester drops the modules an earlier in-process run imported.)
    readings = itertools.cycle([0.045, 0.045, 0.045, 0.081])
    monkeypatch.setattr(importlib.import_module("pytest_inferscope.drift"), "probe_ms", lambda: next(readings))
"""

BUSY_BODY = """
import pytest

@pytest.mark.inferscope(rounds=8, warmup=1, cpu="off")
def test_cpu():
    acc = 1
    for _ in range(20000):
        acc = (acc * 31 + 7) % 1_000_003

@pytest.mark.inferscope(rounds=8, warmup=1, round_cap=1.5, cpu="off")
def test_capped():
    acc = 1
    for _ in range(20000):
        acc = (acc * 31 + 7) % 1_000_003
"""


def test_rounds_at_a_busy_moment_are_made_up_for_and_the_summary_says_so(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(BUSY_CONFTEST)
    pytester.makepyfile(test_busy=BUSY_BODY)
    saved = pytester.runpytest("-p", "no:randomly", "--inferscope-save-baseline=main")
    saved.assert_outcomes(passed=2)
    # Rounds 2, 3, 6, 7, ... lie next to a busy reading: 8 steady rounds take 14; a cap of 1.5 x 8 stops at 12.
    saved.stdout.fnmatch_lines(
        ["*the machine was busy: 2 tests ran 10 rounds more than requested (most: test_busy.py::test_cpu, +6)*"]
    )
    stored = json.loads((pytester.path / ".inferscope" / "baselines" / "main.json").read_text())
    ran = {k.split("::")[1]: (len(e[0]["samples_ms"]), len(e[0]["probe_ms"])) for k, e in stored["tests"].items()}
    assert ran == {"test_cpu": (14, 15), "test_capped": (12, 13)}

    # The scripted probe lets arbitrary rounds through, so only the counts are checked, not the verdict.
    again = pytester.runpytest("-p", "no:randomly", "--inferscope-compare=main", "--inferscope-report=out",
                               "--inferscope-max-regression=500%")  # fmt: skip
    again.assert_outcomes(passed=2)
    data = {p.parent.name: json.loads(p.read_text()) for p in (pytester.path / "out").glob("*/report.json")}
    (cpu,) = (d for name, d in data.items() if "test_cpu" in name)
    assert len(cpu["latency"]["samples_ms"]) == 14 and cpu["rounds"] == 8
    assert "14 rounds ran, 6 more than the 8 requested" in cpu["regression"]["steady"]

    off = pytester.runpytest("-p", "no:randomly", "--inferscope-speed-probe=off", "--inferscope-save-baseline=b")
    off.assert_outcomes(passed=2)
    assert "the machine was busy" not in off.stdout.str()
    stored = json.loads((pytester.path / ".inferscope" / "baselines" / "b.json").read_text())
    assert sorted(len(e[0]["samples_ms"]) for e in stored["tests"].values()) == [8, 8]


def test_an_async_tests_busy_rounds_are_made_up_for_too(pytester: pytest.Pytester) -> None:
    """An `async def` test (awaited by a plugin, as anyio does) has its rounds made up for as a test function's."""
    pytester.makeconftest(
        BUSY_CONFTEST
        + """
import asyncio, inspect

@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem):
    if inspect.iscoroutinefunction(pyfuncitem.obj):
        asyncio.run(pyfuncitem.obj())
        return True
"""
    )
    pytester.makepyfile(test_busy=BUSY_BODY.replace("def test_", "async def test_"))
    saved = pytester.runpytest("-p", "no:randomly", "-p", "no:anyio", "--inferscope-save-baseline=main")
    saved.assert_outcomes(passed=2)
    stored = json.loads((pytester.path / ".inferscope" / "baselines" / "main.json").read_text())
    ran = {k.split("::")[1]: (len(e[0]["samples_ms"]), len(e[0]["probe_ms"])) for k, e in stored["tests"].items()}
    assert ran == {"test_cpu": (14, 15), "test_capped": (12, 13)}  # as the test functions' above


def test_a_round_cap_below_one_is_a_clear_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_cpu=CPU_BODY)
    result = pytester.runpytest("--inferscope-round-cap=0.5")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--inferscope-round-cap=*0.5* from 1 (never add rounds) to 100*"])


SPEED_CONFTEST = """
import importlib, os, pytest

@pytest.fixture(autouse=True)
def machine_speed(monkeypatch):
    # A machine at one speed for the whole run: the probe reads PROBE_MS every time.
    reading = float(os.environ["PROBE_MS"])
    monkeypatch.setattr(importlib.import_module("pytest_inferscope.drift"), "probe_ms", lambda: reading)
"""


def test_a_run_slow_throughout_is_told_by_the_baselines_readings(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makeconftest(SPEED_CONFTEST)
    pytester.makepyfile(test_busy=BUSY_BODY.replace("round_cap=1.5, ", ""))
    samples = {}
    for speed, args in (("0.045", ()), ("0.081", ()), ("0.081", ("--inferscope-round-cap=2",))):
        monkeypatch.setenv("PROBE_MS", speed)
        pytester.runpytest("-p", "no:randomly", "--inferscope-save-baseline=main", *args).assert_outcomes(passed=2)
        stored = json.loads((pytester.path / ".inferscope" / "baselines" / "main.json").read_text())
        samples[speed, args] = [len(e[-1]["samples_ms"]) for e in stored["tests"].values()]
    # Alone, a slow run looks steady; appended to a baseline saved at full speed, it runs to the cap.
    assert samples == {
        ("0.045", ()): [8, 8],
        ("0.081", ()): [24, 24],
        ("0.081", ("--inferscope-round-cap=2",)): [16, 16],
    }


#: A conftest for a machine with two GPUs of one model (this one's GPU driver and model as on a GPU machine).
AS_ON_A_GPU_MACHINE = """
import pytest_inferscope.gpus
pytest_inferscope.gpus.driver_missing = lambda: None  # a pin is made where a driver is found


def pytest_inferscope_machine_info(config):
    return {"gpu_model": "NVIDIA H200"}
"""


def test_a_test_on_another_gpu_slot_of_the_same_model_is_still_compared(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under `-n N --inferscope-gpus=...` xdist hands a test to whichever worker is free, so from one run to the next
    it lands on another GPU slot; with every other fingerprint fact equal it is compared, and the summary says so.
    (The two runs below swap the slots outright: gw0 had GPU 0, then GPU 1.)"""
    pytest.importorskip("xdist")
    project.makeconftest(AS_ON_A_GPU_MACHINE)
    saved = run(project, monkeypatch, 0.01, "-n", "1", "--inferscope-gpus=0,1", "--inferscope-save-baseline=main")
    saved.assert_outcomes(passed=1)
    (entries,) = json.loads((project.path / ".inferscope" / "baselines" / "main.json").read_text())["tests"].values()
    assert entries[0]["fingerprint"]["pinned_gpu"] == "0"  # recorded in the fingerprint
    again = run(project, monkeypatch, 0.01, "-n", "1", "--inferscope-gpus=1,0", "--inferscope-compare=main",
                "--junitxml=junit.xml")  # fmt: skip
    props = {p.get("name"): p.get("value") for p in ET.parse(project.path / "junit.xml").getroot().iter("property")}
    # Compared: a verdict, whichever the machine's load between the two runs made it (a 10 ms sleep read +23% on the
    # loaded 2-core VM once); the test fails exactly when it is a regression.
    verdict = props["inferscope.regression.verdict"]
    assert verdict in ("unchanged", "improved", "inconclusive", "regressed"), again.stdout.str()
    again.assert_outcomes(**({"failed": 1} if verdict == "regressed" else {"passed": 1}))
    out = again.stdout.str()
    assert "environment differs" not in out
    assert (
        "on another GPU of the same model (e.g. test_model.py::test_model: baseline on GPU 0, this run on GPU 1)" in out
    )


def test_inferscope_gpus_without_a_gpu_pins_nothing_and_says_so(
    project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No GPU, no pin: the header says the option has no effect, and no baseline records a GPU that a later run
    without the option would be said to have moved from."""
    from pytest_inferscope.gpus import driver_missing

    if driver_missing() is None:
        pytest.skip("this machine has a GPU driver")
    saved = run(project, monkeypatch, 0.01, "--inferscope-gpus=0", "--inferscope-save-baseline=main")
    saved.assert_outcomes(passed=1)
    said = "inferscope: --inferscope-gpus=0 has no effect (no NVIDIA GPU or driver on this *)*"
    saved.stdout.fnmatch_lines([said, "*= inferscope =*", said])  # the header's line, and the summary's (-q: only it)
    (entries,) = json.loads((project.path / ".inferscope" / "baselines" / "main.json").read_text())["tests"].values()
    assert entries[0]["fingerprint"]["pinned_gpu"] == "none"
    again = run(project, monkeypatch, 0.01, "--inferscope-compare=main")
    assert "another GPU" not in again.stdout.str() and "has no effect" not in again.stdout.str()


def test_a_baseline_that_recorded_a_pin_without_a_gpu_is_not_said_to_be_on_another_gpu() -> None:
    from pytest_inferscope.baseline import slot_change

    none = {"gpu_model": "none", "pinned_gpu": "none"}
    assert slot_change({**none, "pinned_gpu": "0"}, none) == ""  # saved before the pin was ignored without a GPU
    h200 = {"gpu_model": "NVIDIA H200", "pinned_gpu": "0"}
    assert slot_change(h200, {**h200, "pinned_gpu": "none"}) == "baseline on GPU 0, this run on the unpinned GPU"
