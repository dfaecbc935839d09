"""The cupti-python backend without a GPU: record conversion, the collector's lifecycle, and why it cannot run.

cupti-python hands every activity record to Python as an object with snake_case attributes;
here they are `SimpleNamespace` fakes with the same attributes. Where the native extension
and libcupti load, the same records also go through the native decoder (as ctypes structs
from tests/unit/test_native.py) and the two outputs must be identical, names included.
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, ClassVar

import numpy as np
import pytest

from pytest_inferscope.collectors import Collection, CollectionOptions, gpu, gpu_cuptipy
from pytest_inferscope.collectors.cupti_records import (
    A_CONCURRENT_KERNEL,
    A_DRIVER,
    A_KERNEL,
    A_MEMCPY,
    A_MEMCPY2,
    A_MEMORY2,
    A_MEMSET,
    A_OVERHEAD,
    A_RUNTIME,
    A_SYNCHRONIZATION,
    Demangler,
    RecordConverter,
    strip_version,
)
from pytest_inferscope.collectors.gpu_cuptipy import CuptiBusyError, CuptiPythonCollector
from pytest_inferscope.events import (
    EVENT_DTYPE,
    CopyKind,
    Domain,
    Kind,
    MemoryKind,
    SyncType,
    copy_devices,
    unpack_copy_flags,
)

INVALID = 0xFFFFFFFF
OBJECTS = "; records: cupti-python's objects (not asked for)"  # version()'s end: no raw buffers asked for
API_NAMES = {(2, 211): "cudaLaunchKernel_v7000", (1, 307): "cuLaunchKernel", (2, 165): "cudaDeviceSynchronize_v3020"}


def _callback_name(domain: int, cbid: int) -> str:
    return API_NAMES[(domain, cbid)]


def _converter(max_records: int = 0) -> RecordConverter:
    return RecordConverter(_callback_name, Demangler(), max_records)


# -- fake cupti-python activity objects (the attribute names cupti-python 13.0 uses) ------------------


def kernel(name: str | None, start: int, end: int, corr: int, stream: int = 7, device: int = 0) -> SimpleNamespace:
    return SimpleNamespace(
        kind=A_CONCURRENT_KERNEL, name=name, start=start, end=end, correlation_id=corr, stream_id=stream,
        device_id=device,
    )  # fmt: skip


def api(cbid: int, start: int, end: int, corr: int, tid: int, kind: int = A_RUNTIME) -> SimpleNamespace:
    return SimpleNamespace(
        kind=kind, cbid=cbid, start=start, end=end, process_id=99, thread_id=tid, correlation_id=corr, return_value=0
    )


def every_kind() -> list[SimpleNamespace]:
    """One record of each kind, as tests/unit/test_native.py's test_decode_every_record_kind builds them."""
    return [
        api(211, 100, 110, corr=5, tid=4242),
        kernel("_Z6squarePfi", 120, 220, corr=5, stream=7, device=1),
        SimpleNamespace(kind=A_MEMCPY, copy_kind=CopyKind.HTOD, src_kind=MemoryKind.PAGEABLE,
                        dst_kind=MemoryKind.DEVICE, bytes=4 << 20, start=300, end=400, device_id=1, stream_id=7,
                        correlation_id=6, runtime_correlation_id=6),
        SimpleNamespace(kind=A_MEMSET, value=0, bytes=1024, start=410, end=420, device_id=1, stream_id=8,
                        correlation_id=9, memory_kind=MemoryKind.DEVICE),
        SimpleNamespace(kind=A_SYNCHRONIZATION, type=SyncType.STREAM_SYNCHRONIZE, start=430, end=440,
                        correlation_id=10, context_id=1, stream_id=7, cuda_event_id=INVALID),
        SimpleNamespace(kind=A_SYNCHRONIZATION, type=SyncType.CONTEXT_SYNCHRONIZE, start=450, end=460,
                        correlation_id=11, context_id=1, stream_id=INVALID, cuda_event_id=INVALID),
        SimpleNamespace(kind=A_MEMORY2, memory_operation_type=1, memory_kind=MemoryKind.DEVICE, correlation_id=12,
                        bytes=1 << 20, timestamp=500, device_id=1, stream_id=INVALID),
        SimpleNamespace(kind=A_MEMORY2, memory_operation_type=2, memory_kind=MemoryKind.DEVICE, correlation_id=13,
                        bytes=1 << 20, timestamp=600, device_id=1, stream_id=INVALID),
        SimpleNamespace(kind=A_OVERHEAD, overhead_kind=1 << 16, object_kind=2, correlation_id=0, start=900, end=950,
                        object_id=SimpleNamespace(pt=SimpleNamespace(process_id=99, thread_id=4242))),
        api(307, 700, 705, corr=14, tid=4243, kind=A_DRIVER),
        kernel("my_triton_kernel", 710, 0, corr=14),  # still running at a forced flush
    ]  # fmt: skip


