"""torch.compile's compilations during a collection, from torch._dynamo's own records, read once at its stop.

A `torch.compile`d model compiles on its first call and again whenever a guard fails (a new input shape,
a value the graph was specialised on): seconds of compiler inside a round whose latency then reads as the
model's. Dynamo keeps a record of every frame it compiled (`torch._dynamo.utils.get_compilation_metrics()`:
its compile id, code object, wall-clock start and end, why it recompiled, why it failed) and counts the graph
breaks it met (`counters["graph_break"]`). Those are read at the collection's start (the graph-break counts)
and stop (the records since the start), never in the rounds, and only when the process has imported
torch._dynamo already: a test that does not use torch.compile pays one `sys.modules` lookup at each end.

torch is never imported here. The records are torch's internals (no public API gives them, 2.13): anything
missing or shaped otherwise makes the collection carry no compile data, never an error.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from ..events import host_clock_ns

#: Characters of a recompile or failure reason kept (dynamo's are several lines, with the user's stack).
REASON_CHARS = 200
#: What dynamo names the function that resumes a frame after a graph break: torch_dynamo_resume_in_<fn>_at_<line>.
_RESUME = "torch_dynamo_resume_in_"


def _dynamo_utils() -> Any | None:
    """torch._dynamo.utils when the process imported it (never imports it)."""
    return sys.modules.get("torch._dynamo.utils")


def _first_line(text: object, limit: int = REASON_CHARS) -> str:
    """The first non-empty line of a reason, whitespace collapsed, at most `limit` characters."""
    for line in str(text or "").splitlines():
        line = " ".join(line.split())
        if line:
            return line if len(line) <= limit else line[: limit - 1] + "…"
    return ""


def _graph_breaks(utils: Any | None) -> dict[str, int]:
    """Dynamo's graph-break counts by reason (its full text), or none."""
    try:
        return {str(k): int(v) for k, v in utils.counters["graph_break"].items()} if utils is not None else {}
    except Exception:  # torch's internals changed: no graph-break data
        return {}


def _break(text: str, count: int) -> dict[str, Any]:
    """A graph break as the report gives it: dynamo's first line (what), its explanation and first hint, if any."""
    lines = [ln.strip() for ln in text.splitlines()]

    def after(label: str) -> str:
        return next((_first_line(ln[len(label) :]) for ln in lines if ln.startswith(label)), "")

    return {"reason": _first_line(text), "explanation": after("Explanation:"), "hint": after("Hint:"), "count": count}


def frame_name(co_name: object, filename: object, line: object) -> str:
    """A compiled frame as the report names it: `forward (model.py:15)`; the function dynamo resumes after a graph
    break as `forward after the graph break at model.py:22`."""
    name, where = str(co_name or "?"), str(filename or "?").rsplit("/", 1)[-1]
    if name.startswith(_RESUME):
        fn, _, at = name[len(_RESUME) :].rpartition("_at_")
        return f"{fn} after the graph break at {where}:{at}"
    return f"{name} ({where}:{line})"


def _name_failed_frames(compiles: list[dict[str, Any]]) -> None:
    """A compile that failed before dynamo named its code object (the recompile limit hit: `0/8`) takes the name of
    the frame's other compiles (`0/0` ... `0/7`)."""
    names = {c["id"].rpartition("/")[0]: c["frame"] for c in compiles if not c["frame"].startswith("? ")}
    for c in compiles:
        if c["frame"].startswith("? "):
            c["frame"] = names.get(c["id"].rpartition("/")[0], c["frame"])


class CompileLog:
    """The compilations between its construction (a collection's start) and `stop()`."""

    def __init__(self) -> None:
        # The records' times are wall-clock (time.time_ns); the collection's are host_clock_ns: one pair maps them.
        self._wall_ns, self._host_ns = time.time_ns(), host_clock_ns()
        self._breaks = _graph_breaks(_dynamo_utils())

    def stop(self, t0_ns: int) -> dict[str, Any]:
        """What compiled since the start, times in ns from `t0_ns` (host clock): {"compiles": [{id, frame, start_ns,
        end_ns, reason, failed}], "graph_breaks": [{reason, explanation, hint, count}], "lost": whether records of it
        may be gone (torch keeps its last 64)}; empty when nothing compiled, torch._dynamo is not imported (nothing
        can have compiled) or its records cannot be read."""
        utils = _dynamo_utils()
        if utils is None:
            return {}
        try:
            records = list(utils.get_compilation_metrics())
        except Exception:  # torch's internals changed: say nothing rather than something wrong
            return {}
        shift = self._host_ns - self._wall_ns - t0_ns
        since_us = self._wall_ns // 1000
        compiles: list[dict[str, Any]] = []
        # Newest first, up to the first from before the start: 5 µs, not 18, with 64 older records (2-core dev VM).
        for r in reversed(records):
            start, end = getattr(r, "start_time_us", None), getattr(r, "end_time_us", None)
            if not isinstance(start, int) or not isinstance(end, int):
                continue
            if start < since_us:
                break  # compiled before this collection (another test's, a fixture's)
            compiles.append(
                {
                    "id": str(getattr(r, "compile_id", "") or ""),
                    "frame": frame_name(
                        getattr(r, "co_name", None), getattr(r, "co_filename", None), getattr(r, "co_firstlineno", None)
                    ),
                    "start_ns": start * 1000 + shift,
                    "end_ns": max(start, end) * 1000 + shift,
                    "reason": _first_line(getattr(r, "recompile_reason", None)),
                    "failed": _first_line(getattr(r, "fail_reason", None)) if getattr(r, "fail_type", None) else "",
                }
            )
        compiles.reverse()
        _name_failed_frames(compiles)
        breaks: dict[tuple[str, str, str], dict[str, Any]] = {}
        for text, n in _graph_breaks(utils).items():
            if n > self._breaks.get(text, 0):  # breaks told apart only by dynamo's debug context are one to a user
                b = _break(text, n - self._breaks.get(text, 0))
                key = (b["reason"], b["explanation"], b["hint"])
                breaks.setdefault(key, {**b, "count": 0})["count"] += b["count"]
        # Dynamo keeps its last 64 records (a deque): when its oldest one is from this collection, older ones of
        # it may be gone.
        limit = getattr(getattr(utils, "_compilation_metrics", None), "maxlen", None)
        lost = len(records) >= limit and len(compiles) == len(records) if isinstance(limit, int) else False
        if not compiles and not breaks:
            return {}
        return {"compiles": compiles, "graph_breaks": list(breaks.values()), "lost": bool(lost)}
