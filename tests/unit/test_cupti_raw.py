"""CUPTI's buffers read raw through ctypes (cupti_raw.py) for the cupti-python backend, without a GPU.

The records are test_native.py's ctypes mirrors of CUDA 13.0's structs (checked there against the header), laid
out in a buffer as CUPTI lays them out. libcupti's own `cuptiActivityGetNextRecord` walks the buffer, as it walks
CUPTI's buffers, and the rows must be the native decoder's, names included. The record dtypes are made from the
mirrors under cupti-python's field names; where cupti-python itself imports, its own dtypes and record objects are
checked too.
"""

from __future__ import annotations

import ctypes
import re
import shutil
import subprocess
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
from test_gpu_cuptipy import FakeCupti, _callback_name
from test_native import (
    MEMCPY2,
    MIRRORS,
    Api,
    Kernel10,
    Memcpy6,
    MemcpyPtoP4,
    Memory4,
    Memset4,
    Overhead3,
    Synchronization2,
    _buffer,
    _events,
    every_record,
)

from pytest_inferscope.collectors import cupti_raw
from pytest_inferscope.collectors.cupti_columns import add_raw
from pytest_inferscope.collectors.cupti_raw import OBJECTS_ENV, RawActivity, open_raw
from pytest_inferscope.collectors.cupti_records import RAW_DTYPES, Demangler, RecordConverter, RecordViews
from pytest_inferscope.collectors.gpu_cuptipy import FLUSH_FORCED, CuptiPythonCollector
from pytest_inferscope.events import CopyKind, Kind, MemoryKind

OBJECT_ID = np.dtype(
    {
        "names": ["pt", "dcs"],
        "formats": [
            np.dtype([("process_id", "<u4"), ("thread_id", "<u4")]),
            np.dtype([("device_id", "<u4"), ("context_id", "<u4"), ("stream_id", "<u4")]),
        ],
        "offsets": [0, 0],
        "itemsize": 12,
    }
)
DTYPE_OF = {  # cupti-python's dtype name for each mirror (cupti_records.RAW_DTYPES)
    Kernel10: "activity_kernel10_dtype", Memcpy6: "activity_memcpy6_dtype",
    MemcpyPtoP4: "activity_memcpy_pto_p4_dtype", Memset4: "activity_memset4_dtype", Api: "activity_api_dtype",
    Synchronization2: "activity_synchronization2_dtype", Memory4: "activity_memory4_dtype",
    Overhead3: "activity_overhead3_dtype",
}  # fmt: skip


def _snake(name: str) -> str:
    """correlationId -> correlation_id, as cupti-python names CUPTI's fields."""
    return re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()


def mirror_dtype(mirror: type[ctypes.Structure]) -> np.dtype:
    """A mirror's layout as cupti-python's record dtype: snake_case names, pointers as integers, the union nested."""
    names: list[str] = []
    formats: list[np.dtype[Any]] = []
    offsets: list[int] = []
    for field, ctype in mirror._fields_:  # type: ignore[misc]
        names.append(_snake(field))
        if field == "objectId":
            formats.append(OBJECT_ID)
        elif ctype in (ctypes.c_char_p, ctypes.c_void_p):
            formats.append(np.dtype("<u8"))
        else:
            formats.append(np.dtype(ctype))
        offsets.append(getattr(mirror, field).offset)
    spec = {"names": names, "formats": formats, "offsets": offsets, "itemsize": ctypes.sizeof(mirror)}
    return np.dtype(spec)  # type: ignore[call-overload]


def mirror_module() -> SimpleNamespace:
    """What the converter needs of `cupti.cupti`: the record dtypes, and the calls' names."""
    return SimpleNamespace(get_callback_name=_callback_name, **{n: mirror_dtype(m) for m, n in DTYPE_OF.items()})


def records_with_peer_copies() -> list[ctypes.Structure]:
    peer = MemcpyPtoP4(kind=MEMCPY2, copyKind=CopyKind.PTOP, srcKind=MemoryKind.DEVICE, dstKind=MemoryKind.DEVICE,
                       bytes=8 << 20, start=980, end=990, deviceId=0, streamId=13, srcDeviceId=0, dstDeviceId=1,
                       correlationId=21)  # fmt: skip
    return [*every_record(), peer]


