"""The machine a run happened on: what baselines are keyed by and reports show."""

from __future__ import annotations

import os
import platform
import sys
from functools import cache
from importlib import metadata
from types import FunctionType
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


def active_tracer() -> str | None:
    """The Python tracers and profilers hooked into this thread (coverage, a debugger, cProfile), each of which slows
    every line or call the test's Python runs: `coverage.tracer.CTracer`, a sys.monitoring tool's name; None without."""
    names = [_hook_name(hook) for hook in (sys.gettrace(), sys.getprofile()) if hook is not None]
    monitoring = getattr(sys, "monitoring", None)  # CPython 3.12+: coverage's sysmon core, pdb from 3.14
    if monitoring is not None:
        names += [name for tool in range(6) if (name := monitoring.get_tool(tool))]
    return ", ".join(dict.fromkeys(names)) or None


def _hook_name(hook: Any) -> str:
    owner = getattr(hook, "__self__", None)  # a bound method: its class names the tool
    target = type(owner) if owner is not None else hook if isinstance(hook, FunctionType) else type(hook)
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__qualname__', '?')}"


def collect_environment() -> dict[str, Any]:
    """Python, CPU, plugin version, and torch/CUDA/GPU facts when torch is already imported; the Python tracer or
    profiler active in this thread, if any (`active_tracer`).

    Never imports torch itself: a test session that doesn't use torch must not pay for it.
    """
    env = dict(_static())
    if (tracer := active_tracer()) is not None:
        env["tracer"] = tracer
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
