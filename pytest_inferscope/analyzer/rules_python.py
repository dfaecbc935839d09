"""Rules about the Python side of a CPU-only body: the garbage collector's time in the test thread, dropout that
runs (a model left in training mode), a multi-process DataLoader's workers started, stopped and waited for.

(The CPU and memory rules are in `rules.py`; the package's DEFAULT_RULES lists these too.)
"""

from __future__ import annotations

from ..results import Finding, Suggestion
from .base import MIN_COUNTED_MS
from .context import Context, is_dropout

#: Sampled time in torch's functional dropout, as a share of the round, from which the model is said to be in training
#: mode. In eval mode dropout returns its input: an MLP's two Dropout layers sampled 0.2% of the round in eval mode,
#: 38% in training mode (the 2-core VM, 2026-11-29).
DROPOUT_MIN = 0.05

#: The test thread's share of the round in Python's garbage collector from which it is a finding.
GC_MIN = 0.1


def _gc_suggestions(
    gc_ms: float, freeing_ms: float | None, full_ms: float | None, freed: float, full: float
) -> list[Suggestion]:
    """One suggestion a fix, each saving what that fix takes away. Only gc.disable() around the call takes all of the
    collector's time out of it (moved between batches); broken cycles leave the freeing to reference counting and the
    walks of live objects where they were, gc.freeze() removes only the full collections' walks of what it froze. On
    a call building 60,000 objects with cycles (the 2-core VM, 2026-11-30): 43-54 ms of collector a round, of which
    the collections that freed objects took 30-39 and the full ones 36-47; breaking the cycles saved 11-17 ms,
    gc.freeze() 21-27, gc.disable() with the collection after the call 34-54 (docs/scenarios.md, session 40).
    `freeing_ms`/`full_ms` None: a trace recorded before the collector timed them apart (bounded by `gc_ms`);
    `freed`, `full`: objects freed and full collections a round."""
    work = f"frees the {freed:.0f} objects a round and walks the live ones" if freed >= 1 else "walks the live objects"
    out = [
        Suggestion(
            action="Take Python's garbage collector out of the inference call: gc.disable() around it and "
            "gc.collect() between batches, outside the timed call",
            rationale=f"the collector's {gc_ms:.2f} ms per round leave the call; the collection between batches "
            f"still does its work there ({work})",
            saving_ms=gc_ms,
            rule="python_gc",
        )
    ]
    if freed >= 1:
        walks = (
            f"; the {gc_ms - freeing_ms:.2f} ms in collections that freed nothing walked live objects, which stay"
            if freeing_ms is not None
            else ""
        )
        out.append(
            Suggestion(
                action="No reference cycles in per-call objects (a weakref for the back-reference, or the links "
                "cleared when the call is done): reference counting then frees them as they go",
                rationale=f"between nothing and {gc_ms if freeing_ms is None else freeing_ms:.2f} ms per round, the "
                f"collections that freed the {freed:.0f} objects a round: their freeing stays, to reference "
                f"counting{walks}",
                saving_ms=0.0,
                rule="python_gc",
            )
        )
    if full > 0:
        out.append(
            Suggestion(
                action="gc.freeze() once the model is loaded: its objects leave the generations the full "
                "collections walk",
                rationale=f"between nothing and {gc_ms if full_ms is None else full_ms:.2f} ms per round, the "
                f"{round(full, 1):g} full collections' time a round: they walk every tracked object, those loaded "
                "before included, and free the cycles they find, which freezing leaves",
                saving_ms=0.0,
                rule="python_gc",
            )
        )
    return out


