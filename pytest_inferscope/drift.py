"""Machine drift: a speed probe timed between rounds, and the run-to-run noise floor of a baseline's history.

Why: a baseline and a candidate are measured in different runs, and a shared machine changes
speed between them (on the 2-core development VM the same code ran at two speeds, 1.8x apart,
switching every 50 to 200 ms as the other vCPU came and went). Inside one run the rounds then
look tight, so a one-sided test on the rounds calls a slower *machine* slower *code*. Two
defences, both measured in docs/regression-power.md:

- **Steady rounds.** A fixed reference workload (`probe_ms`, about 0.05 ms on an idle core) is
  timed before the first measured round and after every one, so round i lies between readings
  i and i + 1. A round is *steady* when both readings are within `PROBE_TOLERANCE` of the
  reference speed (a low percentile of all readings of both runs); the gate compares steady
  rounds only. Rounds are selected, not rescaled, so nothing assumes that the test slows down
  by the same factor as the probe; scaling is used only to *take back* a verdict (a shift that
  vanishes once each round is scaled by the readings around it is put down to the machine).
  The probe sees the host CPU only, so for rounds that are not CPU-bound (`probe_applies`:
  GPU-bound, or mostly sleeping or waiting) it is reported, not used.
- **Noise floor.** With at least `MIN_HISTORY` saved runs of a test, the spread of their
  medians is the drift the test shows between runs; a shift is only called a regression when
  the new run's median also lies beyond `z(1 - alpha) x sqrt(1 + 1/k) x` that spread from the
  centre of the k saved runs.

A busy spell would leave too few steady rounds, so `measure_steady` (the plugin's round loop
when the probe runs) re-measures: it keeps running rounds past the requested number until that
many are steady, up to a cap (`--inferscope-round-cap`), so that a busy machine costs time
rather than an inconclusive verdict. Every round that ran is kept; the gate still selects.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass

import numpy as np

from .units import fmt_ms

#: A round is steady when the probe readings on both sides of it are at most this much slower
#: than the reference speed (0.20: 20%). Chosen from measurements: 15% set aside so many rounds
#: that a quarter of the trials were inconclusive, 30% let contended rounds through.
PROBE_TOLERANCE = 0.20
#: The reference speed: this percentile of the probe readings of both runs together.
PROBE_REFERENCE_PERCENTILE = 10.0
#: Bottleneck classes whose rounds are spent on the GPU: a host CPU probe says nothing about them.
GPU_SIDE = ("gpu_bound", "transfer_bound")
#: The probe is used when the test thread worked (on a core, or waiting for one) at least this
#: fraction of the round time (analyzer metric cpu.test_thread_working): only then does the
#: speed of the host CPU set the round's latency. Rounds that sleep, wait on I/O or on the GPU
#: would lose rounds to the selection for nothing.
CPU_BOUND_WORKING = 0.5
#: Saved runs of a test needed before their spread is used as a noise floor.
MIN_HISTORY = 3
#: The floor uses only this many of the latest saved runs, so that a speed change merged on main
#: long ago (a step in the history) stops widening the floor and moving its centre.
FLOOR_WINDOW = 10

_TABLE = tuple(range(64))
_PROBE_ITERATIONS = 300  # fixed forever within a plugin version: readings are compared across runs


def _reference_work(n: int = _PROBE_ITERATIONS) -> int:
    """The probe's body: interpreter dispatch, dict and tuple access, small-integer arithmetic.

    Deliberately not the workload of the power study (an integer loop), so the study does not
    test the probe against itself.
    """
    d: dict[int, int] = {}
    s = 0
    for i in range(n):
        d[i & 63] = _TABLE[(i * 7) & 63]
        s += d.get((i * 13) & 63, 0) ^ i
    return s


def probe_ms() -> float:
    """One reading of the speed probe: the wall-clock time of the fixed reference workload, in ms."""
    t0 = time.perf_counter()
    _reference_work()
    return (time.perf_counter() - t0) * 1e3


def probe_applies(bottleneck: str, working: float | None) -> str:
    """'' when a host CPU probe says something about these rounds, else why not (a clause)."""
    if bottleneck in GPU_SIDE:
        return f"this test is {bottleneck}: its time is spent on the GPU"
    if working is not None and math.isfinite(working) and working < CPU_BOUND_WORKING:
        return (
            f"the test thread worked only {100 * working:.0f}% of the round time (the rest it slept or waited), "
            "so the host CPU's speed does not set its latency"
        )
    return ""


def probe_fits(probe: Sequence[float], rounds: int) -> bool:
    """Whether `probe` holds one reading before each of `rounds` rounds and one after the last."""
    return rounds > 0 and len(probe) == rounds + 1 and all(math.isfinite(x) and x > 0 for x in probe)


def probe_reference(*probes: Sequence[float]) -> float:
    """The machine's usual speed: a low percentile of every reading given (NaN when there are none)."""
    pooled = np.concatenate([np.asarray(p, dtype=float).ravel() for p in probes]) if probes else np.array([])
    return float(np.percentile(pooled, PROBE_REFERENCE_PERCENTILE)) if pooled.size else math.nan


