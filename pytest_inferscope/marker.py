"""The keys of `@pytest.mark.inferscope(...)`: each defined on the parser of its setting.

A key that is also an option (rounds, warmup, max_regression, ...) uses that option's parser
from the option table, so the marker, the command line, the ini key, the environment, the
config file and `inferscope compare` accept exactly the same values; a threshold only the
marker has uses the same parser kinds. `validate_marker` turns a bad value into a sentence,
`parse_marker` gives the typed values (5% -> 0.05), and `marker_help` is the `markers` ini
line, generated from the table like docs/markers-and-options.md.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from .options import OPTIONS_BY_NAME, TRACE_ROUNDS_COUNT, Parse, choice, fraction, number
from .parsers import OptionalParser
from .results import BOTTLENECKS, UNCLASSIFIED


@dataclass(frozen=True)
class MarkerKey:
    """One key of `@pytest.mark.inferscope(...)`: its parser and what it is for."""

    name: str
    help: str
    parse: Parse
    gpu: bool = False  # needs GPU data to evaluate
    threshold: bool = True  # False for settings (rounds, warmup, cpu, latency_stat)
    valid_text: str = ""  # what the parser accepts; default: the parser's own `valid`

    def valid(self) -> str:
        """What this key accepts, for the docs and for error messages."""
        return self.valid_text or str(getattr(self.parse, "valid", "a valid value"))

    def check(self, value: Any, written: Callable[[Any], str] | None = None, left_out: str = "") -> str | None:
        """None when `value` is valid, else what is wrong with it.

        A marker takes Python values, where the option's parser also reads text (the command line, ini, env): a
        number given as a string ('3') is a mistake, as are None (the key left out gives its default) and an infinite
        or NaN limit (1e400 is inf), which no measurement can cross. `written(v)` is how the caller writes the key
        with the value v, `left_out` what leaving it out does: the marker's (`rounds=3`, 'leave rounds out for its
        default') unless given (`measure(thresholds=...)` writes a key in a dict)."""
        if value is None:
            return f"None is not {self.valid()}; {left_out or f'leave {self.name} out for its default'}"
        try:
            typed = self.parse(value)
        except ValueError as exc:
            reason = str(exc)
            if reason.startswith("is ambiguous"):
                return f"{value!r} {reason}"
            if reason == "is out of range":
                return f"{value!r} is out of range: give {self.valid()}"
            return f"{value!r} is not {self.valid()}"
        number = isinstance(typed, (int, float)) and not isinstance(typed, bool)
        if number and isinstance(value, str) and not value.strip().endswith("%"):
            spelt = written(typed) if written is not None else f"{self.name}={typed!r}"
            return f"{value!r} is a string, not a number: write {spelt}, without quotes"
        if number and not math.isfinite(typed):
            return f"{value!r} is not a finite number: give {self.valid()}"
        return None


def _setting(name: str, help: str, valid_text: str = "") -> MarkerKey:
    """A key that overrides the option of the same name, parsed by that option's parser."""
    parse = OPTIONS_BY_NAME[name].parse
    if isinstance(parse, OptionalParser):  # None is a config file's "not set" (`rounds:`); a marker leaves the key out
        parse = parse.parse
    return MarkerKey(name, help, parse, threshold=False, valid_text=valid_text)


def _option_threshold(name: str, help: str) -> MarkerKey:
    """A threshold that is also an option (max_regression), parsed by that option's parser."""
    return MarkerKey(name, help, OPTIONS_BY_NAME[name].parse)


_POSITIVE = number(0, low_inclusive=False)
_COUNT = number(0)

