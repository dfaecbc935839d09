"""xdist support: workers profile their own tests; the controller gathers their results as plain data.

Registered only when pytest-xdist is present. A worker sends each result as JSON text (`TestResult.to_wire`) with the
test's call report (`WorkerHooks`), and all of them again in `workeroutput` as its session ends, which replace the ones
sent before (a report file that could not be written, a reports_ms added after the report); the controller rebuilds
them here and writes the one summary and index. A worker that dies (`os._exit`, a segfault, pytest-timeout's thread
method) sends no `workeroutput`: the results it sent with its reports stay (without links where their report files
are not on disk: `unwritten`), and the test it died in is listed as a partial run (under pytest-rerunfailures, from
the plans a worker that lived sent as it ended; without them, its plan unknown). The controller keeps of each result
what its summary, index and baseline read (`Lean`).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from .checks import REFUSED

if TYPE_CHECKING:
    from .results import ClockFit, TestResult
    from .session import InferscopeSession

_FAILED_BY_US = ("inferscope.verdict", "fail")  # a JUnit property (reporters/junit.py), sent with the report
#: The attribute of a call report that carries its test's result from a worker (taken off again by the controller).
_WIRE = "inferscope_result"
#: The attribute of a profiled test's setup report: [rounds, warm-up] of its plan (a crash's result says them).
_PLANNED = "inferscope_planned"
#: A worker's output under pytest-rerunfailures: its profiled tests' [rounds, warm-up], as JSON text.
_PLANS = "inferscope_plans"


def register(config: pytest.Config, session: InferscopeSession) -> None:
    """The controller's hooks, or a worker's; none in a session xdist does not distribute (no `-n`, `-n 0`), where the
    controller's would copy every test's JUnit properties (~1 kB a test: docs/performance.md, "Long sessions")."""
    if hasattr(config, "workerinput"):
        hooks: object = WorkerHooks(session)
    elif distributing(config):
        hooks = XdistHooks(session)
    else:
        return
    config.pluginmanager.register(hooks, "inferscope-session-xdist")


def distributing(config: pytest.Config) -> bool:
    """Whether xdist runs this session's tests in workers (as xdist itself decides it: a distribution mode and workers
    to send them to), so that this process is a controller."""
    return getattr(config.option, "dist", "no") != "no" and bool(getattr(config.option, "tx", None))


class WorkerHooks:
    """A worker's: which tests it profiles, said with their setup reports (a test it dies in has no other), and each
    result, sent with its test's call report (pytest serialises a report's attributes for xdist)."""

    def __init__(self, session: InferscopeSession) -> None:
        self.session = session

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        results = self.session.results
        before = results[-1] if results else None
        rep = yield  # (registered after the session: its report wrapper, which makes the result, ran inside this one)
        if call.when == "setup" and (plan := self.session.plans.get(item.nodeid)) is not None:
            setattr(rep, _PLANNED, [plan.rounds, plan.warmup])
        elif call.when == "call" and results and results[-1] is not before and results[-1].nodeid == item.nodeid:
            setattr(rep, _WIRE, results[-1].to_wire())
        return rep

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """pytest-rerunfailures sends a test's setup report with the others once the test has run to its end: for a
        test a worker died in, the controller learns from a worker that lived to its end what the test's plan was."""
        if session.config.pluginmanager.hasplugin("rerunfailures"):
            plans = {nodeid: [p.rounds, p.warmup] for nodeid, p in self.session.plans.items()}
            session.config.workeroutput[_PLANS] = json.dumps(plans)  # type: ignore[attr-defined]


