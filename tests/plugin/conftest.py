"""Fixtures the plugin's and the CLI's tests share."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder with no INFERSCOPE_* settings from the environment."""
    for key in list(os.environ):
        if key.startswith("INFERSCOPE_") or key == "PYTEST_ADDOPTS":
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)
    return tmp_path
