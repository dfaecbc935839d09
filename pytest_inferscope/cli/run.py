"""`inferscope run SCRIPT` (or `-m MODULE`): profile a Python script as one round (or --rounds of them), no pytest
needed."""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import io
import os
import runpy
import sys
import traceback
import types
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from importlib.machinery import ModuleSpec
from pathlib import Path
from types import TracebackType
from typing import TextIO

from .common import DEFAULT_REPORT, EXIT_FAILED, EXIT_OK, RUN_DEFAULTS, CliError, check_report_folder, conclude


@contextmanager
def _as_main(script: Path, argv: list[str], module: str | None = None) -> Iterator[None]:
    """sys.argv and sys.path as `python SCRIPT ARGS` (the folder of the script, symlinks resolved, first on the path)
    or `python -m MODULE ARGS` (the working directory first) would set them, restored afterwards with the working
    directory (the script may change it)."""
    saved_argv, saved_path, cwd = sys.argv, list(sys.path), os.getcwd()
    streams = sys.stdout, sys.stderr
    sys.argv = argv
    sys.path.insert(0, cwd if module is not None else os.path.dirname(os.path.realpath(script)))
    try:
        yield
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        os.chdir(cwd)
        sys.stdout, sys.stderr = (_open_again(s, fd) for s, fd in zip(streams, (1, 2), strict=True))


def _open_again(stream: TextIO, fd: int) -> TextIO:
    """The stream as it was before the script, or a new one on its file descriptor where the script closed it
    (`python -m json.tool` closes its output when done, which is sys.stdout): the summary follows."""
    if not stream.closed:
        return stream
    return open(fd, "w", encoding=getattr(stream, "encoding", None), errors="backslashreplace", closefd=False)


def _compiled(script: Path) -> types.CodeType | None:
    """The script's code, compiled once before any round; None for what runpy reads that is no source file (.pyc, a
    zip). SyntaxError (or ValueError for a null byte) when it does not compile."""
    if script.suffix == ".pyc" or zipfile.is_zipfile(script):
        return None
    with io.open_code(str(script)) as f:
        return compile(f.read(), str(script), "exec", dont_inherit=True)


def _round(script: Path, module: str | None = None, code: types.CodeType | None = None) -> Callable[[], None]:
    """One round: run the script (its `code`, compiled once) or the module as __main__ from the working directory of
    the first; exiting with status 0 is a normal end."""
    run: Callable[[], object]
    if module is not None:
        run = partial(runpy.run_module, module, run_name="__main__", alter_sys=True)
    elif code is None:  # what runpy reads that is no source file
        run = partial(runpy.run_path, str(script), run_name="__main__")
    else:
        run = partial(_run_source, script, code)

    cwd = os.getcwd()

    def body() -> None:
        os.chdir(cwd)  # each run starts where `python SCRIPT` would, whatever the one before changed to
        try:
            run()
        except SystemExit as e:
            if e.code not in (None, 0):
                raise

    return body


def _run_source(script: Path, code: types.CodeType) -> None:
    """Run a source file's code as __main__ as `python SCRIPT` does; not by runpy.run_path, which sets sys.argv[0] to
    the absolute path where python keeps it as typed."""
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=str(script), __cached__=None, __loader__=None, __package__=None, __spec__=None)
    saved = sys.modules.get("__main__")
    sys.modules["__main__"] = main  # while it runs, as runpy's: pickle finds the script's classes there
    try:
        exec(code, main.__dict__)
    finally:
        if saved is not None:
            sys.modules["__main__"] = saved
        else:
            del sys.modules["__main__"]


def _module_file(module: str) -> Path:
    """The file `python -m MODULE` runs (a package's __main__.py), found from the working directory; CliError when
    there is none.

    The packages it is in are not imported to find it: their __init__ runs in the first round, so what it raises is
    the script's (its traceback, exit 1, a partial report), as under `python -m`.
    """
    if "" in module.split("."):
        raise CliError(
            f"inferscope run: -m {module!r} is not a module name; give one as `python -m` takes it (no relative "
            "names), e.g. `inferscope run -m mypackage.bench --batch 8`."
        )
    sys.path.insert(0, os.getcwd())
    try:
        spec = _find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:  # a package: its __main__
            spec = _find_spec(f"{module}.__main__")
    finally:
        sys.path.pop(0)
    if spec is None or not spec.origin or not Path(spec.origin).is_file():
        raise CliError(
            f"inferscope run: no module named {module!r} (nor a package of that name with a __main__.py) on the "
            "path from the working directory; give a module as `python -m` takes it, e.g. "
            "`inferscope run -m mypackage.bench --batch 8`, or the path of a script."
        )
    return Path(spec.origin).absolute()


def _find_spec(name: str) -> ModuleSpec | None:
    """importlib.util.find_spec, without importing the parent packages where their folders tell (it imports them)."""
    spec = _unimported_spec(name)
    if spec is not None:
        return spec
    try:  # a package that extends its __path__ when imported: the import system's own way
        return importlib.util.find_spec(name)
    except (ImportError, ValueError):  # a missing parent package
        return None
    except Exception as exc:  # the package's __init__ raised, outside any round: say so, exit 2
        package = name.rpartition(".")[0]
        raise CliError(
            f"inferscope run: cannot find module {name!r}: importing its package {package!r} raised "
            f"{type(exc).__name__}: {exc}. Run `python -c 'import {package}'` to see the traceback."
        ) from None


