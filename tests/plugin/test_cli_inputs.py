"""`inferscope` given the wrong input: every mistake is one paragraph naming the input and what to give instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_inferscope.cli import main

KINETO = Path(__file__).parent.parent / "data" / "kineto"


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run `inferscope ARGV`, check it is a one-paragraph usage error (exit 2), and return the paragraph."""
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("command", ["run", "analyze"])
def test_an_empty_report_folder_is_rejected_as_pytest_does(
    work: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    (work / "ok.py").write_text("open('ran', 'w').close()\n")
    given = "ok.py" if command == "run" else str(KINETO / "gpu_steps.json")
    for argv in ([command, given, "--report="], [command, given, "--report", " "]):
        err = usage_error(argv, capsys)
        assert "argument --report: " in err and "is empty: give a folder path, e.g. --report out" in err, err
    assert not (work / "ran").exists() and not (work / "inferscope-report").exists()


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ('"ts": 1e20', "'ts' 1e20 is out of range: times in µs must lie within ±9.2e15 µs"),
        ('"ts": 1e400', "'ts' 1e400 is out of range"),
        ('"dur": Infinity', "'dur' Infinity is not a finite number"),
        ('"ts": NaN', "'ts' NaN is not a finite number"),
        ('"ts": 9000000000000000, "dur": 9000000000000000', "its end, 'ts' + 'dur', is out of range"),
        ('"cat": "user_annotation", "name": "ProfilerStep#99999999999999999999"', "the step number in 'name' is"),
        ('"cat": "kernel", "args": {"stream": 1099511627776}', "'args.stream' (or 'tid') is 1099511627776, out of"),
        ('"cat": "kernel", "args": {"device": 70000}', "'args.device' (or 'pid') is 70000, out of range"),
        ('"cat": "gpu_memcpy", "args": {"bytes": 1000000000000000000000}', "'args.bytes' is 1000000000000000000000"),
    ],
)
def test_out_of_range_numbers_in_a_chrome_trace_name_the_event_and_field(
    work: Path, capsys: pytest.CaptureFixture[str], fields: str, message: str
) -> None:
    # The fields come last in the event: JSON's last value of a key wins. The text keeps numbers such as 1e400.
    event = '{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 5, "dur": 3, "pid": 1, "tid": 1, ' + fields + "}"
    (work / "t.json").write_text('{"traceEvents": [{"ph": "M", "name": "meta"}, ' + event + "]}")
    err = usage_error(["analyze", "t.json"], capsys)
    assert err.startswith("inferscope analyze: t.json: traceEvents[1] (ph 'X', cat "), err
    assert message in err, err


