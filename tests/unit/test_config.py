"""Tests for pytest_inferscope.config: the option table, layer precedence, error messages, pytest glue."""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path
from typing import Any

import pytest

from pytest_inferscope.config import (
    OPTIONS,
    OPTIONS_BY_NAME,
    ConfigError,
    Settings,
    default_settings,
    describe,
    resolve,
)


def run(
    rootdir: Path,
    *,
    cli: dict[str, Any] | None = None,
    ini: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
) -> Settings:
    return resolve(cli=cli or {}, ini=ini or {}, env=env or {}, rootdir=rootdir)


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def error(rootdir: Path, **layers: Any) -> str:
    with pytest.raises(ConfigError) as info:
        run(rootdir, **layers)
    message = str(info.value)
    assert "\n" not in message, "a ConfigError is one paragraph"
    return message


# --- the table ---


def test_settings_has_one_field_per_option() -> None:
    names = [f.name for f in dataclasses.fields(Settings) if f.name != "sources"]
    assert names == [spec.name for spec in OPTIONS]


def test_names_are_derived_from_the_option_name() -> None:
    spec = OPTIONS_BY_NAME["trace_size_mb"]
    assert (spec.flag, spec.env, spec.ini, spec.dest) == (
        "--inferscope-trace-size-mb",
        "INFERSCOPE_TRACE_SIZE_MB",
        "inferscope_trace_size_mb",
        "inferscope_trace_size_mb",
    )
    enable = OPTIONS_BY_NAME["enable"]
    assert (enable.flag, enable.action, enable.env) == ("--inferscope-disable", "store_false", "INFERSCOPE_ENABLE")


@pytest.mark.parametrize("spec", OPTIONS, ids=lambda spec: spec.name)
def test_default_and_example_are_valid(spec: Any) -> None:
    assert spec.parse(spec.default) == spec.default
    spec.parse(spec.example)  # raises if an error message would suggest an invalid value
    for option in spec.choices or ():
        assert spec.parse(option) == option  # help, docs and the parser agree on the choices


def test_defaults(tmp_path: Path) -> None:
    settings = run(tmp_path)
    assert settings == default_settings()
    assert (settings.enable, settings.gpu, settings.trace_size_mb, settings.rounds) == (True, "auto", 100.0, None)
    assert set(settings.sources.values()) == {"default"}


