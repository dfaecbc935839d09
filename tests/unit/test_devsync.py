"""DeviceSync's driver calls, against a fake libcuda (the real one is exercised by the GPU tests)."""

from __future__ import annotations

import sys
import types
from typing import Any

import pytest

from pytest_inferscope.collectors.devsync import DeviceSync


class FakeDriver:
    """Enough of libcuda for DeviceSync: devices with primary contexts, a current context, a call log."""

    def __init__(self, active: list[bool], current: int | None = None) -> None:
        self.active = list(active)
        self.ctx = {i: 0x1000 + i for i in range(len(active))}  # primary context handle per device
        self.current = current
        self.stack: list[int | None] = []
        self.calls: list[str] = []
        self.refs = dict.fromkeys(range(len(active)), 0)
        self.fail_sync = 0

    def _log(self, name: str) -> None:
        self.calls.append(name)

    def cuDeviceGetCount(self, ref: Any) -> int:
        self._log("count")
        ref._obj.value = len(self.active)
        return 0

    def cuDeviceGet(self, ref: Any, ordinal: int) -> int:
        ref._obj.value = 100 + ordinal  # CUdevice handles differ from ordinals on purpose
        return 0

    def cuDevicePrimaryCtxGetState(self, dev: int, flags: Any, active: Any) -> int:
        self._log(f"state {dev - 100}")
        active._obj.value = int(self.active[dev - 100])
        return 0

    def cuDevicePrimaryCtxRetain(self, ref: Any, dev: int) -> int:
        self._log(f"retain {dev - 100}")
        self.refs[dev - 100] += 1
        ref._obj.value = self.ctx[dev - 100]
        return 0

    def cuDevicePrimaryCtxRelease_v2(self, dev: int) -> int:
        self._log(f"release {dev - 100}")
        self.refs[dev - 100] -= 1
        return 0

    def cuCtxGetCurrent(self, ref: Any) -> int:
        ref._obj.value = self.current
        return 0

    def cuCtxSynchronize(self) -> int:
        self._log(f"sync {self.current:#x}" if self.current else "sync none")
        if self.fail_sync:
            return self.fail_sync
        return 0

    def cuCtxPushCurrent_v2(self, ctx: Any) -> int:
        self.stack.append(self.current)
        self.current = ctx.value
        return 0

    def cuCtxPopCurrent_v2(self, ref: Any) -> int:
        self.current = self.stack.pop()
        return 0

    def cuDeviceGetPCIBusId(self, buf: Any, size: int, dev: int) -> int:
        buf.value = f"0000:{0x3B + dev - 100:02X}:00.0".encode()
        return 0

    def cuGetErrorName(self, rc: int, ref: Any) -> int:
        ref._obj.value = b"CUDA_ERROR_LAUNCH_FAILED"
        return 0


class PrimingDriver(FakeDriver):
    """With the calls `prime` makes: an allocation, a memset and a free, logged with the current context."""

    fail_alloc = 0
    fail_memset = 0

    def cuMemAlloc_v2(self, ref: Any, size: Any) -> int:
        self._log(f"alloc {self.current:#x} {size.value}")
        ref._obj.value = 0xD000
        return self.fail_alloc

    def cuMemsetD8_v2(self, ptr: Any, value: Any, size: Any) -> int:
        self._log(f"memset {self.current:#x} {ptr.value:#x} {size.value}")
        return self.fail_memset

    def cuMemFree_v2(self, ptr: Any) -> int:
        self._log(f"free {ptr.value:#x}")
        return 0


def synced(drv: FakeDriver) -> DeviceSync:
    sync = DeviceSync()
    sync._cuda = drv
    return sync


def test_common_case_is_one_synchronize_after_the_first_round() -> None:
    drv = FakeDriver([True], current=0x1000)  # torch: device 0's primary context is current
    sync = synced(drv)
    assert sync() is True  # it waited: the round's end is read after it
    assert drv.calls == ["count", "state 0", "retain 0", "sync 0x1000"]
    drv.calls.clear()
    sync()
    assert drv.calls == ["sync 0x1000"]  # no count, state or retain again; no second sync of the same context
    sync.release()
    assert drv.refs == {0: 0} and sync.held == {}


