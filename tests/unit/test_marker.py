"""One parser per setting: the marker, the options (command line, ini, env, file) and `inferscope compare` agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_inferscope.cli import main
from pytest_inferscope.config import ConfigError, resolve
from pytest_inferscope.marker import MARKER_KEYS, marker_help, parse_marker, validate_marker
from pytest_inferscope.options import OPTIONS_BY_NAME

NODE = "t.py::test_a"


@pytest.mark.parametrize(("key", "value"), [("max_regression", "5%"), ("rounds", 10**7), ("max_gpu_idle", "20%")])
def test_the_marker_takes_what_the_option_takes(key: str, value: object, tmp_path: Path) -> None:
    assert validate_marker(NODE, (), {key: value}) == []
    if key in OPTIONS_BY_NAME:
        typed = resolve(cli={key: value}, ini={}, env={}, rootdir=tmp_path)
        assert parse_marker({key: value})[key] == getattr(typed, key)


def test_marker_values_are_typed_by_the_options_parsers() -> None:
    assert parse_marker({"max_regression": "5%", "rounds": "3", "cpu": "OFF"}) == pytest.approx(
        {"max_regression": 0.05, "rounds": 3, "cpu": "off"}
    )


@pytest.mark.parametrize("where", ["option", "marker", "compare"])
def test_a_bare_regression_above_1_is_ambiguous_everywhere(
    where: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if where == "option":
        with pytest.raises(ConfigError, match=r"'2' is ambiguous: write 2% for a percentage"):
            resolve(cli={"max_regression": "2"}, ini={}, env={}, rootdir=tmp_path)
    elif where == "marker":
        (problem,) = validate_marker(NODE, (), {"max_regression": 2})
        assert "max_regression" in problem and "2 is ambiguous: write 2% for a percentage" in problem
    else:
        assert main(["compare", str(tmp_path), str(tmp_path), "--max-regression", "2"]) == 2
        assert "'2' is ambiguous: write 2% for a percentage" in capsys.readouterr().err
    assert OPTIONS_BY_NAME["max_regression"].parse("200%") == 2.0  # a percentage says what it means


def test_compare_takes_what_the_option_takes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # 1000% is the option's upper bound; beyond it both refuse with the same reason
    assert main(["compare", str(tmp_path), str(tmp_path), "--max-regression", "1001%"]) == 2
    assert "'1001%' is out of range" in capsys.readouterr().err


def test_the_markers_line_lists_every_key(pytester: pytest.Pytester) -> None:
    assert all(key in marker_help() for key in MARKER_KEYS)
    result = pytester.runpytest("--markers")
    line = next(x for x in result.outlines if x.startswith("@pytest.mark.inferscope"))
    assert all(key in line for key in MARKER_KEYS), line


def test_a_tests_plan_is_frozen_once_made() -> None:
    import dataclasses

    from pytest_inferscope.checks import Plan

    plan = Plan(NODE, rounds=3, thresholds=parse_marker({"max_regression": "5%"}))
    with pytest.raises(dataclasses.FrozenInstanceError):
        plan.rounds = 4  # type: ignore[misc]
    assert plan.thresholds == {"max_regression": 0.05}


def test_a_percentage_above_100_on_pytests_command_line_is_parsed_once(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--inferscope-show-config", "--inferscope-max-regression=500%")
    assert result.ret == 0, result.stderr.str()
    result.stdout.re_match_lines([r"max_regression +5\.0 +cli --inferscope-max-regression$"])


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("rounds", None, "None is not an integer >= 1; leave rounds out for its default"),
        ("warmup", None, "None is not an integer >= 0; leave warmup out for its default"),
        ("cpu", None, "None is not one of 'sample', 'trace', 'off'; leave cpu out for its default"),
        ("rounds", "3", "'3' is a string, not a number: write rounds=3, without quotes"),
        ("max_latency_ms", "50", "'50' is a string, not a number: write max_latency_ms=50.0, without quotes"),
        ("max_regression", "0.05", "'0.05' is a string, not a number: write max_regression=0.05, without quotes"),
        ("max_latency_ms", float("inf"), "inf is not a finite number: give a number > 0"),
        ("max_host_memory_mb", 1e400, "inf is not a finite number: give a number > 0"),
    ],
)
def test_a_marker_takes_python_values_not_none_or_text_for_a_number(key: str, value: object, reason: str) -> None:
    """The options read text and a config file's None ("not set"); the marker takes what Python code writes."""
    (problem,) = validate_marker(NODE, (), {key: value})
    assert problem.startswith(f"{NODE}: @pytest.mark.inferscope({key}=...): {reason} (")


@pytest.mark.parametrize(("key", "value"), [("max_regression", "5%"), ("trace_rounds", "all"), ("cpu", "off")])
def test_a_marker_takes_a_string_where_the_key_takes_one(key: str, value: str) -> None:
    assert validate_marker(NODE, (), {key: value}) == []


def test_rounds_none_in_a_marker_is_a_usage_error_not_an_internal_error(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.parametrize("x", [1, pytest.param(2, marks=pytest.mark.inferscope(rounds=None))])
        def test_p(x):
            pass
        """
    )
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*test_p?2?: @pytest.mark.inferscope(rounds=...): None is not an integer >= 1;*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()