def test_settings_are_frozen_and_pickle(tmp_path: Path) -> None:
    settings = run(tmp_path, env={"INFERSCOPE_GPU": "off"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.gpu = "auto"  # type: ignore[misc]  # the point is that assignment fails
    with pytest.raises(TypeError):
        settings.sources["gpu"] = "x"  # type: ignore[index]  # the point is that sources are read-only
    copy = pickle.loads(pickle.dumps(settings))
    assert copy == settings and copy.sources["gpu"] == "env INFERSCOPE_GPU"
    assert hash(copy) == hash(settings)


# --- precedence: one test per adjacent pair of layers, value AND source ---


def test_cli_beats_env(tmp_path: Path) -> None:
    settings = run(tmp_path, cli={"rounds": 5}, env={"INFERSCOPE_ROUNDS": "7"})
    assert (settings.rounds, settings.sources["rounds"]) == (5, "cli --inferscope-rounds")


def test_env_beats_ini(tmp_path: Path) -> None:
    settings = run(tmp_path, env={"INFERSCOPE_GPU": "required"}, ini={"gpu": "off"})
    assert (settings.gpu, settings.sources["gpu"]) == ("required", "env INFERSCOPE_GPU")


def test_ini_beats_config_file(tmp_path: Path) -> None:
    write(tmp_path / ".inferscope.yaml", "rounds: 3\n")
    settings = run(tmp_path, ini={"rounds": "9"})
    assert (settings.rounds, settings.sources["rounds"]) == (9, "ini inferscope_rounds")


def test_config_file_beats_default(tmp_path: Path) -> None:
    path = write(tmp_path / ".inferscope.yaml", "# tuned for CI\n\ntrace_size_mb: 250\n")
    settings = run(tmp_path)
    assert (settings.trace_size_mb, settings.sources["trace_size_mb"]) == (250.0, f"file {path}:3")
    assert settings.sources["rounds"] == "default"


def test_not_given_values_fall_through(tmp_path: Path) -> None:
    settings = run(tmp_path, cli={"rounds": None}, ini={"rounds": ""}, env={"INFERSCOPE_ROUNDS": ""})
    assert (settings.rounds, settings.sources["rounds"]) == (None, "default")


def test_store_false_flag_and_source(tmp_path: Path) -> None:
    settings = run(tmp_path, cli={"enable": False}, env={"INFERSCOPE_ENABLE": "yes"})
    assert (settings.enable, settings.sources["enable"]) == (False, "cli --inferscope-disable")


BOOLEANS = {"1": True, "0": False, "true": True, "False": False, "yes": True, "NO": False, "on": True, "off": False}


@pytest.mark.parametrize(("text", "expected"), BOOLEANS.items())
def test_booleans_from_env(tmp_path: Path, text: str, expected: bool) -> None:
    settings = run(tmp_path, env={"INFERSCOPE_ALL": text})
    assert settings.all is expected
    assert settings.sources["all"] == "env INFERSCOPE_ALL"


def test_a_bad_lower_layer_is_reported_even_when_hidden(tmp_path: Path) -> None:
    write(tmp_path / ".inferscope.yaml", "rounds: 0\n")
    assert "rounds: 0 is out of range" in error(tmp_path, cli={"rounds": 4})


# --- the config file ---


def test_yaml_keys_accept_dashes_and_yaml_off_is_a_choice(tmp_path: Path) -> None:
    write(tmp_path / ".inferscope.yml", "sample-interval-ms: 2.5\ngpu: off\ncpu: trace\nrounds: null\n")
    settings = run(tmp_path)
    assert (settings.sample_interval_ms, settings.gpu, settings.cpu, settings.rounds) == (2.5, "off", "trace", None)


def test_relative_paths_from_files_are_under_rootdir(tmp_path: Path) -> None:
    write(tmp_path / ".inferscope.yaml", "report: out/reports\n")
    settings = run(tmp_path, env={"INFERSCOPE_TRACE_SPILL": "spill"})
    assert settings.report == tmp_path / "out" / "reports"
    assert settings.trace_spill == Path("spill")  # typed by the user in the working directory


def test_empty_yaml_file_is_no_settings(tmp_path: Path) -> None:
    write(tmp_path / ".inferscope.yaml", "# nothing yet\n")
    assert run(tmp_path) == default_settings()


def test_pyproject_table(tmp_path: Path) -> None:
    path = write(
        tmp_path / "pyproject.toml",
        '[project]\nname = "x"\n\n[tool.inferscope]\nrounds = 12\n"latency-stat" = "p99"\n\n'
        "[tool.ruff]\nline-length = 1\n",
    )
    settings = run(tmp_path)
    assert (settings.rounds, settings.sources["rounds"]) == (12, f"file {path}:5")
    assert (settings.latency_stat, settings.sources["latency_stat"]) == ("p99", f"file {path}:6")


def test_pyproject_dotted_keys_under_tool(tmp_path: Path) -> None:
    path = write(tmp_path / "pyproject.toml", "[tool]\ninferscope.warmup = 2\n")
    settings = run(tmp_path)
    assert (settings.warmup, settings.sources["warmup"]) == (2, f"file {path}:2")


def test_pyproject_without_our_table_is_ignored(tmp_path: Path) -> None:
    write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n')
    assert run(tmp_path) == default_settings()


def test_yaml_wins_over_pyproject(tmp_path: Path) -> None:
    path = write(tmp_path / ".inferscope.yaml", "rounds: 4\n")
    write(tmp_path / "pyproject.toml", "[tool.inferscope]\nrounds = 40\nwarmup = 2\n")
    settings = run(tmp_path)
    assert (settings.rounds, settings.sources["rounds"]) == (4, f"file {path}:1")
    assert settings.warmup is None  # pyproject is not read at all when a YAML file exists


def test_a_config_file_is_parsed_again_only_when_it_changed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # measure() resolves its settings at every call; a long pyproject.toml is parsed once, and read again when a
    # config file in the folder is changed, created or deleted.
    from pytest_inferscope import config

    parsed: list[Path] = []
    real = config._toml_entries
    monkeypatch.setattr(config, "_toml_entries", lambda path: parsed.append(path) or real(path))
    path = write(tmp_path / "pyproject.toml", "[tool.inferscope]\nrounds = 12\n")
    assert run(tmp_path).rounds == run(tmp_path).rounds == 12 and len(parsed) == 1
    write(path, "[tool.inferscope]\nrounds = 7\n")  # the same size: told apart by its time and contents
    assert run(tmp_path).rounds == 7 and len(parsed) == 2
    write(path, "[tool.inferscope]\nrounds = 30\nwarmup = 3\n")
    assert (run(tmp_path).rounds, run(tmp_path).warmup) == (30, 3) and len(parsed) == 3
    yaml = write(tmp_path / ".inferscope.yaml", "rounds: 4\n")
    assert run(tmp_path).rounds == 4
    yaml.unlink()
    assert run(tmp_path).rounds == 30 and len(parsed) == 4
    write(path, "[tool.inferscope]\nrounds = 'many'\n")  # read once, and the value refused at every call
    assert "not a whole number" in error(tmp_path) and "not a whole number" in error(tmp_path) and len(parsed) == 5
    write(path, "[tool.inferscope]\nrounds = \n")  # a file that cannot be read is not kept: raised at every call
    assert "not valid TOML" in error(tmp_path) and "not valid TOML" in error(tmp_path) and len(parsed) == 7


def test_measures_settings_are_resolved_again_only_when_what_they_come_from_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # measure() asks for its settings at every call: the last ones are kept while the working directory, the
    # INFERSCOPE_* variables and the config files there are as they were.
    from pytest_inferscope import api, config

    resolved: list[Path] = []
    real = config.resolve
    monkeypatch.setattr(api, "resolve", lambda **kw: resolved.append(kw["rootdir"]) or real(**kw))
    monkeypatch.delenv("INFERSCOPE_ROUNDS", raising=False)
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path / "pyproject.toml", "[tool.inferscope]\nrounds = 12\n")
    first = api.standalone_settings()
    assert api.standalone_settings() is first and first.rounds == 12 and len(resolved) == 1
    monkeypatch.setenv("INFERSCOPE_ROUNDS", "5")
    assert api.standalone_settings().rounds == 5 and len(resolved) == 2
    monkeypatch.delenv("INFERSCOPE_ROUNDS")
    write(path, "[tool.inferscope]\nrounds = 30\nwarmup = 3\n")
    assert api.standalone_settings().rounds == 30 and len(resolved) == 3
    other = tmp_path / "other"
    other.mkdir()
    monkeypatch.chdir(other)
    assert api.standalone_settings().rounds is None and len(resolved) == 4
    write(other / "pyproject.toml", "[tool.inferscope]\nrounds = 'many'\n")  # refused at every call, never kept
    for _ in range(2):
        with pytest.raises(ConfigError, match="not a whole number"):
            api.standalone_settings()
    assert len(resolved) == 6


def test_both_yaml_spellings_is_an_error(tmp_path: Path) -> None:
    write(tmp_path / ".inferscope.yaml", "rounds: 4\n")
    write(tmp_path / ".inferscope.yml", "rounds: 5\n")
    message = error(tmp_path)
    assert ".inferscope.yaml and .inferscope.yml" in message and "delete the other" in message


# --- errors: each names the input, where it is, the value and what is valid ---


def test_env_not_a_number(tmp_path: Path) -> None:
    assert error(tmp_path, env={"INFERSCOPE_TRACE_SIZE_MB": "abc"}) == (
        "INFERSCOPE_TRACE_SIZE_MB='abc' is not a number: give the trace buffer size in megabytes, "
        "more than 0 and at most 65536, e.g. INFERSCOPE_TRACE_SIZE_MB=200."
    )


def test_env_bad_boolean(tmp_path: Path) -> None:
    message = error(tmp_path, env={"INFERSCOPE_ENABLE": "maybe"})
    assert message.startswith("INFERSCOPE_ENABLE='maybe' is not a yes/no value: use 1/0, true/false")


def test_ini_bad_value(tmp_path: Path) -> None:
    assert error(tmp_path, ini={"sample_interval_ms": "0.01"}) == (
        "pytest ini option inferscope_sample_interval_ms = '0.01' is out of range: give the sampling interval "
        "in milliseconds, from 0.1 to 1000, e.g. inferscope_sample_interval_ms = 5."
    )


def test_cli_bad_value(tmp_path: Path) -> None:
    message = error(tmp_path, cli={"gpu": "maybe"})
    assert message == (
        "--inferscope-gpu='maybe' is not one of the choices: set the GPU collection mode to auto, off or required, "
        "e.g. --inferscope-gpu=required."
    )


def test_yaml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / ".inferscope.yaml", "rounds: 3\ngpu: [auto\ncpu: trace\n")
    message = error(tmp_path)
    assert message.startswith(f"{path}:3:")
    assert "not valid YAML" in message and "starts at line 2" in message  # where the bracket was opened


