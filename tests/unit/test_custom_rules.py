from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from pytest_inferscope.analyzer import DEFAULT_RULES, Context, analyze
from pytest_inferscope.analyzer.custom import (
    ALIASES,
    CustomRuleError,
    ExpressionError,
    load_rules,
    metric_names,
    parse_expression,
    tokenize,
)
from pytest_inferscope.analyzer.metrics import compute_metrics
from pytest_inferscope.events import EVENT_DTYPE, CopyKind, Domain, Kind, MemoryKind, RawTrace, copy_flags
from pytest_inferscope.merger import Timeline, merge
from pytest_inferscope.rounds import RoundKind, kind_flags

MS = 1_000_000
_MB = 1024 * 1024


def build(
    n_rounds: int = 10, round_ms: float = 10.0, *, cpu_busy: float, copy: tuple[float, int] | None = None
) -> RawTrace:
    """`n_rounds` measured rounds (one warm-up) with per-round counters; `copy`: (fraction of the round, bytes)
    of one pageable host-to-device copy per round, launched 5 µs before by a runtime record."""
    strings = ["test", "round", "cudaMemcpyAsync"]
    rows, meta = [], []
    dur, t, rss = int(round_ms * MS), 0, 500 * _MB
    for i in range(n_rounds + 1):
        kind = kind_flags(RoundKind.WARMUP if i == 0 else RoundKind.MEASURED)
        rows.append((t, t + dur, i, 0, 1, 1, -1, -1, Kind.ROUND, Domain.HOST, kind))
        if copy is not None:
            s = t + dur // 20
            flags = copy_flags(CopyKind.HTOD, MemoryKind.PAGEABLE, MemoryKind.DEVICE)
            rows.append((s - 5000, s - 4000, 0, i + 1, 2, 1, -1, -1, Kind.RUNTIME, Domain.DEVICE, 0))
            rows.append((s, s + int(dur * copy[0]), copy[1], i + 1, 0, 1, 7, 0, Kind.MEMCPY, Domain.DEVICE, flags))
        busy = int(dur * cpu_busy)
        meta.append(
            {"index": i, "warmup": i == 0, "wall_ns": dur, "thread_cpu_ns": busy, "user_ns": busy, "sys_ns": 0,
             "minflt": 0, "majflt": 0, "nvcsw": 0, "nivcsw": 0, "runqueue_ns": 0, "rss_start": rss, "rss_end": rss}
        )  # fmt: skip
        t += dur + 1000
    rows.append((0, t, 0, 0, 0, 1, -1, -1, Kind.TEST, Domain.HOST, 0))
    return RawTrace(np.array(rows, dtype=EVENT_DTYPE), strings, clock_pairs=[(0, 0), (t, t)], meta={"rounds": meta})


def ctx_for(timeline: Timeline) -> Context:
    ctx = Context(timeline)
    ctx.metrics = compute_metrics(ctx)
    return ctx


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / ".inferscope_rules.yaml"
    p.write_text(text, encoding="utf-8")
    return p


def rule_yaml(condition: str = "total_time > 1", **extra: str) -> str:
    lines = ["bottleneck_rules:", "  - name: my_rule", f"    condition: {condition!r}", '    suggestion: "Do X"']
    return "\n".join(lines + [f"    {k}: {v}" for k, v in extra.items()]) + "\n"


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(CustomRuleError) as e:
        load_rules(write(tmp_path, text), metric_names())
    return str(e.value)


# -- the language ---------------------------------------------------------------------

M = {"a": 2.0, "b": 3.0, "z": 0.0, "n": None, "nan": math.nan, "latency_ms.median": 10.0, "gpu.transfer_fraction": 0.4}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1 + 2 * 3", 7.0),
        ("(1 + 2) * 3", 9.0),
        ("10 - 4 - 3", 3.0),
        ("12 / 3 / 2", 2.0),
        ("-a * b", -6.0),
        ("- -a", 2.0),
        ("2 * -a", -4.0),
        ("30%", 0.3),
        ("1.5e3 + .5", 1500.5),
        ("2e-1", 0.2),
        ("a < b", 1.0),
        ("a >= b", 0.0),
        ("a == 2 and b != 2", 1.0),
        ("a > 5 or b > 2", 1.0),
        ("not a > 1", 0.0),
        ("not z", 1.0),
        ("a > 1 and b > 1 or z", 1.0),
        ("z and a or b > 10", 0.0),
        ("1 + 2 < 2 * 2", 1.0),
        ("(a < b) == 1", 1.0),
        ("min(a, b, 1)", 1.0),
        ("max(a, b) * 2", 6.0),
        ("abs(a - b)", 1.0),
        ("max(min(a, b), abs(-5))", 5.0),
        ("total_time", 10.0),
        ("h2d_time / total_time", 0.4),
        ("h2d_time / total_time > 30%", 1.0),
        ("latency_ms.median * 2", 20.0),
    ],
)
def test_expressions_evaluate_with_precedence(text: str, value: float) -> None:
    assert parse_expression(text).evaluate(M) == pytest.approx(value)


