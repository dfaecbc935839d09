"""Shared test setup: GPU tests skip without a GPU unless INFERSCOPE_GPU=required, which makes them fail."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable

# numpy cannot be imported twice in one process, and pytester's inline runs drop modules first
# imported inside them from sys.modules. The plugin imports numpy only when it profiles, so
# import it here, in the test session itself, before any inline run does.
import numpy  # noqa: F401
import pytest


@pytest.fixture(scope="session")
def numpy_imports_ma() -> bool:
    """Whether `import numpy` alone loads numpy.ma (numpy 1.x does; numpy 2 loads it lazily), in a fresh process:
    where it does, no code of ours can keep numpy.ma out of a session that uses numpy."""
    code = "import sys, numpy; print('numpy.ma' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return out.strip() == "True"


@pytest.fixture(autouse=True)
def _no_inherited_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pytest run by a test (pytester's, or a subprocess given os.environ) sees no COLUMNS, as a CI log: its
    terminal summary table as wide as its rows.

    pytest loads GNU readline, which puts COLUMNS (80 where there is no terminal) in the process's own environment:
    an xdist worker starts with it in os.environ, and the table follows COLUMNS (reporters/terminal.py). A test that
    means a width sets it."""
    monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True)
def _driver_check_restored(monkeypatch: pytest.MonkeyPatch) -> None:
    """A test whose pytester conftest pretends a GPU driver (`pytest_inferscope.gpus.driver_missing = lambda: None`,
    there so that xdist workers see it too) ran that conftest in this process as well, and left the module so: every
    later test in the process saw a driver on a machine without one, and the no-GPU pin test skipped itself ("this
    machine has a GPU driver") in whichever worker had run one of them first. Put back after every test."""
    gpus = sys.modules.get("pytest_inferscope.gpus")  # (imported later: pytester's inline run drops it again)
    if gpus is not None:
        monkeypatch.setattr(gpus, "driver_missing", gpus.driver_missing)


def gpu_unavailable(needed: int = 1) -> str | None:
    """Why GPU tests needing `needed` GPUs can't run here, or None when they can."""
    if not any(os.path.exists(p) for p in ("/dev/nvidia0", "/proc/driver/nvidia/version")):
        return "no NVIDIA GPU on this machine"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return f"torch {torch.__version__} sees no CUDA device"
    if (count := torch.cuda.device_count()) < needed:
        return f"needs {needed} GPUs, torch sees {count}"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is None:
        return
    gpus = item.get_closest_marker("gpus")  # @pytest.mark.gpus(2): a test that needs that many GPUs
    reason = gpu_unavailable(int(gpus.args[0]) if gpus is not None else 1)
    if reason is None:
        return
    if os.environ.get("INFERSCOPE_GPU") == "required":
        pytest.fail(f"INFERSCOPE_GPU=required but the GPU tests cannot run: {reason}", pytrace=False)
    pytest.skip(f"GPU test: {reason} (set INFERSCOPE_GPU=required to make this a failure)")


#: The README's pipeline example needs these fixtures; tests that run it (or the docs' examples) write them
#: into their pytester project's conftest, with the stages' sleeps (seconds) filled in.
PIPELINE_STANDINS = """
import time
import pytest

class Pipeline:
    def preprocess(self, texts):
        time.sleep({preprocess_s})
        return [len(t) for t in texts]

    def forward(self, batch):
        time.sleep({forward_s})
        return sum(batch)

@pytest.fixture
def pipeline():
    return Pipeline()

@pytest.fixture
def texts():
    return ["a", "bb", "ccc"]
"""


@pytest.fixture
def pipeline_conftest() -> Callable[[float, float], str]:
    """The stand-ins above, given the preprocess and forward sleeps: a conftest's text, to extend."""
    return lambda preprocess_s, forward_s: PIPELINE_STANDINS.format(preprocess_s=preprocess_s, forward_s=forward_s)


@pytest.fixture
def every_round_in_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The schedule's timing judgement (rounds.in_step) made deterministic for the tests of exact call sequences: a
    loaded machine delays a 1 ms round past the 1 ms slack now and then, and one more trace round runs (CI, once)."""
    from pytest_inferscope.collectors import schedule

    monkeypatch.setattr(schedule, "in_step", lambda *_args, **_kw: True)