def test_yaml_unknown_key_suggests_the_closest(tmp_path: Path) -> None:
    path = write(tmp_path / ".inferscope.yaml", "rounds: 3\n\ntrace-size: 200\n")
    message = error(tmp_path)
    assert message.startswith(f"{path}:3: unknown setting 'trace-size'")
    assert "did you mean 'trace_size_mb'?" in message


def test_unknown_key_with_nothing_close_lists_the_settings(tmp_path: Path) -> None:
    write(tmp_path / ".inferscope.yaml", "zzz: 1\n")
    message = error(tmp_path)
    assert "did you mean" not in message and "enable, report, all, rounds" in message


def test_yaml_bad_value_names_file_line_key_value_and_choices(tmp_path: Path) -> None:
    path = write(tmp_path / ".inferscope.yaml", "rounds: 3\nwarmup: 1\nlatency_stat: p95\n")
    assert error(tmp_path) == (
        f"{path}:3: latency_stat: 'p95' is not one of the choices: set the latency statistic to "
        "median, mean, p90, p99, min or max, e.g. latency_stat: p90."
    )


def test_yaml_bool_is_not_a_number(tmp_path: Path) -> None:
    path = write(tmp_path / ".inferscope.yaml", "rounds: yes\n")
    assert error(tmp_path).startswith(f"{path}:1: rounds: True is not a whole number: give the number of measured")


