"""A profiled test between its call and its report (`session.InferscopeSession` keeps one per test being run)."""

from __future__ import annotations

import functools
import inspect
import sys
import traceback
from collections.abc import Awaitable, Callable
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
    extra_ns: int = 0  # what starting and stopping them took (added_time's collectors_ms)
    promoted: list[str] = field(default_factory=list)  # warnings the filters made errors: the test fails on them
    awaited: bool = False  # an async test's rounds began: a plugin (anyio, ...) awaited it


def in_rounds(
    original: Callable[..., Any],
    pending: Pending,
    rounds: Callable[[Callable[[], Any]], Any],
    rounds_async: Callable[[Callable[[], Awaitable[Any]]], Awaitable[Any]],
) -> Callable[..., Any]:
    """`original` as pytest (or unittest) is to call it: its body in rounds, noting what it raised (here, not only
    around the call: unittest catches what its method raised). A function's rounds are `rounds(body)`; an `async def`
    test's, awaited by the plugin (or unittest) that runs it, `rounds_async(body)`."""
    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def profiled_async(*args: Any, **kwargs: Any) -> Any:
            pending.awaited = True
            try:
                body = lambda: original(*args, **kwargs)  # noqa: E731
                return await rounds_async(body)
            except BaseException as exc:
                note_exception(pending, exc)
                raise

        return profiled_async

    @functools.wraps(original)
    def profiled(*args: Any, **kwargs: Any) -> Any:
        try:
            return rounds(lambda: original(*args, **kwargs))
        except BaseException as exc:
            note_exception(pending, exc)
            raise

    return profiled


def note_exception(pending: Pending, exc: BaseException) -> None:
    """What the body raised: a skip, or what stops pytest (Ctrl-C, `pytest.exit()`: stop collecting, report nothing),
    leaves the test unreported; anything else makes its report partial, SystemExit too (`sys.exit()`, argparse's
    error), which pytest reports as the test's failure and goes on."""
    if isinstance(exc, (pytest.skip.Exception, KeyboardInterrupt, pytest.exit.Exception)):
        pending.skipped = True
    else:
        pending.partial = "".join(traceback.format_exception_only(type(exc), exc)).strip()


#: How pytest's `longrepr` of a strict xfail-marked test that passed begins (`xfail(strict=True)`).
_XPASS_STRICT = "[XPASS(strict)]"


def fail_on_promoted(rep: pytest.TestReport, promoted: list[str]) -> None:
    """The call report of a test some of whose inferscope warnings the user's filters made errors (`-W error`,
    `filterwarnings = error`; extra.say): failed on them, as on a warning its body raised; a failed test keeps its own
    failure, with them beside it."""
    if not promoted:
        return
    text = "\n".join(promoted) + "\n(InferscopeWarning, an error under this session's warning filters)"
    if rep.passed and not hasattr(rep, "wasxfail"):
        rep.outcome, rep.longrepr = "failed", text
    else:
        beside_failure(rep, "inferscope warnings", text)


def fail_on_thresholds(
    rep: pytest.TestReport, item: pytest.Item, call: pytest.CallInfo[None], text: str, longrepr: object
) -> None:
    """The call report of a test whose thresholds (or A/B gate) failed (`text`, `longrepr` showing it): failed, unless
    the test is expected to fail, when it is the expected failure, XFAIL (a known performance regression is marked so).

    pytest's own xfail handling ran before (its report wrapper is inside this plugin's): a body that passed left an
    `xfail` marker's test passed with `wasxfail` (XPASS) or failed with `[XPASS(strict)]` as its longrepr, and a
    `unittest.expectedFailure` method failed with "Unexpected success". A body that failed was an XFAIL already (or a
    failure), so only a report the body passed comes here. An xfail marker that names the exceptions it expects
    (`raises=`) does not expect crossed thresholds: the test fails on them."""
    expects_exceptions = any(m.kwargs.get("raises") is not None for m in item.iter_markers("xfail"))
    if rep.passed and hasattr(rep, "wasxfail"):
        reason = rep.wasxfail
    elif rep.failed and call.excinfo is None and str(rep.longrepr).startswith(_XPASS_STRICT):
        reason = str(rep.longrepr).removeprefix(_XPASS_STRICT).strip()
    elif rep.failed and call.excinfo is not None and _unexpected_success(item, call.excinfo.value):
        reason, expects_exceptions = text.partition("\n")[0], False
    elif rep.passed:
        rep.outcome, rep.longrepr = "failed", longrepr  # type: ignore[assignment]  # a TerminalRepr, by its methods
        return
    else:  # the test failed on its own too: its failure stays, the thresholds beside it
        beside_failure(rep, "inferscope thresholds", text)
        return
    if expects_exceptions:
        if hasattr(rep, "wasxfail"):
            del rep.wasxfail  # JUnit XML reads an XPASS from it, whatever the outcome
        rep.outcome, rep.longrepr = "failed", longrepr  # type: ignore[assignment]
        return
    first = text.partition("\n")[0]  # an xfail marker without a reason: what failed is the reason (no section shows)
    rep.outcome, rep.longrepr, rep.wasxfail = "skipped", None, reason or first
    rep.sections.append(("inferscope thresholds", text))


