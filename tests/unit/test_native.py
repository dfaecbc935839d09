"""The native CUPTI extension without a GPU: record layout, loading, and decoding of synthetic activity buffers.

The buffers are built from ctypes mirrors of the CUDA 13.0 CUPTI record structs; when gcc and
cupti.h are here, every mirrored field's offset is checked against the header itself. Decoding
goes through `Collector._decode`, which runs the decoder CUPTI's own buffers go through
(libcupti's cuptiActivityGetNextRecord included), so it needs libcupti but no GPU or driver.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from ctypes import c_char_p, c_int32, c_int64, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from pytest_inferscope.collectors.gpu_native import ALL_API_ENV, api_base_name, traced_api
from pytest_inferscope.events import (
    EVENT_DTYPE,
    CopyKind,
    Domain,
    Kind,
    MemoryKind,
    SyncType,
    copy_devices,
    copy_flags,
    unpack_copy_flags,
)

REPO = Path(__file__).resolve().parents[2]

# CUpti_ActivityKind and related enum values (cupti_activity.h, CUDA 13.0)
MEMCPY, MEMSET, KERNEL_KIND, DRIVER, RUNTIME, MEMCPY2 = 1, 2, 3, 4, 5, 22
CONCURRENT_KERNEL, OVERHEAD, SYNCHRONIZATION, MEMORY2 = 10, 17, 38, 49
RUNTIME_CBID_CUDA_LAUNCH_KERNEL = 211  # CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000
DRIVER_CBID_CU_LAUNCH_KERNEL = 307  # CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel
OVERHEAD_CUPTI_BUFFER_FLUSH, OBJECT_THREAD = 1 << 16, 2
MEMORY_OP_ALLOCATION, MEMORY_OP_RELEASE = 1, 2
INVALID = 0xFFFFFFFF  # CUPTI_INVALID_STREAM_ID, CUPTI_SYNCHRONIZATION_INVALID_VALUE


class Record(ctypes.Structure):
    """Base of the mirrors: CUPTI's PACKED_ALIGNMENT is packed, and every size is a multiple of 8."""

    _pack_ = 1


def _u32(*names: str) -> list[tuple[str, type]]:
    return [(n, c_uint32) for n in names]