def test_analyze_given_a_page_an_index_or_another_file_says_what_to_give(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import zipfile

    (work / "job.py").write_text("sum(range(1000))\n")
    assert main(["run", "job.py", "--report", "out"]) == 0
    test = work / "out" / "job.py"
    (work / "fake.npz").write_bytes(b"PKgarbage")
    with zipfile.ZipFile(work / "other.npz", "w") as z:
        z.writestr("weights.npy", b"not ours")
    for name, text in [("null.json", "null"), ("num.json", "1.5"), ("list.json", "[1]"), ("obj.json", '{"b": 1}')]:
        (work / name).write_text(text)
    cases = [
        (test / "report.md", f"is a report page, not a trace; give the test's folder ({test}) or its report.json"),
        (test / "report.html", f"is a report page, not a trace; give the test's folder ({test}) or its report.json"),
        (work / "fake.npz", "(.npz): it starts as a zip archive does, but is not a whole one. It may be truncated"),
        (work / "other.npz", "(.npz): a zip archive, but its arrays are not those inferscope writes. It may be"),
        (work / "null.json", "found: null."),
        (work / "num.json", "found: the number 1.5."),
        (work / "list.json", "found: an array."),
        (work / "obj.json", "found: an object with the keys b."),
    ]
    for given, message in cases:
        err = usage_error(["analyze", str(given), "--report", "again"], capsys)
        assert message in err and "pickle" not in err and ".. " not in err and not err.endswith("..\n"), err


@pytest.mark.parametrize(("content", "what"), [(b"", "empty"), (b"\x00\x01junk", "not a zip archive")])
def test_a_raw_npz_that_is_no_zip_archive_is_not_called_json(
    content: bytes, what: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "raw.npz:1:1: not valid JSON (...). Was the file truncated while it was written? Export the trace again.":
    # a .npz is no JSON, nor exported.
    (work / "raw.npz").write_bytes(content)
    err = usage_error(["analyze", "raw.npz"], capsys)
    assert err.startswith(
        f"inferscope analyze: raw.npz is {what}, where a .npz (numpy's, as a report folder's raw.npz) is a zip "
        "archive; it may have been cut short or overwritten: give the raw.npz of a report folder, or re-run the test"
    ), err
    assert "JSON" not in err


@pytest.mark.parametrize("content", ['{"a": 1}', "[]", "not json"])
def test_a_folder_with_another_programs_report_json_is_not_called_an_old_report(
    content: str, work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "has no raw.npz beside it ...; it was written before raw traces were kept": of a file no inferscope wrote.
    (work / "site").mkdir()
    (work / "site" / "report.json").write_text(content)
    for given in ("site", "site/"):
        err = usage_error(["analyze", given], capsys)
        assert err.startswith(
            "inferscope analyze: site/report.json is not an inferscope report.json (one has 'nodeid' and "
            "'schema_version'), and there is no raw.npz beside it; give a test's folder in a report folder written by "
            "`pytest --inferscope-report=DIR` or `inferscope run`."
        ), err


def test_an_unknown_argument_is_the_subcommands_error(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "ok.py").write_text("open('ran', 'w').close()\n")
    cases = [
        (["run", "--bogus", "ok.py"], "inferscope run: unrecognized argument: --bogus (inferscope run's own options"),
        (
            ["compare", "a", "b", "--bogus"],
            "inferscope compare: unrecognized argument: --bogus. Run 'inferscope compare --help' for the usage.",
        ),
        (
            ["analyze", "x", "--bogus", "y"],
            "inferscope analyze: unrecognized arguments: --bogus y. Run 'inferscope analyze --help'",
        ),
        (
            ["config", "show", "--bogus"],
            "inferscope config show: unrecognized argument: --bogus. Run 'inferscope config show --help'",
        ),
    ]
    for argv, message in cases:
        err = usage_error(argv, capsys)
        assert err.startswith(message), err
    assert not (work / "ran").exists()


def test_compare_says_a_negative_allowed_slowdown_is_not_one(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for given in (["--max-regression", "-5%"], ["--max-regression=-5%"], ["--max-regression", "-0.05"]):
        err = usage_error(["compare", "a", "b", *given], capsys)
        assert "argument --max-regression: '-" in err and "' is negative: give the slowdown allowed, 0 or more" in err


def test_compare_counts_one_test_in_the_singular(work: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (work / "one.py").write_text("pass\n")
    (work / "two.py").write_text("pass\n")
    assert main(["run", "one.py", "--report", "a"]) == 0 and main(["run", "two.py", "--report", "b"]) == 0
    capsys.readouterr()
    assert "A (a, 1 test) and B (b, 1 test) have no test id in common" in usage_error(["compare", "a", "b"], capsys)


def test_config_show_says_a_bad_option_value_in_one_paragraph(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # pytest itself rejects a bad --inferscope-* value while it parses its command line, and printed it as
    # "ERROR: ..." and a blank line; config show says it as its other errors are said.
    err = usage_error(["config", "show", "--inferscope-rounds=abc"], capsys)
    assert err.startswith("--inferscope-rounds='abc' is not a whole number: give the number of measured rounds"), err
    monkeypatch.setenv("PYTEST_ADDOPTS", "--inferscope-cpu=bogus")
    err = usage_error(["config", "show"], capsys)
    assert err.startswith("--inferscope-cpu='bogus' is not one of the choices: set the CPU collector mode"), err
    monkeypatch.setenv("PYTEST_ADDOPTS", "--bogus")  # pytest's own parser: a usage line and the error
    err = usage_error(["config", "show"], capsys)
    assert err.startswith("inferscope config show: pytest: unrecognized arguments: --bogus"), err
    assert "usage:" not in err and "PYTEST_ADDOPTS or the ini file's addopts" in err, err
    monkeypatch.setenv("FORCE_COLOR", "1")  # pytest's red is not kept in a paragraph that is ours
    monkeypatch.setenv("PYTEST_ADDOPTS", "--inferscope-rounds=0")
    err = usage_error(["config", "show"], capsys)
    assert err.startswith("--inferscope-rounds='0' is out of range") and "\x1b" not in err, err
