"""Settings of pytest-inferscope: one table of options, resolved once into a frozen Settings.

Every setting is one `OptionSpec` in `OPTIONS`; the CLI flag, env var, ini key, config-file key,
help text and docs all come from it. Adding a setting means one `OptionSpec` and one `Settings` field.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_args

import pytest

__all__ = [
    "OPTIONS", "OPTIONS_BY_NAME", "ConfigError", "OptionSpec", "Settings",
    "add_options", "default_settings", "describe", "resolve", "settings_from_pytest",
]  # fmt: skip

GpuMode = Literal["auto", "off", "required"]
CpuMode = Literal["sample", "trace", "off"]
LogLevel = Literal["debug", "info", "warning", "error"]
LatencyStat = Literal["median", "mean", "p90", "p99", "min", "max"]

Parse = Callable[[Any], Any]


class ConfigError(Exception):
    """A setting is invalid; str() is one paragraph naming the input, the value and what would be valid."""


# Value parsers. Each takes a string (CLI, env, ini) or an already-typed value (YAML, TOML, a
# parsed CLI value) and returns the typed value, or raises ValueError with a short reason that
# completes "<name>=<value> ...". What *is* valid is the spec's `hint`, so reasons stay short.

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_bool(value: Any) -> bool:
    """Parse a yes/no setting: a bool, 0/1, or 1/0, true/false, yes/no, on/off in any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("is not a yes/no value")


def parse_path(value: Any) -> Path:
    """Parse a folder path; `~` is expanded, relative paths are kept (resolve() anchors file ones)."""
    if isinstance(value, os.PathLike):
        return Path(value)
    if not isinstance(value, str):
        raise ValueError("is not a folder path")
    if not value.strip():
        raise ValueError("is empty")
    return Path(value.strip()).expanduser()


def optional(parse: Parse) -> Parse:
    """Make a parser accept None, which a config file gives for `key:` or `key: null` ("not set")."""

    def parse_optional(value: Any) -> Any:
        return None if value is None else parse(value)

    return parse_optional


def number(low: float, high: float = math.inf, *, integer: bool = False, low_inclusive: bool = True) -> Parse:
    """Make a parser for a number in [low, high] (or (low, high]), a whole number if `integer`."""
    kind = "a whole number" if integer else "a number"

    def parse_number(value: Any) -> float | int:
        # bool is an int subclass, and YAML turns `yes` into True: never a number.
        if isinstance(value, bool) or not isinstance(value, (int, str) if integer else (int, float, str)):
            raise ValueError(f"is not {kind}")
        try:
            result = int(value) if integer else float(value)
        except ValueError:
            raise ValueError(f"is not {kind}") from None
        # Written so that NaN fails both comparisons; inf fails a finite upper bound.
        above_low = result >= low if low_inclusive else result > low
        if not (above_low and result <= high):
            raise ValueError("is out of range")
        return result

    return parse_number


def choice(choices: tuple[str, ...]) -> Parse:
    """Make a parser for one of `choices`, case-insensitive."""

    def parse_choice(value: Any) -> str:
        # YAML 1.1 reads a bare `off`/`on` as a boolean, so `gpu: off` arrives as False.
        if isinstance(value, bool):
            value = "on" if value else "off"
        if isinstance(value, str) and value.strip().lower() in choices:
            return value.strip().lower()
        raise ValueError("is not one of the choices")

    return parse_choice


