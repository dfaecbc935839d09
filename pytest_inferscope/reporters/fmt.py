"""The formatting every report and the terminal summary share: milliseconds, shares, confidences, values, the
verdict's label. Without Jinja2, which only the report files need (the terminal summary of a session that writes
none imports this)."""

from __future__ import annotations

import json
import math
from typing import Any

from ..results import TestResult


def verdict_label(result: TestResult) -> str:
    """'pass', 'FAIL (key, key)' naming the failed checks, or 'partial'."""
    if result.verdict == "partial":
        return "partial"
    failed = [c.key for c in result.failed_checks]
    if result.verdict == "fail" or failed:
        return f"FAIL ({', '.join(failed)})" if failed else "FAIL"
    return result.verdict


def fmt_ms(x: float | None) -> str:
    """Milliseconds with about three significant digits: 87.4, 3.14, 0.123, <0.001."""
    if x is None or not math.isfinite(x):
        return "n/a"
    a = abs(x)
    if a == 0:
        return "0"
    if a >= 9.995:
        return f"{x:.1f}"
    if a >= 1:
        return f"{x:.2f}"
    if a >= 0.001:
        return f"{x:.3f}"
    return "<0.001" if x > 0 else ">-0.001"


def fmt_pct(share: float | None) -> str:
    """A fraction as a percentage: 0.357 -> '35.7%'."""
    if share is None or not math.isfinite(share):
        return "n/a"
    if 0 < abs(share) < 0.001:
        return "<0.1%"
    return f"{share * 100:.1f}%"


def fmt_conf(c: float | None) -> str:
    """A confidence in [0, 1] as a whole percentage."""
    return "n/a" if c is None or not math.isfinite(c) else f"{c * 100:.0f}%"


def fmt_value(v: Any) -> str:
    """Any evidence, limit or measured value, compactly: floats to 4 significant digits."""
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "n/a" if not math.isfinite(v) else f"{v:.4g}"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, list | tuple):
        shown = ", ".join(fmt_value(x) for x in v[:8])
        return f"[{shown}{', …' if len(v) > 8 else ''}]"
    if isinstance(v, dict):
        return json.dumps(v, sort_keys=True, default=str)
    return str(v)