def steady_mask(probe: Sequence[float] | np.ndarray, reference_ms: float, tolerance: float | None = None) -> np.ndarray:
    """Per round, whether both readings around it were within `tolerance` (PROBE_TOLERANCE) of the reference."""
    tolerance = PROBE_TOLERANCE if tolerance is None else tolerance
    if not tolerance > 0:
        raise ValueError(f"tolerance must be > 0, not {tolerance!r}")
    ok = np.asarray(probe, dtype=float) <= reference_ms * (1.0 + tolerance)
    return ok[:-1] & ok[1:]


@dataclass
class Steady:
    """The rounds of a base and a new run that the probe calls steady, and what it said.

    `*_scaled_ms` are the same rounds, each divided by the mean of the two readings around it
    and multiplied by the reference: the latency the round would have had at the reference
    speed *if* the test slowed down exactly as the probe did. The gate uses them only to take a
    verdict back (a shift that the probe's own drift explains), never to make one.
    """

    base_ms: list[float]
    new_ms: list[float]
    reference_ms: float
    base_total: int
    new_total: int
    base_scaled_ms: list[float]
    new_scaled_ms: list[float]

    def describe(self) -> str:
        return (
            f"{len(self.base_ms)} of the baseline's {self.base_total} rounds and {len(self.new_ms)} of this run's "
            f"{self.new_total} ran at the machine's usual speed (a reference workload within "
            f"{100 * PROBE_TOLERANCE:.0f}% of {1e3 * self.reference_ms:.0f} µs on both sides of the round)"
        )


def steady_rounds(
    base_ms: Sequence[float], base_probe: Sequence[float], new_ms: Sequence[float], new_probe: Sequence[float]
) -> Steady | None:
    """The steady rounds of both runs, or None when a side has no fitting probe readings."""
    if not (probe_fits(base_probe, len(base_ms)) and probe_fits(new_probe, len(new_ms))):
        return None
    ref = probe_reference(base_probe, new_probe)
    kept, scaled = [], []
    for samples, probe in ((base_ms, base_probe), (new_ms, new_probe)):
        s, p = np.asarray(samples, dtype=float), np.asarray(probe, dtype=float)
        keep = steady_mask(p, ref)
        kept.append([float(x) for x in s[keep]])
        scaled.append([float(x) for x in (s / ((p[:-1] + p[1:]) / 2.0) * ref)[keep]])
    return Steady(kept[0], kept[1], ref, len(base_ms), len(new_ms), scaled[0], scaled[1])


@dataclass
class Measured:
    """What `measure_steady` did: the probe readings around every round it ran, and why it stopped."""

    probe_ms: list[float]
    requested: int
    steady: int  # rounds within the band of the reference at the end of the loop
    cpu_share: float  # the test thread's CPU time over the rounds' wall time
    capped: bool  # stopped at the cap with fewer than `requested` steady rounds

    @property
    def ran(self) -> int:
        return len(self.probe_ms) - 1

    @property
    def extra(self) -> int:
        return max(0, self.ran - self.requested)


def extra_rounds_note(ran: int, requested: int) -> str:
    """Why a test ran more rounds than requested (for reports and failure messages); '' when it did not."""
    if ran <= requested:
        return ""
    return (
        f"{ran} rounds ran, {ran - requested} more than the {requested} requested: the speed probe found the machine "
        "busy during some of them, so rounds were added until enough ran at its usual speed (--inferscope-round-cap); "
        "the latency statistics cover all of them, the regression gate only the steady ones"
    )