def _unimported_spec(name: str) -> ModuleSpec | None:
    """The spec of `name` looked for in its parent package's folders, as the import system will, or None."""
    parent, _, _ = name.rpartition(".")
    if not parent or name in sys.modules:
        try:
            return importlib.util.find_spec(name)  # (imports nothing for a top-level or imported name)
        except (ImportError, ValueError):
            return None
    outer = _unimported_spec(parent)
    if outer is None or outer.submodule_search_locations is None:
        return None
    return importlib.machinery.PathFinder.find_spec(name, list(outer.submodule_search_locations))


def _script_path(given: str) -> Path:
    """The script as runpy should open it: absolute, its folder resolved. runpy normalises `..` by the letters
    (`link/../job.py` becomes `job.py` beside `link`), which is another file when `link` is a symlink."""
    return Path(os.path.realpath(os.path.dirname(os.path.join(os.getcwd(), given))), os.path.basename(given))


def _script_frames(exc: BaseException, script: Path) -> TracebackType | None:
    """The traceback from the script's first frame on (the runner's frames are noise).

    Both paths are compared resolved: the script may be given as `../job.py` or through a symlink, and its frames
    keep the path as run (as `python ../job.py` does).
    """
    target = os.path.realpath(script)
    tb = exc.__traceback__
    while tb is not None and os.path.realpath(tb.tb_frame.f_code.co_filename) != target:
        tb = tb.tb_next
    if tb is None:  # raised before the script's code ran (in a package it is in): from the first frame not ours
        tb = exc.__traceback__
        while tb is not None and _runners(tb.tb_frame.f_code.co_filename):
            tb = tb.tb_next
    return tb


def _runners(filename: str) -> bool:
    """Whether a frame of this file is the runner's: ours, runpy's or the import system's."""
    if filename.startswith("<frozen "):  # runpy and importlib, as Python 3.11+ freezes them
        return True
    path = os.path.realpath(filename)
    ours = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    return path.startswith(ours + os.sep) or path in {os.path.realpath(m.__file__ or "") for m in (runpy, importlib)}


#: A script that is there but no file to read twice: a pipe (`inferscope run <(...)`), a device, a socket.
NOT_A_FILE = "not a regular file (a pipe, a device or a socket)"


def cmd_run(args: argparse.Namespace) -> int:
    """`inferscope run`: profile SCRIPT as one round (or --rounds of them), write its report, print a summary."""
    from .. import api
    from ..collectors.gpu import GpuBackendError
    from ..config import ConfigError

    module: str | None = args.module
    if module is not None and args.script is not None:  # (`run -m MODULE` passes what follows to the module)
        raise CliError("inferscope run: give a SCRIPT or -m MODULE, not both.")
    script = _module_file(module) if module is not None else _script_path(args.script)
    if not script.is_file():
        what = "a folder" if script.is_dir() else "not found" if not script.exists() else NOT_A_FILE
        raise CliError(
            f"inferscope run: {args.script} is {what}; give the path of a Python script, e.g. "
            "`inferscope run infer.py --batch 8` (its arguments follow it)."
        )
    try:
        code = _compiled(script)
    except (SyntaxError, ValueError) as e:  # as python prints it; nothing ran, so nothing to report
        shown = args.script if module is None else f"{script.name} (-m {module})"
        print("".join(traceback.format_exception_only(type(e), e)).rstrip(), file=sys.stderr)
        print(
            f"inferscope run: {shown} does not compile ({type(e).__name__}), so it ran in no round and no report is "
            "written; fix it and run again.",
            file=sys.stderr,
        )
        return EXIT_FAILED
    try:
        settings = api.standalone_settings()
    except ConfigError as e:
        raise CliError(str(e)) from None
    report = args.report if args.report is not None else (settings.report or DEFAULT_REPORT)
    check_report_folder(report, "run")
    rounds = args.rounds or settings.rounds or RUN_DEFAULTS["rounds"]
    warmup = args.warmup if args.warmup is not None else (settings.warmup or RUN_DEFAULTS["warmup"])
    name = module or os.path.normpath(args.script)  # the test id: `./job.py` and `job.py` compare as one
    sink = api.Profile(name)
    failure: BaseException | None = None
    # The reports are written when the collection ends, maybe in the folder the script changed to: `report` is made
    # absolute for them; the summary names it as given, once the working directory is back.
    # sys.argv[0]: SCRIPT as typed, as python's; for -m runpy sets the module's full path, as `python -m` does
    with _as_main(script, [args.script if module is None else str(script), *args.args], module):
        try:
            with api.collecting(
                name, sink, rounds=rounds, warmup=warmup, report_dir=report.absolute(), thresholds=None, cpu=args.cpu
            ) as coll:
                coll.run_rounds(_round(script, module, code if module is None else None), rounds, warmup)
        except BaseException as e:  # the script's exception (KeyboardInterrupt too): report it, exit 1
            failure = e
    if sink.result is None and isinstance(failure, GpuBackendError):  # raised before the script started
        raise CliError(f"inferscope run: {failure}")
    if failure is not None:
        if isinstance(failure, SystemExit):
            status = failure.code
            print(status if isinstance(status, str) else f"{name} exited with status {status}", file=sys.stderr)
        else:
            tb = _script_frames(failure, script)
            print("".join(traceback.format_exception(type(failure), failure, tb)).rstrip(), file=sys.stderr)
    if sink.result is None:  # the analysis itself failed: nothing to summarise
        return EXIT_FAILED
    conclude(report, sink.result, "inferscope run")
    if failure is not None:
        print(
            f"inferscope run: {name} raised {type(failure).__name__}; the report is partial "
            "(it covers what ran before the exception).",
            file=sys.stderr,
        )
        return EXIT_FAILED
    return EXIT_OK
