"""What the stack sampler's thread costs a launch-heavy call, against a sampler that needs no second thread (issue 16).

The plugin's sampler is a Python thread that wakes every interval and reads the test thread's stack with
`sys._current_frames()`: it needs the GIL, which the test thread holds while it runs Python (a launch-heavy
model's forward dispatching its ops), so every sample is a forced GIL hand-over and back. A sampler that
runs in the test thread needs none: a timer signal (`signal.setitimer`, wall clock) whose Python handler
CPython runs in the main thread between two bytecodes, with the interrupted frame as its argument.

This script times the same call, each followed by a device synchronise, in blocks taken in turn:

  plain    nothing else running
  thread   a thread like the plugin's: `Event.wait(interval)`, then `sys._current_frames()` and a walk of the
           main thread's frames to a tuple of code ids (what `collectors.cpu.Sampler` does per sample)
  signal   `signal.setitimer(ITIMER_REAL, interval)`: the handler walks the frame it is given, the same way
  clock    the same handler run by the plugin's clock in C (`native/_tick.c`: a C thread that queues a pending call
           on CPython 3.13+, or sends SIGRTMAX-2 to the main thread before), not by ITIMER_REAL
  plugin   the plugin's own `collectors.cpu.Sampler` on its parked `SamplerThread` (the stack recorded, RSS read)
  plugin-norss  the same without its RSS reading (an `os.pread`, which lets the GIL go: a second hand-over)
  plugin-signal the plugin's own `collectors.cpu_tick.SignalSampler` (`--inferscope-sampler=signal`: the clock,
           the stack recorded at the stop, the RSS read in the handler)
  pending  the walk run by the clock's pending calls on every version (nudged by a GIL hand-over before 3.13 where
           pure Python holds them back: `--inferscope-sampler=pending`'s mechanism)
  pending-nop  the same pending calls with a callback that does nothing: the mechanism's own cost, without the walk
  plugin-pending  the plugin's own sampler with `--inferscope-sampler=pending`

Per block: the median and the mean call (a sample lands in some calls only: the mean holds all of its cost);
per mode: the median over blocks of each one's ratio to the plain block of the same repetition, with the IQR,
and the samples each mode took. Not the plugin's sampler itself: a measure of
the mechanism, so that a design can be chosen before it is built.

    python3 benchmarks/bench_sampler_signal.py --model vit_b16 [--reps 10] [--calls 30]   # on a CUDA machine
    python3 benchmarks/bench_sampler_signal.py --cpu-smoke          # the script, on the CPU (48 small layers)
    python3 benchmarks/bench_sampler_signal.py --modes thread,plugin,pending,pending-nop,plugin-pending
"""

from __future__ import annotations

import argparse
import signal
import statistics
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from _common import header, quartiles

MODES = [
    "plain", "thread", "signal", "clock", "plugin", "plugin-norss", "plugin-signal", "pending", "pending-nop",
    "plugin-pending",
]  # fmt: skip


def walk(frame: FrameType | None) -> tuple[int, ...]:
    ids = []
    while frame is not None:
        ids.append(id(frame.f_code))
        frame = frame.f_back
    return tuple(ids)


class ThreadSampler:
    def __init__(self, interval_s: float) -> None:
        self.interval_s, self.samples = interval_s, 0
        self._stop = threading.Event()
        self._target = threading.main_thread().ident
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ThreadSampler:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            frame = sys._current_frames().get(self._target)
            walk(frame)
            del frame
            self.samples += 1

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class SignalSampler:
    def __init__(self, interval_s: float) -> None:
        self.interval_s, self.samples = interval_s, 0

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        walk(frame)
        self.samples += 1

    def __enter__(self) -> SignalSampler:
        self._previous = signal.signal(signal.SIGALRM, self._handler)
        signal.setitimer(signal.ITIMER_REAL, self.interval_s, self.interval_s)
        return self

    def __exit__(self, *exc: object) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0.0)
        signal.signal(signal.SIGALRM, self._previous)