@pytest.fixture(scope="module")
def libcupti() -> str:
    """A libcupti loaded in this process (through the native extension's loader), or skip."""
    native = pytest.importorskip("pytest_inferscope._cupti", reason="native extension not built")
    try:
        native.load()
    except native.CuptiError as exc:
        pytest.skip(f"libcupti not loadable here: {exc}")
    path = cupti_raw.libcupti_in_process()
    assert path is not None, "the native loader loaded libcupti, so it is mapped into the process"
    return path


def _raw(libcupti: str) -> RawActivity:
    raw = open_raw([], 1 << 20, libcupti)
    assert isinstance(raw, RawActivity), raw
    return raw


def _rows(events: np.ndarray, names: list[str]) -> list[tuple[Any, ...]]:
    return [(*r[:4], names[r[4]], *r[5:]) for r in events.tolist()]


def test_the_mirror_dtypes_are_the_sizes_raw_reading_expects() -> None:
    views = RecordViews(mirror_module())
    assert views.raw_missing == []
    sizes = dict(RAW_DTYPES.values())
    header = dict(MIRRORS.values())  # each mirror's size in CUDA 13.0's cupti_activity.h
    for mirror, name in DTYPE_OF.items():
        assert mirror_dtype(mirror).itemsize == sizes[name] == header[mirror] == ctypes.sizeof(mirror)


def test_a_dtype_missing_or_of_another_size_is_named() -> None:
    module = mirror_module()
    del module.activity_memset4_dtype
    module.activity_api_dtype = np.dtype([("kind", "<u4"), ("cbid", "<u4")])  # 8 bytes, not CUDA 13's 40
    views = RecordViews(module)
    assert views.raw_missing == ["activity_api_dtype (8 bytes, CUDA 13.0's record is 40)",
                                 "activity_memset4_dtype (none, CUDA 13.0's record is 88)"]  # fmt: skip
    reason = open_raw(views.raw_missing, 1 << 20)
    assert reason == "cupti-python lacks the record dtypes " + ", ".join(views.raw_missing)


def test_raw_records_give_the_native_decoders_rows_through_libcuptis_own_walk(libcupti: str) -> None:
    records = records_with_peer_copies()
    data = _buffer(*records)
    memory = ctypes.create_string_buffer(data, len(data))
    pairs = _raw(libcupti).walk(ctypes.addressof(memory), len(data))
    assert [kind for kind, _ in pairs] == [r.kind for r in records]
    assert [address - ctypes.addressof(memory) for _, address in pairs] == list(
        np.cumsum([0, *(ctypes.sizeof(r) for r in records[:-1])])
    )
    converter = RecordConverter(_callback_name, Demangler(), 0, RecordViews(mirror_module()))
    assert add_raw(converter, pairs) == len(records)
    got = _rows(*converter.take())

    native = pytest.importorskip("pytest_inferscope._cupti").Collector()
    buf, names = native._decode(data)
    assert got == _rows(_events(buf), names)
    assert converter.incomplete == native.incomplete() == 1 and converter.dropped == 0


def laid_out(records: list[ctypes.Structure]) -> tuple[Any, list[tuple[int, int]]]:
    """`records` in memory one after another, as CUPTI lays a buffer out, and their (kind, address) pairs."""
    data = _buffer(*records)
    memory = ctypes.create_string_buffer(data, len(data))
    at, pairs = ctypes.addressof(memory), []
    for r in records:
        pairs.append((r.kind, at))
        at += ctypes.sizeof(r)
    return memory, pairs


def test_raw_records_of_a_kind_not_read_are_skipped_and_a_cap_counts_the_rest() -> None:
    foreign = Api(kind=42, cbid=1)  # a kind another CUPTI client enabled: not ours to report, nor counted
    _memory, pairs = laid_out([foreign, *every_record()[:3]])
    converter = RecordConverter(_callback_name, Demangler(), 2, RecordViews(mirror_module()))
    assert add_raw(converter, pairs) == 2
    assert converter.dropped == 1  # the third record over the cap of 2
    assert [int(k) for k in converter.take()[0]["kind"]] == [int(Kind.RUNTIME), int(Kind.KERNEL)]


