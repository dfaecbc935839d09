"""The CPU and memory rules: each a small pure function from a `Context` to findings with evidence.

(The memory rule is in `rules_memory.py`, its threshold here; the GPU rules in `rules_gpu.py`; the package's
DEFAULT_RULES lists them all.)

A rule returns the findings it can support with numbers, or none. `share` is the fraction
of the measured wall time the finding explains; `confidence` says how sure the rule is
that the share is right (how much data backs it). Suggestions carry the time they are
expected to save per round, computed from the evidence.
"""

from __future__ import annotations

from collections.abc import Callable

from ..results import Finding, Suggestion
from .base import MIN_COUNTED_MS
from .context import EVENT_LOOP, Context, at_short
from .metrics import KERNEL_SPLIT_MIN_NS

Rule = Callable[[Context], list[Finding]]

#: The test thread must be on CPU at least this share of the time to call it CPU-bound.
CPU_BUSY_MIN = 0.5
#: Samples needed for full confidence in sampled attributions.
SAMPLES_FOR_CONFIDENCE = 30
#: RSS growth per measured round that counts as memory pressure.
RSS_GROWTH_MB_PER_ROUND = 1.0
#: Share of the round the test thread waits for a core before contention is reported.
CONTENTION_MIN = 0.1
#: Involuntary context switches per ms of the round (with every available core busy) that count as preemption.
PREEMPT_PER_MS = 0.5
#: Cores the process used beyond torch's intra-op threads as read after the rounds (`cpu.torch_threads`) from which
#: the evidence says the body may have set its own: a body setting 2 threads and giving the session's 1 back used
#: 1.83-1.97 cores, one left on that 1 thread 0.99-1.01 (10 tanh(a @ a) of 512x512, the 2-core VM, 2026-11-30).
THREADS_READ_EXCEEDED = 0.5
#: The process's other threads on CPU, over the test thread's time off CPU, from which off_cpu_wait says it may have
#: waited for them (a Python thread holding the GIL, worker threads).
OWN_THREADS_MIN = 0.8
#: The share of the other threads' CPU over the collection that native threads spent (collectors/threads.py), from
#: which off_cpu_wait says the test thread waited for them in its ops, not for a Python thread holding the GIL.
NATIVE_THREADS_MIN = 0.8
_MB = 1024 * 1024


def threads_action(cores: int) -> str:
    """The suggestion to run torch on fewer threads, the same words from cpu_contention and off_cpu_wait (the
    suggestions are listed once by their action). OpenMP's threads spin while they wait for each other: with torch at
    its 2 threads on the 2-core VM shared with other processes (2026-11-29), 30 tanh(a @ b) of 512x512 took a median
    517-736 ms a call against 76-113 ms on 1 thread, 82-135 on 8 (libgomp waits passively with more threads than
    cores) and 119 on 2 under OMP_WAIT_POLICY=passive."""
    n = max(1, cores - 1)
    return (
        f"Use fewer torch threads than available cores (torch.set_num_threads({n}), or OMP_NUM_THREADS={n}), or "
        "OMP_WAIT_POLICY=passive: torch's OpenMP threads spin while they wait for each other, on the cores the "
        "threads they wait for need"
    )


def _sample_confidence(ctx: Context, floor: float = 0.6) -> float:
    """How much to trust a sampled attribution: grows with the number of samples behind it."""
    n = ctx.metrics.get("cpu.samples") or 0.0
    return floor + (1.0 - floor) * min(1.0, n / SAMPLES_FOR_CONFIDENCE)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _user_mode(ctx: Context, user_busy: float) -> str:
    """The user-mode share, or why it is not known (metrics.KERNEL_SPLIT_MIN_NS)."""
    if ctx.metrics.get("cpu.kernel_fraction") is None:
        ms = KERNEL_SPLIT_MIN_NS / 1e6
        return f"not known (under {ms:.0f} ms of CPU: the kernel's user/system split is a tick or two)"
    return _pct(user_busy)


def _or_waiting(ctx: Context) -> str:
    """' or waiting for a core (X)' where the thread waited for one (the busy share counts it: runnable, not waiting on
    anything but the CPU), so that the summary does not read as time on the CPU alone beside the breakdown's."""
    runqueue = ctx.metrics.get("cpu.test_thread_runqueue") or 0.0
    return f" or waiting for a core (waiting {_pct(runqueue)} of the time)" if runqueue >= 0.05 else ""