def peer(src: int, dst: int, start: int, end: int, corr: int, device: int | None = None) -> SimpleNamespace:
    """A copy between two devices as cupti-python gives it (CUpti_ActivityMemcpyPtoP4, kind MEMCPY2)."""
    return SimpleNamespace(kind=A_MEMCPY2, copy_kind=CopyKind.PTOP, src_kind=MemoryKind.DEVICE,
                           dst_kind=MemoryKind.DEVICE, flags=0, bytes=8 << 20, start=start, end=end,
                           device_id=src if device is None else device, context_id=1, stream_id=13,
                           src_device_id=src, src_context_id=1, dst_device_id=dst, dst_context_id=2,
                           correlation_id=corr)  # fmt: skip


def test_a_peer_copy_converts_to_a_memcpy_row_with_its_devices() -> None:
    conv = _converter()
    assert conv.add([peer(0, 1, 500, 900, corr=21), peer(1, 0, 950, 960, corr=22, device=0)]) == 2
    ev, names = conv.take()
    assert [names[i] for i in ev["name"]] == ["Memcpy PtoP", "Memcpy PtoP"]
    assert (ev["kind"] == Kind.MEMCPY).all() and ev["device"].tolist() == [0, 0] and ev["corr"].tolist() == [21, 22]
    assert [int(x) for x in unpack_copy_flags(ev["flags"][0])] == [CopyKind.PTOP, MemoryKind.DEVICE, MemoryKind.DEVICE]
    src, dst = copy_devices(ev["flags"])
    assert (src.tolist(), dst.tolist()) == ([0, 1], [1, 0])


def test_every_record_kind_converts_as_the_native_decoder_does() -> None:
    conv = _converter()
    assert conv.add(every_kind()) == 11
    ev, names = conv.take()
    assert ev.dtype == EVENT_DTYPE and len(ev) == 11
    assert (ev["domain"] == Domain.DEVICE).all()
    name = [names[i] for i in ev["name"]]

    launch, kern, copy, memset, ssync, csync, alloc, free, ovh, drv, running = ev
    assert (launch["kind"], name[0], launch["start"], launch["end"]) == (Kind.RUNTIME, "cudaLaunchKernel", 100, 110)
    assert (launch["corr"], launch["tid"], launch["device"], launch["stream"]) == (5, 4242, -1, -1)
    assert (launch["flags"], launch["value"]) == (2, 0)
    assert (kern["kind"], name[1], kern["start"], kern["end"]) == (Kind.KERNEL, "square(float*, int)", 120, 220)
    assert (kern["corr"], kern["stream"], kern["device"], kern["tid"]) == (5, 7, 1, -1)
    assert (copy["kind"], name[2], copy["value"], copy["corr"]) == (Kind.MEMCPY, "Memcpy HtoD", 4 << 20, 6)
    assert [int(x) for x in unpack_copy_flags(copy["flags"])] == [CopyKind.HTOD, MemoryKind.PAGEABLE, MemoryKind.DEVICE]
    assert (memset["kind"], name[3], memset["value"], memset["flags"]) == (Kind.MEMSET, "Memset", 1024, 3)
    assert (ssync["kind"], ssync["flags"], ssync["stream"], ssync["corr"]) == (Kind.SYNC, 3, 7, 10)
    assert (csync["flags"], csync["stream"], csync["value"], csync["start"], csync["end"]) == (4, -1, -1, 450, 460)
    assert (alloc["kind"], name[6], alloc["value"], alloc["start"], alloc["end"]) == (
        Kind.GPU_MEMORY, "Memory alloc", 1 << 20, 500, 500)  # fmt: skip
    assert (free["value"], name[7], free["corr"], free["device"]) == (-(1 << 20), "Memory free", 13, 1)
    assert free["stream"] == -1
    assert (ovh["kind"], name[8], ovh["tid"], ovh["flags"]) == (Kind.OVERHEAD, "CUPTI buffer flush", 4242, 1 << 16)
    assert (drv["kind"], name[9], drv["flags"], drv["tid"]) == (Kind.RUNTIME, "cuLaunchKernel", 1, 4243)
    assert drv["corr"] == 14
    assert (running["end"], name[10]) == (0, "my_triton_kernel")
    assert conv.incomplete == 1 and conv.dropped == 0


