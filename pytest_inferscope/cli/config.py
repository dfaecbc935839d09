"""`inferscope config show`: every effective setting, its value and where it came from, as pytest sees it.

The command does not look for pytest's configuration itself: it runs pytest (in this process)
with the hidden `--inferscope-show-config` option, so pytest finds the ini file, applies
`addopts` and `PYTEST_ADDOPTS` and picks the rootdir as it would for a test run, and the plugin's
`pytest_cmdline_main` prints the resolved settings (`print_settings`) and ends the run there,
before any test is collected.
"""

from __future__ import annotations

import argparse
import configparser
import contextlib
import difflib
import io
import os
import re
import shlex
import sys
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING

from ..config import OPTIONS, OPTIONS_BY_NAME, describe
from ..options import OptionSpec
from .common import EXIT_OK, EXIT_USAGE, CliError, echo

if TYPE_CHECKING:
    import pytest

SHOW_FLAG = "--inferscope-show-config"


def add_preview_options(parser: argparse.ArgumentParser) -> None:
    """The `--inferscope-*` options of pytest, to preview their effect (source "cli")."""
    group = parser.add_argument_group("pytest options to preview (as given to pytest)")
    for spec in OPTIONS:
        text = spec.help.replace("%", "%%")
        if spec.action == "store":
            metavar = spec.metavar or ("{" + ",".join(spec.choices) + "}" if spec.choices else "VALUE")
            group.add_argument(spec.flag, dest=f"opt_{spec.name}", metavar=metavar, help=text)
        else:
            group.add_argument(spec.flag, dest=f"opt_{spec.name}", action="store_true", help=text)


def _preview_args(args: argparse.Namespace) -> list[str]:
    """The previewed options as pytest's command line."""
    out = []
    for spec in OPTIONS:
        value = getattr(args, f"opt_{spec.name}", None)
        if value is True and spec.action != "store":
            out.append(spec.flag)
        elif value not in (None, False):
            out.append(f"{spec.flag}={value}")
    return out


def cmd_config_show(args: argparse.Namespace) -> int:
    """`inferscope config show`: pytest resolves and prints the settings (see the module docstring)."""
    import pytest

    where: list[str] = []
    if args.rootdir is not None:
        rootdir = Path(args.rootdir).absolute()
        if not rootdir.is_dir():
            raise CliError(f"inferscope config show: --rootdir {args.rootdir} is not a folder.")
        # As an argument, the folder is where pytest looks for its ini file (then upwards); --rootdir fixes the rootdir.
        where = [f"--rootdir={rootdir}", str(rootdir)]
    # `-p inferscope`: the plugin also where PYTEST_DISABLE_PLUGIN_AUTOLOAD is set (pytest skips it if loaded).
    err, code = io.StringIO(), None
    try:
        with contextlib.redirect_stderr(err):
            code = pytest.main([SHOW_FLAG, "-p", "inferscope", "-p", "no:cacheprovider", *_preview_args(args), *where])
    finally:
        text = err.getvalue()
        errors = _usage_errors(text) if code == pytest.ExitCode.USAGE_ERROR else []
        if not errors:  # (the settings' warnings, or what pytest said of an error that is no UsageError)
            sys.stderr.write(text)
    if errors:
        raise CliError(" ".join(errors))
    return EXIT_OK if code == 0 else EXIT_USAGE


#: How pytest.main prints a UsageError: "ERROR: <message>" and a blank line (red where stderr takes colour).
_PYTEST_ERROR = re.compile(r"^ERROR: (.*?)\n\n", re.DOTALL | re.MULTILINE)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _usage_errors(text: str) -> list[str]:
    """The UsageErrors pytest printed in `text` (its stderr), each one paragraph; [] if it printed anything else.

    A bad `--inferscope-*` value is one line already (the plugin's message). pytest's own parser says "usage: ...",
    then "<prog>: error: <what>" and the ini file and rootdir on lines of their own: config show gives it only
    options it knows, so an argument it does not know came from PYTEST_ADDOPTS or the ini file's addopts.
    """
    text = _ANSI.sub("", text)
    found = _PYTEST_ERROR.findall(text)
    if not found or _PYTEST_ERROR.sub("", text).strip():
        return []
    out = []
    for message in found:
        lines = [line.strip() for line in message.splitlines() if line.strip() and not line.startswith("usage:")]
        if len(lines) == 1 and ": error: " not in lines[0]:
            out.append(lines[0])
            continue
        what = re.sub(r"^\S+: error: ", "", lines[0]).rstrip(".")
        context = f" ({', '.join(lines[1:])})" if len(lines) > 1 else ""
        out.append(
            f"inferscope config show: pytest: {what}{context}; config show gives pytest only options it knows, so "
            "what it does not know came from PYTEST_ADDOPTS or the ini file's addopts."
        )
    return out


