"""The machine a run happened on: what baselines are keyed by and reports show."""

from __future__ import annotations

import os
import platform
import sys
from functools import cache
from importlib import metadata
from typing import Any


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _nvidia_driver() -> str | None:
    """The NVIDIA kernel driver's version, from /proc (no library loaded), or None without one."""
    try:
        with open("/proc/driver/nvidia/version") as f:
            first = f.readline()
    except OSError:
        return None
    for word in first.split():
        if word.count(".") >= 1 and word.replace(".", "").isdigit():
            return word
    return None


def _plugin_version() -> str:
    try:
        return metadata.version("pytest-inferscope")
    except metadata.PackageNotFoundError:
        return "unknown"


@cache
def _static() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "plugin_version": _plugin_version(),
        "driver": _nvidia_driver(),
    }


def collect_environment() -> dict[str, Any]:
    """Python, CPU, plugin version, and torch/CUDA/GPU facts when torch is already imported.

    Never imports torch itself: a test session that doesn't use torch must not pay for it.
    """
    env = dict(_static())
    torch = sys.modules.get("torch")
    if torch is not None:
        env["torch"] = str(getattr(torch, "__version__", "unknown"))  # not torch's TorchVersion: plain data
        env["torch_threads"] = torch.get_num_threads()
        try:
            if torch.cuda.is_available():
                env["cuda"] = str(torch.version.cuda)
                device = torch.cuda.current_device()
                props = torch.cuda.get_device_properties(device)
                env["gpu_model"] = props.name
                env["gpu_count"] = torch.cuda.device_count()
                # Which physical GPU (CUDA ordinals change with CUDA_VISIBLE_DEVICES): xdist workers pinned
                # with --inferscope-gpus each show their own.
                env["gpu_uuid"] = str(getattr(props, "uuid", "")) or None
        except Exception as exc:
            env["cuda_error"] = str(exc)
    return env
