"""Helpers of the event format (`events.py`) that every stage uses."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pytest_inferscope.events import EVENT_DTYPE, unique


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


def test_unique_leaves_numpy_ma_unloaded(numpy_imports_ma: bool) -> None:
    # np.unique's plain call imports numpy.ma on its first use (numpy 2.4), 10-30 ms a process
    if numpy_imports_ma:
        pytest.skip(f"numpy {np.__version__} loads numpy.ma when it is imported: nothing of ours can keep it out")
    code = (
        "import sys, numpy as np; from pytest_inferscope.events import unique; unique(np.arange(5) % 3); "
        "print('numpy.ma' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "False"


def test_records_are_copied_concatenated_and_put_as_bytes_with_every_field_kept() -> None:
    from pytest_inferscope.events import concat_events, copy_events, put_events

    rng = np.random.default_rng(0)
    a = np.zeros(9, dtype=EVENT_DTYPE)
    for name in EVENT_DTYPE.names or ():
        info = np.iinfo(EVENT_DTYPE[name])
        a[name] = rng.integers(info.min, info.max, size=len(a), dtype=EVENT_DTYPE[name], endpoint=True)
    c = copy_events(a)
    assert c.dtype == EVENT_DTYPE and (c == a).all() and not np.shares_memory(c, a)
    strided = a[::2]  # not contiguous: copied first
    assert (copy_events(strided) == strided).all()
    assert (concat_events([a[5:], strided, a[:0]]) == np.concatenate([a[5:], strided])).all()
    assert concat_events([]).dtype == EVENT_DTYPE and len(concat_events([])) == 0
    dest = np.zeros(12, dtype=EVENT_DTYPE)
    put_events(dest, 2, strided)
    assert (dest[2:7] == strided).all() and (dest[:2] == np.zeros(2, dtype=EVENT_DTYPE)).all()
    assert (dest[7:] == np.zeros(5, dtype=EVENT_DTYPE)).all()
    with pytest.raises(IndexError):
        put_events(dest, 8, strided)
    with pytest.raises(TypeError):
        copy_events(np.zeros(3, dtype=np.int64))
