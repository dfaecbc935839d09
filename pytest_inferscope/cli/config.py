"""`inferscope config show`: every effective setting, its value and where it came from, as pytest would see it.

The layers are `config.resolve`'s; this module only finds what pytest would read: the ini file
(the first of pytest.toml, .pytest.toml, pytest.ini, .pytest.ini, pyproject.toml with a pytest
table, tox.ini with [pytest], setup.cfg with [tool:pytest], walking up from the folder, as
pytest 9 does), its `inferscope_*` keys and `addopts`, and `PYTEST_ADDOPTS`.
"""

from __future__ import annotations

import argparse
import difflib
import os
import shlex
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import iniconfig
import pytest

from ..config import OPTIONS, OPTIONS_BY_NAME, ConfigError, describe, resolve
from .common import EXIT_OK, CliError, Parser, echo

INI_NAMES = ("pytest.toml", ".pytest.toml", "pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")


@dataclass
class IniFile:
    """The file pytest takes its configuration from, and the keys of its pytest section."""

    path: Path
    section: str  # "[pytest]", "[tool.pytest.ini_options]", ... or "" when it has none
    values: dict[str, Any] = field(default_factory=dict)
    toml_mode: bool = False  # [tool.pytest] / pytest.toml: native TOML values


def add_preview_options(parser: argparse.ArgumentParser) -> None:
    """The `--inferscope-*` options of pytest, to preview their effect (source "cli")."""
    group = parser.add_argument_group("pytest options to preview (as given to pytest)")
    for spec in OPTIONS:
        text = spec.help.replace("%", "%%")
        if spec.action == "store":
            metavar = spec.metavar or ("{" + ",".join(spec.choices) + "}" if spec.choices else "VALUE")
            group.add_argument(spec.flag, dest=f"opt_{spec.name}", metavar=metavar, help=text)
        else:
            value = spec.action == "store_true"
            group.add_argument(spec.flag, dest=f"opt_{spec.name}", action="store_const", const=value, help=text)


def _ini_error(path: Path, e: iniconfig.ParseError) -> CliError:
    return CliError(f"{path}:{e.lineno + 1}: pytest cannot parse this ini file ({e.msg}); fix the line.")


def read_ini(path: Path) -> IniFile | None:
    """The pytest configuration in `path`, or None when it has none (so pytest keeps looking)."""
    if path.suffix in (".ini", ".cfg"):
        try:
            ini = iniconfig.IniConfig(str(path))
        except iniconfig.ParseError as e:
            raise _ini_error(path, e) from None
        section = "pytest" if path.suffix == ".ini" else "tool:pytest"
        if section in ini:
            return IniFile(path, f"[{section}]", dict(ini[section].items()))
        if path.suffix == ".cfg" and "pytest" in ini:
            raise CliError(f"{path}: a [pytest] section in setup.cfg is not read by pytest; rename it [tool:pytest].")
        return IniFile(path, "") if path.name in ("pytest.ini", ".pytest.ini") else None
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise CliError(f"{path}: pytest cannot read this file ({e}).") from None
    if path.name in ("pytest.toml", ".pytest.toml"):
        table = data.get("pytest") or {}
        return IniFile(path, "[pytest]" if table else "", dict(table), toml_mode=True)
    tool = data.get("tool", {}).get("pytest", {})
    native = {k: v for k, v in tool.items() if k != "ini_options"}
    if native and "ini_options" in tool:
        raise CliError(f"{path}: pytest refuses both [tool.pytest] and [tool.pytest.ini_options]; keep one.")
    if native:
        return IniFile(path, "[tool.pytest]", native, toml_mode=True)
    if "ini_options" in tool:
        values = {k: v if isinstance(v, list) else str(v) for k, v in tool["ini_options"].items()}
        return IniFile(path, "[tool.pytest.ini_options]", values)
    return None


def find_ini(start: Path) -> IniFile | None:
    """The ini file pytest would use when run in `start` (see the module docstring)."""
    first_pyproject = None
    for base in (start, *start.parents):
        for name in INI_NAMES:
            p = base / name
            if p.is_file():
                if name == "pyproject.toml" and first_pyproject is None:
                    first_pyproject = p
                found = read_ini(p)
                if found is not None:
                    return found
    # Like pytest: a pyproject.toml without a pytest table still fixes the rootdir.
    return IniFile(first_pyproject, "") if first_pyproject is not None else None


