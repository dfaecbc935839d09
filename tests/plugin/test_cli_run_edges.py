"""`inferscope run` at its edges: options without values, modules that raise on import, scripts that change the
working directory, paths with `..`, and what the script sees in sys.argv."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pytest_inferscope.cli import main


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


@pytest.mark.parametrize("option", ["--report", "--rounds", "--warmup", "--cpu"])
def test_an_option_without_its_value_is_named(work: Path, capsys: pytest.CaptureFixture[str], option: str) -> None:
    (work / "ok.py").write_text("open('ran', 'w').close()\n")
    err = usage_error(["run", "ok.py", option], capsys)
    assert err.startswith(f"inferscope run: {option} needs a value and is the last argument"), err
    assert not (work / "ran").exists()
    assert f"{option} needs a value" in usage_error(["run", option], capsys)