def _native_test_module() -> ModuleType:
    """tests/unit/test_native.py, for its ctypes mirrors of the CUPTI record structs."""
    path = Path(__file__).with_name("test_native.py")
    spec = importlib.util.spec_from_file_location("_inferscope_native_mirrors", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _as_struct(m: ModuleType, a: SimpleNamespace, keep: list[bytes]) -> ctypes.Structure:
    """The C record a fake activity stands for (`keep` holds the names its pointers point to)."""
    if a.kind in (A_KERNEL, A_CONCURRENT_KERNEL):
        keep.append(a.name.encode())
        return m._kernel(keep[-1], a.start, a.end, a.correlation_id, a.stream_id, a.device_id)
    if a.kind in (A_RUNTIME, A_DRIVER):
        return m._runtime(a.cbid, a.start, a.end, a.correlation_id, a.thread_id, kind=a.kind)
    if a.kind == A_MEMCPY:
        return m.Memcpy6(kind=a.kind, copyKind=a.copy_kind, srcKind=a.src_kind, dstKind=a.dst_kind, bytes=a.bytes,
                         start=a.start, end=a.end, deviceId=a.device_id, streamId=a.stream_id,
                         correlationId=a.correlation_id, runtimeCorrelationId=a.runtime_correlation_id)  # fmt: skip
    if a.kind == A_MEMSET:
        return m.Memset4(kind=a.kind, value=a.value, bytes=a.bytes, start=a.start, end=a.end, deviceId=a.device_id,
                         streamId=a.stream_id, correlationId=a.correlation_id, memoryKind=a.memory_kind)  # fmt: skip
    if a.kind == A_SYNCHRONIZATION:
        return m.Synchronization2(kind=a.kind, type=a.type, start=a.start, end=a.end, correlationId=a.correlation_id,
                                  contextId=a.context_id, streamId=a.stream_id,
                                  cudaEventId=a.cuda_event_id)  # fmt: skip
    if a.kind == A_MEMORY2:
        return m.Memory4(kind=a.kind, memoryOperationType=a.memory_operation_type, memoryKind=a.memory_kind,
                         correlationId=a.correlation_id, bytes=a.bytes, timestamp=a.timestamp, deviceId=a.device_id,
                         streamId=a.stream_id)  # fmt: skip
    if a.kind == A_MEMCPY2:
        return m.MemcpyPtoP4(kind=a.kind, copyKind=a.copy_kind, srcKind=a.src_kind, dstKind=a.dst_kind, bytes=a.bytes,
                             start=a.start, end=a.end, deviceId=a.device_id, contextId=a.context_id,
                             streamId=a.stream_id, srcDeviceId=a.src_device_id, srcContextId=a.src_context_id,
                             dstDeviceId=a.dst_device_id, dstContextId=a.dst_context_id,
                             correlationId=a.correlation_id)  # fmt: skip
    assert a.kind == A_OVERHEAD
    o = m.Overhead3(kind=a.kind, overheadKind=a.overhead_kind, objectKind=a.object_kind, start=a.start, end=a.end)
    o.objectId[:] = [a.object_id.pt.process_id, a.object_id.pt.thread_id, 0]
    return o


def test_the_same_records_through_the_native_decoder_give_identical_arrays() -> None:
    cupti = pytest.importorskip("pytest_inferscope._cupti", reason="native extension not built")
    try:
        cupti.load()
    except cupti.CuptiError as exc:
        pytest.skip(f"libcupti not loadable here: {exc}")
    mirrors = _native_test_module()
    activities = [*every_kind(), api(165, 1000, 1010, 20, 4242), kernel("_Z6squarePfi", 1020, 1030, 20)]
    activities += [peer(0, 1, 1040, 1090, corr=21), peer(1, 0, 1100, 1110, corr=22, device=3)]
    keep: list[bytes] = []
    buffer = b"".join(bytes(_as_struct(mirrors, a, keep)) for a in activities)
    buf, native_names = cupti.Collector()._decode(buffer)
    native = np.frombuffer(buf, dtype=EVENT_DTYPE)
    conv = _converter()
    conv.add(activities)
    ours, names = conv.take()
    assert names == native_names
    assert ours.tobytes() == native.tobytes(), [
        (f, ours[f].tolist(), native[f].tolist()) for f in EVENT_DTYPE.names or () if (ours[f] != native[f]).any()
    ]


def test_names_are_interned_once_and_stay_stable_across_takes() -> None:
    conv = _converter()
    conv.add([kernel("_Z6squarePfi", 1, 2, 1), kernel("_Z6squarePfi", 3, 4, 2), kernel("other", 5, 6, 3)])
    ev1, names1 = conv.take()
    conv.add([kernel("_Z4tanhPf", 7, 8, 4), kernel("_Z6squarePfi", 9, 10, 5), kernel(None, 11, 12, 6)])
    ev2, names2 = conv.take()
    assert names2[: len(names1)] == names1 and len(names2) == len(set(names2))
    assert [names2[i] for i in ev1["name"]] == ["square(float*, int)", "square(float*, int)", "other"]
    assert [names2[i] for i in ev2["name"]] == ["tanh(float*)", "square(float*, int)", "<unnamed kernel>"]
    empty, names3 = conv.take()
    assert len(empty) == 0 and empty.dtype == EVENT_DTYPE and names3 == names2


def test_records_beyond_max_records_are_dropped_and_unknown_kinds_skipped() -> None:
    conv = _converter(max_records=2)
    foreign = SimpleNamespace(kind=42)  # a kind another CUPTI client enabled: not ours to report
    assert conv.add([foreign, *[kernel("k", i, i + 1, i) for i in range(1, 6)]]) == 2
    assert len(conv.take()[0]) == 2 and conv.dropped == 3


def test_an_unreadable_record_is_counted_lost_not_raised() -> None:
    conv = _converter()
    broken = SimpleNamespace(kind=A_CONCURRENT_KERNEL, start=1, end=2)  # no name, ids: cupti-python raising
    assert conv.add([broken, kernel("k", 3, 4, 1)]) == 1
    assert conv.dropped == 1


def test_api_names_lose_only_their_version_suffix() -> None:
    assert strip_version("cudaLaunchKernel_v7000") == "cudaLaunchKernel"
    assert strip_version("cudaMemcpy_v3020") == "cudaMemcpy"
    for unchanged in ("cuLaunchKernel", "cuda_vX", "_v12", "cudaFoo_v", "cudaFoo_v1a", "a_v٣"):
        assert strip_version(unchanged) is None, unchanged
    conv = RecordConverter(lambda d, c: "", Demangler())  # a cbid CUPTI has no name for
    conv.add([api(999, 1, 2, 1, 1), api(998, 1, 2, 2, 1, kind=A_DRIVER)])
    assert conv.take()[1] == ["runtime API cbid 999", "driver API cbid 998"]


def test_demangling() -> None:
    demangle = Demangler()
    assert demangle("_Z6squarePfi") == "square(float*, int)"
    assert demangle("my_triton_kernel") is None and demangle("_Znot a name") is None


# -- the collector, over a fake cupti module -----------------------------------------------------------


class FakeCuptiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


class FakeCupti:
    """The part of `cupti.cupti` the collector uses; `pending` records arrive at the next flush."""

    cuptiError = FakeCuptiError

    def __init__(self, refuse: dict[int, int] | None = None) -> None:
        self.refuse = refuse or {}  # activity kind -> status activity_enable raises
        self.enabled: set[int] = set()
        self.tid_type = 0
        self.callbacks: tuple[Any, Any] | None = None
        self.pending: list[SimpleNamespace] = []
        self.flushes: list[int] = []
        self.sizes: list[int] = []  # the buffer sizes asked for, in MiB

    def get_thread_id_type(self) -> int:
        return self.tid_type

    def set_thread_id_type(self, value: int) -> None:
        self.tid_type = value

    def activity_register_callbacks(self, requested: Any, completed: Any) -> None:
        self.callbacks = (requested, completed)

    def activity_enable(self, kind: int) -> None:
        if kind in self.refuse:
            raise FakeCuptiError(self.refuse[kind])
        self.enabled.add(kind)

    def activity_disable(self, kind: int) -> None:
        self.enabled.discard(kind)

    def activity_flush_all(self, flag: int) -> None:
        self.flushes.append(flag)
        if self.pending and self.callbacks is not None:
            size, records = self.callbacks[0]()
            assert records == 0  # no cap on a buffer's records
            self.sizes.append(size >> 20)
            batch, self.pending = self.pending, []
            self.callbacks[1](batch)

    def activity_get_num_dropped_records(self, context: int, stream: int, dropped: int) -> None:
        ctypes.c_size_t.from_address(dropped).value = 0

    def get_timestamp(self) -> int:
        return 123_456

    def get_callback_name(self, domain: int, cbid: int) -> str:
        return _callback_name(domain, cbid)

    def finalize(self) -> None:
        raise AssertionError("cuptiFinalize breaks CUPTI for the rest of the process; never call it")


def test_start_collect_stop_drain_with_a_fake_cupti() -> None:
    fake = FakeCupti(refuse={A_MEMORY2: 1})  # an optional kind this "device" lacks
    collector = CuptiPythonCollector(fake)
    collector.start()
    assert fake.tid_type == 1 and fake.callbacks is not None  # SYSTEM thread ids while collecting
    assert collector.enabled() == ["CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME", "DRIVER", "SYNCHRONIZATION",
                                   "OVERHEAD", "MEMCPY2"]  # fmt: skip
    fake.pending = every_kind()
    collector.stop()
    assert fake.flushes == [0, 1] and not fake.enabled and fake.tid_type == 0
    assert fake.sizes == [1]  # the first buffer after a start: 1 MiB
    ev, names = collector.drain()
    assert len(ev) == 11 and "square(float*, int)" in names
    assert collector.incomplete() == 1 and collector.dropped() == 0 and collector.callback_ns > 0
    assert collector.timestamp() == 123_456
    assert len(collector.drain()[0]) == 0
    collector.stop()  # idempotent


def test_buffers_start_small_after_a_start_or_a_flush_and_double_up_to_the_size_asked_for() -> None:
    # CUPTI clears every buffer cupti-python's manager hands it: a short collection should not pay for 8 MiB
    fake = FakeCupti()
    collector = CuptiPythonCollector(fake, buffer_mb=8)
    collector.start()
    assert fake.callbacks is not None
    request = fake.callbacks[0]
    assert [request()[0] >> 20 for _ in range(6)] == [1, 2, 4, 8, 8, 8]
    collector.flush()
    assert [request()[0] >> 20 for _ in range(2)] == [1, 2]
    collector.stop()
    collector.start()
    assert request()[0] >> 20 == 1
    collector.stop()
    one = CuptiPythonCollector(FakeCupti(), buffer_mb=1)  # a cap at the first size: every buffer that size
    assert [one._requested()[0] >> 20 for _ in range(3)] == [1, 1, 1]


class FilteringCupti(FakeCupti):
    """cupti-python 13.0's per-API switches (activity_enable_runtime_api/driver_api) and callback-id enums."""

    NAMES: ClassVar[dict[tuple[int, int], str]] = {
        (2, 3): "cudaGetDevice_v3020", (2, 10): "cudaGetLastError_v3020", (2, 165): "cudaDeviceSynchronize_v3020",
        (2, 211): "cudaLaunchKernel_v7000", (2, 41): "cudaMemcpyAsync_v3020", (2, 505): "__cudaLaunchKernel_v13000",
        (1, 17): "cuCtxGetCurrent", (1, 307): "cuLaunchKernel", (1, 279): "cuMemcpyHtoDAsync_v2",
    }  # fmt: skip
    runtime_api_trace_cbid = SimpleNamespace(SIZE=523)
    driver_api_trace_cbid = SimpleNamespace(SIZE=807)

    def __init__(self) -> None:
        super().__init__()
        self.on: dict[int, dict[int, int]] = {1: {}, 2: {}}

    def get_callback_name(self, domain: int, cbid: int) -> str:
        if (domain, cbid) not in self.NAMES:
            raise FakeCuptiError(1)
        return self.NAMES[(domain, cbid)]

    def activity_enable(self, kind: int) -> None:
        super().activity_enable(kind)
        if kind in (A_RUNTIME, A_DRIVER):  # the kind records every call of its domain
            domain = 2 if kind == A_RUNTIME else 1
            self.on[domain] = dict.fromkeys(range(1, 1024), 1)

    def activity_enable_runtime_api(self, cbid: int, enable: int) -> None:
        self.on[2][cbid] = enable

    def activity_enable_driver_api(self, cbid: int, enable: int) -> None:
        self.on[1][cbid] = enable

    def recorded(self, domain: int) -> list[int]:
        return sorted(c for c, e in self.on[domain].items() if e)


def test_only_the_traced_api_calls_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERSCOPE_CUPTI_ALL_API", raising=False)
    fake = FilteringCupti()
    collector = CuptiPythonCollector(fake)
    assert collector.version().endswith("API records: launches, copies, memsets, syncs and allocations only" + OBJECTS)
    collector.start()
    assert fake.recorded(2)[:3] == [41, 165, 211] and fake.recorded(2)[3] == 505  # then ids past the enum's SIZE
    assert [c for c in fake.recorded(1) if c < 807] == [279, 307]
    assert collector.api_records() == "runtime: 4 traced calls of 522; driver: 2 traced calls of 806"
    fake.activity_disable(A_RUNTIME)  # as if the kind's disable kept the per-call switches: stop turns them off
    fake.on[2].update({41: 1, 165: 1, 211: 1, 505: 1})
    collector.stop()
    assert [c for c in fake.recorded(2) if c < 523] == [] and [c for c in fake.recorded(1) if c < 807] == []

    monkeypatch.setenv("INFERSCOPE_CUPTI_ALL_API", "1")  # read at each start
    collector.start()
    assert len(fake.recorded(2)) == len(fake.recorded(1)) == 1023
    assert collector.api_records() == (
        "runtime: every call (INFERSCOPE_CUPTI_ALL_API=1); driver: every call (INFERSCOPE_CUPTI_ALL_API=1)"
    )
    assert collector.version().endswith("API records: every call (INFERSCOPE_CUPTI_ALL_API=1)" + OBJECTS)
    collector.stop()


def test_api_records_switch_off_and_on_again_while_collecting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERSCOPE_CUPTI_ALL_API", raising=False)
    fake = FilteringCupti()
    collector = CuptiPythonCollector(fake, driver=False)  # the driver kind not recorded: never switched on
    with pytest.raises(RuntimeError, match="started"):
        collector.set_api_records(False)
    collector.start()
    described = collector.api_records()
    collector.set_api_records(False)
    assert A_RUNTIME not in fake.enabled and A_CONCURRENT_KERNEL in fake.enabled  # GPU records go on
    assert [c for c in fake.recorded(2) if c < 523] == [] and "RUNTIME" not in collector.enabled()
    collector.set_api_records(False)  # twice is harmless
    collector.set_api_records(True)
    assert A_RUNTIME in fake.enabled and A_DRIVER not in fake.enabled
    assert fake.recorded(2)[:3] == [41, 165, 211]  # the same traced calls, filtered again
    assert collector.api_records() == described and "RUNTIME" in collector.enabled()
    collector.stop()
    assert not fake.enabled and [c for c in fake.recorded(2) if c < 523] == []


def test_a_cupti_python_without_per_api_switches_records_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("INFERSCOPE_CUPTI_ALL_API", raising=False)
    collector = CuptiPythonCollector(FakeCupti())
    collector.start()
    assert collector.api_records().startswith("runtime: every call (cupti-python lacks activity_enable_runtime_api)")
    assert collector.version().endswith(
        "API records: every call (cupti-python lacks activity_enable_runtime_api)" + OBJECTS
    )
    collector.stop()


def test_a_busy_cupti_raises_busy_and_leaves_nothing_enabled() -> None:
    fake = FakeCupti(refuse={A_SYNCHRONIZATION: 39})  # optional, but busy is busy
    collector = CuptiPythonCollector(fake)
    with pytest.raises(CuptiBusyError, match="MULTIPLE_SUBSCRIBERS"):
        collector.start()
    assert not fake.enabled and fake.tid_type == 0
    fake.refuse = {}
    collector.start()  # usable once the other client is gone
    collector.stop()


def test_a_running_torch_profiler_is_refused_before_cupti_is_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu_cuptipy, "_foreign_profiler", lambda: "torch.profiler (Kineto) is active in this process")
    fake = FakeCupti()
    with pytest.raises(CuptiBusyError, match=r"torch\.profiler"):
        CuptiPythonCollector(fake).start()
    assert fake.callbacks is None and fake.tid_type == 0


