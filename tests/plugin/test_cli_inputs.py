"""`inferscope` given the wrong input: every mistake is one paragraph naming the input and what to give instead."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_inferscope.cli import main

KINETO = Path(__file__).parent.parent / "data" / "kineto"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder with no INFERSCOPE_* settings from the environment."""
    for key in list(os.environ):
        if key.startswith("INFERSCOPE_") or key == "PYTEST_ADDOPTS":
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run `inferscope ARGV`, check it is a one-paragraph usage error (exit 2), and return the paragraph."""
    assert main(argv) == 2, argv
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err


@pytest.mark.parametrize("command", ["run", "analyze"])
def test_an_empty_report_folder_is_rejected_as_pytest_does(
    work: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    (work / "ok.py").write_text("open('ran', 'w').close()\n")
    given = "ok.py" if command == "run" else str(KINETO / "gpu_steps.json")
    for argv in ([command, given, "--report="], [command, given, "--report", " "]):
        err = usage_error(argv, capsys)
        assert "argument --report: " in err and "is empty: give a folder path, e.g. --report out" in err, err
    assert not (work / "ran").exists() and not (work / "inferscope-report").exists()
