"""The test's CPU side as every rule reads it (`Context.cpu`, context.py): `CpuView` over the rounds view, with CPU
samples, hotspots, where the thread waited, scopes and the breakdown's CPU parts, and the helpers that name a sampled
frame (a wait's site, a hot line). Pure functions of a `Timeline`; nothing here prints or writes.
"""

from __future__ import annotations

import linecache
import re
import sysconfig
from dataclasses import dataclass

import numpy as np

from ..caching import cached_property
from ..events import GC_FRAME, GPU_KINDS, Kind, sample_at_work, sample_on_cpu_ns
from ..merger import Timeline
from ..results import BreakdownPart, Hotspot, ScopeStat
from .arrays import wait_places
from .base import _MS, MIN_COUNTED_MS, Rounds, overlap_ns
from .calls import call_hotspots

#: Python files that are the framework rather than the user's code, for "framework overhead".
FRAMEWORK_MARKERS = ("(torch/", "(transformers/", "(accelerate/", "/torch/", "/transformers/")
#: A sampled frame's file in Python's standard library (the sampler names it by its absolute path; site-packages are
#: named relative to site-packages): under a `lib/python3.N/` folder, or this interpreter's stdlib, and not a package's.
_STDLIB = re.compile(r"\((?:<frozen |.*[\\/]lib[\\/]python3\.\d+t?[\\/])")
_STDLIB_HERE = tuple(
    f"({p.rstrip('/')}/" for p in {sysconfig.get_paths()["stdlib"], sysconfig.get_paths()["platstdlib"]}
)
#: What the asyncio event loop runs when it has nothing ready: its selector's wait.
EVENT_LOOP = "the asyncio event loop, with nothing ready to run"
_LOOP_FRAME = re.compile(r"^base_events:BaseEventLoop\._run_once \(.*asyncio[\\/]base_events\.py:")


#: torch.nn.functional's dropouts, as the sampler names their frames (the native op runs inside them: their self time).
_DROPOUT = re.compile(r"^functional:(?:feature_)?(?:alpha_)?dropout(?:[123]d)? \(.*torch[\\/]nn[\\/]functional\.py:")


def is_dropout(frame: str) -> bool:
    """Whether a sampled frame's label is one of torch.nn.functional's dropouts (rules_python.dropout_active)."""
    return _DROPOUT.match(frame) is not None


def in_stdlib(frame: str) -> bool:
    """Whether a sampled frame's label ("mod:fn (path:line)") is in Python's standard library."""
    if "-packages" in frame:  # dist-packages under lib/python3.N (Debian's pip), or a site-packages left whole
        return False
    return _STDLIB.search(frame) is not None or any(p in frame for p in _STDLIB_HERE)


def wait_site(frames: list[str]) -> tuple[str, str]:
    """Where a stack waited, as the user called it: (the innermost frame outside the standard library, the library
    function it called there, or ""). A wait in `q.get()` samples as threading's Condition.wait, which the user never
    called: it is named ("test_x:test_body (t.py:3)", "queue:Queue.get"). An asyncio loop waiting in its selector
    holds no frame of the user's (the awaiting coroutine is suspended): it is `EVENT_LOOP`."""
    i = len(frames) - 1
    while i >= 0 and in_stdlib(frames[i]):
        i -= 1
    if any(_LOOP_FRAME.match(f) for f in frames[i + 1 :]):
        return EVENT_LOOP, ""
    if i < 0 or i == len(frames) - 1:
        return frames[-1], ""
    return frames[i], frames[i + 1].split(" (")[0]


