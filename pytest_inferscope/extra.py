"""What other plugins add through the `pytest_inferscope_*` hooks, called so that a broken one never breaks a test.

A collector that fails to start is left out, one that fails to stop loses its metrics; a collectors or machine-info
hook that raises (or returns the wrong type) adds nothing; a rule that fails loses its findings (analyzer/extension.py).
Each is said as an `InferscopeWarning` naming the extension, where it is defined, and what it did; the test's own
outcome (its body, its thresholds) stands. Where the user's filters make that warning an error (`-W error`,
`filterwarnings = error`), it is kept in `promoted` instead of raised mid-collection or into pytest's report hook (where
it stopped the session with INTERNALERROR): the test fails on it once analysed and reported (`say`).
"""

from __future__ import annotations

import traceback
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from .warning import InferscopeWarning

#: Custom analyzer rules, read from the rootdir (docs/custom-rules.md).
CUSTOM_RULES_FILE = ".inferscope_rules.yaml"


def custom_rules(rootpath: Path) -> list[Any]:
    """The rules of the rootdir's .inferscope_rules.yaml, checked at the session's start (a bad file stops the run:
    unlike a hook's rule that fails on a test, it is the user's own file, and every test would lose its rules)."""
    path = rootpath / CUSTOM_RULES_FILE
    if not path.is_file():
        return []
    from .analyzer.custom import CustomRuleError, load_rules, metric_names

    try:
        return load_rules(path, known_metrics=metric_names())
    except CustomRuleError as exc:
        raise pytest.UsageError(str(exc)) from exc


def say(message: str, promoted: list[str]) -> None:
    """Warn; where the filters make the warning an error, keep the message in `promoted` for the test's report."""
    try:
        warnings.warn(InferscopeWarning(message), stacklevel=2)
    except InferscopeWarning:
        promoted.append(message)


def start_extra_collectors(config: pytest.Config, item: pytest.Item, promoted: list[str]) -> list[Any]:
    """Start the collectors other plugins add (pytest_inferscope_collectors); one that fails is left out."""
    started = []
    try:
        lists = config.hook.pytest_inferscope_collectors(config=config, item=item)
    except Exception as exc:  # the hook itself: no collector of any implementation is known
        _warn_hook(
            "pytest_inferscope_collectors",
            exc,
            f"no collector it returns runs for {item.nodeid}, which goes on without them",
            promoted,
        )
        return []
    for extra in lists:
        for c in extra or ():
            try:
                c.start()
                started.append(c)
            except Exception as exc:  # a third party's collector never breaks the test
                _warn_collector(c, item, "start", exc, promoted)
    return started


def stop_extra_collectors(item: pytest.Item, collectors: list[Any], promoted: list[str]) -> dict[str, float | None]:
    """Stop them; their metrics, named `<collector>.<key>`."""
    metrics: dict[str, float | None] = {}
    for c in collectors:
        try:
            for key, value in dict(c.stop()).items():
                metrics[f"{c.name}.{key}"] = None if value is None else float(value)
        except Exception as exc:
            _warn_collector(c, item, "stop", exc, promoted)
    return metrics


def machine_info(config: pytest.Config, promoted: list[str]) -> dict[str, Any]:
    """The facts of every pytest_inferscope_machine_info implementation; a failing hook's are left out, said once
    (the environment is read once a session)."""
    try:
        facts = config.hook.pytest_inferscope_machine_info(config=config)
    except Exception as exc:
        _warn_hook(
            "pytest_inferscope_machine_info",
            exc,
            "its facts are left out of the environment recorded with every result (and the baseline "
            "fingerprint); the tests go on without them",
            promoted,
        )
        return {}
    env: dict[str, Any] = {}
    for extra in facts:
        if extra is not None and not isinstance(extra, Mapping):
            why = f"returned {extra!r:.80} (a {type(extra).__name__}), not a dict of facts; it is left out of the"
            _warn_hook(
                "pytest_inferscope_machine_info",
                None,
                f"{why} environment recorded with every result; the tests go on without it",
                promoted,
            )
            continue
        env.update(extra or {})
    return env


def hook_lists(config: pytest.Config, hook: str, nodeid: str, promoted: list[str]) -> list[Any]:
    """The items of every implementation's list of a hook returning lists (pytest_inferscope_rules, _whatifs); none
    where an implementation raises, said (pluggy stops at the first that raises, so no other's list is known)."""
    try:
        return [x for extra in getattr(config.hook, hook)(config=config) for x in extra or ()]
    except Exception as exc:
        what = "rule" if hook.endswith("rules") else "what-if"
        _warn_hook(hook, exc, f"no {what} it returns runs for {nodeid}, which is analysed without them", promoted)
        return []


def tell_result(config: pytest.Config, result: Any, promoted: list[str]) -> None:
    """pytest_inferscope_result; an implementation that raises is said, and the result, its verdict and its place in
    the index and the summary stand (pluggy stops at the first that raises: the ones after it are not called)."""
    try:
        config.hook.pytest_inferscope_result(config=config, result=result)
    except Exception as exc:
        consequence = f"the result of {result.nodeid}, its verdict and its reports stand"
        _warn_hook("pytest_inferscope_result", exc, consequence, promoted)


def warn_rule_failures(nodeid: str, errors: list[str], promoted: list[str]) -> None:
    """One warning per rule or what-if that failed in this test's analysis (Analysis.extension_errors)."""
    for error in errors:
        if error.startswith("the what-if "):  # analyzer/extension.describe_whatif's
            say(
                f"inferscope: {error}; its row is left out of {nodeid}'s what-if table, which went on without it "
                "(the test's outcome and thresholds are unaffected). Fix its transform, or remove it from "
                "pytest_inferscope_whatifs (docs/custom-rules.md).",
                promoted,
            )
            continue
        say(
            f"inferscope: {error}; its findings are left out of {nodeid}'s analysis, which went on without "
            "them (the test's outcome and thresholds are unaffected). Fix the rule, or remove it from "
            "pytest_inferscope_rules or .inferscope_rules.yaml (docs/custom-rules.md).",
            promoted,
        )


def _warn_collector(c: Any, item: pytest.Item, when: str, exc: Exception, promoted: list[str]) -> None:
    name = getattr(c, "name", type(c).__name__)
    say(
        f"inferscope: the collector {name!r} (from pytest_inferscope_collectors) failed to {when} for "
        f"{item.nodeid}: {type(exc).__name__}: {exc}; its metrics are left out of this test's analysis.",
        promoted,
    )


def _ours(filename: str) -> bool:
    return filename == __file__ or "/pluggy/" in filename


def _warn_hook(hook: str, exc: Exception | None, consequence: str, promoted: list[str]) -> None:
    """'the <hook> hook (conftest.py:7) raised RuntimeError: ...': where the innermost frame of the exception is."""
    where = ""
    if exc is not None:  # the implementation's own frame: the first past pluggy's and this module's
        theirs = [f for f in traceback.extract_tb(exc.__traceback__) if not _ours(f.filename)]
        where = f" ({theirs[0].filename.rsplit('/', 1)[-1]}:{theirs[0].lineno})" if theirs else ""
    what = f"raised {type(exc).__name__}: {exc}; " if exc is not None else ""
    say(f"inferscope: the {hook} hook{where} {what}{consequence}.", promoted)
