"""A profiled test between its call and its report (`session.InferscopeSession` keeps one per test being run)."""

from __future__ import annotations

import sys
import traceback
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
