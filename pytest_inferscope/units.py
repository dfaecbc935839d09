"""Numbers as every output writes them: a failed check's message, the reports, the terminal summary.

Below every pipeline stage (nothing here imports the package), so that the checks, the regression verdicts and the
reporters share one formatter per unit (`reporters/fmt.py` re-exports them): a check message once said 12.092 ms
beside the summary's 12.1, and the reports' Checks table 12.09 beside the message's 12.1.
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
    return _apart(x, beside, 1 if big >= 9.995 else 2 if big >= 1 else 3)


def fmt_fixed(x: float, places: int, beside: float | None = None, sep: str = "") -> str:
    """`x` to `places` decimals (`sep` "," for thousands), or to three significant digits where those would write it
    as zero (a limit of 1e-9 read "0.000"); beside another number that would read alike, as `fmt_ms`, both get the
    decimals that tell them apart (30.004% against a limit of 30.000%, not "30.0% exceeds limit 30.0%")."""
    text = _fixed(x, places, sep)
    if beside is None or not math.isfinite(beside) or x == beside or _fixed(beside, places, sep) != text:
        return text
    return _apart(x, beside, places, sep)


def _fixed(x: float, places: int, sep: str = "") -> str:
    if x != 0 and abs(x) < 0.5 * 10**-places:
        return f"{x:.3g}"
    return f"{x:{sep}.{places}f}"


def _apart(x: float, beside: float, places: int, sep: str = "") -> str:
    """`x` with the fewest decimals from `places` on that write it apart from `beside`."""
    while places < 15 and f"{x:.{places}f}" == f"{beside:.{places}f}":
        places += 1
    text = f"{x:{sep}.{places}f}"
    return f"{x:.3g}" if x != 0 and float(text.replace(",", "")) == 0 else text


#: The unit of each numeric threshold's value and limit: what a check's message and the reports' Checks table write
#: (`fmt_threshold`). A percentage is of a fraction (max_gpu_idle=0.3 is 30.0%); max_regression's is the median's change
#: its limit allows; expect_fix's, the share of the round the best fix saves.
THRESHOLD_UNITS = {
    "max_latency_ms": ("ms", 0),  # fmt_ms's own digits
    "max_host_memory_mb": ("MB", 1),
    "max_host_memory_added_mb": ("MB", 1),
    "max_gpu_memory_mb": ("MB", 1),
    "max_gpu_idle": ("%", 1),
    "max_transfer_fraction": ("%", 1),
    "max_overhead": ("%", 2),  # a profiler's overhead is a few percent at most
    "max_regression": ("%", 1),
    "expect_fix": ("%", 1),
    "max_kernel_launches": ("", 0),  # counts, with thousands separators
    "max_h2d_bytes": ("", 0),
    "max_syncs": ("", 0),
}


def fmt_threshold(key: str, x: object, beside: object = None) -> str | None:
    """A threshold's value or limit with its unit ("12.1 ms", "447.2 MB", "42.1%", "1,204"), apart from `beside` (the
    limit, or the value) where they would read alike; None where `key` has no unit here or `x` is not a number."""
    if key not in THRESHOLD_UNITS or not _number(x):
        return None
    unit, places = THRESHOLD_UNITS[key]
    value = float(x)  # type: ignore[arg-type]  # a number, by _number
    other = float(beside) if _number(beside) else None  # type: ignore[arg-type]
    if not math.isfinite(value):
        return "n/a"
    if unit == "ms":
        return f"{fmt_ms(value, other)} ms"
    if unit == "MB":
        return f"{fmt_fixed(value, places, other)} MB"
    if unit == "%":
        return f"{fmt_fixed(100 * value, places, None if other is None else 100 * other)}%"
    return fmt_fixed(value, places, other, sep=",")


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


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


def fmt_count(n: int, noun: str) -> str:
    """A count and its noun, the noun plural but for one: '1 test', '2 tests' (not '1 test(s)')."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def fmt_pct(share: float | None) -> str:
    """A fraction as a percentage: 0.357 -> '35.7%'."""
    if share is None or not math.isfinite(share):
        return "n/a"
    if 0 < abs(share) < 0.001:
        return "<0.1%"
    return f"{share * 100:.1f}%"
