"""The arguments of `measure`, `measure_async` and `profile`, checked before a round runs.

Each argument that is also a marker key (rounds, warmup, cpu, trace_rounds, gpu_rounds, and every key of
`thresholds=`) is checked by that key's own parser (marker.MARKER_KEYS), so a call accepts exactly what the marker
accepts; what is wrong is said in the same words, then what the argument is to the call (`_about`), not the marker's
help, which speaks of a test body. A value of the wrong type (a string or a float for a count, None) is a TypeError,
a value out of range or not among the choices a ValueError.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
from collections.abc import Callable, Mapping
from typing import Any, ParamSpec, TypeVar

from .config import Settings
from .marker import MARKER_KEYS, PARTNERS, MarkerKey, close_match, lone_keys
from .options import LEAN_TRACE_ROUNDS, OPTIONS_BY_NAME, lean_rounds_conflict

#: `measure`'s and `measure_async`'s rounds and warm-up when not given (their own: the settings' are the plugin's).
MEASURE_ROUNDS, MEASURE_WARMUP = 10, 2
#: Keys of the marker that `thresholds=` takes besides the thresholds: they say how two of them are checked.
_CHECK_SETTINGS = ("latency_stat", "min_fix_saving")
THRESHOLD_KEYS = tuple(k for k, spec in MARKER_KEYS.items() if spec.threshold or k in _CHECK_SETTINGS)
#: What `thresholds=` of a call takes: not max_regression, which needs a baseline or an A/B twin that a call has not.
CALL_THRESHOLD_KEYS = tuple(k for k in THRESHOLD_KEYS if k != "max_regression")
#: The marker keys that are arguments of the calls (profile() takes cpu only).
ROUND_ARGUMENTS = ("rounds", "warmup", "trace_rounds", "gpu_rounds")

#: What each argument is to the call, after what is wrong with its value: {fn} is "calls of fn" or the block's words.
_ARGUMENTS = {
    "rounds": f"rounds is the number of measured calls of fn, each one latency sample ({MEASURE_ROUNDS} when left out)",
    "warmup": f"warmup is the number of calls of fn before the measured ones, not timed ({MEASURE_WARMUP} when left "
    "out)",
    "cpu": "cpu is how the CPU is collected during {during}: 'sample' (stack sampling), 'trace' (every Python call; "
    "slower) or 'off' (scopes only)",
    "trace_rounds": "trace_rounds is the number of extra calls of fn after the measured ones that record the GPU "
    "launch calls, which the measured calls are timed without; 'all' records them in every call (no extra call)",
    "gpu_rounds": "gpu_rounds says which calls of fn record GPU activity: 'measured' (the warm-up and measured calls), "
    "'trace' (only calls after the measured ones, which are timed without CUPTI) or 'auto' (decided after the warm-up)",
}
_EXAMPLES: dict[str, Any] = {"rounds": 20, "warmup": 3, "cpu": "off", "trace_rounds": "all", "gpu_rounds": "measured"}


def _example(caller: str, key: str) -> str:
    """A call giving `key` a valid value, as `caller` is called."""
    given = f"{key}={_EXAMPLES[key]!r}"
    if caller == "profile":
        return f"profile('name', {given})"
    return f"{'await ' if caller == 'measure_async' else ''}{caller}(fn, {given})"


def _about(caller: str, key: str) -> str:
    """What the argument `key` (or the key of `thresholds=`) is to `caller`, with an example call for an argument."""
    if key not in _ARGUMENTS:
        help = MARKER_KEYS[key].help
        if help.startswith("fail "):  # what a crossed threshold does to a call's result, which nothing fails
            return f"{key} is a threshold: result.verdict is 'fail' {help.removeprefix('fail ')}"
        return f"{key} is {help}"
    about = _ARGUMENTS[key].format(during="the block" if caller == "profile" else "the calls of fn")
    spec = OPTIONS_BY_NAME[key]
    if spec.default is not None:  # (rounds and warmup: the call's own defaults, said above)
        about += f"; left out, {spec.env} or the config file's {key}: (default {spec.default!r})"
    return f"{about}, e.g. {_example(caller, key)}"


def _error(caller: str, shown: str, wrong: str, about: str) -> Exception:
    """The error for one bad value: `shown` is how the call wrote it (`rounds=0`), `wrong` the key's check."""
    right_type = any(w in wrong for w in (" out of range", " is not one of ", " ambiguous", " finite"))
    kind = ValueError if right_type else TypeError
    return kind(f"{caller}({shown}): {wrong}. {about}.")


