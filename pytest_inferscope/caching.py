"""`cached_property`: `functools.cached_property` without the lock Python 3.11 takes on every first read.

Python 3.12 dropped that lock (it was per class, not per instance, and serialised unrelated objects);
on 3.11 it costs ~1 µs a first read, and an analysis makes ~40 first reads of the views' properties
(base.Rounds, context_gpu.GpuView, ...). This is 3.12's descriptor: the value is computed on the first
read and stored in the instance's `__dict__`, where every later read finds it without calling the
descriptor. Two threads reading a property of the same object for the first time at once may both
compute it; the analysis's views are built and read on one thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

T = TypeVar("T")


class cached_property(Generic[T]):
    """A property computed once per instance, on its first read (see the module's docstring)."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self.func = func
        self.attrname: str | None = None
        self.__doc__ = func.__doc__
        self.__module__ = func.__module__

    def __set_name__(self, owner: type, name: str) -> None:
        if self.attrname is None:
            self.attrname = name
        elif name != self.attrname:
            raise TypeError(f"cannot assign the same cached_property to two names ({self.attrname!r} and {name!r})")

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> cached_property[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> T | cached_property[T]:
        if instance is None:
            return self
        if self.attrname is None:
            raise TypeError("cached_property used without __set_name__")
        value = instance.__dict__[self.attrname] = self.func(instance)
        return value
