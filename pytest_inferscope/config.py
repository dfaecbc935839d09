"""Settings of pytest-inferscope: every configuration layer resolved once into a frozen Settings.

The settings themselves (parsers, defaults, help, names) are the table in `options`; this module
reads the config file, applies the precedence of the layers, and registers the table with pytest.
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
import shlex
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from .options import OPTIONS, OPTIONS_BY_NAME, OptionSpec, Settings, default_settings, lean_rounds_conflict

__all__ = [
    "OPTIONS", "OPTIONS_BY_NAME", "ConfigError", "OptionSpec", "Settings",
    "add_options", "default_settings", "describe", "resolve", "settings_from_pytest",
]  # fmt: skip


class ConfigError(Exception):
    """A setting is invalid; str() is one paragraph naming the input, the value and what would be valid."""


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


_CONFIG_NAMES = (".inferscope.yaml", ".inferscope.yml", "pyproject.toml")
#: What `_load_file` read in a folder, with its config files' stats then: `measure()` resolves its settings at every
#: call, and parsing a long pyproject.toml took ~1 ms of each (H200 host, 2026-11-28).
_READ: dict[Path, tuple[tuple[tuple[int, int, int] | None, ...], dict[str, tuple[Any, _Origin]]]] = {}


def file_stats(rootdir: Path) -> tuple[tuple[int, int, int] | None, ...]:
    """Inode, size and modification time (ns) of each config file name in rootdir (None: absent)."""
    out: list[tuple[int, int, int] | None] = []
    for name in _CONFIG_NAMES:
        try:
            st = os.stat(rootdir / name)
        except OSError:
            out.append(None)
        else:
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(out)


def _load_file(rootdir: Path) -> dict[str, tuple[Any, _Origin]]:
    """`_read_file`, read again only when a config file in rootdir was created, changed or deleted since."""
    stats = file_stats(rootdir)
    kept = _READ.get(rootdir)
    if kept is not None and kept[0] == stats:
        return dict(kept[1])
    found = _read_file(rootdir)
    _READ[rootdir] = (stats, dict(found))
    return found


def _read_file(rootdir: Path) -> dict[str, tuple[Any, _Origin]]:
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


def resolve(
    *,
    cli: Mapping[str, Any],
    ini: Mapping[str, Any],
    env: Mapping[str, str],
    rootdir: Path,
    ini_path: Path | None = None,
    ini_overridden: Collection[str] = (),
) -> Settings:
    """Combine every configuration layer into the run's Settings; raises ConfigError naming the bad input.

    `cli` and `ini` are keyed by option name and hold only what the user gave (None means not given);
    ini values may be strings (ini files, `-o`) or native TOML values (pytest's `[tool.pytest]` table).
    `ini_path` is pytest's config file, named in errors; `ini_overridden` the ini keys given with `-o` (pytest's
    --override-ini), which errors name as given there, not as the file's. Relative paths from ini and config files are
    taken relative to `rootdir`; CLI and env ones stay relative to the working directory, where the user
    typed them.
    """
    ini_prefix = f"{ini_path}: pytest ini option " if ini_path is not None else "pytest ini option "
    ini_toml = ini_path is not None and ini_path.suffix == ".toml"  # examples then need TOML's quotes
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
        if ini.get(spec.name) not in (None, "") and spec.ini in ini_overridden:  # (3) pytest ini keys, from -o
            layers.append((ini[spec.name], _Origin(f"ini {spec.ini} (from -o)", f"-o {spec.ini}", "=")))
        elif ini.get(spec.name) not in (None, ""):  # (3) pytest ini keys inferscope_*
            layers.append((ini[spec.name], _Origin(f"ini {spec.ini}", spec.ini, " = ", ini_prefix, ini_toml)))
        if spec.name in from_file:  # (4) the inferscope config file
            layers.append(from_file[spec.name])
        # (5) the default, when no layer gave a value
        parsed = [(_parse(spec, raw, origin), origin) for raw, origin in layers]
        value, source = (parsed[0][0], parsed[0][1].source) if parsed else (spec.default, "default")
        if isinstance(value, Path) and not value.is_absolute() and source.startswith(("ini ", "file ")):
            value = rootdir / value
        values[spec.name] = value
        sources[spec.name] = source
        if spec.name == "trace_spill" and value is not None and (why := _not_a_folder(value)):
            raise layers[0][1].bad_value(spec, layers[0][0], why)  # said now, not when a full buffer first spills
    where = f"trace_rounds (from {sources['trace_rounds']}) with gpu_rounds (from {sources['gpu_rounds']})"
    conflict = lean_rounds_conflict(values["trace_rounds"], values["gpu_rounds"], where)
    if conflict is not None:
        raise ConfigError(conflict)
    return Settings(**values, sources=sources)


def _not_a_folder(path: Path) -> str | None:
    """Why `path` can be no folder to write in (it is a file, or a file is where a parent would be), or None.

    Stat only: nothing is created (`config show` resolves too); a missing folder is made when it is first written.
    """
    for p in (path, *path.parents):
        if p.is_dir():
            return None
        if p.exists():
            return "is a file, not a folder" if p == path else f"cannot be created: {str(p)!r} is a file, not a folder"
    return None


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
            _parse(spec, text, _Origin(f"cli {spec.flag}", spec.flag, "="))
        except ConfigError as exc:
            raise pytest.UsageError(str(exc) + _from_addopts(spec.flag, text)) from None
        # The text, checked: resolve() parses it once, as it parses every layer. Its typed value parsed
        # again would not always mean the same (500% is 5.0, and a bare 5.0 is an ambiguous fraction).
        return text

    return parse_cli


def _from_addopts(flag: str, text: str) -> str:
    """Where the environment variable PYTEST_ADDOPTS gave `flag` the value `text`, said after its error, or ''.

    argparse sees PYTEST_ADDOPTS as the command line's start and a `type=` sees the value alone; pytest adds "config
    source: via PYTEST_ADDOPTS" to its own options' errors only. A value also on the command line is the first met.
    """
    try:
        words = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:  # unbalanced quotes: pytest itself stops on them
        return ""
    pairs = itertools.zip_longest(words, words[1:])  # each word and the next
    if not any(word == f"{flag}={text}" or (word == flag and after == text) for word, after in pairs):
        return ""
    given = f"{flag}={text}" if f"{flag}={text}" in words else f"{flag} {text}"
    return (
        f" It was given in the environment variable PYTEST_ADDOPTS ({given!r}), not on the command line: correct it "
        "there, or unset PYTEST_ADDOPTS."
    )


def _help(spec: OptionSpec) -> str:
    choices = f" Choices: {', '.join(spec.choices)}." if spec.choices else ""
    # argparse treats % in help as a format character.
    default = spec.default_text or _format(spec.default)
    text = f"{spec.help}{choices} Default: {default}. Env {spec.env}, ini {spec.ini}."
    return text.replace("%", "%%")


def _ini_type(spec: OptionSpec) -> Any:
    """The type an ini key is registered with, so that pytest's native TOML mode accepts plain values.

    pytest 9.0 added native TOML configuration (`[tool.pytest]`, `pytest.toml`), which type-checks
    each value against the registered type, and 9.2 added unions such as `int | str`. A string form
    always stays valid: ini files and `-o` give strings, and quoted TOML strings were the only form
    before 9.2. Before 9.2 a key is registered as a string: a plain tag (`int`) would reject the quoted
    values that work today. Whatever pytest accepts, `resolve()` parses with the setting's own parser.
    """
    if spec.toml_type is str or pytest.version_tuple[:2] < (9, 2):
        return "string"
    return spec.toml_type | str


def _toml_example(spec: OptionSpec, typed: bool = True) -> str:
    """The option's example as a TOML value: `true`, `20`, `0.05` or `"all"`; always quoted unless `typed` (a
    [tool.pytest] key before pytest 9.2, registered as a string, takes a string only: `_ini_type`)."""
    value = spec.parse(spec.example)
    if not typed:
        return f'"{spec.example}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and spec.toml_type is not str:
        return str(value)
    return f'"{spec.example}"'


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
        parser.addini(spec.ini, help=f"{spec.help} (as {spec.flag})", type=_ini_type(spec), default=None)


def _ini_value(config: pytest.Config, spec: OptionSpec) -> Any:
    """One inferscope_* ini value as pytest read it (None when not set); pytest's type error, made actionable."""
    try:
        return config.getini(spec.ini)
    except (TypeError, ValueError, pytest.UsageError) as exc:
        # pytest names the file, the key and the type it wanted; add what the setting takes.
        where = "a [tool.inferscope] table, which takes any plain TOML value"
        example = _toml_example(spec, typed=_ini_type(spec) != "string")
        raise pytest.UsageError(
            f"{str(exc).rstrip('.')}. {spec.ini}: {spec.hint}, e.g. {spec.ini} = {example}; "
            f"or move the setting to {where} ({spec.name} = {_toml_example(spec)})."
        ) from None


def settings_from_pytest(config: pytest.Config) -> Settings:
    """Resolve the Settings of a pytest run from its options, ini keys, environment and rootdir."""
    cli = {spec.name: config.getoption(spec.dest) for spec in OPTIONS}
    ini = {spec.name: _ini_value(config, spec) for spec in OPTIONS}
    try:
        return resolve(
            cli={name: value for name, value in cli.items() if value is not None},
            ini={name: value for name, value in ini.items() if value not in ("", None)},
            env=os.environ,
            rootdir=config.rootpath,
            ini_path=config.inipath,
            ini_overridden={o.partition("=")[0].strip() for o in config.getoption("override_ini", None) or ()},
        )
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
