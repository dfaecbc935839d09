"""What the twin is given of this run's options: PYTEST_ADDOPTS and the ref's ini `addopts` filtered as the command
line is, and the options of the plugins the twin runs without dropped, so that none stops it (docs/ab.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

BODY = """
import os, time, pytest

@pytest.fixture(scope="session")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("data")
    (d / "model.bin").write_text(str(os.getpid()))
    return d

def test_aaa_makes_data(data_dir):
    assert (data_dir / "model.bin").exists()

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_zzz_reads(data_dir):
    time.sleep(0.001)
    assert (data_dir / "model.bin").read_text() == str(os.getpid())  # this process's, not the twin's
"""


def git(where: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=where, check=True, capture_output=True)


def make_repo(pytester: pytest.Pytester, ini: str = "[pytest]\n") -> Path:
    root = pytester.path
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "test_x.py").write_text(BODY)
    (root / "pytest.ini").write_text(ini)
    git(root, "add", "test_x.py", "pytest.ini")
    git(root, "commit", "-qm", "first")
    (root / "test_x.py").write_text(BODY + "# second\n")
    git(root, "commit", "-qam", "second")
    return root


def test_pytest_addopts_junitxml_and_basetemp_stay_this_sides(pytester: pytest.Pytester) -> None:
    """With --junitxml in PYTEST_ADDOPTS the twin wrote its own JUnit XML over this side's after it (no A/B verdict in
    it: CI read green for a regression); with --basetemp, it wiped this side's temporary folder mid-run."""
    root = make_repo(pytester)
    junit, basetemp = root.parent / "junit.xml", root.parent / "bt"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(PYTHONPATH=os.pathsep.join(sys.path), PYTEST_ADDOPTS=f"--junitxml={junit} --basetemp={basetemp}")
    cmd = [sys.executable, "-m", "pytest", "-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1"]
    proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    props = {p.get("name"): p.get("value") for p in ET.parse(junit).iter("property")}
    assert props.get("inferscope.ab.ref", "").startswith("HEAD~1")


def test_options_of_the_plugins_the_twin_runs_without(pytester: pytest.Pytester) -> None:
    """The twin runs with `-p no:xdist -p no:cacheprovider` (stepwise goes with the cache): their options, here, in
    PYTEST_ADDOPTS or in the ref's ini addopts, made it stop with "unrecognized arguments"."""
    xdist = pytest.importorskip("xdist")
    assert xdist
    make_repo(pytester, ini="[pytest]\naddopts = -n 1 --sw-skip\n")
    pytester._monkeypatch.setenv("PYTEST_ADDOPTS", "--maxschedchunk=1 --nf")
    reset = ["--stepwise-reset"] if pytest.version_tuple[:2] >= (8, 4) else []  # (pytest 8.4 added it)
    result = pytester.runpytest(
        "-p", "no:randomly", "--inferscope-ab=HEAD~1", "--cache-clear", "--lfnf=all", *reset,
        "--max-worker-restart=0", "--no-loadscope-reorder",
    )  # fmt: skip
    result.assert_outcomes(passed=2)
    row = next(line for line in result.outlines if line.startswith("test_x.py::test_zzz_reads"))
    assert "unchanged" in row or "inconclusive" in row


