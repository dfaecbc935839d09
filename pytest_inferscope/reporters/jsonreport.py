"""report.json: a test's `TestResult` as versioned JSON, and reading it back for `inferscope analyze/compare`.

The file is `TestResult.to_dict()` with sorted keys, less the metrics not measured (schema 3), and `measured_rounds`
(derived: the latency's samples); `schema_version` says which layout it has.
Reading checks the layout against the dataclasses before building them, so a hand-edited or
truncated file fails with the file name and the key that is wrong, not with a TypeError.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import json.encoder
import math
import os
import types
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..results import SCHEMA_VERSION, TestResult
from ..serial import field_names, plain


class ReportFormatError(ValueError):
    """A report file that cannot be read back; the message names the file and what is wrong."""


def to_json(result: TestResult) -> str:
    """The report.json text of a result: sorted keys, indented, strict JSON (no NaN).

    The same text as `dumps(result.to_dict() | {"measured_rounds": ...})` with the metrics that are None or not
    finite left out, written in one pass over the dataclasses.
    """
    top = {name: getattr(result, name) for name in field_names(TestResult) or ()}
    # A metric not measured (None, NaN) is left out (schema 3): on a machine without a GPU, 32 `gpu.*` nulls were a
    # fifth of a trivial test's report.json. `load_report` gives the analyzer's metrics left out back as None.
    a = result.analysis
    measured: dict[str, float | None] = {
        k: v for k, v in a.metrics.items() if v is not None and v == v and v not in _INFINITIES
    }
    if len(measured) != len(a.metrics):
        top["analysis"] = dataclasses.replace(a, metrics=measured)
    # `rounds` is what the test asked for; the rounds measured can be more (the speed probe's on a busy machine,
    # an A/B test's further pairs) or fewer (a body that raised). Named as in index.json; derived, not read back.
    top["measured_rounds"] = len(result.latency.samples_ms)
    return _Encoder(dataclasses_too=True).encode(top, "\n") + "\n"


def dumps(data: Any) -> str:
    """The JSON text of every report file: sorted keys, one-space indent, strict (NaN -> null)."""
    return _Encoder(dataclasses_too=False).encode(data, "\n") + "\n"


def _stdlib_dumps(data: Any) -> str:
    """What `dumps` writes, by the standard library (the reference, and the way for unusual values)."""
    return json.dumps(json_safe(data), sort_keys=True, indent=1, default=_default, allow_nan=False)


_str: Callable[[str], str] = json.encoder.encode_basestring_ascii  # what json.dumps uses for a str
_float = float.__repr__
_int = int.__repr__
_INFINITIES = (math.inf, -math.inf)


class _Encoder:
    """`json.dumps(json_safe(x), sort_keys=True, indent=1, default=_default, allow_nan=False)`, the
    same text, 2-3x faster: the standard library writes indented JSON with its pure-Python encoder.

    Plain values (dict with str keys, list, str, int, float, bool, None) are written here; NaN and
    infinities as null. With `dataclasses_too`, a value is read as `TestResult.to_dict()` reads it
    (dataclasses as objects of their fields, tuples as lists, numpy as Python, dict keys as str),
    so `to_json` needs no intermediate dicts. Anything else goes to the standard library.
    """

    def __init__(self, dataclasses_too: bool) -> None:
        self.dataclasses_too = dataclasses_too

    def encode(self, o: Any, pad: str) -> str:
        """`o` as JSON, `pad` being the newline and indent of the line it starts on."""
        t = type(o)
        if t is str:
            return _str(o)
        if t is float:
            return "null" if o != o or o in _INFINITIES else _float(o)
        if t is int:
            return _int(o)
        if o is None:
            return "null"
        if o is True:
            return "true"
        if o is False:
            return "false"
        if t is dict:
            if not o:
                return "{}"
            if not all(type(k) is str for k in o):
                return self.other(o, pad)
            inner = pad + " "
            enc = self.encode
            return "{" + inner + ("," + inner).join([_str(k) + ": " + enc(o[k], inner) for k in sorted(o)]) + pad + "}"
        if t is list or (t is tuple and self.dataclasses_too):
            if not o:
                return "[]"
            inner = pad + " "
            enc = self.encode
            return "[" + inner + ("," + inner).join([enc(v, inner) for v in o]) + pad + "]"
        return self.other(o, pad)

    def other(self, o: Any, pad: str) -> str:
        if self.dataclasses_too:
            names = field_names(type(o))
            if names is not None:  # a dataclass: an object of its fields
                inner = pad + " "
                enc = self.encode
                pairs = [_str(n) + ": " + enc(getattr(o, n), inner) for n in sorted(names)]
                return "{" + inner + ("," + inner).join(pairs) + pad + "}" if pairs else "{}"
            if isinstance(o, dict | list | tuple) or type(o).__module__ == "numpy":
                return self.encode(plain(o), pad)
        # Everything else as the standard library writes it, indented to where it stands.
        return _stdlib_dumps(o).replace("\n", pad)


def load_report(path: str | os.PathLike[str]) -> TestResult:
    """Read a report.json back into a `TestResult`; raises `ReportFormatError` for anything wrong. Its `report_dir` is
    the folder its `files` are relative to, where they name this file (`DIR` of `DIR/NAME/report.json`)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ReportFormatError(f"{p}: cannot read the inferscope report: {e}") from e
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ReportFormatError(
            f"{p}: not valid JSON at line {e.lineno}, column {e.colno}: {e.msg}. "
            "Was the file truncated or edited by hand? Re-run the tests to write it again."
        ) from e
    result = result_from_dict(data, str(p))
    named = Path(result.files.get("json") or "report.json").parts  # "NAME/report.json" where one was written
    at = p if len(p.parts) > len(named) else p.absolute()  # ("report.json" read in its folder)
    if len(named) > 1 and at.parts[-len(named) :] == named:  # (a file moved or renamed: its folder is not said)
        result.report_dir = Path(*at.parts[: -len(named)])
    return result


