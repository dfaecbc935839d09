"""cupti-python's activity records read in bulk (`RecordViews`) give the rows reading each object's fields gives.

Records are laid out in memory with record dtypes named as cupti-python names them (`activity_api_dtype`, ...),
and objects of classes named as cupti-python's (`ActivityAPI`, ...) read their fields from that memory, as
cupti-python's do. The converter reads them three ways: plain objects (the reference), the memory-backed objects one
by one, and the same objects in bulk through their `ptr`; all three must give the same rows and names.
"""

from __future__ import annotations

import ctypes
from types import SimpleNamespace
from typing import Any

import numpy as np

from pytest_inferscope.collectors.cupti_records import (
    A_CONCURRENT_KERNEL,
    A_DRIVER,
    A_MEMCPY,
    A_MEMCPY2,
    A_MEMORY2,
    A_MEMSET,
    A_OVERHEAD,
    A_RUNTIME,
    A_SYNCHRONIZATION,
    Demangler,
    RecordConverter,
    RecordViews,
)

U1, U2, U4, U8, I4, I8 = "<u1", "<u2", "<u4", "<u8", "<i4", "<i8"
OBJECT_ID = np.dtype(
    {
        "names": ["pt", "dcs"],
        "formats": [
            np.dtype([("process_id", U4), ("thread_id", U4)]),
            np.dtype([("device_id", U4), ("context_id", U4), ("stream_id", U4)]),
        ],
        "offsets": [0, 0],
        "itemsize": 12,
    }
)
# the fields the converter reads, under cupti-python's names (their order and padding are not CUPTI's: any will do)
DTYPES = {
    "activity_api_dtype": [("kind", I4), ("cbid", U4), ("start", U8), ("end", U8), ("process_id", U4),
                           ("thread_id", U4), ("correlation_id", U4), ("return_value", U4)],
    "activity_kernel10_dtype": [("kind", I4), ("start", U8), ("end", U8), ("device_id", U4), ("stream_id", U4),
                                ("correlation_id", U4), ("name", I8)],
    "activity_memcpy6_dtype": [("kind", I4), ("copy_kind", U1), ("src_kind", U1), ("dst_kind", U1), ("bytes", U8),
                               ("start", U8), ("end", U8), ("device_id", U4), ("stream_id", U4),
                               ("correlation_id", U4), ("runtime_correlation_id", U4)],
    "activity_memcpy_pto_p4_dtype": [("kind", I4), ("copy_kind", U1), ("src_kind", U1), ("dst_kind", U1),
                                     ("bytes", U8), ("start", U8), ("end", U8), ("device_id", U4), ("stream_id", U4),
                                     ("src_device_id", U4), ("dst_device_id", U4), ("correlation_id", U4)],
    "activity_memset4_dtype": [("kind", I4), ("value", U4), ("bytes", U8), ("start", U8), ("end", U8),
                               ("device_id", U4), ("stream_id", U4), ("correlation_id", U4), ("memory_kind", U2)],
    "activity_synchronization2_dtype": [("kind", I4), ("type", I4), ("start", U8), ("end", U8),
                                        ("correlation_id", U4), ("stream_id", U4), ("cuda_event_id", U4)],
    "activity_memory4_dtype": [("kind", I4), ("memory_operation_type", I4), ("memory_kind", I4),
                               ("correlation_id", U4), ("bytes", U8), ("timestamp", U8), ("device_id", U4),
                               ("stream_id", U4), ("name", I8)],
    "activity_overhead3_dtype": [("kind", I4), ("overhead_kind", I4), ("object_kind", I4), ("object_id", OBJECT_ID),
                                 ("start", U8), ("end", U8), ("correlation_id", U4)],
}  # fmt: skip
CLASSES = {  # cupti-python's class of each dtype
    "activity_api_dtype": "ActivityAPI",
    "activity_kernel10_dtype": "ActivityKernel10",
    "activity_memcpy6_dtype": "ActivityMemcpy6",
    "activity_memcpy_pto_p4_dtype": "ActivityMemcpyPtoP4",
    "activity_memset4_dtype": "ActivityMemset4",
    "activity_synchronization2_dtype": "ActivitySynchronization2",
    "activity_memory4_dtype": "ActivityMemory4",
    "activity_overhead3_dtype": "ActivityOverhead3",
}
INVALID = 0xFFFFFFFF
NAMES = [b"_Z6squarePfi", b"my_triton_kernel"]
KEEP = [ctypes.create_string_buffer(n) for n in NAMES]  # the C strings the kernel records point at


def module() -> SimpleNamespace:
    return SimpleNamespace(**{k: np.dtype(v, align=True) for k, v in DTYPES.items()})