def test_the_refs_ini_addopts_n_alone(pytester: pytest.Pytester) -> None:
    """`addopts = -n 2` in the ref's pytest.ini only (this checkout's has none): the twin drops it too."""
    pytest.importorskip("xdist")
    root = make_repo(pytester, ini="[pytest]\naddopts = -n 2\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    git(root, "commit", "-qam", "no addopts")
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~2")
    result.assert_outcomes(passed=2)
    assert "vs HEAD~2" in result.stdout.str()


@pytest.mark.parametrize("how", ["ab", "ab-python, save from the environment"])
def test_saving_a_baseline_from_an_ab_run_is_refused(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, how: str
) -> None:
    """An A/B run's rounds take turns with the twin's on one pinned core: saved as a baseline, they became the entry a
    plain run's --inferscope-compare judged against, with nothing saying so. Refused before anything is made."""
    root = make_repo(pytester)
    tmp = tmp_path_factory.mktemp("tmpdir")
    pytester._monkeypatch.setenv("TMPDIR", str(tmp))
    if how == "ab":
        args, named = ["--inferscope-ab=HEAD~1", "--inferscope-save-baseline=main"], "--inferscope-ab=HEAD~1"
        given = "--inferscope-save-baseline=main"
    else:
        pytester._monkeypatch.setenv("INFERSCOPE_SAVE_BASELINE", "main")
        args = [f"--inferscope-ab-python={sys.executable}"]
        named, given = args[0], "--inferscope-save-baseline=main (from env INFERSCOPE_SAVE_BASELINE)"
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = " ".join(result.stderr.str().split())
    assert f"{given} cannot be combined with {named}" in err, err
    assert "paced" in err and "Save the baseline in a run without" in err
    result.stdout.no_fnmatch_line("*passed*")  # before any test ran
    assert not (root / ".inferscope").exists()  # no baseline folder, no file
    assert list(tmp.iterdir()) == []  # no worktree folder, no twin log
    out = subprocess.run(["git", "worktree", "list"], cwd=root, capture_output=True, text=True, check=True).stdout
    assert len(out.strip().splitlines()) == 1


def test_the_refs_ini_switching_the_plugin_off(pytester: pytest.Pytester) -> None:
    """`addopts = -p no:inferscope` in the ref's pytest.ini only: the twin ran the whole suite there without the plugin,
    and the run stopped with "the twin ... exited with status 0". The A/B needs the plugin on both sides: the twin is
    given it back."""
    root = make_repo(pytester, ini="[pytest]\naddopts = -p no:inferscope\n")
    (root / "pytest.ini").write_text("[pytest]\n")
    git(root, "commit", "-qam", "plugin on")
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~2")
    result.assert_outcomes(passed=2)
    row = next(line for line in result.outlines if line.startswith("test_x.py::test_zzz_reads"))
    assert "unchanged" in row or "inconclusive" in row, row  # compared, not `new`


def test_a_ref_whose_own_pytest_inferscope_predates_ab(pytester: pytest.Pytester) -> None:
    """The repository's own pytest_inferscope at the ref (the twin imports it: the worktree comes first on its
    PYTHONPATH) has no twin: the twin ran the tests as a plain run, and the error said only "exited with status 0"."""
    root = make_repo(pytester)
    (root / "pytest_inferscope").mkdir()
    (root / "pytest_inferscope" / "__init__.py").write_text("")
    (root / "pytest_inferscope" / "plugin.py").write_text("")  # a plugin without the A/B twin
    git(root, "add", "pytest_inferscope")
    git(root, "commit", "-qm", "an old plugin")
    git(root, "rm", "-rq", "pytest_inferscope")
    git(root, "commit", "-qm", "gone")
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = " ".join(result.stderr.str().split())
    assert "ran the tests as a plain pytest run" in err, err
    assert "the repository's own pytest_inferscope at HEAD~1" in err, err
    result.stdout.no_fnmatch_line("*passed*")


@pytest.mark.parametrize("flag", ["--collect-only", "--setup-only"])
def test_collect_only_starts_no_worktree_and_no_twin(
    pytester: pytest.Pytester, tmp_path_factory: pytest.TempPathFactory, flag: str
) -> None:
    """With --collect-only (or --setup-only: no test body runs) the A/B run made the worktree and started a twin, which
    collected the tests at the ref for nothing, and went: seconds lost on a listing."""
    import shutil

    root = make_repo(pytester)
    (root / "conftest.py").write_text("import os\nopen(os.environ['TWIN_MARK'], 'a').write('here\\n')\n")
    git(root, "add", "conftest.py")
    git(root, "commit", "-qm", "a conftest that says it ran")
    git(root, "rm", "-q", "conftest.py")
    git(root, "commit", "-qm", "gone")
    here = tmp_path_factory.mktemp("spies")
    bin_dir, calls, mark = here / "bin", here / "git-calls", here / "twin-mark"
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\necho "$@" >> {calls}\nexec {shutil.which("git")} "$@"\n')
    (bin_dir / "git").chmod(0o755)
    pytester._monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    pytester._monkeypatch.setenv("TWIN_MARK", str(mark))
    result = pytester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1", flag)
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert not mark.exists(), "a twin ran"
    assert "worktree" not in (calls.read_text() if calls.exists() else ""), calls.read_text()
    result.stdout.no_fnmatch_line("*inferscope A/B*")


@pytest.mark.parametrize("given", ["cli", "env", "auto"])
def test_the_speed_probe_asked_for_is_said_not_to_run(pytester: pytest.Pytester, given: str) -> None:
    """`--inferscope-speed-probe=on` with --inferscope-ab: the probe does not run in an A/B run, and nothing said so; an
    explicit `on` is now answered with a line in the summary. `auto` (the default) stays silent."""
    make_repo(pytester)
    args = ["-p", "no:randomly", "-p", "no:cacheprovider", "--inferscope-ab=HEAD~1"]
    if given == "cli":
        args.append("--inferscope-speed-probe=on")
    elif given == "env":
        pytester._monkeypatch.setenv("INFERSCOPE_SPEED_PROBE", "on")
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=2)
    out = " ".join(result.stdout.str().split())
    if given == "auto":
        assert "speed-probe" not in out and "speed probe" not in out, out
        return
    named = "--inferscope-speed-probe=on" + (" (from env INFERSCOPE_SPEED_PROBE)" if given == "env" else "")
    assert f"inferscope A/B: the speed probe did not run, though {named} asked for it: " in out, out
    assert "the pairing is the defence against drift" in out