def test_a_kind_read_without_its_dtype_is_counted_lost() -> None:
    module = mirror_module()
    del module.activity_memset4_dtype
    converter = RecordConverter(_callback_name, Demangler(), 0, RecordViews(module))
    memset = Memset4(kind=2, bytes=16, start=1, end=2)
    memory = ctypes.create_string_buffer(bytes(memset), ctypes.sizeof(memset))
    assert add_raw(converter, [(2, ctypes.addressof(memory))]) == 0
    assert converter.dropped == 1


def test_a_requested_buffer_is_zeroed_pages_and_a_completed_one_reaches_the_sink(libcupti: str) -> None:
    raw = _raw(libcupti)
    buffer, size, cap = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t(7)
    raw.requested(ctypes.pointer(buffer), ctypes.pointer(size), ctypes.pointer(cap))
    assert buffer.value and size.value == 1 << 20 and cap.value == 0  # no cap on a buffer's records
    assert not any(ctypes.string_at(buffer.value, size.value))  # CUPTI is told so, and clears nothing
    data = _buffer(*every_record())
    ctypes.memmove(buffer.value, data, len(data))
    got: list[tuple[list[tuple[int, int]], int]] = []
    raw._sink = lambda pairs, dropped: got.append((pairs, dropped))
    raw.completed(None, 0, buffer.value, size.value, len(data))
    assert len(got) == 1 and len(got[0][0]) == len(every_record())
    assert got[0][0][0] == (every_record()[0].kind, buffer.value)


def test_a_sink_that_raises_loses_its_buffer_and_nothing_escapes_into_cuptis_thread(libcupti: str) -> None:
    raw = _raw(libcupti)
    buffer, size, cap = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
    raw.requested(ctypes.pointer(buffer), ctypes.pointer(size), ctypes.pointer(cap))

    def sink(pairs: list[tuple[int, int]], dropped: int) -> None:
        raise ValueError("a bug of ours")

    raw._sink = sink
    data = _buffer(*every_record()[:2])
    assert buffer.value
    ctypes.memmove(buffer.value, data, len(data))
    raw.completed(None, 0, buffer.value, size.value, len(data))
    assert raw.failed_buffers == 1


def test_open_raw_says_why_it_cannot_run(monkeypatch: pytest.MonkeyPatch, libcupti: str) -> None:
    monkeypatch.setenv(OBJECTS_ENV, "1")
    assert open_raw([], 1 << 20, libcupti) == f"{OBJECTS_ENV}=1"
    monkeypatch.delenv(OBJECTS_ENV)
    assert "cannot be opened through ctypes" in str(open_raw([], 1 << 20, "/nonexistent/libcupti.so.13"))
    assert isinstance(open_raw([], 1 << 20, libcupti), RawActivity)


def test_a_libcupti_of_another_major_version_or_missing_a_function_is_refused(tmp_path: Path) -> None:
    if shutil.which("gcc") is None:
        pytest.skip("gcc missing: cannot build fake libcupti libraries")
    functions = [f for f in cupti_raw.FUNCTIONS if f != "cuptiGetVersion"]
    stubs = "\n".join(f"int {f}(void) {{ return 0; }}" for f in functions)
    old, partial = tmp_path / "libcupti_12.so", tmp_path / "libcupti_partial.so"
    for path, body in (
        (old, stubs + "\nint cuptiGetVersion(unsigned *v) { *v = 28; return 0; }"),  # CUDA 12.9's API version
        (partial, "int cuptiGetVersion(unsigned *v) { *v = 130001; return 0; }"),
    ):
        source = path.with_suffix(".c")
        source.write_text(textwrap.dedent(body))
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(path), str(source)], check=True)
        ctypes.CDLL(str(path))  # loaded, as cupti-python would have loaded it
    assert open_raw([], 1 << 20, str(old)) == (
        f"{old} is CUPTI API version 28, not CUDA 13's, whose record layouts these are"
    )
    assert open_raw([], 1 << 20, str(partial)) == f"{partial} lacks " + ", ".join(functions)


