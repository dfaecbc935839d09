"""The expression language of custom rules: tokenizer, Pratt parser and evaluator over named metrics.

Python's eval/exec/compile/ast are never used. A metric that is not collected (None, NaN) or a
division by zero makes the value unknown (None). See docs/custom-rules.md; `custom.py` loads
the rules that use it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

Metrics = Mapping[str, float | None]

#: Friendly names, each an expression over metrics (times in ms per round).
ALIASES: dict[str, str] = {
    "total_time": "latency_ms.median",
    "h2d_time": "gpu.transfer_fraction * latency_ms.median",
    "transfer_time": "gpu.transfer_fraction * latency_ms.median",
    "gpu_time": "gpu.compute_fraction * latency_ms.median",
    "cpu_time": "cpu.test_thread_working * latency_ms.median",
    "sync_time": "host.sync_fraction * latency_ms.median",
}

FUNCTIONS = ("min", "max", "abs")


class CustomRuleError(ValueError):
    """A rules file that cannot be used: the message names the file, line, rule and, for expressions, the column."""


class ExpressionError(CustomRuleError):
    """A bad expression; `pos` is the 0-based offset in `text` where the problem is."""

    def __init__(self, message: str, text: str, pos: int) -> None:
        self.message, self.text, self.pos = message, text, pos
        super().__init__(f"{message} at column {pos + 1}:\n    {text}\n    {' ' * pos}^")


# -- tokens --------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<num>(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?%?)|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)"
    r"|(?P<op><=|>=|==|!=|[<>+\-*/(),]))"
)
_KEYWORDS = ("and", "or", "not")


@dataclass(frozen=True)
class Token:
    kind: str  # "num" | "name" | "op" | "end"; keywords are ops
    text: str
    pos: int
    value: float = 0.0


def tokenize(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos >= len(text):
            out.append(Token("end", "", pos))
            return out
        m = _TOKEN.match(text, pos)
        if m is None or not m.lastgroup:
            raise ExpressionError(f"unexpected character {text[pos]!r}", text, pos)
        kind, tok, start = m.lastgroup, m.group(m.lastgroup), m.start(m.lastgroup)
        if kind == "num":
            value = float(tok.rstrip("%")) / (100.0 if tok.endswith("%") else 1.0)
            out.append(Token("num", tok, start, value))
        elif kind == "name" and tok in _KEYWORDS:
            out.append(Token("op", tok, start))
        else:
            out.append(Token(kind, tok, start))
        pos = m.end()


# -- syntax tree ---------------------------------------------------------------------


@dataclass(frozen=True)
class Node:
    op: str  # "num" | "var" | "call" | "neg" | "not" | a binary operator
    start: int
    end: int
    args: tuple[Node, ...] = ()
    value: float = 0.0
    name: str = ""
    paren: bool = False  # written in parentheses: "(a < b) == c" is not a chained comparison


_BINARY = {"or": 1, "and": 2, "<": 4, "<=": 4, ">": 4, ">=": 4, "==": 4, "!=": 4, "+": 5, "-": 5, "*": 6, "/": 6}
_COMPARISONS = ("<", "<=", ">", ">=", "==", "!=")
_NOT_BP, _NEG_BP = 3, 7


class _Parser:
    def __init__(self, text: str) -> None:
        self.text, self.toks, self.i = text, tokenize(text), 0

    def peek(self) -> Token:
        return self.toks[self.i]

    def take(self) -> Token:
        tok = self.toks[self.i]
        self.i += 1
        return tok

    def fail(self, message: str, tok: Token) -> ExpressionError:
        return ExpressionError(message, self.text, tok.pos)

    def expect(self, text: str) -> Token:
        tok = self.peek()
        if tok.text != text or tok.kind == "num":
            got = "the end" if tok.kind == "end" else repr(tok.text)
            raise self.fail(f"expected {text!r}, found {got}", tok)
        return self.take()

    def parse(self) -> Node:
        node = self.expr(0)
        tok = self.peek()
        if tok.kind != "end":
            raise self.fail(f"unexpected {tok.text!r} after a complete expression", tok)
        return node

    def expr(self, min_bp: int) -> Node:
        left = self.prefix()
        while True:
            tok = self.peek()
            bp = _BINARY.get(tok.text) if tok.kind == "op" else None
            if bp is None or bp <= min_bp:
                return left
            if tok.text in _COMPARISONS and left.op in _COMPARISONS and not left.paren:
                raise self.fail("comparisons cannot be chained; join them with 'and'", tok)
            self.take()
            right = self.expr(bp)
            left = Node(tok.text, left.start, right.end, (left, right))

    def prefix(self) -> Node:
        tok = self.take()
        if tok.kind == "num":
            return Node("num", tok.pos, tok.pos + len(tok.text), value=tok.value)
        if tok.kind == "name":
            if self.peek().text == "(":
                return self.call(tok)
            return Node("var", tok.pos, tok.pos + len(tok.text), name=tok.text)
        if tok.text in ("-", "not"):
            operand = self.expr(_NEG_BP if tok.text == "-" else _NOT_BP)
            return Node("neg" if tok.text == "-" else "not", tok.pos, operand.end, (operand,))
        if tok.text == "(":
            inner = self.expr(0)
            close = self.expect(")")
            return Node(inner.op, tok.pos, close.pos + 1, inner.args, inner.value, inner.name, paren=True)
        what = "the end of the expression" if tok.kind == "end" else repr(tok.text)
        raise self.fail(f"expected a number, a metric name or '(', found {what}", tok)

    def call(self, fn: Token) -> Node:
        if fn.text not in FUNCTIONS:
            raise self.fail(f"unknown function {fn.text!r} (functions: {', '.join(FUNCTIONS)})", fn)
        self.expect("(")
        args = [self.expr(0)]
        while self.peek().text == ",":
            self.take()
            args.append(self.expr(0))
        close = self.expect(")")
        if fn.text == "abs" and len(args) != 1:
            raise self.fail("abs() takes exactly one argument", fn)
        return Node("call", fn.pos, close.pos + 1, tuple(args), name=fn.text)


def _names(node: Node) -> list[tuple[str, int]]:
    """The metric names an expression reads, as written, with their offsets, in order."""
    own = [(node.name, node.start)] if node.op == "var" else []
    return own + [n for a in node.args for n in _names(a)]


# -- evaluation ----------------------------------------------------------------------

Value = float | None


def _num(x: float) -> Value:
    return x if math.isfinite(x) else None


def _bool(x: bool) -> float:
    return 1.0 if x else 0.0


def evaluate(node: Node, metrics: Metrics) -> Value:
    """The node's value; None when a metric it needs is missing or the arithmetic is undefined."""
    op = node.op
    if op == "num":
        return node.value
    if op == "var":
        alias = _ALIAS_TREES.get(node.name)
        if alias is not None and node.name not in metrics:
            return evaluate(alias, metrics)
        v = metrics.get(node.name)
        return _num(float(v)) if v is not None else None
    if op in ("and", "or"):
        a = evaluate(node.args[0], metrics)
        if a is not None and (a != 0.0) == (op == "or"):
            return a if op == "or" else 0.0  # short circuit: the right side may be unknown
        b = evaluate(node.args[1], metrics)
        if b is not None and (b != 0.0) == (op == "or"):
            return b if op == "or" else 0.0
        return None if a is None or b is None else b
    vals = [evaluate(a, metrics) for a in node.args]
    if any(v is None for v in vals):
        return None
    xs = [v for v in vals if v is not None]
    if op == "neg":
        return -xs[0]
    if op == "not":
        return _bool(xs[0] == 0.0)
    if op == "call":
        return abs(xs[0]) if node.name == "abs" else (min(xs) if node.name == "min" else max(xs))
    a, b = xs
    if op == "/":
        return _num(a / b) if b != 0.0 else None
    arith = {"+": a + b, "-": a - b, "*": a * b} if op in "+-*" else None
    if arith is not None:
        return _num(arith[op])
    cmp = {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b}
    return _bool(cmp[op])


