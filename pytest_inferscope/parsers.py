"""The value parsers of the settings: one per kind of value, shared by options, ini keys, env, files and markers.

Each takes a string (CLI, env, ini) or an already-typed value (YAML, TOML, a parsed CLI value, a marker
argument) and returns the typed value, or raises ValueError with a short reason that completes
"<name>=<value> ...". What *is* valid is the option's `hint` (options.py), so reasons stay short.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

Parse = Callable[[Any], Any]

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def parse_bool(value: Any) -> bool:
    """Parse a yes/no setting: a bool, 0/1, or 1/0, true/false, yes/no, on/off in any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("is not a yes/no value")


def parse_path(value: Any) -> Path:
    """Parse a folder path; `~` is expanded, relative paths are kept (resolve() anchors file ones)."""
    if isinstance(value, os.PathLike):
        return Path(value)
    if not isinstance(value, str):
        raise ValueError("is not a folder path")
    if not value.strip():
        raise ValueError("is empty")
    return Path(value.strip()).expanduser()


class OptionalParser:
    """A parser that also takes None, which a config file gives for `key:` or `key: null` ("not set")."""

    def __init__(self, parse: Parse) -> None:
        self.parse = parse
        self.valid = getattr(parse, "valid", "a valid value")  # what the wrapped parser accepts

    def __call__(self, value: Any) -> Any:
        return None if value is None else self.parse(value)


def optional(parse: Parse) -> OptionalParser:
    """Make a parser accept None, which a config file gives for `key:` or `key: null` ("not set")."""
    return OptionalParser(parse)


class NumberParser:
    """A parser for a number in [low, high] (or (low, high]), a whole number if `integer`.

    A class rather than a closure so that the marker's docs and errors can say what it accepts (`valid`).
    """

    def __init__(self, low: float, high: float = math.inf, *, integer: bool = False, low_inclusive: bool = True):
        self.low, self.high, self.integer, self.low_inclusive = low, high, integer, low_inclusive
        kind = "an integer" if integer else "a number"
        lo = f" {'>=' if low_inclusive else '>'} {low:g}"
        hi = f" and <= {high:g}" if math.isfinite(high) else ""
        self.valid = f"{kind}{lo}{hi}"

    def __call__(self, value: Any) -> float | int:
        kind = "a whole number" if self.integer else "a number"
        # bool is an int subclass, and YAML turns `yes` into True: never a number.
        if isinstance(value, bool) or not isinstance(value, (int, str) if self.integer else (int, float, str)):
            raise ValueError(f"is not {kind}")
        try:
            result = int(value) if self.integer else float(value)
        except ValueError:
            raise ValueError(f"is not {kind}") from None
        # Written so that NaN fails both comparisons; inf fails a finite upper bound.
        above_low = result >= self.low if self.low_inclusive else result > self.low
        if not (above_low and result <= self.high):
            raise ValueError("is out of range")
        return result


def number(low: float, high: float = math.inf, *, integer: bool = False, low_inclusive: bool = True) -> NumberParser:
    """Make a parser for a number in [low, high] (or (low, high]), a whole number if `integer`."""
    return NumberParser(low, high, integer=integer, low_inclusive=low_inclusive)


class ChoiceParser:
    """A parser for one of `choices`, case-insensitive."""

    def __init__(self, choices: tuple[str, ...]) -> None:
        self.choices = choices
        self.valid = "one of " + ", ".join(repr(c) for c in choices)

    def __call__(self, value: Any) -> str:
        # YAML 1.1 reads a bare `off`/`on` as a boolean, so `gpu: off` arrives as False.
        if isinstance(value, bool):
            value = "on" if value else "off"
        if isinstance(value, str) and value.strip().lower() in self.choices:
            return value.strip().lower()
        raise ValueError("is not one of the choices")


def choice(choices: tuple[str, ...]) -> ChoiceParser:
    """Make a parser for one of `choices`, case-insensitive."""
    return ChoiceParser(choices)


class FractionParser:
    """A parser for a fraction in [0, high], written as 0.05 or as a percentage, 5%.

    Where more than 1 is allowed, a bare number above 1 is refused as ambiguous: `2` may mean
    200% or a mistyped 2%, and a regression gate must not guess.
    """

    def __init__(self, high: float = 10.0) -> None:
        self.high = high
        self.plain, self.percent = NumberParser(0.0, min(high, 1.0)), NumberParser(0.0, 100.0 * high)
        self.valid = f"a fraction >= 0 and <= {min(high, 1.0):g}, or a percentage up to {100 * high:g}% such as 5%"

    def __call__(self, value: Any) -> float:
        if isinstance(value, str) and value.strip().endswith("%"):  # checked as a percentage: 20% is 0.2, not 20
            return float(self.percent(value.strip()[:-1])) / 100.0
        try:
            return float(self.plain(value))
        except ValueError as exc:
            text = value.strip() if isinstance(value, str) else value
            if self.high > 1 and str(exc) == "is out of range" and float(text) > 1:
                raise ValueError(f"is ambiguous: write {text}% for a percentage, or a fraction of at most 1") from None
            raise


def fraction(high: float = 10.0) -> FractionParser:
    """Make a parser for a fraction in [0, high], written as 0.05 or as a percentage, 5%."""
    return FractionParser(high)


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def parse_gpus(value: Any) -> tuple[int, ...]:
    """A comma-separated list of GPU indices, e.g. 0,1,2,3."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if isinstance(value, list | tuple):
        value = ",".join(str(v) for v in value)
    if not isinstance(value, str):
        raise ValueError("is not a list of GPU indices")
    try:
        gpus = tuple(int(part) for part in value.split(","))
    except ValueError:
        raise ValueError("is not a list of GPU indices") from None
    if not gpus or any(g < 0 for g in gpus):
        raise ValueError("is not a list of GPU indices")
    return gpus


TRACE_ROUNDS_COUNT = number(1, 1000, integer=True)


def parse_trace_rounds(value: Any) -> int | str:
    """Trace rounds: a whole number from 1 to 1000, or `all` (launch calls recorded in every round)."""
    if isinstance(value, str) and value.strip().lower() == "all":
        return "all"
    return int(TRACE_ROUNDS_COUNT(value))


def parse_name(value: Any) -> str:
    """A baseline name: letters, digits, '.', '-' and '_', so it is a safe file name."""
    if isinstance(value, str) and _NAME.fullmatch(value.strip()):
        return value.strip()
    raise ValueError("is not a valid name")


def parse_ref(value: Any) -> str:
    """A git revision: no whitespace, not starting with '-' (it is passed to git as an argument)."""
    if isinstance(value, str) and value.strip() and not value.strip().startswith("-") and " " not in value.strip():
        return value.strip()
    if isinstance(value, str) and not value.strip():  # (`--inferscope-ab=$(git merge-base HEAD origin/main)`)
        raise ValueError(
            "is empty, not a git revision (a `$(git merge-base HEAD origin/main)` on the command line gives this when "
            "it prints nothing: the branch, or the history the two share, is not in the clone, as in a shallow CI "
            "checkout; fetch it first, with `fetch-depth: 0` in actions/checkout's `with:` or `git fetch --unshallow "
            "origin main`)"
        )
    raise ValueError("is not a git revision")
