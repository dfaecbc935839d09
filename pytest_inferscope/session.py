"""The plugin's one stateful object: plans which tests to profile, runs their rounds, and
turns each collection into a result, a report, JUnit properties and maybe a failure.

Registered by `plugin.py` as "inferscope-session"; everything heavy (numpy, the collectors, the reporters) is
imported when the first test is profiled, so a session that profiles nothing pays nothing for it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import math
import os
import time
import traceback
from collections.abc import Awaitable, Callable, Generator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from .checks import benchmark_conflict, lone_key_problems, plan_of, refuse_markers, validate_marker, warn_unused
from .config import Settings
from .extra import (
    custom_rules,
    hook_lists,
    machine_info,
    say,
    start_extra_collectors,
    stop_extra_collectors,
    tell_result,
    warn_rule_failures,
)
from .gpus import GPU_OFF, device_missing, pin_gpu, pin_ignored
from .options import cpu_line, lean_rounds_conflict
from .pending import (
    Pending,
    async_testcase,
    explain_raised_round,
    fail_on_promoted,
    fail_on_thresholds,
    in_rounds,
    is_unittest_case,
    note_exception,
)
from .session_baselines import SessionBaselines
from .stackbase import fresh_chunk

if TYPE_CHECKING:
    from .api import InferscopeFixture
    from .checks import Plan
    from .collectors import SamplerThread
    from .collectors.gpu import Choice
    from .reporters.writer import ReportWriter
    from .results import TestResult

log = logging.getLogger("pytest_inferscope")

#: An item's runs before this one in the session: their verdicts (pytest-rerunfailures runs the same item again).
EARLIER_RUNS = pytest.StashKey[tuple[str, ...]]()


class InferscopeSession:
    """State for one pytest session (or one xdist worker)."""

    def __init__(self, config: pytest.Config, settings: Settings) -> None:
        from .ab import make_ab, session_settings

        given, settings = settings, session_settings(settings)  # a twin: no reports, baselines or twin; A/B: no compare
        self.config = config
        self.settings = settings
        self.report_dir: Path | None = (
            (config.invocation_params.dir / settings.report).resolve() if settings.report is not None else None
        )
        self.plans: dict[str, Plan] = {}
        self.results: list[TestResult] = []
        self.fixtures: dict[str, InferscopeFixture] = {}
        self._pending: dict[str, Pending] = {}
        self._swapped: set[str] = set()  # tests pytest_runtest_call swapped for their rounds (pytest_pyfunc_call's not)
        self._gpu: Choice | None = None
        self._environment: dict[str, Any] | None = None
        self._promoted: list[str] = []  # the machine-info hook's warnings made errors: the next analysed test fails
        self.notes: list[str] = []  # lines for the end of the terminal summary (saved baseline, ...)
        self.baselines = SessionBaselines(config, settings, self.notes)
        self.custom_rules: list[Any] = []  # from .inferscope_rules.yaml, loaded at session start
        self.pinned_gpu: int | None = pin_gpu(config, settings.gpus)
        # The A/B gate's plugin object (docs/ab.md), or None.
        self.ab = make_ab(config, given, self.plans, self.results)
        if self.ab is not None:
            config.pluginmanager.register(self.ab, "inferscope-ab")
        self.probe_seen: list[float] = []  # this process's speed-probe readings: the machine's usual speed so far
        self.writer: ReportWriter | None = None  # puts report files on disk between tests (reporters/writer.py)
        self._sampler: SamplerThread | None = None  # the stack sampler's thread, parked between tests
        self._prepared = False  # `_prepare` ran
        self._load_ns = 0  # what was done once for the tests (`_prepare`, the environment), until charged to one
        self._log_level = log.level  # given back at the end (pytest.main in a process that goes on)
        log.setLevel(settings.log_level.upper())

    def gpu_choice(self) -> Choice:
        """The GPU backend, chosen once per session (raises GpuBackendError when required and absent)."""
        if self._gpu is None:
            from .collectors.gpu import select_backend

            forced = os.environ.get("INFERSCOPE_COLLECTOR") or None
            self._gpu = select_backend(self.settings.gpu, forced=forced, trace_size_mb=self.settings.trace_size_mb)
            log.info("inferscope GPU collection: %s", self._gpu.describe())
        return self._gpu

    def gpu_line(self) -> str:
        """The header's GPU part, without loading the collectors (numpy, the backend: ~0.1-0.2 s) in a session that
        may profile nothing: without a GPU, the reason; with one, the backend once a test has chosen it."""
        gpu = self.settings.gpu
        if self._gpu is None and gpu != "required" and not os.environ.get("INFERSCOPE_COLLECTOR"):
            if (missing := GPU_OFF if gpu == "off" else device_missing()) is not None:
                return f"not collected ({missing})"  # as select_backend says it
            if not self.settings.all and not self.results:  # results: the summary's line names what was chosen
                return "auto (the backend is chosen as the first test is profiled)"
        return self.gpu_choice().describe()

    def _prepare(self) -> None:
        """Once, before the first test (`pytest_runtestloop`; else before the first profiled test's collection): load
        the code that profiles and post-processes a test and choose the GPU backend. What it took, and the
        environment's first reading (after the test: torch's facts once the test imported it, CUDA left alone before
        it), are the first profiled test's `added` load_ms (`_finish`)."""
        if not self._prepared:
            self._prepared, began = True, time.perf_counter_ns()
            try:
                from .postprocess import preload

                preload(reports=self.report_dir is not None)
            except Exception as exc:  # loaded again where it is used: the test's post-processing says what failed
                log.debug("inferscope could not load its pipeline ahead of the first test: %s", exc)
            self.gpu_choice()  # GpuBackendError (required, and none) fails the test here, as it did in the collection
            self._load_ns += time.perf_counter_ns() - began

    def environment(self) -> dict[str, Any]:
        if self._environment is None:
            began = time.perf_counter_ns()
            from .baseline import MACHINE_INFO_KEYS
            from .environment import collect_environment

            env = collect_environment()
            if self.pinned_gpu is not None:
                env["pinned_gpu"] = self.pinned_gpu  # part of the baseline fingerprint
            if facts := machine_info(self.config, self._promoted):  # a hook that fails adds nothing (extra.py says so)
                env.update(facts)
                env[MACHINE_INFO_KEYS] = sorted(facts)  # part of the baseline fingerprint (baseline.fingerprint)
            self._environment = env
            self._load_ns += time.perf_counter_ns() - began
        return self._environment

    # -- hooks ---------------------------------------------------------------------

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.baselines.check()
        self.custom_rules = custom_rules(self.config.rootpath)
        if self.settings.gpu == "required" or os.environ.get("INFERSCOPE_COLLECTOR"):  # else a test's traceback
            from .collectors.gpu import GpuBackendError

            try:
                self.gpu_choice()
            except GpuBackendError as exc:
                raise pytest.UsageError(str(exc)) from exc

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Before the first test, when one will be profiled: what is loaded once (`_prepare`), outside every test's time
        (pytest-timeout's window, a test's duration). --collect-only and a session profiling nothing load nothing."""
        if not self.plans or session.config.getoption("collectonly"):
            return
        from .collectors.gpu import GpuBackendError

        with contextlib.suppress(GpuBackendError):  # a forced backend that cannot run: the first profiled test says so
            self._prepare()

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        return self.header_lines()

    def header_lines(self) -> list[str]:
        cpu = cpu_line(self.settings.cpu, self.settings.sampler, self.settings.sample_interval_ms)
        lines = [f"inferscope: cpu {cpu}; memory procfs; gpu {self.gpu_line()}"]
        if (ignored := pin_ignored(self.settings.gpus)) is not None:
            lines.append(ignored)
        if self.report_dir is not None:
            lines.append(f"inferscope: reports in {self.report_dir}")
        return lines

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        problems: list[str] = []
        for item in items:
            for marker in item.iter_markers("inferscope"):
                problems.extend(validate_marker(item.nodeid, marker.args, marker.kwargs))
        lone, unused = lone_key_problems(items)
        problems += lone + warn_unused(unused, shown=getattr(config, "workerinput", {}).get("workerid", "gw0") == "gw0")
        if problems:
            return refuse_markers(config, items, problems)
        for item in items:
            if isinstance(item, pytest.Function):
                plan = plan_of(item, self.settings)
                if plan is not None:
                    self.plans[item.nodeid] = plan
                    if (bad := lean_rounds_conflict(plan.trace_rounds, plan.gpu_rounds, item.nodeid)) is not None:
                        problems.append(bad)
                    if (bad := benchmark_conflict(item, plan)) is not None:
                        problems.append(bad)
        if problems:
            refuse_markers(config, items, problems)

    @pytest.hookimpl(wrapper=True)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, object, object]:
        """A test function's call, its rounds in place of it (pytest's own ~0.1 ms for a call stays out of them)."""
        if pyfuncitem.nodeid in self._swapped:
            return (yield)
        return (yield from self._profiled_call(pyfuncitem))

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        """What pytest_pyfunc_call cannot swap in time, first of the wrappers: a unittest.TestCase method (unittest runs
        the `item.obj` pytest sets on its test case, or for an IsolatedAsyncioTestCase method the one on the test case
        itself: setUp and tearDown once, around the rounds); an async test, which pytest-asyncio and pytest-trio wrap
        for their runner before (so the runner runs once around the rounds)."""
        if not isinstance(item, pytest.Function) or item.nodeid not in self.plans:
            return (yield)
        cls = getattr(item, "cls", None)
        unittest, is_async = isinstance(cls, type) and is_unittest_case(cls), inspect.iscoroutinefunction(item.obj)
        if not unittest and not is_async:  # a test function: pytest_pyfunc_call's
            return (yield)
        self._swapped.add(item.nodeid)
        try:
            return (yield from self._profiled_call(item))
        finally:
            self._swapped.discard(item.nodeid)

    def _profiled_call(self, pyfuncitem: pytest.Function) -> Generator[None, object, object]:
        plan = self.plans.get(pyfuncitem.nodeid)
        original = pyfuncitem.obj
        if plan is None:
            return (yield)
        is_async = inspect.iscoroutinefunction(original)
        self._prepare()
        from .api import collection_options
        from .collectors import Collection, SamplerThread
        from .collectors.schedule import Steadying

        s = self.settings
        options = collection_options(s, plan.cpu, plan.trace_rounds, plan.gpu_rounds, plan.lean_trace_rounds,
                                     plan.until_in_step, modules=plan.modules)  # fmt: skip
        self._sampler = self._sampler or SamplerThread()  # one for the session: a thread per test cost 0.2-0.3 ms
        coll = Collection(options, self.gpu_choice(), name=pyfuncitem.nodeid, sampler_thread=self._sampler)
        pending = self._pending[pyfuncitem.nodeid] = Pending(coll)

        probing = s.speed_probe == "on" or (
            s.speed_probe == "auto" and (s.compare is not None or s.save_baseline is not None)
        )
        # The probe's made-up rounds (drift.measure_steady), judged against the usual speed: the readings
        # of the baseline compared with (or appended to), and this session's.
        steady = None
        if probing:
            prior = [*self.probe_seen[-1000:], *self.baselines.probe_readings(pyfuncitem.nodeid)]
            steady = Steadying(max(plan.rounds, math.ceil(plan.rounds * plan.round_cap - 1e-9)), prior)

        def rounds(body: Callable[[], Any]) -> Any:
            if self.ab is not None:  # A/B: the rounds take turns with the twin's (ab/lockstep.py)
                return fresh_chunk(self.ab.run_test, pyfuncitem.nodeid, coll, body, plan)  # as run_rounds does
            result = coll.run_rounds(body, plan.rounds, plan.warmup, steady)
            self.probe_seen.extend(coll.probe_ms)
            return result

        async def rounds_async(body: Callable[[], Awaitable[Any]]) -> Any:  # in the loop that awaits the test
            if self.ab is not None:
                return await self.ab.run_test_async(pyfuncitem.nodeid, coll, body, plan)
            result = await coll.run_rounds_async(body, plan.rounds, plan.warmup, steady)
            self.probe_seen.extend(coll.probe_ms)
            return result

        testcase = async_testcase(pyfuncitem)  # unittest looks its method up there: the rounds are put there too
        pyfuncitem.obj = in_rounds(original, pending, rounds, rounds_async)
        if testcase is not None:
            setattr(testcase, pyfuncitem.name, pyfuncitem.obj)
        self.wait_for_reports(pause=True)  # no report file is written while a test is measured
        from .api import taken_over_by_the_body

        if pyfuncitem.get_closest_marker("inferscope") is None:  # --inferscope-all, or it asked for the fixture
            taken_over_by_the_body(functools.partial(self._release, pyfuncitem.nodeid))
        coll.start()
        began = time.perf_counter_ns()
        pending.extra = start_extra_collectors(self.config, pyfuncitem, pending.promoted)
        pending.extra_ns = time.perf_counter_ns() - began
        try:
            return (yield)
        except BaseException as exc:
            note_exception(pending, exc)
            raise
        finally:
            taken_over_by_the_body(None)
            pyfuncitem.obj = original
            if testcase is not None:
                delattr(testcase, pyfuncitem.name)
            pending.skipped |= is_async and not pending.awaited  # no plugin awaited it: pytest's outcome says why
            began = time.perf_counter_ns()
            pending.extra_metrics = stop_extra_collectors(pyfuncitem, pending.extra, pending.promoted)
            pending.extra_ns += time.perf_counter_ns() - began
            pending.raw = coll.stop()
            pending.raw.meta["extra_metrics"] = pending.extra_metrics
            pending.raw.meta["extra_collectors_ns"] = pending.extra_ns  # other plugins' part of the time outside
            if self.writer is not None:
                self.writer.resume()

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        rep = yield
        # A subtest's report (pytest 9's `subtests`) is made while the rounds still run: the test's own comes after.
        if call.when != "call" or (pending := self._pending.get(item.nodeid)) is None or pending.raw is None:
            return rep
        del self._pending[item.nodeid]
        if pending.skipped or (rep.skipped and not hasattr(rep, "wasxfail")):  # an xfail that raised: reported, partial
            return rep
        plan = self.plans[item.nodeid]
        explain_raised_round(rep, pending, plan.warmup, plan.rounds)  # a body that passed its first call: why it failed
        try:
            result = self._finish(item, pending)
        except Exception as exc:
            say(f"inferscope could not analyse {item.nodeid}: {exc}\n{traceback.format_exc()}", pending.promoted)
            fail_on_promoted(rep, pending.promoted)
            return rep
        from .reporters.junit import junit_properties

        props = junit_properties(result, self.report_dir)
        for held in (rep.user_properties, item.user_properties):  # a rerun's: this run's only, not the runs' before
            held[:] = [*(p for p in held if not str(p[0]).startswith("inferscope.")), *props]
        from .reporters.failure import failure_longrepr, failure_text

        if text := failure_text(result):  # failed, or an xfail-marked test's expected failure
            fail_on_thresholds(rep, item, call, text, failure_longrepr(text, rep.location))
        fail_on_promoted(rep, pending.promoted)
        return rep

    def _finish(self, item: pytest.Item, pending: Pending) -> TestResult:
        from .analyzer import DEFAULT_RULES
        from .postprocess import kept, process
        from .reporters.progress import slow_notice
        from .results import keep_last_run

        assert pending.raw is not None
        plan = self.plans[item.nodeid]
        rules = [*hook_lists(self.config, "pytest_inferscope_rules", item.nodeid, pending.promoted), *self.custom_rules]
        if self.report_dir is not None and self.writer is None:
            from .reporters.writer import ReportWriter

            self.writer = ReportWriter()
        environment = self.environment()
        if self._load_ns:  # done once for the tests: this one's (postprocess.added_time's load_ms)
            pending.raw.meta["load_ns"], self._load_ns = self._load_ns, 0
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        earlier = item.stash.get(EARLIER_RUNS, ())
        with slow_notice(terminal, item.nodeid, len(pending.raw.events)):  # a line on a tty after 1 s
            result, _ = process(
                pending.raw,
                plan,
                None,  # the collectors as the collection described them (raw.meta)
                outcome="failed" if pending.partial else "passed",
                partial_reason=pending.partial,
                gpu_required=self.settings.gpu == "required",
                report_dir=self.report_dir,
                environment=environment,
                rules=[*DEFAULT_RULES, *rules],
                whatifs=hook_lists(self.config, "pytest_inferscope_whatifs", item.nodeid, pending.promoted),
                comparison=self.baselines.comparison(item.nodeid),
                launch_gap_us=self.settings.launch_gap_us,
                ab=functools.partial(self.ab.finish, item.nodeid) if hasattr(self.ab, "finish") else None,
                writer=self.writer,
                trace_format=self.settings.trace_format,
                earlier_runs=earlier,
            )
        item.stash[EARLIER_RUNS] = (*result.earlier_runs, result.verdict)  # a rerun plugin runs the same item again
        result.report_dir = self.report_dir if result.files else None  # (its files' folder, for the fixture and hooks)
        self.baselines.note_environment_change(result)
        handle = self.fixtures.pop(item.nodeid, None)  # the test's fixture value holds it from here
        if handle is not None:
            handle.result = result
        pending.promoted += self._promoted
        self._promoted.clear()
        warn_rule_failures(item.nodeid, result.analysis.extension_errors, pending.promoted)
        tell_result(self.config, result, pending.promoted)  # a hook that raises is said; the result stands
        keep_last_run(self.results, kept(result, environment))
        return result

    def wait_for_reports(self, close: bool = False, pause: bool = False) -> None:
        """Wait until the report files handed to the writer are on disk (`pause`: until the writer writes nothing more
        before its `resume`, the files it has not written yet waiting until then; the wait counts as the last test's).

        A test whose files could not all be written keeps no file list in its result (index.json and index.html do not
        point to them) and gets a line in the summary, as a baseline that was not saved does (a warning here would be
        charged to the test about to run)."""
        if self.writer is None:
            return
        began = time.perf_counter_ns()
        errors = self.writer.close() if close else self.writer.pause() if pause else self.writer.wait()
        if pause and self.results:
            from .postprocess import add_time

            add_time(self.results[-1], "reports_ms", time.perf_counter_ns() - began)
        if close:
            self.writer = None
        for e in errors:
            for r in self.results:
                if r.nodeid == e.nodeid:
                    r.files = {}
            line = f"inferscope: the reports of {e.nodeid} could NOT be written ({e.path}): {e.error}"
            self.notes.append(line)
            log.warning(line)

    def fixture(self, request: pytest.FixtureRequest) -> InferscopeFixture:
        from .api import InferscopeFixture, requested_too_late

        node = request.node
        named = "inferscope" in getattr(node, "fixturenames", ())  # not when requested by getfixturevalue
        if isinstance(node, pytest.Function) and node.nodeid not in self.plans and not named:
            pytest.fail(requested_too_late(node.nodeid), pytrace=False)  # its scopes and result would do nothing
        handle = InferscopeFixture(node.nodeid, node.nodeid in self.plans)
        self.fixtures[node.nodeid] = handle
        return handle

    def _release(self, nodeid: str) -> None:
        """Stop profiling a test whose body profiles a block itself (`profile()`, `measure()`; no marker asked for the
        test's own profiling): no report of its own."""
        pending = self._pending.get(nodeid)
        if pending is not None:
            pending.skipped = True
            pending.collection.stop()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if hasattr(self.config, "workerinput"):
            return
        from .reporters.terminal import nothing_profiled_line

        nothing = (
            nothing_profiled_line(self.settings, terminalreporter) if not self.results and not self.plans else None
        )
        if nothing is not None:  # plans: a test that asked to be profiled was there
            terminalreporter.write_sep("=", "inferscope")
            for line in [*self.notes, nothing]:
                terminalreporter.write_line(line)
            return
        if not self.results and not self.notes:
            return
        from .regression import gate_blind_notes
        from .reporters.terminal import session_lines, write_terminal_summary

        saving = self.settings.save_baseline is not None
        blind = gate_blind_notes(self.results, alpha=self.settings.alpha, saving=saving)
        pinless = [line for line in (pin_ignored(self.settings.gpus),) if line]  # as the header (-q hides it)
        notes = [*self.header_lines()[:1], *pinless, *session_lines(self.results, self.report_dir is not None), *blind]
        from .ab.notes import recheck_notes

        notes += [*self.notes, *self.baselines.missing(self.results), *getattr(self.ab, "notes", [])]
        notes += recheck_notes(self.results)
        column = getattr(self.ab, "column", None)
        write_terminal_summary(terminalreporter, self.results, self.report_dir, notes, ab_column=column)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        log.setLevel(self._log_level)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self._sampler is not None:
            self._sampler.close()
        self.wait_for_reports(close=True)
        if hasattr(self.config, "workerinput"):  # an xdist worker: the controller writes the index
            self.config.workeroutput["inferscope_results"] = [r.to_wire() for r in self.results]  # type: ignore[attr-defined]
            return
        saved = self.settings.save_baseline is None or self.baselines.save(self.results, self.environment())
        if not saved and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # asked to save, and nothing was saved
        not_compared = getattr(self.ab, "baseline_note", None)  # an A/B run given --inferscope-compare
        if self.report_dir is not None and self.results:
            from .reporters.folder import environment_line, write_index

            info = {
                "collectors": self.header_lines()[0].removeprefix("inferscope: "),
                "environment": environment_line(self.environment(), self.results),
            }
            if not_compared is not None:
                info["vs baseline"] = not_compared
            write_index(self.results, self.report_dir, info)
        summary = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary and self.results:
            from .reporters.folder import append_step_summary

            append_step_summary(Path(summary), self.results, self.report_dir, not_compared)