def test_yaml_duplicate_spellings(tmp_path: Path) -> None:
    path = write(tmp_path / ".inferscope.yaml", "trace_size_mb: 1\ntrace-size-mb: 2\n")
    assert error(tmp_path) == f"{path}:2: setting 'trace-size-mb' is given twice ({path}:1); keep one."


@pytest.mark.parametrize(("text", "kind"), [("- rounds: 3\n", "a list"), ("rounds\n", "the single value 'rounds'")])
def test_yaml_top_level_not_a_mapping(tmp_path: Path, text: str, kind: str) -> None:
    path = write(tmp_path / ".inferscope.yaml", text)
    message = error(tmp_path)
    assert message.startswith(f"{path}: the inferscope config file must map setting names to values")
    assert message.endswith(f"but its top level is {kind}.")


def test_toml_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    path = write(tmp_path / "pyproject.toml", "[tool.inferscope]\nrounds = 3\ngpu = \n")
    message = error(tmp_path)
    assert message.startswith(f"{path}:3:7: pyproject.toml is not valid TOML (")
    assert "(at line" not in message


def test_toml_unknown_key_line_and_closest(tmp_path: Path) -> None:
    text = "[tool.black]\nwarmup = 1\n\n[tool.inferscope]\nrounds = 3\nwarmup = 1\nwarm_up = 2\n"
    path = write(tmp_path / "pyproject.toml", text)
    message = error(tmp_path)
    assert message.startswith(f"{path}:7: unknown setting 'warm_up'")
    assert "did you mean 'warmup'?" in message


def test_toml_bad_value_quotes_string_examples(tmp_path: Path) -> None:
    path = write(tmp_path / "pyproject.toml", '[tool.inferscope]\ncpu = "fast"\n')
    assert error(tmp_path) == (
        f"{path}:2: cpu = 'fast' is not one of the choices: set the CPU collector mode to sample, trace or off, "
        'e.g. cpu = "trace".'
    )


def test_toml_table_not_a_table(tmp_path: Path) -> None:
    path = write(tmp_path / "pyproject.toml", "[tool]\ninferscope = 3\n")
    message = error(tmp_path)
    assert message.startswith(f"{path}:2: tool.inferscope must be a table of settings")
    assert message.endswith("but it is 3.")


# --- describe ---


