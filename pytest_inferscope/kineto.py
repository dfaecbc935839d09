"""Import a torch.profiler (Kineto) Chrome trace as a `RawTrace`, so `inferscope analyze` can run the pipeline on it.

A Kineto trace is `{"traceEvents": [...]}` (optionally gzipped) with complete ("X") events whose
`ts` and `dur` are µs on one clock, already aligned between CPU and GPU by Kineto. So every record
here is in the HOST domain and there are no clock pairs to fit. Mapping, by `cat`:

| cat | record |
| --- | --- |
| user_annotation `ProfilerStep#N` | ROUND (value N) |
| user_annotation (other) | SCOPE |
| cpu_op, python_function | CALL, a cpu_op flagged `CallFlag.OP` (python_function `nn.Module: X` is a MODULE named X) |
| kernel | KERNEL: stream, device and correlation from args |
| gpu_memcpy | MEMCPY: bytes from args; direction, memory kinds from the name; peer devices `fromDevice`, `toDevice` |
| gpu_memset | MEMSET |
| cuda_runtime, cuda_driver | RUNTIME (the CPU side of a launch, linked by correlation) |

A peer copy (`Memcpy PtoP`) lies on the lane of the device it ran on (`inDevice`, else its `pid`).

Everything else (flows, metadata, instant events, GPU-side annotations) is counted and ignored.

What a Kineto trace does not have: the test thread's CPU time, page faults, context switches and
RSS per round. The analysis says so rather than reading the missing counters as zeros: the rules
that need them skip themselves, and `kineto_rules.RULES` adds one that states what is missing and two
that read a trace without GPU work (the steps' time in torch ops, and in the DataLoader).
"""

from __future__ import annotations

import gzip
import json
import re
import zlib
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import Any

import numpy as np

from .events import (
    EVENT_DTYPE,
    GPU_KINDS,
    CallFlag,
    CopyKind,
    Domain,
    Kind,
    MemoryKind,
    RawTrace,
    StringTable,
    concat_events,
    copy_flags,
)
from .kineto_rules import MISSING, RULES
from .results import CollectorInfo

__all__ = ["RULES", "KinetoTrace", "TraceFormatError", "import_events", "load", "read_json"]

_STEP = re.compile(r"ProfilerStep#(\d+)$")
_MEMCPY = re.compile(r"Memcpy\s+(\w+)\s*\(\s*([\w ]+?)\s*->\s*([\w ]+?)\s*\)")
_COPY_KINDS = {k.name.lower(): k for k in CopyKind}  # "htod" (from "HtoD") -> HTOD
_MEMORY_KINDS = {k.name.lower().replace("_", ""): k for k in MemoryKind}  # "pageable", "devicestatic"
# Older torch versions (1.8-1.10) wrote capitalised or shorter category names.
_ALIASES = {"operator": "cpu_op", "runtime": "cuda_runtime", "driver": "cuda_driver", "memcpy": "gpu_memcpy",
            "memset": "gpu_memset"}  # fmt: skip
_LABELS = {k: k.name.lower() for k in Kind}
_HOST = int(Domain.HOST)
_HOST_SPANS = {"cpu_op", "python_function", "user_annotation"}
_GPU_CATS = {"kernel": Kind.KERNEL, "gpu_memcpy": Kind.MEMCPY, "gpu_memset": Kind.MEMSET}
_RUNTIME_CATS = {"cuda_runtime", "cuda_driver"}
#: The `pid` of torch's `EventList.export_chrome_trace` events, which have no `cat`.
_EVENTLIST_PID = "CPU functions"
_PYFRAME = re.compile(r"^[^()]*\(\d+\): |^<built-in ")  # "torch/nn/modules/module.py(1782): _call_impl"
#: Categories of complete events not imported that say nothing of a device: the profiler's own span, none.
_NO_DEVICE = {"trace", ""}


class TraceFormatError(ValueError):
    """A trace file that cannot be imported; str() is one paragraph naming the file, the position and the problem."""


