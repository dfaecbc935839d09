"""Why the plugin failed a test, as pytest shows a failure: the text (an A/B regression, the thresholds crossed) and
its one-line reason, which pytest's short summary, `--tb=line` and JUnit's failure message read."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..results import CheckResult, TestResult
from .fmt import table_order


def failure_text(result: TestResult) -> str:
    """What fails a test that passed on its own: an A/B regression and crossed thresholds ('' when none); its first line
    is the one-line reason (`ab_line`, `crossed_line`), which until 2026-11-30 was an A/B regression's whole first
    line of evidence, 150 characters and more."""
    texts = []
    ab = result.ab or {}
    failed = crossed_thresholds(result)
    if ab.get("verdict") == "regressed":  # its line first (`ab_line`, counting the thresholds), then its evidence
        from ..ab.paired import ab_line, ab_message

        texts.append(f"{ab_line(ab, more=len(failed))}\n{ab_message(ab)}")
    if failed:
        texts.append(crossed_line(failed) + "\n" + "\n".join(c.message for c in failed))
    return "\n".join(texts)


def crossed_line(failed: list[CheckResult]) -> str:
    """The one-line reason of a test failed on its thresholds, naming the first with its figures and how many more:
    'inferscope: max_latency_ms: median 12.1 ms > 10.0 ms (+1 more)', short enough for pytest's short summary line in
    80 columns beside a short test id (pytest trims it to the terminal's width, and not on CI)."""
    return f"inferscope: {check_line(failed[0])}" + (f" (+{len(failed) - 1} more)" if len(failed) > 1 else "")


def check_line(check: CheckResult) -> str:
    """A failed check in one line: its key and its figures ('max_latency_ms: median 12.1 ms > 10.0 ms')."""
    return f"{check.key}: {check.short}" if check.short else f"{check.key} crossed"


def crossed_thresholds(result: TestResult) -> list[CheckResult]:
    """The failed checks a failure lists besides an A/B regression: a max_regression the A/B judged is that regression,
    whose evidence is said once, as the A/B's."""
    regressed = (result.ab or {}).get("verdict") == "regressed"
    return [c for c in result.failed_checks if not (regressed and c.key == "max_regression")]


class _Writer(Protocol):
    """What of pytest's terminal writer a failure's repr uses (the writer's class is not public API)."""

    def line(self, s: str = "") -> None: ...


@dataclass
class FailureCrash:
    """Where a test failed by the plugin failed, and why: what pytest reads as a failure's `reprcrash` (pytest 8's
    short summary reason, `--tb=line`'s line, JUnit's message)."""

    path: str
    lineno: int
    message: str

    def toterminal(self, tw: _Writer) -> None:
        tw.line(str(self))

    def __str__(self) -> str:
        first = self.message.partition("\n")[0]
        return f"{self.path}:{self.lineno}: {first}"


@dataclass
class FailureRepr:
    """A test failed by the plugin, as pytest shows a failure: its text, with the `reprcrash` it reads the one-line
    reason from (`failure_longrepr`)."""

    text: str
    reprcrash: FailureCrash

    def toterminal(self, tw: _Writer) -> None:
        tw.line(self.text)

    def __str__(self) -> str:
        return self.text


def failure_longrepr(text: str, location: tuple[str, int | None, str]) -> FailureRepr:
    """The `longrepr` of a test the plugin fails (`failure_text`): the text, shown as `pytest.fail(pytrace=False)`
    shows its message, with a `reprcrash` at the test's line (`location`: the report's, its line 0-based) whose
    message is the text's first line (`crossed_line`): JUnit XML's failure message, and the short summary's reason on
    CI too, where pytest writes the reason untrimmed (it repeated every check's message there until 2026-11-30).

    pytest reads a failure's one-line forms from the `reprcrash`: pytest 8 the short summary line's reason
    ("FAILED test_x.py::test_y - ..."), which a text longrepr left with the test's id only, and pytest 8 and 9
    `--tb=line`'s line, which of a text is its first 50 characters, cut mid-message (pytest 9 reads a text as the
    short summary's reason). Through pytest-xdist a worker sends the text (the wrapper has no traceback to
    serialise), and the controller wraps it again (`xdist.XdistHooks`)."""
    path, line, _ = location
    return FailureRepr(text, FailureCrash(path, (line or 0) + 1, text.partition("\n")[0]))


def failure_lines(results: list[TestResult]) -> list[tuple[TestResult, str]]:
    """Each way the session's tests failed, in one line beside its test, by test id: an A/B regression (`ab_line`), a
    crossed threshold (`check_line`), a body that raised (partial: the exception's first line). What index.md,
    index.html and the job summary list above their tables, so one failure among many rows is found at once."""
    out: list[tuple[TestResult, str]] = []
    for r in sorted(results, key=table_order):
        if r.ab and r.ab.get("verdict") == "regressed":
            from ..ab.paired import ab_line

            out.append((r, ab_line(r.ab).removeprefix("inferscope ")))
        out += [(r, check_line(c)) for c in crossed_thresholds(r)]
        if r.verdict == "partial":
            out.append((r, f"partial: {r.partial_reason.partition(chr(10))[0] or 'no measured round completed'}"))
    return out
