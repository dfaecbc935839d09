"""Why a collection cannot start while another runs: one process profiles one thing at a time (its sampler, CUPTI,
and every thread's scopes and marks go to the one running collection)."""

from __future__ import annotations

import sys
import threading
from typing import Protocol


class Running(Protocol):
    """What the message reads of the running `Collection` (a protocol: the package imports this module, not back)."""

    thread: int  # the ident of the thread that started it
    task: object  # the asyncio task that started it, or None
    name: str


def current_task() -> object:
    """The asyncio task running now, or None (no event loop running in this thread; asyncio not imported: none)."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return None
    try:
        return asyncio.current_task()
    except RuntimeError:  # no running event loop
        return None


def busy(name: str, running: Running) -> str:
    """Why `name` cannot start while `running` runs: nested in it, or started by another thread while it runs."""
    if running.thread != threading.get_ident():
        return (
            f"{name!r} cannot be profiled now: another thread is profiling {running.name!r}, and one process "
            "profiles one thing at a time (its sampler, CUPTI and the scopes and marks of every thread go to the one "
            "running profile). Profile from one thread at a time: wait for the other call to return (a lock around "
            "the calls), or run them in separate processes."
        )
    if running.task is not None and running.task is not current_task():
        return (
            f"{name!r} cannot be profiled now: another asyncio task is profiling {running.name!r} in this event loop, "
            "and one process profiles one thing at a time. Await the other measure_async() before starting this one "
            "(an asyncio.Lock around the calls), not both at once (asyncio.gather)."
        )
    return (
        f"{name!r} cannot be profiled inside {running.name!r}, which is profiled already (a test marked "
        "@pytest.mark.inferscope, or a profile() or measure() around this one): profiles do not nest. Mark the "
        "part inside with pytest_inferscope.scope() instead, or drop the outer profiling (the marker) and keep "
        "this call, whose result the test can assert on."
    )