@dataclass
class KinetoTrace:
    """An imported Kineto trace: the raw collection, and what the report says about how it was collected."""

    raw: RawTrace
    collectors: list[CollectorInfo]
    environment: dict[str, Any]
    counts: dict[str, int] = field(default_factory=dict)  # records per kind ("kernel", ...) and "ignored"
    steps: int = 0  # ProfilerStep annotations found (0: the whole trace is one round)
    notes: list[str] = field(default_factory=list)  # how the rounds were read, where it needs saying (a line each)


def read_json(path: Path) -> Any:
    """Parse a JSON file, gunzipping it when it is gzipped; errors name the file and the line and column."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise TraceFormatError(f"{path}: cannot read the trace file: {e.strerror or e}.") from None
    gz = data[:2] == b"\x1f\x8b"
    if gz:
        try:
            data = gzip.decompress(data)
        except EOFError as e:
            raise TraceFormatError(
                f"{path}: a gzip file cut short ({e}). Was it truncated while it was written? Export the trace again."
            ) from None
        except (OSError, zlib.error) as e:
            raise TraceFormatError(f"{path}: starts like a gzip file but cannot be decompressed ({e}).") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceFormatError(f"{path}: not a UTF-8 text file (byte {e.start}); expected a JSON trace.") from None
    try:
        # Decimals stay text, so µs timestamps such as 4365343910568.049 convert to ns exactly (`_ns`).
        return json.loads(text, parse_float=str)
    except json.JSONDecodeError as e:
        inner = " of the decompressed JSON" if gz else ""
        raise TraceFormatError(
            f"{path}:{e.lineno}:{e.colno}: not valid JSON (line {e.lineno}, column {e.colno}{inner}: {e.msg}). "
            "Was the file truncated while it was written? Export the trace again."
        ) from None


def load(path: Path) -> KinetoTrace:
    """Read a torch.profiler / Kineto Chrome trace (.json or .json.gz) into a `KinetoTrace`."""
    return import_events(read_json(path), str(path))


_SCALE = (1000, 100, 10, 1)  # ns per unit of the last digit, by the number of decimals (0 to 3)


def _ns(value: Any) -> int:
    """µs (an int, or a decimal number as text, as `read_json` leaves it) to integer ns, rounded half to even."""
    if type(value) is int:
        return value * 1000
    if type(value) is str:
        dot = value.find(".")
        decimals = len(value) - dot - 1 if dot >= 0 else 0
        if decimals <= 3:  # the usual case, fast: "4365343910568.049" -> 4365343910568049
            try:
                return int(value[:dot] + value[dot + 1 :] if dot >= 0 else value) * _SCALE[decimals]
            except ValueError:
                pass  # an exponent, a sign after the dot, ...: the exact path below says what is wrong
    if isinstance(value, bool) or not isinstance(value, int | float | str | Decimal):
        raise ValueError(f"{value!r} is not a number")
    try:
        number = Decimal(value if isinstance(value, str) else repr(value))
    except InvalidOperation:
        raise ValueError(f"{value!r} is not a number") from None
    if not number.is_finite():
        raise ValueError(f"{json.dumps(value) if isinstance(value, float) else value} is not a finite number")
    return int((number * 1000).to_integral_value(ROUND_HALF_EVEN))


_NS_RANGE = (-(2**63), 2**63 - 1)  # the int64 columns of EVENT_DTYPE
_OUT_OF_RANGE = "out of range: times in µs must lie within ±9.2e15 µs (292 years) of the trace's zero"
#: The columns a Kineto field can overflow, and that field (for the error).
_COLUMNS = {"value": "'args.bytes'", "stream": "'args.stream' (or 'tid')", "device": "'args.device' (or 'pid')"}


def _time(ev: dict[str, Any], key: str, where: str) -> int:
    """The event's 'ts' or 'dur' in ns; TraceFormatError naming the field when it is no number or out of range."""
    try:
        ns = _ns(ev[key])
    except ValueError as e:
        raise TraceFormatError(f"{where}: '{key}' {e}.") from None
    if not _NS_RANGE[0] <= ns <= _NS_RANGE[1]:
        raise TraceFormatError(f"{where}: '{key}' {ev[key]} is {_OUT_OF_RANGE}.")
    return ns