class FakeRaw(RawActivity):
    """A RawActivity without libcupti: a flush hands `pending` records (laid out in memory) to the sink."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.pending: list[ctypes.Structure] = []
        self._memory: list[Any] = []
        self._sink = None

    def register(self, sink: Any) -> None:
        self.calls.append("register")
        self._sink = sink

    def unregister(self) -> None:
        self.calls.append("unregister")
        self._sink = None

    def flush(self, flag: int) -> None:
        self.calls.append(f"flush {flag}")
        if self.pending and self._sink is not None:
            memory, pairs = laid_out(self.pending)
            self._memory.append(memory)
            self.pending = []
            self._sink(pairs, 3)


def test_a_collector_with_raw_buffers_registers_flushes_and_unregisters_through_them() -> None:
    fake, raw = FakeCupti(), FakeRaw()
    module = mirror_module()
    for name in DTYPE_OF.values():
        setattr(fake, name, getattr(module, name))
    collector = CuptiPythonCollector(fake, raw=raw)
    collector.start()
    assert fake.callbacks is None and raw.calls == ["register"]  # cupti-python's callbacks are not registered
    raw.pending = every_record()
    collector.flush()
    raw.pending = every_record()[:1]
    collector.stop()
    assert raw.calls == ["register", "flush 0", "flush 0", f"flush {FLUSH_FORCED}", "unregister"]
    assert fake.flushes == [] and not fake.enabled  # no flush through cupti-python
    ev, names = collector.drain()
    assert len(ev) == len(every_record()) + 1 and "square(float*, int)" in names
    assert collector.dropped() == 6 and collector.incomplete() == 1  # CUPTI's dropped count, once a buffer
    assert collector.version().endswith("records: raw buffers (ctypes)")


def test_a_collector_that_cannot_register_raw_buffers_says_so_and_leaves_cupti_as_it_was() -> None:
    class Refusing(FakeRaw):
        def register(self, sink: Any) -> None:
            self.calls.append("register")
            raise RuntimeError("cuptiActivityRegisterCallbacks returned 999")

    fake, raw = FakeCupti(), Refusing()
    collector = CuptiPythonCollector(fake, raw=raw)
    with pytest.raises(RuntimeError, match=r"cuptiActivityRegisterCallbacks failed: .*returned 999"):
        collector.start()
    assert raw.calls == ["register", "unregister"] and not fake.enabled and fake.tid_type == 0
    collector.stop()  # nothing started: nothing to do


def _cupti_python() -> ModuleType:
    return pytest.importorskip("cupti.cupti", reason="cupti-python not installed (the GPU machine has it)")


# cupti-python's record objects look their address up in its buffer manager when freed, and these addresses are
# not from it: a KeyError it ignores, which pytest reports as unraisable.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_raw_records_read_as_cupti_pythons_own_objects_and_dtypes_do(libcupti: str) -> None:
    """With cupti-python itself: its dtypes read raw give the rows its record objects give, record by record."""
    cupti = _cupti_python()
    views = RecordViews(cupti)
    assert views.raw_missing == []
    records = records_with_peer_copies()
    data = _buffer(*records)
    memory = ctypes.create_string_buffer(data, len(data))
    pairs = _raw(libcupti).walk(ctypes.addressof(memory), len(data))
    classes = {name: "".join(p.capitalize() for p in name[: -len("_dtype")].split("_")) for name, _ in
               RAW_DTYPES.values()}  # fmt: skip
    classes.update(activity_api_dtype="ActivityAPI", activity_memcpy_pto_p4_dtype="ActivityMemcpyPtoP4")
    objects = [getattr(cupti, classes[RAW_DTYPES[kind][0]]).from_ptr(address) for kind, address in pairs]
    by_objects = RecordConverter(cupti.get_callback_name, Demangler(), 0, None)
    by_raw = RecordConverter(cupti.get_callback_name, Demangler(), 0, views)
    assert by_objects.add(objects) == add_raw(by_raw, pairs) == len(records)
    assert _rows(*by_raw.take()) == _rows(*by_objects.take())
