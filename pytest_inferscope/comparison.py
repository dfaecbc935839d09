"""What comparing two runs of a test gives: the verdict on its round latencies and the deterministic metrics that
changed. Plain data, without numpy: `results` holds them, which the plugin imports whether or not it profiles
anything; `stats` computes them."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass
from typing import Any


@dataclass
class Comparison:
    """The verdict on one test's round latencies, base run against new run, with the numbers behind it."""

    verdict: str  # one of VERDICTS
    ratio: float  # median(new) / median(base); NaN when a side has no rounds
    ci_low: float
    ci_high: float
    p_value: float  # of the one-sided test in the verdict's direction (slower, unless faster)
    reason: str
    base_median: float
    new_median: float
    base_n: int
    new_n: int
    alpha: float = 0.01
    max_regression: float = 0.05
    confidence: float = 0.99

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-safe data (NaN becomes None)."""
        return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Comparison:
        floats = {f.name for f in dataclasses.fields(cls) if f.type in ("float", float)}
        known = {f.name for f in dataclasses.fields(cls)}
        kw: dict[str, Any] = {k: (math.nan if k in floats and v is None else v) for k, v in data.items() if k in known}
        return cls(**kw)


@dataclass
class MetricChange:
    """A deterministic metric (kernel launches, bytes copied per round) that differs from the baseline."""

    name: str
    base: float
    new: float
    tolerance: float  # allowed relative increase; 0 = must not grow at all
    regressed: bool
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MetricChange:
        return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})