def test_describe(tmp_path: Path) -> None:
    write(tmp_path / ".inferscope.yaml", "report: out\n")
    rows = describe(run(tmp_path, cli={"all": True}, env={"INFERSCOPE_TRACE_SIZE_MB": "64"}))
    assert [row[0] for row in rows] == [spec.name for spec in OPTIONS]
    by_name = {name: (value, source) for name, value, source in rows}
    assert by_name["all"] == ("true", "cli --inferscope-all")
    assert by_name["trace_size_mb"] == ("64.0", "env INFERSCOPE_TRACE_SIZE_MB")
    assert by_name["report"] == (str(tmp_path / "out"), f"file {tmp_path / '.inferscope.yaml'}:1")
    assert by_name["rounds"] == ("not set", "default")
    assert by_name["gpu"] == ("auto", "default")


def test_to_json_is_plain_data(tmp_path: Path) -> None:
    data = run(tmp_path, cli={"report": Path("out")}).to_json()
    assert data["report"] == "out" and data["sources"]["report"] == "cli --inferscope-report"


# --- pytest glue, through a real pytest run ---

CONFTEST = """
import pytest
from pytest_inferscope.config import add_options, describe, settings_from_pytest

KEY = pytest.StashKey()

def pytest_addoption(parser):
    add_options(parser)

def pytest_configure(config):
    config.stash[KEY] = settings_from_pytest(config)

def pytest_report_header(config):
    return [f"setting {name}={value} from {source}" for name, value, source in describe(config.stash[KEY])]
"""


