"""`measure`, `measure_async` and `profile` check their arguments as the marker does, before a round runs."""

from __future__ import annotations

import asyncio
import functools
from pathlib import Path
from typing import Any

import pytest

from pytest_inferscope import measure, measure_async, profile
from pytest_inferscope.api import InferscopeFixture
from pytest_inferscope.reporters.files import ReportDirError


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSCOPE_GPU", "off")


BAD = [
    ({"rounds": 0}, ValueError, r"\(rounds=0\): 0 is out of range: give an integer >= 1\. rounds is the number of"),
    ({"rounds": -1}, ValueError, r"\(rounds=-1\): -1 is out of range: give an integer >= 1"),
    ({"rounds": 1.5}, TypeError, r"\(rounds=1.5\): 1.5 is not an integer >= 1"),
    ({"rounds": "3"}, TypeError, r"\(rounds='3'\): '3' is a string, not a number: write rounds=3, without quotes"),
    ({"rounds": None}, TypeError, r"\(rounds=None\): None is not an integer >= 1; leave rounds out"),
    ({"warmup": -1}, ValueError, r"\(warmup=-1\): -1 is out of range: give an integer >= 0"),
    ({"cpu": "bogus"}, ValueError, r"\(cpu='bogus'\): 'bogus' is not one of 'sample', 'trace', 'off'"),
    ({"trace_rounds": 1.5}, TypeError, r"\(trace_rounds=1.5\): 1.5 is not an integer >= 1 and <= 1000 or 'all'"),
    ({"gpu_rounds": "lean"}, ValueError, r"\(gpu_rounds='lean'\): 'lean' is not one of 'measured', 'trace', 'auto'"),
    (
        {"thresholds": {"max_latency": 5}},
        ValueError,
        r"\(thresholds=\{'max_latency': ...\}\): unknown threshold 'max_latency'; did you mean 'max_latency_ms'\? "
        r"valid keys: max_latency_ms, ",
    ),
    ({"thresholds": {"max_latency_ms": -1}}, ValueError, r"\{'max_latency_ms': -1\}\): -1 is out of range: give a"),
    (
        {"thresholds": {"max_latency_ms": "5"}},
        TypeError,
        r"'5' is a string, not a number: write thresholds=\{'max_latency_ms': 5.0\}, without quotes",
    ),
    ({"thresholds": {"max_latency_ms": "5%"}}, TypeError, r"\{'max_latency_ms': '5%'\}\): '5%' is not a number > 0"),
    ({"thresholds": {"expect_bottleneck": "gpubound"}}, ValueError, r"'gpubound' is not one of 'cpu_bound', "),
    ({"thresholds": {"rounds": 3}}, ValueError, r"'rounds' is not a threshold"),
    ({"thresholds": {"modules": 1}}, ValueError, r"'modules' is not a threshold but a setting: INFERSCOPE_MODULES"),
    ({"thresholds": [("max_latency_ms", 5)]}, TypeError, r"\(thresholds=\[.*\]\): give a dict of threshold keys"),
]


def named(caller: str, message: str) -> str:
    """The pattern of `message` in an error of `caller`: it starts `caller(`."""
    return rf"^{caller}\(" + (message.removeprefix(r"\(") if message.startswith(r"\(") else ".*" + message)


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD)
def test_measure_refuses_a_bad_argument_before_any_call(kwargs: dict[str, Any], error: type, message: str) -> None:
    calls: list[int] = []
    with pytest.raises(error, match=named("measure", message)) as info:
        measure(lambda: calls.append(1), **kwargs)
    assert calls == [] and info.value.__cause__ is None and info.value.__context__ is None


@pytest.mark.parametrize(("kwargs", "error", "message"), BAD)
def test_measure_async_refuses_a_bad_argument_before_any_call(
    kwargs: dict[str, Any], error: type, message: str
) -> None:
    calls: list[int] = []

    async def call() -> None:
        calls.append(1)

    with pytest.raises(error, match=named("measure_async", message)):
        asyncio.run(measure_async(call, **kwargs))
    assert calls == []


@pytest.mark.parametrize(("kwargs", "error", "message"), [b for b in BAD if set(b[0]) <= {"cpu", "thresholds"}])
def test_profile_refuses_a_bad_argument_before_the_block(kwargs: dict[str, Any], error: type, message: str) -> None:
    with pytest.raises(error, match=named("profile", message)), profile("p", **kwargs):
        pytest.fail("the block ran")


