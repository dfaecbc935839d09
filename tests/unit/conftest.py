"""Fixtures the analyzer's tests on recorded traces share."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

#: (slow trace, fixed trace) -> (the fixed variant's kernel speed-up, the replay's saving at that speed-up in ms,
#: the measured saving in ms).
AtSpeedup = Callable[[Path, Path], tuple[float, float, float]]


@pytest.fixture
def replay_at_kernel_speedup() -> AtSpeedup:
    """A fix that makes the kernels faster (bf16), replayed on the slow variant's rounds at the speed-up its fixed
    variant's kernels show: the simulated saving beside the measured one (the fixed rounds' mean against the slow
    rounds' unchanged replay)."""
    from pytest_inferscope.analyzer import Context
    from pytest_inferscope.analyzer.whatif import WhatIf, faster_gpu, round_graphs, simulate
    from pytest_inferscope.events import Kind, RawTrace
    from pytest_inferscope.merger import merge

    def replay(slow: Path, fixed: Path) -> tuple[float, float, float]:
        graphs = [round_graphs(Context(merge(RawTrace.load(str(p)))))[0] for p in (slow, fixed)]
        kernel_ns = [sum(o.dur for g in gs for o in g.ops if o.kind == Kind.KERNEL) / len(gs) for gs in graphs]
        factor = kernel_ns[0] / kernel_ns[1]
        t = simulate(graphs[0], [WhatIf("faster kernels", "gpu_bound", "", faster_gpu(factor))])
        fixed_ms = sum(g.measured_ns for g in graphs[1]) / len(graphs[1]) / 1e6
        return factor, t.rows[0].saved_ms, t.replay_ms - fixed_ms

    return replay