def run_pytest(project: pytest.Pytester, *args: str) -> pytest.RunResult:
    # The installed plugin (entry point "inferscope") would register the same options a second time.
    return project.runpytest("-p", "no:inferscope", *args)


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for spec in OPTIONS:  # the developer's own INFERSCOPE_* variables must not leak in
        monkeypatch.delenv(spec.env, raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile("def test_ok():\n    pass\n")
    return pytester


def test_pytest_layers_reach_settings(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    project.makeini("[pytest]\ninferscope_rounds = 7\ninferscope_gpu = off\n")
    monkeypatch.setenv("INFERSCOPE_GPU", "required")
    result = run_pytest(project, "--inferscope-disable", "--inferscope-warmup=2")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(
        [
            "setting enable=false from cli --inferscope-disable",
            "setting rounds=7 from ini inferscope_rounds",
            "setting warmup=2 from cli --inferscope-warmup",
            "setting gpu=required from env INFERSCOPE_GPU",
            "setting cpu=sample from default",
        ],
        consecutive=False,
    )


def test_cli_rounds_zero_is_a_usage_error(project: pytest.Pytester) -> None:
    result = run_pytest(project, "--inferscope-rounds=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: --inferscope-rounds='0' is out of range: give the number of measured rounds per test, "
         "a whole number of at least 1, e.g. --inferscope-rounds=20."]
    )  # fmt: skip


def test_cli_gpu_maybe_is_a_usage_error(project: pytest.Pytester) -> None:
    result = run_pytest(project, "--inferscope-gpu=maybe")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: --inferscope-gpu='maybe' is not one of the choices: *auto, off or required*"])


def test_bad_env_and_ini_are_usage_errors(project: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSCOPE_TRACE_SIZE_MB", "abc")
    result = run_pytest(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: INFERSCOPE_TRACE_SIZE_MB='abc' is not a number: *"])
    monkeypatch.delenv("INFERSCOPE_TRACE_SIZE_MB")
    project.makeini("[pytest]\ninferscope_log_level = loud\n")
    result = run_pytest(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: *tox.ini: pytest ini option inferscope_log_level = 'loud' is not one of the *"]
    )


NATIVE_TOML = pytest.mark.skipif(
    pytest.version_tuple[:2] < (9, 2), reason="plain TOML values for plugin ini keys need pytest 9.2's typed ini keys"
)


@NATIVE_TOML
def test_native_toml_ini_values(project: pytest.Pytester) -> None:
    # pytest 9.2 type-checks [tool.pytest] values against each key's registered type: plain TOML values
    # of the setting's own type work, and so do the quoted strings that were the only form before.
    project.makepyprojecttoml(
        "[tool.pytest]\ninferscope_all = true\ninferscope_rounds = 6\ninferscope_max_regression = 0.1\n"
        'inferscope_trace_rounds = "all"\ninferscope_sample_interval_ms = 5\ninferscope_gpus = 1\n'
    )
    result = run_pytest(project)
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "setting all=true from ini inferscope_all",
            "setting rounds=6 from ini inferscope_rounds",
            "setting sample_interval_ms=5.0 from ini inferscope_sample_interval_ms",
            "setting gpus=(1,) from ini inferscope_gpus",
            "setting max_regression=0.1 from ini inferscope_max_regression",
            "setting trace_rounds=all from ini inferscope_trace_rounds",
        ],
        consecutive=False,
    )
    project.makepyprojecttoml('[tool.pytest]\ninferscope_rounds = "6"\ninferscope_all = "yes"\n')
    result = run_pytest(project)
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stdout.fnmatch_lines(["setting all=true from ini inferscope_all", "setting rounds=6 from ini *"])


@NATIVE_TOML
@pytest.mark.parametrize(
    ("toml", "error"),
    [
        # pytest's own type check names the file and key; the plugin adds what the setting takes.
        ("inferscope_rounds = true",
         "ERROR: *pyproject.toml: *'inferscope_rounds'*bool: True. inferscope_rounds: give the number of measured "
         "rounds per test, a whole number of at least 1, e.g. inferscope_rounds = 20; or move the setting to a "
         "?tool.inferscope? table*(rounds = 20)."),
        # A value of the right type goes through the setting's parser, with its message and the file.
        ("inferscope_rounds = 0\ninferscope_all = true",
         "ERROR: *pyproject.toml: pytest ini option inferscope_rounds = 0 is out of range: give the number of "
         "measured rounds per test, a whole number of at least 1, e.g. inferscope_rounds = 20."),
        ('inferscope_gpu = "sometimes"',
         "ERROR: *pyproject.toml: pytest ini option inferscope_gpu = 'sometimes' is not one of the choices: "
         '*auto, off or required, e.g. inferscope_gpu = "required".'),
    ],
)  # fmt: skip
def test_native_toml_ini_value_of_the_wrong_type(project: pytest.Pytester, toml: str, error: str) -> None:
    project.makepyprojecttoml(f"[tool.pytest]\n{toml}\n")
    result = run_pytest(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([error])


@pytest.mark.skipif(not (9, 0) <= pytest.version_tuple[:2] < (9, 2), reason="pytest 9.0 and 9.1 only")
def test_native_toml_before_typed_ini_keys_takes_quoted_strings(project: pytest.Pytester) -> None:
    project.makepyprojecttoml('[tool.pytest]\ninferscope_rounds = "6"\n')
    result = run_pytest(project)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["setting rounds=6 from ini inferscope_rounds"])
    # The suggested fix is one this pytest takes: a quoted string in [tool.pytest], a plain value in [tool.inferscope].
    for toml, example, plain in [("inferscope_all = true", 'inferscope_all = "true"', "all = true"),
                                 ("inferscope_rounds = 20", 'inferscope_rounds = "20"', "rounds = 20")]:  # fmt: skip
        project.makepyprojecttoml(f"[tool.pytest]\n{toml}\n")
        result = run_pytest(project)
        assert result.ret == pytest.ExitCode.USAGE_ERROR
        result.stderr.fnmatch_lines([f"ERROR: *pyproject.toml*, e.g. {example}; *?tool.inferscope?*({plain})."])


def test_classic_ini_strings_of_every_type(project: pytest.Pytester) -> None:
    project.makeini(
        "[pytest]\ninferscope_all = yes\ninferscope_rounds = 4\ninferscope_max_regression = 7.5%\n"
        "inferscope_trace_rounds = all\ninferscope_alpha = 0.05\n"
    )
    result = run_pytest(project, "-o", "inferscope_warmup=2")
    assert result.ret == pytest.ExitCode.OK, result.stderr.str()
    result.stdout.fnmatch_lines(
        [
            "setting all=true from ini inferscope_all",
            "setting rounds=4 from ini inferscope_rounds",
            "setting warmup=2 from ini inferscope_warmup (from -o)",  # given with -o, not in the file
            "setting max_regression=0.075 from ini inferscope_max_regression",
            "setting alpha=0.05 from ini inferscope_alpha",
            "setting trace_rounds=all from ini inferscope_trace_rounds",
        ],
        consecutive=False,
    )
    project.makeini("[pytest]\ninferscope_all = maybe\n")
    result = run_pytest(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["ERROR: *tox.ini: pytest ini option inferscope_all = 'maybe' is not a yes/no value: use 1/0, true/false, "
         "yes/no or on/off, e.g. inferscope_all = true."]
    )  # fmt: skip


def test_bad_config_file_is_a_usage_error(project: pytest.Pytester) -> None:
    project.makefile(".yaml", **{".inferscope": "rounds: 3\nwarmpu: 1\n"})
    result = run_pytest(project)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["ERROR: *.inferscope.yaml:2: unknown setting 'warmpu'*did you mean 'warmup'?*"])