def check_argument(caller: str, key: str, value: Any) -> None:
    """Raise when `value` is not what the marker key `key` accepts."""
    wrong = MARKER_KEYS[key].check(value)
    if wrong is not None:
        raise _error(caller, f"{key}={value!r}", wrong, _about(caller, key))


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
        _check_threshold_key(caller, key)
        spec = MARKER_KEYS[key]
        wrong = spec.check(value, _in_thresholds(key), _left_out(spec))
        if wrong is not None:
            raise _error(caller, f"thresholds={{{key!r}: {value!r}}}", wrong, _about(caller, key))
        typed[key] = spec.parse(value)
    for key in lone_keys(typed):  # (latency_stat without max_latency_ms, min_fix_saving without expect_fix)
        partner, example = PARTNERS[key]
        raise ValueError(
            f"{caller}(thresholds={{{key!r}: {thresholds[key]!r}}}): {key} does nothing without {partner}, which "
            f"thresholds= does not give: add {example.replace('=', ': ', 1)} to it, or leave {key!r} out."
        )
    return typed


def _in_thresholds(key: str) -> Callable[[Any], str]:
    """How a call writes `key` with a value: in its `thresholds=` dict."""
    return lambda value: f"thresholds={{{key!r}: {value!r}}}"


def _left_out(spec: MarkerKey) -> str:
    """What leaving a key out of `thresholds=` does."""
    return f"leave {spec.name!r} out of thresholds for {'no limit' if spec.threshold else 'its default'}"


def _check_threshold_key(caller: str, key: Any) -> None:
    """Raise when `key` is not a key that `thresholds=` of `caller` takes, saying where it belongs if anywhere."""
    shown = f"{caller}(thresholds={{{key!r}: ...}})"
    valid = f"valid keys: {', '.join(CALL_THRESHOLD_KEYS)}."
    if not isinstance(key, str):
        raise TypeError(f"{shown}: a threshold's key is its name, a string such as 'max_latency_ms'; {valid}")
    if key == "max_regression":  # (the plugin's comparison: a baseline or an A/B twin, which a call has neither of)
        raise ValueError(
            f"{shown}: a regression is judged against a saved baseline or an A/B run, which the pytest plugin keeps "
            "(--inferscope-compare=NAME, --inferscope-ab=REF) and a call does not; mark the test "
            "@pytest.mark.inferscope(max_regression=...) instead, or judge two results of a call with "
            "pytest_inferscope.compare(before, after, max_regression=...) (two runs' reports: "
            "`inferscope compare A B`)."
        )
    if key in CALL_THRESHOLD_KEYS:
        return
    if key in ROUND_ARGUMENTS and caller == "profile":
        why = (
            f"{key!r} is not a threshold, and profile() takes no {key}: it profiles its block as one round; "
            f"measure(fn, {key}=...) calls a function in rounds; "
        )
    elif key in (*ROUND_ARGUMENTS, "cpu"):
        why = f"{key!r} is not a threshold: give it as {caller}'s own argument ({key}=...); "
    elif key == "modules":
        spec = OPTIONS_BY_NAME[key]
        why = f"{key!r} is not a threshold but a setting: {spec.env} or the config file's {key}: gives it to a call; "
    elif key in MARKER_KEYS:  # round_cap
        why = (
            f"{key!r} is not a threshold but a setting of the pytest plugin's speed probe, which a call does not run; "
        )
    else:
        why = f"unknown threshold {key!r}; {close_match(key, CALL_THRESHOLD_KEYS)}"
    raise ValueError(f"{shown}: {why}{valid}")