@dataclass(eq=False)
class CpuView:
    """The test's CPU side (`Context.cpu`): stack samples and hotspots, scopes (with the GPU work
    launched in them), the breakdown's CPU parts. Reads the timeline through its `Rounds`."""

    rounds: Rounds

    @property
    def timeline(self) -> Timeline:
        return self.rounds.timeline

    # -- CPU samples ------------------------------------------------------------

    @cached_property
    def _samples_in_rounds(self) -> tuple[np.ndarray, np.ndarray]:
        """The samples taken in the measured rounds (the stack is what the body ran then; one taken between rounds is
        the plugin's), and each one's time since the sample before that lies in the measured rounds (`overlap_ns`)."""
        ev, r = self.timeline.events, self.rounds
        sel = (ev["kind"] == int(Kind.SAMPLE)).nonzero()[0]  # int, here and below: see events.Kind
        sel = sel[r.in_rounds[sel]]  # (the few samples, then those taken in the rounds)
        if len(r.round_idx):
            rounds = r.round_idx
            dur = overlap_ns(ev["start"][sel], ev["end"][sel], ev["start"][rounds], ev["end"][rounds])
        else:  # no round spans (a trace recorded without them): every sample whole
            dur = (ev["end"][sel] - ev["start"][sel]).astype(float)
        return sel, dur

    @cached_property
    def sample_weights(self) -> dict[int, float]:
        """Sampled ns per folded-stack name id, inside measured rounds (`_samples_in_rounds`)."""
        sel, dur = self._samples_in_rounds
        return _by_name(self.timeline.events["name"][sel], dur)

    @cached_property
    def samples_know_cpu(self) -> bool:
        """Whether every sample in the measured rounds carries the thread's CPU time over it (`off_cpu_weights`)."""
        sel = self._samples_in_rounds[0]
        return bool(len(sel)) and bool(sample_on_cpu_ns(self.timeline.events["flags"][sel])[0].all())

    def functions_at_work(self, awake: float) -> list[tuple[str, float]]:
        """(function, self ms per round) of the hotspots cpu_saturation may offer to speed up: not the garbage
        collector's samples (python_gc's: "speed up gc:collect" is not advice), nor dropout's (training mode:
        dropout_active's "model.eval()"), nor a leaf on a CPU less than `awake` of its sampled time (asleep: "speed up
        selectors:_PollLikeSelector.select", a DataLoader's main thread in poll() for its workers, 2026-11-29)."""
        on_cpu = self.leaf_on_cpu
        return [
            (h.function, h.self_ms)
            for h in self.hotspots
            if h.self_ms > 0 and h.function != GC_FRAME and not is_dropout(h.function)
            and on_cpu.get(h.function, 1.0) >= awake
        ]  # fmt: skip

    @cached_property
    def leaf_on_cpu(self) -> dict[str, float]:
        """Each sampled leaf function's share of its sampled time on a CPU, where the samples carry it (empty where
        they do not): a leaf asleep in `poll()` or `sleep()` is sampled as self time it spent waiting."""
        if not self.samples_know_cpu:
            return {}
        on: dict[str, float] = {}
        total: dict[str, float] = {}
        off = self.off_cpu_weights
        for name, w in self.sample_weights.items():
            leaf = self.timeline.strings[name].rsplit(";", 1)[-1]
            total[leaf] = total.get(leaf, 0.0) + w
            on[leaf] = on.get(leaf, 0.0) + max(0.0, w - off.get(name, 0.0))
        return {leaf: on[leaf] / t for leaf, t in total.items() if t > 0}

    @cached_property
    def off_cpu_weights(self) -> dict[int, float]:
        """`sample_weights` off a CPU: each sample's time in the measured rounds less the thread's CPU time over it
        (events.sample_flags: the sampler reads the thread's CPU clock; its share, where the sample reaches outside
        the rounds), where every sample there says it; else `sample_weights` (a trace recorded before the samples said
        it, an imported one: every sampled ms counts, as before). Where the thread was at work at a sample's instant
        (events.SAMPLE_AT_WORK), its time off a CPU lies before: it goes to the sample just before (the one that
        ended where this one starts) if the thread was waiting there, else to no stack (`off_cpu_unplaced_ns`)."""
        return self._off_cpu[0]

    @property
    def off_cpu_unplaced_ns(self) -> float:
        """The samples' time off a CPU in the measured rounds that no stack is known for (`off_cpu_weights`)."""
        return self._off_cpu[1]

    @cached_property
    def _off_cpu(self) -> tuple[dict[int, float], float]:
        if not self.samples_know_cpu:
            return self.sample_weights, 0.0
        ev = self.timeline.events
        sel, dur = self._samples_in_rounds
        flags, names = ev["flags"][sel], ev["name"][sel]
        on_cpu = sample_on_cpu_ns(flags)[1]
        span = (ev["end"][sel] - ev["start"][sel]).astype(float)
        off = dur * np.clip(1.0 - on_cpu / np.maximum(span, 1.0), 0.0, 1.0)
        at_work = sample_at_work(flags)
        if not at_work.any():
            return _by_name(names, off), 0.0
        place = wait_places(ev["start"][sel], ev["end"][sel], at_work)
        placed = place >= 0
        return _by_name(names[place[placed]], off[placed]), float(off[~placed].sum())

    @cached_property
    def hotspots(self) -> list[Hotspot]:
        """Functions by self and total time per round: from the CPU samples, else from the recorded calls."""
        if not self.sample_weights:
            return call_hotspots(self.rounds)
        self_ns: dict[str, float] = {}
        total_ns: dict[str, float] = {}
        for name, w in self.sample_weights.items():
            frames = self.timeline.strings[name].split(";")
            if frames == ["<harness>"]:
                continue
            self_ns[frames[-1]] = self_ns.get(frames[-1], 0.0) + w
            for f in dict.fromkeys(frames):  # each frame once per sample, in a fixed order
                total_ns[f] = total_ns.get(f, 0.0) + w
        n, wall = self.rounds.n_rounds, max(1, self.rounds.wall_ns)
        spots = [
            Hotspot(
                function=f,
                self_ms=self_ns.get(f, 0.0) / _MS / n,
                total_ms=t / _MS / n,
                share=self_ns.get(f, 0.0) / wall,
            )
            for f, t in total_ns.items()
        ]
        spots.sort(key=lambda h: (-h.self_ms, -h.total_ms, h.function))  # ties by name: the same order every run
        return spots

    @cached_property
    def no_samples_reason(self) -> str:
        """Why no CPU sample counts in the measured rounds, as far as the collection says (`meta["sampler"]`: the
        sampler's kind, its interval, the GIL's switch interval); "" where one counts, or where it does not say."""
        tl = self.timeline
        meta = tl.meta.get("sampler")
        if not isinstance(meta, dict) or self.sample_weights:
            return ""
        if not meta:
            return "sampling was off (--inferscope-cpu=off)"
        if "calls" in meta:
            return "full call tracing (--inferscope-cpu=trace) records the calls, on the timeline, instead of samples"
        kind = meta.get("kind")
        if kind not in ("thread", "pending", "signal"):  # recorded before the kind was kept
            return ""
        interval = float(meta.get("interval_ms") or 0.0)
        round_ms = self.rounds.per_round_ms(self.rounds.wall_ns)
        fewer = "a shorter --inferscope-sample-interval-ms or more rounds"
        taken = int(np.count_nonzero(tl.events["kind"] == int(Kind.SAMPLE)))
        if taken:
            head = f"{taken} sample{' was' if taken == 1 else 's were'} taken, none inside a measured round"
        else:
            wall = float(tl.meta.get("wall_ns") or 0) / _MS
            head = f"the sampler took no sample in the {wall:.3g} ms of the collection (one every {interval:g} ms)"
            if wall < interval:
                return f"{head}: the collection was shorter than the sampling interval; {fewer}"
        if kind == "signal" or (kind == "pending" and "nudges" not in meta):  # in the test thread, on time: the
            # rounds are short against the interval
            return f"{head}: the rounds ({round_ms:.3g} ms each) are short against the sampling interval; {fewer}"
        switch = float(meta.get("switch_interval_ms") or 0.0)
        held = (
            f"which a round of pure Python shorter than the switch interval ({switch:g} ms; {round_ms:.3g} ms here) "
            "holds throughout"
            if round_ms < switch
            else "which the test thread held through the rounds (a C call that keeps it)"
        )
        needs = (
            "the thread sampler needs the GIL"
            if kind == "thread"
            else "the test thread's own sampler (its pending calls before CPython 3.13) waits for a switch of the GIL"
        )
        return (
            f"{head}: {needs}, {held}, so it gets in only between rounds; "
            "--inferscope-sampler=signal samples inside the test thread on time"
        )

    def samples_inside(
        self, starts: np.ndarray, ends: np.ndarray, lines: bool = False, api: bool = False
    ) -> list[tuple[str, float]]:
        """User frames (innermost) of the samples taken inside the given intervals, by sampled ms per round.

        With `api`, the intervals lie in the API rounds (idle gaps, sync calls: base.py), whose samples
        are read and counted per API round.

        With `lines`, each frame is named at the line it was on when sampled (the sampler keeps it in
        the sample's value), followed by that line's source where the file can be read here:
        "mod:fn (path.py:42: `x.item()`)". Traces recorded before the sampler kept lines name the function.
        """
        ev, r = self.timeline.events, self.rounds
        sel = ((ev["kind"] == int(Kind.SAMPLE)) & (r.in_api_rounds if api else r.in_rounds)).nonzero()[0]
        per_round = r.per_api_round_ms if api else r.per_round_ms
        if not len(sel) or not len(starts):
            return []
        order = starts.argsort()
        s, e = starts[order], ends[order]
        at = ev["end"][sel] - 1
        k = s.searchsorted(at, side="right") - 1
        inside = (k >= 0) & (at < e[np.maximum(k, 0)])
        # A sample taken inside an interval stands for the time since the sample before, within that interval only.
        since = np.maximum(ev["start"][sel], s[np.maximum(k, 0)])
        tally: dict[str, float] = {}
        for i, t0 in zip(sel[inside].tolist(), since[inside].tolist(), strict=True):
            leaf = self.timeline.name(i).rsplit(";", 1)[-1]
            if lines and ev["value"][i] > 0:
                leaf = at_line(leaf, int(ev["value"][i]))
            tally[leaf] = tally.get(leaf, 0.0) + float(ev["end"][i] - t0)
        return sorted(((k_, per_round(v)) for k_, v in tally.items()), key=lambda kv: -kv[1])

    def hottest_lines(self, functions: list[str]) -> dict[str, tuple[str, float]]:
        """Each function's hottest sampled line (the samples keep the leaf's line): its label at that line, with the
        source where readable (`at_line`), and its ms per round. A body whose own frame is hot spends the time in C
        calls on its lines (`torch.tensor(a_list)`, `.tolist()`): the function alone leaves the user to find which."""
        r = self.rounds
        ev = self.timeline.events
        out: dict[str, tuple[str, float]] = {}
        if not functions or not len(r.round_idx):
            return out
        heads = {fn.split(" (")[0]: fn for fn in functions}
        for label, ms in self.samples_inside(ev["start"][r.round_idx], ev["end"][r.round_idx], lines=True):
            fn = heads.get(label.split(" (")[0])
            if fn is not None and fn not in out and label != fn:  # the label at a line, largest first
                out[fn] = (label, ms)
        return out

    @cached_property
    def wait_sites(self) -> list[tuple[str, str, float]]:
        """The sampled time off a CPU by `wait_site` (frame, library call, ms per round), largest first: where the
        test thread was while off CPU, named at the user's call. Off CPU counts the wait for a core too (the thread's
        CPU clock does not tell them apart). Where the samples do not say how long the thread was on a CPU, every
        sampled ms counts: a body waiting 30 ms on a socket, then running a forward, was told to remove "the wait in
        linear:Linear.forward", where it computed (the 2-core VM, 2026-11-29)."""
        tally: dict[tuple[str, str], float] = {}
        for name, w in self.off_cpu_weights.items():
            frames = self.timeline.strings[name].split(";")
            if frames != ["<harness>"]:
                site = wait_site(frames)
                tally[site] = tally.get(site, 0.0) + w
        n = self.rounds.n_rounds
        return sorted(((f, c, ns / _MS / n) for (f, c), ns in tally.items()), key=lambda s: (-s[2], s[0], s[1]))

    @cached_property
    def framework_ns(self) -> float:
        """Sampled time whose innermost frame is in the framework's Python code."""
        total = 0.0
        for name, w in self.sample_weights.items():
            leaf = self.timeline.strings[name].rsplit(";", 1)[-1]
            if any(m in leaf for m in FRAMEWORK_MARKERS):
                total += w
        return total

    # -- scopes -----------------------------------------------------------------

    @cached_property
    def _paths(self) -> dict[int, str]:
        """Paths of every scope and module span, each built once from its nearest scope or module ancestor's.

        The spans between them (a traced call of `--inferscope-cpu=trace`, a Kineto trace's Python function or op)
        are not part of the path: `outer` calling a helper that opens `inner` is `outer/inner` either way.
        """
        tl = self.timeline
        ev = tl.events
        idx = tl.mask(Kind.SCOPE, Kind.MODULE).nonzero()[0]  # (np.flatnonzero's wrapper costs more than this)
        memo: dict[int, str] = {}
        names, parents = ev["name"][idx].tolist(), tl.parent[idx].tolist()
        parent = tl.parent
        for i, name, p in zip(idx.tolist(), names, parents, strict=True):  # in start order: ancestors come first
            while p >= 0 and p not in memo:  # up past the spans that are neither (memo: the scopes and modules so far)
                p = int(parent[p])
            own = tl.strings[name]
            memo[i] = f"{memo[p]}/{own}" if p >= 0 else own
        return memo

    def _gpu_inside(self) -> tuple[dict[int, float], dict[int, float]]:
        """GPU ns and kernel launches per scope/module span of the API rounds, its children's included.

        A GPU record's parent is the span its launch ran in (the merger's doing, from the launch
        calls: so the API rounds), so the per-parent sums (one bincount) are propagated up the span
        tree, innermost spans first.
        """
        tl = self.timeline
        ev = tl.events
        if not self.timeline.has_gpu:
            return {}, {}
        gpu = (tl.mask(*GPU_KINDS) & self.rounds.in_api_rounds).nonzero()[0]
        parents = tl.parent[gpu]
        keep = parents >= 0
        gpu, parents = gpu[keep], parents[keep]
        n = len(ev)
        ns = np.bincount(parents, weights=(ev["end"][gpu] - ev["start"][gpu]).astype(float), minlength=n)
        count = np.bincount(parents, weights=(ev["kind"][gpu] == int(Kind.KERNEL)).astype(float), minlength=n)
        spans = tl.mask(Kind.SCOPE, Kind.MODULE, Kind.ROUND, Kind.TEST, Kind.WAIT, Kind.CALL).nonzero()[0]
        span_parent = tl.parent[spans].tolist()
        for i, p in zip(spans[::-1].tolist(), span_parent[::-1], strict=True):  # reverse start order: bottom-up
            if p >= 0 and ns[i]:
                ns[p] += ns[i]
                count[p] += count[i]
        touched = spans[ns[spans] > 0].tolist()
        return {i: float(ns[i]) for i in touched}, {i: float(count[i]) for i in touched}

    @cached_property
    def scopes(self) -> list[ScopeStat]:
        tl, r = self.timeline, self.rounds
        ev = tl.events
        idx = (tl.mask(Kind.SCOPE, Kind.MODULE) & r.in_rounds).nonzero()[0]
        if not len(idx):  # no scope or module span in the rounds (a test without them): none to list, nor their GPU
            return []
        paths = self._paths
        agg: dict[tuple[str, str], list[float]] = {}
        kinds, durs = ev["kind"][idx].tolist(), (ev["end"][idx] - ev["start"][idx]).tolist()
        gpu_ns, launches = self._gpu_inside()
        gpu_agg: dict[tuple[str, str], list[float]] = {}
        for i, k, d in zip(idx.tolist(), kinds, durs, strict=True):
            key = (paths[i], "scope" if k == Kind.SCOPE else "module")
            agg.setdefault(key, []).append(float(d))
        # GPU time per scope: from the API rounds (their GPU records know their launch's span), per API round.
        api_idx = idx
        if r.has_trace_rounds:
            api_idx = (tl.mask(Kind.SCOPE, Kind.MODULE) & r.in_api_rounds).nonzero()[0]
        for i, k in zip(api_idx.tolist(), ev["kind"][api_idx].tolist(), strict=True):
            g = gpu_agg.setdefault((paths[i], "scope" if k == Kind.SCOPE else "module"), [0.0, 0.0])
            g[0] += gpu_ns.get(i, 0.0)
            g[1] += launches.get(i, 0.0)
        wall, n, n_api = max(1, r.wall_ns), r.n_rounds, r.n_api_rounds
        has_gpu = tl.has_gpu
        out = [
            ScopeStat(
                path=p,
                kind=k,
                count=len(d),
                total_ms=sum(d) / _MS / n,
                mean_ms=sum(d) / len(d) / _MS,
                share=sum(d) / wall,
                gpu_ms=gpu_agg.get((p, k), [0.0, 0.0])[0] / _MS / n_api if has_gpu else None,
                launches=gpu_agg.get((p, k), [0.0, 0.0])[1] / n_api if has_gpu else None,
            )
            for (p, k), d in agg.items()
        ]
        out.sort(key=lambda s: s.total_ms, reverse=True)
        return out

    def thread_parts(self) -> list[BreakdownPart]:
        """The breakdown's test-thread parts: on and off CPU, from the per-round counters."""
        r = self.rounds
        wall = max(1, r.wall_ns)
        cpu_ns = r.counters.get("thread_cpu_ns", 0.0)
        round_ms = r.per_round_ms(wall)
        why = ""
        if not r.has_counters:
            why = "the collection kept no per-round CPU counters (e.g. an imported torch.profiler trace)"
        elif round_ms < MIN_COUNTED_MS:
            short = f"{MIN_COUNTED_MS * 1000:.0f} µs"
            why = f"rounds of {round_ms * 1000:.0f} µs: under {short}, too short for the CPU clocks to split"
        if why:
            return [
                BreakdownPart("CPU (test thread on CPU)", None, None, collected=False, reason=why),
                BreakdownPart("CPU wait (test thread off CPU)", None, None, collected=False, reason=why),
            ]
        off = max(0.0, wall - cpu_ns)
        return [
            BreakdownPart("CPU (test thread on CPU)", r.per_round_ms(cpu_ns), cpu_ns / wall),
            BreakdownPart("CPU wait (test thread off CPU)", r.per_round_ms(off), off / wall),
        ]

    def framework_part(self) -> BreakdownPart:
        """The breakdown's framework part: sampled time in the framework's Python code."""
        label = "Framework (torch modules and the native ops they call, sampled)"
        if not self.sample_weights:
            reason = "no CPU stack samples: sampling off or rounds too short"
            return BreakdownPart(label, None, None, collected=False, reason=reason)
        fw = self.framework_ns
        return BreakdownPart(label, self.rounds.per_round_ms(fw), fw / max(1, self.rounds.wall_ns))


