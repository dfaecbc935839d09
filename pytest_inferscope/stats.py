"""Statistics for regression gating: Mann–Whitney U, a CI of the median ratio, verdicts, noise warnings.

Pure functions on lists of per-round latencies, numpy only (scipy is not a dependency; the
tests cross-check against it). The rule is asv's: a test *regressed* only when a one-sided
Mann–Whitney U test on the round samples is significant at `alpha` **and** the median ratio
exceeds 1 + the allowed regression. A threshold on one aggregate alone (pytest-benchmark's rule)
flags machine noise; a significance test alone flags differences too small to matter.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from .comparison import Comparison, MetricChange
from .units import fmt_ms

VERDICTS = ("regressed", "improved", "unchanged", "inconclusive")
ALTERNATIVES = ("greater", "less", "two-sided")

#: Exact p-values when there are no ties and at most this many arrangements of the pooled
#: samples (C(50, 25): both sides up to 25 rounds, or one side small); int64-safe and < 1 ms.
EXACT_MAX_ARRANGEMENTS = math.comb(50, 25)
#: pyperf's rule of thumb: a relative spread above this makes a result unstable.
NOISY_SPREAD = 0.10
#: A round should last at least this many timer ticks for the timer to resolve it well.
MIN_TICKS_PER_ROUND = 1000
#: The power estimate in `noise_warnings` asks for this chance of flagging a slowdown of twice
#: the allowed regression (the power study's target: 10% found at max_regression=5%).
TARGET_POWER = 0.95
_IQR_PER_SIGMA = 1.349  # IQR of a normal distribution, in standard deviations
_MAX_ROUNDS = 1000  # the power search stops here


def _norm_sf(z: float) -> float:
    return 0.5 * math.erfc(z / math.sqrt(2.0))


def _norm_ppf(p: float) -> float:
    """Inverse of the standard normal CDF, by bisection on erfc (used for a handful of values)."""
    lo, hi = -40.0, 40.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1.0 - _norm_sf(mid) < p else (lo, mid)
    return (lo + hi) / 2


@lru_cache(maxsize=512)
def _u_counts(n1: int, n2: int) -> np.ndarray:
    """How many arrangements of n1 + n2 distinct values give each U = 0 .. n1*n2 (read-only).

    These are the coefficients of the Gaussian binomial [n1+n2 choose n1]_q, built up as
    [n+i choose i]_q = [n+i-1 choose i-1]_q × (1 - q^(n+i)) / (1 - q^i); every intermediate is
    itself a Gaussian binomial with non-negative coefficients, so int64 never overflows below
    C(n1+n2, n1) < 2**63. Dividing by (1 - q^i) is a running sum within each residue class mod i.
    """
    m, n = sorted((n1, n2))
    c = np.zeros(m * n + 1, dtype=np.int64)
    c[0] = 1
    for i in range(1, m + 1):
        length = i * n + 1
        p = c[:length].copy()
        shift = n + i
        if shift < length:
            p[shift:] -= c[: length - shift]
        for r in range(i):
            p[r::i] = np.cumsum(p[r::i])
        c[:length] = p
    c.setflags(write=False)
    return c


def mann_whitney_u(
    a: Sequence[float] | np.ndarray,
    b: Sequence[float] | np.ndarray,
    alternative: str = "greater",
    method: str = "auto",
) -> tuple[float, float]:
    """Mann–Whitney U test of `b` against `a`; returns (U, p) with U counting pairs where b > a.

    `alternative="greater"`: b's values tend to be larger than a's (new slower than base);
    "less": smaller; "two-sided": either. U = #(b_j > a_i) + ½ #(b_j = a_i), so
    `scipy.stats.mannwhitneyu(b, a, alternative=...)` gives the same U and p.
    `method="auto"` uses the exact distribution when there are no ties and the samples are small
    (see `EXACT_MAX_ARRANGEMENTS`), otherwise the normal approximation with tie and continuity
    corrections. When every value is tied there is no evidence either way: p = 1.
    """
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative must be one of {', '.join(ALTERNATIVES)}, not {alternative!r}")
    if method not in ("auto", "exact", "asymptotic"):
        raise ValueError(f"method must be 'auto', 'exact' or 'asymptotic', not {method!r}")
    x = np.asarray(a, dtype=float).ravel()
    y = np.asarray(b, dtype=float).ravel()
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        raise ValueError(f"Mann–Whitney U needs at least one value on each side (got {n1} and {n2})")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("Mann–Whitney U needs finite values (got NaN or infinity)")
    pooled = np.concatenate([x, y])
    _, inverse, counts = np.unique(pooled, return_inverse=True, return_counts=True)
    # Mid-ranks: the rank of a tied group is the mean of the positions it occupies.
    ranks = (np.cumsum(counts) - (counts - 1) / 2.0)[inverse]
    u = float(ranks[n1:].sum() - n2 * (n2 + 1) / 2.0)
    ties = bool(np.any(counts > 1))
    if method == "exact" and ties:
        raise ValueError("the exact Mann–Whitney distribution assumes no ties; use method='asymptotic'")
    if method == "exact" or (method == "auto" and not ties and math.comb(n1 + n2, n1) <= EXACT_MAX_ARRANGEMENTS):
        c, total, k = _u_counts(n1, n2), math.comb(n1 + n2, n1), round(u)
        tails = {"greater": int(c[k:].sum()) / total, "less": int(c[: k + 1].sum()) / total}  # P(U≥u), P(U≤u)
    else:
        n, mu = n1 + n2, n1 * n2 / 2.0
        tie_term = float(np.sum(counts.astype(float) ** 3 - counts)) / (n * (n - 1)) if n > 1 else 0.0
        sigma = math.sqrt(n1 * n2 / 12.0 * ((n + 1) - tie_term))
        if sigma == 0.0:
            return u, 1.0
        tails = {"greater": _norm_sf((u - mu - 0.5) / sigma), "less": _norm_sf((mu - u - 0.5) / sigma)}
    tails["two-sided"] = 2.0 * min(tails.values())
    return u, min(1.0, tails[alternative])


def min_rounds_for_significance(alpha: float) -> int:
    """The fewest rounds per side with which a one-sided exact Mann–Whitney test can reach p < alpha.

    The smallest p-value it can give with n rounds per side is 1 / C(2n, n) (every new round
    slower than every base round); below this n no data whatever can be significant.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be between 0 and 1, not {alpha!r}")
    n = 1
    while 1.0 / math.comb(2 * n, n) >= alpha:
        n += 1
    return n


