"""Custom rules from `.inferscope_rules.yaml`: conditions in a small, safe expression language.

An expression is tokenized and parsed (Pratt, in `expr.py`) into a tree and evaluated against
`ctx.metrics`; Python's eval/exec/compile/ast are never used. A metric that is not
collected (None, NaN) or a division by zero makes the value unknown, and a rule whose
condition is unknown does not fire. See docs/custom-rules.md.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..results import BOTTLENECKS, Finding, Suggestion
from .context import Context
from .expr import (
    _ALIAS_TREES,
    ALIASES,
    FUNCTIONS,
    CustomRuleError,
    Expression,
    ExpressionError,
    Metrics,
    Node,
    Token,
    _names,
    evaluate,
    fmt,
    parse_expression,
    tokenize,
)
from .metrics import compute_metrics

__all__ = [
    "ALIASES", "FUNCTIONS", "CustomRuleError", "Expression", "ExpressionError", "RuleSpec", "Token",
    "evaluate", "fmt", "format_suggestion", "load_rules", "load_specs", "make_rule", "metric_names",
    "parse_expression", "tokenize",
]  # fmt: skip

Rule = Callable[[Context], list[Finding]]


@functools.cache
def metric_names() -> tuple[str, ...]:
    """The names `metrics.compute_metrics` produces (those of an empty timeline: the keys never depend on the run)."""
    import numpy as np

    from ..events import EVENT_DTYPE
    from ..merger import Timeline

    return tuple(compute_metrics(Context(Timeline(np.zeros(0, EVENT_DTYPE), np.zeros(0, np.int32), []))))


RULE_KEYS = ("name", "condition", "suggestion", "title", "cause", "share", "confidence_weight", "saving_ms")
BASE_CONFIDENCE = 0.5
_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")
_PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_.]*)(?::([^{}]*))?\}")


# -- rules ---------------------------------------------------------------------------


@dataclass(frozen=True)
class RuleSpec:
    """One validated entry of `bottleneck_rules`."""

    name: str
    condition: Expression
    suggestion: str
    title: str = ""
    cause: str | None = None
    share: Expression | None = None
    confidence_weight: float = 1.0
    saving_ms: Expression | None = None
    source: str = ""  # "file:line", for messages


def format_suggestion(template: str, metrics: Metrics) -> str:
    """Fill `{metric}` / `{metric:.2f}` placeholders (dotted names and aliases) with their values."""

    def sub(m: re.Match[str]) -> str:
        v = evaluate(Node("var", 0, 0, name=m.group(1)), metrics)
        if v is None:
            return "n/a"
        return format(v, m.group(2)) if m.group(2) else fmt(v)

    return _PLACEHOLDER.sub(sub, template)


def make_rule(spec: RuleSpec) -> Rule:
    """The analyzer rule for a spec: one Finding with one Suggestion when the condition holds."""

    theirs = _collector_names(spec)

    def rule(ctx: Context) -> list[Finding]:
        m = ctx.metrics
        _check_collector_names(theirs, m)
        if not spec.condition.holds(m):
            return []
        used = list(dict.fromkeys([*spec.condition.names, *_alias_metrics(spec.condition)]))
        values = {name: evaluate(Node("var", 0, 0, name=name), m) for name in used}
        evidence: dict[str, Any] = {k: round(v, 6) if v is not None else "not collected" for k, v in values.items()}
        share = spec.share.evaluate(m) if spec.share is not None else 0.0
        saving = spec.saving_ms.evaluate(m) if spec.saving_ms is not None else 0.0
        held = spec.condition.describe(m)
        return [
            Finding(
                rule=spec.name,
                title=spec.title or spec.name.replace("_", " ").capitalize(),
                summary=f"Custom rule {spec.name}: {held}.",
                cause=spec.cause,
                share=min(1.0, max(0.0, share or 0.0)),
                share_measured=spec.share is not None,  # without `share:` its time is not said
                confidence=min(1.0, BASE_CONFIDENCE * spec.confidence_weight),
                evidence=evidence,
                suggestions=[
                    Suggestion(
                        action=format_suggestion(spec.suggestion, m),
                        rationale=f"custom rule {spec.name} ({spec.source}): {held}",
                        saving_ms=max(0.0, saving or 0.0),
                        rule=spec.name,
                    )
                ],
            )
        ]

    rule.__name__ = rule.__qualname__ = spec.name
    rule.source = spec.source  # type: ignore[attr-defined]  # where a failure at analysis time points (extension.py)
    return rule


def _collector_names(spec: RuleSpec) -> list[str]:
    """The names a rule reads that are not built-in metrics: a collector's (pytest_inferscope_collectors)."""
    exprs = [e for e in (spec.condition, spec.share, spec.saving_ms) if e is not None]
    names = [*(n for e in exprs for n in e.names), *(p.group(1) for p in _PLACEHOLDER.finditer(spec.suggestion))]
    return [n for n in dict.fromkeys(names) if n not in ALIASES and _namespace(n) not in _builtin_namespaces()]