def _unexpected_success(item: pytest.Item, exc: BaseException) -> bool:
    """pytest's failure of a `unittest.expectedFailure` method (or a method of such a class) that passed."""
    cls = getattr(item, "cls", None)
    if not (isinstance(cls, type) and is_unittest_case(cls) and isinstance(exc, pytest.fail.Exception)):
        return False
    marked = any(getattr(x, "__unittest_expecting_failure__", False) for x in (getattr(item, "obj", None), cls))
    return marked and str(exc).startswith("Unexpected success")


def is_unittest_case(cls: type) -> bool:
    unittest = sys.modules.get("unittest")  # loaded wherever pytest collected a TestCase
    return unittest is not None and issubclass(cls, unittest.TestCase)


def async_testcase(item: pytest.Function) -> Any:
    """The test case of an IsolatedAsyncioTestCase method (the item's `instance` while it runs), or None. unittest looks
    the method up on it and awaits it in its own event loop; pytest sets nothing there for such a method (it does for a
    synchronous one)."""
    if not inspect.iscoroutinefunction(item.obj):
        return None
    testcase = getattr(item, "instance", None)
    return testcase if testcase is not None and is_unittest_case(type(testcase)) else None


def explain_raised_round(rep: pytest.TestReport, pending: Pending, warmup: int, rounds: int) -> None:
    """A failed test whose body raised after a call of it had completed: a section saying in which round and call it
    raised, and why a body can fail there (the rounds share the fixture values), beside pytest's own failure. pytest's
    failure alone showed a test that passes unmarked fail (a file it wrote to `tmp_path` found by its second call)."""
    if not (rep.failed and pending.partial and pending.raw is not None):
        return
    from .events import Kind
    from .rounds import RAISED_FLAG, RoundKind, kinds_of

    ev = pending.raw.events
    spans = ev[ev["kind"] == int(Kind.ROUND)]
    spans = spans[spans["start"].argsort(kind="stable")]  # the body's calls, in order
    raised = (spans["flags"] & RAISED_FLAG).nonzero()[0]
    if not len(raised) or raised[0] == 0:  # none did, or the first call: the rounds are not what broke it
        return
    at = int(raised[0])
    kinds = kinds_of(spans["flags"][: at + 1])
    kind, nth = RoundKind(int(kinds[at])), int((kinds == kinds[at]).sum())
    warmed = int((kinds == int(RoundKind.WARMUP)).sum())
    if kind is RoundKind.WARMUP:
        where = f"warm-up round {nth} of {warmup}, the body's call {at + 1}"
    elif kind is RoundKind.MEASURED:
        asked = f"of {rounds}" if nth <= rounds else f"(the speed probe's, past the {rounds} asked for)"
        before = f" ({warmed} warm-up call{'s' * (warmed != 1)} before the measured rounds)" if warmed else ""
        where = f"measured round {nth} {asked}, the body's call {at + 1}{before}"
    else:
        where = f"the {kind.name.lower()} round after the measured ones, the body's call {at + 1}"
    done = "the call before it" if at == 1 else f"the {at} calls before it"
    beside_failure(
        rep,
        "inferscope rounds",
        f"{rep.nodeid} raised in {where}; {done} completed. The plugin calls the body once a round with the same "
        "fixture values, set up once around the rounds (setup_method and a TestCase's setUp too), so what one "
        "call leaves behind is there for the next: a file written to tmp_path, a change monkeypatch made, a "
        "list, counter or cache the body fills (on self too), a module's state. Make each call start from the "
        "same state (undo the change in the body, or use a new name each call), or mark the test rounds=1, "
        "warmup=0 to profile one call; a per-test timeout (pytest-timeout) counts every call.",
    )


def beside_failure(rep: pytest.TestReport, name: str, text: str) -> None:
    """`text` as a section `name` beside the failure of `rep`: of the failure's own text where pytest made it with
    sections (a traceback's, `addsection`), which JUnit XML's `<failure>` writes, xdist sends and the terminal shows
    whatever --show-capture says; else a section of the report, which only the terminal shows. Until 2026-11-30 it
    was always the report's: a CI user reading JUnit XML (Jenkins, GitLab) did not see it."""
    add = getattr(rep.longrepr, "addsection", None)
    if callable(add):
        add(name, text)
    else:
        rep.sections.append((name, text))