def python_gc(ctx: Context) -> list[Finding]:
    """The test thread spent GC_MIN of the round or more in Python's garbage collector (collectors/pygc.py).

    The collector runs inside the call whose allocation crossed a generation's threshold, so the stack samples charge
    its time to that call; the per-round counters time it apart. Its time is the test thread's CPU work: cpu_bound
    without GPU data; with it, the GPU rules say whether the host held the device up, and this finding has no class.
    """
    c, r = ctx.rounds.counters, ctx.rounds
    gc_ns = c.get("gc_ns", 0.0)
    share = gc_ns / max(1, r.wall_ns)
    gc_ms = r.per_round_ms(gc_ns)
    if share < GC_MIN or gc_ms < MIN_COUNTED_MS:
        return []
    n = max(1.0, c.get("rounds", 1.0))
    collections, full, freed = (c.get(k, 0.0) / n for k in ("gc_collections", "gc_full", "gc_collected"))
    # Rounds recorded before the split read 0 in both where objects were freed or full collections ran: unknown
    timed_apart = c.get("gc_freeing_ns", 0.0) > 0 or c.get("gc_full_ns", 0.0) > 0 or not (freed or full)
    freeing_ms = r.per_round_ms(c.get("gc_freeing_ns", 0.0)) if timed_apart else None
    full_ms = r.per_round_ms(c.get("gc_full_ns", 0.0)) if timed_apart else None
    spots = [h for h in ctx.cpu.hotspots if h.self_ms > 0]
    where = (
        f"; the stack samples charge it to the calls that allocated when it ran (hottest: "
        f"{spots[0].function.split(' (')[0]}, {spots[0].self_ms:.2f} ms/round)"
        if spots
        else ""
    )
    split = {} if freeing_ms is None or full_ms is None else {
        "in collections that freed objects, per round (ms)": round(freeing_ms, 3),
        "in full collections, per round (ms)": round(full_ms, 3),
    }  # fmt: skip
    return [
        Finding(
            rule="python_gc",
            title="Python's garbage collector takes the round",
            summary=f"Python's garbage collector ran {gc_ms:.2f} ms per round in the test thread ({share:.1%} of the "
            f"round): {collections:.0f} collections a round, {full:.0f} of them full, freeing {freed:.0f} objects "
            f"a round{where}.",
            cause=None if ctx.gpu.collected else "cpu_bound",
            share=min(1.0, share),
            share_measured=True,
            confidence=0.9,  # timed by the collector's own callbacks, not sampled
            evidence={
                "collector time per round (ms)": round(gc_ms, 3),
                "share of the round": f"{share:.1%}",
                "collections per round": round(collections),
                "full (generation 2) collections per round": round(full),
                "objects freed per round (reference cycles)": round(freed),
                **split,
            },
            suggestions=_gc_suggestions(gc_ms, freeing_ms, full_ms, freed, full),
            events=ctx.refs(r.round_idx, 3),
        )
    ]


def dropout_active(ctx: Context) -> list[Finding]:
    """Dropout took DROPOUT_MIN of the round or more in the samples (or the traced calls): it does work only in training
    mode, so the model, or a module in it, was left in training mode (`model.eval()` not called). No class: the time
    is the CPU-bound or GPU rules' as well; this says why some of it is there."""
    spots = [h for h in ctx.cpu.hotspots if h.self_ms > 0 and is_dropout(h.function)]
    round_ms = ctx.rounds.per_round_ms(ctx.rounds.wall_ns)
    ms = sum(h.self_ms for h in spots)
    share = ms / round_ms if round_ms else 0.0
    if share < DROPOUT_MIN or ms < MIN_COUNTED_MS:
        return []
    samples = ctx.metrics.get("cpu.samples") or 0.0
    return [
        Finding(
            rule="dropout_active",
            title="Dropout runs: the model is in training mode",
            summary=f"Dropout ran {ms:.2f} ms per round ({share:.1%} of the round) in "
            f"{spots[0].function.split(' (')[0]}: in eval mode it returns its input, so the model (or a module in "
            "it) was left in training mode, which also makes BatchNorm use and update the batch's statistics.",
            cause=None,
            share=min(1.0, share),
            share_measured=True,
            confidence=0.6 + 0.4 * min(1.0, samples / 30),  # sampled: as sure as the samples behind it
            evidence={
                "dropout per round (ms)": round(ms, 3),
                "share of the round": f"{share:.1%}",
                **{f"dropout {i}": h.function for i, h in enumerate(spots[:3], 1)},
            },
            suggestions=[
                Suggestion(
                    action="Put the model in eval mode for inference (model.eval()): dropout then returns its input "
                    "and BatchNorm uses its running statistics",
                    rationale=f"dropout ran {ms:.2f} ms per round ({share:.1%}), work it does only in training mode",
                    saving_ms=ms,
                    rule="dropout_active",
                )
            ],
        )
    ]