def test_every_active_device_and_a_foreign_current_context_are_synchronised() -> None:
    drv = FakeDriver([True, False, True], current=0x9999)  # a context that is no primary one
    sync = synced(drv)
    sync()
    syncs = [c for c in drv.calls if c.startswith("sync")]
    assert syncs == ["sync 0x1000", "sync 0x1002", "sync 0x9999"]
    assert drv.current == 0x9999 and not drv.stack  # pushed contexts popped again
    drv.calls.clear()
    drv.active[1] = True  # the test touches a second device mid-collection
    sync()
    assert "state 1" in drv.calls and "retain 1" in drv.calls and "state 0" not in drv.calls
    assert sorted(sync.held) == [0, 1, 2]
    sync.release()
    assert drv.refs == {0: 0, 1: 0, 2: 0}


def test_uninitialised_driver_waits_for_nothing_and_looks_again() -> None:
    drv = FakeDriver([True], current=0x1000)
    calls = {"n": 0}

    def not_initialised(ref: Any) -> int:
        calls["n"] += 1
        return 3  # CUDA_ERROR_NOT_INITIALIZED

    drv.cuDeviceGetCount = not_initialised  # type: ignore[method-assign]
    sync = synced(drv)
    assert sync() is False and sync() is False  # nothing could hold GPU work: the round ends before the look
    assert calls["n"] == 2 and not [c for c in drv.calls if c.startswith("sync")]


def test_no_context_in_the_process_waits_for_nothing_until_one_is_active() -> None:
    # A CPU-only test on a GPU machine: the driver initialised (the GPU backend loaded it), no device's primary context
    # active and none current. Nothing is waited for, so the round ends with its body, not after the look.
    drv = FakeDriver([False, False], current=None)
    sync = synced(drv)
    assert sync() is False and sync() is False
    assert not [c for c in drv.calls if c.startswith("sync")] and sync.held == {}
    drv.active[1] = True  # the body started CUDA on device 1
    assert sync() is True and drv.calls[-1] == "sync 0x1001"
    drv.calls.clear()
    assert sync() is True and drv.calls == ["state 0", "sync 0x1001"]  # device 0 looked at again, still inactive
    sync.release()
    assert synced(FakeDriver([False], current=0x9999))() is True  # a context current on the thread, no primary one


def test_a_failed_synchronize_names_the_call_and_the_error() -> None:
    drv = FakeDriver([True], current=0x1000)
    sync = synced(drv)
    sync()
    drv.fail_sync = 719
    with pytest.raises(RuntimeError, match=r"cuCtxSynchronize \(device 0\) failed: CUDA_ERROR_LAUNCH_FAILED \(719\)"):
        sync()
    sync.release()
    assert drv.refs == {0: 0}


def test_pci_bus_ids_name_the_synchronised_devices_only() -> None:
    drv = FakeDriver([True, False, True], current=0x1000)
    sync = synced(drv)
    assert sync.pci_bus_ids() == []  # nothing synchronised yet
    sync()
    assert sync.pci_bus_ids() == ["0000:3B:00.0", "0000:3D:00.0"]
    sync.release()
    assert sync.pci_bus_ids() == []


