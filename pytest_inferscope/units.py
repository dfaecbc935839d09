"""Milliseconds as every output writes them: a failed check's message, the reports, the terminal summary.

Below every pipeline stage (nothing here imports the package), so that the checks, the regression verdicts and the
reporters share one formatter (`reporters/fmt.py` re-exports it): a check message once said 12.092 ms beside the
summary's 12.1.
"""

from __future__ import annotations

import math


def fmt_ms(x: float | None, beside: float | None = None) -> str:
    """Milliseconds with about three significant digits: 87.4, 3.14, 0.123, <0.001.

    `beside`: another number written next to this one (a limit, the other median of a comparison). Where three
    digits would write the two alike (12.34 against a limit of 12.3: "12.3 ms exceeds limit 12.3 ms"), both get the
    decimals that tell them apart (12.34, 12.30); a value that would then read 0 is written to three significant
    digits (1e-09 beside 0.0004). Apart already, each is written as alone.
    """
    if x is None or not math.isfinite(x):
        return "n/a"
    text = _alone(x)
    if beside is None or not math.isfinite(beside) or x == beside or _alone(beside) != text:
        return text
    big = max(abs(x), abs(beside))
    places = 1 if big >= 9.995 else 2 if big >= 1 else 3
    while places < 15 and f"{x:.{places}f}" == f"{beside:.{places}f}":
        places += 1
    text = f"{x:.{places}f}"
    return f"{x:.3g}" if x != 0 and float(text) == 0 else text


def _alone(x: float) -> str:
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