def test_a_collection_merges_cupti_python_records_into_its_buffer() -> None:
    fake = FakeCupti()
    choice = gpu.Choice(CuptiPythonCollector(fake), {"native": "not built"})
    coll = Collection(CollectionOptions(cpu="off"), choice, name="fake")
    coll.start()
    with coll.round(0):
        fake.pending = [api(211, 123_500, 123_510, 1, 7), kernel("_Z6squarePfi", 123_520, 123_600, 1)]
    raw = coll.stop()
    device = raw.events[raw.events["domain"] == Domain.DEVICE]
    assert sorted(raw.strings[i] for i in device["name"]) == ["cudaLaunchKernel", "square(float*, int)"]
    assert len(raw.clock_pairs) == 3 and all(d == 123_456 for _, d in raw.clock_pairs)  # start, one round, stop
    assert coll.collectors_info()[1].mode.startswith("cupti-python CUPTI (cupti-python")


# -- why it cannot run -----------------------------------------------------------------------------------


def test_create_without_cupti_python_says_it_is_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupti", None)  # makes the import fail, installed or not
    monkeypatch.setitem(sys.modules, "cupti.cupti", None)
    with pytest.raises(RuntimeError, match="cupti-python is not installed"):
        gpu_cuptipy.create()


def test_select_backend_keeps_each_rejected_backends_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpu, "device_missing", lambda: None)  # as on a GPU machine
    monkeypatch.setitem(sys.modules, "pytest_inferscope._cupti", None)
    monkeypatch.setitem(sys.modules, "cupti", None)
    monkeypatch.setitem(sys.modules, "cupti.cupti", None)
    choice = gpu.select_backend("auto")
    assert choice.collector is None and choice.name == "none"
    assert "native extension not built" in choice.reasons["native"]
    assert "cupti-python is not installed" in choice.reasons["cupti-python"]
    assert "cupti-python: cupti-python is not installed" in choice.describe()
    with pytest.raises(gpu.GpuBackendError, match="INFERSCOPE_COLLECTOR=cupti-python was asked for"):
        gpu.select_backend("auto", forced="cupti-python")

    fake = FakeCupti()
    monkeypatch.setattr(gpu_cuptipy, "create", lambda **_: CuptiPythonCollector(fake))
    choice = gpu.select_backend("required")  # native missing: cupti-python is the fallback, native's reason kept
    assert choice.name == "cupti-python" and "native" in choice.reasons
    assert choice.describe().startswith("cupti-python (cupti-python")