class ClockSampler(SignalSampler):
    """The same handler, run by the plugin's clock in C instead of the wall-clock timer."""

    def __enter__(self) -> SignalSampler:
        from pytest_inferscope.collectors import cpu_tick as cpu

        assert cpu._tick is not None and cpu.TICK_SIGNAL is not None, cpu.SignalSampler.unavailable()
        self._previous = signal.signal(cpu.TICK_SIGNAL, self._handler)
        signal.siginterrupt(cpu.TICK_SIGNAL, False)
        ident = 0 if cpu._PENDING_CALLS else threading.main_thread().ident or 0
        cpu._tick.start(int(self.interval_s * 1e9), lambda frame: self._handler(0, frame), cpu.TICK_SIGNAL, ident)
        return self

    def __exit__(self, *exc: object) -> None:
        from pytest_inferscope.collectors import cpu_tick as cpu

        assert cpu._tick is not None and cpu.TICK_SIGNAL is not None
        cpu._tick.stop()
        signal.signal(cpu.TICK_SIGNAL, cpu._on_tick)  # the plugin's handler, which drops a late signal


class PendingSampler(SignalSampler):
    """The same walk, run by the plugin's clock as a pending call on every version, nudged before CPython 3.13."""

    nop = False

    def _call(self, frame: FrameType | None) -> None:
        if not self.nop:
            walk(frame)
        self.samples += 1

    def __enter__(self) -> SignalSampler:
        from pytest_inferscope.collectors import cpu_tick

        assert cpu_tick._tick is not None, cpu_tick.SignalSampler.unavailable("pending")
        main = threading.main_thread()
        watch = (main.ident or 0, main.native_id or 0)
        nudge = cpu_tick.nudge_ns(self.interval_s, "pending")
        cpu_tick._tick.start(int(self.interval_s * 1e9), self._call, 0, 0, *watch, nudge)
        return self

    def __exit__(self, *exc: object) -> None:
        from pytest_inferscope.collectors import cpu_tick

        assert cpu_tick._tick is not None
        cpu_tick._tick.stop()


class PendingNopSampler(PendingSampler):
    """The pending calls alone: a callback that walks nothing."""

    nop = True


class PluginSampler:
    """The plugin's own `collectors.cpu.Sampler` on a parked `SamplerThread`, as a pytest session runs it: besides
    the walk, each sample records its stack and reads the process's RSS (`MEMORY_SAMPLE_NS`)."""

    _thread: Any = None

    def __init__(self, interval_s: float) -> None:
        import os

        from pytest_inferscope.buffer import TraceBuffer
        from pytest_inferscope.collectors.cpu import Sampler, SamplerThread

        if PluginSampler._thread is None:
            PluginSampler._thread = SamplerThread()
        self._sampler = Sampler(TraceBuffer(size_mb=8), interval_s * 1000, threading.get_ident(), os.getpid(),
                                PluginSampler._thread)  # fmt: skip
        self.samples = 0

    def __enter__(self) -> PluginSampler:
        self._sampler.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._sampler.stop()
        self.samples = self._sampler.samples


class PluginNoRssSampler(PluginSampler):
    """The plugin's sampler without its RSS reading (`MEMORY_SAMPLE_NS` out of reach): that `os.pread` lets the GIL go,
    so the sampler waits for it a second time to record the reading."""

    def __enter__(self) -> PluginSampler:
        from pytest_inferscope.collectors import cpu

        self._kept, cpu.MEMORY_SAMPLE_NS = cpu.MEMORY_SAMPLE_NS, 1 << 62
        return super().__enter__()

    def __exit__(self, *exc: object) -> None:
        from pytest_inferscope.collectors import cpu

        super().__exit__(*exc)
        cpu.MEMORY_SAMPLE_NS = self._kept


class PluginSignalSampler(PluginSampler):
    """The plugin's `collectors.cpu_tick.SignalSampler`, as `--inferscope-sampler=signal` runs it."""

    def __init__(self, interval_s: float) -> None:
        import os

        from pytest_inferscope.buffer import TraceBuffer
        from pytest_inferscope.collectors.cpu_tick import SignalSampler as Plugins

        self._sampler = Plugins(TraceBuffer(size_mb=8), interval_s * 1000, threading.get_ident(), os.getpid())
        self.samples = 0