def cpu_saturation(ctx: Context) -> list[Finding]:
    """The test thread was on CPU, in user mode, most of the time: the body is CPU-bound; the hotspots say where.

    The share and confidence rest on the thread's CPU-time counters, which are exact;
    the sampled hotspots only say where the time went, so they weigh in lightly.
    Kernel time (page faults, syscalls) is left to the memory and wait rules.
    """
    busy = ctx.metrics.get("cpu.test_thread_working") or 0.0
    user_busy = ctx.metrics.get("cpu.test_thread_user_busy") or 0.0
    if user_busy < CPU_BUSY_MIN or ctx.gpu.launch_dominated:
        return []  # (a host busy launching tiny kernels is the launch rule's finding)
    if ctx.gpu.collected:
        # With GPU data the CPU bounds the round only while the GPU waits for it: that is the
        # host-wait idle time, gpu_idle_host's finding (host work while the GPU computes is
        # overlapped; host work after a sync is the sync's cost).
        return []
    share = min(1.0, user_busy)
    r = ctx.rounds
    round_ms = r.per_round_ms(r.wall_ns)
    if round_ms * busy < MIN_COUNTED_MS:
        return []  # below what the counters can tell: a `pass` body is not a CPU-bound test
    # A leaf is asleep below half the share of the time it worked the thread was on a CPU (CpuView.functions_at_work)
    awake = 0.5 * (ctx.metrics.get("cpu.test_thread_busy") or 0.0) / max(busy, 1e-9)
    spots = ctx.cpu.functions_at_work(awake)[:5]
    evidence: dict[str, object] = {
        "test thread CPU per round (ms)": round(r.per_round_ms(r.counters.get("thread_cpu_ns", 0.0)), 3),
        "wall per round (ms)": round(round_ms, 3),
        "test thread on CPU or waiting for a core, outside device waits": _pct(busy),
        "waiting for a core (CPU contention)": _pct(ctx.metrics.get("cpu.test_thread_runqueue") or 0.0),
        "of it in user mode": _user_mode(ctx, user_busy),
        "process CPU / wall": f"{ctx.metrics.get('cpu.process_utilisation') or 0.0:.2f}",
    }
    for i, (fn, ms) in enumerate(spots[:3], 1):
        evidence[f"hotspot {i}"] = f"{fn}: {ms:.2f} ms/round self ({_pct(ms / round_ms if round_ms else 0.0)})"
    lines = ctx.cpu.hottest_lines([fn for fn, _ in spots[:2]])
    if spots and spots[0][0] in lines:
        evidence["hottest line"] = "{}: {:.2f} ms/round".format(*lines[spots[0][0]])
    suggestions = [
        Suggestion(
            action=f"Speed up or take off the critical path: {fn.split(' (')[0]}{at_short(lines.get(fn))}",
            rationale=f"{ms:.2f} ms per round ({_pct(ms / round_ms if round_ms else 0.0)} of the round) is spent in "
            "this function itself",
            saving_ms=ms,
            rule="cpu_saturation",
        )
        for fn, ms in spots[:2]
    ]
    suggestions.append(_batch(busy, round_ms * busy))
    if len(suggestions) < 2:
        suggestions += _spread(ctx, round_ms * busy)
    top = f"; hottest: {spots[0][0].split(' (')[0]} ({spots[0][1]:.2f} ms/round)" if spots else ""
    return [
        Finding(
            rule="cpu_saturation",
            title="CPU-bound: the test thread is busy on the CPU",
            summary=f"The test thread was on CPU{_or_waiting(ctx)} for {_pct(busy)} of the measured time "
            f"({round_ms:.2f} ms/round){top}.",
            cause="cpu_bound",
            share=share,
            share_measured=True,
            confidence=min(1.0, user_busy / 0.8) * _sample_confidence(ctx, floor=0.85),
            evidence=evidence,
            events=ctx.refs(r.round_idx, 3),
            suggestions=suggestions,
        )
    ]


