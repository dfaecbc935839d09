"""Which GPU this process profiles on: `--inferscope-gpus` gives each xdist worker its own; whether there is one."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pytest only where a pin is refused: the collectors ask `device_missing`, outside pytest too
    import pytest

#: Why no GPU is collected with --inferscope-gpu=off (the header and the report say it).
GPU_OFF = "switched off (--inferscope-gpu=off)"


def pin_gpu(config: pytest.Config, gpus: tuple[int, ...] | None) -> int | None:
    """With --inferscope-gpus, give this process (xdist worker N: the N-th GPU, round robin) one GPU; none on a
    machine without an NVIDIA GPU or driver.

    It must happen before CUDA starts in the process, which is why the session calls it at configure time.
    """
    if not gpus or os.environ.get("INFERSCOPE_AB_TWIN"):  # a twin keeps its parent's GPU
        return None
    if driver_missing() is not None:  # nothing to pin: the header says so (pin_ignored), no baseline records a GPU
        return None
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None and config.getoption("numprocesses", None):
        return None  # the xdist controller runs no tests: only its workers take a GPU
    worker = int(str(workerinput["workerid"]).removeprefix("gw")) if workerinput else 0
    gpu = gpus[worker % len(gpus)]
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        import pytest

        raise pytest.UsageError(
            f"--inferscope-gpus={','.join(map(str, gpus))}: CUDA was already started in this process (by a "
            f"conftest or plugin using CUDA at import), so GPU {gpu} can no longer be pinned. Move the CUDA "
            "work into fixtures, or set CUDA_VISIBLE_DEVICES yourself and drop --inferscope-gpus."
        )
    os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
    return gpu


def device_missing() -> str | None:
    """None when a CUDA device looks usable, else the reason it doesn't: the environment and the device files only.

    Cheap on purpose: the pytest header says this much without loading the collectors (numpy), which a session
    that profiles nothing never needs (`collectors.gpu.select_backend` asks it first).
    """
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "CUDA_VISIBLE_DEVICES hides every GPU"
    return driver_missing()


def driver_missing() -> str | None:
    """None when the machine has an NVIDIA GPU's device files or driver, else the reason (CUDA_VISIBLE_DEVICES aside:
    a pin replaces it)."""
    if not any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/nvidiactl", "/proc/driver/nvidia/version")):
        return "no NVIDIA GPU or driver on this machine"
    return None


def pin_ignored(gpus: tuple[int, ...] | None) -> str | None:
    """The header's line when --inferscope-gpus was given on a machine where it has nothing to pin, else None."""
    if not gpus or (missing := driver_missing()) is None:
        return None
    given = ",".join(map(str, gpus))
    return f"inferscope: --inferscope-gpus={given} has no effect ({missing}): no GPU pinned or recorded in a baseline"