def records() -> list[tuple[str, dict[str, Any]]]:
    """(dtype name, fields) of one record of every kind the converter reads, in a buffer's order (`object_id`, a
    union, as its bytes read both ways)."""
    name = [ctypes.addressof(b) for b in KEEP]
    return [
        ("activity_api_dtype", dict(kind=A_RUNTIME, cbid=211, start=100, end=110, process_id=99, thread_id=4242,
                                    correlation_id=5, return_value=0)),
        ("activity_kernel10_dtype", dict(kind=A_CONCURRENT_KERNEL, start=120, end=220, device_id=1, stream_id=7,
                                         correlation_id=5, name=name[0])),
        ("activity_memcpy6_dtype", dict(kind=A_MEMCPY, copy_kind=1, src_kind=1, dst_kind=3, bytes=4 << 20, start=300,
                                        end=400, device_id=1, stream_id=7, correlation_id=6,
                                        runtime_correlation_id=6)),
        ("activity_memcpy_pto_p4_dtype", dict(kind=A_MEMCPY2, copy_kind=10, src_kind=3, dst_kind=3, bytes=8 << 20,
                                              start=500, end=900, device_id=0, stream_id=13, src_device_id=0,
                                              dst_device_id=1, correlation_id=21)),
        ("activity_memset4_dtype", dict(kind=A_MEMSET, value=0, bytes=1024, start=410, end=420, device_id=1,
                                        stream_id=8, correlation_id=9, memory_kind=3)),
        ("activity_synchronization2_dtype", dict(kind=A_SYNCHRONIZATION, type=3, start=430, end=440,
                                                 correlation_id=10, stream_id=7, cuda_event_id=INVALID)),
        ("activity_memory4_dtype", dict(kind=A_MEMORY2, memory_operation_type=2, memory_kind=3, correlation_id=13,
                                        bytes=1 << 20, timestamp=600, device_id=1, stream_id=INVALID, name=0)),
        ("activity_overhead3_dtype", dict(kind=A_OVERHEAD, overhead_kind=1 << 16, object_kind=2,
                                          object_id=((99, 4242), (99, 4242, 0)), start=900, end=950, correlation_id=0)),
        ("activity_overhead3_dtype", dict(kind=A_OVERHEAD, overhead_kind=7 << 16, object_kind=3,
                                          object_id=((1, 0), (1, 0, 0)), start=960, end=970, correlation_id=0)),
        ("activity_api_dtype", dict(kind=A_DRIVER, cbid=307, start=700, end=705, process_id=99, thread_id=4243,
                                    correlation_id=14, return_value=0)),
        ("activity_kernel10_dtype", dict(kind=A_CONCURRENT_KERNEL, start=710, end=0, device_id=0, stream_id=7,
                                         correlation_id=14, name=name[1])),  # still running at a forced flush
    ]  # fmt: skip


def _python(value: Any, dtype: np.dtype, field: str) -> Any:
    """A field as cupti-python's objects give it: nested structs as objects, `name` pointers as strings."""
    if dtype.names:
        return SimpleNamespace(**{n: _python(value[n], dtype[n], n) for n in dtype.names})
    if field == "name":
        return ctypes.string_at(int(value)).decode() if int(value) else None
    return value.item()


class MemoryRecord:
    """A cupti-python-like object: `ptr` is where its record is, each other field is read from there."""

    dtype: np.dtype
    reads = 0  # fields read through objects, all classes together

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr

    def __getattr__(self, field: str) -> Any:
        MemoryRecord.reads += 1
        record = np.frombuffer((ctypes.c_char * self.dtype.itemsize).from_address(self.ptr), self.dtype)[0]
        return _python(record[field], self.dtype[field], field)


def in_memory(mod: SimpleNamespace) -> tuple[np.ndarray, list[MemoryRecord]]:
    """The records of `records()` packed into one buffer (8-byte aligned), and an object for each."""
    classes = {k: type(CLASSES[k], (MemoryRecord,), {"dtype": getattr(mod, k)}) for k in DTYPES}
    layout, size = [], 0
    for key, fields in records():
        layout.append((key, fields, size))
        size += -(-getattr(mod, key).itemsize // 8) * 8
    buffer = np.zeros(size + 64, dtype=np.uint8)
    base = buffer.ctypes.data
    objects = []
    for key, fields, offset in layout:
        dtype = getattr(mod, key)
        one = np.zeros(1, dtype=dtype)
        for name, value in fields.items():
            one[name] = value
        buffer[offset : offset + dtype.itemsize] = one.view(np.uint8)
        objects.append(classes[key](base + offset))
    return buffer, objects


def reference() -> list[SimpleNamespace]:
    """The same records as plain objects."""
    out = []
    for key, fields in records():
        values = dict(fields)
        if "name" in values:
            values["name"] = ctypes.string_at(values["name"]).decode() if values["name"] else None
        if "object_id" in values:
            (pid, tid), (dev, ctx, stream) = values["object_id"]
            values["object_id"] = SimpleNamespace(
                pt=SimpleNamespace(process_id=pid, thread_id=tid),
                dcs=SimpleNamespace(device_id=dev, context_id=ctx, stream_id=stream),
            )
        out.append(SimpleNamespace(**values))
        del key
    return out


def converted(objects: list[Any], views: RecordViews | None) -> tuple[list[Any], list[str]]:
    names = {(2, 211): "cudaLaunchKernel_v7000", (1, 307): "cuLaunchKernel"}
    conv = RecordConverter(lambda d, c: names[(d, c)], Demangler(), 0, views)
    assert conv.add(objects) == len(objects) and conv.dropped == 0
    ev, strings = conv.take()
    return ev.tolist(), strings


def test_records_read_in_bulk_give_the_rows_their_objects_give() -> None:
    mod = module()
    buffer, objects = in_memory(mod)
    want = converted(reference(), None)
    assert converted(objects, None) == want  # the memory-backed objects read one by one
    MemoryRecord.reads = 0
    assert converted(objects, RecordViews(mod)) == want  # ... and in bulk
    assert MemoryRecord.reads == 0  # no field was read through an object: all came from the buffer
    rows, strings = want
    assert [strings[r[4]] for r in rows][:3] == ["cudaLaunchKernel", "square(float*, int)", "Memcpy HtoD"]
    assert buffer.size  # the buffer lived through the reads


def test_a_class_without_a_dtype_is_read_through_its_objects() -> None:
    mod = module()
    del mod.activity_overhead3_dtype  # a cupti-python without this dtype (another version's names)
    _, objects = in_memory(module())
    views = RecordViews(mod)
    assert views.read(objects) is None
    MemoryRecord.reads = 0
    assert converted(objects, views) == converted(reference(), None)
    assert MemoryRecord.reads > 0