@pytest.mark.parametrize(
    "text",
    ["n + 1", "n > 1", "-n", "not n", "min(a, n)", "abs(n)", "a / z", "a / (b - 3) > 1", "nan > 1", "missing > 0",
     "n > 1 and a > 1", "n > 1 or z", "h2d_time > 0 and gpu.busy_fraction > 0"],
)  # fmt: skip
def test_unknown_values_and_division_by_zero_are_unknown_not_errors(text: str) -> None:
    e = parse_expression(text)
    assert e.evaluate(M) is None and not e.holds(M)


def test_and_or_decide_when_the_known_side_suffices() -> None:
    assert parse_expression("z > 1 and n > 1").evaluate(M) == 0.0
    assert parse_expression("n > 1 and z > 1").evaluate(M) == 0.0
    assert parse_expression("n > 1 or a > 1").holds(M)
    assert parse_expression("a > 1 or a / z > 1").holds(M)


def test_tokens_and_names() -> None:
    toks = tokenize("gpu.h2d_bytes_per_round>=1e6 and not(x)")
    assert [t.text for t in toks] == ["gpu.h2d_bytes_per_round", ">=", "1e6", "and", "not", "(", "x", ")", ""]
    assert toks[2].value == 1e6 and toks[1].pos == 23
    assert parse_expression("h2d_time / total_time + max(a, a)").names == ["h2d_time", "total_time", "a"]


def test_describe_substitutes_values() -> None:
    m = {"gpu.transfer_fraction": 0.42, "latency_ms.median": 10.0, "a": 2.0}
    assert parse_expression("h2d_time / total_time > 0.3").describe(m) == "h2d_time / total_time = 0.42 > 0.3"
    assert parse_expression("a > 1 and a < total_time").describe(m) == "a = 2 > 1 and a = 2 < total_time = 10"
    assert parse_expression("a > 5 or a > 1").describe(m) == "a = 2 > 1"


@pytest.mark.parametrize(
    ("text", "column", "message"),
    [
        ("__import__('os')", 12, "unexpected character"),
        ("open('/etc/passwd')", 6, "unexpected character"),
        ("__import__ (1)", 1, "unknown function '__import__'"),
        ("a.__class__()", 1, "unknown function"),
        ("[1]", 1, "unexpected character"),
        ("a ** 2", 4, "expected a number"),
        ("a % 2", 3, "unexpected character"),
        ("1 +", 4, "found the end"),
        ("(1 + 2", 7, "expected ')'"),
        ("1 2", 3, "after a complete expression"),
        ("a < b < c", 7, "cannot be chained"),
        ("abs(1, 2)", 1, "exactly one argument"),
        ("max()", 5, "expected a number"),
        ("lambda: 1", 7, "unexpected character"),
        ("  ", 1, "empty"),
    ],
)
def test_syntax_errors_point_at_the_column(text: str, column: int, message: str) -> None:
    with pytest.raises(ExpressionError) as e:
        parse_expression(text)
    assert e.value.pos == column - 1 and message in str(e.value)
    assert f"at column {column}:\n    {text}\n    {' ' * (column - 1)}^" in str(e.value)


def test_metric_names_match_compute_metrics() -> None:
    cpu = ctx_for(merge(build(cpu_busy=0.5)))
    gpu = ctx_for(merge(build(cpu_busy=0.5, copy=(0.1, 1024))))
    assert set(metric_names()) == set(cpu.metrics) == set(gpu.metrics)
    assert "gpu.transfer_fraction" in metric_names() and "latency_ms.median" in metric_names()
    assert all(parse_expression(v).names for v in ALIASES.values())


# -- rules on timelines ---------------------------------------------------------------

EXAMPLE = """\
# .inferscope_rules.yaml
bottleneck_rules:
  - name: "high_memory_overhead"
    condition: "h2d_time / total_time > 0.3"
    suggestion: "Use pinned memory or reduce batch size ({h2d_time:.1f} ms of {total_time:.1f} ms)"
    confidence_weight: 1.2
    cause: transfer_bound
    share: h2d_time / total_time
    saving_ms: h2d_time * 0.5
    title: Copies take a third of the round
"""