def _check_collector_names(names: list[str], m: Metrics) -> None:
    """A name the collector of its prefix did not give, where that collector ran in this test: a typo the session could
    not catch when it loaded the file (a collector's metrics are known only once it ran). Said at analysis time."""
    for name in names:
        prefix = _namespace(name)
        gave = [k for k in m if _namespace(k) == prefix]
        if gave and name not in m:
            close = difflib.get_close_matches(name, gave, n=1, cutoff=0.5)
            hint = f" (the closest: {close[0]!r})" if close else ""
            raise CustomRuleError(
                f"it names {name!r}, not a metric of the collector {prefix!r}: the collector {prefix!r} gave "
                f"{', '.join(gave)} in this test{hint}"
            )


def _namespace(name: str) -> str:
    return name.split(".", 1)[0] if "." in name else ""


@functools.cache
def _builtin_namespaces() -> frozenset[str]:
    return frozenset(_namespace(n) for n in metric_names()) - {""}


def _alias_metrics(expr: Expression) -> list[str]:
    """The metrics behind the aliases an expression uses (for the evidence)."""
    return [n for name in expr.names if name in _ALIAS_TREES for n, _ in _names(_ALIAS_TREES[name])]


# -- loading -------------------------------------------------------------------------


def _at(path: Path, node: Any) -> str:
    return f"{path}:{node.start_mark.line + 1}"


def load_rules(path: Path, known_metrics: Collection[str] | None = None) -> list[Rule]:
    """Load and validate `path` (`bottleneck_rules:` list); one analyzer rule per entry.

    With `known_metrics`, names that are neither known metrics nor aliases are errors.
    Raises CustomRuleError naming the file, the line, the rule and, for expressions, the column.
    """
    return [make_rule(s) for s in load_specs(path, known_metrics)]


def load_specs(path: Path, known_metrics: Collection[str] | None = None) -> list[RuleSpec]:
    import yaml  # here: only projects with a rules file pay for it

    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise CustomRuleError(f"{path}: cannot read the custom rules file: {e}") from e
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise CustomRuleError(f"{where}: invalid YAML: {problem}") from e
    if root is None:
        return []
    if not isinstance(root, yaml.MappingNode):
        raise CustomRuleError(f"{_at(path, root)}: the file must be a mapping with a 'bottleneck_rules' list")
    specs: list[RuleSpec] = []
    for key, value in root.value:
        if key.value != "bottleneck_rules":
            raise CustomRuleError(
                f"{_at(path, key)}: unknown top-level key {key.value!r} (expected 'bottleneck_rules')"
            )
        if isinstance(value, yaml.ScalarNode) and value.tag.endswith(":null"):
            continue
        if not isinstance(value, yaml.SequenceNode):
            raise CustomRuleError(f"{_at(path, value)}: 'bottleneck_rules' must be a list of rules")
        for i, item in enumerate(value.value, 1):
            specs.append(_spec(path, i, item, known_metrics, {s.name: s.source for s in specs}))
    return specs


