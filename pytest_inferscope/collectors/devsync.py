"""Waiting for all GPU work in the process at the end of a round, whichever framework queued it.

Through the driver API: every active primary context (the one torch, JAX and CuPy share per
device) and the calling thread's current context are synchronised, without creating a context
and without calling cuInit (a process that never initialised CUDA has no work to wait for, and
stays safe to fork). torch.cuda.synchronize() would wait on one device only, and on nothing for
JAX or CuPy work when torch's CUDA is not initialised.

This runs once per round, inside the time the round reports, so it must cost about what
torch.cuda.synchronize() costs. A primary context seen active is retained once and held until
`release()` (the collection's stop), so a round makes two driver calls in the common case (the
current context is the only active primary context): cuCtxGetCurrent and cuCtxSynchronize. A
device whose primary context is not active yet is looked at again each round.

Where no framework has loaded libcuda (CPU-only machines, CPU-only tests), asking the dynamic loader
every round cost 48 µs on the 2-core dev VM (84 µs with torch imported), inside the round's time: 40 %
of a 0.12 ms body. So the loader is asked again only when something that loads libcuda can have
happened since: a new module imported (torch, CuPy, JAX load it from their extension modules), torch's
CUDA initialised (torch loads it lazily), or `REPROBE_NS` passed (anything else, eventually). What the
last look found is kept for the process (the loader's state is the process's), and the look for time
passed, or the first one, is taken in `prepare()`, before a round starts: inside the round, a trivial
test's one round took 0.24 ms, 0.237 ms of it the first look (2026-11-25, dev VM), and the analysis read
the round as the thread waiting.
"""

from __future__ import annotations

import ctypes
import os
import sys
import time
from typing import Any

_NEEDED = (
    "cuDeviceGetCount",
    "cuDeviceGet",
    "cuDevicePrimaryCtxGetState",
    "cuDevicePrimaryCtxRetain",
    "cuDevicePrimaryCtxRelease_v2",
    "cuCtxGetCurrent",
    "cuCtxSynchronize",
    "cuCtxPushCurrent_v2",
    "cuCtxPopCurrent_v2",
    "cuGetErrorName",
)
#: What `prime` calls besides `_NEEDED`: a libcuda without them is not primed (a settling round runs instead).
_PRIME = ("cuMemAlloc_v2", "cuMemsetD8_v2", "cuMemFree_v2")
#: With libcuda not loaded, the loader is asked again after this long even when no sign of a load was seen.
REPROBE_NS = 1_000_000_000
#: The last look that did not find libcuda loaded, in this process: (the signs then, when).
_last_miss: tuple[tuple[int, bool], int] | None = None


def _load_signs() -> tuple[int, bool]:
    """What changes when a framework loads libcuda: the imported modules, and whether torch's CUDA is initialised."""
    return len(sys.modules), _torch_cuda_started()