def fraction(high: float = 10.0) -> Parse:
    """Make a parser for a fraction in [0, high], written as 0.05 or as a percentage, 5%."""
    plain = number(0.0, high)

    def parse_fraction(value: Any) -> float:
        if isinstance(value, str) and value.strip().endswith("%"):
            return float(plain(value.strip()[:-1])) / 100.0
        return float(plain(value))

    return parse_fraction


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def parse_gpus(value: Any) -> tuple[int, ...]:
    """A comma-separated list of GPU indices, e.g. 0,1,2,3."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ValueError("is not a list of GPU indices")
    try:
        gpus = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise ValueError("is not a list of GPU indices") from None
    if not gpus or any(g < 0 for g in gpus):
        raise ValueError("is not a list of GPU indices")
    return gpus


def parse_name(value: Any) -> str:
    """A baseline name: letters, digits, '.', '-' and '_', so it is a safe file name."""
    if isinstance(value, str) and _NAME.fullmatch(value.strip()):
        return value.strip()
    raise ValueError("is not a valid name")


def _one_of(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + " or " + choices[-1]


@dataclass(frozen=True)
class OptionSpec:
    """One setting: how to parse it, its default and help, and its name in every place it can be given."""

    name: str  # Settings field and config-file key
    parse: Parse
    default: Any
    help: str  # one or two sentences; also the docs text
    hint: str  # what is valid, completing "<value> is out of range: ..."
    example: str  # a valid value as typed on the command line, for error messages
    choices: tuple[str, ...] | None = None
    flag: str = ""  # default --inferscope-<name with - for _>
    env: str = ""  # default INFERSCOPE_<NAME>
    ini: str = ""  # default inferscope_<name>
    action: Literal["store", "store_true", "store_false"] = "store"  # the store_* flags take no value
    metavar: str | None = None

    def __post_init__(self) -> None:
        # Derived names are filled in here so that the table spells out only the exceptions.
        derived = {
            "flag": "--inferscope-" + self.name.replace("_", "-"),
            "env": "INFERSCOPE_" + self.name.upper(),
            "ini": "inferscope_" + self.name,
        }
        for attr, value in derived.items():
            if not getattr(self, attr):
                object.__setattr__(self, attr, value)

    @property
    def dest(self) -> str:
        """The argparse dest; prefixed because all pytest plugins share one option namespace."""
        return "inferscope_" + self.name


_GPU_MODES: tuple[str, ...] = get_args(GpuMode)
_CPU_MODES: tuple[str, ...] = get_args(CpuMode)
_LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)
_LATENCY_STATS: tuple[str, ...] = get_args(LatencyStat)
_BOOL_HINT = "use 1/0, true/false, yes/no or on/off"

OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "enable", parse_bool, True, "Whether inferscope profiles at all; --inferscope-disable turns it off for a run.",
        _BOOL_HINT, "false", flag="--inferscope-disable", action="store_false",
    ),
    OptionSpec(
        "report", optional(parse_path), None, "Folder to write the reports to (Markdown, JSON, Chrome trace).",
        "give a folder path", "out/inferscope", metavar="DIR",
    ),
    OptionSpec(
        "all", parse_bool, False, "Profile every test, not only those marked @pytest.mark.inferscope.",
        _BOOL_HINT, "true", action="store_true",
    ),
    OptionSpec(
        "rounds", optional(number(1, integer=True)), None,
        "Measured rounds per test, unless the marker says otherwise (unset: 1 round for unmarked tests).",
        "give the number of measured rounds per test, a whole number of at least 1", "20", metavar="N",
    ),
    OptionSpec(
        "warmup", optional(number(0, integer=True)), None,
        "Unmeasured warm-up rounds per test, unless the marker says otherwise.",
        "give the number of warm-up rounds per test, a whole number of at least 0", "3", metavar="N",
    ),
    OptionSpec(
        "gpu", choice(_GPU_MODES), "auto",
        "GPU collection: auto (use it when available), off, or required (fail when it cannot run).",
        f"set the GPU collection mode to {_one_of(_GPU_MODES)}", "required", choices=_GPU_MODES,
    ),
    OptionSpec(
        "log_level", choice(_LOG_LEVELS), "warning", "Level of inferscope's own log messages.",
        f"set the log level to {_one_of(_LOG_LEVELS)}", "info", choices=_LOG_LEVELS,
    ),
    OptionSpec(
        "trace_size_mb", number(0.0, 65536.0, low_inclusive=False), 100.0, "Size of each thread's trace buffer in MB.",
        "give the trace buffer size in megabytes, more than 0 and at most 65536", "200", metavar="MB",
    ),
    OptionSpec(
        "trace_spill", optional(parse_path), None,
        "Folder a full trace buffer spills to; unset, a full buffer wraps and counts the dropped events.",
        "give a folder path", "/tmp/inferscope-spill", metavar="DIR",
    ),
    OptionSpec(
        "cpu", choice(_CPU_MODES), "sample",
        "CPU collector mode: sample (stack sampling), trace (full call tracing, slower) or off (scopes only).",
        f"set the CPU collector mode to {_one_of(_CPU_MODES)}", "trace", choices=_CPU_MODES,
    ),
    OptionSpec(
        "sample_interval_ms", number(0.1, 1000.0), 10.0,
        "Stack sampling interval of the CPU collector in ms (each wake-up of the sampler costs CPU: ~50 µs on a "
        "small VM, so 1 ms costs ~5% of a core there).",
        "give the sampling interval in milliseconds, from 0.1 to 1000", "5", metavar="MS",
    ),
    OptionSpec(
        "latency_stat", choice(_LATENCY_STATS), "median",
        "Statistic max_latency_ms is checked against, unless the marker says otherwise.",
        f"set the latency statistic to {_one_of(_LATENCY_STATS)}", "p90", choices=_LATENCY_STATS,
    ),
    OptionSpec(
        "modules", number(0, 32, integer=True), 0,
        "Record torch.nn.Module forwards down to this depth (per-layer CPU and GPU time); 0 = off. Costs a few "
        "µs per module call (torch's global hooks): see docs/modules.md.",
        "give a module depth, a whole number from 0 (off) to 32", "3", metavar="DEPTH",
    ),
    OptionSpec(
        "gpus", optional(parse_gpus), None,
        "GPUs to spread xdist workers over, one per worker (worker N gets the N-th, round robin), set as "
        "CUDA_VISIBLE_DEVICES before CUDA starts; without xdist the first is used.",
        "give GPU indices separated by commas", "0,1,2,3", metavar="LIST",
    ),
    OptionSpec(
        "save_baseline", optional(parse_name), None,
        "Save this run's results as the baseline NAME (appended to its history; earlier runs are kept).",
        "give a name of letters, digits, '.', '-' and '_'", "main", metavar="NAME",
    ),
    OptionSpec(
        "compare", optional(parse_name), None,
        "Compare every profiled test against the baseline NAME and fail the tests that regressed.",
        "give the name of a saved baseline (letters, digits, '.', '-' and '_')", "main", metavar="NAME",
    ),
    OptionSpec(
        "baseline_dir", parse_path, Path(".inferscope/baselines"), "Folder the baselines are kept in.",
        "give a folder path", ".inferscope/baselines", metavar="DIR",
    ),
    OptionSpec(
        "max_regression", fraction(), 0.05,
        "Allowed latency regression against the baseline (0.05 or 5%), unless the marker says otherwise.",
        "give a fraction such as 0.05 or a percentage such as 5%, from 0 to 1000%", "5%", metavar="FRACTION",
    ),
    OptionSpec(
        "alpha", number(0.0, 0.5, low_inclusive=False), 0.01,
        "Significance level of the regression test (one-sided Mann-Whitney U on the round samples).",
        "give a significance level above 0 and at most 0.5", "0.01", metavar="P",
    ),
)  # fmt: skip

OPTIONS_BY_NAME: Mapping[str, OptionSpec] = MappingProxyType({spec.name: spec for spec in OPTIONS})


@dataclass(frozen=True)
class Settings:
    """The effective settings of one run (before per-test marker overrides), and where each came from."""

    enable: bool
    report: Path | None
    all: bool
    rounds: int | None
    warmup: int | None
    gpu: GpuMode
    log_level: LogLevel
    trace_size_mb: float
    trace_spill: Path | None
    cpu: CpuMode
    sample_interval_ms: float
    latency_stat: LatencyStat
    modules: int
    gpus: tuple[int, ...] | None
    save_baseline: str | None
    compare: str | None
    baseline_dir: Path
    max_regression: float
    alpha: float
    # name -> "default", "file /abs/.inferscope.yaml:3", "env INFERSCOPE_GPU", "ini inferscope_rounds",
    # or "cli --inferscope-rounds"
    sources: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def __reduce__(self) -> tuple[Any, ...]:
        # A mappingproxy cannot be pickled; rebuild from a plain dict (xdist, multiprocessing).
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return (functools.partial(Settings, **{**values, "sources": dict(self.sources)}), ())

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data for reports: every value (paths as strings) and `sources`."""
        data = {s.name: str(v) if isinstance(v := getattr(self, s.name), Path) else v for s in OPTIONS}
        return {**data, "sources": dict(self.sources)}