# --- inside pytest (plugin.pytest_cmdline_main) ----------------------------------------------------


def _ini_keys(inipath: Path) -> tuple[str, list[str]]:
    """The section pytest reads in `inipath` (the file pytest chose) and its keys; ("", []) without one."""
    try:
        if inipath.suffix == ".toml":
            data = tomllib.loads(inipath.read_text(encoding="utf-8"))
            if inipath.name in ("pytest.toml", ".pytest.toml"):
                table, name = data.get("pytest"), "[pytest]"
            elif isinstance(data.get("tool", {}).get("pytest", {}).get("ini_options"), dict):
                table, name = data["tool"]["pytest"]["ini_options"], "[tool.pytest.ini_options]"
            else:
                table, name = data.get("tool", {}).get("pytest"), "[tool.pytest]"
            return (name, list(table)) if table else ("", [])
        parser = configparser.RawConfigParser()
        parser.read(inipath, encoding="utf-8")
        section = "tool:pytest" if inipath.suffix == ".cfg" else "pytest"
        return (f"[{section}]", list(parser[section])) if parser.has_section(section) else ("", [])
    except (OSError, UnicodeDecodeError, ValueError, configparser.Error):  # pytest read it; only the label is lost
        return "", []


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


def _given(spec: OptionSpec, words: list[str]) -> bool:
    return any(w == spec.flag or w.startswith(spec.flag + "=") for w in words)


def _option_origin(config: pytest.Config, spec: OptionSpec) -> str:
    """Where an option on pytest's command line came from: typed, PYTEST_ADDOPTS or the ini file's addopts."""
    if _given(spec, [str(a) for a in config.invocation_params.args]):
        return ""
    if _given(spec, shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))):
        return "PYTEST_ADDOPTS"
    return f"addopts in {config.inipath.name}" if config.inipath is not None else ""


def print_settings(config: pytest.Config) -> int:
    """Print every setting with its value and source, as this pytest run resolved them; the exit code."""
    import pytest

    from ..config import settings_from_pytest

    try:
        settings = settings_from_pytest(config)
    except pytest.UsageError as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_USAGE
    section, keys = _ini_keys(config.inipath) if config.inipath is not None else ("", [])
    for key in sorted(k for k in keys if k.startswith("inferscope_")):
        if key.removeprefix("inferscope_") not in OPTIONS_BY_NAME:
            close = difflib.get_close_matches(key, [s.ini for s in OPTIONS], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            print(f"warning: {config.inipath}: unknown ini key {key!r}{hint}; pytest ignores it.", file=sys.stderr)
    ini_text = f"{config.inipath} {section or '(no pytest section)'}" if config.inipath else "none found"
    lines = [
        f"rootdir: {config.rootpath}",
        f"pytest ini file: {ini_text}",
        f"inferscope config file: {_config_file(config.rootpath)}",
        "",
    ]
    rows = [["setting", "value", "source"]]
    for name, value, source in describe(settings):
        if source.startswith("cli ") and (origin := _option_origin(config, OPTIONS_BY_NAME[name])):
            source += f" (from {origin})"
        rows.append([name, value, source])
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    if os.environ.get("INFERSCOPE_COLLECTOR"):
        lines += ["", f"INFERSCOPE_COLLECTOR={os.environ['INFERSCOPE_COLLECTOR']} (forces this GPU backend)"]
    echo("\n".join(lines))
    return EXIT_OK
