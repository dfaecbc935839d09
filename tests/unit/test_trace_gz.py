"""trace.json.gz (the default trace format) and trace.json (--inferscope-trace-format=json): the same JSON, every
way a test's reports are written, the links that name the file, and no stale trace of the other format."""

from __future__ import annotations

import gzip
import itertools
import json
import re
import threading
import zlib
from pathlib import Path

import numpy as np
import pytest
from test_reporters import gpu_result, small_timeline

import pytest_inferscope.reporters.files as files_module
import pytest_inferscope.reporters.folder as reporters
import pytest_inferscope.reporters.trace as trace_module
from pytest_inferscope.reporters import ReportWriter, index_entry, trace_file, write_test_reports
from pytest_inferscope.reporters.files import GzipStream, ParallelGzipStream, atomic_write_gzip, open_target
from pytest_inferscope.reporters.junit import junit_properties

NODEID = "tests/perf/test_model.py::test_batch[cuda-8]"


def one_member(data: bytes) -> bytes:
    """The content of a gzip file that holds exactly one member (what Perfetto and chrome://tracing read)."""
    d = zlib.decompressobj(31)
    out = d.decompress(data)
    assert d.eof and not d.unused_data, "not exactly one gzip member"
    return out


def write(folder: Path, fmt: str, how: str) -> dict[str, str]:
    """One test's reports in `fmt`, written `how`: here (no writer), through the writer's helper, or as a big test."""
    if how == "writer":
        w = ReportWriter()
        try:
            files = write_test_reports(gpu_result(NODEID), small_timeline(), folder, writer=w, trace_format=fmt)
            assert w.wait() == []
        finally:
            w.close()
        return files
    return write_test_reports(gpu_result(NODEID), small_timeline(), folder, trace_format=fmt)


@pytest.fixture(params=["here", "writer", "big", "big-threads"])
def how(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param.startswith("big"):  # written on pytest's side, through the trace writer's thread
        monkeypatch.setattr(reporters, "THREAD_MIN_EVENTS", 1)
        monkeypatch.setattr(trace_module, "THREAD_MIN_EVENTS", 1)
        # gzipped on one thread, or in pieces on three (files.ParallelGzipStream), whatever this machine's cores
        monkeypatch.setattr(trace_module, "gzip_threads", lambda: 3 if request.param == "big-threads" else 1)
    return str(request.param)


def test_the_default_trace_is_one_gzip_member_of_the_plain_traces_json(tmp_path: Path, how: str) -> None:
    gz = write(tmp_path / "gz", "json.gz", how)
    plain = write(tmp_path / "plain", "json", how)
    slug = gz["md"].split("/")[0]
    assert gz["trace"] == f"{slug}/trace.json.gz" and plain["trace"] == f"{slug}/trace.json"
    plain_bytes = (tmp_path / "plain" / plain["trace"]).read_bytes()
    gz_bytes = (tmp_path / "gz" / gz["trace"]).read_bytes()
    assert gz_bytes[:2] == b"\x1f\x8b" and len(gz_bytes) < len(plain_bytes)
    assert one_member(gz_bytes) == plain_bytes  # byte for byte what the plain format writes
    assert json.loads(plain_bytes)["otherData"]["title"] == NODEID
    assert sorted(p.name for p in (tmp_path / "gz" / slug).iterdir() if p.name.startswith("trace")) == ["trace.json.gz"]
    assert not [p for p in (tmp_path / "gz" / slug).iterdir() if p.name.endswith(".tmp")]


def test_links_name_the_trace_file_of_the_format(tmp_path: Path) -> None:
    for fmt in ("json.gz", "json"):
        r = gpu_result(NODEID)
        files = write_test_reports(r, small_timeline(), tmp_path / fmt, trace_format=fmt)
        name = f"trace.{fmt}"
        folder = tmp_path / fmt / r.slug
        assert json.loads((folder / "report.json").read_text())["files"]["trace"] == f"{r.slug}/{name}"
        assert index_entry(r)["files"]["trace"] == f"{r.slug}/{name}"
        html = (folder / "report.html").read_text()
        assert f'<a href="{name}" title="open in ui.perfetto.dev or chrome://tracing">{name}</a>' in html
        assert f"2 more (all in [{name}]({name}))" in (folder / "report.md").read_text()
        assert dict(junit_properties(r, tmp_path / fmt))["inferscope.trace"] == str(tmp_path / fmt / files["trace"])


@pytest.mark.parametrize("first,then", [("json", "json.gz"), ("json.gz", "json")])
def test_a_rerun_in_the_other_format_leaves_no_stale_trace(tmp_path: Path, how: str, first: str, then: str) -> None:
    files = write(tmp_path, first, how)
    folder = tmp_path / files["md"].split("/")[0]
    (folder / "notes.txt").write_text("mine")  # not ours: kept
    (tmp_path / "trace.json").write_text("{}")  # outside the test's folder: kept
    (tmp_path / "trace.json.gz").write_bytes(b"")
    write(tmp_path, then, how)
    assert sorted(p.name for p in folder.iterdir() if p.name.startswith("trace")) == [trace_file(then)]
    assert (folder / "notes.txt").read_text() == "mine"
    assert (tmp_path / "trace.json").is_file() and (tmp_path / "trace.json.gz").is_file()


def test_a_test_without_a_trace_now_keeps_none_from_an_earlier_run(tmp_path: Path) -> None:
    r = gpu_result(NODEID)
    write_test_reports(r, small_timeline(), tmp_path)
    w = ReportWriter()
    try:
        assert "trace" not in write_test_reports(gpu_result(NODEID), None, tmp_path, writer=w)
        assert w.wait() == []
    finally:
        w.close()
    assert not list((tmp_path / r.slug).glob("trace*")) and (tmp_path / r.slug / "report.json").is_file()


def test_a_bad_trace_format_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("trace format 'zip': give one of json.gz, json")):
        trace_file("zip")
    from typing import get_args

    from pytest_inferscope.options import OPTIONS_BY_NAME, TraceFormat

    assert get_args(TraceFormat) == reporters.TRACE_FORMATS == OPTIONS_BY_NAME["trace_format"].choices
    assert OPTIONS_BY_NAME["trace_format"].default == "json.gz"


