"""The labelled scenarios (inferapp/scenarios.py): one per bottleneck class, and each one fixed.

A slow variant asserts its class with `expect_bottleneck`. A fixed variant applies the
analyzer's top suggestion; it is checked in the other direction (not the original class, and
faster) by `tests/gpu/record_scenarios.py` on a GPU machine, which records both into
`tests/data/<scenario>/` for the analyzer's tests. The CPU scenarios (cpu_bound,
memory_bound) run everywhere; the GPU ones skip without CUDA unless INFERSCOPE_GPU=required.
"""

from __future__ import annotations

import os

import pytest
import torch
from inferapp.scenarios import SCENARIOS, Scenario, State

CUDA = torch.cuda.is_available()


def _state(s: Scenario) -> State:
    if s.gpu and not CUDA:
        if os.environ.get("INFERSCOPE_GPU") == "required":
            pytest.fail("INFERSCOPE_GPU=required, but torch sees no CUDA device")
        pytest.skip("needs a CUDA GPU")
    return s.setup(torch.device("cuda" if CUDA else "cpu"))


#: Scenarios whose class legitimately differs between GPU models (docs/scenarios.md, "What-if calibration"):
#: the sync loop is as GPU-heavy as it is sync-bound, so which fix saves more depends on the GPU and the host.
#: They assert what holds on every GPU: the fix of their class saves at least 15% of the round.
BY_FIX = {"sync_bound"}


def _marker(name: str, expect: bool) -> pytest.MarkDecorator:
    s = SCENARIOS[name]
    kw: dict[str, object] = {"rounds": s.rounds, "warmup": s.warmup}
    if expect:
        kw["expect_fix" if name in BY_FIX else "expect_bottleneck"] = s.expected
    return pytest.mark.inferscope(**kw)


@pytest.fixture
def cpu_bound() -> State:
    return _state(SCENARIOS["cpu_bound"])


@pytest.fixture
def memory_bound() -> State:
    return _state(SCENARIOS["memory_bound"])


@pytest.fixture(scope="module")
def gpu_bound() -> State:
    return _state(SCENARIOS["gpu_bound"])


@pytest.fixture(scope="module")
def transfer_bound() -> State:
    return _state(SCENARIOS["transfer_bound"])


@pytest.fixture(scope="module")
def launch_bound() -> State:
    return _state(SCENARIOS["launch_bound"])


@pytest.fixture(scope="module")
def sync_bound() -> State:
    return _state(SCENARIOS["sync_bound"])


@_marker("cpu_bound", expect=True)
def test_cpu_bound_tokenisation(cpu_bound: State) -> None:
    logits = SCENARIOS["cpu_bound"].slow(cpu_bound)
    assert logits.shape[0] == cpu_bound["rows"] and torch.isfinite(logits).all()


# On a CPU-only machine the fixed forward is CPU work too: the class is checked on the GPU run.
@_marker("cpu_bound", expect=False)
def test_cpu_bound_fixed_caches_token_ids(cpu_bound: State) -> None:
    logits = SCENARIOS["cpu_bound"].fixed(cpu_bound)
    assert logits.shape[0] == cpu_bound["rows"] and torch.isfinite(logits).all()


@_marker("memory_bound", expect=True)
def test_memory_bound_growing_feature_cache(memory_bound: State) -> None:
    kept = SCENARIOS["memory_bound"].slow(memory_bound)
    assert kept == len(memory_bound["history"]) >= 1


@_marker("memory_bound", expect=False)
def test_memory_bound_fixed_reuses_one_buffer(memory_bound: State) -> None:
    assert SCENARIOS["memory_bound"].fixed(memory_bound) == 1
    assert memory_bound["history"] == []


@_marker("gpu_bound", expect=True)
def test_gpu_bound_large_batch(gpu_bound: State) -> None:
    assert SCENARIOS["gpu_bound"].slow(gpu_bound).shape[0] == 128


@_marker("gpu_bound", expect=False)
def test_gpu_bound_fixed_bf16(gpu_bound: State) -> None:
    assert SCENARIOS["gpu_bound"].fixed(gpu_bound).shape[0] == 128


@_marker("transfer_bound", expect=True)
def test_transfer_bound_pageable_uploads(transfer_bound: State) -> None:
    assert len(SCENARIOS["transfer_bound"].slow(transfer_bound)) == 4


@_marker("transfer_bound", expect=False)
def test_transfer_bound_fixed_pinned_prefetch(transfer_bound: State) -> None:
    out = SCENARIOS["transfer_bound"].fixed(transfer_bound)
    assert len(out) == 4 and all(x.shape == (4096,) and torch.isfinite(x).all() for x in out)


@_marker("launch_bound", expect=True)
def test_launch_bound_decode_loop(launch_bound: State) -> None:
    assert SCENARIOS["launch_bound"].slow(launch_bound).shape == (1, 64)


@_marker("launch_bound", expect=False)
def test_launch_bound_fixed_cuda_graph(launch_bound: State) -> None:
    assert SCENARIOS["launch_bound"].fixed(launch_bound).shape == (1, 64)


@_marker("sync_bound", expect=True)
def test_sync_bound_item_every_step(sync_bound: State) -> None:
    assert len(SCENARIOS["sync_bound"].slow(sync_bound)) == 200


@_marker("sync_bound", expect=False)
def test_sync_bound_fixed_one_read(sync_bound: State) -> None:
    assert len(SCENARIOS["sync_bound"].fixed(sync_bound)) == 200