class Kernel10(Record):
    _fields_ = [
        ("kind", c_uint32),
        ("cacheConfig", c_uint8),
        ("sharedMemoryConfig", c_uint8),
        ("registersPerThread", c_uint16),
        *_u32("partitionedGlobalCacheRequested", "partitionedGlobalCacheExecuted"),
        ("start", c_uint64),
        ("end", c_uint64),
        ("completed", c_uint64),
        *_u32("deviceId", "contextId", "streamId"),
        *[(n, c_int32) for n in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")],
        ("staticSharedMemory", c_int32),
        ("dynamicSharedMemory", c_int32),
        *_u32("localMemoryPerThread", "localMemoryTotal", "correlationId"),
        ("gridId", c_int64),
        ("name", c_char_p),
        ("reserved0", c_void_p),
        ("queued", c_uint64),
        ("submitted", c_uint64),
        ("launchType", c_uint8),
        ("isSharedMemoryCarveoutRequested", c_uint8),
        ("sharedMemoryCarveoutRequested", c_uint8),
        ("padding", c_uint8),
        ("sharedMemoryExecuted", c_uint32),
        ("graphNodeId", c_uint64),
        *_u32("shmemLimitConfig", "graphId"),
        ("pAccessPolicyWindow", c_void_p),
        *_u32("channelID", "channelType", "clusterX", "clusterY", "clusterZ", "clusterSchedulingPolicy"),
        ("localMemoryTotal_v2", c_uint64),
        *_u32("maxPotentialClusterSize", "maxActiveClusters"),
        ("isDeviceLaunched", c_uint8),
        ("padding3", c_uint8 * 7),
    ]


class Memcpy6(Record):
    _fields_ = [
        ("kind", c_uint32),
        *[(n, c_uint8) for n in ("copyKind", "srcKind", "dstKind", "flags")],
        ("bytes", c_uint64),
        ("start", c_uint64),
        ("end", c_uint64),
        *_u32("deviceId", "contextId", "streamId", "correlationId", "runtimeCorrelationId", "pad"),
        ("reserved0", c_void_p),
        ("graphNodeId", c_uint64),
        *_u32("graphId", "channelID", "channelType"),
        ("isDeviceLaunched", c_uint8),
        ("pad2", c_uint8 * 3),
        ("copyCount", c_uint64),
    ]


class MemcpyPtoP4(Record):
    _fields_ = [
        ("kind", c_uint32),
        *[(n, c_uint8) for n in ("copyKind", "srcKind", "dstKind", "flags")],
        ("bytes", c_uint64),
        ("start", c_uint64),
        ("end", c_uint64),
        *_u32("deviceId", "contextId", "streamId", "srcDeviceId", "srcContextId", "dstDeviceId", "dstContextId"),
        ("correlationId", c_uint32),  # no pad after it: CUPTILP64 is defined on 64-bit hosts
        ("reserved0", c_void_p),
        ("graphNodeId", c_uint64),
        *_u32("graphId", "channelID", "channelType"),
        ("_tail", c_uint32),  # the compiler's padding to a multiple of 8: no field of the header
    ]


class Memset4(Record):
    _fields_ = [
        *_u32("kind", "value"),
        ("bytes", c_uint64),
        ("start", c_uint64),
        ("end", c_uint64),
        *_u32("deviceId", "contextId", "streamId", "correlationId"),
        ("flags", c_uint16),
        ("memoryKind", c_uint16),
        ("pad", c_uint32),
        ("reserved0", c_void_p),
        ("graphNodeId", c_uint64),
        *_u32("graphId", "channelID", "channelType"),
        ("isDeviceLaunched", c_uint8),
        ("pad2", c_uint8 * 3),
    ]


class Api(Record):  # CUpti_ActivityAPI
    _fields_ = [
        *_u32("kind", "cbid"),
        ("start", c_uint64),
        ("end", c_uint64),
        *_u32("processId", "threadId", "correlationId", "returnValue"),
    ]


class Synchronization2(Record):
    _fields_ = [
        *_u32("kind", "type"),
        ("start", c_uint64),
        ("end", c_uint64),
        *_u32("correlationId", "contextId", "streamId", "cudaEventId"),
        ("cudaEventSyncId", c_uint64),
        *_u32("returnValue", "pad"),
    ]


class Memory4(Record):
    _fields_ = [
        *_u32("kind", "memoryOperationType", "memoryKind", "correlationId"),
        ("address", c_uint64),
        ("bytes", c_uint64),
        ("timestamp", c_uint64),
        ("PC", c_uint64),
        *_u32("processId", "deviceId", "contextId", "streamId"),
        ("name", c_char_p),
        *_u32("isAsync", "pad1"),
        ("memoryPoolConfig", c_uint64 * 5),  # nested struct: type + pad, address, threshold, size, utilized
        ("source", c_char_p),
    ]


class Overhead3(Record):
    _fields_ = [
        *_u32("kind", "overheadKind", "objectKind"),
        ("objectId", c_uint32 * 3),  # union {pt: processId, threadId; dcs: deviceId, contextId, streamId}
        ("start", c_uint64),
        ("end", c_uint64),
        *_u32("correlationId", "reserved0"),
        ("overheadData", c_void_p),
    ]


MIRRORS = {
    "CUpti_ActivityKernel10": (Kernel10, 216),
    "CUpti_ActivityMemcpy6": (Memcpy6, 96),
    "CUpti_ActivityMemcpyPtoP4": (MemcpyPtoP4, 96),
    "CUpti_ActivityMemset4": (Memset4, 88),
    "CUpti_ActivityAPI": (Api, 40),
    "CUpti_ActivitySynchronization2": (Synchronization2, 56),
    "CUpti_ActivityMemory4": (Memory4, 128),
    "CUpti_ActivityOverhead3": (Overhead3, 56),
}


def _cupti_include() -> Path | None:
    for root in (os.environ.get("CUDA_HOME", ""), "/usr/local/cuda"):
        if root and (Path(root) / "include" / "cupti.h").is_file():
            return Path(root) / "include"
    return None


@pytest.fixture(scope="module")
def cupti() -> ModuleType:
    return pytest.importorskip(
        "pytest_inferscope._cupti", reason="native extension not built (python3 setup.py build_ext --inplace)"
    )


@pytest.fixture(scope="module")
def loaded(cupti: ModuleType) -> ModuleType:
    try:
        cupti.load()
    except cupti.CuptiError as exc:
        pytest.skip(f"libcupti not loadable here, so synthetic buffers cannot be decoded: {exc}")
    return cupti


def _libcuda_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _events(buf: bytearray) -> np.ndarray:
    return np.frombuffer(buf, dtype=EVENT_DTYPE)


# -- layout --------------------------------------------------------------------------------------------


def test_record_layout_matches_event_dtype(cupti: ModuleType) -> None:
    fields = EVENT_DTYPE.fields
    assert fields is not None and EVENT_DTYPE.names is not None
    assert cupti.RECORD_SIZE == EVENT_DTYPE.itemsize == 48
    assert list(cupti.RECORD_LAYOUT) == list(EVENT_DTYPE.names)
    for field, (offset, size) in cupti.RECORD_LAYOUT.items():
        dtype, dtype_offset = fields[field][:2]
        assert (offset, size) == (dtype_offset, dtype.itemsize), field


def test_mirrors_match_the_cuda_13_headers(tmp_path: Path) -> None:
    """The ctypes mirrors have the header's sizes, and (with gcc and cupti.h here) its offsets, field by field."""
    for cname, (mirror, size) in MIRRORS.items():
        assert ctypes.sizeof(mirror) == size, cname
    include, gcc = _cupti_include(), shutil.which("gcc")
    if include is None or gcc is None:
        pytest.skip("gcc or cupti.h missing: sizes checked against the CUDA 13.0 values only")
    lines = []
    for cname, (mirror, _) in MIRRORS.items():
        lines.append(f'printf("{cname} sizeof %zu\\n", sizeof({cname}));')
        for field, *_ in mirror._fields_:
            if field.startswith("_"):
                continue
            lines.append(f'printf("{cname} {field} %zu\\n", offsetof({cname}, {field}));')
    source = tmp_path / "layout.c"
    source.write_text(
        "#include <stddef.h>\n#include <stdio.h>\n#include <cupti.h>\nint main(void) {\n"
        + "\n".join(lines)
        + "\nreturn 0;\n}\n"
    )
    exe = tmp_path / "layout"
    subprocess.run([gcc, f"-I{include}", str(source), "-o", str(exe)], check=True, capture_output=True)
    output = subprocess.check_output([str(exe)], text=True)
    header = {" ".join(words[:2]): int(words[2]) for words in (line.split() for line in output.splitlines())}
    for cname, (mirror, _) in MIRRORS.items():
        assert header[f"{cname} sizeof"] == ctypes.sizeof(mirror), cname
        for field, *_ in mirror._fields_:
            if field.startswith("_"):
                continue
            assert header[f"{cname} {field}"] == getattr(mirror, field).offset, f"{cname}.{field}"


# -- import, load, create ------------------------------------------------------------------------------


def test_module_imports_and_reports_its_version(cupti: ModuleType) -> None:
    assert cupti.API_VERSION >= 130000
    assert str(cupti.API_VERSION) in cupti.version()
    assert issubclass(cupti.CuptiBusyError, cupti.CuptiError)
    assert issubclass(cupti.CuptiError, RuntimeError)


def test_create_without_the_extension_says_it_is_not_built(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_inferscope.collectors import gpu_native

    monkeypatch.setitem(sys.modules, "pytest_inferscope._cupti", None)  # makes the import fail
    with pytest.raises(RuntimeError, match="native extension not built"):
        gpu_native.create()


def test_create_without_a_gpu_gives_a_readable_reason(cupti: ModuleType) -> None:
    if _libcuda_present():
        pytest.skip("this machine has an NVIDIA driver; tests/gpu covers create() there")
    from pytest_inferscope.collectors import gpu_native

    with pytest.raises(RuntimeError) as info:
        gpu_native.create()
    assert "libcuda.so.1" in str(info.value) or "libcupti" in str(info.value)


def test_start_without_a_gpu_raises_and_leaves_cupti_free(loaded: ModuleType) -> None:
    if _libcuda_present():
        pytest.skip("this machine has an NVIDIA driver")
    first = loaded.Collector()
    with pytest.raises(loaded.CuptiError):
        first.start()
    first.stop()  # idempotent, and a no-op after a failed start
    assert first.enabled() == []
    with pytest.raises(loaded.CuptiError) as info:
        loaded.Collector().start()  # not "another Collector is collecting"
    assert "another" not in str(info.value)


FAKE_LIBCUPTI = r"""
#include <stdint.h>
#include <stddef.h>
int cuptiGetVersion(uint32_t *v) { *v = VERSION; return 0; }
#define STUB(f) int f(void) { return 999; }
STUB(cuptiGetResultString) STUB(cuptiGetTimestamp) STUB(cuptiGetCallbackName) STUB(cuptiGetThreadIdType)
STUB(cuptiSetThreadIdType) STUB(cuptiActivityEnable) STUB(cuptiActivityDisable) STUB(cuptiActivityRegisterCallbacks)
STUB(cuptiActivityGetNextRecord) STUB(cuptiActivityGetNumDroppedRecords)
#ifndef MISSING
STUB(cuptiActivityFlushAll)
#endif
"""


def test_load_refuses_other_cupti_generations_and_lists_what_it_tried(cupti: ModuleType, tmp_path: Path) -> None:
    """Fake libcupti builds: an older API generation, a library missing a symbol, a path that does not exist."""
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc missing: cannot build fake libcupti libraries")
    source = tmp_path / "fake.c"
    source.write_text(FAKE_LIBCUPTI)
    old, partial = tmp_path / "libcupti_cuda12.so", tmp_path / "libcupti_partial.so"
    for lib, defines in ((old, ["-DVERSION=28"]), (partial, ["-DVERSION=130001", "-DMISSING"])):
        subprocess.run([gcc, "-shared", "-fPIC", *defines, str(source), "-o", str(lib)], check=True)
    script = textwrap.dedent(
        f"""
        from pytest_inferscope import _cupti
        for path in ({str(old)!r}, {str(partial)!r}, "/nonexistent/libcupti.so.13"):
            try:
                _cupti.load(path)
            except _cupti.CuptiError as exc:
                print(exc)
            else:
                print("LOADED", path)
        print("library:", _cupti.library())
        """
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True).stdout
    refused, missing, absent, library = out.strip().splitlines()
    assert "CUPTI API version 28 (CUDA 12)" in refused and "refuses rather than misread" in refused
    assert "lacks cuptiActivityFlushAll" in missing
    assert refused.startswith("cannot load libcupti (tried: ") and "/nonexistent/libcupti.so.13" in absent
    assert library == "library: None"


# -- which API calls are recorded -----------------------------------------------------------------------

#: The calls the analysis needs (launches, copies, memsets, synchronisations, allocations), by CUPTI name.
NEEDED = {
    "runtime": [
        "cudaLaunchKernel_v7000", "cudaLaunchKernel_ptsz_v7000", "cudaLaunchKernelExC_v11060",
        "cudaLaunchCooperativeKernel_v9000", "cudaLaunchCooperativeKernelMultiDevice_v9000", "cudaGraphLaunch_v10000",
        "__cudaLaunchKernel_v13000", "cudaMemcpy_v3020", "cudaMemcpyAsync_v3020", "cudaMemcpy2DAsync_v3020",
        "cudaMemcpyToSymbol_v3020", "cudaMemcpyPeerAsync_v4000", "cudaMemcpyBatchAsync_v13000", "cudaMemset_v3020",
        "cudaMemsetAsync_v3020", "cudaDeviceSynchronize_v3020", "cudaStreamSynchronize_v3020",
        "cudaEventSynchronize_v3020", "cudaThreadSynchronize_v3020", "cudaStreamWaitEvent_v3020", "cudaMalloc_v3020",
        "cudaMallocHost_v3020", "cudaMallocManaged_v6000", "cudaMallocAsync_v11020", "cudaFree_v3020",
        "cudaFreeHost_v3020", "cudaFreeAsync_v11020", "cudaHostAlloc_v3020",
    ],
    "driver": [
        "cuLaunchKernel", "cuLaunchKernel_ptsz", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuGraphLaunch",
        "cuMemcpyHtoD_v2", "cuMemcpyDtoHAsync_v2", "cuMemcpyAsync", "cuMemcpyPeerAsync", "cuMemsetD8_v2",
        "cuMemsetD32Async", "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuStreamWaitEvent",
        "cuMemAlloc_v2", "cuMemAllocHost_v2", "cuMemAllocAsync", "cuMemFree_v2", "cuMemFreeHost", "cuMemFreeAsync",
        "cuMemHostAlloc",
    ],
}  # fmt: skip
#: torch's frequent calls that the analysis never reads (about 6 of every 7 records on the H200).
UNUSED = {
    "runtime": [
        "cudaGetDevice_v3020", "cudaSetDevice_v3020", "cudaGetDeviceCount_v3020", "cudaGetLastError_v3020",
        "cudaPeekAtLastError_v3020", "cudaStreamIsCapturing_v10000", "cudaDeviceGetAttribute_v5000",
        "cudaEventQuery_v3020", "cudaEventRecord_v3020", "cudaLaunchHostFunc_v10000",
    ],
    "driver": ["cuCtxGetCurrent", "cuDevicePrimaryCtxGetState", "cuEventRecord", "cuStreamQuery", "cuLaunchHostFunc"],
}  # fmt: skip
HEADERS = {"runtime": ("cupti_runtime_cbid.h", "CUPTI_RUNTIME_TRACE_CBID_"),
           "driver": ("cupti_driver_cbid.h", "CUPTI_DRIVER_TRACE_CBID_")}  # fmt: skip


def _header_cbids(domain: str) -> dict[str, int]:
    include = _cupti_include()
    if include is None:
        pytest.skip("CUPTI headers not found")
    header, prefix = HEADERS[domain]
    text = (include / header).read_text()
    found = {n: int(v) for n, v in re.findall(prefix + r"(\w+)\s*=\s*(\d+)", text)}
    return {n: v for n, v in found.items() if n not in ("INVALID", "SIZE", "FORCE_INT")}


def test_the_traced_pattern_keeps_what_the_analysis_needs_and_nothing_torch_calls_besides() -> None:
    for domain in NEEDED:
        assert [n for n in NEEDED[domain] if not traced_api(n)] == [], domain
        assert [n for n in UNUSED[domain] if traced_api(n)] == [], domain
    assert api_base_name("cuMemcpyHtoDAsync_v2_ptsz") == "cuMemcpyHtoDAsync"
    assert api_base_name("__cudaLaunchKernel_ptsz_v13000") == "__cudaLaunchKernel"
    assert api_base_name("cuLaunchKernel") == "cuLaunchKernel"
    assert traced_api("cudaLaunchKernel") and not traced_api("cudaLaunchHostFunc")  # display names too


@pytest.mark.parametrize("domain", ["runtime", "driver"])
def test_the_compiled_table_is_the_pattern_over_the_headers(cupti: ModuleType, domain: str) -> None:
    """_cupti.TRACED_APIS (a list in C, by name) is exactly the header's callback ids gpu_native.TRACED_API picks."""
    header = _header_cbids(domain)
    table = cupti.TRACED_APIS[domain]
    assert table == {n: v for n, v in header.items() if traced_api(n)}
    assert set(NEEDED[domain]) <= set(table) and not set(UNUSED[domain]) & set(table)
    assert set(NEEDED[domain]) | set(UNUSED[domain]) <= set(header)  # the names above are real
    assert len(table) < len(header) / 3


#: A libcupti that says yes to everything and keeps which API calls would be recorded (fake_recorded).
FILTERING_LIBCUPTI = r"""
#include <stdint.h>
#include <string.h>
static unsigned char on[2][4096]; /* [runtime, driver] */
int cuptiGetVersion(uint32_t *v) { *v = 130001; return 0; }
int cuptiGetResultString(int rc, const char **s) { (void)rc; *s = "FAKE_ERROR"; return 0; }
int cuptiGetThreadIdType(int *t) { *t = 0; return 0; }
int cuptiActivityEnable(int kind) { if (kind == 5 || kind == 4) memset(on[kind == 4], 1, 4096); return 0; }
int cuptiActivityDisable(int kind) { if (kind == 5 || kind == 4) memset(on[kind == 4], 0, 4096); return 0; }
#define OK(f) int f(void) { return 0; }
OK(cuptiGetTimestamp) OK(cuptiGetCallbackName) OK(cuptiSetThreadIdType) OK(cuptiActivityRegisterCallbacks)
OK(cuptiActivityFlushAll) OK(cuptiActivityGetNumDroppedRecords)
int cuptiActivityGetNextRecord(void) { return 1; }
#ifdef PER_API
int cuptiActivityEnableRuntimeApi(uint32_t cbid, uint8_t e) { if (cbid >= 4096) return 1; on[0][cbid] = e; return 0; }
int cuptiActivityEnableDriverApi(uint32_t cbid, uint8_t e) { if (cbid >= 4096) return 1; on[1][cbid] = e; return 0; }
#endif
int fake_recorded(int driver, uint32_t cbid) { return on[driver][cbid]; }
"""

FILTERING_SCRIPT = """
import ctypes, json, sys
from pytest_inferscope import _cupti
path = sys.argv[1]
_cupti.load(path)
fake = ctypes.CDLL(path)
def recorded():
    return [sorted(c for c in range(1, 4096) if fake.fake_recorded(d, c)) for d in (0, 1)]
c = _cupti.Collector()
out = {"version": _cupti.version()}
c.start()
out["started"], out["apis"], out["kinds"] = recorded(), c.api_records(), c.enabled()
c.stop()
out["stopped"] = recorded()
print(json.dumps(out))
"""


@pytest.mark.parametrize("case", ["per-api", "all-api-env", "no-per-api"])
def test_start_records_only_the_traced_calls_with_a_fake_libcupti(cupti: ModuleType, tmp_path: Path, case: str) -> None:
    gcc = shutil.which("gcc")
    if gcc is None:
        pytest.skip("gcc missing: cannot build a fake libcupti")
    source, lib = tmp_path / "fake.c", tmp_path / "libcupti_fake.so"
    source.write_text(FILTERING_LIBCUPTI)
    defines = [] if case == "no-per-api" else ["-DPER_API"]
    subprocess.run([gcc, "-shared", "-fPIC", *defines, str(source), "-o", str(lib)], check=True)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(ALL_API_ENV, None)
    if case == "all-api-env":
        env[ALL_API_ENV] = "1"
    proc = subprocess.run([sys.executable, "-c", FILTERING_SCRIPT, str(lib)], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    runtime, driver = out["started"]
    sizes = [max(_header_cbids(d).values()) + 1 for d in ("runtime", "driver")]  # CBID_SIZE
    assert out["kinds"][:4] == ["CONCURRENT_KERNEL", "MEMCPY", "MEMSET", "RUNTIME"] and "DRIVER" in out["kinds"]
    assert out["kinds"][-1] == "MEMCPY2"  # peer copies: optional, enabled where the driver has them
    if case == "per-api":  # (ids past the headers' CBID_SIZE, calls newer than them, are left as they are)
        assert [c for c in runtime if c < sizes[0]] == sorted(cupti.TRACED_APIS["runtime"].values())
        assert [c for c in driver if c < sizes[1]] == sorted(cupti.TRACED_APIS["driver"].values())
        n, of = [len(cupti.TRACED_APIS[d]) for d in ("runtime", "driver")], [size - 1 for size in sizes]
        assert out["apis"] == f"runtime: {n[0]} traced calls of {of[0]}; driver: {n[1]} traced calls of {of[1]}"
        assert out["version"].endswith("API records: launches, copies, memsets, syncs and allocations only")
    elif case == "all-api-env":
        assert len(runtime) == len(driver) == 4095  # the kind, untouched: every call
        assert out["apis"] == (
            "runtime: every call (INFERSCOPE_CUPTI_ALL_API=1); driver: every call (INFERSCOPE_CUPTI_ALL_API=1)"
        )
        assert out["version"].endswith("API records: every call (INFERSCOPE_CUPTI_ALL_API=1)")
    else:
        assert len(runtime) == len(driver) == 4095
        assert "runtime: every call (this libcupti lacks cuptiActivityEnableRuntimeApi)" in out["apis"]
        assert out["version"].endswith("API records: every call (this libcupti lacks cuptiActivityEnableRuntimeApi)")
    assert out["stopped"] == [[], []]  # nothing recorded after stop, per-call switches included


# -- decoding ------------------------------------------------------------------------------------------


def _buffer(*records: ctypes.Structure) -> bytes:
    return b"".join(bytes(r) for r in records)


def _kernel(name: bytes, start: int, end: int, corr: int, stream: int = 7, device: int = 0) -> Kernel10:
    return Kernel10(
        kind=CONCURRENT_KERNEL, start=start, end=end, correlationId=corr, name=name, streamId=stream, deviceId=device
    )


def _runtime(cbid: int, start: int, end: int, corr: int, tid: int, kind: int = RUNTIME) -> Api:
    return Api(kind=kind, cbid=cbid, start=start, end=end, processId=99, threadId=tid, correlationId=corr)


def every_record() -> list[ctypes.Structure]:
    """One record of each kind the decoder reads (tests/unit/test_cupti_raw.py reads them raw too)."""
    overhead = Overhead3(kind=OVERHEAD, overheadKind=OVERHEAD_CUPTI_BUFFER_FLUSH, objectKind=OBJECT_THREAD)
    overhead.objectId[:] = [99, 4242, 0]
    overhead.start, overhead.end = 900, 950
    records: list[ctypes.Structure] = [
        _runtime(RUNTIME_CBID_CUDA_LAUNCH_KERNEL, 100, 110, corr=5, tid=4242),
        _kernel(b"_Z6squarePfi", 120, 220, corr=5, stream=7, device=1),
        Memcpy6(kind=MEMCPY, copyKind=CopyKind.HTOD, srcKind=MemoryKind.PAGEABLE, dstKind=MemoryKind.DEVICE,
                bytes=4 << 20, start=300, end=400, deviceId=1, streamId=7, correlationId=6, runtimeCorrelationId=6),
        Memset4(kind=MEMSET, value=0, bytes=1024, start=410, end=420, deviceId=1, streamId=8, correlationId=9,
                memoryKind=MemoryKind.DEVICE),
        Synchronization2(kind=SYNCHRONIZATION, type=SyncType.STREAM_SYNCHRONIZE, start=430, end=440,
                         correlationId=10, contextId=1, streamId=7, cudaEventId=INVALID),
        Synchronization2(kind=SYNCHRONIZATION, type=SyncType.CONTEXT_SYNCHRONIZE, start=450, end=460,
                         correlationId=11, contextId=1, streamId=INVALID, cudaEventId=INVALID),
        Memory4(kind=MEMORY2, memoryOperationType=MEMORY_OP_ALLOCATION, memoryKind=MemoryKind.DEVICE,
                correlationId=12, bytes=1 << 20, timestamp=500, deviceId=1, streamId=INVALID),
        Memory4(kind=MEMORY2, memoryOperationType=MEMORY_OP_RELEASE, memoryKind=MemoryKind.DEVICE,
                correlationId=13, bytes=1 << 20, timestamp=600, deviceId=1, streamId=INVALID),
        overhead,
        _runtime(DRIVER_CBID_CU_LAUNCH_KERNEL, 700, 705, corr=14, tid=4243, kind=DRIVER),
        _kernel(b"my_triton_kernel", 710, 0, corr=14),  # still running at a forced flush
    ]  # fmt: skip
    return records


def test_decode_every_record_kind(loaded: ModuleType) -> None:
    records = every_record()
    collector = loaded.Collector()
    buf, names = collector._decode(_buffer(*records))
    ev = _events(buf)
    assert len(ev) == len(records)
    assert (ev["domain"] == Domain.DEVICE).all()
    name = [names[i] for i in ev["name"]]

    launch, kernel, copy, memset, ssync, csync, alloc, free, ovh, drv, running = ev
    assert (launch["kind"], name[0], launch["start"], launch["end"]) == (Kind.RUNTIME, "cudaLaunchKernel", 100, 110)
    assert (launch["corr"], launch["tid"], launch["device"], launch["stream"]) == (5, 4242, -1, -1)
    assert (launch["flags"], launch["value"]) == (2, 0)  # CUPTI_CB_DOMAIN_RUNTIME_API, cudaSuccess

    assert (kernel["kind"], name[1], kernel["start"], kernel["end"]) == (Kind.KERNEL, "square(float*, int)", 120, 220)
    assert (kernel["corr"], kernel["stream"], kernel["device"], kernel["tid"]) == (5, 7, 1, -1)

    assert (copy["kind"], name[2], copy["value"], copy["corr"]) == (Kind.MEMCPY, "Memcpy HtoD", 4 << 20, 6)
    assert [int(x) for x in unpack_copy_flags(copy["flags"])] == [CopyKind.HTOD, MemoryKind.PAGEABLE, MemoryKind.DEVICE]
    assert (copy["start"], copy["end"], copy["stream"], copy["device"]) == (300, 400, 7, 1)

    assert (memset["kind"], name[3], memset["value"], memset["flags"]) == (Kind.MEMSET, "Memset", 1024, 3)
    assert (memset["corr"], memset["stream"], memset["start"], memset["end"]) == (9, 8, 410, 420)

    assert (ssync["kind"], ssync["flags"], ssync["stream"], ssync["corr"]) == (Kind.SYNC, 3, 7, 10)
    assert (csync["flags"], csync["stream"], csync["value"], csync["start"], csync["end"]) == (4, -1, -1, 450, 460)

    assert (alloc["kind"], name[6], alloc["value"], alloc["start"], alloc["end"]) == (
        Kind.GPU_MEMORY, "Memory alloc", 1 << 20, 500, 500)  # fmt: skip
    assert (free["value"], name[7], free["corr"], free["device"]) == (-(1 << 20), "Memory free", 13, 1)
    assert free["stream"] == -1

    assert (ovh["kind"], name[8], ovh["tid"], ovh["flags"]) == (Kind.OVERHEAD, "CUPTI buffer flush", 4242, 1 << 16)
    assert (drv["kind"], name[9], drv["flags"], drv["tid"]) == (Kind.RUNTIME, "cuLaunchKernel", 1, 4243)  # driver
    assert drv["corr"] == 14
    assert (running["end"], name[10]) == (0, "my_triton_kernel")  # emitted, and counted:
    assert collector.incomplete() == 1
    assert collector.dropped() == 0


def test_a_peer_copy_is_a_memcpy_event_that_says_its_devices(loaded: ModuleType) -> None:
    """MEMCPY2 (CUpti_ActivityMemcpyPtoP4): the devices go to the flags' top byte, the rest as for MEMCPY."""
    peer = MemcpyPtoP4(kind=MEMCPY2, copyKind=CopyKind.PTOP, srcKind=MemoryKind.DEVICE, dstKind=MemoryKind.DEVICE,
                       bytes=8 << 20, start=500, end=900, deviceId=0, streamId=13, srcDeviceId=0, dstDeviceId=1,
                       correlationId=21)  # fmt: skip
    back = MemcpyPtoP4(kind=MEMCPY2, copyKind=CopyKind.PTOP, srcKind=MemoryKind.DEVICE, dstKind=MemoryKind.DEVICE,
                       bytes=1024, start=950, end=960, deviceId=1, streamId=14, srcDeviceId=1, dstDeviceId=0,
                       correlationId=22)  # fmt: skip
    far = MemcpyPtoP4(kind=MEMCPY2, copyKind=CopyKind.PTOP, bytes=1, start=1, end=2, deviceId=15, srcDeviceId=15,
                      dstDeviceId=2, correlationId=23)  # fmt: skip
    buf, names = loaded.Collector()._decode(_buffer(peer, back, far))
    ev = _events(buf)
    assert [names[i] for i in ev["name"]] == ["Memcpy PtoP"] * 3
    assert (ev["kind"] == Kind.MEMCPY).all()
    assert (ev["value"][0], ev["corr"][0], ev["stream"][0], ev["device"][0]) == (8 << 20, 21, 13, 0)
    assert (ev["start"][0], ev["end"][0], ev["device"][1]) == (500, 900, 1)
    assert [int(x) for x in unpack_copy_flags(ev["flags"][0])] == [CopyKind.PTOP, MemoryKind.DEVICE, MemoryKind.DEVICE]
    src, dst = copy_devices(ev["flags"])
    assert (src.tolist(), dst.tolist()) == ([0, 1, -1], [1, 0, 2])  # device 15 does not fit: not known
    assert ev["flags"][0] == copy_flags(CopyKind.PTOP, MemoryKind.DEVICE, MemoryKind.DEVICE, 0, 1)


def test_names_are_interned_once_and_stay_stable_across_drains(loaded: ModuleType) -> None:
    collector = loaded.Collector()
    first, names1 = collector._decode(
        _buffer(_kernel(b"_Z6squarePfi", 1, 2, 1), _kernel(b"_Z6squarePfi", 3, 4, 2), _kernel(b"other", 5, 6, 3))
    )
    second, names2 = collector._decode(_buffer(_kernel(b"_Z4tanhPf", 7, 8, 4), _kernel(b"_Z6squarePfi", 9, 10, 5)))
    ev1, ev2 = _events(first), _events(second)
    assert names2[: len(names1)] == names1  # indices never move
    assert len(names2) == len(set(names2))
    assert [names2[i] for i in ev1["name"]] == ["square(float*, int)", "square(float*, int)", "other"]
    assert [names2[i] for i in ev2["name"]] == ["tanh(float*)", "square(float*, int)"]
    assert ev1["name"][0] == ev2["name"][1]
    empty, names3 = collector.drain()
    assert len(_events(empty)) == 0 and names3 == names2


def test_every_api_name_loses_only_its_version_suffix(loaded: ModuleType) -> None:
    collector = loaded.Collector()
    api = [_runtime(cbid, 10, 20, cbid, 1) for cbid in range(1, 400)]
    buf, names = collector._decode(_buffer(*api))
    shown = [names[i] for i in _events(buf)["name"]]
    assert "cudaLaunchKernel" in shown and "cudaMemcpy" in shown and "cudaDeviceSynchronize" in shown
    assert not [s for s in shown if s.rsplit("_", 1)[-1].startswith("v") and s.rsplit("_", 1)[-1][1:].isdigit()]


def test_records_beyond_max_records_are_counted_as_dropped(loaded: ModuleType) -> None:
    collector = loaded.Collector(max_records=2)
    buf, _ = collector._decode(_buffer(*[_kernel(b"k", i, i + 1, i) for i in range(1, 6)]))
    assert len(_events(buf)) == 2
    assert collector.dropped() == 3


def test_end_before_start_counts_as_incomplete(loaded: ModuleType) -> None:
    collector = loaded.Collector()
    collector._decode(_buffer(_kernel(b"k", 100, 50, 1), _kernel(b"k", 100, 0, 2), _kernel(b"k", 100, 100, 3)))
    assert collector.incomplete() == 2


def test_unknown_kinds_are_skipped_and_an_empty_buffer_is_empty(loaded: ModuleType) -> None:
    collector = loaded.Collector()
    buf, names = collector._decode(b"")
    assert len(_events(buf)) == 0 and names == []
    kernel_v1 = _kernel(b"k", 1, 2, 1)
    kernel_v1.kind = KERNEL_KIND  # serial KERNEL records have the same layout
    buf, names = collector._decode(_buffer(kernel_v1))
    assert [names[i] for i in _events(buf)["name"]] == ["k"]


def test_constructor_rejects_bad_sizes(cupti: ModuleType) -> None:
    with pytest.raises(ValueError, match="buffer_size"):
        cupti.Collector(buffer_size=1000)
    with pytest.raises(ValueError):
        cupti.Collector(max_records=-1)


def test_a_record_whose_name_cannot_be_interned_is_dropped_not_given_another_name(loaded: ModuleType) -> None:
    collector = loaded.Collector()
    # name_limit=1: interning a second name fails, as it does when memory runs out
    buf, names = collector._decode(_buffer(_kernel(b"a", 1, 2, 1), _kernel(b"b", 3, 4, 2), _kernel(b"a", 5, 6, 3)), 1)
    ev = _events(buf)
    assert names == ["a"] and [names[i] for i in ev["name"]] == ["a", "a"]
    assert list(ev["corr"]) == [1, 3] and collector.dropped() == 1
    buf, names = collector._decode(_buffer(_kernel(b"b", 7, 8, 4)))  # without the limit, the name comes
    assert [names[i] for i in _events(buf)["name"]] == ["b"]


# -- what the C source must keep (no GPU can show these races) ------------------------------------------

C_SOURCE = (REPO / "native" / "_cupti.c").read_text()
_LOCKED = re.compile(r"pthread_mutex_lock\(&g_lock\);(.*?)pthread_mutex_unlock\(&g_lock\);", re.S)


def test_no_python_c_api_call_while_g_lock_is_held() -> None:
    """CUPTI's thread takes g_lock to decode; Python code run under it (GC, finalizers) could wait on the GIL."""
    regions = _LOCKED.findall(C_SOURCE)
    assert len(regions) >= 8
    held = [r for r in regions if re.search(r"\bPy[A-Z_]\w*\(", r)]
    assert held == [], held


def test_the_cupti_buffer_size_is_read_and_written_under_g_lock() -> None:
    uses = [m.start() for m in re.finditer(r"\bg_buffer_size\b", C_SOURCE)]
    spans = [m.span(1) for m in _LOCKED.finditer(C_SOURCE)]
    declaration = C_SOURCE.index("static size_t g_buffer_size")
    outside = [u for u in uses if u != declaration + len("static size_t ") and not any(a <= u < b for a, b in spans)]
    assert len(uses) >= 3 and outside == [], [C_SOURCE[u - 60 : u + 20] for u in outside]


def test_module_init_uses_the_non_stealing_add_object() -> None:
    """PyModule_AddObject steals only on success, which made the failure path decref twice and leak."""
    assert "PyModule_AddObject(" not in C_SOURCE and "PyModule_AddObjectRef(" in C_SOURCE
