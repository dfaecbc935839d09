"""Peer copies (between two GPUs): their encoding in a MEMCPY event's flags, and old traces read as before."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from pytest_inferscope import kineto
from pytest_inferscope.events import (
    CopyKind,
    Kind,
    MemoryKind,
    RawTrace,
    copy_devices,
    copy_direction,
    copy_flags,
    peer_copies,
    unpack_copy_flags,
)

DATA = Path(__file__).resolve().parents[1] / "data"


def test_a_peer_copy_keeps_both_devices_and_the_first_three_bytes_mean_what_they_did() -> None:
    f = copy_flags(CopyKind.PTOP, MemoryKind.DEVICE, MemoryKind.DEVICE, 0, 1)
    assert [int(x) for x in unpack_copy_flags(f)] == [CopyKind.PTOP, MemoryKind.DEVICE, MemoryKind.DEVICE]
    assert [int(x) for x in copy_devices(f)] == [0, 1]
    assert copy_direction(f) == "PtoP 0→1"
    assert copy_direction(copy_flags(CopyKind.PTOP, 3, 3, 14, 2)) == "PtoP 14→2"
    # Without devices (every copy but a peer one, and copies recorded before): as before, the devices unknown.
    plain = copy_flags(CopyKind.HTOD, MemoryKind.PINNED, MemoryKind.DEVICE)
    assert plain == CopyKind.HTOD | MemoryKind.PINNED << 8 | MemoryKind.DEVICE << 16
    assert [int(x) for x in copy_devices(plain)] == [-1, -1] and copy_direction(plain) == "HtoD"
    assert copy_direction(copy_flags(CopyKind.PTOP, 3, 3)) == "PtoP"  # the devices not said
    assert copy_direction(0) == "copy"
    # A device past what 4 bits hold is not kept rather than kept wrong.
    assert [int(x) for x in copy_devices(copy_flags(CopyKind.PTOP, 3, 3, 15, 1))] == [-1, 1]


def test_peer_copies_mask_needs_two_known_and_different_devices() -> None:
    flags = np.array(
        [
            copy_flags(CopyKind.PTOP, 3, 3, 0, 1),
            copy_flags(CopyKind.PTOP, 3, 3, 1, 0),
            copy_flags(CopyKind.DTOD, 3, 3, 1, 1),  # on one device
            copy_flags(CopyKind.PTOP, 3, 3),  # devices not known
            copy_flags(CopyKind.HTOD, 1, 3),
        ],
        dtype=np.uint32,
    )
    assert peer_copies(flags).tolist() == [True, True, False, False, False]


def test_recorded_traces_copies_have_no_devices_and_load_as_before() -> None:
    """The raw.npz format is unchanged: the scenarios recorded before peer copies read with no peer copy."""
    raw = RawTrace.load(DATA / "transfer_bound" / "trace.npz")
    copies = raw.events[raw.events["kind"] == Kind.MEMCPY]
    assert len(copies)
    src, dst = copy_devices(copies["flags"])
    assert (src == -1).all() and (dst == -1).all() and not peer_copies(copies["flags"]).any()
    assert {copy_direction(int(f)) for f in copies["flags"]} <= {"HtoD", "DtoH", "DtoD"}


def test_a_kineto_peer_copy_keeps_its_devices_and_lies_on_the_device_it_ran_on() -> None:
    """Kineto writes CUPTI's MEMCPY2 as 'Memcpy PtoP (Device -> Device)' with fromDevice, inDevice, toDevice."""
    step = {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 1000, "pid": 1, "tid": 1}
    peer = {
        "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy PtoP (Device -> Device)", "ts": 100, "dur": 50, "pid": 1,
        "tid": "stream 13", "args": {"fromDevice": 1, "inDevice": 1, "toDevice": 0, "stream": 13, "correlation": 9,
                                      "bytes": 4096},
    }  # fmt: skip
    htod = {
        "ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pinned -> Device)", "ts": 200, "dur": 10, "pid": 0,
        "tid": "stream 7", "args": {"device": 0, "stream": 7, "correlation": 10, "bytes": 64},
    }  # fmt: skip
    raw = kineto.import_events({"traceEvents": [step, peer, htod]}, "peer.json").raw
    copies = raw.events[raw.events["kind"] == Kind.MEMCPY]
    assert copies["device"].tolist() == [1, 0] and copies["value"].tolist() == [4096, 64]
    assert [copy_direction(int(f)) for f in copies["flags"]] == ["PtoP 1→0", "HtoD"]
    kinds = [int(x) for x in unpack_copy_flags(copies["flags"][0])]
    assert kinds == [CopyKind.PTOP, MemoryKind.DEVICE, MemoryKind.DEVICE]


def test_a_test_needing_two_gpus_says_so_where_there_is_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """tests/conftest.py: `@pytest.mark.gpus(2)` skips (or fails, under INFERSCOPE_GPU=required) with one GPU."""
    import importlib.util

    # by path: under the whole suite the name `conftest` may be another folder's (tests/browser/conftest.py)
    spec = importlib.util.spec_from_file_location("tests_conftest", Path(__file__).parents[1] / "conftest.py")
    assert spec is not None and spec.loader is not None
    shared = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(shared)
    gpu_unavailable = shared.gpu_unavailable

    cuda = SimpleNamespace(is_available=lambda: True, device_count=lambda: 1)
    monkeypatch.setitem(sys.modules, "torch", SimpleNamespace(__version__="2.9", cuda=cuda))
    monkeypatch.setattr(os.path, "exists", lambda path: True)
    assert gpu_unavailable() is None
    assert gpu_unavailable(2) == "needs 2 GPUs, torch sees 1"
