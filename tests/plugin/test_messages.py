"""Help and messages as a newcomer meets them: `pytest --help`, a run that profiled nothing, a blind gate."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_inferscope.options import OPTIONS


def _help_of(text: str, flag: str) -> str:
    """One option's help paragraph in `pytest --help`, joined onto one line."""
    start = text.index(f"  {flag}")
    rest = text[start + len(flag) + 2 :]
    end = re.search(r"\n  --", rest)
    return " ".join((rest[: end.start()] if end else rest).split())


def test_help_says_what_each_flag_does_and_its_default_in_its_own_sense(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--help")
    text = result.stdout.str()
    disable = _help_of(text, "--inferscope-disable")
    assert "Default: true" not in disable
    assert "Switch profiling off" in disable and "Default: profiling on" in disable
    assert "Default: off (only marked tests and tests using the fixture" in _help_of(text, "--inferscope-all")
    assert "Default: 5 for a marked test, 1 for an unmarked one" in _help_of(text, "--inferscope-rounds=N")
    assert "Default: no reports" in _help_of(text, "--inferscope-report=DIR")
    for spec in OPTIONS:  # every option is there, with a default and its env and ini names
        assert spec.flag in text
    assert text.count("Default: ") >= len(OPTIONS)


@pytest.mark.parametrize(
    "args",
    [["--inferscope-report=out"], ["--inferscope-save-baseline=main"]],
    ids=["report", "save-baseline"],
)
def test_a_run_that_profiled_nothing_says_how_to_profile_a_test(pytester: pytest.Pytester, args: list[str]) -> None:
    pytester.makepyfile("def test_plain():\n    assert True\n")
    result = pytester.runpytest(*args)
    result.stdout.fnmatch_lines(
        [
            "*= inferscope =*",
            f"inferscope: no test was profiled, so {args[0]} had nothing to work on. Profile a test by marking it "
            "@pytest.mark.inferscope*inferscope fixture*--inferscope-all*",
        ]
    )
    assert not (pytester.path / "out" / "index.md").exists()
    quiet = pytester.runpytest()  # nothing asked for: nothing said
    assert "no test was profiled" not in quiet.stdout.str()


def test_a_run_whose_marked_tests_could_not_be_collected_says_so_not_how_to_mark_one(pytester: pytest.Pytester) -> None:
    """A module that fails to import (here pytest 9 refusing a generator test beside a marked one) stops the run before
    any test: the line told the user to mark a test they had marked, and said nothing of the error above it."""
    pytester.makepyfile(
        test_broken="""
        import pytest

        @pytest.mark.inferscope(rounds=2, warmup=0)
        def test_marked():
            pass

        def test_generator():
            yield 1
        """
    )
    result = pytester.runpytest("--inferscope-report=out")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        [
            "*= inferscope =*",
            "inferscope: no test was profiled, so --inferscope-report=out had nothing to work on: pytest could not "
            "collect 1 file (the error above), so the tests in it did not run, marked or not. Fix the error, or pass "
            "--continue-on-collection-errors to run the tests pytest did collect.",
        ]
    )
    assert "Profile a test by marking it" not in result.stdout.str()
    pytest.importorskip("xdist")
    spread = pytester.runpytest("--inferscope-report=out", "-n", "2")  # each worker collects it: still 1 file
    spread.stdout.fnmatch_lines(
        ["inferscope: no test was profiled, *: pytest could not collect 1 file (the error above)*"]
    )


def test_a_run_that_profiled_nothing_says_why_when_marking_a_test_is_not_the_answer(pytester: pytest.Pytester) -> None:
    """The line told a run under --inferscope-all whose tests were doctests to "pass --inferscope-all", and a run whose
    -k deselected the marked test to mark a test. It now says what it was: doctests run unprofiled; no test ran."""
    pytester.makepyfile(
        mod='''
        def f():
            """
            >>> 1 + 1
            2
            """
        ''',
        test_marked="""
        import pytest

        @pytest.mark.inferscope(rounds=2, warmup=0)
        def test_marked():
            pass
        """,
    )
    doctests = pytester.runpytest("mod.py", "--doctest-modules", "--inferscope-all", "--inferscope-report=out")
    doctests.assert_outcomes(passed=1)
    doctests.stdout.fnmatch_lines(
        [
            "inferscope: no test was profiled, so --inferscope-report=out had nothing to work on: --inferscope-all "
            "profiles test functions and unittest.TestCase methods, and the 1 test that ran was neither (a doctest, or "
            "another plugin's item), which runs unprofiled.",
        ]
    )
    assert "or pass --inferscope-all" not in doctests.stdout.str()
    deselected = pytester.runpytest("test_marked.py", "-k", "nothing_matches", "--inferscope-report=out")
    deselected.stdout.fnmatch_lines(
        [
            "inferscope: no test was profiled, so --inferscope-report=out had nothing to work on: no test ran (1 "
            "deselected by -k or -m).",
        ]
    )
    pytest.importorskip("xdist")
    spread = pytester.runpytest("test_marked.py", "-k", "nothing_matches", "--inferscope-report=out", "-n", "2")
    spread.stdout.fnmatch_lines(["inferscope: no test was profiled, * to work on: no test ran*"])  # xdist: no count


