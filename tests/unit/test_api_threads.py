"""Two threads profiling at once: one runs, the other is refused, saying another thread is profiling."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from pytest_inferscope import measure, profile, scope
from pytest_inferscope.collectors import Collection, CollectionOptions, active


@pytest.fixture(autouse=True)
def _no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INFERSCOPE_GPU", "off")


#: Set when `at_once`'s second thread was refused.
REFUSED = threading.Event()


def at_once(call: Callable[[str], object], names: tuple[str, str]) -> tuple[dict[str, object], list[str]]:
    """`call(name)` in two threads released together by a barrier: what each returned, and what each refusal said."""
    barrier = threading.Barrier(2)
    REFUSED.clear()
    returned: dict[str, object] = {}
    refused: list[str] = []

    def run(name: str) -> None:
        barrier.wait()
        try:
            returned[name] = call(name)
        except RuntimeError as exc:
            refused.append(str(exc))
            REFUSED.set()

    threads = [threading.Thread(target=run, args=(n,)) for n in names]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return returned, refused


def start(name: str) -> Collection:
    coll = Collection(CollectionOptions(cpu="off"), name=name)
    coll.start()
    return coll


def test_two_collections_started_at_once_from_two_threads_never_both_run() -> None:
    for _ in range(200):
        started, refused = at_once(start, ("a", "b"))
        assert len(started) == 1 and len(refused) == 1, refused
        assert "another thread is profiling" in refused[0] and "do not nest" not in refused[0]
        (coll,) = started.values()
        assert isinstance(coll, Collection)
        coll.stop()
        assert active() is None


def body(name: str) -> None:
    with scope(f"{name}_scope"):
        # The running thread's rounds last until the other thread has tried to start (a 3 ms window let a thread
        # kept off the CPU by another xdist worker start only after the first had finished, 1 in 20 on CI): both
        # profiling at once is what the test makes sure cannot happen.
        REFUSED.wait(timeout=2.0)
        time.sleep(0.001)


def scopes_of(name: str) -> list[str]:
    result = measure(body, name, rounds=3, warmup=0, cpu="off", name=name)
    return [s["path"] for s in result.to_dict()["analysis"].get("scopes", [])]


def test_measure_in_two_threads_at_once_runs_one_and_keeps_its_scopes_to_itself() -> None:
    for _ in range(20):
        scopes, refused = at_once(scopes_of, ("busy", "sleepy"))
        assert len(scopes) == 1 and len(refused) == 1
        assert "cannot be profiled now: another thread is profiling" in refused[0]
        ((name, paths),) = scopes.items()
        assert paths == [f"{name}_scope"]


def test_a_measure_in_another_thread_during_a_profile_is_refused_as_another_threads() -> None:
    refused: list[str] = []

    def other() -> None:
        try:
            measure(lambda: None, rounds=1, warmup=0)
        except RuntimeError as exc:
            refused.append(str(exc))

    with profile("main") as p:
        t = threading.Thread(target=other)
        t.start()
        t.join()
    assert refused and "another thread is profiling 'main'" in refused[0]
    assert p.result is not None and p.result.outcome == "passed"


def test_two_asyncio_tasks_measuring_at_once_are_told_another_task_is_profiling() -> None:
    # One thread, two tasks (asyncio.gather): the second was told "profiles do not nest", as if inside the first.
    import asyncio

    from pytest_inferscope import measure_async

    async def body() -> None:
        await asyncio.sleep(0.001)

    async def both() -> list[object]:
        return await asyncio.gather(
            measure_async(body, rounds=3, warmup=0, name="first"),
            measure_async(body, rounds=3, warmup=0, name="second"),
            return_exceptions=True,
        )

    results = asyncio.run(both())
    errors = [r for r in results if isinstance(r, BaseException)]
    assert len(errors) == 1 and isinstance(errors[0], RuntimeError), results
    assert "another asyncio task is profiling" in str(errors[0]) and "do not nest" not in str(errors[0])
    assert active() is None