def _span(ev: dict[str, Any], where: str) -> tuple[int, int]:
    """The event's start and duration in ns; TraceFormatError, beginning with `where`, when they are unusable."""
    start, dur = _time(ev, "ts", where), _time(ev, "dur", where)
    if dur < 0:
        raise TraceFormatError(f"{where} has a negative 'dur'.")
    if start + dur > _NS_RANGE[1]:
        raise TraceFormatError(f"{where}: its end, 'ts' + 'dur', is {_OUT_OF_RANGE}.")
    return start, dur


def _out_of_range(rows: list[tuple[int, ...]], origins: list[int], events: list[Any], source: str) -> TraceFormatError:
    """The error for the first row with a value its column of EVENT_DTYPE cannot hold (numpy said OverflowError)."""
    names = list(EVENT_DTYPE.names or ())
    for row, i in zip(rows, origins, strict=True):
        for column, field_text in _COLUMNS.items():
            info, value = np.iinfo(EVENT_DTYPE[column]), row[names.index(column)]
            if column == "value" and row[names.index("kind")] == Kind.ROUND:
                field_text = "the step number in 'name'"
            if not info.min <= value <= info.max:
                return TraceFormatError(
                    f"{source}: traceEvents[{i}] ({_describe(events[i])}): {field_text} is {value}, out of range "
                    f"(from {info.min} to {info.max})."
                )
    return TraceFormatError(f"{source}: a value in the trace is out of range for inferscope's event records.")


def _int(value: Any, default: int) -> int:
    try:
        return int(value) if value is not None and not isinstance(value, bool) else default
    except (TypeError, ValueError):
        return default


def _copy_flags(name: str, args: dict[str, Any]) -> int:
    """Direction and memory kinds of a copy from its Kineto name, e.g. 'Memcpy HtoD (Pageable -> Device)', and a
    peer copy's devices from its args (Kineto writes `fromDevice`, `inDevice`, `toDevice` for CUPTI's MEMCPY2)."""
    m = _MEMCPY.search(name)
    if m is None:
        return copy_flags(CopyKind.UNKNOWN, MemoryKind.UNKNOWN, MemoryKind.UNKNOWN)
    kind = _COPY_KINDS.get(m[1].lower(), CopyKind.UNKNOWN)
    src, dst = (_MEMORY_KINDS.get(x.lower().replace(" ", ""), MemoryKind.UNKNOWN) for x in (m[2], m[3]))
    return copy_flags(kind, src, dst, _int(args.get("fromDevice"), -1), _int(args.get("toDevice"), -1))


def _eventlist_cat(name: str) -> str:
    """The Kineto category of an event `EventList.export_chrome_trace` wrote without one, from its name."""
    if name.startswith("nn.Module: ") or (_PYFRAME.match(name) and not _STEP.match(name)):
        return "python_function"
    return "cpu_op" if "::" in name else "user_annotation"  # ProfilerStep#N, record_function's names


def _describe(event: Any) -> str:
    if not isinstance(event, dict):
        return f"a JSON {type(event).__name__}"
    parts = [f"{k} {event[k]!r}" for k in ("ph", "cat", "name") if k in event]
    return ", ".join(parts)[:160] or "no ph, cat or name"


def _trace_object(data: Any, source: str) -> dict[str, Any]:
    """The trace as `{"traceEvents": [...]}` (the format's bare array wrapped so); TraceFormatError if it is neither."""
    if isinstance(data, list):
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        found = "a JSON object without a 'traceEvents' list" if isinstance(data, dict) else "not a JSON object"
        raise TraceFormatError(
            f'{source}: not a Chrome trace: expected {{"traceEvents": [...]}} as torch.profiler\'s '
            f"export_chrome_trace() writes, but the top level is {found}."
        )
    return data