def test_a_gate_that_can_never_fire_is_said_once_per_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.inferscope(max_regression=0.05, rounds=2, warmup=0)
        def test_few():
            sum(range(1000))

        @pytest.mark.inferscope(rounds=2, warmup=0)
        def test_ungated():
            sum(range(1000))
        """
    )
    result = pytester.runpytest("-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["inferscope: test_a_gate*.py::test_few: Too few rounds: with 2 rounds per side*"])
    assert result.stdout.str().count("Too few rounds") == 1  # test_ungated has no gate: nothing to say
    # Saving turns the speed probe on, which adds rounds at busy moments (a loaded CI machine): no extra rounds here.
    saving = pytester.runpytest("-p", "no:randomly", "--inferscope-save-baseline=main", "--inferscope-round-cap=1")
    assert saving.stdout.str().count("Too few rounds") == 2  # saved rounds are gated on later


def test_rounds_too_short_for_the_clock_are_said_once_per_gated_test(pytester: pytest.Pytester) -> None:
    # Linux's perf_counter ticks in ns, too fine for a round through the plugin to be "too short"; a
    # conftest gives the run a coarse clock (1 ms), as some platforms' timers are, to reach the line. In a
    # process of its own, so the patched clock cannot leak into the tests that run after this one.
    pytester.makeconftest(
        """
        import types
        import pytest_inferscope.stats as stats

        class _Time:
            def __getattr__(self, name):
                return getattr(stats_time, name)

            @staticmethod
            def get_clock_info(name):
                return types.SimpleNamespace(resolution=1e-3)

        stats_time = stats.time
        stats.time = _Time()
        """
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.inferscope(max_regression=0.05, rounds=30, warmup=0)
        def test_short():
            pass

        @pytest.mark.inferscope(rounds=30, warmup=0)
        def test_ungated():
            pass
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["inferscope: test_rounds_too_short*.py::test_short: Rounds too short: the shortest *"])
    assert result.stdout.str().count("Rounds too short") == 1  # test_ungated has no gate: nothing to say
    assert "Too few rounds" not in result.stdout.str()  # 30 rounds are enough at alpha 0.01


def test_a_marked_async_test_no_plugin_awaits_gets_pytests_own_failure_and_no_report(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_a="""
import asyncio, pytest

@pytest.mark.inferscope(rounds=3)
async def test_async_model():
    await asyncio.sleep(0)
