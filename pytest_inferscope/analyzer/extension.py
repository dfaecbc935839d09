"""Rules and what-ifs other code adds (the `pytest_inferscope_rules` and `pytest_inferscope_whatifs` hooks,
`.inferscope_rules.yaml`): run so that one that fails loses its own part and nothing else.

A built-in rule that raises is inferscope's bug and stops the analysis; an added rule that raises, or returns
something other than a list of `Finding`, is left out of this test's analysis and the sentence that says which and
why goes into `Analysis.extension_errors` (the session turns it into a warning; the analyzer never prints). An added
what-if whose transform raises, or returns something other than a graph or None, is left out of the what-if table
the same way (`whatif.simulate`); its sentence starts "the what-if".
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from typing import Any

from ..results import Finding
from .context import Context


def describe(fn: Any) -> str:
    """ "the rule 'name' (conftest.py:12)": a rule by its name and where it is defined (a rules file's: its line)."""
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    if source := getattr(fn, "source", ""):  # custom.make_rule's: ".inferscope_rules.yaml:3"
        return f"the custom rule {name!r} ({_short(source)})"
    return f"the rule {name!r}{_where(fn)}"


def describe_whatif(whatif: Any) -> str:
    """ "the what-if 'a cache' (conftest.py:12)": a what-if by its change and where its transform is defined."""
    change = getattr(whatif, "change", None)
    if change is None:  # not a WhatIf at all
        return f"the what-if {_cut(whatif)} (a {type(whatif).__name__}, not a WhatIf)"
    transform = getattr(whatif, "transform", None)
    return f"the what-if {change!r}{_where(getattr(transform, 'on_arrays', transform))}"  # ArrayTransform's function


def _where(fn: Any) -> str:
    """ " (conftest.py:12)": where a function is defined; "" for what has no code (a callable object)."""
    code = getattr(fn, "__code__", None)
    try:
        return f" ({_short(inspect.getsourcefile(fn) or code.co_filename)}:{code.co_firstlineno})" if code else ""
    except TypeError:
        return ""


def _short(path: str) -> str:
    """The file's name alone: the warning stays one readable line (the name and line find it)."""
    return path.rsplit("/", 1)[-1]


def _cut(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def run_added_rule(rule: Callable[[Context], Any], ctx: Context) -> tuple[list[Finding], str]:
    """The rule's findings and "" when it works; no findings and why not (a clause naming the rule) when it fails."""
    try:
        got = rule(ctx)
    except Exception as exc:
        return [], f"{describe(rule)} raised {type(exc).__name__}: {exc}"
    if not isinstance(got, list | tuple):
        return [], f"{describe(rule)} returned {_cut(got)} (a {type(got).__name__}), not a list of Finding"
    for item in got:
        if not isinstance(item, Finding):
            return [], (
                f"{describe(rule)} returned {_cut(got)}, whose item {_cut(item)} (a {type(item).__name__}) is not a "
                "Finding (pytest_inferscope.results.Finding)"
            )
    return list(got), ""


def run_rules(
    rules: Iterable[Callable[[Context], Any]], builtin: list[Callable[[Context], Any]], ctx: Context
) -> tuple[list[Finding], list[str]]:
    """Every rule's findings, and why each added one (not in `builtin`) that failed did (`run_added_rule`)."""
    findings: list[Finding] = []
    errors: list[str] = []
    for rule in rules:
        if rule in builtin:
            findings.extend(rule(ctx))
        else:  # another plugin's or the rules file's: one that fails loses its own findings only
            found, error = run_added_rule(rule, ctx)
            findings.extend(found)
            errors += [error] if error else []
    return findings, errors