def default_settings() -> Settings:
    """Settings with every default, for code and tests that run without any configuration."""
    return Settings(**{spec.name: spec.default for spec in OPTIONS}, sources={s.name: "default" for s in OPTIONS})


@dataclass(frozen=True)
class _Origin:
    """Where a raw value came from: the source label, and how to spell it back to the user."""

    source: str  # for Settings.sources
    label: str  # the name as the user wrote it
    assign: str  # "=", " = " or ": ", as in that place's syntax
    prefix: str = ""  # "path:line: " for config files
    toml: bool = False  # string examples need quotes in TOML

    def bad_value(self, spec: OptionSpec, value: Any, reason: str) -> ConfigError:
        example = spec.example
        if self.toml and isinstance(spec.parse(example), (str, Path)):
            example = f'"{example}"'
        return ConfigError(
            f"{self.prefix}{self.label}{self.assign}{value!r} {reason}: {spec.hint}, "
            f"e.g. {self.label}{self.assign}{example}."
        )


def _parse(spec: OptionSpec, value: Any, origin: _Origin) -> Any:
    try:
        return spec.parse(value)
    except ValueError as exc:
        raise origin.bad_value(spec, value, str(exc)) from None


# --- the config file: .inferscope.yaml / .inferscope.yml, else [tool.inferscope] in pyproject.toml ---

