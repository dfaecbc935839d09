"""The arguments of `measure`, `measure_async` and `profile`, checked before a round runs.

Each argument that is also a marker key (rounds, warmup, cpu, trace_rounds, gpu_rounds, and every key of
`thresholds=`) is checked by that key's own parser (marker.MARKER_KEYS), so a call accepts exactly what the marker
accepts, with the same sentence, naming the call and the argument instead of a test. A value of the wrong type
(a string or a float for a count, None) is a TypeError, a value out of range or not among the choices a ValueError.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .config import Settings
from .marker import MARKER_KEYS, close_match
from .options import LEAN_TRACE_ROUNDS, lean_rounds_conflict

#: Keys of the marker that `thresholds=` takes besides the thresholds: they say how two of them are checked.
_CHECK_SETTINGS = ("latency_stat", "min_fix_saving")
THRESHOLD_KEYS = tuple(k for k, spec in MARKER_KEYS.items() if spec.threshold or k in _CHECK_SETTINGS)


def _error(caller: str, shown: str, wrong: str, help: str) -> Exception:
    """The error for one bad value: `shown` is how the call wrote it (`rounds=0`), `wrong` the key's check."""
    right_type = any(w in wrong for w in (" out of range", " is not one of ", " ambiguous", " finite"))
    kind = ValueError if right_type else TypeError
    return kind(f"{caller}({shown}): {wrong} ({help}).")


def check_argument(caller: str, key: str, value: Any) -> None:
    """Raise when `value` is not what the marker key `key` accepts."""
    spec = MARKER_KEYS[key]
    wrong = spec.check(value)
    if wrong is not None:
        raise _error(caller, f"{key}={value!r}", wrong, spec.help)


def check_rounds(caller: str, rounds: int, warmup: int, cpu: str | None) -> None:
    """`rounds`, `warmup` and `cpu` (None: the setting) of a call, as the marker checks them."""
    check_argument(caller, "rounds", rounds)
    check_argument(caller, "warmup", warmup)
    if cpu is not None:
        check_argument(caller, "cpu", cpu)


def check_thresholds(caller: str, thresholds: Mapping[str, Any] | None) -> dict[str, Any]:
    """`thresholds=` of a call, typed by the marker's parsers ('5%' -> 0.05); TypeError or ValueError naming the key
    when one is unknown, not a threshold, or a value the marker would refuse."""
    if thresholds is None:
        return {}
    if not isinstance(thresholds, Mapping):
        raise TypeError(
            f"{caller}(thresholds={thresholds!r}): give a dict of threshold keys and limits, "
            "e.g. thresholds={'max_latency_ms': 50}."
        )
    typed: dict[str, Any] = {}
    for key, value in thresholds.items():
        if key == "max_regression":  # (the plugin's comparison: a baseline or an A/B twin, which a call has neither of)
            raise ValueError(
                f"{caller}(thresholds={{'max_regression': ...}}): a regression is judged against a saved baseline or "
                "an A/B run, which the pytest plugin keeps (--inferscope-compare=NAME, --inferscope-ab=REF) and a "
                f"call does not; mark the test @pytest.mark.inferscope(max_regression=...) instead, or compare two "
                "runs' reports with `inferscope compare A B`."
            )
        if key not in THRESHOLD_KEYS:
            if key in ("rounds", "warmup", "cpu", "trace_rounds", "gpu_rounds"):
                why = f"{key!r} is not a threshold: give it as {caller}'s own argument ({key}=...); "
            elif key in MARKER_KEYS:
                why = f"{key!r} is not a threshold: it is a setting of the marker and the config, not of {caller}; "
            else:
                why = f"unknown threshold {key!r}; {close_match(key, THRESHOLD_KEYS)}"
            raise ValueError(f"{caller}(thresholds={{{key!r}: ...}}): {why}valid keys: {', '.join(THRESHOLD_KEYS)}.")
        spec = MARKER_KEYS[key]
        wrong = spec.check(value)
        if wrong is not None:
            raise _error(caller, f"thresholds={{{key!r}: {value!r}}}", wrong, spec.help)
        typed[key] = spec.parse(value)
    return typed


def round_options(
    settings: Settings, caller: str, trace_rounds: int | str | None, gpu_rounds: str | None
) -> dict[str, Any]:
    """`collecting`'s round options from `measure`'s or `measure_async`'s arguments (None: the setting); ValueError
    naming `caller` and the argument when one is out of range or the two conflict."""
    explicit = trace_rounds is not None or settings.sources.get("trace_rounds", "default") != "default"
    if gpu_rounds is not None:
        check_argument(caller, "gpu_rounds", gpu_rounds)
    gpu_rounds = settings.gpu_rounds if gpu_rounds is None else gpu_rounds
    if trace_rounds is not None:
        check_argument(caller, "trace_rounds", trace_rounds)
        trace_rounds = MARKER_KEYS["trace_rounds"].parse(trace_rounds)
    traced = settings.trace_rounds if trace_rounds is None else trace_rounds
    conflict = lean_rounds_conflict(traced, gpu_rounds, f"{caller}(gpu_rounds={gpu_rounds!r}, trace_rounds={traced!r})")
    if conflict is not None:
        raise ValueError(conflict)
    profile_rounds = None if traced == "all" else (int(traced) if explicit else LEAN_TRACE_ROUNDS)
    return {"trace_rounds": traced, "gpu_rounds": gpu_rounds, "profile_rounds": profile_rounds,
            "until_in_step": not explicit}  # fmt: skip
