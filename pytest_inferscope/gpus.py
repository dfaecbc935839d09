"""Which GPU this process profiles on: `--inferscope-gpus` gives each xdist worker its own."""

from __future__ import annotations

import os
import sys

import pytest


def pin_gpu(config: pytest.Config, gpus: tuple[int, ...] | None) -> int | None:
    """With --inferscope-gpus, give this process (xdist worker N: the N-th GPU, round robin) one GPU.

    It must happen before CUDA starts in the process, which is why the session calls it at configure time.
    """
    if not gpus or os.environ.get("INFERSCOPE_AB_TWIN"):  # a twin keeps its parent's GPU
        return None
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None and config.getoption("numprocesses", None):
        return None  # the xdist controller runs no tests: only its workers take a GPU
    worker = int(str(workerinput["workerid"]).removeprefix("gw")) if workerinput else 0
    gpu = gpus[worker % len(gpus)]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        raise pytest.UsageError(
            f"--inferscope-gpus={','.join(map(str, gpus))}: CUDA was already started in this process (by a "
            f"conftest or plugin using CUDA at import), so GPU {gpu} can no longer be pinned. Move the CUDA "
            "work into fixtures, or set CUDA_VISIBLE_DEVICES yourself and drop --inferscope-gpus."
        )
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return gpu