def test_a_rule_fires_on_a_real_timeline(tmp_path: Path) -> None:
    (rule,) = load_rules(write(tmp_path, EXAMPLE), metric_names())
    assert rule.__name__ == "high_memory_overhead"
    (f,) = rule(ctx_for(merge(build(cpu_busy=0.2, copy=(0.5, 64 * _MB)))))
    assert f.rule == "high_memory_overhead" and f.cause == "transfer_bound"
    assert f.title == "Copies take a third of the round"
    assert "h2d_time / total_time = 0.5 > 0.3" in f.summary
    assert f.share == pytest.approx(0.5, abs=1e-3) and f.confidence == pytest.approx(0.6) and f.share_measured
    assert f.evidence["h2d_time"] == pytest.approx(5.0, abs=1e-3) and f.evidence["total_time"] == pytest.approx(10.0)
    assert f.evidence["gpu.transfer_fraction"] == pytest.approx(0.5, abs=1e-3)
    (s,) = f.suggestions
    assert s.action == "Use pinned memory or reduce batch size (5.0 ms of 10.0 ms)"
    assert s.saving_ms == pytest.approx(2.5, abs=1e-2) and s.rule == "high_memory_overhead"


def test_a_rule_does_not_fire_below_threshold_or_without_gpu_data(tmp_path: Path) -> None:
    (rule,) = load_rules(write(tmp_path, EXAMPLE), metric_names())
    assert rule(ctx_for(merge(build(cpu_busy=0.2, copy=(0.1, 1024))))) == []
    assert rule(ctx_for(merge(build(cpu_busy=0.2)))) == []  # gpu.* is None on a CPU-only run


def test_analyze_classifies_with_a_custom_cause(tmp_path: Path) -> None:
    text = """\
bottleneck_rules:
  - name: mostly_waiting
    condition: 1 - cpu.test_thread_working > 50%
    cause: sync_bound
    share: 1 - cpu.test_thread_working
    suggestion: "Stop waiting ({cpu.test_thread_working:.0%} busy)"
    saving_ms: total_time * (1 - cpu.test_thread_working)
"""
    timeline = merge(build(cpu_busy=0.1))
    assert analyze(timeline).bottleneck == "unclassified"
    a = analyze(timeline, [*DEFAULT_RULES, *load_rules(write(tmp_path, text), metric_names())])
    assert a.bottleneck == "sync_bound" and a.confidence > 0
    f = next(f for f in a.findings if f.rule == "mostly_waiting")
    assert f.share == pytest.approx(0.9, abs=1e-3) and f.title == "Mostly waiting"
    assert any(s.action == "Stop waiting (10% busy)" and s.saving_ms == pytest.approx(9.0, abs=0.01)
               for s in a.suggestions)  # fmt: skip


def test_an_informational_rule_has_no_cause_and_no_share(tmp_path: Path) -> None:
    (rule,) = load_rules(write(tmp_path, rule_yaml("rounds >= 10")))
    (f,) = rule(ctx_for(merge(build(cpu_busy=0.5))))
    assert f.cause is None and f.share == 0.0 and f.confidence == 0.5 and f.suggestions[0].saving_ms == 0.0
    assert not f.share_measured  # no `share:` given: the reports say its time is not measured, not that it is 0
    assert f.evidence == {"rounds": 10.0}


def test_empty_files_have_no_rules(tmp_path: Path) -> None:
    assert load_rules(write(tmp_path, "# nothing yet\n")) == []
    assert load_rules(write(tmp_path, "bottleneck_rules:\n")) == []


# -- errors ---------------------------------------------------------------------------


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    msg = error(tmp_path, "bottleneck_rules:\n  - name: x\n    condition: [1\n")
    assert ".inferscope_rules.yaml:4" in msg and "invalid YAML" in msg


def test_unknown_key_names_the_line_and_rule(tmp_path: Path) -> None:
    msg = error(tmp_path, rule_yaml(sugestion="x"))
    assert ".inferscope_rules.yaml:5: rule 'my_rule': unknown key 'sugestion'; did you mean 'suggestion'?" in msg
    assert "unknown top-level key 'rules'" in error(tmp_path, "rules: []\n")


def test_bad_expression_names_line_rule_column_and_caret(tmp_path: Path) -> None:
    msg = error(tmp_path, rule_yaml("h2d_time / / total_time"))
    assert msg.startswith(f"{tmp_path / '.inferscope_rules.yaml'}:3: rule 'my_rule' (condition): ")
    assert "at column 12:\n    h2d_time / / total_time\n               ^" in msg
    assert "\n\n" not in msg


def test_no_eval_python_is_a_syntax_error(tmp_path: Path) -> None:
    msg = error(tmp_path, rule_yaml("__import__('os').system('echo hi') or 1"))
    assert '(condition): unexpected character "\'" at column 12' in msg


