"""The `inferscope` command: profile a script, re-analyse a saved trace, compare two runs, show the settings.

Exit codes: 0 ok; 1 the script raised, a regression was found or a threshold was crossed; 2 a usage
or input error, printed as one paragraph on stderr that names the input and what is wrong.
"""

from __future__ import annotations

import argparse
import re
import sys
import textwrap
from collections.abc import Sequence
from typing import Any, cast

from .. import __version__
from .common import (
    DEFAULT_REPORT,
    EXIT_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    RUN_DEFAULTS,
    CliError,
    Parser,
    alpha,
    count,
    echo,
    parse_fraction,
    report_folder,
)

__all__ = ["EXIT_FAILED", "EXIT_OK", "EXIT_USAGE", "CliError", "build_parser", "echo", "main", "parse_fraction"]


def _codes(one: str | None) -> str:
    """The exit-code table of a command's --help; `one` says what exit code 1 means for it."""
    lines = ["exit codes:", "  0  ok"] + ([f"  1  {one}"] if one else [])
    return "\n".join([*lines, "  2  usage or input error (one paragraph on stderr naming the input)"])


def _command(sub: Any, name: str, summary: str, description: str, one: str | None) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=summary, description=textwrap.fill(description, 100), epilog=_codes(one),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    return parser


def _default(setting: str) -> str:
    """'(default: INFERSCOPE_ROUNDS or the config file's rounds:, else 1)': where `run` takes an option it is not
    given from, as `cmd_run` does (the plugin's settings, then its own default)."""
    return f"(default: INFERSCOPE_{setting.upper()} or the config file's {setting}:, else {RUN_DEFAULTS[setting]})"


