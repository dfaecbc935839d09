"""Helpers of the event format (`events.py`) that every stage uses."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pytest_inferscope.events import unique


@pytest.mark.parametrize(
    "a",
    [
        np.array([], dtype=np.int64),
        np.array([7], dtype=np.int32),
        np.array([3, 1, 3, 3, -2, 1], dtype=np.int64),
        np.random.default_rng(0).integers(-50, 50, 1000),
        np.random.default_rng(1).integers(0, 4, 200).astype(np.uint8),
        np.array([0.5, 0.25, 0.5, 1e-9, 0.25]),
    ],
)
def test_unique_gives_what_np_unique_gives(a: np.ndarray) -> None:
    got, want = unique(a), np.unique(a)
    assert got.dtype == want.dtype and got.tolist() == want.tolist()


def test_unique_leaves_numpy_ma_unloaded() -> None:
    # np.unique's plain call imports numpy.ma on its first use (numpy 2.4), 10-30 ms a process
    code = (
        "import sys, numpy as np; from pytest_inferscope.events import unique; unique(np.arange(5) % 3); "
        "print('numpy.ma' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"