"""
    )
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:anyio", "-p", "no:asyncio", "--inferscope-report=out")
    # pytest's own outcome for it: a failure from pytest 8.4, a skip and a warning before (the README's floor is 8.0)
    if pytest.version_tuple[:2] >= (8, 4):
        result.assert_outcomes(failed=1)
    else:
        result.assert_outcomes(skipped=1, warnings=1)
    out = result.stdout.str()
    assert "async def functions are not natively supported" in out
    assert not (pytester.path / "out").exists() or not list((pytester.path / "out").glob("test_a.py__*"))


@pytest.mark.parametrize(
    ("addopts", "says"),
    [
        ("-q --inferscope-rounds=abc", "--inferscope-rounds='abc' is not a whole number: "),
        ("--inferscope-gpu maybe", "--inferscope-gpu='maybe' is not one of the choices: "),
    ],
)
def test_a_bad_value_from_pytest_addopts_says_it_came_from_there(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, addopts: str, says: str
) -> None:
    # It named the flag only: a user who typed no such flag (it sits in a CI job's or a shell's PYTEST_ADDOPTS) could
    # not tell where it came from. pytest says "config source: via PYTEST_ADDOPTS" for its own options.
    pytester.makepyfile("def test_plain():\n    pass\n")
    monkeypatch.setenv("PYTEST_ADDOPTS", addopts)
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = " ".join(result.stderr.str().split())
    given = addopts.removeprefix("-q ")
    assert says in err and err.endswith(
        f"It was given in the environment variable PYTEST_ADDOPTS ({given!r}), not on the command line: correct it "
        "there, or unset PYTEST_ADDOPTS."
    ), err


def test_a_bad_value_on_the_command_line_does_not_blame_pytest_addopts(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytester.makepyfile("def test_plain():\n    pass\n")
    monkeypatch.setenv("PYTEST_ADDOPTS", "--inferscope-rounds=3")
    result = pytester.runpytest_subprocess("--inferscope-rounds=abc")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = " ".join(result.stderr.str().split())
    assert "--inferscope-rounds='abc' is not a whole number" in err and "PYTEST_ADDOPTS" not in err, err


def test_the_errors_quoted_in_the_configuration_page_are_pytests_stderr(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    # docs/configuration.md quoted the marker's error as one line; pytest shows a line naming the marker's arguments,
    # then one indented line per test.
    doc = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text(encoding="utf-8")
    errors = doc.split("\n## Errors\n", 1)[1].split("\n## ", 1)[0]
    quoted = [
        line
        for block in errors.split("<!-- not-run: an error message, not a command -->\n```\n")[1:]
        for line in block.split("```", 1)[0].splitlines()
    ]
    made: list[str] = []

    def stderr(*args: str) -> list[str]:
        # (pytest-benchmark, where installed, warns on stderr in a subprocess of an xdist worker)
        plugins = ("-p", "no:randomly", "-p", "no:cacheprovider", "-p", "no:benchmark")
        result = pytester.runpytest_subprocess(*plugins, *args)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        return [line.removeprefix("ERROR: ") for line in result.errlines if line.strip()]

    with monkeypatch.context() as env:
        env.setenv("INFERSCOPE_TRACE_SIZE_MB", "abc")
        made += stderr()
    (pytester.path / ".inferscope.yaml").write_text("rounds: 3\ntrace-size: 5\n")
    made += [line.replace(str(pytester.path), "/repo") for line in stderr()]
    (pytester.path / ".inferscope.yaml").unlink()
    (pytester.path / "tests").mkdir()
    (pytester.path / "tests" / "test_model.py").write_text(
        "import pytest\n\n@pytest.mark.inferscope(max_latency=5)\ndef test_forward():\n    pass\n"
    )
    made += stderr("tests/test_model.py")
    with monkeypatch.context() as env:
        env.setenv("PYTEST_ADDOPTS", "--inferscope-rounds=abc")
        made += stderr()
    assert len(quoted) == len(made), (quoted, made)
    for line, real in zip(quoted, made, strict=True):
        assert real.startswith(line.removesuffix("...").rstrip()), (line, real)


@pytest.mark.parametrize(
    ("where", "source"),
    [("env", "env INFERSCOPE_REPORT"), ("ini", "ini inferscope_report"), ("file", "file *.inferscope.yaml:1")],
)
def test_a_report_folder_that_is_a_file_says_where_the_folder_was_set(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, where: str, source: str
) -> None:
    # The error named the folder and told to pass --inferscope-report=DIR, but not that INFERSCOPE_REPORT (or the ini
    # file, or the config file) had given it: a user who typed no such flag could not tell where to correct it.
    pytester.makepyfile("import pytest\n\n@pytest.mark.inferscope(rounds=1, warmup=0)\ndef test_a():\n    pass\n")
    (pytester.path / "afile").write_text("mine\n")
    monkeypatch.delenv("INFERSCOPE_REPORT", raising=False)
    if where == "env":
        monkeypatch.setenv("INFERSCOPE_REPORT", "afile")
    elif where == "ini":
        pytester.makeini("[pytest]\ninferscope_report = afile\n")
    else:
        (pytester.path / ".inferscope.yaml").write_text("report: afile\n")
    result = pytester.runpytest_subprocess()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*The inferscope report directory '*afile' (from {source}) exists but is a file*"])
    assert (pytester.path / "afile").read_text() == "mine\n"


@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["header", "quiet"])
def test_a_forced_gpu_backend_that_cannot_run_is_a_usage_error_before_any_test(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, quiet: list[str]
) -> None:
    # The report header chose the backend and raised: an INTERNALERROR traceback; with -q (no header) every profiled
    # test failed on a traceback through the plugin's session and select_backend. --inferscope-gpu=required said it
    # as one usage error already.
    pytester.makepyfile("import pytest\n\n@pytest.mark.inferscope(rounds=1, warmup=0)\ndef test_a():\n    pass\n")
    monkeypatch.setenv("INFERSCOPE_COLLECTOR", "bogus")
    result = pytester.runpytest_subprocess(*quiet)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
    said = (
        "ERROR: INFERSCOPE_COLLECTOR='bogus' is not a GPU backend: set it to native or cupti-python to force that one, "
        "or unset it to let inferscope choose (native, else cupti-python, else CPU-only collection)."
    )
    assert said in result.stderr.lines, result.stderr.str()


def test_a_bad_ini_value_given_with_dash_o_is_said_as_given_not_blamed_on_the_ini_file(
    pytester: pytest.Pytester,
) -> None:
    # `-o inferscope_rounds=abc` read "pyproject.toml: pytest ini option inferscope_rounds = 'abc' ...", where the file
    # said 7: the user looked for the 'abc' in a file that did not hold it.
    pytester.makepyfile("def test_plain():\n    pass\n")
    pytester.makepyprojecttoml('[tool.pytest.ini_options]\ninferscope_rounds = "7"\n')
    result = pytester.runpytest_subprocess("-o", "inferscope_rounds=abc")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = " ".join(result.stderr.str().split())
    assert "ERROR: -o inferscope_rounds='abc' is not a whole number: " in err, err
    assert err.endswith("e.g. -o inferscope_rounds=20.") and "pyproject.toml" not in err, err
    shown = pytester.runpytest_subprocess("-o", "inferscope_rounds=4", "--inferscope-show-config")
    shown.stdout.fnmatch_lines(["rounds * 4 * ini inferscope_rounds (from -o)"])
