"""Unit tests of the regression statistics: Mann–Whitney U (against brute force and scipy), CI, verdicts, warnings."""

from __future__ import annotations

import inspect
import itertools
import json
import math
import re
from typing import Any

import numpy as np
import pytest

from pytest_inferscope.stats import (
    Comparison,
    MetricChange,
    _u_counts,
    compare_metric,
    compare_samples,
    mann_whitney_u,
    min_rounds_for_significance,
    noise_warnings,
    ratio_ci,
    rel_spread,
)


def _lognormal(rng: np.random.Generator, median: float, sigma: float, n: int) -> np.ndarray:
    return np.exp(rng.normal(math.log(median), sigma, n))


# --- Mann–Whitney U ------------------------------------------------------------------------


@pytest.mark.parametrize(("n1", "n2"), [(1, 1), (1, 4), (2, 3), (3, 3), (4, 2), (4, 5)])
def test_u_distribution_matches_brute_force_enumeration(n1: int, n2: int) -> None:
    counts = np.zeros(n1 * n2 + 1, dtype=np.int64)
    for b_pos in itertools.combinations(range(n1 + n2), n2):  # which ranks the b side holds
        u = sum(1 for j in b_pos for i in range(n1 + n2) if i not in b_pos and j > i)
        counts[u] += 1
    assert np.array_equal(_u_counts(n1, n2), counts)
    assert int(_u_counts(n1, n2).sum()) == math.comb(n1 + n2, n1)


def test_u_counts_are_exact_at_the_largest_exact_size() -> None:
    c = _u_counts(25, 25)
    assert int(c.sum()) == math.comb(50, 25)
    assert np.array_equal(c, c[::-1])  # the null distribution is symmetric
    assert c.min() >= 1


def test_u_counts_statistic_and_direction() -> None:
    u, p = mann_whitney_u([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], "greater")
    assert u == 9.0 and p == pytest.approx(1 / 20)
    u, p = mann_whitney_u([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], "less")
    assert p == 1.0
    u, p = mann_whitney_u([4.0, 5.0, 6.0], [1.0, 2.0, 3.0], "less")
    assert u == 0.0 and p == pytest.approx(1 / 20)
    assert mann_whitney_u([1.0, 2.0, 3.0], [4.0, 5.0, 6.0], "two-sided")[1] == pytest.approx(2 / 20)


def test_exact_p_values_match_scipy_over_many_random_cases() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    checked = 0
    for _ in range(300):
        n1, n2 = (int(x) for x in rng.integers(1, 26, 2))
        a = rng.normal(size=n1)
        b = rng.normal(size=n2) + rng.uniform(-1, 1.5)
        for alt in ("greater", "less", "two-sided"):
            u, p = mann_whitney_u(a, b, alt, method="exact")
            ref = scipy_stats.mannwhitneyu(b, a, alternative=alt, method="exact")
            assert u == ref.statistic
            assert p == pytest.approx(ref.pvalue, rel=1e-9, abs=1e-300)
            # auto picks the exact distribution for small samples without ties
            assert mann_whitney_u(a, b, alt) == (u, p)
            checked += 1
    assert checked == 900


def test_asymptotic_p_values_with_ties_match_scipy() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(2)
    for _ in range(300):
        n1, n2 = (int(x) for x in rng.integers(2, 80, 2))
        a = rng.integers(0, 8, n1).astype(float)  # heavy ties
        b = rng.integers(0, 10, n2).astype(float)
        for alt in ("greater", "less", "two-sided"):
            u, p = mann_whitney_u(a, b, alt, method="asymptotic")
            ref = scipy_stats.mannwhitneyu(b, a, alternative=alt, method="asymptotic", use_continuity=True)
            assert u == ref.statistic
            assert p == pytest.approx(ref.pvalue, abs=1e-12)
            assert mann_whitney_u(a, b, alt) == (u, p)  # ties: auto falls back to the approximation


def test_large_samples_without_ties_use_the_normal_approximation() -> None:
    scipy_stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(3)
    a, b = rng.normal(size=60), rng.normal(0.3, 1, size=45)
    ref = scipy_stats.mannwhitneyu(b, a, alternative="greater", method="asymptotic")
    assert mann_whitney_u(a, b)[1] == pytest.approx(ref.pvalue, abs=1e-12)