def test_without_libcuda_the_loader_is_asked_again_only_on_a_sign_of_a_load(monkeypatch: pytest.MonkeyPatch) -> None:
    # Asking the dynamic loader every round cost 48 µs on a CPU-only VM, inside the round's time.
    from pytest_inferscope.collectors import devsync

    asked: list[int] = []
    loaded: list[FakeDriver] = []

    def cdll(name: str, mode: int = 0) -> FakeDriver:
        asked.append(1)
        if not loaded:
            raise OSError(f"{name}: cannot open shared object file")
        return loaded[0]

    clock = [0]
    monkeypatch.setattr(devsync.ctypes, "CDLL", cdll)
    monkeypatch.setattr(devsync.time, "monotonic_ns", lambda: clock[0])
    monkeypatch.setattr(devsync, "_last_miss", None)  # no look yet in this process
    sync = DeviceSync()
    for _ in range(5):
        sync()
    assert len(asked) == 1  # nothing changed since the first look
    monkeypatch.setitem(sys.modules, "inferscope_test_fake_framework", types.ModuleType("fake"))
    sync()
    assert len(asked) == 2  # an import can load libcuda
    clock[0] += devsync.REPROBE_NS
    sync()
    assert len(asked) == 2  # in a round, time passing alone asks nothing
    sync.prepare()
    assert len(asked) == 3  # before a round, after a while, the loader is asked anyway
    sync.prepare()
    DeviceSync()()  # the next collection in the process starts from the last look
    assert len(asked) == 3
    driver = FakeDriver([True], current=0x1000)
    loaded.append(driver)
    monkeypatch.setitem(sys.modules, "inferscope_test_fake_cuda", types.ModuleType("cuda"))
    sync()
    sync()
    assert len(asked) == 4 and driver.calls.count("sync 0x1000") == 2  # found: held, and never asked again


def three_empty_rounds() -> tuple[Any, Any]:
    """A collection of three empty rounds without GPU collection: its raw trace and its ROUND events."""
    from pytest_inferscope.collectors import Collection, CollectionOptions
    from pytest_inferscope.events import Kind

    coll = Collection(CollectionOptions(cpu="off"))
    coll.start()
    for i in range(3):
        with coll.round(i):
            pass
    raw = coll.stop()
    return raw, raw.events[raw.events["kind"] == Kind.ROUND]


def test_the_loaders_first_look_is_taken_before_the_round_not_in_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """A trivial test's round took 0.24 ms, 0.237 ms of it the loader's first look, inside the round."""
    from pytest_inferscope.collectors import devsync
    from pytest_inferscope.events import host_clock_ns

    asked: list[int] = []

    def cdll(name: str, mode: int = 0) -> FakeDriver:
        asked.append(host_clock_ns())
        raise OSError(f"{name}: cannot open shared object file")

    monkeypatch.setattr(devsync.ctypes, "CDLL", cdll)
    monkeypatch.setattr(devsync, "_last_miss", None)
    _, rounds = three_empty_rounds()
    assert len(asked) == 1 and len(rounds) == 3
    assert asked[0] < int(rounds["start"].min())  # asked before the first round began


def test_prime_runs_one_small_memset_on_every_active_context_and_waits_for_it() -> None:
    drv = PrimingDriver([True, False, True], current=0x1000)
    sync = synced(drv)
    assert sync.prime() is True
    work = [c for c in drv.calls if c.split()[0] in ("alloc", "memset", "sync", "free")]
    assert work == [
        "alloc 0x1000 256", "memset 0x1000 0xd000 256", "sync 0x1000", "free 0xd000",
        "alloc 0x1002 256", "memset 0x1002 0xd000 256", "sync 0x1002", "free 0xd000",
    ]  # fmt: skip
    assert drv.current == 0x1000 and not drv.stack  # each pushed context popped again
    assert sorted(sync.held) == [0, 2]  # retained, as a round's synchronize would have
    sync.release()
    assert drv.refs == {0: 0, 1: 0, 2: 0}


def test_prime_frees_what_it_allocated_when_the_memset_fails_and_names_the_call() -> None:
    drv = PrimingDriver([True], current=0x1000)
    drv.fail_memset = 2  # CUDA_ERROR_OUT_OF_MEMORY
    sync = synced(drv)
    with pytest.raises(RuntimeError, match=r"cuMemsetD8 failed"):
        sync.prime()
    assert drv.calls[-1] == "free 0xd000" and drv.current == 0x1000 and not drv.stack
    sync.release()