MARKER_KEYS: dict[str, MarkerKey] = {
    k.name: k
    for k in (
        MarkerKey("max_latency_ms", "fail when the round latency statistic (latency_stat) exceeds this", _POSITIVE),
        _setting("latency_stat", "the statistic max_latency_ms is checked against (default: median)"),
        _option_threshold(
            "max_regression",
            "allowed latency regression against a stored baseline, or the ref in an A/B run (0.05 = 5%)",
        ),
        MarkerKey(
            "expect_bottleneck",
            "fail unless the analyzer names this bottleneck",
            choice((*BOTTLENECKS, UNCLASSIFIED)),
        ),
        MarkerKey(
            "expect_fix",
            "fail unless a simulated fix of this class (the what-if table) saves at least min_fix_saving of the "
            "round: what holds on every GPU when the class itself may differ between them",
            choice(BOTTLENECKS),
            gpu=True,
        ),
        MarkerKey(
            "min_fix_saving",
            "the share of the round expect_fix's fix must save (default 0.15)",
            fraction(1.0),
            threshold=False,
        ),
        MarkerKey(
            "max_host_memory_mb",
            "fail when the process's peak RSS over the test's rounds (warm-up included) exceeds this many MB: the "
            "whole process, what was resident before the rounds too (torch's import, models fixtures loaded, what "
            "earlier tests kept), which the failure's message gives apart",
            _POSITIVE,
        ),
        MarkerKey(
            "max_host_memory_added_mb",
            "fail when the process's peak RSS over the test's rounds (warm-up included) rises more than this many MB "
            "above its RSS before them: what the rounds themselves took, whatever torch's import, fixtures or earlier "
            "tests left resident",
            _POSITIVE,
        ),
        MarkerKey("max_overhead", "fail when the profiler's estimated overhead exceeds this fraction", fraction(1.0)),
        MarkerKey(
            "max_gpu_idle", "fail when the GPU is idle more than this fraction of the round", fraction(1.0), gpu=True
        ),
        MarkerKey("max_gpu_memory_mb", "fail when peak GPU memory allocated exceeds this many MB", _POSITIVE, gpu=True),
        MarkerKey(
            "max_transfer_fraction",
            "fail when host/device copies cover more than this fraction of the round",
            fraction(1.0),
            gpu=True,
        ),
        MarkerKey(
            "max_kernel_launches",
            "fail when a round launches more GPU kernels than this (deterministic)",
            _COUNT,
            gpu=True,
        ),
        MarkerKey(
            "max_h2d_bytes",
            "fail when a round copies more bytes host-to-device than this (deterministic)",
            _COUNT,
            gpu=True,
        ),
        MarkerKey(
            "max_syncs",
            "fail when a round makes more blocking synchronisations than this (deterministic)",
            _COUNT,
            gpu=True,
        ),
        _setting("rounds", "measured calls of the test body"),
        _setting("warmup", "calls before the measured ones, not counted"),
        _setting(
            "round_cap",
            "with the speed probe on, add rounds until `rounds` ran at the machine's usual speed, up to this "
            "many times `rounds` in all (1 = never)",
        ),
        _setting(
            "trace_rounds",
            "extra rounds after the measured ones that record the GPU launch calls, which the measured rounds "
            "are timed without; 'all' records them in every round (no trace round)",
            valid_text=f"{TRACE_ROUNDS_COUNT.valid} or 'all'",
        ),
        _setting(
            "gpu_rounds",
            "which rounds record GPU activity: 'measured' (warm-up and measured rounds), 'trace' (only rounds after "
            "the measured ones, which are timed without CUPTI) or 'auto' (decided after the warm-up)",
        ),
        _setting("cpu", "CPU collector mode for this test"),
        _setting("modules", "record torch.nn.Module forwards to this depth for this test (0 = off)"),
    )
}


def close_match(key: str, valid: Iterable[str]) -> str:
    """'did you mean ...? ' for a misspelt key closest to one of `valid`, else ''."""
    close = difflib.get_close_matches(key, list(valid), n=1)
    return f"did you mean {close[0]!r}? " if close else ""


def validate_marker(nodeid: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> list[str]:
    """Problems with one test's marker, each a sentence naming the test, the key and what is valid."""
    problems = []
    if args:
        problems.append(
            f"{nodeid}: @pytest.mark.inferscope takes keyword arguments only, got positional {args!r}; "
            f"write e.g. @pytest.mark.inferscope(max_latency_ms=50)."
        )
    for key, value in kwargs.items():
        spec = MARKER_KEYS.get(key)
        if spec is None:
            hint = close_match(key, MARKER_KEYS)
            problems.append(
                f"{nodeid}: unknown @pytest.mark.inferscope key {key!r}; {hint}valid keys: {', '.join(MARKER_KEYS)}."
            )
            continue
        wrong = spec.check(value)
        if wrong is not None:
            problems.append(f"{nodeid}: @pytest.mark.inferscope({key}=...): {wrong} ({spec.help}).")
    return problems


#: Keys that only say how another key is checked, and do nothing without it: {key: (that key, an example of it)}.
PARTNERS: dict[str, tuple[str, str]] = {
    "latency_stat": ("max_latency_ms", "max_latency_ms=50 (the limit, in ms, the statistic is checked against)"),
    "min_fix_saving": ("expect_fix", "expect_fix='sync_bound' (the class of fix that must save that share)"),
}


def lone_keys(keys: Iterable[str]) -> list[str]:
    """The keys among `keys` (one test's effective marker: its own, its class's and its module's merged) that do
    nothing there, their partner (`PARTNERS`) not among them."""
    given = set(keys)
    return [k for k in PARTNERS if k in given and PARTNERS[k][0] not in given]


def lone_key_problem(nodeid: str, key: str, value: Any) -> str:
    """The error for a key of a test's own marker that does nothing (`lone_keys`), naming the test and what to add."""
    partner, example = PARTNERS[key]
    return (
        f"{nodeid}: @pytest.mark.inferscope({key}={value!r}) does nothing without {partner}, which no inferscope "
        f"marker of the test (its own, its class's, its module's) sets: add {example}, or remove {key}."
    )


def parse_marker(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """A validated marker's values, typed by each key's parser ('5%' -> 0.05); unknown keys are kept as given."""
    return {k: MARKER_KEYS[k].parse(v) if k in MARKER_KEYS else v for k, v in kwargs.items()}


def marker_help() -> str:
    """The `markers` ini line (`pytest --markers`): every key, from the table."""
    return (
        "inferscope(**thresholds): profile this test's body (CPU, GPU, memory) over warm-up + rounds calls and "
        f"fail when a threshold is crossed; keys: {', '.join(MARKER_KEYS)}. See docs/markers-and-options.md."
    )