def round_options(
    settings: Settings, caller: str, trace_rounds: int | str | None, gpu_rounds: str | None
) -> dict[str, Any]:
    """`collecting`'s round options from `measure`'s or `measure_async`'s arguments (None: the setting); ValueError
    naming `caller` and the argument when one is out of range or the two conflict."""
    explicit = trace_rounds is not None or settings.sources.get("trace_rounds", "default") != "default"
    if gpu_rounds is not None:
        check_argument(caller, "gpu_rounds", gpu_rounds)
    given = {"gpu_rounds": gpu_rounds, "trace_rounds": trace_rounds}
    gpu_rounds = settings.gpu_rounds if gpu_rounds is None else gpu_rounds
    if trace_rounds is not None:
        check_argument(caller, "trace_rounds", trace_rounds)
        trace_rounds = MARKER_KEYS["trace_rounds"].parse(trace_rounds)
    traced = settings.trace_rounds if trace_rounds is None else trace_rounds
    conflict = lean_rounds_conflict(traced, gpu_rounds, _conflict_where(settings, caller, given))
    if conflict is not None:
        raise ValueError(conflict)
    profile_rounds = None if traced == "all" else (int(traced) if explicit else LEAN_TRACE_ROUNDS)
    return {"trace_rounds": traced, "gpu_rounds": gpu_rounds, "profile_rounds": profile_rounds,
            "until_in_step": not explicit}  # fmt: skip


def _conflict_where(settings: Settings, caller: str, given: dict[str, Any]) -> str:
    """The call's arguments of a gpu_rounds/trace_rounds conflict as it gave them, and the setting it did not give."""
    shown = ", ".join(f"{k}={v!r}" for k, v in given.items() if v is not None)
    unset = [f"{k} {getattr(settings, k)!r} (from {settings.sources.get(k, 'default')})" for k, v in given.items()
             if v is None]  # fmt: skip
    return f"{caller}({shown})" + (f" with {' and '.join(unset)}" if unset else "")


#: `measure`'s and `measure_async`'s own keyword arguments: one misspelt would be passed on to fn.
_OWN = ("rounds", "warmup", "name", "report_dir", "thresholds", "cpu", "trace_rounds", "gpu_rounds")


def _a(value: Any) -> str:
    """'an int', 'a Tensor': the type of `value` with its article."""
    kind = type(value).__name__
    return f"{'an' if kind[0].lower() in 'aeiou' else 'a'} {kind}"