def _batch(busy: float, spent_ms: float) -> Suggestion:
    """Batching or vectorising the per-item work, its saving not estimated, at most the thread's working time (the
    hottest functions' sampled time read 3-18% under the saving where it was all of the round): the samples give the
    hottest functions' time, not the calls it was spent in. Half of it read 9.4-10.2 ms where 2,000 per-element ops
    vectorised saved 19.5-22.6 (all of it: each call was the call's own cost), and 14.8-18.8 ms where 20 forwards of 64
    rows through an MLP batched as one of 1,280 saved -5.9 to 2.1 (the time was torch's native op), which a loop of 200
    batch-1 forwards reads the same as (batched: 3.9-10.0 ms saved of 4.0-10.1; three runs on the 2-core VM,
    2026-11-30: docs/scenarios.md)."""
    return Suggestion(
        action="Batch or vectorise the per-item Python work (tensor ops instead of Python loops)",
        rationale=f"the test thread is on CPU {_pct(busy)} of every round running Python and native code. What "
        f"batching saves is between nothing and the thread's {spent_ms:.2f} ms a round on the CPU: most of it where "
        "each call does little (many tiny ops, a loop of batch-1 forwards), little where each call is a large native "
        "op (a matmul over many rows); the stack samples do not tell the two apart (torch.profiler's op counts do: "
        "the time per call)",
        saving_ms=0.0,
        rule="cpu_saturation",
    )


def _spread(ctx: Context, busy_ms: float) -> list[Suggestion]:
    """Spreading the per-item work over the cores the process left idle, where it left some. Not where the test thread
    waited for a core: the cores this process left were then busy with other processes' work."""
    cores = ctx.metrics.get("cpu.available_cores") or 1.0
    proc = ctx.metrics.get("cpu.process_utilisation") or 0.0
    if cores - proc < 0.5 or (ctx.metrics.get("cpu.test_thread_runqueue") or 0.0) >= CONTENTION_MIN:
        return []
    return [
        Suggestion(
            action="Spread the per-item work over the idle cores (DataLoader num_workers, a process pool for "
            "tokenisation)",
            rationale=f"the process used {proc:.2f} of {cores:.0f} available cores",
            saving_ms=busy_ms * (1.0 - 1.0 / min(cores, 4.0)),
            rule="cpu_saturation",
        )
    ]


#: off_cpu_wait's evidence for the time off a CPU that fell between samples taken with the thread at work.
UNPLACED = "off CPU where no sample saw it (ms/round)"


def off_cpu_wait(ctx: Context) -> list[Finding]:
    """The test thread spent much of the round off CPU (sleeping, I/O, locks, waiting on other threads)."""
    if ctx.metrics.get("cpu.test_thread_working") is None:
        return []  # no CPU counters: nothing to say about waiting
    busy = ctx.metrics.get("cpu.test_thread_working") or 0.0
    waiting = 1.0 - busy
    if waiting < 0.3 or ctx.gpu.collected:
        return []  # with a GPU, waiting is the sync and idle rules' business
    round_ms = ctx.rounds.per_round_ms(ctx.rounds.wall_ns)
    wait_ms = round_ms * waiting
    sites = [s for s in ctx.cpu.wait_sites if s[2] > 0]
    unplaced = ctx.rounds.per_round_ms(ctx.cpu.off_cpu_unplaced_ns)  # waits between samples taken at work
    sampled = sum(s[2] for s in sites) + unplaced
    if ctx.cpu.samples_know_cpu and sampled > wait_ms:
        # The samples' time off a CPU counts the wait for a core too: taken out in proportion, so that the sites add
        # up to the wait (28 ms off CPU read "where it waited: 46 ms" beside 18 ms waiting for a core, 2026-11-29).
        sites = [(f, c, ms * wait_ms / sampled) for f, c, ms in sites]
        unplaced *= wait_ms / sampled
    sites = sites[:3]
    if wait_ms < MIN_COUNTED_MS:
        return []  # below what the thread's CPU clock and the counters' reads can tell from working
    why, suggestions, in_torch = _waited_for_threads(ctx, waiting, round_ms)
    if not sites:
        action = "Find what the thread waits on (I/O, locks, sleeps) and overlap or remove it"
    elif sites[0][0] == EVENT_LOOP:
        action = (
            "Overlap the awaits: the event loop sat waiting for a sleep, I/O or another task; await independent "
            "work together (asyncio.gather, a TaskGroup) or remove the sleeps"
        )
    else:
        frame, call = sites[0][0].split(" (")[0], sites[0][1]
        action = (
            f"Remove or overlap the wait in {frame}'s call to {call}"
            if call
            else f"Remove or overlap the wait in {frame}"
        )
    return [
        Finding(
            rule="off_cpu_wait",
            title="The test thread waits off CPU",
            summary=f"The test thread was off CPU for {_pct(waiting)} of the measured time ({wait_ms:.2f} ms per round)"
            + why,
            cause="cpu_bound" if in_torch else None,  # torch's threads computing the op: the body's CPU work
            share=waiting,
            share_measured=True,
            confidence=_sample_confidence(ctx),
            evidence={
                "off CPU per round (ms)": round(wait_ms, 3),
                **{
                    f"where it waited {i}": f"{frame}{f', in {call}' if call else ''}: {ms:.2f} ms/round"
                    for i, (frame, call, ms) in enumerate(sites, 1)
                },
                **({UNPLACED: round(unplaced, 3)} if unplaced >= MIN_COUNTED_MS else {}),
                "the process's other threads on CPU (cores)": _others_said(ctx),
            },
            suggestions=[
                *suggestions,
                *[
                    Suggestion(
                        action=action,
                        rationale=f"{wait_ms:.2f} ms per round is spent waiting rather than computing",
                        saving_ms=min(sites[0][2], wait_ms) if sites else wait_ms * 0.5,  # a wait saves its time
                        rule="off_cpu_wait",
                    )
                ][in_torch:],  # a wait for torch's own threads, in its ops: none in the body to remove or overlap
            ],
        )
    ]


