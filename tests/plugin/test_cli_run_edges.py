"""`inferscope run` at its edges: options without values, modules that raise on import, scripts that change the
working directory, paths with `..`, and what the script sees in sys.argv."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_cli_inputs import usage_error

from pytest_inferscope.cli import main


@pytest.mark.parametrize("option", ["--report", "--rounds", "--warmup", "--cpu"])
def test_an_option_without_its_value_is_named(work: Path, capsys: pytest.CaptureFixture[str], option: str) -> None:
    (work / "ok.py").write_text("open('ran', 'w').close()\n")
    err = usage_error(["run", "ok.py", option], capsys)
    assert err.startswith(f"inferscope run: {option} needs a value and is the last argument"), err
    assert not (work / "ran").exists()
    assert f"{option} needs a value" in usage_error(["run", option], capsys)


RAISING = """
def helper():
    raise ValueError("boom in helper")

helper()
"""


def test_the_scripts_frames_are_shown_however_its_path_is_spelled(
    work: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`..` in the path, or a symlinked folder before it: the script that runs is the one `python PATH` runs, and
    the traceback has its frames (and only those), under its folder's real path."""
    (work / "sub").mkdir()
    (work / "deep" / "er").mkdir(parents=True)
    (work / "deep" / "raise.py").write_text(RAISING)
    (work / "sub" / "link").symlink_to(work / "deep" / "er")
    monkeypatch.chdir(work / "sub")
    real = Path(os.path.realpath(work / "deep" / "raise.py"))
    for given in ("../deep/raise.py", "link/../raise.py"):  # link/.. is deep/, not sub/
        assert main(["run", given, "--report", str(work / "out")]) == 1, given
        err = capsys.readouterr().err
        assert f'File "{real}", line 3, in helper' in err, err
        assert 'raise ValueError("boom in helper")' in err and "runpy" not in err and "cli/run.py" not in err, err


