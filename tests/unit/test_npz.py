"""The in-memory .npz writer (`reporters/npz.py`) against numpy's: the same members, read back the same."""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import numpy as np
import pytest

from pytest_inferscope.events import EVENT_DTYPE, Kind, RawTrace
from pytest_inferscope.reporters.folder import _raw_bytes
from pytest_inferscope.reporters.npz import npy_bytes, npz_bytes


def a_trace(n: int) -> RawTrace:
    events = np.zeros(n, dtype=EVENT_DTYPE)
    events["start"] = np.arange(n) * 1_000
    events["end"] = events["start"] + 500
    events["kind"] = Kind.ROUND
    events["name"] = np.arange(n) % 3
    return RawTrace(
        events=events,
        strings=["round 0", "naïve · ünïcode", "x" * 300],
        attrs=[{"step": 1, "label": "é"}],
        clock_pairs=[(1, 2), (3, 4)],
        dropped=5,
        t0_ns=123_456_789,
        meta={"plan": {"nodeid": "t.py::test_0", "rounds": 3}, "rounds": [{"wall_ns": 8002}]},
    )


def numpy_npz(raw: RawTrace, compress: bool) -> bytes:
    buf = io.BytesIO()
    raw.save(buf, compress=compress)
    return buf.getvalue()


@pytest.mark.parametrize("compress", [True, False])
@pytest.mark.parametrize("n", [0, 1, 4, 700, 5000])
def test_the_archive_has_numpys_members_and_loads_the_same(n: int, compress: bool) -> None:
    raw = a_trace(n)
    ours, theirs = npz_bytes(raw.arrays(), compress), numpy_npz(raw, compress)
    with zipfile.ZipFile(io.BytesIO(ours)) as z, zipfile.ZipFile(io.BytesIO(theirs)) as ref:
        assert z.testzip() is None
        assert z.namelist() == ref.namelist()  # events.npy, strings.npy, ...
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED}
        for name in ref.namelist():
            assert z.read(name) == ref.read(name), name  # the .npy files, byte for byte
        # Deflated with a smaller window and tables (set up faster), and no larger for it.
        assert sum(i.compress_size for i in z.infolist()) <= sum(i.compress_size for i in ref.infolist())
    a, b = RawTrace.load(io.BytesIO(ours)), RawTrace.load(io.BytesIO(theirs))
    assert a.events.dtype == b.events.dtype and a.events.tobytes() == b.events.tobytes()
    assert (a.strings, a.attrs, a.clock_pairs, a.dropped, a.t0_ns, a.meta) == (
        b.strings, b.attrs, b.clock_pairs, b.dropped, b.t0_ns, b.meta,
    )  # fmt: skip
    with np.load(io.BytesIO(ours)) as z:  # numpy's own reader sees the same arrays
        assert sorted(z.files) == sorted(raw.arrays())


def test_npy_bytes_is_what_numpy_saves() -> None:
    arrays = [
        np.arange(5, dtype=np.int64),
        np.zeros((0, 2), np.int64),
        np.arange(6, dtype=np.int64).reshape(3, 2),
        np.zeros(3, EVENT_DTYPE),
        np.zeros(0, EVENT_DTYPE),
        np.zeros(0, np.uint8),
        np.zeros(1_234_567, np.uint8),
        np.arange(6.0)[::2],  # not contiguous
        np.array(7, dtype=np.int32),  # no shape
    ]
    for arr in arrays:
        buf = io.BytesIO()
        np.save(buf, arr, allow_pickle=False)
        assert npy_bytes(arr) == buf.getvalue(), (arr.dtype, arr.shape)


def test_a_small_tests_raw_npz_is_built_by_it() -> None:
    raw = a_trace(4)
    data = _raw_bytes(raw)
    # The first member's local header: its extra field's length (numpy forces zip64 extras; npz_bytes has none).
    assert struct.unpack_from("<H", numpy_npz(raw, True), 28)[0] > 0
    assert struct.unpack_from("<H", data, 28)[0] == 0
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert {i.compress_type for i in z.infolist()} == {zipfile.ZIP_DEFLATED}
    assert RawTrace.load(io.BytesIO(data)).meta == raw.meta


@pytest.mark.parametrize("n", [4, 60_000])  # built in memory below THREAD_MIN_EVENTS; streamed by RawTrace.save above
def test_raw_npz_written_without_the_writer_loads_the_same(
    n: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import time

    from pytest_inferscope.reporters import npz
    from pytest_inferscope.reporters.folder import _save_raw
    from pytest_inferscope.reporters.trace import THREAD_MIN_EVENTS

    # The members carry the time they were written, to 2 s: the two archives compared below are made at one time
    # (a CI run once wrote them on either side of a 2 s step, and their bytes differed there).
    now = time.localtime()
    monkeypatch.setattr(npz, "time", type("FrozenTime", (), {"localtime": staticmethod(lambda: now)}))
    raw = a_trace(n)
    _save_raw(raw, tmp_path / "raw.npz")
    back = RawTrace.load(str(tmp_path / "raw.npz"))
    assert np.array_equal(back.events, raw.events) and back.strings == raw.strings and back.meta == raw.meta
    small = n < THREAD_MIN_EVENTS
    assert ((tmp_path / "raw.npz").read_bytes() == _raw_bytes(raw)) is small  # npz_bytes' archive: no zip64 extras


def test_no_marks_and_no_clock_pairs_are_no_members_and_older_files_with_them_load() -> None:
    """A CPU-only test has neither: two empty members cost ~340 of a trivial test's 2 kB raw.npz (issue 16)."""
    raw = a_trace(3)
    raw.attrs, raw.clock_pairs = [], []
    data = _raw_bytes(raw)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert z.namelist() == ["events.npy", "strings.npy", "meta.npy", "info.npy"]
    back = RawTrace.load(io.BytesIO(data))
    assert (back.attrs, back.clock_pairs, back.strings, back.meta) == ([], [], raw.strings, raw.meta)
    # As written before: the empty members there.
    empty = {"attrs": np.frombuffer(b"[]", np.uint8), "clock_pairs": np.zeros((0, 2), np.int64)}
    older = npz_bytes(raw.arrays() | empty)
    back = RawTrace.load(io.BytesIO(older))
    assert (back.attrs, back.clock_pairs) == ([], [])
    assert len(data) < len(older) - 250
