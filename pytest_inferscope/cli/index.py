"""`inferscope index DIR`: write a report folder's index.md, index.json and index.html again from its test folders.

A pytest session writes the index as it ends. One that never ends (killed by pytest-timeout's `thread` method, which
calls `os._exit`, by the OOM killer, by SIGKILL) leaves the report folders of the tests it completed and no index of
them, or the index of an earlier run. This lists the test folders written after the index there (every one when there
is none); `--all` lists every test folder.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import EXIT_OK, CliError, TestFolder, echo, read_root, stamp


def cmd_index(args: argparse.Namespace) -> int:
    """Write DIR's index from its test folders' report.json; say what it lists and what it leaves out."""
    from ..reporters.folder import write_index
    from ..reporters.jsonreport import ReportFormatError, load_report

    folder = Path(args.folder)
    if not folder.is_dir():
        what = "is a file, not a folder" if folder.exists() else "does not exist"
        raise CliError(f"inferscope index: the report folder {str(folder)!r} {what}; give the folder a pytest session "
                       "wrote its reports in (its --inferscope-report=DIR).")  # fmt: skip
    root = read_root(folder, "report.json")
    since = None if args.all or root.index_written is None else root.index_written
    chosen = [t for t in root.tests() if since is None or t.written > since]
    if not root.tests():
        raise CliError(f"inferscope index: {str(folder)!r} holds no test folder with a report.json; give the folder a "
                       "pytest session wrote its reports in (its --inferscope-report=DIR).")  # fmt: skip
    if not chosen:  # (a session that ended wrote it after them)
        assert since is not None
        n = _tests(len(root.tests()))
        echo(f"inferscope index: every test folder in {folder} ({n}) was written before its index.json "
             f"({stamp(since)}): left as it is; `inferscope index --all` writes it from all of them.")  # fmt: skip
        return EXIT_OK
    results, unreadable = [], []
    for test in chosen:
        try:
            results.append(load_report(test.path / "report.json"))
        except ReportFormatError as e:
            unreadable.append(str(e))
    if not results:
        raise CliError(f"inferscope index: no report.json in {str(folder)!r} could be read: {unreadable[0]}")
    span = _span([t for t in chosen])
    write_index(results, folder, {"index": f"written by `inferscope index` from the test folders written {span}"})
    echo(f"inferscope index: {folder / 'index.md'} (and index.html, index.json) lists {_tests(len(results))} "
         f"from the test folders written {span}.")  # fmt: skip
    if since is not None and (left := len(root.tests()) - len(chosen)):
        echo(f"  left out: {_tests(left)} written before the index that was there ({stamp(since)}); "
             "`inferscope index --all` lists them too.")  # fmt: skip
    for said in unreadable:
        echo(f"  not listed: {said}")
    return EXIT_OK


def _span(tests: list[TestFolder]) -> str:
    first, last = stamp(min(t.written for t in tests)), stamp(max(t.written for t in tests))
    return f"at {first}" if first == last else f"from {first} to {last}"


def _tests(n: int) -> str:
    return f"{n} test{'s' if n != 1 else ''}"