def _spec(path: Path, index: int, node: Any, known: Collection[str] | None, seen: dict[str, str]) -> RuleSpec:
    import yaml

    if not isinstance(node, yaml.MappingNode):
        raise CustomRuleError(f"{_at(path, node)}: rule #{index} must be a mapping with name, condition, suggestion")
    loader = yaml.SafeLoader("")
    raw: dict[str, tuple[Any, Any]] = {}  # key -> (value, value node)
    name_node = next((v for k, v in node.value if k.value == "name"), None)
    label = f"rule #{index}"
    if name_node is not None and isinstance(name_node, yaml.ScalarNode):
        label = f"rule {name_node.value!r}"
    for k, v in node.value:
        if k.value not in RULE_KEYS:
            close = difflib.get_close_matches(str(k.value), RULE_KEYS, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else f" (allowed: {', '.join(RULE_KEYS)})"
            raise CustomRuleError(f"{_at(path, k)}: {label}: unknown key {k.value!r}{hint}")
        if k.value in raw:
            raise CustomRuleError(f"{_at(path, k)}: {label}: key {k.value!r} is given twice")
        raw[k.value] = (loader.construct_object(v, deep=True), v)

    def err(key: str | None, message: str) -> CustomRuleError:
        where = _at(path, raw[key][1]) if key in raw else _at(path, node)
        return CustomRuleError(f"{where}: {label}{f' ({key})' if key else ''}: {message}")

    for key in ("name", "condition", "suggestion"):
        if key not in raw:
            raise err(None, f"missing required key {key!r}")
    name = raw["name"][0]
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise err("name", "the name must be an identifier (letters, digits, '_', '-'; not starting with a digit)")
    if name in seen:
        raise err("name", f"duplicate rule name (first defined at {seen[name]})")
    from . import DEFAULT_RULES

    if name in {r.__name__ for r in DEFAULT_RULES}:
        raise err("name", "the name is a built-in rule's; choose another")

    def expression(key: str) -> Expression | None:
        if key not in raw:
            return None
        value = raw[key][0]
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            raise err(key, "must be an expression (a string or a number)")
        try:
            expr = parse_expression(str(value))
        except ExpressionError as e:
            raise err(key, str(e)) from None
        for metric, pos in _names(expr.tree):
            problem = _unknown(metric, known)
            if problem:
                raise err(key, str(ExpressionError(problem, expr.text, pos)))
        return expr

    condition = expression("condition")
    share, saving = expression("share"), expression("saving_ms")
    suggestion = raw["suggestion"][0]
    if not isinstance(suggestion, str) or not suggestion.strip():
        raise err("suggestion", "must be a non-empty string")
    for p in _PLACEHOLDER.finditer(suggestion):
        problem = _unknown(p.group(1), known)
        if problem:
            raise err("suggestion", f"placeholder {p.group(0)}: {problem}")
        try:
            format(1.0, p.group(2) or "")
        except ValueError as e:
            raise err("suggestion", f"bad format {p.group(2)!r} in placeholder {p.group(0)}: {e}") from None
    title = raw.get("title", ("", None))[0]
    if not isinstance(title, str):
        raise err("title", "must be a string")
    cause = raw.get("cause", (None, None))[0]
    if cause is not None and cause not in BOTTLENECKS:
        raise err("cause", f"{cause!r} is not a bottleneck class; use one of {', '.join(BOTTLENECKS)}, or omit it")
    weight = raw.get("confidence_weight", (1.0, None))[0]
    if isinstance(weight, bool) or not isinstance(weight, int | float) or not 0 < weight <= 2:
        raise err("confidence_weight", f"must be a number in (0, 2], got {weight!r}")
    assert condition is not None
    return RuleSpec(name, condition, suggestion, title, cause, share, float(weight), saving, _at(path, node))


def _unknown(name: str, known: Collection[str] | None) -> str:
    """Why `name` is not a usable metric name ("" when it is, or when nothing is known to check against)."""
    if known is None or name in known or name in ALIASES:
        return ""
    if _namespace(name) and _namespace(name) not in {_namespace(k) for k in known}:
        return ""  # a collector's (pytest_inferscope_collectors): known once it ran (_check_collector_names)
    close = difflib.get_close_matches(name, [*known, *ALIASES], n=1, cutoff=0.5)
    return f"unknown metric {name!r}" + (f"; did you mean {close[0]!r}?" if close else "; see docs/custom-rules.md")
