"""A test's rounds run from the start of a fresh chunk of CPython's frame stack, wherever the test is called from.

CPython (3.11 to 3.14) keeps a thread's Python frames in chunks of 16 KiB, allocates a new chunk when a call
does not fit in the current one, and frees that chunk as soon as the first frame in it returns
(python/cpython#142183). A body whose calls go up and down across the end of a chunk pays an allocation and a
release at every crossing: `fib(15)` measured 0.14 ms a round, and 1.6 to 4.9 ms when `measure()` was called
111 to 120 frames deeper (2-core dev VM, 2026-11-28, docs/performance.md). Where that end falls in the body
depends on how deep the harness calls it, so the plugin's own frames would move a body across it, either way,
and a frame more or less in pytest, the plugin or the user's fixtures could change a test's latency many-fold.

`fresh_chunk(fn)` calls `fn` from a frame whose own size (3,200 unused local slots, ~25 KiB) is more than any
16 KiB chunk has free, so that frame begins a new 64 KiB chunk and what it calls follows it there: the rounds,
and the body under them, start ~38 KiB (some 100 frames of a torch model, many more small ones) before the end of
a chunk, at the same place in it whatever called the test. Its cost is the chunk's allocation and release once
per test (~35 µs on the 2-core dev VM). From CPython 3.15 a freed chunk is kept for reuse, and the crossings are cheap.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

P = ParamSpec("P")
R = TypeVar("R")

#: Unused local slots of the calling frame: with its other slots, more than a 16 KiB chunk (2,048 slots) holds,
#: and enough that CPython gives it a 64 KiB chunk (it doubles 16 KiB until the frame and 1,000 slots more fit).
PAD_SLOTS = 3200


def fresh_chunk(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)`, called from a frame that begins a chunk of the frame stack of its own."""
    return _padded()(fn, args, kwargs)


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    return fn(*args, **kwargs)


@functools.cache
def _padded() -> Callable[[Callable[..., Any], tuple[Any, ...], dict[str, Any]], Any]:
    """`_call` with PAD_SLOTS more local variables, none used; `_call` itself where the code cannot be rebuilt."""
    code = _call.__code__
    names = tuple(f"_slot{i}" for i in range(PAD_SLOTS))
    try:
        big = code.replace(co_varnames=code.co_varnames + names, co_nlocals=code.co_nlocals + PAD_SLOTS)
    except (TypeError, ValueError):  # another interpreter's code objects
        return _call
    return types.FunctionType(big, _call.__globals__, "_call")