def test_thresholds_take_what_the_marker_takes_typed_as_it_types_them() -> None:
    result = measure(lambda: None, rounds=2, warmup=0, cpu="off",
                     thresholds={"max_overhead": "50%", "max_latency_ms": 1000, "latency_stat": "p99"})  # fmt: skip
    checks = {c.key: c for c in result.checks}
    assert checks["max_overhead"].limit == 0.5 and checks["max_latency_ms"].message.startswith("max_latency_ms: p99")
    assert result.rounds == 2 and len(result.latency.samples_ms) == 2 and result.verdict == "pass"


def test_a_report_folder_that_is_a_file_is_said_as_the_api_takes_it(tmp_path: Path) -> None:
    # It said "or pass another folder with --inferscope-report=DIR", pytest's option, to a caller of measure().
    afile = tmp_path / "afile"
    afile.write_text("")
    with pytest.raises(ReportDirError, match="pass another folder as report_dir=") as err:
        measure(lambda: None, rounds=1, warmup=0, report_dir=afile)
    assert "--inferscope-report" not in str(err.value)


@pytest.mark.parametrize("caller", ["measure", "measure_async", "profile"])
@pytest.mark.parametrize("given", [True, False])
def test_an_unusable_report_folder_is_said_by_the_call(
    caller: str, given: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # It said "The inferscope report directory 'afile' ...", where every other error of a call starts with the call.
    afile = tmp_path / "afile"
    afile.write_text("")
    monkeypatch.setenv("INFERSCOPE_REPORT", str(afile))
    with pytest.raises(ReportDirError) as info:
        kwargs: dict[str, Any] = {"report_dir": afile} if given else {}
        if caller == "measure":
            measure(lambda: pytest.fail("called"), **kwargs)
        elif caller == "measure_async":
            asyncio.run(measure_async(pytest.fail, **kwargs))
        else:
            with profile(**kwargs):
                pytest.fail("the block ran")
    head = f"{caller}(report_dir={str(afile)!r})"
    if not given:
        head = f"{caller}() with report {str(afile)!r} (from env INFERSCOPE_REPORT)"
    assert str(info.value).startswith(f"{head}: the report folder {str(afile)!r} exists but is a file, not a folder")


def test_max_regression_is_refused_by_a_call_that_has_nothing_to_compare_with() -> None:
    # It was accepted, then "not evaluated" with advice to use --inferscope-compare=NAME, pytest's option.
    called = []
    with pytest.raises(ValueError, match=r"measure\(thresholds=\{'max_regression': \.\.\.\}\): a regression is judged"):
        measure(lambda: called.append(1), rounds=1, warmup=0, thresholds={"max_regression": 0.05})
    assert not called


def test_each_mark_says_the_round_it_was_made_in() -> None:
    # A test's marks come from every round it ran: 14 marks for 12 measured rounds read as a miscount without it.
    from pytest_inferscope import mark_event

    r = measure(lambda: mark_event("step", k=1), rounds=2, warmup=1)
    assert [(m["name"], m["round"]) for m in r.marks] == [
        ("step", "warmup 0"),
        ("step", "measured 1"),
        ("step", "measured 2"),
    ]


#: What the marker's help says and a call's argument error must not: the test body, the test, the marker's syntax.
MARKER_WORDS = ("test body", "this test", "@pytest.mark", "the marker", "the test")


def error_of(caller: str, kwargs: dict[str, Any]) -> BaseException:
    """The error `caller` raises for `kwargs`, before any call of its function or its block."""

    async def call() -> None:
        pytest.fail("called")

    with pytest.raises((TypeError, ValueError)) as info:
        if caller == "measure":
            measure(lambda: pytest.fail("called"), **kwargs)
        elif caller == "measure_async":
            asyncio.run(measure_async(call, **kwargs))
        else:
            with profile(**kwargs):
                pytest.fail("the block ran")
    return info.value


@pytest.mark.parametrize("caller", ["measure", "measure_async", "profile"])
@pytest.mark.parametrize("kwargs", [b[0] for b in BAD])
def test_an_argument_error_speaks_of_the_call_not_of_the_marker(caller: str, kwargs: dict[str, Any]) -> None:
    # They ended with the marker's help: "measure(rounds=0): ... (measured calls of the test body)."
    if caller == "profile" and not set(kwargs) <= {"cpu", "thresholds"}:
        pytest.skip("profile() takes cpu and thresholds only")
    text = str(error_of(caller, kwargs))
    assert text.startswith(f"{caller}(") and not [w for w in MARKER_WORDS if w in text], text


@pytest.mark.parametrize(
    ("caller", "kwargs", "says"),
    [
        ("measure", {"rounds": 0}, "rounds is the number of measured calls of fn, each one latency sample (10 when "
         "left out), e.g. measure(fn, rounds=20)."),
        ("measure_async", {"warmup": -1}, "warmup is the number of calls of fn before the measured ones, not timed (2 "
         "when left out), e.g. await measure_async(fn, warmup=3)."),
        ("measure", {"cpu": "fast"}, "cpu is how the CPU is collected during the calls of fn: 'sample' (stack "
         "sampling), 'trace' (every Python call; slower) or 'off' (scopes only); left out, INFERSCOPE_CPU or the "
         "config file's cpu: (default 'sample'), e.g. measure(fn, cpu='off')."),
        ("profile", {"cpu": "fast"}, "cpu is how the CPU is collected during the block: 'sample' (stack sampling), "
         "'trace' (every Python call; slower) or 'off' (scopes only); left out, INFERSCOPE_CPU or the config file's "
         "cpu: (default 'sample'), e.g. profile('name', cpu='off')."),
        ("measure", {"trace_rounds": 0}, "trace_rounds is the number of extra calls of fn after the measured ones that "
         "record the GPU launch calls, which the measured calls are timed without; 'all' records them in every call "
         "(no extra call); left out, INFERSCOPE_TRACE_ROUNDS or the config file's trace_rounds: (default 1), e.g. "
         "measure(fn, trace_rounds='all')."),
        ("measure", {"gpu_rounds": "lean"}, "gpu_rounds says which calls of fn record GPU activity: 'measured' (the "
         "warm-up and measured calls), 'trace' (only calls after the measured ones, which are timed without CUPTI) or "
         "'auto' (decided after the warm-up); left out, INFERSCOPE_GPU_ROUNDS or the config file's gpu_rounds: "
         "(default 'auto'), e.g. measure(fn, gpu_rounds='measured')."),
        ("measure", {"thresholds": {"max_latency_ms": -1}}, "max_latency_ms is a threshold: result.verdict is 'fail' "
         "when the round latency statistic (latency_stat) exceeds this."),
        ("profile", {"thresholds": {"max_latency_ms": None}}, "profile(thresholds={'max_latency_ms': None}): None is "
         "not a number > 0; leave 'max_latency_ms' out of thresholds for no limit."),
    ],
)  # fmt: skip
def test_an_argument_error_says_what_the_argument_is_and_how_to_give_it(
    caller: str, kwargs: dict[str, Any], says: str
) -> None:
    assert says in str(error_of(caller, kwargs))


@pytest.mark.parametrize("key", ["rounds", "warmup", "trace_rounds", "gpu_rounds"])
def test_profile_does_not_send_a_round_argument_to_an_argument_it_does_not_take(key: str) -> None:
    # It said "give it as profile's own argument (rounds=...)"; profile() takes no rounds.
    text = str(error_of("profile", {"thresholds": {key: 1}}))
    assert f"'{key}' is not a threshold, and profile() takes no {key}: it profiles its block as one round" in text
    assert f"measure(fn, {key}=...)" in text and "own argument" not in text


@pytest.mark.parametrize("key", ["rounds", "warmup", "trace_rounds", "gpu_rounds"])
def test_a_round_argument_of_profile_says_it_profiles_one_round_and_what_to_use(key: str) -> None:
    # profile(rounds=3) was Python's "profile() got an unexpected keyword argument 'rounds'", naming nothing to use.
    error = error_of("profile", {key: 3})
    assert isinstance(error, TypeError) and error.__cause__ is None and error.__suppress_context__
    assert str(error).startswith(
        f"profile({key}=3): profile() takes no {key}: it profiles its block once, as one round (run the block "
        f"in a loop for more); measure(fn, {key}=3) calls a function in rounds. profile() takes name, "
        "report_dir=, thresholds= and cpu=, e.g. profile('forward', report_dir='out')."
    ), error


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"max_latency_ms": 5}, "profile(max_latency_ms=5): profile() takes its thresholds in a dict: "
         "thresholds={'max_latency_ms': 5}."),
        ({"report": "out"}, "profile(report='out'): profile() takes no argument 'report'; did you mean report_dir=?"),
        ({"bogus": 1}, "profile(bogus=1): profile() takes no argument 'bogus'."),
    ],
)  # fmt: skip
def test_an_unknown_keyword_of_profile_is_named_with_what_to_use(kwargs: dict[str, Any], says: str) -> None:
    error = error_of("profile", kwargs)
    assert isinstance(error, TypeError) and str(error).startswith(says), error
    assert str(error).endswith("profile() takes name, report_dir=, thresholds= and cpu=, e.g. profile('forward', "
                               "report_dir='out').")  # fmt: skip