def _ini_settings(ini: IniFile) -> dict[str, Any]:
    out = {}
    for spec in OPTIONS:
        if spec.ini not in ini.values:
            continue
        value = ini.values[spec.ini]
        # pytest 9.2 types the inferscope_* keys (config._ini_type): plain TOML values then reach resolve(),
        # which parses them as it parses the run's. Before 9.2 pytest itself rejects them.
        if not isinstance(value, str) and pytest.version_tuple[:2] < (9, 2):
            raise CliError(
                f"{ini.path}: {spec.ini} = {value!r} in {ini.section}: with pytest before 9.2 the inferscope_* keys "
                f'of pytest\'s own configuration take quoted strings, e.g. {spec.ini} = "{spec.example}"; or move '
                "the setting to a [tool.inferscope] table, which takes plain TOML values."
            )
        out[spec.name] = value
    return out


def _addopts(ini: IniFile | None) -> list[tuple[str, list[str]]]:
    """(where, arguments) of pytest's extra arguments, in the order pytest applies them (later wins)."""
    out = []
    if ini is not None and "addopts" in ini.values:
        raw = ini.values["addopts"]
        words = [str(w) for w in raw] if isinstance(raw, list) else shlex.split(str(raw))
        out.append((f"addopts in {ini.path.name}", words))
    if os.environ.get("PYTEST_ADDOPTS"):
        out.append(("PYTEST_ADDOPTS", shlex.split(os.environ["PYTEST_ADDOPTS"])))
    return out


def _cli_layer(args: argparse.Namespace, ini: IniFile | None) -> tuple[dict[str, Any], dict[str, str]]:
    """Options from addopts, PYTEST_ADDOPTS and this command line: name -> value, and name -> where."""
    preview = Parser(prog="pytest", add_help=False)
    add_preview_options(preview)
    values: dict[str, Any] = {}
    where: dict[str, str] = {}
    layers = []
    for label, words in _addopts(ini):
        try:
            layers.append((label, preview.parse_known_args(words)[0]))
        except CliError as e:
            raise CliError(f"{label}: {e}".replace(" Run 'pytest --help' for the usage.", "")) from None
    layers.append(("", args))
    for label, ns in layers:
        for spec in OPTIONS:
            value = getattr(ns, f"opt_{spec.name}", None)
            if value is not None:
                values[spec.name], where[spec.name] = value, label
    return values, where


def _config_file(rootdir: Path) -> str:
    for name in (".inferscope.yaml", ".inferscope.yml"):
        if (rootdir / name).is_file():
            return str(rootdir / name)
    pyproject = rootdir / "pyproject.toml"
    try:
        if "inferscope" in tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}):
            return f"{pyproject} [tool.inferscope]"
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        pass
    return "none"


def cmd_config_show(args: argparse.Namespace) -> int:
    """`inferscope config show`: print each setting with its value and source, as pytest would resolve them."""
    if args.rootdir is not None:
        rootdir = Path(args.rootdir).absolute()
        if not rootdir.is_dir():
            raise CliError(f"inferscope config show: --rootdir {args.rootdir} is not a folder.")
        ini = find_ini(rootdir)
    else:
        ini = find_ini(Path.cwd())
        rootdir = ini.path.parent if ini is not None else Path.cwd()
    cli, where = _cli_layer(args, ini)
    ini_values = _ini_settings(ini) if ini is not None else {}
    try:
        settings = resolve(
            cli=cli, ini=ini_values, env=os.environ, rootdir=rootdir, ini_path=ini.path if ini is not None else None
        )
    except ConfigError as e:
        raise CliError(str(e)) from None
    for key in sorted(k for k in (ini.values if ini else {}) if k.startswith("inferscope_")):
        if key.removeprefix("inferscope_") not in OPTIONS_BY_NAME:
            close = difflib.get_close_matches(key, [s.ini for s in OPTIONS], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            assert ini is not None
            print(f"warning: {ini.path}: unknown ini key {key!r}{hint}; pytest ignores it.", file=sys.stderr)
    ini_text = f"{ini.path} {ini.section or '(no pytest section)'}" if ini else "none found"
    lines = [
        f"rootdir: {rootdir}",
        f"pytest ini file: {ini_text}",
        f"inferscope config file: {_config_file(rootdir)}",
        "",
    ]
    rows = [["setting", "value", "source"]]
    for name, value, source in describe(settings):
        if source.startswith("cli ") and where.get(name):
            source += f" (from {where[name]})"
        rows.append([name, value, source])
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if os.environ.get("INFERSCOPE_COLLECTOR"):
        lines += ["", f"INFERSCOPE_COLLECTOR={os.environ['INFERSCOPE_COLLECTOR']} (forces this GPU backend)"]
    echo("\n".join(lines))
    return EXIT_OK