def test_all_values_tied_gives_no_evidence() -> None:
    assert mann_whitney_u([2.0] * 10, [2.0] * 10) == (50.0, 1.0)


@pytest.mark.parametrize(
    ("a", "b", "kwargs", "match"),
    [
        ([], [1.0], {}, "at least one value"),
        ([1.0], [math.nan], {}, "finite"),
        ([1.0], [2.0], {"alternative": "bigger"}, "alternative must be"),
        ([1.0], [2.0], {"method": "fast"}, "method must be"),
        ([1.0, 2.0], [2.0, 3.0], {"method": "exact"}, "no ties"),
    ],
)
def test_mann_whitney_rejects_bad_input(a: list[float], b: list[float], kwargs: dict[str, str], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        mann_whitney_u(a, b, **kwargs)


def test_min_rounds_for_significance_is_the_smallest_n_that_can_reach_alpha() -> None:
    assert min_rounds_for_significance(0.01) == 5  # 1/C(10,5) = 1/252 < 0.01 <= 1/C(8,4) = 1/70
    assert min_rounds_for_significance(0.05) == 4  # 1/70 < 0.05 <= 1/20
    for alpha in (0.2, 0.01, 0.001, 1e-6):
        n = min_rounds_for_significance(alpha)
        assert mann_whitney_u(range(n), np.arange(n) + n)[1] < alpha
        assert mann_whitney_u(range(n - 1), np.arange(n - 1) + n)[1] >= alpha
    with pytest.raises(ValueError, match="alpha"):
        min_rounds_for_significance(0)


# --- ratio CI ------------------------------------------------------------------------------


def test_ratio_ci_is_deterministic_and_brackets_the_ratio() -> None:
    rng = np.random.default_rng(4)
    base, new = _lognormal(rng, 3.0, 0.03, 20), _lognormal(rng, 3.6, 0.03, 20)
    low, high = ratio_ci(base, new)
    assert (low, high) == ratio_ci(base, new)
    assert low < float(np.median(new) / np.median(base)) < high
    assert 1.1 < low < high < 1.3
    narrow = ratio_ci(base, new, confidence=0.5)
    assert low <= narrow[0] <= narrow[1] <= high


def test_ratio_ci_covers_the_true_ratio_at_about_its_confidence() -> None:
    rng = np.random.default_rng(5)
    trials = 300
    covered = 0
    for seed in range(trials):
        low, high = ratio_ci(_lognormal(rng, 1.0, 0.1, 20), _lognormal(rng, 1.1, 0.1, 20), confidence=0.9, seed=seed)
        covered += low <= 1.1 <= high
    assert 0.83 <= covered / trials <= 0.97


def test_ratio_ci_without_samples_or_positive_median_is_nan() -> None:
    assert all(math.isnan(x) for x in ratio_ci([], [1.0]))
    assert all(math.isnan(x) for x in ratio_ci([0.0, 0.0], [1.0]))
    with pytest.raises(ValueError, match="confidence"):
        ratio_ci([1.0], [1.0], confidence=1.0)


# --- compare_samples -----------------------------------------------------------------------


def test_compare_samples_signature_is_the_fixed_one() -> None:
    params = inspect.signature(compare_samples).parameters
    assert list(params) == ["base_ms", "new_ms", "max_regression", "alpha", "min_samples", "max_spread"]
    assert params["max_regression"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["max_regression"].default is inspect.Parameter.empty
    assert (params["alpha"].default, params["min_samples"].default, params["max_spread"].default) == (0.01, 5, 0.5)


def test_clear_slowdown_is_regressed_with_the_numbers_in_the_reason() -> None:
    rng = np.random.default_rng(6)
    base, new = _lognormal(rng, 3.0, 0.02, 20), _lognormal(rng, 3.3, 0.02, 20)
    c = compare_samples(base, new, max_regression=0.05)
    assert c.verdict == "regressed"
    assert c.ratio == pytest.approx(np.median(new) / np.median(base))
    assert c.p_value < 0.01 and c.ci_low < c.ratio < c.ci_high
    assert (c.base_n, c.new_n) == (20, 20)
    assert c.base_median == pytest.approx(np.median(base))
    assert "Slower by +" in c.reason and "above the allowed 5%" in c.reason and f"{c.ratio:.3f}" in c.reason


def test_a_verdict_whose_printed_ci_reaches_one_says_why_it_stands() -> None:
    # Two levels in the new run: 8 rounds at the baseline's, 12 slower. Every round is compared, so the test is
    # significant, while a resample's median lands at the baseline's level often enough for the 99% CI to reach 1.
    base = list(np.linspace(9.9, 10.0, 20))
    new = list(np.linspace(9.88, 9.98, 8)) + list(np.linspace(10.65, 10.75, 12))
    for a, b, verdict in ((base, new, "regressed"), (new, base, "improved")):
        c = compare_samples(a, b, max_regression=0.05)
        assert c.verdict == verdict and c.p_value < 0.01 and c.ci_low <= 1.0 <= c.ci_high
        assert "The CI reaches 1.0" in c.reason and "Mann–Whitney" in c.reason
    rng = np.random.default_rng(6)  # a clear slowdown: its CI lies above 1, and its reason has no such sentence
    clear = compare_samples(_lognormal(rng, 3.0, 0.02, 20), _lognormal(rng, 3.3, 0.02, 20), max_regression=0.05)
    assert clear.verdict == "regressed" and clear.ci_low > 1.0 and "CI reaches" not in clear.reason


def test_clear_speedup_is_improved() -> None:
    rng = np.random.default_rng(7)
    c = compare_samples(_lognormal(rng, 3.0, 0.02, 20), _lognormal(rng, 2.5, 0.02, 20), max_regression=0.05)
    assert c.verdict == "improved" and c.ratio < 1 / 1.05 and c.p_value < 0.01
    assert "Faster by" in c.reason


def test_significant_but_small_slowdown_is_unchanged_and_says_so() -> None:
    rng = np.random.default_rng(8)
    c = compare_samples(_lognormal(rng, 3.0, 0.005, 20), _lognormal(rng, 3.09, 0.005, 20), max_regression=0.05)
    assert c.verdict == "unchanged"
    assert c.p_value < 0.01 and 1.0 < c.ratio < 1.05
    assert f"significant (p={c.p_value:.2g}) but only +{100 * (c.ratio - 1):.1f}% ≤ 5%" in c.reason


def test_large_but_not_significant_slowdown_is_unchanged_and_says_so() -> None:
    base = [3.0, 3.6, 2.6, 3.9, 2.8, 3.3]
    new = [3.5, 2.9, 4.1, 3.2, 3.8, 3.4]
    c = compare_samples(base, new, max_regression=0.05)
    assert c.verdict == "unchanged" and c.ratio > 1.05 and c.p_value >= 0.01
    assert "above the allowed 5% but not significant" in c.reason


def test_equal_distributions_are_unchanged() -> None:
    rng = np.random.default_rng(9)
    c = compare_samples(_lognormal(rng, 3.0, 0.03, 20), _lognormal(rng, 3.0, 0.03, 20), max_regression=0.05)
    assert c.verdict == "unchanged" and "not significant" in c.reason


def test_too_few_samples_is_inconclusive_naming_the_side() -> None:
    c = compare_samples([1.0, 1.1, 1.2], [1.0] * 10, max_regression=0.05)
    assert c.verdict == "inconclusive"
    assert "the baseline run has 3" in c.reason and "at least 5 per side" in c.reason
    empty = compare_samples([1.0] * 6, [], max_regression=0.05)
    assert empty.verdict == "inconclusive" and "this run has 0" in empty.reason and math.isnan(empty.ratio)


def test_high_spread_is_inconclusive_when_the_rounds_overlap_and_no_reason_for_doubt_when_they_do_not() -> None:
    base = [1.0, 1.01, 1.02, 1.03, 1.04, 1.05, 1.06, 1.07]
    overlapping = [1.0, 1.02, 1.9, 2.6, 1.8, 3.0, 1.05, 2.4]  # slower, but IQR/median ≈ 60%, and mixed in
    c = compare_samples(base, overlapping, max_regression=0.05)
    assert c.verdict == "inconclusive" and "this run's rounds vary by" in c.reason and "> 50%" in c.reason
    apart = [2.0, 2.5, 4.0, 6.0, 3.0, 9.0, 2.2, 5.0]  # IQR/median ≈ 80%, but every round ≥ 1.9x the slowest base
    c = compare_samples(base, apart, max_regression=0.05)
    assert c.verdict == "regressed" and "even the fast new rounds" in c.reason
    assert compare_samples(apart, base, max_regression=0.05).verdict == "inconclusive"  # faster: no such shortcut


def test_alpha_and_min_samples_are_honoured() -> None:
    base = [1.0, 1.01, 1.02, 1.03]
    new = [1.2, 1.21, 1.22, 1.23]  # 4 v 4: the smallest p is 1/70 ≈ 0.014
    assert compare_samples(base, new, max_regression=0.05, min_samples=4).verdict == "unchanged"
    assert compare_samples(base, new, max_regression=0.05, min_samples=4, alpha=0.05).verdict == "regressed"
    assert compare_samples(base, new, max_regression=0.05, alpha=0.05).verdict == "inconclusive"


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_regression": -0.1}, "max_regression"),
        ({"max_regression": 0.05, "alpha": 0}, "alpha"),
        ({"max_regression": 0.05, "min_samples": 0}, "min_samples"),
        ({"max_regression": 0.05, "max_spread": 0}, "max_spread"),
    ],
)
def test_compare_samples_rejects_bad_settings(kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        compare_samples([1.0] * 5, [1.0] * 5, **kwargs)  # type: ignore[arg-type]  # deliberate bad values


def test_comparison_round_trips_through_json() -> None:
    c = compare_samples([1.0, 2.0], [], max_regression=0.05)  # inconclusive: NaN ratio, p-value and CI
    d = json.loads(json.dumps(c.to_dict(), allow_nan=False))
    assert d["verdict"] == "inconclusive" and d["ci_low"] is None
    back = Comparison.from_dict(d)
    assert back.verdict == c.verdict and math.isnan(back.ci_low) and math.isnan(back.ratio)
    assert (back.base_median, back.base_n, back.new_n, back.reason) == (1.5, 2, 0, c.reason)


def test_rel_spread_is_iqr_over_median() -> None:
    assert rel_spread([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2.0 / 3.0)
    assert math.isnan(rel_spread([]))


# --- noise warnings ------------------------------------------------------------------------


def test_quiet_long_rounds_give_no_warning() -> None:
    rng = np.random.default_rng(10)
    assert noise_warnings(_lognormal(rng, 3.0, 0.01, 20), max_regression=0.05, alpha=0.01) == []


def test_noisy_rounds_warn_with_the_spread() -> None:
    samples = [1.0, 1.3, 0.8, 1.2, 0.9, 1.1, 1.25, 0.85]
    spread = rel_spread(samples)
    (noisy, *_) = noise_warnings(samples, max_regression=0.05, alpha=0.01)
    assert f"{100 * spread:.1f}%" in noisy and "> 10%" in noisy


def test_rounds_shorter_than_the_timer_can_resolve_warn() -> None:
    samples = [0.0005] * 20  # 0.5 µs
    (msg,) = noise_warnings(samples, max_regression=0.05, alpha=0.01, timer_resolution_ns=1.0)
    assert "Rounds too short" in msg and "0.5 µs" in msg
    assert noise_warnings([0.5] * 20, max_regression=0.05, alpha=0.01, timer_resolution_ns=1.0) == []
    # a coarse timer (1 ms ticks) makes even 0.5 ms rounds too short
    assert any(
        "too short" in w for w in noise_warnings([0.5] * 20, max_regression=0.05, alpha=0.01, timer_resolution_ns=1e6)
    )


def test_too_few_rounds_to_ever_detect_says_how_many() -> None:
    (msg,) = noise_warnings([3.0, 3.01, 3.02, 3.03], max_regression=0.05, alpha=0.01)  # 1/70 ≥ 0.01
    assert "with 4 rounds per side this test can never detect a regression at alpha=0.01; use at least 5" in msg
    assert noise_warnings([3.0, 3.01, 3.02, 3.03], max_regression=0.05, alpha=0.05) == []


def test_low_power_warns_with_an_estimate_that_simulation_confirms() -> None:
    rng = np.random.default_rng(11)
    samples = _lognormal(rng, 3.0, 0.07, 10)  # IQR/median ≈ 9%: not "noisy", but 10 rounds are not enough
    warnings = noise_warnings(samples, max_regression=0.05, alpha=0.01)
    (msg,) = [w for w in warnings if w.startswith("Low power")]
    found = re.search(r"flagged only about (\d+)% of the time; about (\d+) rounds per side", msg)
    assert found is not None, msg
    claimed, want = int(found[1]) / 100, int(found[2])
    assert want > 10
    sigma = rel_spread(samples) / 1.349

    def detection(n: int) -> float:
        hits = sum(
            compare_samples(
                np.exp(rng.normal(0, sigma, n)), np.exp(rng.normal(math.log(1.1), sigma, n)), max_regression=0.05
            ).verdict
            == "regressed"
            for _ in range(150)
        )
        return hits / 150

    assert detection(10) == pytest.approx(claimed, abs=0.12)  # the warning was right: 10 rounds often miss it
    assert detection(want) >= 0.88  # and the suggested number finds it (about 95%)


def test_the_low_power_estimate_runs_a_few_simulations_not_a_search(monkeypatch: pytest.MonkeyPatch) -> None:
    """A noisy test's comparison spent 0.1-0.5 s on the "Low power" warning (twice a test: its rounds and the
    baseline's), ~15 simulations at hundreds of rounds searching up from the rounds run. Now the large-sample guess,
    confirmed (or raised a tenth at a time) by the simulation: a few, and the number still reaches the target."""
    import pytest_inferscope.stats as stats_module

    sizes: list[int] = []
    simulate = stats_module.gate_power

    def counted(n: int, *args: Any, **kwargs: Any) -> float:
        sizes.append(n)
        return simulate(n, *args, **kwargs)

    monkeypatch.setattr(stats_module, "gate_power", counted)
    rng = np.random.default_rng(5)
    (msg,) = [w for w in noise_warnings(_lognormal(rng, 3.0, 0.15, 20), max_regression=0.05, alpha=0.05)
              if w.startswith("Low power")]  # fmt: skip
    want = int(re.search(r"about (\d+) rounds per side", msg)[1])  # type: ignore[index]
    assert sizes[0] == 20 and len(sizes) <= 4, sizes  # the rounds run, then the guess and a step or two
    sigma = rel_spread(_lognormal(np.random.default_rng(5), 3.0, 0.15, 20)) / 1.349
    assert simulate(want, sigma, slowdown=0.1, max_regression=0.05, alpha=0.05) >= 0.95
    assert simulate(int(want / 1.25), sigma, slowdown=0.1, max_regression=0.05, alpha=0.05) < 0.95  # not far over


def test_no_rounds_is_a_warning() -> None:
    assert noise_warnings([], max_regression=0.05, alpha=0.01) == [
        "No rounds were measured, so there is nothing to compare."
    ]


# --- deterministic metrics -----------------------------------------------------------------


def test_metric_increase_regresses_exactly_by_default() -> None:
    m = compare_metric("gpu.kernel_launches_per_round", 120, 121)
    assert isinstance(m, MetricChange) and m.regressed
    assert m.message == "gpu.kernel_launches_per_round rose from 120 to 121 (+0.8%), none allowed."
    assert compare_metric("gpu.kernel_launches_per_round", 120, 120) is None
    assert compare_metric("gpu.kernel_launches_per_round", 120, 120 * (1 + 1e-12)) is None


def test_metric_within_tolerance_or_lower_is_reported_but_not_regressed() -> None:
    within = compare_metric("gpu.h2d_bytes_per_round", 1000, 1040, tolerance=0.05)
    assert within is not None and not within.regressed and "within the tolerance 5%" in within.message
    edge = compare_metric("gpu.h2d_bytes_per_round", 1000, 1050, tolerance=0.05)
    assert edge is not None and not edge.regressed
    over = compare_metric("gpu.h2d_bytes_per_round", 1000, 1051, tolerance=0.05)
    assert over is not None and over.regressed
    lower = compare_metric("gpu.h2d_bytes_per_round", 1000, 500)
    assert lower is not None and not lower.regressed and "fell from 1000 to 500 (-50.0%)" in lower.message


def test_metric_from_zero_and_missing_sides() -> None:
    m = compare_metric("gpu.d2h_bytes_per_round", 0, 64, tolerance=0.5)
    assert m is not None and m.regressed and "from 0 to 64" in m.message
    assert compare_metric("gpu.d2h_bytes_per_round", None, 64) is None
    assert compare_metric("gpu.d2h_bytes_per_round", 64, None) is None
    with pytest.raises(ValueError, match="tolerance"):
        compare_metric("x", 1, 2, tolerance=-1)
    assert MetricChange.from_dict(json.loads(json.dumps(m.to_dict()))) == m