class PluginPendingSampler(PluginSampler):
    """The plugin's sampler as `--inferscope-sampler=pending` runs it."""

    def __init__(self, interval_s: float) -> None:
        import os

        from pytest_inferscope.buffer import TraceBuffer
        from pytest_inferscope.collectors.cpu_tick import SignalSampler as Plugins

        buffer = TraceBuffer(size_mb=8)
        self._sampler = Plugins(buffer, interval_s * 1000, threading.get_ident(), os.getpid(), "pending")
        self.samples = 0


SAMPLERS = {
    "thread": ThreadSampler,
    "signal": SignalSampler,
    "clock": ClockSampler,
    "plugin": PluginSampler,
    "plugin-norss": PluginNoRssSampler,
    "plugin-signal": PluginSignalSampler,
    "pending": PendingSampler,
    "pending-nop": PendingNopSampler,
    "plugin-pending": PluginPendingSampler,
}


def smoke_model() -> Callable[[], Any]:
    """A small stack of layers called from Python on the CPU (no timm or torchvision needed)."""
    import torch

    model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(48)]).eval()
    x = torch.randn(8, 64)

    def call() -> Any:
        with torch.no_grad():
            return model(x)

    return call


def model_call(title: str, model: str, cpu_smoke: bool) -> tuple[Callable[[], Any], Callable[[], None]]:
    """The benchmark's header printed, then `model`'s call on the GPU (`bench_real_models.build`), or `smoke_model`'s on
    the CPU with `cpu_smoke`, and the device synchronise to follow each call with."""
    import torch
    from bench_real_models import build

    device = "cpu" if cpu_smoke else "cuda"
    print("\n".join(header(title, f"torch {torch.__version__}; {model} on {device}")))
    call = smoke_model() if cpu_smoke else build(model, device, False)
    return call, (torch.cuda.synchronize if device == "cuda" else (lambda: None))


def block(call: Callable[[], Any], sync: Callable[[], None], calls: int) -> list[float]:
    out = []
    for _ in range(calls):
        t = time.perf_counter_ns()
        call()
        sync()
        out.append((time.perf_counter_ns() - t) / 1e6)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--model", default="vit_b16")
    p.add_argument("--reps", type=int, default=10)
    p.add_argument("--calls", type=int, default=30)
    p.add_argument("--interval-ms", type=float, default=10.0)
    p.add_argument("--cpu-smoke", action="store_true", help="a tiny model on the CPU, to check the script")
    p.add_argument("--modes", default=",".join(MODES[1:]), help=f"against plain: {', '.join(MODES[1:])}")
    args = p.parse_args()
    asked = [m for m in args.modes.split(",") if m and m != "plain"]
    if not asked or set(asked) - set(SAMPLERS):
        p.error(f"--modes {args.modes!r}: give one or more of {', '.join(MODES[1:])}, comma-separated")
    MODES[:] = ["plain", *asked]
    call, sync = model_call("bench_sampler_signal", args.model, args.cpu_smoke)
    for _ in range(5):
        call()
    sync()
    interval = args.interval_ms / 1000
    medians: dict[str, list[float]] = {m: [] for m in MODES}
    means: dict[str, list[float]] = {m: [] for m in MODES}
    samples: dict[str, int] = dict.fromkeys(MODES, 0)
    for rep in range(args.reps):
        for mode in MODES[rep % len(MODES) :] + MODES[: rep % len(MODES)]:
            if mode == "plain":
                times = block(call, sync, args.calls)
            else:
                with SAMPLERS[mode](interval) as s:
                    times = block(call, sync, args.calls)
                samples[mode] += s.samples
            medians[mode].append(statistics.median(times))
            means[mode].append(statistics.fmean(times))
    print(f"reps {args.reps}, {args.calls} calls a block, interval {args.interval_ms:g} ms")
    print(f"plain: {statistics.median(medians['plain']):.3f} ms a call (median of the blocks' medians)")
    for mode in MODES[1:]:
        cells = []
        for label, per in (("median call", medians), ("mean call", means)):
            ratios = [m / p - 1 for m, p in zip(per[mode], per["plain"], strict=True)]
            q1, q3 = quartiles(ratios)
            cells.append(f"{label} {100 * statistics.median(ratios):+.2f}% [{100 * q1:+.2f}, {100 * q3:+.2f}]")
        print(f"{mode:>12}: {'; '.join(cells)}; {samples[mode] / args.reps:.1f} samples a block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
