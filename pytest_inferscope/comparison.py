"""What comparing two runs of a test gives: the verdict on its round latencies, the deterministic metrics that
changed, and the test's verdict against its baseline that holds both (`RegressionVerdict`). Plain data, without
numpy: `results` holds them, which the plugin imports whether or not it profiles anything; `stats` computes them."""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from .serial import SELF_SERIAL, plain
from .units import fmt_ms


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


@dataclass
class RegressionVerdict:
    """One test against its baseline entry: the verdict, the latency comparison and everything else that moved."""

    nodeid: str
    verdict: str  # "regressed" | "improved" | "unchanged" | "inconclusive"
    reason: str
    latency: Comparison
    metric_changes: list[MetricChange] = field(default_factory=list)
    bottleneck_before: str = ""
    bottleneck_after: str = ""
    fingerprint_differences: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    baseline_name: str = ""
    baseline_timestamp: str = ""
    steady: str = ""  # which rounds the speed probe let through, when it was used
    noise_floor: float | None = None  # ratio a shift must clear, from the baseline's history
    slot_change: str = ""  # "baseline on GPU 0, this run on GPU 1": compared across alike GPUs (baseline.SLOT_KEYS)

    @property
    def failed(self) -> bool:
        return self.verdict == "regressed"

    def __repr__(self) -> str:
        """One line, as a notebook shows what `compare()` returns: the verdict and the medians (`message()`: why)."""
        c = self.latency
        if not math.isfinite(c.ratio):
            return f"<RegressionVerdict {self.nodeid!r}: {self.verdict}>"
        before, after = fmt_ms(c.base_median, c.new_median), fmt_ms(c.new_median, c.base_median)
        p = f", p={c.p_value:.2g}" if math.isfinite(c.p_value) else ""
        change = f"{before} → {after} ms ({100 * (c.ratio - 1):+.1f}%{p})"
        return f"<RegressionVerdict {self.nodeid!r}: {self.verdict}, median {change}>"

    @property
    def bottleneck_changed(self) -> bool:
        return self.bottleneck_before != self.bottleneck_after

    def to_dict(self) -> dict[str, Any]:
        """Plain data (for report.json and xdist's workeroutput; `serial.plain` calls it for a TestResult)."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["latency"] = self.latency.to_dict()
        d["metric_changes"] = [m.to_dict() for m in self.metric_changes]
        d["bottleneck_changed"] = self.bottleneck_changed
        return typing.cast(dict[str, Any], plain(d))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RegressionVerdict:
        known = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in data.items() if k in known}
        kw["latency"] = Comparison.from_dict(data["latency"])
        kw["metric_changes"] = [MetricChange.from_dict(m) for m in data.get("metric_changes", [])]
        return cls(**kw)

    def message(self) -> str:
        """The explanation for a test failure (or a report line): the verdict and the evidence behind it."""
        c = self.latency
        against = f"baseline {self.baseline_name!r}" if self.baseline_name else "the baseline"
        if self.baseline_timestamp:
            against += f" (recorded {self.baseline_timestamp})"
        head = {
            "regressed": "Performance regression against",
            "improved": "Faster than",
            "unchanged": "No significant change against",
            "inconclusive": "Inconclusive comparison with",
        }[self.verdict]
        lines = [f"{head} {against}: {self.reason}"]
        if math.isfinite(c.ratio):
            before, after = fmt_ms(c.base_median, c.new_median), fmt_ms(c.new_median, c.base_median)
            lines.append(
                f"  latency: median {before} ms ({c.base_n} rounds) → {after} ms "
                f"({c.new_n} rounds), {100 * (c.ratio - 1):+.1f}% (ratio {c.ratio:.3f}, "
                f"{100 * c.confidence:.0f}% CI {c.ci_low:.3f}–{c.ci_high:.3f}); one-sided Mann–Whitney "
                f"p={c.p_value:.2g} (alpha {c.alpha:g}); allowed regression {100 * c.max_regression:.3g}%."
            )
        if self.steady:
            lines.append(f"  machine speed: {self.steady}.")
        if self.noise_floor is not None:
            lines.append(f"  run-to-run noise floor: ratio {self.noise_floor:.3f} (from the baseline's history).")
        lines += [f"  metric: {m.message}" for m in self.metric_changes]
        if self.bottleneck_changed:
            lines.append(f"  bottleneck: {self.bottleneck_before or 'none'} → {self.bottleneck_after or 'none'}.")
        lines += [f"  environment: {d}" for d in self.fingerprint_differences]
        lines += [f"  GPU: another of the same model ({self.slot_change})."] if self.slot_change else []
        lines += [f"  warning: {w}" for w in self.warnings]
        return "\n".join(lines)


#: Serialises itself (its own to_dict / from_dict: NaN kept as None and back).
SELF_SERIAL.add(RegressionVerdict)
