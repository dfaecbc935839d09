"""Analyzer: collective kernels (NCCL) are communication, not compute, with their overlap per device."""

from __future__ import annotations

import numpy as np
import pytest
from test_analyzer import MS
from test_analyzer_gpu import add, one_round

from pytest_inferscope.analyzer import analyze
from pytest_inferscope.analyzer.comm import COMM_KERNEL, is_comm_kernel, per_device
from pytest_inferscope.events import Kind
from pytest_inferscope.merger import merge

ALLREDUCE = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def step(comm: list[tuple[float, float]], compute: list[tuple[float, float]]) -> dict[str, float | None]:
    """Metrics of one 10 ms round with these collective and compute kernels (ms intervals)."""
    rows = [(ALLREDUCE, Kind.KERNEL, s, e, 0, 0, 0) for s, e in comm]
    rows += [("ampere_bf16_gemm", Kind.KERNEL, s, e, 0, 0, 0) for s, e in compute]
    return analyze(merge(add(one_round(cpu_busy=0.1), rows))).metrics


@pytest.mark.parametrize(
    ("name", "is_comm"),
    [
        (ALLREDUCE, True),
        ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)", True),
        ("void cross_device_reduce_1stage<__nv_bfloat16, 2>(...)", True),
        ("two_shot_all_reduce_kernel", True),
        ("void at::native::reduce_kernel<512, 1, ReduceOp<float>>", False),
        ("ampere_sgemm_128x64_nn", False),
        ("void at::native::elementwise_kernel<128, 4>", False),
        ("RCCL_AllGather", True),
        ("multimem_all_reduce_kernel", True),
        ("one_shot_all_reduce", True),
        ("AllReduce", True),
        ("all_gather_into_tensor", True),
        ("ReduceScatter", True),
        ("all_to_all_single", True),
        ("AllToAll", True),
        ("alltoall", True),
        ("SendRecv", True),
        ("send_recv", True),
        ("small_call_kernel", False),
    ],
)
def test_collective_kernel_names(name: str, is_comm: bool) -> None:
    assert bool(COMM_KERNEL.search(name)) is is_comm
    assert is_comm_kernel(name) is is_comm  # the words it looks for first leave out no match


def test_exposed_communication_is_not_compute_and_bounds_the_step() -> None:
    # 4 ms of all-reduce with nothing beside it, then 4 ms of compute: half the GPU time is communication.
    m = step(comm=[(1.0, 5.0)], compute=[(5.0, 9.0)])
    assert m["gpu.compute_fraction"] == pytest.approx(0.4)
    assert m["gpu.communication_fraction"] == pytest.approx(0.4)
    assert m["gpu.communication_exposed_fraction"] == pytest.approx(0.4)
    assert m["gpu.communication_overlap"] == pytest.approx(0.0)


def test_communication_hidden_behind_compute_is_not_exposed() -> None:
    # The same all-reduce, 3 of its 4 ms beside compute on another stream: 1 ms exposed.
    m = step(comm=[(1.0, 5.0)], compute=[(2.0, 9.0)])
    assert m["gpu.communication_overlap"] == pytest.approx(0.75)
    assert m["gpu.communication_exposed_fraction"] == pytest.approx(0.1)


def test_communication_finding_names_the_class_and_the_overlap() -> None:
    raw = add(
        one_round(cpu_busy=0.1),
        [(ALLREDUCE, Kind.KERNEL, 0.5, 6.5, 0, 0, 0), ("ampere_bf16_gemm", Kind.KERNEL, 6.5, 9.5, 0, 0, 0)],
    )
    a = analyze(merge(raw))
    found = [f for f in a.findings if f.rule == "communication"]
    assert len(found) == 1 and found[0].cause == "communication_bound"
    assert found[0].share == pytest.approx(0.6)
    assert "0.0% of it overlapped by compute" in str(found[0].evidence["device 0"])
    assert a.bottleneck == "communication_bound"
    assert found[0].suggestions[0].saving_ms == pytest.approx(6.0)
    # Without collectives, no finding and no communication time.
    plain = analyze(merge(add(one_round(cpu_busy=0.1), [("ampere_bf16_gemm", Kind.KERNEL, 0.5, 9.5, 0, 0, 0)])))
    assert not [f for f in plain.findings if f.rule == "communication"]
    assert plain.metrics["gpu.communication_fraction"] == 0.0 and plain.metrics["gpu.communication_overlap"] is None


def test_per_device_keeps_devices_apart() -> None:
    raw = add(one_round(cpu_busy=0.1), [(ALLREDUCE, Kind.KERNEL, 1.0, 3.0, 0, 0, 0)])
    gpu = raw.events[raw.events["kind"] == Kind.KERNEL].copy()
    second = gpu.copy()
    second["device"], second["start"], second["end"] = 1, 2 * MS, 6 * MS
    both = np.concatenate((gpu, second))
    devices = {d.device: d for d in per_device(both, raw.strings)}
    assert devices[0].comm_ns == 2 * MS and devices[1].comm_ns == 4 * MS
    assert devices[1].exposed_ns == 4 * MS and devices[1].kernels == 1