def run_queue_clock() -> Callable[[], float]:
    """A clock of the seconds the calling thread has waited on the run queue, runnable but not running.

    Linux keeps it in /proc/thread-self/schedstat (second field, ns); elsewhere the clock reads 0.
    """
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
    except OSError:
        return lambda: 0.0

    def read() -> float:
        try:
            return int(os.pread(fd, 128, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0

    read.close = lambda: os.close(fd)  # type: ignore[attr-defined]
    return read


def measure_steady(
    run_round: Callable[[int], float | None],
    rounds: int,
    max_rounds: int,
    *,
    prior: Sequence[float] = (),
    probe: Callable[[], float] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.thread_time,
    queue_clock: Callable[[], float] | None = None,
) -> Measured:
    """Run measured rounds `run_round(0)`, `run_round(1)`, ... with a probe reading before the first and after each.

    After the requested `rounds`, it goes on while fewer than `rounds` rounds are steady (against
    the reference of `prior`, e.g. the baseline's and this session's readings, and the readings so
    far) and the rounds are CPU-bound (in the median round, the thread's CPU time is at least
    CPU_BOUND_WORKING of the wall time: otherwise the probe says nothing about them), until
    `max_rounds` have run. Time the thread waited on the run queue (`queue_clock`, by default
    `run_queue_clock()`) counts as work: a CPU-bound test on a loaded machine is runnable but held
    off the CPU, which is the busy moment to make up for, not a test that sleeps. The median round,
    not the total: a round can also wait for the GIL or be charged a wait late.
    `run_round` may return the seconds the round spent in the plugin's end-of-round device wait:
    that time does not count as CPU work, since a host spinning in it burns CPU time while the GPU
    works (a GPU-bound round must not look CPU-bound and be made up for).
    """
    steps = steady_steps(
        rounds, max_rounds, prior=prior, probe=probe, clock=clock, cpu_clock=cpu_clock, queue_clock=queue_clock
    )
    try:
        i = next(steps)
        while True:
            waited = run_round(i)  # (a StopIteration it raises is the body's, not the steps' end)
            try:
                i = steps.send(waited)
            except StopIteration as done:
                return done.value
    finally:
        steps.close()  # a round that raised: the run-queue clock is closed now


def steady_steps(
    rounds: int,
    max_rounds: int,
    *,
    prior: Sequence[float] = (),
    probe: Callable[[], float] | None = None,
    clock: Callable[[], float] = time.perf_counter,
    cpu_clock: Callable[[], float] = time.thread_time,
    queue_clock: Callable[[], float] | None = None,
) -> Generator[int, float | None, Measured]:
    """`measure_steady` as steps, for a driver that awaits its rounds (an `async def` test, schedule.run_async):
    yields each round's index, is sent what `run_round` would return, and returns the `Measured`."""
    probe = probe or probe_ms  # looked up now, so a test can replace drift.probe_ms
    queued = queue_clock or run_queue_clock()
    readings = [probe()]
    shares: list[float] = []
    steady, share = 0, 1.0
    try:
        for i in range(max(rounds, max_rounds)):
            q0, c0, t0 = queued(), cpu_clock(), clock()
            waited = (yield i) or 0.0
            wall, cpu = clock() - t0, max(0.0, cpu_clock() - c0 - waited) + max(0.0, queued() - q0)
            shares.append(min(1.0, cpu / wall) if wall > 0 else 1.0)
            readings.append(probe())
            if i + 1 < rounds:
                continue
            share = float(np.median(shares))
            steady = int(steady_mask(readings, probe_reference(prior, readings)).sum())
            if steady >= rounds or share < CPU_BOUND_WORKING:
                break
    finally:
        getattr(queued, "close", lambda: None)()
    return Measured(readings, rounds, steady, share, capped=steady < rounds and share >= CPU_BOUND_WORKING)


def probe_drift(base_probe: Sequence[float], new_probe: Sequence[float]) -> float:
    """Median probe reading of the new run over the base run's: how much slower the host CPU ran (NaN: unknown)."""
    if not (len(base_probe) and len(new_probe)):
        return math.nan
    b = float(np.median(np.asarray(base_probe, dtype=float)))
    return float(np.median(np.asarray(new_probe, dtype=float))) / b if b > 0 else math.nan


def _z(alpha: float) -> float:
    """The standard normal quantile z(1 - alpha), by bisection on erfc."""
    lo, hi = 0.0, 40.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 * math.erfc(mid / math.sqrt(2.0)) > alpha else (lo, mid)
    return (lo + hi) / 2


@dataclass
class NoiseFloor:
    """How far a test's median moves between saved runs, and the shift from their centre a new run must clear."""

    runs: int
    log_sd: float  # sample standard deviation of the log medians of the saved runs
    floor: float  # smallest ratio to `centre` (> 1) that counts as beyond run-to-run drift at this alpha
    centre: float = math.nan  # geometric mean of the saved runs' medians (ms)

    def describe(self) -> str:
        return (
            f"across the {self.runs} saved runs of this test its median moves by ±{100 * math.expm1(self.log_sd):.1f}% "
            f"(log-sd) around {fmt_ms(self.centre)} ms, so only a median beyond {self.floor:.3f}x that (or below "
            f"{1 / self.floor:.3f}x) stands out from run-to-run drift"
        )


def noise_floor(medians: Sequence[float], alpha: float) -> NoiseFloor | None:
    """The noise floor from the medians of a test's saved runs; None with fewer than MIN_HISTORY usable runs.

    The new run is one more draw from the runs' distribution, compared with the centre (mean log
    median) of the k saved runs, so the log ratio has a standard deviation of sqrt(1 + 1/k) x the
    runs' log-sd; a one-sided shift stands out at `alpha` beyond z(1 - alpha) times that. (Against
    the latest run alone it would be sqrt(2): a longer history lowers the floor towards the drift
    itself.) With only a few runs the log-sd itself is rough; saving more runs makes it steadier.
    """
    m = np.asarray([x for x in medians if math.isfinite(x) and x > 0], dtype=float)
    if m.size < MIN_HISTORY:
        return None
    logs = np.log(m)
    sd = float(np.std(logs, ddof=1))
    spread = _z(alpha) * math.sqrt(1.0 + 1.0 / m.size) * sd
    return NoiseFloor(int(m.size), sd, math.exp(spread), float(np.exp(logs.mean())))