@dataclass(frozen=True)
class Expression:
    """A parsed expression: `evaluate(metrics)`, the names it reads, and a description of its values."""

    text: str
    tree: Node

    @property
    def names(self) -> list[str]:
        return list(dict.fromkeys(n for n, _ in _names(self.tree)))

    def evaluate(self, metrics: Metrics) -> Value:
        return evaluate(self.tree, metrics)

    def holds(self, metrics: Metrics) -> bool:
        v = self.evaluate(metrics)
        return v is not None and v != 0.0

    def describe(self, metrics: Metrics) -> str:
        """What held, values substituted: "h2d_time / total_time = 0.42 > 0.3"."""
        return _describe(self.text, self.tree, metrics)


def _side(text: str, node: Node, metrics: Metrics) -> str:
    if node.op == "num":
        return text[node.start : node.end]
    return f"{text[node.start : node.end]} = {fmt(evaluate(node, metrics))}"


def _describe(text: str, node: Node, metrics: Metrics) -> str:
    if node.op in _COMPARISONS:
        left, right = node.args
        return f"{_side(text, left, metrics)} {node.op} {_side(text, right, metrics)}"
    if node.op in ("and", "or"):
        parts = [a for a in node.args if node.op == "and" or (evaluate(a, metrics) or 0.0) != 0.0]
        return f" {node.op} ".join(_describe(text, a, metrics) for a in parts)
    return _side(text, node, metrics)


def fmt(v: Value) -> str:
    if v is None:
        return "n/a"
    return f"{v:.1f}" if abs(v) >= 1000 else f"{v:.4g}"


def parse_expression(text: str) -> Expression:
    """Parse `text`; raises ExpressionError with the column and a caret excerpt."""
    if not text.strip():
        raise ExpressionError("empty expression", text, 0)
    return Expression(text, _Parser(text).parse())


_ALIAS_TREES: dict[str, Node] = {k: parse_expression(v).tree for k, v in ALIASES.items()}