def test_help_lists_every_option_with_env_and_ini(project: pytest.Pytester) -> None:
    result = run_pytest(project, "--help")
    assert result.ret == pytest.ExitCode.OK
    text = result.stdout.str()
    assert "performance profiling of inference (pytest-inferscope)" in text
    for spec in OPTIONS:
        assert spec.flag in text and spec.env in text and spec.ini in text, spec.name


def test_regression_options_take_percentages_and_safe_names(tmp_path: Path) -> None:
    s = resolve(cli={"max_regression": "7.5%", "save_baseline": "main"}, ini={}, env={"INFERSCOPE_ALPHA": "0.05"},
                rootdir=tmp_path)  # fmt: skip
    assert s.max_regression == 0.075 and s.save_baseline == "main" and s.alpha == 0.05
    assert resolve(cli={"max_regression": "0.1"}, ini={}, env={}, rootdir=tmp_path).max_regression == 0.1
    with pytest.raises(ConfigError, match=r"--inferscope-compare='main/../x' is not a valid name"):
        resolve(cli={"compare": "main/../x"}, ini={}, env={}, rootdir=tmp_path)
    with pytest.raises(ConfigError, match=r"INFERSCOPE_MAX_REGRESSION='-5%' is out of range"):
        resolve(cli={}, ini={}, env={"INFERSCOPE_MAX_REGRESSION": "-5%"}, rootdir=tmp_path)


def test_speed_probe_modes_and_a_bad_one(tmp_path: Path) -> None:
    assert resolve(cli={}, ini={}, env={}, rootdir=tmp_path).speed_probe == "auto"
    assert resolve(cli={}, ini={}, env={"INFERSCOPE_SPEED_PROBE": "OFF"}, rootdir=tmp_path).speed_probe == "off"
    assert error(tmp_path, cli={"speed_probe": "always"}) == (
        "--inferscope-speed-probe='always' is not one of the choices: set the speed probe to auto, on or off, "
        "e.g. --inferscope-speed-probe=on."
    )


def test_the_option_table_lives_in_options_and_config_re_exports_it() -> None:
    from pytest_inferscope import config, options

    assert config.OPTIONS is options.OPTIONS and config.Settings is options.Settings
    assert {f.name for f in dataclasses.fields(options.Settings)} - {"sources"} == {s.name for s in options.OPTIONS}


def test_a_trace_spill_folder_that_cannot_be_one_is_refused_naming_where_it_was_set(tmp_path: Path) -> None:
    # A file given as the spill folder was taken, and the test whose buffer filled failed mid-round on the plugin's
    # FileExistsError traceback (buffer._spill's mkdir), long after the setting was read.
    afile = write(tmp_path / "afile", "x")
    said = error(tmp_path, env={"INFERSCOPE_TRACE_SPILL": str(afile)})
    assert said.startswith(f"INFERSCOPE_TRACE_SPILL={str(afile)!r} is a file, not a folder: "), said
    assert "leave it unset (a full buffer then wraps) or give a folder" in said
    assert "e.g. INFERSCOPE_TRACE_SPILL=" in said
    write(tmp_path / ".inferscope.yaml", "trace_spill: afile/spill\n")
    said = error(tmp_path)
    assert said.startswith(f"{tmp_path / '.inferscope.yaml'}:1: trace_spill: 'afile/spill' cannot be created: "), said
    assert f"{str(afile)!r} is a file, not a folder" in said
    # A folder that is not there yet is created when a buffer first spills: not an error.
    assert run(tmp_path, cli={"trace_spill": str(tmp_path / "new" / "spill")}).trace_spill == tmp_path / "new" / "spill"
