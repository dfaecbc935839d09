"""This side of an A/B run: prepares the other side (worktree, interpreter, twin), runs each profiled test's
rounds in lockstep with the twin, and turns the pairs into an `ABVerdict` for the test's result.

Registered as a plugin by the session when --inferscope-ab or --inferscope-ab-python is given. Under
xdist the controller only checks the input, makes the worktree and picks the cores; each worker
starts its own twin, pinned with it to the worker's core.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import pytest

from ..units import fmt_count
from .args import not_at_ref, plugin_on, twin_args, twin_env
from .baselines import not_compared
from .layout import layout_note
from .notes import PAIRED_HERE, hashseed_note, not_a_twin, nothing_paired, settings_notes, start_note
from .partner import PAIRS_TWINS, Partner
from .recheck import RECHECKED, FreshPair, combine
from .renames import Renames
from .signals import CleanupOnSignals
from .twin import pinned, quiet_heap
from .twin_process import READY_TIMEOUT_S, Twin, TwinDied, new_log, remove_stale_logs
from .worktree import ABInputError, Worktree, check_python, not_in_git, short_ref

if TYPE_CHECKING:
    from ..checks import Plan
    from ..collectors import Collection
    from ..options import Settings
    from ..results import TestResult


class ABController:
    """The A/B gate of one pytest process (or xdist worker, or the xdist controller)."""

    def __init__(self, config: pytest.Config, settings: Settings, plans: Mapping[str, Plan]) -> None:
        self.config = config
        self.settings = settings
        self.plans = plans
        self.tree: Worktree | None = None
        self.owns_tree = False
        self.twin: Twin | None = None
        self.fresh: FreshPair | None = None  # the re-check's two processes (recheck.py), started when first needed
        self.partner: Partner | None = None  # with --inferscope-ab-pairs=twins, this checkout's twin (partner.py)
        self.twin_plans: set[str] = set()
        self.only_here: list[str] = []  # test files and folders named on the command line that the ref does not have
        self.renames: Renames | None = None  # files git finds moved since the ref (read when needed: `_moved`)
        self.ref_args: list[str] = []  # the ref's names of the files named (or in folders named) that moved since
        self.core: int | None = None
        self.pending: dict[str, dict[str, Any]] = {}
        self.nextitem: pytest.Item | None = None  # the test pytest runs after the one running here
        self.tests_run = 0
        self.notes: list[str] = []
        self.failure = ""  # an xdist worker's A/B usage error, raised at the end of its collection
        self.signals = CleanupOnSignals(self.cleanup)
        self.workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        n = config.getoption("numprocesses", None) if self.workerinput is None else None
        self.workers = n if isinstance(n, int) and n > 0 else 0  # xdist controller: how many workers

    # -- what the other side is -------------------------------------------------------

    @property
    def label(self) -> str:
        parts = []
        if self.tree is not None:
            parts.append(self.tree.label())
        elif self.settings.ab is not None:
            parts.append(self.settings.ab)
        if self.settings.ab_python is not None:
            parts.append(f"python {self.settings.ab_python}")
        return " with ".join(parts) or "the other side"

    @property
    def baseline_note(self) -> str | None:
        """Why the tests are not compared with --inferscope-compare's baseline (None without it): the A/B gates them."""
        return not_compared(self.settings, self.label)

    @property
    def column(self) -> str:
        """The terminal summary column's title."""
        return f"vs {short_ref(self.settings.ab or '') or 'python ' + Path(str(self.settings.ab_python)).name}"

    def _allowed_cores(self) -> list[int]:
        return sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else list(range(os.cpu_count() or 1))

    # -- session ----------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        try:
            self._prepare()
        except ABInputError as exc:
            if self.workerinput is None:
                self.cleanup()
                raise pytest.UsageError(str(exc)) from exc
            self.failure = str(exc)  # said at the end of collection, where xdist passes it on (_fail)

    def _fail(self, message: str) -> NoReturn:
        """Stop the session with a usage error. In an xdist worker the message also goes to the controller in
        `workeroutput` (a worker's usage error alone reaches it as "no active workers"), which raises it there."""
        self.cleanup()
        if self.workerinput is not None:
            self.config.workeroutput["inferscope_ab_error"] = message  # type: ignore[attr-defined]
        raise pytest.UsageError(message)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        """xdist controller: a worker's A/B usage error, as this session's own (exit status 4, the same message)."""
        message = getattr(node, "workeroutput", {}).get("inferscope_ab_error")
        if message:
            self.cleanup()
            raise pytest.UsageError(message)

    def _prepare(self) -> None:
        self.signals.install()  # restored by cleanup
        cores = self._allowed_cores()
        if self.workers > len(cores):
            raise ABInputError(
                f"--inferscope-ab with -n {self.workers}: each xdist worker and its twin need a CPU core of their "
                f"own, and this session may use {len(cores)} ({', '.join(map(str, cores))}). Use -n {len(cores)} "
                "or fewer."
            )
        wi = self.workerinput or {}
        if "inferscope_ab_tree" in wi:
            t = wi["inferscope_ab_tree"]
            self.tree = Worktree(Path(t["top"]), t["ref"], t["commit"], Path(t["path"]), Path(t["holder"]),
                                 Path(t["git_dir"]))  # fmt: skip
        elif self.settings.ab is not None:
            self.tree = Worktree.create(self.config.invocation_params.dir, self.settings.ab)
            self.owns_tree = True
        if self.tree is not None and not self._twin_cwd().is_dir():
            here = self.config.invocation_params.dir
            raise ABInputError(
                f"--inferscope-ab={self.tree.ref}: pytest runs in {here}, and that folder "
                f"({here.resolve().relative_to(self.tree.top)}) does not exist at {self.tree.label()}, so the twin "
                "cannot run there. Run pytest from a folder that exists on both sides (the repository's top, say)."
            )
        if not wi:
            remove_stale_logs()  # of runs killed outright (the worktrees of those: Worktree.create)
        self._leave_out_only_here()
        if self.settings.ab_python is not None and not wi:
            check_python(self._python(), twin_env(self.config, self.tree), self._twin_cwd())
        if self.workers:
            gpus = self.settings.gpus
            on_gpus = f" and GPU ({[gpus[i % len(gpus)] for i in range(self.workers)]})" if gpus else ""
            self.notes.append(
                f"inferscope A/B: this checkout against {self.label}; each of the {self.workers} xdist workers "
                f"takes turns with its own twin{PAIRS_TWINS * (self.settings.ab_pairs == 'twins')}, pinned to its own "
                f"CPU core (cores {cores[: self.workers]}){on_gpus}"
            )
            self.notes += [
                *settings_notes(self.tree, self.settings, self.baseline_note),
                layout_note(self.config, self.settings),
                *hashseed_note(twins=self.settings.ab_pairs == "twins", workers=self.workers),
            ]
            return
        worker = int(str(wi["workerid"]).removeprefix("gw")) if wi else None
        self.core = cores[worker % len(cores)] if worker is not None else cores[-1]
        if self.only_here and len(self.only_here) == len(self.config.args) and not self.ref_args:
            return  # every path named is only here: no twin (given none, it would run the whole suite at the ref)
        try:
            self.twin = self._new_twin()
            if self.settings.ab_pairs == "twins":
                self.partner = Partner(self._new_twin("here", "pair"))
        except OSError as exc:
            raise ABInputError(f"--inferscope-ab: the twin pytest process could not be started ({exc}).") from exc
        if not wi:
            self.notes += [
                start_note(self.label, self.core, cores, twins=self.partner is not None),
                *settings_notes(self.tree, self.settings, self.baseline_note),
                layout_note(self.config, self.settings),
                *hashseed_note(twins=self.partner is not None),
            ]

    def _new_twin(self, side: str = "", tag: str = "") -> Twin:
        """A twin process: the other side's ("", or "there" for the fresh pair of the re-check: recheck.py), or this
        checkout's ("here": in the folder pytest runs in, with this interpreter and every argument given); `tag` names
        its log (default: `side`)."""
        here = side == "here"
        tree = None if here else self.tree
        args = self._args() if here else [a for a in self._args() if a not in self.only_here] + self.ref_args
        argv = [str(sys.executable if here else self._python()), "-m", "pytest", *twin_args(args, tree),
                "-p", "no:xdist", "-p", "no:cacheprovider", *plugin_on(self.config)]  # fmt: skip
        # In the worktree's folder, removed with it, by a later run too (remove_stale); else in TMPDIR, named by this
        # process, and removed by a later run too (remove_stale_logs).
        tag = tag or side
        name = f"twin-{(self.workerinput or {}).get('workerid', 'main')}{'-' * bool(tag)}{tag}.log"
        log = self.tree.holder / name if self.tree is not None else new_log()
        cwd = self.config.invocation_params.dir if here else self._twin_cwd()
        try:
            return Twin(argv, cwd, twin_env(self.config, tree), log, "this checkout" if here else self.label)
        except OSError:
            with contextlib.suppress(OSError):
                log.unlink()
            raise

    def _leave_out_only_here(self) -> None:
        """The test files and folders named on the command line that the ref does not have: left out of the twin's
        command line (their tests are `new`), and said to be."""
        if self.config.args_source != pytest.Config.ArgsSource.ARGS or self.tree is None:
            return
        here = self.config.invocation_params.dir
        self.only_here = not_at_ref(self.config.args, here, self.tree)
        self.ref_args = self._moved().twin_args(self.config.args, here)
        alone = [a for a in self.only_here if not self._moved().twin_args([a], here)]  # (not moved: said below)
        if alone and not self.workerinput:
            names = ", ".join(alone)
            self.notes.append(
                f"inferscope A/B: {names}: not at {self.label} (new here, or deleted there), so left out of the twin's "
                "command line; their tests are new"
            )

    def _python(self) -> Path:
        return self.settings.ab_python if self.settings.ab_python is not None else Path(sys.executable)

    def _args(self) -> list[str]:
        wi = self.workerinput or {}
        return list(wi.get("inferscope_ab_args", self.config.invocation_params.args))

    def _twin_cwd(self) -> Path:
        here = self.config.invocation_params.dir
        return self.tree.map_path(here) if self.tree is not None else here

    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """Not the worktree: with TMPDIR inside the project, this side would collect it too ("import file mismatch")."""
        if self.tree is not None and collection_path.is_relative_to(self.tree.holder):
            return True
        return None  # (False would make pytest collect what other plugins or the ini ignore)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist controller: the workers share its worktree and the command line it was given."""
        if self.tree is not None:
            t = self.tree
            node.workerinput["inferscope_ab_tree"] = {
                "top": str(t.top), "ref": t.ref, "commit": t.commit, "path": str(t.path), "holder": str(t.holder),
                "git_dir": str(t.git_dir),
            }  # fmt: skip
        node.workerinput["inferscope_ab_args"] = list(self.config.invocation_params.args)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.failure:
            self._fail(self.failure)
        if self.twin is None:
            return
        try:
            ready = self.twin.recv(READY_TIMEOUT_S)
        except TwinDied as exc:
            self._fail(not_a_twin(exc, self.twin, self.tree, self.settings, self.label, self._python()))
        if ready.get("usage"):
            said = str(ready["usage"]).replace(f"{self._twin_cwd()}{os.sep}", "")  # as named here, not in the worktree
            self._fail(
                f"--inferscope-ab: the twin's pytest at {self.label} refused the tests named on the command line: "
                f"{said}. Name test files or folders that exist on both sides (those only here are left out of the "
                "twin's command line, and their tests are `new`), or leave that argument out."
            )
        if errors := ready.get("errors"):
            why = " ".join(not_in_git(self.tree, errors) if self.tree is not None else [])
            fix = why or "Fix the collection errors there (or choose another ref) before comparing against it."
            self._fail(f"--inferscope-ab: the tests do not collect at {self.label}: {'; '.join(errors)}. {fix}")
        self.twin_plans = set(ready.get("nodeids", []))
        if self.partner is not None and (why := self.partner.ready()):
            self._fail(why)
        self._note_foreign(ready.get("foreign") or [])
        self._note_twin_warned(ready.get("warned") or [])
        moved = [n for n in self.plans if n not in self.twin_plans and self._ref_id(n) is not None]
        self.notes += [n for n in self._moved().said(moved, self.config.rootpath, self.label) if n not in self.notes]
        removed = sorted(self.twin_plans - {self._ref_id(n) for n in self.plans})
        if removed:  # under xdist every worker finds the same: the controller keeps one copy (xdist.py)
            self.notes.append(
                f"inferscope A/B: {fmt_count(len(removed), 'profiled test')} only at {self.label} (removed or renamed "
                "here): " + ", ".join(removed[:10]) + (" ..." if len(removed) > 10 else "")
            )
        if self.tree is not None and not any(self._ref_id(n) is not None for n in self.plans):  # (docs/ab.md)
            here = self.config.invocation_params.dir
            unpaired = nothing_paired(sorted(self.plans), self.config.rootpath, here, self.tree, self.label)
            self.notes += [unpaired] if unpaired and unpaired not in self.notes else []

    def _note_foreign(self, foreign: list[str]) -> None:
        if foreign and self.tree is not None and not any("cannot replace" in n for n in self.notes):
            self.notes.append(
                f"inferscope A/B: the twin imported {', '.join(foreign)}: an installed, non-editable package that "
                f"the worktree of {self.tree.ref} cannot replace, so only the test files differ between the sides. "
                "Install the project in editable mode (pip install -e .) or compare environments with "
                "--inferscope-ab-python."
            )

    def _note_twin_warned(self, warned: list[str]) -> None:
        """The twin's InferscopeWarnings, each once: its output is a log removed with the session, so the summary is
        the only place they are seen (an extension that fails at the ref only, say)."""
        for text in warned:
            note = f"inferscope A/B: the twin at {self.label} warned: {str(text).removeprefix('inferscope: ')}"
            if note not in self.notes:
                self.notes.append(note)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: pytest.Item | None) -> None:
        """Which test comes next here: the twin keeps the fixtures the two tests share (`TwinServer._run`)."""
        self.nextitem = nextitem

    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.twin is not None and exitstatus != pytest.ExitCode.INTERRUPTED:  # its session end's warnings
            self._note_twin_warned(self.twin.finish())
            self._note_twin_warned(self.partner.twin.finish() if self.partner is not None else [])
            self._note_twin_warned(self.fresh.finish() if self.fresh is not None else [])
        if self.workerinput is not None:
            session.config.workeroutput["inferscope_ab_notes"] = self.notes  # type: ignore[attr-defined]

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.cleanup()

    def cleanup(self) -> None:
        """End every twin (the partner, the fresh pair) and remove the worktree this process made; idempotent."""
        deadline = time.monotonic() + 3.0  # one for every twin: a twin inside a test body is killed then
        partner = self.partner.twin if self.partner is not None else None
        for twin in [self.twin, partner, *(self.fresh.twins if self.fresh is not None else [])]:
            if twin is not None:
                twin.ask_exit()  # every one asked before any is waited for
        for twin in (self.twin, partner):
            if twin is not None:
                twin.close(deadline)
                with contextlib.suppress(OSError):
                    twin.log.unlink()
        if self.fresh is not None:
            self.fresh.close(deadline)
        if self.tree is not None and self.owns_tree:
            self.tree.remove()
            self.owns_tree = False
        self.signals.restore()

    # -- one test -----------------------------------------------------------------------

    def run_test(self, nodeid: str, coll: Collection, body: Callable[[], Any], plan: Plan) -> Any:
        """The test's rounds, in lockstep with the twin when it has the test; returns the body's last result."""
        data = self._begin(nodeid)
        if data["state"] != "paired":
            return coll.run_rounds(body, plan.rounds, plan.warmup)
        from .lockstep import lockstep

        with pinned(self.core), quiet_heap():
            partner = self._partner(data)
            return lockstep(self._twin(), coll, body, plan, data, partner=partner, **self._turns(plan, data))

    async def run_test_async(
        self, nodeid: str, coll: Collection, body: Callable[[], Awaitable[Any]], plan: Plan
    ) -> Any:
        """`run_test` for an `async def` test, awaited in the event loop that awaits the test (lockstep_async)."""
        data = self._begin(nodeid)
        if data["state"] != "paired":
            return await coll.run_rounds_async(body, plan.rounds, plan.warmup)
        from .lockstep import lockstep_async

        with pinned(self.core), quiet_heap():
            return await lockstep_async(self._twin(), coll, body, plan, data, partner=self._partner(data),
                                        **self._turns(plan, data))  # fmt: skip

    def _begin(self, nodeid: str) -> dict[str, Any]:
        """The test's A/B record; its state stays "paired" when the twin has the test and started it."""
        data: dict[str, Any] = {"state": "paired", "new_ms": [], "ref_ms": [], "look": None, "metrics": {}}
        self.pending[nodeid] = data
        twin = self.twin
        if twin is None and self.only_here:  # every path named is only here (_prepare)
            data["state"] = "new"
            return data
        if twin is None or twin.dead:
            data["state"], data["reason"] = "dead", (twin.dead if twin is not None else "no twin ran")
            return data
        if (ref_id := self._ref_id(nodeid)) is None:
            data["state"] = "new"
            return data
        try:
            twin.send(cmd="run", nodeid=ref_id, core=self.core, next=self._next_ref_id())
            msg = twin.recv()
        except TwinDied as exc:
            data["state"], data["reason"] = "dead", str(exc)
            return data
        if msg.get("type") == "result":
            data["warned"] = msg.get("warned") or []
            if msg.get("skipped") and not msg.get("error"):
                data["state"], data["error"] = "twin_skipped", msg["skipped"]
            else:
                data["state"], data["error"] = "twin_failed", msg.get("error") or "not run there"
        elif self.partner is not None:
            after = self.nextitem.nodeid if self.nextitem is not None else None
            why = self.partner.begin(nodeid, after, self.core)
            data["between"] = "here" if why else "twins"  # (where it cannot run the test, this process takes the turns)
            data["notes"] = [f"{why}: {PAIRED_HERE}"] if why else []
        return data

    def _moved(self) -> Renames:
        """The files git finds renamed or moved since the ref (none without a ref), read once."""
        if self.renames is None:
            self.renames = Renames.find(self.tree) if self.tree is not None else Renames(Path.cwd())
        return self.renames

    def _ref_id(self, nodeid: str) -> str | None:
        """The twin's node id of this side's test (moved since the ref: its old name's), or None when it has none."""
        if nodeid in self.twin_plans or self.tree is None:
            return nodeid if nodeid in self.twin_plans else None
        return self._moved().ref_id(nodeid, self.config.rootpath, self.twin_plans)

    def _next_ref_id(self) -> str | None:
        """The twin's node id of the test pytest runs next here: its name at the ref where it is profiled there under
        another (moved since), else its id here (a test not profiled, whose fixtures the twin may share)."""
        if self.nextitem is None:
            return None
        return self._ref_id(self.nextitem.nodeid) or self.nextitem.nodeid

    def _twin(self) -> Twin:
        assert self.twin is not None  # _begin said "paired"
        return self.twin

    def _partner(self, data: dict[str, Any]) -> Twin | None:
        """The partner, where it started the test (`_begin`)."""
        return self.partner.twin if self.partner is not None and data.get("between") == "twins" else None

    def _turns(self, plan: Plan, data: dict[str, Any]) -> dict[str, Any]:
        """The lockstep's judging settings, and which side starts: it alternates from test to test. Kept in the test's
        `data` with its plan, for a re-check (`_recheck`)."""
        self.tests_run += 1
        max_regression = float(plan.thresholds.get("max_regression", self.settings.max_regression))
        data["plan"], data["turns"] = plan, {
            "max_regression": max_regression, "alpha": self.settings.alpha, "here_first": self.tests_run % 2 == 1,
        }  # fmt: skip
        return dict(data["turns"])

    def _recheck(self, nodeid: str, data: dict[str, Any]) -> dict[str, Any]:
        """A latency regressed (or, asked, improved) in the first pairs, checked by the fresh pair (recheck.py):
        `data`'s look and pairs replaced by what stands after it; what report.json keeps of it."""
        if self.fresh is None:
            self.fresh = FreshPair(self._new_twin)
        ref_id = self._ref_id(nodeid)
        assert ref_id is not None  # paired
        after = self.nextitem.nodeid if self.nextitem is not None else None
        check = self.fresh.run((nodeid, ref_id), (after, self._next_ref_id()), self.core, data["plan"],
                               **data["turns"])  # fmt: skip
        look, data["new_ms"], data["ref_ms"], record = combine(data["look"], data["new_ms"], data["ref_ms"], check,
                                                               twins=data.get("between") == "twins")  # fmt: skip
        data["look"] = look
        return record

    def finish(self, nodeid: str, result: TestResult) -> dict[str, Any] | None:
        """The test's ABVerdict as plain data (None when it ran no A/B), its deterministic metrics compared; a latency
        the first pairs read changed (regressed, or improved: --inferscope-ab-recheck) re-checked first (`_recheck`)."""
        data = self.pending.pop(nodeid, None)
        if data is None:
            return None
        from .paired import verdict_of

        self._note_foreign(data.get("foreign") or [])
        self._note_twin_warned(data.get("warned") or [])
        look = data["look"]
        if data["state"] == "paired" and look is not None and look.verdict in RECHECKED[self.settings.ab_recheck]:
            data["recheck"] = self._recheck(nodeid, data)
        verdict = verdict_of(nodeid, self.label, data, result.analysis.metrics)
        verdict.core = self.core
        verdict.not_compared = self.baseline_note or ""
        return verdict.to_dict()
