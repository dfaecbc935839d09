"""The option table of pytest-inferscope: every setting's parser, default, help and names, and `Settings`.

Every setting is one `OptionSpec` in `OPTIONS`; the CLI flag, env var, ini key, config-file key,
help text and docs all come from it. `config` resolves the layers into a `Settings`. Adding a
setting means one `OptionSpec` here and one `Settings` field.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from importlib.util import find_spec
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal, get_args

from .parsers import (
    TRACE_ROUNDS_COUNT,
    Parse,
    choice,
    fraction,
    number,
    optional,
    parse_bool,
    parse_gpus,
    parse_name,
    parse_path,
    parse_ref,
    parse_trace_rounds,
)
from .rounds import PROFILE_ROUNDS_MAX

__all__ = [
    "OPTIONS", "OPTIONS_BY_NAME", "TRACE_ROUNDS_COUNT", "OptionSpec", "Parse", "Settings", "choice", "default_settings",
    "fraction", "number", "parse_trace_rounds", "sampler_in_use",
]  # fmt: skip

GpuMode = Literal["auto", "off", "required"]
CpuMode = Literal["sample", "trace", "off"]
SamplerKind = Literal["auto", "thread", "pending", "signal"]
LogLevel = Literal["debug", "info", "warning", "error"]
LatencyStat = Literal["median", "mean", "p90", "p99", "min", "max"]
ProbeMode = Literal["auto", "on", "off"]
GpuRounds = Literal["measured", "trace", "auto"]
TraceFormat = Literal["json.gz", "json"]
AbAslr = Literal["keep", "off"]
AbRecheck = Literal["changed", "regressed", "off"]
AbPairs = Literal["here", "twins"]

_GPU_ROUNDS: tuple[str, ...] = get_args(GpuRounds)
#: Rounds and warm-up for a marked test that names neither (the CLI/env/file can change them).
MARKED_ROUNDS, MARKED_WARMUP = 5, 1
#: Profile rounds at most when only they record GPU activity (gpu_rounds trace, or auto gone lean) and the user did
#: not set --inferscope-trace-rounds: they end at the first in step with the measured rounds (rounds.in_step).
LEAN_TRACE_ROUNDS = PROFILE_ROUNDS_MAX


def lean_rounds_conflict(trace_rounds: Any, gpu_rounds: Any, where: str) -> str | None:
    """The one-paragraph usage error of gpu_rounds=trace with trace_rounds=all, or None."""
    if gpu_rounds != "trace" or trace_rounds != "all":
        return None
    return (
        f"{where}: gpu_rounds 'trace' records GPU activity only in the trace rounds, but trace_rounds 'all' runs "
        "none (launch calls in every round). Give trace_rounds a number (1 to 1000; the default with "
        f"gpu_rounds 'trace' runs up to {LEAN_TRACE_ROUNDS} profile rounds and one trace round), or set gpu_rounds "
        "to 'measured' or 'auto'."
    )


def _one_of(choices: tuple[str, ...]) -> str:
    return ", ".join(choices[:-1]) + " or " + choices[-1]


@dataclass(frozen=True)
class OptionSpec:
    """One setting: how to parse it, its default and help, and its name in every place it can be given."""

    name: str  # Settings field and config-file key
    parse: Parse
    default: Any
    help: str  # one or two sentences; also the docs text
    hint: str  # what is valid, completing "<value> is out of range: ..."
    example: str  # a valid value as typed on the command line, for error messages
    choices: tuple[str, ...] | None = None
    flag: str = ""  # default --inferscope-<name with - for _>
    env: str = ""  # default INFERSCOPE_<NAME>
    ini: str = ""  # default inferscope_<name>
    action: Literal["store", "store_true", "store_false"] = "store"  # the store_* flags take no value
    metavar: str | None = None
    # The TOML type of the value in pytest's native TOML mode, which type-checks the inferscope_* keys of
    # [tool.pytest] against it: bool, int or float when that is all the value can be; `int | str` and
    # the like when it also has a text form (trace_rounds `all`, max_regression `5%`); str otherwise.
    toml_type: Any = str
    #: The default as a newcomer reads it, in the flag's own sense ("profiling on" for --inferscope-disable,
    #: "no reports" for an unset folder); empty: the default value itself.
    default_text: str = ""

    def __post_init__(self) -> None:
        # Derived names are filled in here so that the table spells out only the exceptions.
        derived = {
            "flag": "--inferscope-" + self.name.replace("_", "-"),
            "env": "INFERSCOPE_" + self.name.upper(),
            "ini": "inferscope_" + self.name,
        }
        for attr, value in derived.items():
            if not getattr(self, attr):
                object.__setattr__(self, attr, value)

    @property
    def dest(self) -> str:
        """The argparse dest; prefixed because all pytest plugins share one option namespace."""
        return "inferscope_" + self.name


_GPU_MODES: tuple[str, ...] = get_args(GpuMode)
_CPU_MODES: tuple[str, ...] = get_args(CpuMode)
_SAMPLERS: tuple[str, ...] = get_args(SamplerKind)
_LOG_LEVELS: tuple[str, ...] = get_args(LogLevel)
_LATENCY_STATS: tuple[str, ...] = get_args(LatencyStat)
_PROBE_MODES: tuple[str, ...] = get_args(ProbeMode)
_TRACE_FORMATS: tuple[str, ...] = get_args(TraceFormat)
_AB_ASLR: tuple[str, ...] = get_args(AbAslr)
_AB_RECHECK: tuple[str, ...] = get_args(AbRecheck)
_AB_PAIRS: tuple[str, ...] = get_args(AbPairs)
_BOOL_HINT = "use 1/0, true/false, yes/no or on/off"


#: A baseline name is a file name: a git branch's slashes cannot be in it (CI jobs name baselines after branches).
_BRANCH_HINT = " (a branch such as 'feature/x' as 'feature-x': in bash, ${BRANCH//\\//-})"


#: Why the signal sampler cannot run in an install without its clock in C (no C compiler at install; setup.py).
CLOCK_NOT_BUILT = "the sampler clock in C (pytest_inferscope._tick) is not built: reinstall with a C compiler"


def clock_not_built() -> str:
    """CLOCK_NOT_BUILT where `pytest_inferscope._tick` cannot be imported, else ''; found without importing it."""
    try:
        return "" if find_spec("pytest_inferscope._tick") is not None else CLOCK_NOT_BUILT
    except ValueError:  # None in sys.modules: its import is blocked
        return CLOCK_NOT_BUILT


@functools.cache
def sampler_in_use(asked: SamplerKind) -> SamplerKind:
    """The sampler `--inferscope-sampler=asked` means here: auto samples in the test thread wherever the C clock is
    built (`pytest_inferscope._tick`), by its pending calls, which send no signal: named `signal` from CPython 3.13,
    where the signal sampler is those calls, `pending` before, where a real signal could make a C `poll()` fail with
    EINTR; elsewhere the thread. Outside the rounds the in-thread sample took ~0.3 ms (2-core VM, 3.13) to ~0.5 ms
    (H200, 3.12) less a test than the thread's hand-overs (docs/performance.md, "Session 27"). Before 3.13,
    `pending` against the thread on an H200 host, 16 runs: ViT-B/16 a call within noise (+0.2 points by the median
    of the paired differences), its whole test ~1 point less, `generate` a call less in 7 of 8; on a 2-core VM a
    launch-like body 1 to 3 points less in 4 of 4, pure Python the same ("Session 48")."""
    if asked != "auto":
        return asked
    if clock_not_built():
        return "thread"
    return "signal" if sys.version_info >= (3, 13) else "pending"


#: What the header says the CPU collector does, by the cpu setting.
_CPU_LINE = {"sample": "stack sampling every {ms:g} ms", "trace": "full call tracing", "off": "scopes and rounds only"}


def cpu_line(cpu: str, sampler: SamplerKind, interval_ms: float) -> str:
    """The header's CPU part: what the CPU collector does with these settings, and, for the signal sampler, where."""
    line = _CPU_LINE[cpu].format(ms=interval_ms)
    if cpu == "sample" and sampler_in_use(sampler) in ("pending", "signal"):
        missing = clock_not_built()  # (asked for in an install without a C compiler: the thread samples)
        line += f" by a thread, not by the test thread: {missing}" if missing else " in the test thread"
    return line


