"""Dataclasses to JSON-safe plain data and back: `Serial.to_dict()` / `from_dict()` (nested, lists, optionals), for
the results (results.py) that travel through xdist and into report.json.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import math
import types
import typing
from typing import Any, TypeVar

T = TypeVar("T")

#: A dataclass field's metadata that keeps it out of `to_dict` / `from_dict` (and so out of report.json and the wire):
#: what a result holds in this process only (`TestResult.report_dir`, its raw collection).
LOCAL: typing.Mapping[str, Any] = types.MappingProxyType({"local": True})

#: The types that serialise themselves (their own `to_dict` / `from_dict`): results.py adds its own.
SELF_SERIAL: set[type] = set()


class Serial:
    """to_dict / from_dict for the dataclasses below (nested, lists, optionals)."""

    def to_dict(self) -> dict[str, Any]:
        return typing.cast(dict[str, Any], plain(self))

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        return typing.cast(T, _build(cls, data))


#: Field names of each dataclass met, in definition order (dataclasses.fields() is slow to call).
_FIELDS: dict[type, tuple[str, ...]] = {}


def field_names(cls: type) -> tuple[str, ...] | None:
    """The field names of a dataclass type, in definition order; None for any other type."""
    names = _FIELDS.get(cls)
    if names is None:
        if not dataclasses.is_dataclass(cls):
            return None
        names = _FIELDS[cls] = tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("local"))
    return names


def plain(value: Any) -> Any:
    """`value` as JSON-safe plain data, in one pass: dataclasses to dicts (as dataclasses.asdict),
    tuples to lists, dict keys to str, numpy scalars and arrays to Python, NaN/inf to None.

    Anything else is deep-copied, as dataclasses.asdict does, so the result shares nothing mutable.
    """
    t = type(value)
    if t is str or t is int or t is bool or value is None:
        return value
    if t is float:
        return value if math.isfinite(value) else None
    if t is dict:
        return {k if type(k) is str else str(k): plain(v) for k, v in value.items()}
    if t is list or t is tuple:
        return [plain(v) for v in value]
    names = _FIELDS.get(t) or field_names(t)
    if names is not None and t in SELF_SERIAL:
        return value.to_dict()
    if names is not None:
        return {name: plain(getattr(value, name)) for name in names}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if t.__module__ == "numpy" and hasattr(value, "tolist"):  # numpy scalar or array, numpy not imported
        return plain(value.tolist())
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int | str):  # subclasses (IntEnum, StrEnum): kept, as asdict keeps them
        return value
    return copy.deepcopy(value)


@functools.cache
def _field_hints(cls: type) -> tuple[tuple[str, Any], ...]:
    """(name, resolved type) of each field of a dataclass, in definition order.

    Cached: with postponed annotations `typing.get_type_hints` compiles every annotation string
    again on each call (~0.1 ms per class), and `judge` builds the collectors' infos every test.
    """
    hints = typing.get_type_hints(cls)
    return tuple((f.name, hints[f.name]) for f in dataclasses.fields(cls) if not f.metadata.get("local"))


@functools.cache
def _shape(tp: Any) -> tuple[str, Any]:
    """How `_build` makes a value of type `tp`, and the type (or the fields' hints) it recurses into.

    Worked out once per type: `typing.get_origin` and `dataclasses.is_dataclass` cost a few µs per value,
    and `judge` builds the collectors' infos every test.
    """
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return ("optional", args[0]) if len(args) == 1 else ("as_is", None)
    if origin is list:
        (arg,) = typing.get_args(tp)
        return "list", arg
    if origin is dict:
        _, arg = typing.get_args(tp)
        return "dict", arg
    if tp in SELF_SERIAL:
        return "self", None
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return "dataclass", _field_hints(tp)
    return ("float", None) if tp is float else ("as_is", None)


def _build(tp: Any, data: Any) -> Any:
    if data is None:
        return None
    how, arg = _shape(tp)
    if how == "dataclass":
        return tp(**{name: _build(hint, data[name]) for name, hint in arg if name in data})
    if how == "optional":
        return _build(arg, data)
    if how == "list":
        return [_build(arg, v) for v in data]
    if how == "dict":
        return {k: _build(arg, v) for k, v in data.items()}
    if how == "self":
        return tp.from_dict(data)
    return float(data) if how == "float" else data