_Entry = tuple[str, Any, int | None]  # key as written, raw value, 1-based line


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read the inferscope config file ({exc}).") from None


def _yaml_entries(path: Path) -> list[_Entry]:
    import yaml  # here: most sessions have no YAML config file, and yaml costs ~50 ms to import

    loader = yaml.SafeLoader(_read_text(path))
    try:
        node = loader.get_single_node()
        if node is None:  # an empty file, or only comments
            return []
        if not isinstance(node, yaml.MappingNode):
            kind = "a list" if isinstance(node, yaml.SequenceNode) else f"the single value {node.value!r}"
            raise ConfigError(
                f"{path}: the inferscope config file must map setting names to values, one `name: value` "
                f"per line (e.g. `rounds: 20`), but its top level is {kind}."
            )
        # Compose then construct pair by pair, so that every key keeps its line number.
        return [
            (str(loader.construct_object(k, deep=True)), loader.construct_object(v, deep=True), k.start_mark.line + 1)
            for k, v in node.value
        ]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else str(path)
        # The context says what was left open (an unclosed bracket or quote), often lines earlier.
        opened = exc.context_mark if exc.problem and exc.context and exc.context_mark else None
        context = f"; {exc.context} that starts at line {opened.line + 1}" if opened else ""
        raise ConfigError(
            f"{where}: the inferscope config file is not valid YAML ({exc.problem or exc.context}{context}). "
            "Fix the syntax there; settings are written one per line as `name: value`, e.g. `rounds: 20`."
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: the inferscope config file is not valid YAML ({exc}).") from None
    finally:
        loader.dispose()


_TOML_HEADER = re.compile(r"^\s*\[\[?([^\]]+)\]")
_TOML_KEY = re.compile(r"^\s*([\w\-\"'. ]+?)\s*=")
_TOML_POSITION = re.compile(r"\s*\(at line (\d+), column (\d+)\)")


def _toml_path(dotted: str) -> tuple[str, ...]:
    return tuple(part.strip().strip("\"'") for part in dotted.split("."))


def _toml_lines(text: str) -> tuple[int | None, dict[str, int]]:
    """Find the [tool.inferscope] table's line and each of its keys' lines; tomllib keeps no positions."""
    table_line: int | None = None
    key_lines: dict[str, int] = {}
    header: tuple[str, ...] = ()
    for lineno, line in enumerate(text.splitlines(), 1):
        if match := _TOML_HEADER.match(line):
            header = _toml_path(match[1])
            if header == ("tool", "inferscope"):
                table_line = lineno
        elif match := _TOML_KEY.match(line):
            # Covers `key =` under [tool.inferscope], `inferscope.key =` under [tool], and the inline table.
            path = header + _toml_path(match[1])
            if path[:2] == ("tool", "inferscope"):
                if len(path) == 2 and table_line is None:
                    table_line = lineno
                elif len(path) == 3:
                    key_lines.setdefault(path[2].replace("-", "_"), lineno)
    return table_line, key_lines


def _toml_entries(path: Path) -> list[_Entry] | None:
    text = _read_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        message = str(exc)
        position = _TOML_POSITION.search(message)
        where = f"{path}:{position[1]}:{position[2]}" if position else str(path)
        raise ConfigError(
            f"{where}: {path.name} is not valid TOML ({_TOML_POSITION.sub('', message)}), so its "
            "[tool.inferscope] table cannot be read. Fix the syntax there."
        ) from None
    tool = data.get("tool")
    table = tool.get("inferscope") if isinstance(tool, dict) else None
    if table is None:
        return None
    table_line, key_lines = _toml_lines(text)
    if not isinstance(table, dict):
        where = f"{path}:{table_line}" if table_line else str(path)
        raise ConfigError(
            f"{where}: tool.inferscope must be a table of settings, e.g. a `[tool.inferscope]` header "
            f"followed by `rounds = 20`, but it is {table!r}."
        )
    return [(key, value, key_lines.get(key.replace("-", "_"), table_line)) for key, value in table.items()]


def _load_file(rootdir: Path) -> dict[str, tuple[Any, _Origin]]:
    """Read the inferscope config file in rootdir, if any: option name -> (raw value, origin)."""
    yaml_files = [p for p in (rootdir / ".inferscope.yaml", rootdir / ".inferscope.yml") if p.is_file()]
    if len(yaml_files) == 2:
        raise ConfigError(
            f"{rootdir}: both .inferscope.yaml and .inferscope.yml exist, and only one is read; "
            "merge them into .inferscope.yaml and delete the other."
        )
    path = yaml_files[0] if yaml_files else rootdir / "pyproject.toml"
    toml = not yaml_files
    if toml and not path.is_file():
        return {}
    entries = _toml_entries(path) if toml else _yaml_entries(path)
    found: dict[str, tuple[Any, _Origin]] = {}
    for key, value, line in entries or []:
        name = key.replace("-", "_")
        prefix = f"{path}:{line}: " if line else f"{path}: "
        if name not in OPTIONS_BY_NAME:
            close = difflib.get_close_matches(name, list(OPTIONS_BY_NAME), n=1)
            guess = f" (did you mean '{close[0]}'?)" if close else ""
            raise ConfigError(
                f"{prefix}unknown setting '{key}' in the inferscope config file{guess}; "
                f"the settings are {', '.join(OPTIONS_BY_NAME)}."
            )
        if name in found:
            raise ConfigError(
                f"{prefix}setting '{key}' is given twice ({found[name][1].source.removeprefix('file ')}); keep one."
            )
        source = f"file {path}:{line}" if line else f"file {path}"
        found[name] = (value, _Origin(source, key, " = " if toml else ": ", prefix, toml))
    return found


# --- resolution ---


def resolve(*, cli: Mapping[str, Any], ini: Mapping[str, Any], env: Mapping[str, str], rootdir: Path) -> Settings:
    """Combine every configuration layer into the run's Settings; raises ConfigError naming the bad input.

    `cli` and `ini` are keyed by option name and hold only what the user gave (None means not given).
    Relative paths from ini and config files are taken relative to `rootdir`; CLI and env ones stay
    relative to the working directory, where the user typed them.
    """
    rootdir = Path(rootdir).absolute()
    from_file = _load_file(rootdir)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for spec in OPTIONS:
        # Every given value is parsed, not only the winner, so a bad layer is reported even when
        # a higher one hides it today. Highest precedence first:
        layers: list[tuple[Any, _Origin]] = []
        if cli.get(spec.name) is not None:  # (1) command line
            layers.append((cli[spec.name], _Origin(f"cli {spec.flag}", spec.flag, "=")))
        if env.get(spec.env):  # (2) env INFERSCOPE_*; an empty variable counts as unset
            layers.append((env[spec.env], _Origin(f"env {spec.env}", spec.env, "=")))
        if ini.get(spec.name) not in (None, ""):  # (3) pytest ini keys inferscope_*
            layers.append((ini[spec.name], _Origin(f"ini {spec.ini}", spec.ini, " = ", "pytest ini option ")))
        if spec.name in from_file:  # (4) the inferscope config file
            layers.append(from_file[spec.name])
        # (5) the default, when no layer gave a value
        parsed = [(_parse(spec, raw, origin), origin) for raw, origin in layers]
        value, source = (parsed[0][0], parsed[0][1].source) if parsed else (spec.default, "default")
        if isinstance(value, Path) and not value.is_absolute() and source.startswith(("ini ", "file ")):
            value = rootdir / value
        values[spec.name] = value
        sources[spec.name] = source
    return Settings(**values, sources=sources)


def _format(value: Any) -> str:
    if value is None:
        return "not set"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def describe(settings: Settings) -> list[tuple[str, str, str]]:
    """Rows of (name, value, source) in table order, for `inferscope config show`."""
    return [(s.name, _format(getattr(settings, s.name)), settings.sources.get(s.name, "default")) for s in OPTIONS]


# --- pytest glue ---


def _cli_type(spec: OptionSpec) -> Callable[[str], Any]:
    """An argparse `type=` that raises UsageError: argparse would turn a ValueError into a terse message."""

    def parse_cli(text: str) -> Any:
        try:
            return _parse(spec, text, _Origin(f"cli {spec.flag}", spec.flag, "="))
        except ConfigError as exc:
            raise pytest.UsageError(str(exc)) from None

    return parse_cli


def _help(spec: OptionSpec) -> str:
    choices = f" Choices: {', '.join(spec.choices)}." if spec.choices else ""
    # argparse treats % in help as a format character.
    text = f"{spec.help}{choices} Default: {_format(spec.default)}. Env {spec.env}, ini {spec.ini}."
    return text.replace("%", "%%")


def add_options(parser: pytest.Parser) -> None:
    """Register every option of the table as a CLI flag and an ini key, in one group."""
    group = parser.getgroup("inferscope", "performance profiling of inference (pytest-inferscope)")
    for spec in OPTIONS:
        # Default None everywhere, so that resolve() can tell "not given" from a given default.
        if spec.action == "store":
            metavar = spec.metavar or ("{" + ",".join(spec.choices) + "}" if spec.choices else spec.name.upper())
            group.addoption(
                spec.flag, dest=spec.dest, default=None, type=_cli_type(spec), metavar=metavar, help=_help(spec)
            )
        else:
            group.addoption(spec.flag, dest=spec.dest, default=None, action=spec.action, help=_help(spec))
        # Read as strings and parsed by resolve(), so that ini errors get the same messages.
        parser.addini(spec.ini, help=f"{spec.help} (as {spec.flag})", type="string", default="")


def settings_from_pytest(config: pytest.Config) -> Settings:
    """Resolve the Settings of a pytest run from its options, ini keys, environment and rootdir."""
    cli = {spec.name: config.getoption(spec.dest) for spec in OPTIONS}
    try:
        ini = {spec.name: config.getini(spec.ini) for spec in OPTIONS}
    except TypeError as exc:
        # pytest's native TOML mode ([tool.pytest], pytest.toml) rejects a bare `true` or `3` for a
        # string key; the keys are strings so that ini files and `-o` get the same parsing as env.
        raise pytest.UsageError(
            f"{exc}. The inferscope_* keys of pytest's own configuration take quoted strings, "
            'e.g. inferscope_rounds = "20"; or move the setting to a [tool.inferscope] table, '
            "which takes plain TOML values (rounds = 20)."
        ) from None
    try:
        return resolve(
            cli={name: value for name, value in cli.items() if value is not None},
            ini={name: value for name, value in ini.items() if value not in ("", None)},
            env=os.environ,
            rootdir=config.rootpath,
        )
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