OPTIONS: tuple[OptionSpec, ...] = (
    OptionSpec(
        "enable", parse_bool, True,
        "Switch profiling off for this run: marked tests and tests using the inferscope fixture run once, "
        "unprofiled, and no report, baseline or A/B comparison is made; the summary names those asked for "
        "(as env: INFERSCOPE_ENABLE=0).",
        _BOOL_HINT, "false", flag="--inferscope-disable", action="store_false",
        default_text="profiling on (this flag not given)",
        toml_type=bool,
    ),
    OptionSpec(
        "report", optional(parse_path), None,
        "Folder to write the reports to: index.html and index.md, and per profiled test report.html, report.md, "
        "report.json, raw.npz and trace.json.gz (Perfetto; when the test recorded scopes, modules, marks or GPU "
        "work). E.g. --inferscope-report=out/inferscope.",
        "give a folder path", "out/inferscope", metavar="DIR",
        default_text="no reports (the terminal summary only)",
    ),
    OptionSpec(
        "all", parse_bool, False,
        "Profile every test, not only those marked @pytest.mark.inferscope or using the inferscope fixture "
        "(one round each, unless --inferscope-rounds says otherwise): test functions and unittest.TestCase methods; "
        "doctests and other plugins' non-Python items run unprofiled.",
        _BOOL_HINT, "true", action="store_true",
        default_text="off (only marked tests and tests using the fixture are profiled)",
        toml_type=bool,
    ),
    OptionSpec(
        "rounds", optional(number(1, integer=True)), None,
        "Measured rounds per profiled test, unless its marker gives rounds=. E.g. --inferscope-rounds=20.",
        "give the number of measured rounds per test, a whole number of at least 1", "20", metavar="N",
        default_text=f"{MARKED_ROUNDS} for a marked test, 1 for an unmarked one",
        toml_type=int,
    ),
    OptionSpec(
        "warmup", optional(number(0, integer=True)), None,
        "Unmeasured warm-up rounds before the measured ones, per profiled test, unless its marker gives warmup=.",
        "give the number of warm-up rounds per test, a whole number of at least 0", "3", metavar="N",
        default_text=f"{MARKED_WARMUP} for a marked test, 0 for an unmarked one",
        toml_type=int,
    ),
    OptionSpec(
        "gpu", choice(_GPU_MODES), "auto",
        "GPU collection: auto (use it when available), off, or required (fail when it cannot run).",
        f"set the GPU collection mode to {_one_of(_GPU_MODES)}", "required", choices=_GPU_MODES,
    ),
    OptionSpec(
        "log_level", choice(_LOG_LEVELS), "warning", "Level of inferscope's own log messages.",
        f"set the log level to {_one_of(_LOG_LEVELS)}", "info", choices=_LOG_LEVELS,
    ),
    OptionSpec(
        "trace_size_mb", number(0.0, 65536.0, low_inclusive=False), 100.0,
        "Size of each thread's trace buffer in MB; a full one wraps (or spills, with --inferscope-trace-spill) and "
        "the report counts the dropped events.",
        "give the trace buffer size in megabytes, more than 0 and at most 65536", "200", metavar="MB",
        toml_type=float,
    ),
    OptionSpec(
        "trace_spill", optional(parse_path), None,
        "Folder a full trace buffer spills to, created when it first does (a file there, or in its path, is refused "
        "before anything runs); the spill files are removed once the test's trace is read. Unset, a full buffer "
        "wraps and counts the dropped events.",
        "leave it unset (a full buffer then wraps) or give a folder, created when a buffer first spills",
        "/tmp/inferscope-spill", metavar="DIR", default_text="not set (a full buffer wraps)",
    ),
    OptionSpec(
        "cpu", choice(_CPU_MODES), "sample",
        "CPU collector mode: sample (stack sampling), trace (every Python call in the rounds, the plugin's own left "
        "out; slower) or off (scopes only).",
        f"set the CPU collector mode to {_one_of(_CPU_MODES)}", "trace", choices=_CPU_MODES,
    ),
    OptionSpec(
        "sample_interval_ms", number(0.1, 1000.0), 10.0,
        "Stack sampling interval of the CPU collector in ms (each wake-up of the sampler costs CPU: ~50 µs on a "
        "small VM, so 1 ms costs ~5% of a core there).",
        "give the sampling interval in milliseconds, from 0.1 to 1000", "5", metavar="MS", toml_type=float,
    ),
    OptionSpec(
        "sampler", choice(_SAMPLERS), "auto",
        "How the stack is sampled: pending (a clock thread in C queues a call that the test's own thread runs "
        "between two bytecodes: no signal, and no GIL hand-over where the test lets the GIL go, as torch ops and CUDA "
        "launches do; before CPython 3.13 a test running pure Python holds the call back, and the clock makes it hand "
        "the GIL over once for it, as the thread sampler does), thread (a thread of the plugin's, which takes the GIL "
        "from the test for each sample, and from pure Python gets it only every 5 ms), signal (as pending, but before "
        "CPython 3.13 by a real signal to the main thread, on time in pure Python too, whose system calls restart, "
        "except those that never do, such as a C extension's own poll() or select() with a timeout, which then fail "
        "with EINTR; from 3.13 the same as pending) or auto (signal from CPython 3.13, where it sends no signal; "
        "pending before). "
        "pending and signal sample in the main thread only, where xdist's workers run tests too: elsewhere, or where "
        "the C clock is not built, the thread samples and the report says why; SIGALRM and the wall-clock timer stay "
        "free for pytest-timeout either way.",
        f"set the sampler to {_one_of(_SAMPLERS)}", "pending", choices=_SAMPLERS,
    ),
    OptionSpec(
        "latency_stat", choice(_LATENCY_STATS), "median",
        "Statistic max_latency_ms is checked against, unless the marker says otherwise.",
        f"set the latency statistic to {_one_of(_LATENCY_STATS)}", "p90", choices=_LATENCY_STATS,
    ),
    OptionSpec(
        "modules", number(0, 32, integer=True), 0,
        "Record torch.nn.Module forwards down to this depth (per-layer CPU and GPU time); 0 = off. Costs a few "
        "µs per module call (torch's global hooks): see docs/modules.md.",
        "give a module depth, a whole number from 0 (off) to 32", "3", metavar="DEPTH", toml_type=int,
    ),
    OptionSpec(
        "launch_gap_us", number(0.0, 10_000.0), 30.0,
        "GPU idle gaps between queued work shorter than this (µs) count as launch gaps, not as waiting "
        "for the host or a sync (HolisticTraceAnalysis's kernel wait; see docs/architecture.md).",
        "give the launch-gap threshold in microseconds, from 0 to 10000", "50", metavar="US", toml_type=float,
    ),
    OptionSpec(
        "gpus", optional(parse_gpus), None,
        "GPUs to spread xdist workers over, one per worker (worker N gets the N-th, round robin), set as "
        "CUDA_VISIBLE_DEVICES before CUDA starts; without xdist the first is used. "
        "E.g. -n 4 --inferscope-gpus=0,1,2,3.",
        "give GPU indices separated by commas", "0,1,2,3", metavar="LIST",
        default_text="not set (CUDA_VISIBLE_DEVICES left as it is)",
        toml_type=int | str,
    ),
    OptionSpec(
        "save_baseline", optional(parse_name), None,
        "Save this run's results as the baseline NAME (appended to its history; earlier runs are kept). "
        "Not in an A/B run, whose rounds are paced by the twin's (docs/ab.md). E.g. --inferscope-save-baseline=main.",
        f"give a name of letters, digits, '.', '-' and '_'{_BRANCH_HINT}", "main", metavar="NAME",
        default_text="not set (nothing saved)",
    ),
    OptionSpec(
        "compare", optional(parse_name), None,
        "Compare every profiled test against the baseline NAME and fail the tests that regressed. "
        "Not in an A/B run, whose comparison with the ref is the gate (docs/ab.md). E.g. --inferscope-compare=main.",
        f"give the name of a saved baseline (letters, digits, '.', '-' and '_'){_BRANCH_HINT}", "main", metavar="NAME",
        default_text="not set (no comparison)",
    ),
    OptionSpec(
        "baseline_dir", parse_path, Path(".inferscope/baselines"), "Folder the baselines are kept in.",
        "give a folder path", ".inferscope/baselines", metavar="DIR",
    ),
    OptionSpec(
        "max_regression", fraction(), 0.05,
        "Allowed latency regression against the baseline, or the ref in an A/B run (0.05 or 5%), unless the marker "
        "says otherwise.",
        "give a fraction such as 0.05 or a percentage such as 5%, from 0 to 1000%", "5%", metavar="FRACTION",
        toml_type=float | str,
    ),
    OptionSpec(
        "alpha", number(0.0, 0.5, low_inclusive=False), 0.01,
        "Significance level of the regression test (one-sided Mann-Whitney U on the round samples).",
        "give a significance level above 0 and at most 0.5", "0.01", metavar="P", toml_type=float,
    ),
    OptionSpec(
        "speed_probe", choice(_PROBE_MODES), "auto",
        "Time a fixed reference workload (~0.05 ms) before and after every measured round, so the regression "
        "gate compares only rounds run at the machine's usual speed: auto (when a baseline is saved or "
        "compared), on, or off.",
        f"set the speed probe to {_one_of(_PROBE_MODES)}", "on", choices=_PROBE_MODES,
    ),
    OptionSpec(
        "round_cap", number(1.0, 100.0), 3.0,
        "While the speed probe runs, CPU-bound rounds run at a busy moment are made up for: rounds are added "
        "until the requested number ran at the machine's usual speed, up to this many times the requested "
        "rounds in all (1 = never), unless the marker says otherwise.",
        "give a factor of the requested rounds, from 1 (never add rounds) to 100", "2", metavar="FACTOR",
        toml_type=float,
    ),
    OptionSpec(
        "trace_rounds", parse_trace_rounds, 1,
        "GPU launch calls (CUPTI's RUNTIME/DRIVER records: launch linkage, sync and copy calls, idle causes) are "
        "recorded only in this many extra trace rounds after the measured ones, which are timed without them "
        "(cheaper); `all` records them in every round and runs no trace round. Unset: one, and a second when the "
        "first ran out of step with the measured rounds (slowed by something else). Not a latency sample; no "
        "trace round runs without GPU collection, nor when no CUDA context is active in the process after the "
        "measured rounds (the body did no GPU work), nor, unset, when the warm-up and the measured rounds recorded no "
        "GPU work (a CPU-only test after a GPU one). Unless the marker says otherwise.",
        "give a number of trace rounds from 1 to 1000, or all", "all", metavar="N|all", toml_type=int | str,
    ),
    OptionSpec(
        "gpu_rounds", choice(_GPU_ROUNDS), "auto",
        "Which rounds record GPU activity (CUPTI): measured (warm-up and measured rounds record kernels, copies "
        "and memsets; launch calls per --inferscope-trace-rounds), trace (the measured rounds are timed without "
        f"CUPTI; after them up to {LEAN_TRACE_ROUNDS} profile rounds that record GPU activity "
        "without the launch calls (until one runs as the measured rounds did; as many as --inferscope-trace-rounds "
        "when it is given) and the trace rounds), or auto "
        "(decided per test after the warm-up: trace when the warm-up's GPU records, at ~1 µs each, would "
        "have cost the measured rounds more than 1%, else measured, and when they and as many launch calls would cost "
        "at most 1% and --inferscope-trace-rounds is not given, the measured rounds record the launch calls too and "
        "no trace round runs; with one warm-up round, that round counts as "
        "up to 3x slower than the rounds after it, since CUPTI's first use slows it, and one more warm-up round "
        "runs when counting it up to 30x slower would decide otherwise; the warm-up records the launch calls too "
        "when --inferscope-trace-rounds is not given, and a warm-up round that ran in step with the measured rounds "
        "stands for the trace round and, gone trace, for the profile round, which then do not run; gone trace with a "
        "warm-up that stood for neither, the trace round runs first and stands for the profile round when it ran in "
        "step as one would, else the profile rounds follow; trace, with CUPTI "
        "started after the measured rounds only if the body started CUDA, when no CUDA context is active in the "
        "process as the test starts). Unless the marker says otherwise.",
        f"set the GPU rounds to {_one_of(_GPU_ROUNDS)}", "trace", choices=_GPU_ROUNDS,
    ),
    OptionSpec(
        "ab", optional(parse_ref), None,
        "A/B gate: run every profiled test also at this git REF (a temporary `git worktree`), in a second pytest "
        "process taking turns with this one round by round on one CPU core, and fail the tests whose paired "
        "latency regressed beyond max_regression (docs/ab.md).",
        "give a git revision such as origin/main, HEAD~1 or a commit hash", "origin/main", metavar="REF",
    ),
    OptionSpec(
        "ab_python", optional(parse_path), None,
        "A/B gate against another environment: the second pytest process runs with this Python interpreter "
        "(e.g. another virtualenv's bin/python); with --inferscope-ab, at that ref (docs/ab.md).",
        "give the path of a Python interpreter", "../venv-old/bin/python", metavar="PATH",
    ),
    OptionSpec(
        "ab_aslr", choice(_AB_ASLR), "keep",
        "A/B runs, on Linux: address-space layout randomisation in both processes, keep (each process's layout "
        "random) or off (pytest executes itself again with it off, and the twin inherits that). Either way the two "
        "processes can run the same pure-Python code at speeds a few per cent apart; randomised, at times far more, "
        "and off, the same offset in every run of a suite (docs/ab.md).",
        f"set the A/B processes' address-space randomisation to {_one_of(_AB_ASLR)}", "off", choices=_AB_ASLR,
    ),
    OptionSpec(
        "ab_recheck", choice(_AB_RECHECK), "changed",
        "A/B runs: which tests have their pairs run again by a fresh pair of processes (one of this checkout and one "
        "of the other side, started alike and kept for the session) before their verdict stands, since the same "
        "code can run at a different speed in each process: changed (a test that read regressed or improved keeps "
        "that verdict only where they read it too), regressed (only those: a test fails only where they read it "
        "regressed too), or off (the first pairs decide) (docs/ab.md).",
        f"set the A/B re-check to {_one_of(_AB_RECHECK)}", "off", choices=_AB_RECHECK,
    ),
    OptionSpec(
        "ab_pairs", choice(_AB_PAIRS), "here",
        "A/B runs: which two processes take the turns that decide a verdict: here (this pytest process, which also "
        "measures the test for its report, against the twin) or twins (a second twin, of this checkout, against the "
        "twin; this process runs its own rounds between theirs, for its report only: about 1.5x the rounds, and no "
        "offset of this process's own speed in the verdict) (docs/ab.md).",
        f"set the A/B pairs to {_one_of(_AB_PAIRS)}", "twins", choices=_AB_PAIRS,
    ),
    OptionSpec(
        "trace_format", choice(_TRACE_FORMATS), "json.gz",
        "Format of each test's Perfetto / chrome://tracing trace in the report folder: json.gz (trace.json.gz, "
        "gzipped: ~10x smaller; Perfetto and chrome://tracing open it as it is) or json (plain trace.json).",
        f"set the trace format to {_one_of(_TRACE_FORMATS)}", "json", choices=_TRACE_FORMATS, metavar="FORMAT",
    ),
)  # fmt: skip