def test_the_fixtures_profile_names_the_keyword_not_the_test_id() -> None:
    # The fixture passes its test's id as the name: the message shows the argument the user wrote.
    with pytest.raises(TypeError) as info, InferscopeFixture("tests/test_x.py::test_a", False).profile(rounds=3):
        pytest.fail("the block ran")
    assert str(info.value).startswith("profile(rounds=3): profile() takes no rounds: it profiles its block once")


def test_more_positional_arguments_of_profile_than_the_name_are_said() -> None:
    with pytest.raises(TypeError) as info, profile("p", "out"):  # type: ignore[call-arg]
        pytest.fail("the block ran")
    assert str(info.value).startswith("profile('p', 'out'): profile() takes one positional argument, the name; give "
                                      "the others by keyword,")  # fmt: skip


def test_the_valid_threshold_keys_leave_out_the_one_a_call_refuses() -> None:
    text = str(error_of("measure", {"thresholds": {"max_gpu_idel": 0.1}}))
    assert "did you mean 'max_gpu_idle'? valid keys: max_latency_ms, latency_stat, expect_bottleneck" in text
    assert "max_regression" not in text


def test_a_threshold_setting_without_the_threshold_it_is_for_is_refused() -> None:
    """`thresholds={'latency_stat': 'p99'}` alone checked nothing and said nothing."""
    error = error_of("measure", {"thresholds": {"latency_stat": "p99"}})
    assert isinstance(error, ValueError)
    assert str(error) == (
        "measure(thresholds={'latency_stat': 'p99'}): latency_stat does nothing without max_latency_ms, which "
        "thresholds= does not give: add max_latency_ms: 50 (the limit, in ms, the statistic is checked against) to "
        "it, or leave 'latency_stat' out."
    )
    text = str(error_of("measure", {"thresholds": {"min_fix_saving": 0.3, "max_overhead": 0.5}}))
    assert "min_fix_saving does nothing without expect_fix" in text and "add expect_fix: 'sync_bound'" in text


