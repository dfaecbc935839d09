"""The `inferscope` command: profile a script, re-analyse a saved trace, compare two runs, show the settings.

Exit codes: 0 ok; 1 the script raised, a regression was found or a threshold was crossed; 2 a usage
or input error, printed as one paragraph on stderr that names the input and what is wrong.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import runpy
import sys
import textwrap
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from . import __version__

if TYPE_CHECKING:
    from .results import TestResult

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
DEFAULT_REPORT = Path("inferscope-report")


class CliError(Exception):
    """A usage or input error: str() is the one paragraph printed on stderr; the exit code is 2."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one paragraph (CliError) instead of usage + exit."""

    def error(self, message: str) -> Any:
        raise CliError(f"{self.prog}: {message}. Run '{self.prog} --help' for the usage.")


def echo(text: str = "") -> None:
    """Print to stdout; a reader that went away (`| head`) does not turn the exit code into a traceback."""
    try:
        print(text, flush=True)
    except BrokenPipeError:
        # Point stdout at /dev/null so the interpreter's final flush does not fail again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _count(low: int) -> Callable[[str], int]:
    """An argparse type for a whole number of at least `low`."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"{text} is less than {low}")
        return value

    return parse


def parse_fraction(text: str) -> float:
    """--max-regression: '5%' or '0.05' -> 0.05, by the parser of the max_regression option (one for every place)."""
    from .options import OPTIONS_BY_NAME

    spec = OPTIONS_BY_NAME["max_regression"]
    try:
        return float(spec.parse(text))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} {exc}: {spec.hint}") from None


def _alpha(text: str) -> float:
    """A significance level in (0, 1), for --alpha."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a significance level between 0 and 1, e.g. 0.01")
    return value


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand (also what `--help` prints)."""
    from .cli_analyze import cmd_analyze
    from .cli_compare import cmd_compare
    from .cli_config import add_preview_options, cmd_config_show

    parser = _Parser(
        prog="inferscope", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=_codes("the script raised, a regression was found, or a threshold was crossed"),
    )  # fmt: skip
    parser.add_argument("--version", action="version", version=f"inferscope {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    run = _command(
        sub, "run", "profile a Python script (no pytest needed)",
        "Run SCRIPT as __main__ under CPU, GPU and memory collection and write its report. The whole script is "
        "one round; with --rounds it runs N times after W warm-ups. scope() and mark_event() calls in it show in "
        "the report. inferscope's options are recognised anywhere before a '--'; every other argument (and "
        "everything after '--') goes to the script.",
        "the script raised or exited with a non-zero status (its report is partial)",
    )  # fmt: skip
    run.usage = "inferscope run [--report DIR] [--rounds N] [--warmup W] [--cpu MODE] SCRIPT [ARGS ...]"
    run.add_argument("--report", metavar="DIR", help=f"report folder (default: INFERSCOPE_REPORT or {DEFAULT_REPORT})")
    run.add_argument("--rounds", type=_count(1), metavar="N", help="measured runs of the script (default 1)")
    run.add_argument("--warmup", type=_count(0), metavar="W", help="unmeasured runs before them (default 0)")
    run.add_argument("--cpu", choices=("sample", "trace", "off"), help="CPU collector mode (default: sample)")
    run.add_argument("script", metavar="SCRIPT", help="the Python file to run")
    run.add_argument("args", metavar="ARGS", nargs=argparse.REMAINDER, help="arguments for the script")
    run.set_defaults(func=cmd_run)

    analyze = _command(
        sub, "analyze", "re-analyse a saved trace (ours or torch.profiler's)",
        "Re-run merger, analyzer and reporters on FILE: an inferscope raw.npz, a report folder or its "
        "report.json or trace.json (the raw.npz beside it is used), or a torch.profiler / Kineto Chrome trace "
        "(.json or .json.gz, as export_chrome_trace() writes it).",
        "a threshold recorded with the test was crossed",
    )  # fmt: skip
    analyze.add_argument("file", metavar="FILE", help="raw.npz, report folder, report.json or Chrome trace")
    analyze.add_argument("--report", metavar="DIR", help=f"report folder (default: {DEFAULT_REPORT})")
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
    compare.add_argument("--alpha", type=_alpha, default=0.01, help="significance level (default 0.01)")
    compare.set_defaults(func=cmd_compare)

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


def _split_run(argv: list[str]) -> tuple[list[str], str | None, list[str]]:
    """Split `run`'s arguments into inferscope's options, SCRIPT (None when missing) and the script's arguments.

    After SCRIPT only our own long options are ours (until a '--'); anything else is the script's.
    """
    valued = {"--report", "--rounds", "--warmup", "--cpu"}
    ours: list[str] = []
    i = 0
    while i < len(argv) and argv[i].startswith("-") and argv[i] != "--":  # before SCRIPT: all ours
        take = 2 if argv[i] in valued else 1
        ours.extend(argv[i : i + take])
        i += take
    if i < len(argv) and argv[i] == "--":
        i += 1
    if i >= len(argv):
        return ours, None, []
    script, rest, theirs = argv[i], argv[i + 1 :], []
    j = 0
    while j < len(rest):
        a = rest[j]
        if a == "--":
            theirs.extend(rest[j + 1 :])
            break
        if a in valued:  # with its value (argparse reports a missing one)
            ours += rest[j : j + 2]
            j += 2
            continue
        if a.split("=", 1)[0] in valued and "=" in a:
            ours.append(a)
        else:
            theirs.append(a)
        j += 1
    return ours, script, theirs


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `inferscope` console script; returns the exit code."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    try:
        if args_list[:1] == ["run"]:
            ours, script, theirs = _split_run(args_list[1:])
            if script is None and not {"-h", "--help"} & set(ours):
                raise CliError("inferscope run: no SCRIPT given; e.g. `inferscope run infer.py --batch 8`.")
            args_list = ["run", *ours, *([script] if script is not None else []), *theirs]
        try:
            args = build_parser().parse_args(args_list)
        except SystemExit as e:  # --help, --version
            return e.code if isinstance(e.code, int) else EXIT_OK
        return int(args.func(args))
    except CliError as e:
        print(str(e), file=sys.stderr)
        return EXIT_USAGE


# --- run ----------------------------------------------------------------------------------------


@contextmanager
def _as_main(script: Path, args: list[str]) -> Iterator[None]:
    """sys.argv and sys.path as `python SCRIPT ARGS` would set them, restored afterwards."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path