def test_prime_runs_nothing_without_an_active_context_or_the_calls() -> None:
    drv = PrimingDriver([False], current=None)
    assert synced(drv).prime() is False  # CUDA not started by the test: nothing to prime
    assert not [c for c in drv.calls if c.startswith(("alloc", "memset"))]
    assert synced(FakeDriver([True], current=0x1000)).prime() is False  # a libcuda without cuMemAlloc_v2 & co.
    nothing = DeviceSync()
    nothing._error = "libcuda lacks cuCtxSynchronize"
    assert nothing.prime() is False


def test_any_context_sees_a_primary_or_a_current_context_and_creates_none() -> None:
    drv = FakeDriver([False, False], current=None)  # the driver initialised (CUPTI started), no context
    sync = synced(drv)
    assert sync.any_context() is False
    assert not [c for c in drv.calls if c.startswith("retain")]  # never creates or retains one that is not active
    drv.active[1] = True  # the body's framework started device 1
    assert sync.any_context() is True and sorted(sync.held) == [1]
    sync.release()
    assert synced(FakeDriver([False], current=0x9999)).any_context() is True  # a context that is no primary one


def test_any_context_without_libcuda_asks_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    sync = DeviceSync()
    monkeypatch.setattr(sync, "_driver", lambda in_round=True: None)
    monkeypatch.delitem(sys.modules, "torch", raising=False)
    assert sync.any_context() is False  # no libcuda loaded, no torch: no GPU work can have run
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(is_initialized=lambda: True))
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert sync.any_context() is True


@pytest.mark.parametrize("waited", [False, True])
def test_with_gpu_collection_a_round_without_a_context_ends_before_the_looks_own_time(waited: bool) -> None:
    """With a GPU backend collecting (a GPU machine) and no CUDA context in the process (a CPU-only test), the round
    ended after the backend's look (H200 host, 2026-12-01: ~1.1 µs a warm round of `pass`, a trivial test's one round
    0.008 ms against <0.001 with GPU collection off). A look that finds no context is now outside the round, a real
    wait still inside."""
    import time

    from test_trace_rounds import FakeGpu

    from pytest_inferscope.collectors import Collection, CollectionOptions
    from pytest_inferscope.collectors.gpu import Choice
    from pytest_inferscope.events import Kind
    from pytest_inferscope.rounds import RoundKind

    class LookingGpu(FakeGpu):
        """A backend whose end-of-round synchronize takes 20 ms and says whether a context was there."""

        def synchronize(self) -> bool:
            time.sleep(0.02)
            return waited

    coll = Collection(CollectionOptions(cpu="off", gpu_rounds="trace"), Choice(LookingGpu()))  # type: ignore[arg-type]
    coll.start()
    for i in range(3):
        with coll.round(i, RoundKind.MEASURED):
            pass
    raw = coll.stop()
    rounds = raw.events[(raw.events["kind"] == Kind.ROUND)][:3]
    walls = rounds["end"] - rounds["start"]
    assert len(rounds) == 3 and ((walls >= 20_000_000).all() if waited else (walls < 20_000_000).all()), walls
    assert [r["sync_ns"] >= 20_000_000 for r in raw.meta["rounds"][:3]] == [waited] * 3


@pytest.mark.parametrize("waited", [False, True])
def test_a_round_without_gpu_work_ends_before_the_looks_own_time(monkeypatch: pytest.MonkeyPatch, waited: bool) -> None:
    """The end-of-round look took 5-10 µs right after a 0.75 ms Python body (1.3% of it), inside the round; a
    look that finds nothing to wait for is now outside it, a real wait still inside."""
    import time

    from pytest_inferscope.collectors import devsync

    def look(self: DeviceSync) -> bool:
        time.sleep(0.02)
        return waited

    monkeypatch.setattr(devsync.DeviceSync, "__call__", look)
    raw, rounds = three_empty_rounds()
    walls = rounds["end"] - rounds["start"]
    assert len(rounds) == 3 and ((walls >= 20_000_000).all() if waited else (walls < 20_000_000).all())
    assert [r["sync_ns"] >= 20_000_000 for r in raw.meta["rounds"]] == [waited] * 3