def _recorded_nothing(source: str, others: int) -> TraceFormatError:
    """The error for a trace without one event to import (the profiler started and stopped around nothing)."""
    return TraceFormatError(
        f"{source}: torch.profiler recorded nothing: the trace holds no CPU op, annotation, kernel, copy, memset "
        f"or CUDA API event, only {others} events of other kinds (metadata, the profiler's own span). "
        "Run the code to profile inside `with torch.profiler.profile(...)` (with a schedule, through its active "
        "steps, calling prof.step() after each), with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], "
        "and export the trace again."
    )


def import_events(data: Any, source: str) -> KinetoTrace:
    """Turn a parsed Chrome trace (`{"traceEvents": [...]}`, or the format's bare array of events, which torch's
    `EventList.export_chrome_trace` writes) into a `KinetoTrace`; `source` names it in errors."""
    data = _trace_object(data, source)
    strings = StringTable()
    tids: dict[Any, int] = {}
    rows: list[tuple[int, ...]] = []
    counts: dict[str, int] = {"ignored": 0}
    steps: list[int] = []  # row indices of ProfilerStep rounds
    origins: list[int] = []  # the index in traceEvents of each row
    other: dict[str, int] = {}  # complete events of categories not imported that may be a device's (mtia_runtime)

    def tid_of(raw_tid: Any) -> int:
        if isinstance(raw_tid, int) and not isinstance(raw_tid, bool) and 0 <= raw_tid < 2**31:
            return raw_tid
        # String or out-of-range ids (GPU rows, 64-bit thread handles) get small numbers of their own.
        return tids.setdefault(raw_tid, 2**30 + len(tids))

    for i, ev in enumerate(data["traceEvents"]):
        if not isinstance(ev, dict):
            raise TraceFormatError(f"{source}: traceEvents[{i}] is {_describe(ev)}, not an event object.")
        cat = str(ev.get("cat", "")).lower()
        cat = _ALIASES.get(cat, cat) if cat or ev.get("pid") != _EVENTLIST_PID else _eventlist_cat(str(ev.get("name")))
        if ev.get("ph") != "X" or not (cat in _HOST_SPANS or cat in _GPU_CATS or cat in _RUNTIME_CATS):
            counts["ignored"] += 1
            if ev.get("ph") == "X" and cat not in _NO_DEVICE:
                other[cat] = other.get(cat, 0) + 1
            continue
        for key in ("ts", "dur"):
            if key not in ev:
                raise TraceFormatError(
                    f"{source}: traceEvents[{i}] ({_describe(ev)}) has no '{key}'; every complete ('X') event "
                    "needs its start 'ts' and duration 'dur' in µs. Was the trace edited or cut short?"
                )
        start, dur = _span(ev, f"{source}: traceEvents[{i}] ({_describe(ev)})")
        args: dict[str, Any] = ev["args"] if isinstance(ev.get("args"), dict) else {}
        name = str(ev.get("name", ""))
        corr = _int(args.get("correlation"), 0) & 0xFFFFFFFF
        tid, value, flags, stream, device = tid_of(ev.get("tid")), 0, 0, -1, -1
        if cat in _GPU_CATS:
            kind = _GPU_CATS[cat]
            stream = _int(args.get("stream"), _int(ev.get("tid"), 0))
            device = max(0, _int(args.get("device", args.get("inDevice")), _int(ev.get("pid"), 0)))
            tid = -1
            if kind != Kind.KERNEL:
                value = _int(args.get("bytes"), 0)
            if kind == Kind.MEMCPY:
                flags = _copy_flags(name, args)
        elif cat in _RUNTIME_CATS:
            kind = Kind.RUNTIME
        elif cat == "user_annotation" and (step := _STEP.match(name)):
            kind, value = Kind.ROUND, int(step[1])
            steps.append(len(rows))
        elif cat == "user_annotation":
            kind = Kind.SCOPE
        elif cat == "python_function" and name.startswith("nn.Module: "):
            kind, name = Kind.MODULE, name.removeprefix("nn.Module: ")
        else:
            kind, flags = Kind.CALL, int(CallFlag.OP) if cat == "cpu_op" else 0
        label = _LABELS[kind]
        counts[label] = counts.get(label, 0) + 1
        if kind != Kind.RUNTIME and kind not in GPU_KINDS:
            corr = 0
        rows.append((start, start + dur, value, corr, strings.intern(name), tid, stream, device, kind, _HOST, flags))
        origins.append(i)
    if not rows:
        raise _recorded_nothing(source, counts["ignored"])
    try:
        events = np.array(rows, dtype=EVENT_DTYPE)
    except OverflowError:
        raise _out_of_range(rows, origins, data["traceEvents"], source) from None
    return _finish(events, strings, counts, steps, data, source, _unrecorded_device(counts, other, data))