def ratio_ci(
    base: Sequence[float] | np.ndarray,
    new: Sequence[float] | np.ndarray,
    confidence: float = 0.99,
    n_boot: int = 2000,
    seed: int = 0,
) -> tuple[float, float]:
    """Confidence interval of median(new) / median(base), by a percentile bootstrap.

    Why the bootstrap rather than Hodges–Lehmann on log-ratios: the gate and the report use the
    ratio of *medians*, and the bootstrap gives the uncertainty of exactly that number;
    Hodges–Lehmann estimates the median of all pairwise ratios, a different quantity that can
    sit apart from the reported ratio on skewed latency data. Both sides are resampled
    independently (they are separate runs), all `n_boot` resamples in one vectorised draw with a
    fixed seed, so the same samples always give the same interval. With few rounds the bootstrap
    of a median is coarse (it can only take values between order statistics); it is a
    description of the evidence, not the test: the verdict rests on the Mann–Whitney p-value.
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be between 0 and 1, not {confidence!r}")
    x = np.asarray(base, dtype=float).ravel()
    y = np.asarray(new, dtype=float).ravel()
    if x.size == 0 or y.size == 0:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    mx = np.median(x[rng.integers(0, x.size, size=(n_boot, x.size))], axis=1)
    my = np.median(y[rng.integers(0, y.size, size=(n_boot, y.size))], axis=1)
    if np.any(mx <= 0):
        return math.nan, math.nan
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(my / mx, [tail, 1.0 - tail])
    return float(low), float(high)


def separation(low: Sequence[float] | np.ndarray, high: Sequence[float] | np.ndarray) -> float:
    """How far `high` sits above `low`: its 10th percentile over `low`'s 90th (> 1: the bulk of them apart)."""
    return float(np.percentile(high, 10)) / float(np.percentile(low, 90))


