"""An A/B run's two processes without address-space randomisation: pytest, started as a user starts it, executes
itself again with it off and the twin inherits that; the terminal, the exit status and the summary's note are the
run's own (docs/ab.md, "Each process's own speed")."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from gitrepo import child_env, pytest_cmd, two_commits

from pytest_inferscope.ab.layout import ADDR_NO_RANDOMIZE, layout_fixed

BODY = """
import os, pytest

def record():
    folder = os.environ["PERSONALITY_DIR"]
    side = "twin" if os.environ.get("INFERSCOPE_AB_TWIN") else "here"
    with open(os.path.join(folder, f"{side}-{os.getpid()}"), "w") as f:
        f.write(open("/proc/self/personality").read())

@pytest.mark.inferscope(rounds=3, warmup=1, max_regression="1000%")  # a file written: no latency to judge
def test_records():
    record()

@pytest.mark.inferscope(rounds=3, warmup=1)
def test_fails():
    assert 1 + 1 == 3
"""

_PROBE = (
    "import ctypes, sys; f = ctypes.CDLL(None).personality; f.argtypes = [ctypes.c_ulong]; "
    f"sys.exit(f(f(0xFFFFFFFF) | {ADDR_NO_RANDOMIZE}) == -1)"
)


def _cannot_show() -> str:
    """Why this machine cannot show the re-execution ('' where it can)."""
    if not sys.platform.startswith("linux"):
        return "Linux only"
    if layout_fixed():
        return "address-space randomisation is off here already (system-wide, or this process started so)"
    if subprocess.run([sys.executable, "-c", _PROBE], check=False).returncode != 0:
        return "personality(ADDR_NO_RANDOMIZE) is refused here (a container's seccomp profile)"
    return ""


_SHOWS = pytest.mark.skipif(bool(_cannot_show()), reason=_cannot_show() or "-")


def _run(tmp_path: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], dict[str, list[int]]]:
    root = tmp_path / "repo"
    root.mkdir()
    two_commits(root, BODY, BODY)
    folder = tmp_path / "personalities"
    folder.mkdir()
    proc = subprocess.run(
        pytest_cmd("--inferscope-ab=HEAD~1", *args), cwd=root, capture_output=True, text=True, timeout=300,
        env=child_env(PERSONALITY_DIR=str(folder), PYTHONHASHSEED="0", **env),
    )  # fmt: skip
    seen: dict[str, list[int]] = {"here": [], "twin": []}
    for path in folder.iterdir():
        seen[path.name.partition("-")[0]].append(int(path.read_text(), 16))
    return proc, seen


@_SHOWS
@pytest.mark.parametrize("xdist", [False, True])
def test_both_processes_run_without_randomisation(tmp_path: Path, xdist: bool) -> None:
    if xdist:
        pytest.importorskip("xdist")
    proc, seen = _run(tmp_path, *(["-n", "1"] if xdist else []), "--inferscope-ab-aslr=off")
    out = proc.stdout
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, out + proc.stderr
    assert "1 failed, 1 passed" in out, out  # the terminal is the executed-again process's, whole
    assert "address-space layout randomisation off in both processes (pytest executed itself again with it off)" in out
    assert len(seen["here"]) == 1 and len(seen["twin"]) == 1, seen
    assert all(p & ADDR_NO_RANDOMIZE for p in seen["here"] + seen["twin"]), seen


@_SHOWS
def test_kept_by_default(tmp_path: Path) -> None:
    proc, seen = _run(tmp_path)
    assert proc.returncode == pytest.ExitCode.TESTS_FAILED, proc.stdout + proc.stderr
    assert "randomisation on in both processes (the default; --inferscope-ab-aslr=off turns it off)" in proc.stdout
    assert seen["here"] and seen["twin"] and not any(p & ADDR_NO_RANDOMIZE for p in seen["here"] + seen["twin"])


def test_a_bad_value_is_a_usage_error(tmp_path: Path) -> None:
    """Said once, before any process starts (pytest_cmdline_main leaves it to pytest_configure)."""
    proc = subprocess.run(
        pytest_cmd("--inferscope-ab=HEAD~1", "--inferscope-ab-aslr=no"), cwd=tmp_path, capture_output=True,
        text=True, timeout=120, env=child_env(),
    )  # fmt: skip
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert proc.stderr.count("--inferscope-ab-aslr='no' is not one of the choices") == 1, proc.stderr
    assert "set the A/B processes' address-space randomisation to keep or off" in proc.stderr