def _by_name(names: np.ndarray, weights: np.ndarray) -> dict[int, float]:
    """Summed weights per name id, the zeros left out."""
    if not len(names):
        return {}
    sums = np.bincount(names, weights=weights)
    return {int(i): float(sums[i]) for i in sums.nonzero()[0]}


_LABEL_LINE = re.compile(r"^(?P<head>.*) \((?P<path>.+):(?P<line>\d+)\)$")


def at_line(label: str, line: int) -> str:
    """'mod:fn (path.py:10)' at line 42 -> 'mod:fn (path.py:42: `source of line 42`)' (the source where readable)."""
    m = _LABEL_LINE.match(label)
    if m is None:
        return label
    source = linecache.getline(m["path"], line).strip()
    shown = f": `{source[:77] + '...' if len(source) > 80 else source}`" if source else ""
    return f"{m['head']} ({m['path']}:{line}{shown})"


_AT_LINE = re.compile(r"^.* \((?P<path>.+?):(?P<line>\d+)(?:: (?P<source>`.*`))?\)$")


def at_short(line: tuple[str, float] | None) -> str:
    """ ", at file.py:42 `source`" for a hottest line (`CpuView.hottest_lines`), "" without one."""
    m = _AT_LINE.match(line[0]) if line else None
    if m is None:
        return ""
    source = f" {m['source']}" if m["source"] else ""
    return f", at {m['path'].replace(chr(92), '/').rsplit('/', 1)[-1]}:{m['line']}{source}"