def _unrecorded_device(counts: dict[str, int], other: dict[str, int], data: dict[str, Any]) -> str:
    """What shows a device in a trace without kernel, copy or memset records ('' when nothing does): the host's time
    in ops may then be waits for work the trace did not record."""
    if counts.get("kernel") or counts.get("memcpy") or counts.get("memset"):
        return ""
    if n := counts.get("runtime", 0):
        return f"{n} CUDA runtime or driver call{'s' if n != 1 else ''} but no kernel, copy or memset records"
    if other:
        return ", ".join(f"{n} {cat}" + ("" if "event" in cat else " events" if n != 1 else " event")
                         for cat, n in sorted(other.items()))  # fmt: skip
    names = [str(d.get("name")) for d in data.get("deviceProperties") or [] if isinstance(d, dict)]
    return f"deviceProperties lists {names[0]}" if names else ""


def _main_tid(events: np.ndarray, steps: list[int]) -> int:
    """The thread that ran the steps, or else the one with the most host span time."""
    if steps:
        return int(events["tid"][steps[0]])
    host = events[events["tid"] >= 0]
    if not len(host):
        return 0
    tids, inv = np.unique(host["tid"], return_inverse=True)
    return int(tids[np.argmax(np.bincount(inv, weights=(host["end"] - host["start"]).astype(float)))])


def _finish(
    events: np.ndarray,
    strings: StringTable,
    counts: dict[str, int],
    steps: list[int],
    data: dict[str, Any],
    src: str,
    unrecorded: str,
) -> KinetoTrace:
    """Add the TEST span and the rounds, and describe the collection (`unrecorded`: `_unrecorded_device`)."""
    events, steps, notes = _without_empty_tail(events, steps, strings.strings, counts, src)
    main = _main_tid(events, steps)
    t0, t_end = int(events["start"].min()), int(events["end"].max())
    extra: list[tuple[int, ...]] = [(t0, t_end, 0, 0, strings.intern(Path(src).name), main, -1, -1, Kind.TEST,
                                     Domain.HOST, 0)]  # fmt: skip
    if steps:
        # Kineto's steps run back to back on the host; GPU work launched in the last one may finish after
        # it, so that round ends when its work does (earlier rounds' stragglers fall in the next round).
        last = max(steps, key=lambda i: int(events["start"][i]))
        s, e = int(events["start"][last]), int(events["end"][last])
        rt = events[(events["kind"] == Kind.RUNTIME) & (events["corr"] != 0)]
        launched = rt["corr"][(rt["start"] >= s) & (rt["start"] < e)]
        gpu = events[np.isin(events["kind"], np.asarray(GPU_KINDS, dtype=np.uint8)) & np.isin(events["corr"], launched)]
        if len(gpu):
            events["end"][last] = max(e, int(gpu["end"].max()))
    else:
        extra.append((t0, t_end, 0, 0, strings.intern("profiled window"), main, -1, -1, Kind.ROUND, Domain.HOST, 0))
        notes.append(
            f"no ProfilerStep spans, so the whole trace ({(t_end - t0) / 1e6:.3g} ms) is one round; for one round per "
            "step, give torch.profiler.profile a schedule (schedule=torch.profiler.schedule(wait=1, warmup=1, "
            "active=3)) and call prof.step() at the end of each step (without a schedule, prof.step() records none)"
        )
    events = concat_events([events, np.array(extra, dtype=EVENT_DTYPE)])  # events.py: as bytes
    n_kernels = counts.get("kernel", 0) + counts.get("memcpy", 0) + counts.get("memset", 0)
    device_names = [str(d.get("name")) for d in data.get("deviceProperties") or [] if isinstance(d, dict)]
    rounds = f"{len(steps)} ProfilerStep rounds" if steps else "no ProfilerStep: the whole trace is one round"
    no_gpu = "the torch.profiler trace has no GPU activity"
    if unrecorded:
        no_gpu += (
            f", though it shows a device ({unrecorded}): record with ProfilerActivity.CUDA (or the device's "
            "activity) as well to see its work"
        )
    collectors = [
        CollectorInfo("cpu", True, f"torch.profiler CPU ops and annotations ({rounds})", reason=MISSING),
        CollectorInfo("gpu", True, "torch.profiler (Kineto, CUPTI)")
        if n_kernels
        else CollectorInfo("gpu", False, "none", reason=no_gpu),
        CollectorInfo("memory", False, "none", reason="not in a torch.profiler trace"),
    ]
    environment: dict[str, Any] = {"source": f"torch.profiler trace {src}"}
    if device_names:
        environment["gpu_model"] = device_names[0]
    for key in ("cuda_runtime_version", "cuda_driver_version", "host_name"):
        if key in data:
            environment[key] = str(data[key])
    meta: dict[str, object] = {
        "kineto": {
            "source": src,
            "steps": len(steps),
            "counts": dict(counts),
            "unrecorded_device": unrecorded,
            "notes": notes,
        },
        "clock_note": "torch.profiler trace: CPU and GPU times were put on one clock by Kineto, not re-measured here",
    }
    raw = RawTrace(events=events, strings=strings.strings, t0_ns=t0, meta=meta)
    return KinetoTrace(raw, collectors, environment, counts, len(steps), notes)