def _others_said(ctx: Context) -> float | str:
    """The other threads' cores as the evidence says them: whose they were where no Python thread ran beside."""
    others = round(_other_threads(ctx), 2)
    if (native := _native_others(ctx)) is not None and others > 0:
        return f"{others:.2f} ({_pct(native)} of their time native threads', not Python threads')"
    return others


def _native_others(ctx: Context) -> float | None:
    """The native threads' share of the other threads' CPU where it is NATIVE_THREADS_MIN or more, else None."""
    native = ctx.metrics.get("cpu.other_threads_native") or 0.0
    return native if native >= NATIVE_THREADS_MIN else None


def _other_threads(ctx: Context) -> float:
    """CPU time of the process's other threads over the round, in cores."""
    m = ctx.metrics
    return max(0.0, (m.get("cpu.process_utilisation") or 0.0) - (m.get("cpu.test_thread_busy") or 0.0))


def _waited_for_threads(ctx: Context, waiting: float, round_ms: float) -> tuple[str, list[Suggestion], bool]:
    """off_cpu_wait's why, its suggestions about the process's own threads where it may have waited for them, and
    whether those were torch's own intra-op threads (more than cores).

    Where the process's other threads used as many cores as the test thread waited, it may have waited for them. A
    Python thread spinning beside a pure-Python body held the GIL about half of each round (the 2-core VM,
    2026-11-29: the body ran 24.8 ms against 11.6 ms alone), which read as a wait "in" the body's own loop. With more
    torch threads than cores each parallel op waits for its last thread, itself waiting for a core (8 threads on the
    2-core VM, 2026-11-29: the test thread off CPU 52% of the round while the others used 0.78 cores), which read as
    a Python thread holding the GIL."""
    m, wait_ms = ctx.metrics, round_ms * waiting
    others = _other_threads(ctx)
    if others < OWN_THREADS_MIN * waiting:
        return ": sleeping, blocked on I/O or a lock, or waiting for worker threads.", [], False
    threads, cores = m.get("cpu.torch_threads"), int(m.get("cpu.available_cores") or 1)
    saving = min(wait_ms, others * round_ms)
    if threads is not None and threads > cores:
        # Their time is the body's own work, done on the other cores: not a wait to remove, so no saving is claimed
        # (cpu_contention's thread advice saves the wait for a core). On the loaded 2-core VM (2026-11-29) the body on
        # 8 threads was no slower than on 1.
        why = (
            f" while torch's {int(threads)} intra-op threads, on {cores} available cores, used {others:.2f} cores: it "
            "waited for them in torch's parallel ops (the op's work, on the other cores), each of which waits for "
            "its last thread, itself waiting for a core."
        )
        return why, [], True
    if _native_others(ctx) is not None:
        # No Python thread ran beside it: the others were native, torch's intra-op pool (a body's own setting, given
        # back before the reading above) or a native library's, running the ops the body handed them. A body on 8
        # threads it set itself and gave back was told to keep "a Python thread" out, saving ~9.6 ms; on 2 threads or
        # 1 it ran 1.5-10x slower (20 matmuls of 384x384, the 2-core VM, 2026-11-30).
        why = (
            f" while the process's other threads, native ones and not Python threads (torch's intra-op threads, which "
            f"a body may set itself, or a native library's), used {others:.2f} cores: it waited for them in the ops "
            "it handed them (the ops' work, on the other cores)."
        )
        return why, [], True
    why = (
        f" while the process's other threads used {others:.2f} cores: it may have waited for them (a Python thread "
        "holding the GIL, or worker threads it handed work to)."
    )
    return (
        why,
        [
            Suggestion(
                action="Keep the process's other threads from holding up the test thread: a Python thread running "
                "beside the body takes the GIL in turns with it (move its work to a process, or pause it while "
                "inference runs), and more worker threads than cores (torch.set_num_threads) keep it waiting for them",
                rationale=f"the test thread was off CPU {wait_ms:.2f} ms per round while the process's other threads "
                f"used {others:.2f} cores",
                saving_ms=saving,
                rule="off_cpu_wait",
            )
        ],
        False,
    )