def test_a_threshold_key_that_is_no_string_is_said_so() -> None:
    # It was "TypeError: 'int' object is not iterable", from the spelling hint.
    error = error_of("measure", {"thresholds": {1: 0.5}})
    assert isinstance(error, TypeError)
    assert str(error).startswith("measure(thresholds={1: ...}): a threshold's key is its name, a string such as ")


def test_round_cap_in_thresholds_is_said_to_be_the_plugins() -> None:
    text = str(error_of("measure", {"thresholds": {"round_cap": 2}}))
    assert "'round_cap' is not a threshold but a setting of the pytest plugin's speed probe" in text


@pytest.mark.parametrize("caller", ["measure", "measure_async", "profile"])
def test_a_name_that_is_no_string_is_an_argument_error(caller: str) -> None:
    # It was "AttributeError: 'int' object has no attribute 'replace'", from the report writer, after the calls.
    error = error_of(caller, {"name": 3})
    assert isinstance(error, TypeError)
    assert str(error).startswith(f"{caller}(name=3): 3 is an int, not a string: give the name the result and its ")


@pytest.mark.parametrize("caller", ["measure", "measure_async", "profile"])
@pytest.mark.parametrize("name", ["", "  "])
def test_a_blank_name_is_an_argument_error(caller: str, name: str, tmp_path: Path) -> None:
    # profile('') made a result named '' (a report titled nothing, in a folder named 'test-<hash>'); measure(name='')
    # went by fn's name and measure(name='  ') by the blank.
    error = error_of(caller, {"name": name, "report_dir": tmp_path})
    assert isinstance(error, ValueError) and list(tmp_path.iterdir()) == []
    left_out = "leave name out for the function's name" if caller != "profile" else "leave name out for 'profile'"
    assert str(error).startswith(f"{caller}(name={name!r}): a blank name; give the name the result and its report ")
    assert left_out in str(error)