def callable_name(fn: Callable[..., Any]) -> str:
    """The name a call's result and its report folder go by when `name=` is not given: the function's qualified name
    (`Model.predict`), a functools.partial's function's, a callable object's class (a torch.nn.Module's: `Linear`)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    qualname = getattr(fn, "__qualname__", None)
    return qualname if isinstance(qualname, str) else type(fn).__qualname__


def check_callable(caller: str, fn: Any) -> None:
    """`fn` of `measure` or `measure_async` is something to call, not what a call returned (`measure(model(batch))`)."""
    if callable(fn):
        return
    shown = repr(fn)
    if len(shown) > 40 or "\n" in shown:
        shown = f"<{type(fn).__name__}>"
    right, wrong = (
        ("await measure_async(client.predict, batch)", "await measure_async(client.predict(batch))")
        if caller == "measure_async"
        else ("measure(model, batch)", "measure(model(batch))")
    )
    raise TypeError(
        f"{caller}({shown}): its first argument is {_a(fn)}, not something to call: give the function and its "
        f"arguments, {right}, not what a call returned, {wrong}."
    )


def check_name(caller: str, name: Any) -> None:
    """`name=` of a call is a string that is not blank (or None, the function's name)."""
    if name is None:
        return
    example = "profile('forward')" if caller == "profile" else f"{caller}(fn, name='forward')"
    if not isinstance(name, str):
        raise TypeError(
            f"{caller}(name={name!r}): {name!r} is {_a(name)}, not a string: give the name the result and its report "
            f"go by, e.g. {example}."
        )
    if not name.strip():
        left_out = "'profile'" if caller == "profile" else "the function's name"
        raise ValueError(
            f"{caller}(name={name!r}): a blank name; give the name the result and its report go by, e.g. {example}, "
            f"or leave name out for {left_out}."
        )


def check_report_dir_argument(caller: str, report_dir: Any) -> None:
    """`report_dir=` of a call is a folder's path (or None, the setting); an empty one is not the working directory."""
    if report_dir is None:
        return
    leave = "or leave report_dir out for INFERSCOPE_REPORT (or the config file's report:; no reports when unset)"
    if not isinstance(report_dir, (str, os.PathLike)) or not isinstance(os.fspath(report_dir), str):
        raise TypeError(
            f"{caller}(report_dir={report_dir!r}): {report_dir!r} is {_a(report_dir)}, not a folder: give a str or a "
            f"pathlib.Path, e.g. report_dir='inferscope-report', {leave}."
        )
    if not os.fspath(report_dir).strip():
        raise ValueError(
            f"{caller}(report_dir={report_dir!r}): an empty folder name; give the folder the reports go to, e.g. "
            f"report_dir='inferscope-report', {leave}."
        )


def check_passed_on(caller: str, fn: Callable[..., Any], kwargs: Mapping[str, Any]) -> None:
    """A keyword argument for fn spelt like one of the call's own (`round=3`) that fn does not take is a TypeError
    naming the call's argument, before any call: passed on, it failed in the first round as fn's unexpected keyword."""
    for key, value in kwargs.items():
        close = _close_to_own(key)
        if close and not _takes(fn, key):
            shown = getattr(fn, "__name__", None) or callable_name(fn)
            raise TypeError(
                f"{caller}({key}={value!r}): {shown} takes no argument {key!r}, and {caller} "
                f"passes the keyword arguments it does not know on to fn; did you mean {caller}'s {close}=?"
            )


#: What each of the calls' own arguments is, when fn missed an argument of that name (it went to the call, not fn).
_OWN_IS = {
    "name": "the name the result and its report go by",
    "rounds": "the number of measured calls",
    "warmup": "the number of calls before the measured ones",
    "report_dir": "the folder the reports go to",
    "thresholds": "the limits the result is checked against",
    "cpu": "how the CPU is collected",
    "trace_rounds": "the number of calls recording the GPU launch calls",
    "gpu_rounds": "which calls record GPU activity",
}


def binding_error(caller: str, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> str:
    """Why `fn` cannot take the arguments given after it ('' when it can, or its signature cannot be read): asked when
    its first call raised a TypeError (reading a signature took 20-120 µs on the 2-core VM, a call of measure() ~3 ms).
    An argument fn requires that is named like one of the call's own (`name=`) went to the call, not to fn."""
    try:
        signature = inspect.signature(fn)
        kinds = {q.kind for q in signature.parameters.values()}
        forward = getattr(fn, "forward", None)
        if kinds == {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD} and callable(forward):
            signature = inspect.signature(forward)  # a torch.nn.Module: its __call__ takes anything, forward says what
        signature.bind(*args, **kwargs)
    except ValueError:
        return ""  # (a builtin without a signature: its own error stands)
    except TypeError as exc:
        shown = callable_name(fn)
        short = shown.rpartition(".")[2]
        missing = str(exc).removeprefix("missing a required argument: ").strip("'")
        if missing in _OWN_IS:
            return (
                f"{caller}({shown!r}): {short}() {exc}, and {missing}= is {caller}'s own ({_OWN_IS[missing]}), not "
                f"passed on to fn; give fn its {missing} with functools.partial({short}, {missing}=...) or a lambda."
            )
        bare = signature.replace(
            parameters=[q.replace(annotation=inspect.Parameter.empty) for q in signature.parameters.values()],
            return_annotation=inspect.Signature.empty,
        )
        return (
            f"{caller}({shown!r}): the arguments after fn are fn's, and {short}() cannot take them: {exc}; give them "
            f"as {short} takes them: {bare}."
        )
    return ""


@functools.cache
def _close_to_own(key: str) -> str:
    """The call's own argument that `key` is spelt like, or ''; kept per key: a loop of calls passes the same ones
    (difflib takes ~15 µs a key on the 2-core VM)."""
    close = difflib.get_close_matches(key, _OWN, n=1, cutoff=0.75)
    return close[0] if close else ""


def _takes(fn: Callable[..., Any], key: str) -> bool:
    """Whether `fn` takes the keyword argument `key` (True when its signature cannot be read)."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return True
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return True
    param = params.get(key)
    return param is not None and param.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


_P = ParamSpec("_P")
_R = TypeVar("_R")
#: What `profile` takes, said after each of its argument errors.
_PROFILE_TAKES = "profile() takes name, report_dir=, thresholds= and cpu=, e.g. profile('forward', report_dir='out')."


def profile_arguments(profile: Callable[_P, _R]) -> Callable[_P, _R]:
    """`profile` whose call with an argument it does not take (`profile(rounds=3)`) is a TypeError naming the argument
    and what to use, not Python's "got an unexpected keyword argument"; a good call costs nothing more (the signature
    is read only after the call failed, before its block ran: a generator binds its arguments when called)."""
    signature = inspect.signature(profile)

    @functools.wraps(profile)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        try:
            return profile(*args, **kwargs)
        except TypeError as exc:
            try:
                signature.bind(*args, **kwargs)
            except TypeError:
                raise TypeError(_profile_misused(signature, args, kwargs, str(exc))) from None
            raise

    return checked


def _profile_misused(signature: inspect.Signature, args: tuple[Any, ...], kwargs: dict[str, Any], said: str) -> str:
    """What is wrong with a call of `profile` that its signature refuses (`said`: Python's words), and what to use."""
    unknown = [k for k in kwargs if k not in signature.parameters]
    if unknown:
        key, value = unknown[0], kwargs[unknown[0]]
        shown = f"profile({key}={value!r})"
        if key in ROUND_ARGUMENTS:
            return (
                f"{shown}: profile() takes no {key}: it profiles its block once, as one round (run the block in a loop "
                f"for more); measure(fn, {key}={value!r}) calls a function in rounds. {_PROFILE_TAKES}"
            )
        if key in THRESHOLD_KEYS:
            in_dict = f"thresholds={{{key!r}: {value!r}}}"
            return f"{shown}: profile() takes its thresholds in a dict: {in_dict}. {_PROFILE_TAKES}"
        close = difflib.get_close_matches(key, list(signature.parameters), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}=?" if close else "."
        return f"{shown}: profile() takes no argument {key!r}{hint} {_PROFILE_TAKES}"
    shown = "profile(" + ", ".join([*map(repr, args), *(f"{k}={v!r}" for k, v in kwargs.items())]) + ")"
    positional = [p for p in signature.parameters.values() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]
    if len(args) > len(positional):
        return (
            f"{shown}: profile() takes one positional argument, the name; give the others by keyword, "
            f"{_PROFILE_TAKES.removeprefix('profile() takes ')}"
        )
    return f"{shown}: {said.removesuffix('.')}. {_PROFILE_TAKES}"


#: `compare()`'s arguments besides the results: what each is, after what is wrong with its value.
_COMPARE_ABOUT = {
    "max_regression": "max_regression is the slowdown of the median allowed before a significant one is a regression "
    "(default 0.05), e.g. compare(before, after, max_regression='10%')",
    "alpha": "alpha is the significance level of the one-sided Mann-Whitney U test on the rounds (default 0.01), e.g. "
    "compare(before, after, alpha=0.05)",
}


def check_compare_argument(key: str, value: Any) -> Any:
    """`compare()`'s `before`/`after` (raise: not a result) or a knob, typed ('5%' -> 0.05) as the options type it."""
    if key in ("before", "after"):
        raise TypeError(
            f"compare({key}={value!r}): {value!r} is {_a(value)}, not a result: give two results of measure(), "
            "measure_async() or profile() (a TestResult), e.g. compare(measure(old_fn), measure(new_fn)); to compare "
            "two report folders, run `inferscope compare A B`."
        )
    spec = MarkerKey(key, "", OPTIONS_BY_NAME[key].parse)
    wrong = spec.check(value, lambda typed: f"{key}={typed!r}")
    if wrong is not None:
        raise _error("compare", f"{key}={value!r}", wrong, _COMPARE_ABOUT[key])
    return spec.parse(value)


#: The attribute that marks a TypeError `not_timed` made (`api._say_where_it_raised` leaves it as it is).
NOT_TIMED = "_inferscope_not_timed"


def not_timed(why: str) -> TypeError:
    """A call of `fn` that `measure` or `measure_async` cannot time (a coroutine not awaited, nothing to await,
    arguments `fn` cannot take): a plain TypeError (its traceback reads `TypeError: ...`, not a class of ours), said by
    its own message, without the note of where `fn` raised."""
    exc = TypeError(why)
    setattr(exc, NOT_TIMED, True)
    return exc