def test_a_symlinked_script_imports_from_its_real_folder_as_python_does(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (work / "lib").mkdir()
    (work / "lib" / "helper.py").write_text("NAME = 'beside the real file'\n")
    (work / "lib" / "job.py").write_text("import helper\nprint(helper.NAME)\n")
    (work / "job.py").symlink_to(work / "lib" / "job.py")
    assert main(["run", "job.py", "--report", "out"]) == 0
    assert "beside the real file" in capsys.readouterr().out


SEES = """
import json, pickle, sys

class Point:
    pass

assert pickle.loads(pickle.dumps(Point())).__class__.__name__ == "Point"  # found in sys.modules["__main__"]
with open(OUT, "w") as f:
    json.dump({"argv": sys.argv, "name": __name__, "main": sys.modules["__main__"].__dict__ is globals()}, f)
"""


def test_the_script_sees_sys_argv_as_typed_as_python_sets_it(work: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`python ../job.py a` gives the script sys.argv == ['../job.py', 'a']; `python -m pkg.job a` gives
    ['/full/path/pkg/job.py', 'a']."""
    import json

    out = work / "seen.json"
    (work / "pkg").mkdir()
    (work / "pkg" / "__init__.py").write_text("")
    (work / "pkg" / "job.py").write_text(f"OUT = {str(out)!r}\n" + SEES)
    (work / "sub").mkdir()
    monkeypatch.chdir(work / "sub")
    assert main(["run", "../pkg/job.py", "a", "--report", "out"]) == 0
    assert json.loads(out.read_text()) == {"argv": ["../pkg/job.py", "a"], "name": "__main__", "main": True}
    monkeypatch.chdir(work)
    assert main(["run", "-m", "pkg.job", "a", "--report", "out"]) == 0
    assert json.loads(out.read_text())["argv"] == [str(work / "pkg" / "job.py"), "a"]


def test_a_script_that_changes_directory_gets_its_report_where_asked(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The report goes to --report as given from the working directory of the command, each run starts there,
    and the command is back there afterwards."""
    (work / "elsewhere").mkdir()
    (work / "cd.py").write_text("import os\nos.chdir('elsewhere')\n")
    assert main(["run", "cd.py", "--rounds", "2", "--report", "out"]) == 0
    assert Path.cwd() == work
    assert (work / "out" / "index.json").is_file() and not (work / "elsewhere" / "out").exists()
    out = capsys.readouterr().out
    assert f"report:         {Path('out') / 'cd.py' / 'report.md'}" in out and (work / "out" / "cd.py").is_dir()


def test_a_package_raising_on_import_is_the_scripts_exception_as_under_python_m(
    work: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m badpkg.mod` whose badpkg/__init__.py raises shows that traceback and exits 1; so does `inferscope
    run`, with a partial report, and the __init__ runs once, inside the round."""
    from pytest_inferscope.reporters import load_report

    (work / "badpkg").mkdir()
    (work / "badpkg" / "__init__.py").write_text("open('inits', 'a').write('x')\nraise RuntimeError('init boom')\n")
    (work / "badpkg" / "mod.py").write_text("print('never')\n")
    (work / "badpkg" / "__main__.py").write_text("print('never')\n")
    for module in ("badpkg.mod", "badpkg"):
        (work / "inits").unlink(missing_ok=True)
        assert main(["run", "-m", module, "--report", "out"]) == 1
        err = capsys.readouterr().err
        assert f'File "{work / "badpkg" / "__init__.py"}", line 2, in <module>' in err, err
        assert "RuntimeError: init boom" in err and "runpy" not in err and "importlib" not in err, err
        assert f"inferscope run: {module} raised RuntimeError; the report is partial" in err, err
        assert (work / "inits").read_text() == "x"
        assert load_report(work / "out" / module / "report.json").partial_reason == "RuntimeError: init boom"
    assert "is not a module name" in usage_error(["run", "-m", ".badpkg"], capsys)
    # Not in the package's folder: only importing it could tell (it may extend its __path__), and that raises.
    err = usage_error(["run", "-m", "badpkg.missing"], capsys)
    assert "cannot find module 'badpkg.missing': importing its package 'badpkg' raised RuntimeError: init boom" in err


def test_a_script_that_closes_stdout_still_gets_its_summary(work: Path) -> None:
    # `python -m json.tool FILE` closes its output, which is sys.stdout, when done: the summary's print raised
    # "I/O operation on closed file".
    import subprocess
    import sys

    (work / "shut.py").write_text("import sys\nprint('from the script')\nsys.stdout.close()\n")
    cli = "from pytest_inferscope.cli import main; raise SystemExit(main())"
    done = subprocess.run(
        [sys.executable, "-c", cli, "run", "shut.py"], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("from the script\n") and "report:" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr


def test_run_help_says_where_the_defaults_come_from(capsys: pytest.CaptureFixture[str]) -> None:
    # It said "(default 1)" for --rounds, which INFERSCOPE_ROUNDS or the config file's rounds: changes, as they do
    # --warmup and --cpu; --report named INFERSCOPE_REPORT but not the config file.
    assert main(["run", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    options = [
        ("--report DIR", "report", "inferscope-report"),
        ("--rounds N", "rounds", "1"),
        ("--warmup W", "warmup", "0"),
        ("--cpu {sample,trace,off}", "cpu", "sample"),
    ]
    for option, setting, default in options:
        said = f"(default: INFERSCOPE_{setting.upper()} or the config file's {setting}:, else {default})"
        assert f"{option} " in out and said in out.split(f"{option} ", 1)[1].split(" --", 1)[0], (option, out)


@pytest.mark.parametrize("as_module", [False, True])
def test_a_script_that_does_not_compile_runs_in_no_round_and_writes_no_report(
    work: Path, capsys: pytest.CaptureFixture[str], as_module: bool
) -> None:
    # It wrote a partial report of the compile with a bottleneck and a top suggestion ("Batch or vectorise the
    # per-item Python work") for a script that never ran.
    (work / "typo.py").write_text("open('ran', 'w').close()\nprint('x'\n")
    argv = ["run", "-m", "typo"] if as_module else ["run", "typo.py"]
    assert main([*argv, "--rounds", "3", "--report", "out"]) == 1
    err = capsys.readouterr().err
    assert 'typo.py", line 2' in err and "SyntaxError: " in err and "Traceback" not in err, err
    shown = "typo.py (-m typo)" if as_module else "typo.py"
    assert err.rstrip().endswith(
        f"inferscope run: {shown} does not compile (SyntaxError), so it ran in no round and no report is written; "
        "fix it and run again."
    ), err
    assert not (work / "ran").exists() and not (work / "out").exists()


def test_the_top_help_says_the_exit_codes_once(capsys: pytest.CaptureFixture[str]) -> None:
    # The module's docstring, its description, said them as a paragraph above the "exit codes:" table.
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.lower().count("exit codes") == 1 and "exit codes:\n  0  ok" in out, out