#: The sampled share of the round a multi-process DataLoader's workers take (started, stopped, waited for) from which
#: it is a finding.
DATALOADER_MIN = 0.1
_MP_ITER = "dataloader:_MultiProcessingDataLoaderIter."


def _dataloader_parts(ctx: Context) -> tuple[float, float, float]:
    """Sampled ns in a multi-process DataLoader's workers' start, their stop, and the wait for their batches, each
    sample in the first of these its stack shows (the stop runs inside `_next_data`, at the end of the batches)."""
    start = stop = wait = 0.0
    for name, w in ctx.cpu.sample_weights.items():
        folded = ctx.timeline.strings[name]
        if _MP_ITER not in folded:
            continue
        if f"{_MP_ITER}_shutdown_workers " in folded:
            stop += w
        elif f"{_MP_ITER}__init__ " in folded:
            start += w
        elif f"{_MP_ITER}_next_data " in folded:
            wait += w
    return start, stop, wait


def dataloader_workers(ctx: Context) -> list[Finding]:
    """A multi-process DataLoader (num_workers > 0) in the body: its workers' start and stop (every time it is iterated
    anew, without persistent_workers) and the wait for their batches took DATALOADER_MIN of the round or more, in the
    samples. No class: the time is the CPU rules' too (starting processes, waiting for them)."""
    start, stop, wait = (ctx.rounds.per_round_ms(ns) for ns in _dataloader_parts(ctx))
    round_ms = ctx.rounds.per_round_ms(ctx.rounds.wall_ns)
    total = start + stop + wait
    share = total / round_ms if round_ms else 0.0
    if share < DATALOADER_MIN or total < MIN_COUNTED_MS:
        return []
    cores = int(ctx.metrics.get("cpu.available_cores") or 1)
    suggestions = []
    if start + stop > 0:
        suggestions.append(
            Suggestion(
                action="Start the DataLoader's workers once: persistent_workers=True on a DataLoader made once (a "
                "fixture) and iterated in the body, or num_workers=0 where a batch is cheap to make",
                rationale=f"{start + stop:.2f} ms per round go to starting and stopping its worker processes",
                saving_ms=start + stop,
                rule="dataloader_workers",
            )
        )
    if wait > 0:
        suggestions.append(
            Suggestion(
                action="Have the batches ready before the test thread asks: lighter per-item work in the Dataset "
                f"(vectorised, or done once), or the items loaded in the main process; the workers share the {cores} "
                "available cores with the forward",
                rationale=f"the test thread waited {wait:.2f} ms per round for the workers' batches",
                saving_ms=wait,
                rule="dataloader_workers",
            )
        )
    return [
        Finding(
            rule="dataloader_workers",
            title="DataLoader workers take the round",
            summary=f"A multi-process DataLoader took {total:.2f} ms per round ({share:.1%}): {start:.2f} ms starting "
            f"its workers, {stop:.2f} ms stopping them and {wait:.2f} ms waiting for their batches.",
            cause=None,
            share=min(1.0, share),
            share_measured=True,
            confidence=0.6 + 0.4 * min(1.0, (ctx.metrics.get("cpu.samples") or 0.0) / 30),
            evidence={
                "starting the workers per round (ms)": round(start, 3),
                "stopping the workers per round (ms)": round(stop, 3),
                "waiting for the workers' batches per round (ms)": round(wait, 3),
                "cores available to the process": cores,
            },
            suggestions=suggestions,
        )
    ]