def _torch_cuda_started() -> bool:
    """Whether torch is imported and has initialised CUDA (never imports torch)."""
    cuda = getattr(sys.modules.get("torch"), "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_initialized())
    except Exception:  # a half-imported torch: not started
        return False


class DeviceSync:
    """`sync()` waits for the GPU work of every active primary context and of the current context.

    If the driver calls are unusable (a libcuda without them), torch's synchronize is the fallback.
    """

    def __init__(self) -> None:
        self._cuda: Any = None
        self._error: str | None = None
        self._devices: list[int] | None = None  # CUdevice handle per ordinal, once the driver is initialised
        self._held: dict[int, int] = {}  # ordinal -> retained primary context handle
        self._current = ctypes.c_void_p()
        self._current_ref = ctypes.byref(self._current)
        self._popped = ctypes.c_void_p()
        self._popped_ref = ctypes.byref(self._popped)

    def prepare(self) -> None:
        """Before a round starts (outside its time): the loader's look that time passing, or none yet, calls for."""
        self._driver(in_round=False)

    def _driver(self, in_round: bool = True) -> Any:
        """The loaded libcuda, or None. In a round, the loader is asked only on a sign of a load since the last look."""
        global _last_miss
        if self._cuda is None and self._error is None:
            signs, now = _load_signs(), time.monotonic_ns()
            miss = _last_miss
            if miss is not None and miss[0] == signs and (in_round or now - miss[1] < REPROBE_NS):
                return None  # not loaded at the last look, and no sign of a load since
            try:  # RTLD_NOLOAD: only the libcuda a framework already loaded; never the first to load it
                cuda = ctypes.CDLL("libcuda.so.1", mode=os.RTLD_NOLOAD | os.RTLD_NOW)
            except OSError:
                _last_miss = (signs, now)
                return None  # not loaded yet: look again when there is a sign of a load
            missing = [name for name in _NEEDED if not hasattr(cuda, name)]
            if missing:
                self._error = f"libcuda lacks {', '.join(missing)}"
            else:
                self._cuda = cuda
        return self._cuda

    def __call__(self) -> bool:
        """Wait for the GPU work; False when there was nothing that could have any (no libcuda loaded, no
        context active), so a round can end at its first clock reading, before this call's own time.

        A CPU-only test on a GPU machine (libcuda loaded by the GPU backend, no context in the process): the look at
        each device's primary context finds none, and nothing is waited for. Its round ends with its body: it used
        to end after the look's driver calls through ctypes, in every round's time (H200 host, 2026-12-01: a `pass`
        body 1.35-1.51 µs a round with GPU collection on against 0.30-0.48 off, medians of 200 rounds in four
        processes each; a trivial test's one round 0.008 ms against <0.001)."""
        cuda = self._driver()
        if cuda is None:
            if self._error is not None and _torch_cuda_started():
                sys.modules["torch"].cuda.synchronize()
                return True
            return False
        if not self._contexts(cuda):
            return False  # the driver is not initialised (no cuInit yet, never ours): no work to wait for
        self._check(cuda.cuCtxGetCurrent(self._current_ref), "cuCtxGetCurrent")
        current = self._current.value
        for ordinal, ctx in self._held.items():
            if ctx == current:
                self._check(cuda.cuCtxSynchronize(), f"cuCtxSynchronize (device {ordinal})")
                continue
            self._check(cuda.cuCtxPushCurrent_v2(ctypes.c_void_p(ctx)), "cuCtxPushCurrent")
            try:
                self._check(cuda.cuCtxSynchronize(), f"cuCtxSynchronize (device {ordinal})")
            finally:
                cuda.cuCtxPopCurrent_v2(self._popped_ref)
        if current and current not in self._held.values():
            self._check(cuda.cuCtxSynchronize(), "cuCtxSynchronize (current context)")
        return bool(self._held) or bool(current)

    def any_context(self) -> bool:
        """Whether a CUDA context is active in this process (a device's primary context, or one current on this
        thread): without one no GPU work can have run. Never creates one. With no libcuda loaded: whether torch
        initialised CUDA (the fallback `__call__` waits with)."""
        cuda = self._driver(in_round=False)
        if cuda is None:
            return _torch_cuda_started()
        if not self._contexts(cuda):
            return False
        if self._held:
            return True
        self._check(cuda.cuCtxGetCurrent(self._current_ref), "cuCtxGetCurrent")
        return bool(self._current.value)

    def prime(self) -> bool:
        """One tiny GPU operation on each active context, waited for, outside any round; False when none ran.

        The first GPU operation after CUPTI starts recording again pays a one-time cost: the first round
        after a start ran 14-18% slower than the next on ResNet-50 and ViT-B/16 (H100, 2026-11-25;
        docs/performance.md), so it was run and thrown away as a settling round. A 256-byte memset through
        the driver pays that cost here instead, whichever framework the test uses. Raises RuntimeError
        (naming the call) when a driver call fails.
        """
        cuda = self._driver(in_round=False)
        if cuda is None or not all(hasattr(cuda, name) for name in _PRIME):
            return False
        if not self._contexts(cuda):
            return False
        for ordinal, ctx in self._held.items():
            self._check(cuda.cuCtxPushCurrent_v2(ctypes.c_void_p(ctx)), "cuCtxPushCurrent")
            try:
                ptr, size = ctypes.c_uint64(0), ctypes.c_size_t(256)
                self._check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), size), f"cuMemAlloc (device {ordinal})")
                try:
                    self._check(cuda.cuMemsetD8_v2(ptr, ctypes.c_ubyte(0), size), "cuMemsetD8")
                    self._check(cuda.cuCtxSynchronize(), f"cuCtxSynchronize (device {ordinal})")
                finally:
                    cuda.cuMemFree_v2(ptr)
            finally:
                cuda.cuCtxPopCurrent_v2(self._popped_ref)
        return bool(self._held)

    def release(self) -> None:
        """Give back the primary contexts retained since the first call (at the collection's stop)."""
        if self._cuda is not None and self._devices is not None:
            for ordinal in self._held:
                self._cuda.cuDevicePrimaryCtxRelease_v2(self._devices[ordinal])
        self._held.clear()

    def pci_bus_ids(self) -> list[str]:
        """PCI bus ids ('0000:3B:00.0') of the devices whose primary contexts were synchronised."""
        cuda, out = self._cuda, []
        if cuda is None or self._devices is None or not hasattr(cuda, "cuDeviceGetPCIBusId"):
            return []
        buf = ctypes.create_string_buffer(32)
        for ordinal in sorted(self._held):
            if cuda.cuDeviceGetPCIBusId(buf, len(buf), self._devices[ordinal]) == 0:
                out.append(buf.value.decode("ascii", "replace"))
        return out

    @property
    def held(self) -> dict[int, int]:
        """Device ordinal -> the primary context retained for it (for tests)."""
        return dict(self._held)

    def _contexts(self, cuda: Any) -> bool:
        """Every active primary context retained in `_held` (devices whose context is not active yet are looked
        at again next time); False while the driver is not initialised."""
        if self._devices is None and not self._find_devices(cuda):
            return False
        assert self._devices is not None
        if len(self._held) < len(self._devices):
            self._retain_active(cuda)
        return True

    def _find_devices(self, cuda: Any) -> bool:
        count = ctypes.c_int(0)
        if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
            return False
        devices = []
        for ordinal in range(count.value):
            dev = ctypes.c_int(0)
            self._check(cuda.cuDeviceGet(ctypes.byref(dev), ordinal), "cuDeviceGet")
            devices.append(dev.value)
        self._devices = devices
        return True

    def _retain_active(self, cuda: Any) -> None:
        assert self._devices is not None
        flags, active = ctypes.c_uint(0), ctypes.c_int(0)
        for ordinal, dev in enumerate(self._devices):
            if ordinal in self._held:
                continue
            self._check(cuda.cuDevicePrimaryCtxGetState(dev, ctypes.byref(flags), ctypes.byref(active)), "state")
            if active.value:
                ctx = ctypes.c_void_p()
                self._check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
                self._held[ordinal] = ctx.value or 0

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            name = ctypes.c_char_p()
            self._cuda.cuGetErrorName(rc, ctypes.byref(name))
            raise RuntimeError(f"{what} failed: {(name.value or b'CUDA error').decode()} ({rc})")