def rel_spread(samples: Sequence[float] | np.ndarray) -> float:
    """IQR over median, the spread `LatencyStats.rel_spread` shows (NaN without a positive median)."""
    s = np.asarray(samples, dtype=float)
    if s.size == 0:
        return math.nan
    q25, q50, q75 = np.percentile(s, [25, 50, 75])
    return float((q75 - q25) / q50) if q50 > 0 else math.nan


def _pct(x: float) -> str:
    return f"{100 * x:+.1f}%"


def _ci_reaches_one(low: float, high: float, ratio: float) -> str:
    """What a significant verdict says when the CI printed beside it still holds no change: the two disagree only where
    the rounds are spread unevenly (a few slow or fast rounds move the bootstrap's medians), and the verdict is the
    test's (`ratio_ci`). On real runs, ~5% of the gate's "regressed" verdicts at a 10% slowdown
    (docs/regression-power.md)."""
    if (ratio > 1.0 and not low > 1.0) or (ratio < 1.0 and not high < 1.0):
        return (
            " The CI reaches 1.0: the rounds are spread unevenly, so the median could sit at either level; the verdict "
            "rests on the Mann–Whitney test, which compares every round with every other."
        )
    return ""


def compare_samples(
    base_ms: Sequence[float],
    new_ms: Sequence[float],
    *,
    max_regression: float,
    alpha: float = 0.01,
    min_samples: int = 5,
    max_spread: float = 0.5,
) -> Comparison:
    """Compare the round latencies of a base run and a new run; the verdict and the evidence for it.

    inconclusive: a side has fewer than `min_samples` rounds, or a side's IQR/median exceeds
    `max_spread`. regressed: p(new slower) < alpha and ratio > 1 + max_regression. improved:
    p(new faster) < alpha and ratio < 1 / (1 + max_regression). Otherwise unchanged, and the
    reason says which condition failed. The CI is at confidence 1 - alpha.
    """
    _check_knobs(alpha, max_regression, min_samples, max_spread)
    base = np.asarray(base_ms, dtype=float).ravel()
    new = np.asarray(new_ms, dtype=float).ravel()
    if not (np.all(np.isfinite(base)) and np.all(np.isfinite(new))):
        raise ValueError("the latency samples contain NaN or infinity")
    conf, nan = 1.0 - alpha, math.nan
    bm = float(np.median(base)) if base.size else nan
    nm = float(np.median(new)) if new.size else nan
    ratio, low, high, p_slower, p_faster = nan, nan, nan, nan, nan
    if base.size and new.size and bm > 0:
        ratio = nm / bm
        low, high = ratio_ci(base, new, confidence=conf)
        p_slower = mann_whitney_u(base, new, "greater")[1]
        p_faster = mann_whitney_u(base, new, "less")[1]

    def result(verdict: str, p: float, reason: str) -> Comparison:
        return Comparison(
            verdict, ratio, low, high, p, reason, bm, nm, int(base.size), int(new.size), alpha, max_regression, conf
        )

    allowed = f"{100 * max_regression:.3g}%"
    p_dir = p_slower if not ratio < 1.0 else p_faster
    short = [
        f"{label} run has {s.size}" for label, s in (("the baseline", base), ("this", new)) if s.size < min_samples
    ]
    if short:
        return result(
            "inconclusive", p_dir, f"Too few rounds: {' and '.join(short)}; at least {min_samples} per side are needed."
        )
    if not bm > 0:
        return result("inconclusive", p_dir, f"The baseline's median latency is {bm:g} ms; no ratio can be formed.")
    # Rounds that vary too much make the medians imprecise, not a shift of several times their spread
    # unclear: when even the fast new rounds are slower than the slow baseline rounds by more than the
    # allowed regression (10th against 90th percentile), the spread is no reason for doubt.
    apart = separation(base, new) > 1.0 + max_regression and p_slower < alpha
    too_wide, despite = _spread_doubt(base, new, max_spread, apart)
    if too_wide:
        return result("inconclusive", p_dir, too_wide)
    change, medians = _pct(ratio - 1.0), f"{fmt_ms(bm, nm)} → {fmt_ms(nm, bm)}"  # as the reports write them
    numbers = f"median {medians} ms, ratio {ratio:.3f}, {100 * conf:.0f}% CI {low:.3f}–{high:.3f}"
    slower_sig, faster_sig = p_slower < alpha, p_faster < alpha
    if slower_sig and ratio > 1.0 + max_regression:
        return result(
            "regressed",
            p_slower,
            f"Slower by {change} ({numbers}): significant (p={p_slower:.2g} < {alpha:g}) "
            f"and above the allowed {allowed}.{despite}{_ci_reaches_one(low, high, ratio)}",
        )
    if faster_sig and ratio < 1.0 / (1.0 + max_regression):
        return result(
            "improved",
            p_faster,
            f"Faster by {_pct(1.0 - ratio)[1:]} ({numbers}): significant (p={p_faster:.2g} < {alpha:g}) "
            f"and beyond the {allowed} margin.{_ci_reaches_one(low, high, ratio)}",
        )
    if slower_sig:
        why = f"significant (p={p_slower:.2g}) but only {change} ≤ {allowed}"
    elif faster_sig:
        why = f"significantly faster (p={p_faster:.2g}) but only {change}, within the {allowed} margin"
    elif ratio > 1.0 + max_regression:
        why = f"{change} is above the allowed {allowed} but not significant (p={p_slower:.2g} ≥ {alpha:g})"
    else:
        why = f"{change}, not significant (p={p_dir:.2g} ≥ {alpha:g})"
    return result("unchanged", p_dir, f"Unchanged: {why} ({numbers}).")


def _check_knobs(alpha: float, max_regression: float, min_samples: int, max_spread: float) -> None:
    for ok, what, value in (
        (0.0 < alpha < 1.0, "alpha must be between 0 and 1", alpha),
        (0.0 <= max_regression < math.inf, "max_regression must be a fraction >= 0 (0.05 = 5%)", max_regression),
        (min_samples >= 1, "min_samples must be at least 1", min_samples),
        (max_spread > 0.0, "max_spread must be > 0", max_spread),
    ):
        if not ok:
            raise ValueError(f"{what}, not {value!r}")


def _spread_doubt(base: np.ndarray, new: np.ndarray, max_spread: float, apart: bool) -> tuple[str, str]:
    """(why the spread makes the medians incomparable, or ''; the note when a clear separation overrides it)."""
    despite = ""
    for label, s in (("the baseline's", base), ("this run's", new)):
        spread = rel_spread(s)
        if not spread <= max_spread and apart:
            despite = (
                f" {label.capitalize()} rounds vary by {100 * spread:.0f}% of the median, but even the fast new "
                "rounds (10th percentile) are slower than the slow baseline ones (90th) by more than that."
            )
        elif not spread <= max_spread:
            return (
                f"Spread too high: {label} rounds vary by {100 * spread:.0f}% of the median (IQR/median) "
                f"> {100 * max_spread:.0f}%, so the medians cannot be compared reliably."
            ), despite
    return "", despite


def _u_threshold(n: int, alpha: float) -> float:
    """t such that a one-sided test with n rounds per side (no ties) rejects at alpha iff U > t."""
    total = math.comb(2 * n, n)
    if total <= EXACT_MAX_ARRANGEMENTS:
        at_least = np.cumsum(_u_counts(n, n)[::-1])[::-1]  # at_least[u] = #arrangements with U >= u
        ok = np.nonzero(at_least / total < alpha)[0]
        return float(ok[0]) - 0.5 if ok.size else math.inf
    return n * n / 2.0 + 0.5 + _norm_ppf(1.0 - alpha) * math.sqrt(n * n * (2 * n + 1) / 12.0)


def gate_power(
    n: int, sigma: float, *, slowdown: float, max_regression: float, alpha: float, trials: int = 400, seed: int = 0
) -> float:
    """Simulated chance that the gate flags `slowdown` with n rounds per side (log-normal rounds, log-sd sigma).

    Both of the gate's conditions are simulated together: the one-sided Mann–Whitney test at
    alpha and the median ratio above 1 + max_regression. Fixed seed: the same inputs give the same answer.
    """
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, sigma, (trials, n))
    new = rng.normal(math.log1p(slowdown), sigma, (trials, n))
    # U from one sort of each trial's rounds: the new rounds' ranks summed (ties have probability 0)
    order = np.concatenate([base, new], axis=1).argsort(axis=1)
    u = (order >= n) @ np.arange(1, 2 * n + 1) - n * (n + 1) / 2.0
    big_enough = np.median(new, axis=1) - np.median(base, axis=1) > math.log1p(max_regression)
    return float(np.mean((u > _u_threshold(n, alpha)) & big_enough))


def _rounds_guess(sigma: float, slowdown: float, max_regression: float, alpha: float) -> int:
    """Rounds per side for TARGET_POWER by the large-sample formulas, where `_rounds_for_power` starts looking: the
    Mann–Whitney test's (Noether's: P(new > base) = p, n = (z_alpha + z_power)^2 / (6 (p - 1/2)^2)) and the median
    ratio's (a median of n normal rounds has variance pi sigma^2 / 2n), the larger."""
    shift, margin = math.log1p(slowdown), math.log1p(max_regression)
    z_power = _norm_ppf(TARGET_POWER)
    p = 1.0 - _norm_sf(shift / (sigma * math.sqrt(2.0)))
    test = (_norm_ppf(1.0 - alpha) + z_power) ** 2 / (6.0 * max(p - 0.5, 1e-9) ** 2)
    median = math.pi * (sigma * z_power / max(shift - margin, 1e-9)) ** 2
    return max(1, math.ceil(max(test, median)))


def _rounds_for_power(sigma: float, max_regression: float, alpha: float, have: int) -> int:
    """Rounds per side that flag a slowdown of 2 × max_regression TARGET_POWER of the time, for a run whose `have`
    rounds fall short (at most _MAX_ROUNDS): the large-sample guess (`_rounds_guess`), or a tenth more at a time
    until the simulation confirms it. The warning says "about": the simulated power of 400 trials moves by a few
    points from one n to the next, so the least n that reaches the target is itself only known to ~10%.

    Each simulation at hundreds of rounds takes 10-40 ms on the dev VM; a search up from `have` ran ~15 of them (a
    noisy test's comparison spent 0.1-0.5 s on it, twice: this run's rounds and the baseline's), this one 1-3."""

    def power(n: int) -> float:
        return gate_power(n, sigma, slowdown=2 * max_regression, max_regression=max_regression, alpha=alpha)

    floor = max(have, min_rounds_for_significance(alpha) - 1)
    guess = _rounds_guess(sigma, 2 * max_regression, max_regression, alpha)
    if guess > 1.25 * _MAX_ROUNDS:  # (the guess errs low, by up to a fifth on the dev VM's grid): past the cap
        return _MAX_ROUNDS
    n = min(_MAX_ROUNDS, max(floor + 1, guess))
    while power(n) < TARGET_POWER:
        if n >= _MAX_ROUNDS:
            return _MAX_ROUNDS
        n = min(_MAX_ROUNDS, math.ceil(n * 1.1))
    return n


def gate_blind_spots(
    samples_ms: Sequence[float] | np.ndarray, *, alpha: float, timer_resolution_ns: float | None = None
) -> list[str]:
    """The warnings of `noise_warnings` that hold whatever the spread: rounds too short for the timer, or too
    few for a one-sided Mann–Whitney test at `alpha` to ever reach significance (the gate can never fire)."""
    s = np.asarray(samples_ms, dtype=float).ravel()
    s = s[np.isfinite(s)]
    if s.size == 0:
        return []
    out: list[str] = []
    res_ns = (
        timer_resolution_ns if timer_resolution_ns is not None else time.get_clock_info("perf_counter").resolution * 1e9
    )
    shortest_ns = float(s.min()) * 1e6
    if res_ns > 0 and shortest_ns < MIN_TICKS_PER_ROUND * res_ns:
        out.append(
            f"Rounds too short: the shortest took {shortest_ns / 1e3:.3g} µs, under {MIN_TICKS_PER_ROUND}× the "
            f"timer resolution ({res_ns:.3g} ns), so timer granularity is a visible part of each sample; "
            "do more work per round."
        )
    need = min_rounds_for_significance(alpha)
    if s.size < need:
        out.append(
            f"Too few rounds: with {s.size} rounds per side this test can never detect a regression at "
            f"alpha={alpha:g}; use at least {need}."
        )
    return out


def noise_warnings(
    samples_ms: Sequence[float],
    *,
    max_regression: float,
    alpha: float,
    timer_resolution_ns: float | None = None,
) -> list[str]:
    """pyperf-style warnings about one run's round latencies: what makes a comparison of them weak.

    Relative spread (IQR/median) above 10%; rounds shorter than 1000 ticks of the timer
    (default: `time.perf_counter`'s resolution); fewer rounds than a one-sided Mann–Whitney test
    at `alpha` needs to reach significance at all; and, when the spread allows an estimate,
    fewer rounds than needed to flag a slowdown of twice the allowed regression 95% of the time.
    """
    s = np.asarray(samples_ms, dtype=float).ravel()
    s = s[np.isfinite(s)]
    if s.size == 0:
        return ["No rounds were measured, so there is nothing to compare."]
    out: list[str] = []
    spread = rel_spread(s)
    if spread > NOISY_SPREAD:
        out.append(
            f"Noisy: the rounds vary by {100 * spread:.1f}% of the median (IQR/median > {100 * NOISY_SPREAD:.0f}%); "
            "the machine was busy or the rounds do different work. Close other load, pin the CPU frequency, "
            "or run more rounds."
        )
    out += gate_blind_spots(s, alpha=alpha, timer_resolution_ns=timer_resolution_ns)
    if s.size >= min_rounds_for_significance(alpha) and spread > 0 and math.isfinite(spread) and max_regression > 0:
        sigma = spread / _IQR_PER_SIGMA
        power = gate_power(int(s.size), sigma, slowdown=2 * max_regression, max_regression=max_regression, alpha=alpha)
        if power < TARGET_POWER - 0.05:  # a margin for the simulation's own noise
            want = _rounds_for_power(sigma, max_regression, alpha, int(s.size))
            more = "more than " if want >= _MAX_ROUNDS else "about "
            out.append(
                f"Low power: with a spread of {100 * spread:.1f}% and {s.size} rounds per side, a slowdown of "
                f"{100 * 2 * max_regression:.3g}% (twice the allowed {100 * max_regression:.3g}%) would be flagged "
                f"only about {100 * power:.0f}% of the time; {more}{want} rounds per side would flag it "
                f"{100 * TARGET_POWER:.0f}% of the time."
            )
    return out


def compare_metric(name: str, base: float | None, new: float | None, tolerance: float = 0.0) -> MetricChange | None:
    """Compare a deterministic per-round metric; None when it is missing on a side or did not change.

    It regressed when new > base × (1 + tolerance) (tolerance 0: any increase). A change within
    the tolerance, or a decrease, is returned too, not regressed, so the report can say what moved.
    """
    if tolerance < 0 or not math.isfinite(tolerance):
        raise ValueError(f"tolerance for {name} must be a fraction >= 0, not {tolerance!r}")
    if base is None or new is None:
        return None
    b, n = float(base), float(new)
    if not (math.isfinite(b) and math.isfinite(n)):
        return None
    # Per-round means of integer counts can differ in the last bit between runs; ignore that.
    if math.isclose(b, n, rel_tol=1e-9, abs_tol=1e-12):
        return None
    limit = b * (1.0 + tolerance)
    regressed = n > limit and not math.isclose(n, limit, rel_tol=1e-9, abs_tol=1e-12)
    rel = f" ({_pct(n / b - 1.0)})" if b else ""
    allowed = "none allowed" if tolerance == 0 else f"tolerance {100 * tolerance:.3g}%"
    if regressed:
        msg = f"{name} rose from {b:.6g} to {n:.6g}{rel}, {allowed}."
    elif n > b:
        msg = f"{name} rose from {b:.6g} to {n:.6g}{rel}, within the {allowed}."
    else:
        msg = f"{name} fell from {b:.6g} to {n:.6g}{rel}."
    return MetricChange(name, b, n, float(tolerance), regressed, msg)