#: What a step holds when it did some work: an op, an annotation or module, a CUDA call or GPU work (not Python frames
#: alone: a step the profiler's exit closes holds its `__exit__` frames).
_WORK = np.asarray([Kind.SCOPE, Kind.MODULE, Kind.RUNTIME, *GPU_KINDS], dtype=np.uint8)


def _without_empty_tail(
    events: np.ndarray, steps: list[int], strings: list[str], counts: dict[str, int], src: str
) -> tuple[np.ndarray, list[int], list[str]]:
    """The events and steps without a last ProfilerStep that holds no work, and the note that says so.

    Each `prof.step()` closes a step and opens the next, so a loop that ends before the schedule's active steps do
    leaves a last step that only the profiler's exit closes: no round, and as a latency sample a few µs.
    """
    if not steps:
        return events, steps, []
    last = max(steps, key=lambda i: int(events["start"][i]))
    s, e = int(events["start"][last]), int(events["end"][last])
    inside = (events["start"] >= s) & (events["start"] < e)
    op = (events["kind"] == Kind.CALL) & ((events["flags"] & int(CallFlag.OP)) != 0)
    if (inside & (op | np.isin(events["kind"], _WORK))).any():
        return events, steps, []
    name = strings[int(events["name"][last])]
    if len(steps) == 1:
        raise TraceFormatError(
            f"{src}: its only ProfilerStep ({name}) holds no op, annotation or GPU work: the profiler stopped right "
            "after the prof.step() that opened it. A schedule that repeats (repeat=0, the default) writes a trace at "
            "the end of every cycle, and with one file name for all, the last cycle's, cut short by the loop's end, "
            "overwrites the others. Give the schedule repeat=1, or on_trace_ready a file name per cycle "
            "(tensorboard_trace_handler writes one), and record again."
        )
    counts["round"] -= 1
    note = (
        f"{name}, the last step ({(e - s) / 1000:.3g} µs), holds no op, annotation or GPU work: the profiler stopped "
        "right after the prof.step() that opened it (the loop ran fewer steps than the schedule's active ones), so it "
        "is not a round"
    )
    return np.delete(events, last), [i - (i > last) for i in steps if i != last], [note]