def _exec_script(script: Path) -> None:
    """One round: run the script as __main__; exiting with status 0 is a normal end."""
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as e:
        if e.code not in (None, 0):
            raise


def _script_frames(exc: BaseException, script: Path) -> TracebackType | None:
    """The traceback from the script's first frame on (the runner's frames are noise)."""
    tb = exc.__traceback__
    while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != str(script):
        tb = tb.tb_next
    return tb


def cmd_run(args: argparse.Namespace) -> int:
    """`inferscope run`: profile SCRIPT as one round (or --rounds of them), write its report, print a summary."""
    from . import api
    from .collectors.gpu import GpuBackendError
    from .config import ConfigError

    script = Path(args.script).absolute()
    if not script.is_file():
        what = "a folder" if script.is_dir() else "not found"
        raise CliError(
            f"inferscope run: {args.script} is {what}; give the path of a Python script, e.g. "
            "`inferscope run infer.py --batch 8` (its arguments follow it)."
        )
    try:
        settings = api.standalone_settings()
    except ConfigError as e:
        raise CliError(str(e)) from None
    report = Path(args.report) if args.report else (settings.report or DEFAULT_REPORT)
    check_report_folder(report)
    rounds = args.rounds or settings.rounds or 1
    warmup = args.warmup if args.warmup is not None else (settings.warmup or 0)
    name = os.path.normpath(args.script)  # the test id: `./job.py` and `job.py` compare as one
    sink = api.Profile(name)
    failure: BaseException | None = None
    with _as_main(script, list(args.args)):
        try:
            with api.collecting(
                name, sink, rounds=rounds, warmup=warmup, report_dir=report, thresholds=None, cpu=args.cpu
            ) as coll:
                coll.run_rounds(lambda: _exec_script(script), rounds, warmup)
        except BaseException as e:  # the script's exception (KeyboardInterrupt too): report it, exit 1
            failure = e
    if sink.result is None and isinstance(failure, GpuBackendError):  # raised before the script started
        raise CliError(f"inferscope run: {failure}")
    if failure is not None:
        if isinstance(failure, SystemExit):
            code = failure.code
            print(code if isinstance(code, str) else f"{args.script} exited with status {code}", file=sys.stderr)
        else:
            tb = _script_frames(failure, script)
            print("".join(traceback.format_exception(type(failure), failure, tb)).rstrip(), file=sys.stderr)
    if sink.result is None:  # the analysis itself failed: nothing to summarise
        return EXIT_FAILED
    write_index_with(report, sink.result, "inferscope run")
    echo("\n".join(summary_lines(sink.result, report)))
    if failure is not None:
        print(
            f"inferscope run: {args.script} raised {type(failure).__name__}; the report is partial "
            "(it covers what ran before the exception).",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK


def check_report_folder(report: Path) -> None:
    """Create the report folder or raise CliError saying why it can't be used."""
    from .reporters.files import ReportDirError, check_report_dir

    try:
        check_report_dir(report)
    except ReportDirError as e:
        raise CliError(str(e).replace("--inferscope-report=DIR", "--report DIR")) from None


def summary_lines(result: TestResult, report: Path) -> list[str]:
    """The short summary `run` and `analyze` print: latency, bottleneck, top suggestion, report path."""
    from .reporters.markdown import fmt_conf, fmt_ms

    lat, a = result.latency, result.analysis
    n = len(lat.samples_ms)
    rounds = f"{n} round{'s' if n != 1 else ''}" + (f", warm-up {len(lat.warmup_ms)}" if lat.warmup_ms else "")
    latency = f"{fmt_ms(lat.median)} ms median ({rounds})" if n else "n/a (no round completed)"
    if n > 1:
        latency += f", IQR {fmt_ms(lat.iqr)} ms"
    lines = [
        f"inferscope: {result.nodeid}" + (" — PARTIAL" if result.partial_reason else ""),
        f"  latency:        {latency}",
        f"  bottleneck:     {a.bottleneck} (confidence {fmt_conf(a.confidence)})",
    ]
    if a.suggestions:
        s = a.suggestions[0]
        lines.append(f"  top suggestion: {s.action} (saves ~{fmt_ms(s.saving_ms)} ms per round)")
    lines += [f"  not collected:  {c.name}: {c.reason}" for c in result.collectors if not c.active and c.reason]
    lines += [f"  FAILED check:   {c.message}" for c in result.failed_checks]
    lines.append(f"  report:         {report / result.files.get('md', result.slug + '/report.md')}")
    return lines


def write_index_with(report: Path, result: TestResult, tool: str) -> None:
    """Write index.md/index.json for the folder: this result plus the still-readable ones listed before."""
    from .reporters import ReportFormatError, load_report, write_index

    results = [result]
    try:
        old = json.loads((report / "index.json").read_text(encoding="utf-8"))
        entries = old.get("tests", []) if isinstance(old, dict) else []
    except (OSError, ValueError):
        entries = []
    for entry in entries:
        rel = entry.get("files", {}).get("json") if isinstance(entry, dict) else None
        if not isinstance(rel, str) or entry.get("nodeid") == result.nodeid:
            continue
        try:
            results.append(load_report(report / rel))
        except ReportFormatError:
            continue  # its folder is gone or broken: the index only lists what can be opened
    write_index(results, report, {"tool": tool, "environment": result.environment})
