"""stackbase: the rounds run from a fresh chunk of CPython's frame stack, so how deep a test is called from does not
move its body across the end of a chunk (python/cpython#142183: every crossing allocates and frees a chunk)."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from typing import Any

import pytest

from pytest_inferscope import measure
from pytest_inferscope.stackbase import PAD_SLOTS, fresh_chunk


def _fib(n: int) -> int:
    return n if n < 2 else _fib(n - 1) + _fib(n - 2)


def _at_depth(depth: int, fn: Callable[[], Any]) -> Any:
    """`fn()` called `depth` frames deeper than here."""
    return fn() if depth == 0 else _at_depth(depth - 1, fn)


def test_fresh_chunk_calls_through_with_arguments_results_and_errors() -> None:
    assert fresh_chunk(divmod, 7, 2) == (3, 1)
    assert fresh_chunk(dict, a=1) == {"a": 1}
    with pytest.raises(ZeroDivisionError):
        fresh_chunk(divmod, 1, 0)
    frame = fresh_chunk(sys._getframe, 0)  # the calling frame: PAD_SLOTS locals more than its arguments
    assert frame.f_code.co_nlocals == 3 + PAD_SLOTS


@pytest.mark.skipif(sys.implementation.name != "cpython", reason="CPython's frame stack")
def test_how_deep_measure_is_called_does_not_change_the_latency_it_measures() -> None:
    """Called from 0 to 300 frames deeper, a recursive body's fastest round stays the same. Without the fresh chunk,
    on CPython 3.11-3.14, a few of these depths put a chunk's end inside fib(15)'s recursion, and then every round
    is slow: 1.6-4.9 ms against 0.14 ms (dev VM, 2026-11-28), where the check below allows 4x. The fastest of the
    five rounds: a busy machine slows some rounds, never all five of every test."""
    body = lambda: _fib(15)  # noqa: E731
    fastest = []
    for depth in range(0, 300, 3):
        result = _at_depth(depth, lambda: measure(body, rounds=5, warmup=1, cpu="off", gpu_rounds="measured"))
        fastest.append(min(result.latency.samples_ms))
    typical = statistics.median(fastest)
    slow = [(3 * i, round(m / typical, 1)) for i, m in enumerate(fastest) if m > 4 * typical]
    assert not slow, f"depths whose rounds all ran over 4x the typical {typical:.3f} ms (depth, ratio): {slow}"