class XdistHooks:
    """Controller-side hooks of pytest-xdist."""

    def __init__(self, session: InferscopeSession) -> None:
        self.session = session
        self.sent: dict[str, set[str]] = {}  # by worker: the tests whose results came with their reports
        self.running: dict[str, tuple[int, int]] = {}  # profiled tests set up and not torn down: rounds, warm-up
        self.unplanned: dict[str, str] = {}  # by worker: the test it set up last, when that one is not profiled
        self.lean = Lean()
        self.calls: dict[str, list[tuple[Any, ...]]] = {}  # a test's call report's properties, until its teardown's
        # tests a worker died in, not known as profiled then: the worker, and how many runs of it had come before
        self.died_in: dict[str, list[tuple[str, int]]] = {}
        self.plans = "{}"  # the last plans a worker sent (`_PLANS`)
        self.refused = False  # a worker refused bad marker arguments (`checks.refuse_markers`)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed and str(report.longrepr).startswith(REFUSED):
            self.refused = True

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Before the session's (the summary, the index, the baseline): the tests a worker died in before the
        controller knew them as profiled (in their setup; under pytest-rerunfailures, which sends a test's reports once
        it has run to its end). Each death is a run of the test, partial, in the order the runs came: a test that died
        at every try is listed as its last death, one that ran to its end later has its deaths among its earlier runs.
        One whose plan no worker sent (none lived to its session's end) is listed too, its plan unknown, where the
        session profiles anything. A session a worker refused bad marker arguments in ends as a usage error, as a serial
        one does, not as xdist's collection error."""
        if self.refused:
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        plans = json.loads(self.plans) if self.died_in else {}
        last = {r.nodeid: r for r in self.session.results}
        profiling = bool(self.session.results or self.session.plans or self.session.settings.all)
        for nodeid, deaths in self.died_in.items():
            if nodeid not in plans and (plans or not profiling):  # not profiled (or nothing is)
                continue
            if (result := last.get(nodeid)) is None:
                rounds, warmup = plans.get(nodeid, (0, 0))
                result = crashed(nodeid, deaths[-1][0], rounds, warmup, planned=nodeid in plans)
                deaths, runs = deaths[:-1], []
                self.session.results.append(result)
            else:
                runs = list(result.earlier_runs)
            for _, before in reversed(deaths):  # (each at its place among the runs the controller had then)
                runs.insert(min(before, len(runs)), "partial")
            result.earlier_runs = runs

    def properties(self, report: pytest.TestReport) -> None:
        """A test's JUnit properties come with its call report and again with its teardown report (JUnit XML reads
        them there), and pytest keeps both reports to the session's end: the teardown's are the call's, and the names
        are kept once for all tests."""
        props = report.user_properties
        if report.when == "call":
            props = self.calls[report.nodeid] = [tuple(_name(x) for x in p) for p in props]
        elif report.when == "teardown" and (held := self.calls.pop(report.nodeid, None)) is not None and held == props:
            props = list(held)
        else:
            props = [tuple(_name(x) for x in p) for p in props]
        report.user_properties = props

    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        from .results import TestResult, keep_last_run

        output = getattr(node, "workeroutput", None) or {}  # none from a worker that died
        if "inferscope_results" in output:  # its final results replace those sent with the reports
            sent = self.sent.pop(_worker(node), set())
            self.session.results[:] = [r for r in self.session.results if r.nodeid not in sent]
        elif (sent := self.sent.pop(_worker(node), set())) and self.session.report_dir is not None:
            unwritten(self.session, sent, _worker(node))  # it died: its last tests' files may not be on disk
        for d in output.pop("inferscope_results", []):  # (xdist keeps the node, and its output, to the end)
            result = self.lean(TestResult.from_wire(d))
            keep_last_run(self.session.results, result)
            self.session.baselines.note_environment_change(result)  # the summary line the workers cannot write
        self.plans = output.pop(_PLANS, None) or self.plans
        for note in getattr(node, "workeroutput", {}).get("inferscope_ab_notes", []):
            if note not in self.session.notes:  # every worker sees the tests removed since the ref: said once
                self.session.notes.append(note)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """The result a worker sent with the report, taken off it (JUnit XML, a report log see the report without it);
        a test a worker's plugin failed comes back with its reason as text; pytest reads its one-line forms (pytest
        8's short summary reason, `--tb=line`'s line) from a failure's `reprcrash`, so it gets one again here
        (`failure_longrepr`)."""
        if (wire := report.__dict__.pop(_WIRE, None)) is not None:
            from .results import TestResult, keep_last_run

            result = self.lean(TestResult.from_wire(wire))
            keep_last_run(self.session.results, result)  # (pytest-rerunfailures: the run before it goes)
            self.session.baselines.note_environment_change(result)
            self.sent.setdefault(_worker(getattr(report, "node", None)), set()).add(result.nodeid)
        worker = _worker(getattr(report, "node", None))
        if (planned := report.__dict__.pop(_PLANNED, None)) is not None:
            self.running[report.nodeid] = (int(planned[0]), int(planned[1]))
        elif report.when == "setup":
            self.unplanned[worker] = report.nodeid
        elif report.when == "teardown":
            self.running.pop(report.nodeid, None)
        elif report.when == "???" and report.nodeid in self.running:  # xdist's report of the test a worker died in
            rounds, warmup = self.running.pop(report.nodeid)
            self.session.results.append(crashed(report.nodeid, worker, rounds, warmup))
        elif report.when == "???" and self.unplanned.get(worker) != report.nodeid:  # (set up, unprofiled: not listed)
            # died in its setup, or under pytest-rerunfailures (no setup report sent): a worker's plans may say
            known = next((len(r.earlier_runs) + 1 for r in self.session.results if r.nodeid == report.nodeid), 0)
            self.died_in.setdefault(report.nodeid, []).append((worker, known))
        if report.user_properties:  # pytest keeps every report to the end: a test's properties once, not once a report
            self.properties(report)
        if report.when != "call" or not report.failed or not isinstance(report.longrepr, str):
            return
        if any(tuple(p) == _FAILED_BY_US for p in report.user_properties):
            from .reporters.failure import failure_longrepr

            # (a FailureRepr is a TerminalRepr to pytest: it reads toterminal and reprcrash, not the class)
            report.longrepr = failure_longrepr(report.longrepr, report.location)  # type: ignore[assignment]


class Lean:
    """What the controller keeps of a worker's result: what its terminal summary, index and saved baseline read. The
    collectors' description and the clock fit (report.json has them) are left out; an environment equal to one kept
    before is that one (each worker's tests share theirs), and the dicts' keys are kept once for all results
    (docs/ci.md, "xdist", says what the controller holds a test)."""

    def __init__(self) -> None:
        self.environments: dict[str, dict[str, Any]] = {}
        self.no_clock: ClockFit | None = None

    def __call__(self, result: TestResult) -> TestResult:
        env = result.environment
        key = json.dumps(env, default=str)  # order-sensitive: a dict shared only with one alike in every way
        result.environment = self.environments.setdefault(key, env)
        result.collectors = []
        if self.no_clock is None:
            from .results import ClockFit

            self.no_clock = ClockFit()
        result.clock = self.no_clock
        a = result.analysis
        a.metrics = {_name(k): v for k, v in a.metrics.items()}
        result.added = {_name(k): v for k, v in result.added.items()}
        result.files = {_name(k): v for k, v in result.files.items()}
        return result


def _name(key: Any) -> Any:
    """A name that many results or reports hold (a metric's, a JUnit property's), kept once."""
    return sys.intern(key) if type(key) is str else key


def _worker(node: Any) -> str:
    """A worker's id (`gw0`; a worker started in place of one that died has its own)."""
    return str(getattr(getattr(node, "gateway", None), "id", node))


def crashed(nodeid: str, worker: str, rounds: int, warmup: int, planned: bool = True) -> TestResult:
    """The result of a profiled test its worker died in: partial, no round recorded, no report files (`planned`:
    its rounds and warm-up are known; else no worker said them, nor whether it was profiled)."""
    from .reporters.files import slugify
    from .results import Analysis, LatencyStats, TestResult

    reason = (
        f"worker {worker!r} crashed while running this test (a segfault, os._exit(), pytest-timeout's thread method, "
        "the OOM killer): no round was recorded and no report written"
    ) + ("" if planned else "; its worker died before saying whether and how it profiled the test (no plan known)")
    return TestResult(
        nodeid, slugify(nodeid), "failed", "partial", rounds, warmup, LatencyStats([]), Analysis("unclassified", 0.0),
        partial_reason=reason,
    )  # fmt: skip


def unwritten(session: InferscopeSession, nodeids: set[str], worker: str) -> None:
    """The results a worker that died had sent whose report files are not all on disk (its writer, a helper process,
    had not written them when it was killed): their links dropped, so the index names no folder that is missing, and
    a line in the summary saying whose."""
    assert session.report_dir is not None
    lost = []
    for r in session.results:
        if r.nodeid in nodeids and r.files and not all((session.report_dir / f).is_file() for f in r.files.values()):
            r.files, r.report_dir = {}, None
            lost.append(r.nodeid)
    if lost:
        session.notes.append(
            f"inferscope: worker {worker!r} died before the report files of {', '.join(sorted(lost))} were all on "
            "disk: listed in the index with their figures, without links (xdist: docs/ci.md)"
        )