def _add_run(sub: Any) -> None:
    """The `run` subcommand's parser."""
    from .run import cmd_run

    run = cast(Parser, _command(
        sub, "run", "profile a Python script (no pytest needed)",
        "Run SCRIPT as __main__ under CPU, GPU and memory collection and write its report. The whole script is "
        "one round; with --rounds it runs N times after W warm-ups. scope() and mark_event() calls in it show in "
        "the report. inferscope's options are recognised anywhere before a '--'; every other argument (and "
        "everything after '--') goes to the script.",
        "the script raised or exited with a non-zero status (its report is partial), or did not compile (no report)",
    ))  # fmt: skip
    run.unknown_hint = (
        " (inferscope run's own options are --report, --rounds, --warmup and --cpu; one for the script goes after "
        "SCRIPT)"
    )
    run.usage = (
        "inferscope run [-h] [--report DIR] [--rounds N] [--warmup W] [--cpu MODE] (SCRIPT | -m MODULE) [ARGS ...]"
    )
    run.add_argument("--report", type=report_folder, metavar="DIR", help=f"report folder {_default('report')}")
    run.add_argument("--rounds", type=count(1), metavar="N", help=f"measured runs of the script {_default('rounds')}")
    run.add_argument("--warmup", type=count(0), metavar="W", help=f"unmeasured runs before them {_default('warmup')}")
    run.add_argument("--cpu", choices=("sample", "trace", "off"), help=f"CPU collector mode {_default('cpu')}")
    run.add_argument("script", metavar="SCRIPT", nargs="?", help="the Python file to run")
    run.add_argument("-m", dest="module", metavar="MODULE", help="run a module as `python -m MODULE` does, not a file")
    run.add_argument("args", metavar="ARGS", nargs="*", help="arguments for the script (after SCRIPT or MODULE)")
    run.set_defaults(func=cmd_run)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (also what `--help` prints)."""
    # Imported here: `inferscope --help` and `run` need none of the other commands' imports.
    from .analyze import cmd_analyze
    from .compare import cmd_compare
    from .config import add_preview_options, cmd_config_show

    parser = Parser(
        prog="inferscope", description=(__doc__ or "").split("\n\n")[0],  # the exit codes: the epilog's table
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_codes("the script raised, a regression was found, or a threshold was crossed"),
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"inferscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    _add_run(sub)

    analyze = _command(
        sub, "analyze", "re-analyse a saved trace (ours or torch.profiler's)",
        "Re-run merger, analyzer and reporters on FILE: an inferscope raw.npz, a test's report folder or its "
        "report.json or trace.json (the raw.npz beside it is used), a report root holding one test folder, or a "
        "torch.profiler / Kineto Chrome trace "
        "(.json or .json.gz, as export_chrome_trace() writes it); our trace.json.gz is read as our trace.json. "
        "The trace written is trace.json.gz, or trace.json with INFERSCOPE_TRACE_FORMAT=json (or the config "
        "file's trace_format).",
        "a threshold recorded with the test was crossed",
    )  # fmt: skip
    analyze.add_argument("file", metavar="FILE", help="raw.npz, report folder, report.json or Chrome trace")
    analyze.add_argument(
        "--report", type=report_folder, metavar="DIR", help=f"report folder (default: {DEFAULT_REPORT})"
    )
    analyze.set_defaults(func=cmd_analyze)

    compare = _command(
        sub, "compare", "latency regression table between two runs",
        "Compare the round latencies of the tests in A (before) and B (after), matched by test id. A test "
        "regressed when B is significantly slower (one-sided Mann-Whitney U at --alpha) and its median is more "
        "than --max-regression slower. Tests in only one of them are listed as such.",
        "a test regressed",
    )  # fmt: skip
    where = "a report.json, a report folder or root, an index.json, or a baseline file"
    compare.add_argument("a", metavar="A", help=f"the run before: {where}")
    compare.add_argument("b", metavar="B", help="the run after, the same kinds")
    compare.add_argument("--max-regression", type=parse_fraction, default=0.05, metavar="FRACTION",
                         help="allowed slowdown of the median, e.g. 5%% or 0.05 (default 5%%)")  # fmt: skip
    compare.add_argument("--alpha", type=alpha, default=0.01, help="significance level (default 0.01)")
    compare.set_defaults(func=cmd_compare)

    from .index import cmd_index

    index = _command(
        sub, "index", "write a report folder's index again from its test folders",
        "Write DIR's index.md, index.json and index.html from the report.json of its test folders: those written "
        "after the index.json there (every one when there is none), or all of them with --all. For a pytest "
        "session that never wrote its index (killed by pytest-timeout's thread method, the OOM killer, SIGKILL).",
        None,
    )  # fmt: skip
    index.add_argument("folder", metavar="DIR", help="the report folder (--inferscope-report=DIR)")
    index.add_argument("--all", action="store_true", help="list every test folder, not only those after the index")
    index.set_defaults(func=cmd_index)

    config = sub.add_parser(
        "config",
        help="inspect the configuration",
        epilog=_codes(None),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    show = _command(
        config.add_subparsers(dest="action", metavar="ACTION", required=True), "show",
        "every effective setting, its value and where it came from",
        "Print every setting as pytest would resolve it: from the pytest ini file pytest would use (its "
        "inferscope_* keys and addopts), PYTEST_ADDOPTS, INFERSCOPE_* environment variables, the inferscope "
        "config file (.inferscope.yaml or [tool.inferscope]) and the defaults. Pass --inferscope-* options to "
        "preview them as if given to pytest.",
        None,
    )  # fmt: skip
    show.add_argument("--rootdir", metavar="DIR", help="the rootdir; the ini file is searched from it upwards")
    add_preview_options(show)
    show.set_defaults(func=cmd_config_show)
    return parser


def _split_run(argv: list[str]) -> tuple[list[str], list[str], list[str]]:
    """Split `run`'s arguments into inferscope's options, what to run (`[SCRIPT]`, `["-m", MODULE]`, or `[]` when
    missing) and the script's arguments.

    After SCRIPT or MODULE only our own long options are ours (until a '--'); anything else is the script's. One of
    ours with no value after it is a CliError: argparse would take SCRIPT, once put back after it, for its value.
    """
    valued = {"--report": "out", "--rounds": "10", "--warmup": "2", "--cpu": "trace"}  # with an example value
    ours: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] not in ("--", "-m"):  # before SCRIPT: all ours
        take = 2 if argv[i] in valued else 1
        _check_value(argv, i, valued)
        ours.extend(argv[i : i + take])
        i += take
    if i < len(argv) and argv[i] == "--":
        i += 1
    if i >= len(argv):
        return ours, [], []
    target, rest, theirs = argv[i : i + 2 if argv[i] == "-m" else i + 1], argv[i + (2 if argv[i] == "-m" else 1) :], []
    j = 0
    while j < len(rest):
        a = rest[j]
        if a == "--":
            theirs.extend(rest[j + 1 :])
            break
        if a in valued:  # with its value
            _check_value(rest, j, valued)
            ours += rest[j : j + 2]
            j += 2
            continue
        if a.split("=", 1)[0] in valued and "=" in a:
            ours.append(a)
        else:
            theirs.append(a)
        j += 1
    return ours, target, theirs


def _check_value(argv: list[str], i: int, valued: dict[str, str]) -> None:
    """CliError when `run`'s option argv[i] takes a value and is the last argument."""
    if argv[i] in valued and i + 1 == len(argv):
        raise CliError(
            f"inferscope run: {argv[i]} needs a value and is the last argument; give one, e.g. "
            f"`inferscope run infer.py {argv[i]} {valued[argv[i]]}`, or put it after '--' to pass it to the script."
        )


def _join_negative(argv: list[str]) -> list[str]:
    """`--max-regression -5%` as `--max-regression=-5%`: argparse takes only a plain negative number (-5) for a value,
    and would say the option "expected one argument"; the option's parser says what is wrong with it."""
    out: list[str] = []
    for a in argv:
        if out and out[-1].startswith("--") and "=" not in out[-1] and re.fullmatch(r"-[\d.]+%", a):
            out[-1] = f"{out[-1]}={a}"
        else:
            out.append(a)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `inferscope` console script; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        theirs: list[str] = []
        if args_list[:1] == ["run"]:
            ours, target, theirs = _split_run(args_list[1:])
            if not target and not {"-h", "--help"} & set(ours):
                raise CliError(
                    "inferscope run: no SCRIPT or -m MODULE given; e.g. `inferscope run infer.py --batch 8` or "
                    "`inferscope run -m mypackage.bench --batch 8`."
                )
            if target[:1] == ["-m"] and len(target) == 1:
                raise CliError("inferscope run: -m needs a module name, as python's does: `inferscope run -m pkg.mod`.")
            args_list = ["run", *ours, *target]  # the script's arguments join after parsing: argparse never reads them
        try:
            args = build_parser().parse_args(_join_negative(args_list))
        except SystemExit as e:  # --help, --version
            return e.code if isinstance(e.code, int) else EXIT_OK
        if args.command == "run":
            args.args = theirs
        return int(args.func(args))
    except CliError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE
