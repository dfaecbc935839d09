"""`compare(before, after)`: two results of `measure()` (or `profile()`) judged as `inferscope compare` judges two
reports: the round latencies, the deterministic metrics, the environments."""

from __future__ import annotations

from .arguments import check_compare_argument
from .baseline import BaselineEntry, fingerprint
from .regression import compare_to_baseline
from .results import RegressionVerdict, TestResult


def compare(
    before: TestResult, after: TestResult, *, max_regression: float | str = 0.05, alpha: float = 0.01
) -> RegressionVerdict:
    """Judge `after` against `before`: regressed when its rounds are significantly slower (one-sided Mann-Whitney U at
    `alpha`) and its median more than `max_regression` slower (0.05 or "5%"), as `inferscope compare` and the plugin's
    baselines judge; `verdict.message()` says why. A partial result (its body raised) is not compared: inconclusive.
    """
    for label, result in (("before", before), ("after", after)):
        if not isinstance(result, TestResult):
            check_compare_argument(label, result)
    allowed = float(check_compare_argument("max_regression", max_regression))
    level = float(check_compare_argument("alpha", alpha))
    entry = BaselineEntry.from_result(before, fingerprint(before.environment), timestamp="")
    verdict = compare_to_baseline(entry, after, max_regression=allowed, alpha=level, baseline_name=before.nodeid)
    partial = [(label, r.partial_reason) for label, r in (("before", before), ("after", after)) if r.partial_reason]
    if partial:  # as the plugin's gate and `inferscope compare`: a run whose body raised is neither saved nor compared
        label, reason = partial[0]
        verdict.verdict = "inconclusive"
        verdict.reason = (
            f"not compared: {label} raised ({reason.splitlines()[0]}), so its rounds are partial; a partial run is "
            "neither saved as a baseline nor compared."
        )
    return verdict
