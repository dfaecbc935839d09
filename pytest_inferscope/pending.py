"""A profiled test between its call and its report (`session.InferscopeSession` keeps one per test being run)."""

from __future__ import annotations

import functools
import inspect
import sys
import traceback
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .collectors import Collection
    from .events import RawTrace


@dataclass
class Pending:
    """A collection between the call phase and its report."""

    collection: Collection
    raw: RawTrace | None = None
    partial: str = ""
    skipped: bool = False
    extra: list[Any] = field(default_factory=list)  # collectors from pytest_inferscope_collectors
    extra_metrics: dict[str, float | None] = field(default_factory=dict)
    awaited: bool = False  # an async test's rounds began: a plugin (anyio, ...) awaited it


def in_rounds(
    original: Callable[..., Any],
    pending: Pending,
    rounds: Callable[[Callable[[], Any]], Any],
    rounds_async: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]],
) -> Callable[..., Any]:
    """`original` as pytest (or unittest) is to call it: its body in rounds, noting what it raised (here, not only
    around the call: unittest catches what its method raised). A function's rounds are `rounds(body)`; an `async def`
    test's, awaited by the plugin (or unittest) that runs it, `rounds_async(body)`."""
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def profiled_async(*args: Any, **kwargs: Any) -> Any:
            pending.awaited = True
            try:
                body = lambda: original(*args, **kwargs)  # noqa: E731
                return await rounds_async(body)
            except BaseException as exc:
                note_exception(pending, exc)
                raise

        return profiled_async

    @functools.wraps(original)
    def profiled(*args: Any, **kwargs: Any) -> Any:
        try:
            return rounds(lambda: original(*args, **kwargs))
        except BaseException as exc:
            note_exception(pending, exc)
            raise

    return profiled


def note_exception(pending: Pending, exc: BaseException) -> None:
    """What the body raised: a skip, or an interrupt (stop collecting, report nothing, let pytest stop), leaves the test
    unreported; anything else makes its report partial."""
    if isinstance(exc, (pytest.skip.Exception, KeyboardInterrupt, SystemExit)):
        pending.skipped = True
    else:
        pending.partial = "".join(traceback.format_exception_only(type(exc), exc)).strip()


def is_unittest_case(cls: type) -> bool:
    unittest = sys.modules.get("unittest")  # loaded wherever pytest collected a TestCase
    return unittest is not None and issubclass(cls, unittest.TestCase)


def async_testcase(item: pytest.Function) -> Any:
    """The test case of an IsolatedAsyncioTestCase method (the item's `instance` while it runs), or None. unittest looks
    the method up on it and awaits it in its own event loop; pytest sets nothing there for such a method (it does for a
    synchronous one)."""
    if not inspect.iscoroutinefunction(item.obj):
        return None
    testcase = getattr(item, "instance", None)
    return testcase if testcase is not None and is_unittest_case(type(testcase)) else None
