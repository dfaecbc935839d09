"""The environment a run records: the Python tracer or profiler beside the test (coverage, a debugger, cProfile)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import pytest

from pytest_inferscope.baseline import fingerprint, fingerprint_diff
from pytest_inferscope.environment import active_tracer, collect_environment


def a_tracer(frame: Any, event: str, arg: Any) -> None:
    return None


class Profiler:
    def hook(self, frame: Any, event: str, arg: Any) -> None:
        return None


@pytest.fixture
def restored() -> Iterator[None]:
    trace, profile = sys.gettrace(), sys.getprofile()
    yield
    sys.settrace(trace)
    sys.setprofile(profile)


def test_a_trace_function_and_a_profiler_are_named(restored: None) -> None:
    before = active_tracer()  # (a developer may run the suite under coverage)
    sys.settrace(a_tracer)
    sys.setprofile(Profiler().hook)
    now = active_tracer()
    sys.settrace(None)
    sys.setprofile(None)
    assert now is not None and now != before
    assert f"{__name__}.a_tracer" in now and f"{__name__}.Profiler" in now
    assert active_tracer() is None or before is not None


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring (PEP 669) is CPython 3.12+")
def test_a_sys_monitoring_tool_is_named() -> None:
    tool = next(t for t in (3, 4) if sys.monitoring.get_tool(t) is None)  # ids 3 and 4 are no tool's by convention
    sys.monitoring.use_tool_id(tool, "some-coverage-tool")
    try:
        assert "some-coverage-tool" in (active_tracer() or "")
    finally:
        sys.monitoring.free_tool_id(tool)


def test_a_tracer_is_in_the_environment_and_makes_the_fingerprints_differ(restored: None) -> None:
    plain = collect_environment()
    sys.settrace(a_tracer)
    traced = collect_environment()
    sys.settrace(None)
    assert f"{__name__}.a_tracer" in traced["tracer"]
    (diff,) = [d for d in fingerprint_diff(fingerprint(plain), fingerprint(traced)) if "tracer" in d]
    assert diff.startswith("Python tracer or profiler (coverage, a debugger) differs")