class _Sink:
    """Where a gzip stream writes: the parts kept in memory."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def write(self, b: bytes) -> None:
        self.parts.append(bytes(b))


def test_gzip_stream_and_atomic_write_gzip_write_one_member(tmp_path: Path) -> None:
    data = bytes(range(256)) * 10_000  # 2.4 MiB: three chunks
    calls = []
    atomic_write_gzip(tmp_path / "a.gz", data, lambda: calls.append(1))
    assert len(calls) == 3  # the helper's pause point, after each MiB
    assert one_member((tmp_path / "a.gz").read_bytes()) == data == gzip.decompress((tmp_path / "a.gz").read_bytes())

    sink = _Sink()
    z = GzipStream(sink)
    for i in range(0, len(data), 7_000):
        z.write(memoryview(data)[i : i + 7_000])
    z.close()
    assert one_member(b"".join(sink.parts)) == data
    assert [p.name for p in tmp_path.iterdir()] == ["a.gz"]  # no temporary file left


def _parallel(blocks: list[bytes], threads: int) -> bytes:
    sink = _Sink()
    z = ParallelGzipStream(sink, threads)
    for b in blocks:
        z.write(b)
    z.close()
    return b"".join(sink.parts)


def test_the_parallel_gzip_stream_writes_one_member_the_same_for_any_threads_and_writes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(files_module, "_PIECE", 40_000)  # many pieces, some shorter than the 32 KiB window before them
    data = b"".join(b'{"ph":"X","ts":%d,"name":"kernel %d"},\n' % (i, i % 53) for i in range(40_000))
    cuts = [0, 1, 2, 39_999, 40_000, 40_001, 123_457, 500_000, 500_003, len(data)]
    split = [data[a:b] for a, b in itertools.pairwise(cuts)]
    one_block = _parallel([data], 1)
    assert one_member(one_block) == data == gzip.decompress(one_block)
    assert _parallel(split, 2) == _parallel([data], 4) == one_block  # pieces cut at fixed offsets of the stream
    assert len(one_block) < len(data) // 5  # each piece refers back into the one before: it compresses as one stream
    assert one_member(_parallel([], 2)) == b"" and one_member(_parallel([b"x"], 2)) == b"x"
    rows = np.arange(60_000, dtype=np.uint32).reshape(-1, 3)  # the trace writer's blocks: 2-D arrays of uint32
    assert one_member(_parallel([memoryview(rows)], 3)) == rows.tobytes()


def test_a_failed_parallel_gzip_leaves_no_file_and_no_thread(tmp_path: Path) -> None:
    before = {t.name for t in threading.enumerate()}
    with pytest.raises(RuntimeError, match="formatting failed"), open_target(tmp_path / "t.json.gz", compress=True,
                                                                               threads=3) as f:  # fmt: skip
        f.write(b"x" * (5 << 20))
        raise RuntimeError("formatting failed")
    assert list(tmp_path.iterdir()) == []
    assert {t.name for t in threading.enumerate()} <= before