OPTIONS_BY_NAME: Mapping[str, OptionSpec] = MappingProxyType({spec.name: spec for spec in OPTIONS})


@dataclass(frozen=True)
class Settings:
    """The effective settings of one run (before per-test marker overrides), and where each came from."""

    enable: bool
    report: Path | None
    all: bool
    rounds: int | None
    warmup: int | None
    gpu: GpuMode
    log_level: LogLevel
    trace_size_mb: float
    trace_spill: Path | None
    cpu: CpuMode
    sample_interval_ms: float
    sampler: SamplerKind
    latency_stat: LatencyStat
    modules: int
    launch_gap_us: float
    gpus: tuple[int, ...] | None
    save_baseline: str | None
    compare: str | None
    baseline_dir: Path
    max_regression: float
    alpha: float
    speed_probe: ProbeMode
    round_cap: float
    trace_rounds: int | str  # N >= 1, or "all"
    gpu_rounds: GpuRounds
    ab: str | None
    ab_python: Path | None
    ab_aslr: AbAslr
    ab_recheck: AbRecheck
    ab_pairs: AbPairs
    trace_format: TraceFormat
    # name -> "default", "file /abs/.inferscope.yaml:3", "env INFERSCOPE_GPU", "ini inferscope_rounds",
    # or "cli --inferscope-rounds"
    sources: Mapping[str, str] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "sources", MappingProxyType(dict(self.sources)))

    def __reduce__(self) -> tuple[Any, ...]:
        # A mappingproxy cannot be pickled; rebuild from a plain dict (xdist, multiprocessing).
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        return (functools.partial(Settings, **{**values, "sources": dict(self.sources)}), ())

    def to_json(self) -> dict[str, Any]:
        """Plain JSON data for reports: every value (paths as strings) and `sources`."""
        data = {s.name: str(v) if isinstance(v := getattr(self, s.name), Path) else v for s in OPTIONS}
        return {**data, "sources": dict(self.sources)}


def default_settings() -> Settings:
    """Settings with every default, for code and tests that run without any configuration."""
    return Settings(**{spec.name: spec.default for spec in OPTIONS}, sources={s.name: "default" for s in OPTIONS})
