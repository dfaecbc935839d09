from __future__ import annotations

from dataclasses import dataclass

import pytest

from pytest_inferscope.caching import cached_property


@dataclass(frozen=True)
class _Frozen:
    """Like idle.IdleGaps: a frozen dataclass with a cached property."""

    x: int

    @cached_property
    def doubled(self) -> int:
        """Twice x."""
        self.calls.append(1)
        return 2 * self.x

    @cached_property
    def calls(self) -> list[int]:
        return []


def test_a_cached_property_is_computed_once_and_kept_on_the_instance() -> None:
    a, b = _Frozen(3), _Frozen(4)
    assert (a.doubled, a.doubled, b.doubled) == (6, 6, 8)
    assert a.calls == [1] and b.calls == [1]  # once per instance, not shared
    assert a.__dict__["doubled"] == 6  # later reads find it in the instance's dict, past the descriptor


def test_a_cached_property_read_on_the_class_is_the_descriptor() -> None:
    prop = _Frozen.__dict__["doubled"]
    assert _Frozen.doubled is prop and prop.__doc__ == "Twice x."


def test_a_cached_property_cannot_take_two_names() -> None:
    with pytest.raises((TypeError, RuntimeError)):  # RuntimeError: type.__new__ wrapped it before Python 3.12

        class _Two:
            @cached_property
            def one(self) -> int:
                return 1

            two = one
