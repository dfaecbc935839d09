"""Communication on the GPU: collective kernels (NCCL and the like) told apart from compute, per device.

Multi-GPU inference (tensor or pipeline parallel) spends part of each step in collectives. Their kernels
occupy the GPU while they wait for the peers and move data, so counted as compute they would make a
communication-bound step look GPU-bound. As in HolisticTraceAnalysis's comm/comp overlap, each device's
communication time is the union of its collective kernels, and the part of it that overlaps that
device's compute (other kernels and memsets) is hidden; the rest, exposed, is what communication adds
to the step. Pure functions of the GPU records; `rules_comm.py` turns them into a finding.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import numpy as np

from ..events import Kind, unique
from .base import distinct, union_ns

#: Kernel names of collectives: NCCL's (ncclKernel_*, ncclDevKernel_*), torch's symmetric-memory and
#: custom all-reduce kernels, and the collective names other libraries give their kernels.
COMM_KERNEL = re.compile(
    r"nccl|rccl|cross_device_reduce|(one|two)_shot_all_reduce|multimem_all_reduce|"
    r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|send_?recv",
    re.IGNORECASE,
)


#: Words every COMM_KERNEL match contains (lower case): a name without any is no collective, and is not searched.
#: Kernel names run to thousands of characters (C++ templates); the search cost ViT-B/16's analysis 10 ms.
_COMM_WORDS = ("nccl", "rccl", "reduce", "gather", "toall", "to_all", "send")


@functools.lru_cache(maxsize=16384)
def is_comm_kernel(name: str) -> bool:
    """Whether a kernel's name is a collective's (COMM_KERNEL), remembered across the tests of a process."""
    low = name.lower()
    return any(w in low for w in _COMM_WORDS) and bool(COMM_KERNEL.search(name))


def comm_mask(gpu: np.ndarray, strings: list[str]) -> np.ndarray:
    """Which GPU records are collective kernels: one look per distinct kernel name, not per record."""
    kernels = gpu["kind"] == int(Kind.KERNEL) if len(gpu) else np.zeros(0, dtype=bool)
    if not kernels.any():
        return kernels
    names = distinct(gpu["name"][kernels])
    comm = np.zeros(int(names[-1]) + 1, dtype=bool)
    comm[names] = [is_comm_kernel(strings[i]) for i in names]
    return kernels & comm[np.minimum(gpu["name"], len(comm) - 1)]


@dataclass(frozen=True)
class DeviceComm:
    """One device's communication over the analysed rounds, in ns."""

    device: int
    comm_ns: int  # union of its collective kernels
    compute_ns: int  # union of its other kernels and memsets
    overlap_ns: int  # communication while the device also computed
    kernels: int  # collective kernels

    @property
    def exposed_ns(self) -> int:
        """Communication not hidden behind compute: what it adds to the step."""
        return self.comm_ns - self.overlap_ns

    @property
    def overlap_fraction(self) -> float | None:
        return self.overlap_ns / self.comm_ns if self.comm_ns else None


def per_device(gpu: np.ndarray, strings: list[str], comm: np.ndarray | None = None) -> list[DeviceComm]:
    """Communication, compute and their overlap on each device that ran a collective kernel (`comm`: `comm_mask`'s
    of `gpu`, when the caller has it)."""
    comm = comm_mask(gpu, strings) if comm is None else comm
    if not comm.any():
        return []
    compute = ((gpu["kind"] == int(Kind.KERNEL)) | (gpu["kind"] == int(Kind.MEMSET))) & ~comm
    out = []
    for device in unique(gpu["device"][comm]):
        on = gpu["device"] == device
        c, k = gpu[comm & on], gpu[compute & on]
        comm_ns, compute_ns = union_ns(c["start"], c["end"]), union_ns(k["start"], k["end"])
        both = union_ns(np.concatenate((c["start"], k["start"])), np.concatenate((c["end"], k["end"])))
        out.append(DeviceComm(int(device), comm_ns, compute_ns, comm_ns + compute_ns - both, len(c)))
    return out