@pytest.mark.parametrize(
    ("caller", "example"),
    [("measure", "measure(model, batch)"), ("measure_async", "await measure_async(client.predict, batch)")],
)
def test_a_first_argument_that_is_not_callable_is_said_before_any_collection(
    caller: str, example: str, tmp_path: Path
) -> None:
    # It was "TypeError: 'int' object is not callable" from the first round, after a partial report was written.
    with pytest.raises(TypeError) as info:
        if caller == "measure":
            measure(42, rounds=1, warmup=0, report_dir=tmp_path)  # type: ignore[arg-type]
        else:
            asyncio.run(measure_async(42, rounds=1, warmup=0, report_dir=tmp_path))  # type: ignore[arg-type]
    assert str(info.value).startswith(f"{caller}(42): its first argument is an int, not something to call: ")
    assert example in str(info.value) and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("caller", ["measure", "measure_async", "profile"])
def test_an_empty_report_dir_is_refused_not_the_working_directory(
    caller: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # report_dir="" wrote the reports into the working directory (Path("") is "."), among the user's files.
    monkeypatch.chdir(tmp_path)
    error = error_of(caller, {"report_dir": ""})
    assert isinstance(error, ValueError) and list(tmp_path.iterdir()) == []
    assert str(error).startswith(f"{caller}(report_dir=''): an empty folder name; give the folder the reports go to")


def test_a_report_dir_of_the_wrong_type_names_the_argument() -> None:
    error = error_of("measure", {"report_dir": 3})
    assert isinstance(error, TypeError)
    assert str(error).startswith("measure(report_dir=3): 3 is an int, not a folder: give a str or a pathlib.Path")


def test_a_misspelt_argument_of_measure_is_not_silently_passed_to_fn() -> None:
    # measure(f, round=3) passed round=3 to f: "f() got an unexpected keyword argument 'round'", from the first round.
    def f() -> None:
        pytest.fail("called")

    with pytest.raises(TypeError) as info:
        measure(f, round=3)
    assert str(info.value).startswith(
        "measure(round=3): f takes no argument 'round', and measure passes the keyword arguments it does not know on "
        "to fn; did you mean measure's rounds="
    )


def test_an_argument_of_fn_close_to_one_of_measures_is_passed_on() -> None:
    got: list[int] = []
    measure(lambda round: got.append(round), round=7, rounds=1, warmup=0, cpu="off")
    assert got == [7]


def test_a_conflict_with_a_setting_names_the_setting_not_an_argument_never_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # It said "measure(gpu_rounds='trace', trace_rounds='all')" when the call gave no trace_rounds.
    monkeypatch.setenv("INFERSCOPE_TRACE_ROUNDS", "all")
    with pytest.raises(ValueError) as info:
        measure(lambda: pytest.fail("called"), gpu_rounds="trace")
    assert str(info.value).startswith("measure(gpu_rounds='trace') with trace_rounds 'all' (from env "
                                      "INFERSCOPE_TRACE_ROUNDS): gpu_rounds 'trace' records")  # fmt: skip


def test_the_messages_quoted_in_the_quick_start_are_the_calls_own() -> None:
    text = (Path(__file__).parents[2] / "docs" / "quickstart.md").read_text(encoding="utf-8")
    quoted = text.split("<!-- not-run: error messages -->\n```\n", 1)[1].split("```", 1)[0].splitlines()
    made = [
        error_of("measure", {"rounds": 0}),
        error_of("profile", {"cpu": "fast"}),
        error_of("measure", {"thresholds": {"max_latency_ms": "50"}}),
        error_of("measure", {"thresholds": {"max_latency": 50}}),
    ]
    assert len(quoted) == len(made)
    for line, error in zip(quoted, made, strict=True):
        assert str(error).startswith(line.removesuffix("...")), line


class _Predictor:
    """A callable object, as a torch.nn.Module is: no __qualname__ of its own."""

    def __call__(self, x: int, scale: int = 1) -> int:
        return x * scale


@pytest.mark.parametrize(
    ("fn", "name"),
    [
        (_Predictor(), "_Predictor"),
        (functools.partial(_Predictor(), scale=2), "_Predictor"),
        (functools.partial(divmod, 7), "divmod"),
    ],
)
def test_a_result_left_unnamed_goes_by_what_was_called(fn: Any, name: str, tmp_path: Path) -> None:
    # A module (a callable object) and a functools.partial were both named 'measure': two models measured into one
    # report folder wrote the same folder, measure/, the second over the first.
    result = measure(fn, 3, rounds=1, warmup=0, cpu="off", report_dir=tmp_path)
    assert result.nodeid == name and (tmp_path / result.files["md"]).is_file()


def test_measure_async_of_a_partial_goes_by_its_function() -> None:
    async def predict(x: int) -> int:
        return x

    result = asyncio.run(measure_async(functools.partial(predict, 1), rounds=1, warmup=0, cpu="off"))
    assert result.nodeid.endswith("predict")


def greet(name: str, loud: bool = False) -> str:
    return name.upper() if loud else name


async def agreet(name: str) -> str:
    return name


@pytest.mark.parametrize("caller", ["measure", "measure_async"])
def test_an_argument_of_fn_named_like_one_of_the_calls_own_is_said_at_the_first_call(
    caller: str, tmp_path: Path
) -> None:
    # measure(greet, name='bob') named the result 'bob' and raised "greet() missing 1 required positional argument:
    # 'name'" from the first call: nothing said that name= had gone to measure.
    with pytest.raises(TypeError) as info:
        if caller == "measure":
            measure(greet, name="bob", report_dir=tmp_path)
        else:
            asyncio.run(measure_async(agreet, name="bob", report_dir=tmp_path))
    fn = "greet" if caller == "measure" else "agreet"
    assert str(info.value) == (
        f"{caller}({fn!r}): {fn}() missing a required argument: 'name', and name= is {caller}'s own (the name the "
        f"result and its report go by), not passed on to fn; give fn its name with functools.partial({fn}, "
        "name=...) or a lambda."
    )
    assert not hasattr(info.value, "__notes__")  # not "fn raised in warm-up call 1": the call never started


def test_arguments_that_fn_cannot_take_are_said_at_the_first_call(tmp_path: Path) -> None:
    # It was "greet() takes from 1 to 2 positional arguments but 3 were given", with no word of which arguments are
    # fn's; asked only when the first call raised: reading a signature costs more than the check is worth otherwise.
    with pytest.raises(TypeError) as info:
        measure(greet, "a", True, 3, report_dir=tmp_path)
    assert str(info.value) == (
        "measure('greet'): the arguments after fn are fn's, and greet() cannot take them: too many positional "
        "arguments; give them as greet takes them: (name, loud=False)."
    )
    assert not hasattr(info.value, "__notes__")
    # A plain TypeError, as the docs say: its traceback ended "pytest_inferscope.api._NotTimed: ...", a class of ours.
    assert type(info.value) is TypeError and info.exconly().startswith("TypeError: measure('greet')")


def test_a_type_error_of_fns_own_body_goes_on_as_it_came() -> None:
    def add(x: int) -> int:
        return x + "1"  # type: ignore[operator]

    with pytest.raises(TypeError, match="unsupported operand") as info:
        measure(add, 1, rounds=1, warmup=0)
    assert info.value.__notes__[0].startswith("inferscope: measure('")  # fn raised in a call: the usual note


def test_profile_of_name_none_goes_by_its_default_name_as_measure_does() -> None:
    # It was "AttributeError: 'NoneType' object has no attribute 'replace'", from the report's slug, after the block.
    with profile(None, cpu="off") as p:
        pass
    assert p.result is not None and p.result.nodeid == "profile"


@pytest.mark.parametrize("caller", ["measure", "measure_async", "profile"])
def test_a_report_dir_under_home_is_expanded_as_the_setting_and_the_cli_expand_it(
    caller: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # report_dir="~/out" wrote a folder named '~' into the working directory; INFERSCOPE_REPORT and --report expand it.
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)

    async def call() -> None:
        pass

    if caller == "measure":
        result = measure(lambda: None, rounds=1, warmup=0, report_dir="~/out")
    elif caller == "measure_async":
        result = asyncio.run(measure_async(call, rounds=1, warmup=0, report_dir="~/out"))
    else:
        with profile("p", report_dir="~/out") as p:
            pass
        assert p.result is not None
        result = p.result
    assert not (tmp_path / "~").exists()
    assert (tmp_path / "home" / "out" / result.files["md"]).is_file()


def test_a_torch_module_given_arguments_its_forward_cannot_take_is_said_with_forwards_parameters() -> None:
    # A module's own signature is (*args, **kwargs): it was Python's "Linear.forward() takes 2 positional arguments but
    # 3 were given".
    torch = pytest.importorskip("torch")
    linear = torch.nn.Linear(4, 4)
    x = torch.zeros(2, 4)
    with pytest.raises(TypeError) as info:
        measure(linear, x, x, rounds=1, warmup=0, cpu="off")
    assert str(info.value) == (
        "measure('Linear'): the arguments after fn are fn's, and Linear() cannot take them: too many positional "
        "arguments; give them as Linear takes them: (input)."
    )