def result_from_dict(data: Any, source: str) -> TestResult:
    """Check `data` (a parsed report.json) against the TestResult layout and build it.

    `source` names where the data came from in error messages (a file name, or a worker).
    """
    if not isinstance(data, dict):
        raise ReportFormatError(f"{source}: expected a JSON object at the top, found {_json_type(data)}")
    version = data.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool):
        raise ReportFormatError(f"{source}: missing or invalid 'schema_version'; this is not an inferscope report.json")
    if version > SCHEMA_VERSION:
        raise ReportFormatError(
            f"{source}: written with report schema {version}, but this pytest-inferscope reads schema "
            f"{SCHEMA_VERSION} and older. Upgrade pytest-inferscope to read it."
        )
    try:
        _check(TestResult, data, source, "")
    except ReportFormatError as e:
        raise ReportFormatError(
            f"{e}, which no report.json pytest-inferscope writes (schema {version}) has: was it edited, or written by "
            "another program? Re-run the tests to write it again."
        ) from None
    try:
        result = TestResult.from_dict(data)
    except (TypeError, ValueError, KeyError) as e:  # the check above should have caught it
        raise ReportFormatError(f"{source}: cannot build the test result: {e}") from e
    if version >= 3:  # the metrics not measured were left out of the file: None again, as the run had them
        for name in _metric_names():
            result.analysis.metrics.setdefault(name, None)
    return result


@functools.cache
def _metric_names() -> tuple[str, ...]:
    from ..analyzer.custom import metric_names

    return metric_names()


def _check(tp: Any, value: Any, source: str, where: str) -> None:
    """Raise ReportFormatError if `value` does not fit type `tp` (a results dataclass or a hint)."""
    origin = typing.get_origin(tp)
    if tp is Any:
        return
    if origin in (typing.Union, types.UnionType):
        args = typing.get_args(tp)
        if value is None and type(None) in args:
            return
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                _check(arg, value, source, where)
                return
            except ReportFormatError as e:
                errors.append(e)
        raise errors[0]
    if value is None and tp is float:
        return  # NaN and infinities are written as null
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        if not isinstance(value, dict):
            raise _wrong(source, where, "an object", value)
        hints = typing.get_type_hints(tp)
        for f in dataclasses.fields(tp):
            inner = f"{where}.{f.name}" if where else f.name
            if f.name not in value:
                required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
                if required:
                    raise ReportFormatError(f"{source}: missing key {inner!r}")
                continue
            _check(hints[f.name], value[f.name], source, inner)
        return
    if origin is list:
        if not isinstance(value, list):
            raise _wrong(source, where, "a list", value)
        (arg,) = typing.get_args(tp)
        for i, v in enumerate(value):
            _check(arg, v, source, f"{where}[{i}]")
        return
    if origin is dict:
        if not isinstance(value, dict):
            raise _wrong(source, where, "an object", value)
        _, arg = typing.get_args(tp)
        for k, v in value.items():
            _check(arg, v, source, f"{where}[{k!r}]")
        return
    expected = {float: (int, float), int: (int,), str: (str,), bool: (bool,)}.get(tp)
    if expected is None:
        return
    if not isinstance(value, expected) or (tp is not bool and isinstance(value, bool)):
        raise _wrong(source, where, tp.__name__, value)


def _wrong(source: str, where: str, expected: str, value: Any) -> ReportFormatError:
    return ReportFormatError(f"{source}: {where or 'the top'} should be {expected}, found {_json_type(value)}")


def _json_type(value: Any) -> str:
    names = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    for t, name in names.items():
        if isinstance(value, t):
            return f"{name} ({json.dumps(value)[:40]})" if t in (str, bool) else name
    return f"a number ({value!r})" if isinstance(value, int | float) else type(value).__name__


def json_safe(value: Any) -> Any:
    """`value` with NaN and infinities anywhere (evidence is free-form) turned into null, as to_dict does."""
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _default(value: Any) -> Any:
    """JSON for what a rule may leave in free-form evidence: numpy arrays, paths, sets."""
    if isinstance(value, np.ndarray):
        return json_safe(value.tolist())
    if isinstance(value, np.generic):
        return json_safe(value.item())
    if isinstance(value, set | frozenset):
        return sorted(value, key=str)
    return str(value)
