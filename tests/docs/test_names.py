"""Every option, environment variable and marker key the pages name exists: a renamed or removed one fails here.

tests/unit/test_docs.py checks the other way (every option and key is in docs/markers-and-options.md); a page that
still names an old spelling (`--inferscope-baseline=`, `INFERSCOPE_REPORTS`, `max_latency=`) would send a user to a
usage error. Pages: README.md, docs/*.md and the example project's README.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_inferscope.checks import MARKER_KEYS
from pytest_inferscope.config import OPTIONS

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "example_project" / "README.md"]
#: Named on purpose though no option: the hidden flag `inferscope config show` runs pytest with (docs/cli.md).
HIDDEN_FLAGS = {"--inferscope-show-config"}
#: Read by the code, not options: `INFERSCOPE_COLLECTOR` ... (docs/configuration.md's table), the build's and the
#: browser tests' switches.
OTHER_ENV = {
    "INFERSCOPE_COLLECTOR", "INFERSCOPE_CUPTI_OBJECTS", "INFERSCOPE_CUPTI_ALL_API", "INFERSCOPE_FORCE_NATIVE_BUILD",
    "INFERSCOPE_BROWSER",
}  # fmt: skip
#: Keys a page names as the wrong spelling a message answers (docs/quickstart.md: "unknown threshold 'max_latency'").
WRONG_ON_PURPOSE = {"max_latency"}


def _source_mentions(name: str) -> bool:
    return any(name in p.read_text(encoding="utf-8") for p in [*ROOT.glob("pytest_inferscope/**/*.py"), *ROOT.glob(
        "tests/**/*.py"), ROOT / "setup.py", ROOT / ".ci" / "run"] if p.is_file())  # fmt: skip


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_flag_env_variable_and_marker_key_a_page_names_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    flags = {o.flag for o in OPTIONS} | HIDDEN_FLAGS
    envs = {o.env for o in OPTIONS}
    wrong = [f"flag {f}" for f in sorted(set(re.findall(r"--inferscope-[a-z0-9-]*[a-z0-9]", text))) if f not in flags]
    for env in sorted(set(re.findall(r"\bINFERSCOPE_[A-Z0-9_]*[A-Z0-9]\b", text)) - envs):
        if env not in OTHER_ENV or not _source_mentions(env):
            wrong.append(f"environment variable {env}")
    calls = re.findall(r"mark\.inferscope\(((?:[^()]|\([^()]*\))*)\)", text)
    thresholds = re.findall(r"thresholds=\{([^}]*)\}", text)
    keys = {k for c in calls for k in re.findall(r"\b(\w+)\s*=(?!=)", c)}
    keys |= {k for t in thresholds for k in re.findall(r"['\"](\w+)['\"]\s*:", t)}
    wrong += [f"marker key {k}" for k in sorted(keys - set(MARKER_KEYS) - WRONG_ON_PURPOSE)]
    assert not wrong, f"{page.name} names what pytest-inferscope does not have: {wrong}"


def test_the_scan_finds_what_it_checks() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert "--inferscope-report" in readme and "mark.inferscope(max_latency_ms=25" in readme
    assert all(_source_mentions(env) for env in OTHER_ENV)


CLI = ROOT / "docs" / "cli.md"


def _cli_help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    from pytest_inferscope.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args([*argv, "--help"])
    return capsys.readouterr().out


@pytest.mark.parametrize("command", ["run", "analyze", "compare", "index", "config show"])
def test_every_option_of_an_inferscope_command_is_in_its_section_of_the_cli_page(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = CLI.read_text(encoding="utf-8")
    section = text.split(f"\n## `inferscope {command}`\n", 1)[1].split("\n## ", 1)[0]
    options = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-m)\b", _cli_help(capsys, *command.split())))
    # config show's --inferscope-* are pytest's (markers-and-options.md), their help wrapped mid-name
    options = {o for o in options if o != "--help" and not o.startswith("--inferscope")}
    assert options, command  # the scan found the command's own
    missing = [o for o in sorted(options) if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", section)]
    assert not missing, f"docs/cli.md's `inferscope {command}` section does not name {missing}"


def test_every_inferscope_command_is_in_the_cli_page_and_the_readme(capsys: pytest.CaptureFixture[str]) -> None:
    commands = re.findall(r"^    (\w+)\s{2,}\S", _cli_help(capsys), re.M)
    assert {"run", "analyze", "compare", "index", "config"} <= set(commands), commands
    table = CLI.read_text(encoding="utf-8").split("\n## ", 1)[0]
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert all(f"`inferscope {c}" in table and f"inferscope {c}" in readme for c in commands), commands


@pytest.mark.parametrize("command", ["run", "analyze", "compare", "index", "config show"])
def test_every_inferscope_command_shows_its_help_flag_in_its_usage_line(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`inferscope run --help`'s usage line, set by hand, left out the `[-h]` every other command's shows."""
    usage = _cli_help(capsys, *command.split()).splitlines()[0]
    assert usage.startswith(f"usage: inferscope {command} [-h] "), usage
    text = CLI.read_text(encoding="utf-8")
    section = text.split(f"\n## `inferscope {command}`\n", 1)[1].split("\n## ", 1)[0]
    synopsis = re.search(rf"^inferscope {command} (.*)$", section, re.M)
    if synopsis is not None:  # the page's synopsis names the options the usage line does (-h aside)
        named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-m)\b", synopsis[1]))
        shown = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]*|-m)\b", usage))
        assert named == {o for o in shown if not o.startswith("--inferscope")} or command == "config show", named