def _threads_read(threads: int, proc: float) -> int | str:
    """torch's intra-op threads as the evidence says them: read in the test thread after the rounds, where a body that
    set its own and gave the caller's back reads as the caller's (OpenMP keeps the setting per thread; nothing in torch
    is hooked to see it). Where the process used more cores than that, the number says what it cannot know."""
    if proc < threads + THREADS_READ_EXCEEDED:
        return threads
    return f"{threads} (read after the rounds; the process used {proc:.2f} cores: the body may set its own)"


def cpu_contention(ctx: Context) -> list[Finding]:
    """CPU threading contention: the test thread waited for a core, torch runs more intra-op threads than the
    process may use (os.sched_getaffinity), or the process, using all its cores, is preempted often.

    Rounds shorter than MIN_COUNTED_MS leave only the thread setting to judge: over a few µs the counters read
    nonsense (a `pass` body's 2 µs round with two preemptions read "835 per ms" and "process CPU / wall 2.50"
    on a loaded machine, and its 17 kB of reports grew past 20 kB with the finding)."""
    m = ctx.metrics
    if m.get("cpu.test_thread_runqueue") is None:
        return []  # no per-round counters
    runq = m.get("cpu.test_thread_runqueue") or 0.0
    cores = int(m.get("cpu.available_cores") or 1)
    threads = m.get("cpu.torch_threads")
    proc = m.get("cpu.process_utilisation") or 0.0
    round_ms = ctx.rounds.per_round_ms(ctx.rounds.wall_ns)
    switches = m.get("cpu.involuntary_switches_per_round") or 0.0
    per_ms = switches / round_ms if round_ms else 0.0
    oversubscribed = threads is not None and threads > cores
    counted = round_ms >= MIN_COUNTED_MS
    preempted = counted and per_ms >= PREEMPT_PER_MS and proc >= 0.9 * cores
    if (runq < CONTENTION_MIN or not counted) and not oversubscribed and not preempted:
        return []
    wait_ms = round_ms * runq
    evidence: dict[str, object] = {
        "waiting for a core per round (ms)": round(wait_ms, 3),
        "share of the round": _pct(runq),
        "involuntary context switches per round": round(switches),
        "involuntary context switches per ms": round(per_ms, 2),
        "cores available to the process": cores,
        "cores on the machine": int(m.get("cpu.cores") or cores),
        "process CPU / wall": f"{proc:.2f}",
    }
    suggestions = []
    if runq > 0:
        suggestions.append(
            Suggestion(
                "Measure on a machine (or CPU set) this test has to itself: other threads took the cores it was "
                "ready to use, so its latency here includes their load",
                f"the test thread waited {wait_ms:.2f} ms per round for a core",
                wait_ms,
                "cpu_contention",
            )
        )
    if threads is not None:
        evidence["torch intra-op threads"] = _threads_read(int(threads), proc)
        if threads >= cores:  # first where torch's own threads outnumber the cores: they took them, not others
            suggestions.insert(
                0 if oversubscribed else len(suggestions),
                Suggestion(
                    threads_action(cores),
                    f"{int(threads)} intra-op threads on {cores} available cores; {round(switches)} involuntary "
                    f"context switches per round; the test thread waited for a core {wait_ms:.2f} ms per round",
                    wait_ms,  # the spinning threads' partners waited for those cores: fewer threads, no such wait
                    "cpu_contention",
                ),
            )
    why = []
    if runq >= CONTENTION_MIN:
        why.append(f"the test thread waited for a core {_pct(runq)} of the measured time ({wait_ms:.2f} ms per round)")
    if oversubscribed:
        why.append(f"torch runs {int(threads or 0)} intra-op threads on {cores} available cores")
    if preempted:
        why.append(f"the process used all {cores} cores and was preempted {per_ms:.1f} times per ms")
    return [
        Finding(
            rule="cpu_contention",
            title="CPU contention: more runnable threads than cores",
            summary="CPU contention: " + "; ".join(why) + ".",
            cause=None,
            share=runq,
            share_measured=True,
            confidence=0.9,
            evidence=evidence,
            suggestions=suggestions,
        )
    ]