def test_unknown_metric_suggests_the_closest_name(tmp_path: Path) -> None:
    msg = error(tmp_path, rule_yaml("gpu.transfer_fracton > 0.2"))
    assert (
        "rule 'my_rule' (condition): unknown metric 'gpu.transfer_fracton'; did you mean 'gpu.transfer_fraction'?"
        in msg
    )
    assert "at column 1" in msg
    assert "did you mean 'total_time'" in error(tmp_path, rule_yaml("1 < total_tim"))
    assert "placeholder {latency_ms.medain}" in error(tmp_path, rule_yaml().replace("Do X", "{latency_ms.medain}"))
    assert "(share): unknown metric 'foo'" in error(tmp_path, rule_yaml(share="foo"))
    assert load_rules(write(tmp_path, rule_yaml("foo > 1")), None)  # nothing to check names against


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            rule_yaml() + rule_yaml().split("\n", 1)[1],
            ":5: rule 'my_rule' (name): duplicate rule name (first defined at",
        ),
        (
            rule_yaml(cause="cpu_bond"),
            ":5: rule 'my_rule' (cause): 'cpu_bond' is not a bottleneck class; use one of cpu_bound",
        ),
        (rule_yaml(confidence_weight="0"), "(confidence_weight): must be a number in (0, 2], got 0"),
        (rule_yaml(confidence_weight="2.5"), "(confidence_weight): must be a number in (0, 2]"),
        (rule_yaml(confidence_weight="high"), "(confidence_weight): must be a number"),
        ("bottleneck_rules:\n  - name: r\n    suggestion: x\n", ":2: rule 'r': missing required key 'condition'"),
        ("bottleneck_rules:\n  - name: r\n    condition: rounds > 1\n", "missing required key 'suggestion'"),
        ("bottleneck_rules:\n  - condition: rounds > 1\n", "rule #1: missing required key 'name'"),
        (rule_yaml().replace("my_rule", "my rule"), "(name): the name must be an identifier"),
        (rule_yaml().replace("my_rule", "cpu_saturation"), "built-in rule"),
        (rule_yaml(title="[1, 2]"), "(title): must be a string"),
        (rule_yaml(share="[1]"), "(share): must be an expression"),
        (rule_yaml().replace('"Do X"', "''"), "(suggestion): must be a non-empty string"),
        (rule_yaml().replace("Do X", "{rounds:.zz}"), "(suggestion): bad format"),
        (rule_yaml() + "    condition: rounds > 2\n", ":5: rule 'my_rule': key 'condition' is given twice"),
        ("bottleneck_rules: 3\n", "'bottleneck_rules' must be a list"),
        ("bottleneck_rules:\n  - just a string\n", ":2: rule #1 must be a mapping"),
        ("- a\n", ":1: the file must be a mapping"),
    ],
)
def test_every_error_names_file_line_and_rule(tmp_path: Path, text: str, expected: str) -> None:
    msg = error(tmp_path, text)
    assert msg.startswith(str(tmp_path / ".inferscope_rules.yaml")) and expected in msg, msg


def test_missing_file_is_a_custom_rule_error(tmp_path: Path) -> None:
    with pytest.raises(CustomRuleError, match="cannot read"):
        load_rules(tmp_path / "absent.yaml")


def test_a_rule_on_a_collectors_metric_loads_and_fires_on_its_value(tmp_path: Path) -> None:
    """docs/custom-rules.md lists `<collector>.<metric>` (pytest_inferscope_collectors) among the names a rule reads:
    the session cannot know a collector's names when it loads the file, so any name outside the built-in namespaces
    is taken for one; a typo in a built-in name is still an error there."""
    text = rule_yaml("energy.joules > 40").replace("Do X", "Spent {energy.joules:.1f} J")
    (rule,) = load_rules(write(tmp_path, text), metric_names())
    ctx = ctx_for(merge(build(cpu_busy=0.2)))
    assert rule(ctx) == []  # no such collector in this test: unknown, the rule does not fire
    ctx.metrics["energy.joules"] = 42.5
    (f,) = rule(ctx)
    assert f.suggestions[0].action == "Spent 42.5 J" and f.evidence["energy.joules"] == 42.5
    ctx.metrics["energy.joules"] = 12.0
    assert rule(ctx) == []
    assert "did you mean 'gpu.busy_fraction'" in error(tmp_path, rule_yaml("gpu.busy_fracton > 0.2"))
    assert "unknown metric 'cpuu'" in error(tmp_path, rule_yaml("cpuu > 0.2"))  # no namespace: not a collector's


def test_a_rule_naming_a_metric_its_collector_did_not_give_says_so_at_analysis(tmp_path: Path) -> None:
    (rule,) = load_rules(write(tmp_path, rule_yaml("energy.jouls > 40")), metric_names())
    ctx = ctx_for(merge(build(cpu_busy=0.2)))
    ctx.metrics["energy.joules"] = 42.5  # the collector ran; the rule's name is not one of its metrics
    gave = r"collector 'energy' gave energy.joules in this test \(the closest: 'energy.joules'\)"
    with pytest.raises(CustomRuleError, match=r"'energy.jouls'.*" + gave):
        rule(ctx)
