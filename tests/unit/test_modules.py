"""ModuleTracker: MODULE spans from torch's global forward hooks, named, nested and depth-limited."""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np
import pytest

from pytest_inferscope.buffer import TraceBuffer
from pytest_inferscope.collectors.modules import ModuleTracker
from pytest_inferscope.events import Kind, RawTrace, host_clock_ns
from pytest_inferscope.merger import Timeline, merge

torch = pytest.importorskip("torch", reason="module attribution needs torch")
nn = torch.nn


class Block(nn.Module):
    """Two levels below the root: block > (attn, ffn > (linear, act))."""

    def __init__(self) -> None:
        super().__init__()
        self.attn = nn.Linear(4, 4)
        self.ffn = nn.Sequential(nn.Linear(4, 4), nn.ReLU())
        self.fail = False

    def forward(self, x: Any) -> Any:
        x = self.attn(x)
        if self.fail:
            raise RuntimeError("boom")
        return self.ffn(x)


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Linear(4, 4)
        self.layers = nn.ModuleList([Block(), Block()])

    def forward(self, x: Any) -> Any:
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x)
        return x


def traced(body: Any, max_depth: int = 3, rounds: int = 1) -> tuple[Timeline, ModuleTracker]:
    """Run `body` `rounds` times inside ROUND spans with a tracker on, and merge what was recorded."""
    buf = TraceBuffer(size_mb=1)
    tracker = ModuleTracker(buf, max_depth=max_depth)
    assert tracker.start()
    t0 = host_clock_ns()
    try:
        for r in range(rounds):
            start = host_clock_ns()
            try:
                body()
            finally:
                buf.record(
                    Kind.ROUND,
                    buf.strings.intern("round"),
                    start,
                    host_clock_ns(),
                    value=r,
                    tid=threading.get_native_id(),
                )
    finally:
        tracker.stop()
    buf.record(Kind.TEST, buf.strings.intern("test"), t0, host_clock_ns(), tid=threading.get_native_id())
    return merge(RawTrace(buf.to_array(), list(buf.strings.strings), t0_ns=t0)), tracker


def modules(tl: Timeline) -> list[tuple[str, str | None]]:
    """(name, parent module's name or None) of every MODULE span, in start order."""
    ev = tl.events
    out = []
    for i in np.flatnonzero(ev["kind"] == Kind.MODULE).tolist():
        p = int(tl.parent[i])
        out.append((tl.name(i), tl.name(p) if p >= 0 and ev["kind"][p] == Kind.MODULE else None))
    return out


def test_spans_have_qualified_names_and_nest() -> None:
    model = Model()
    tl, _ = traced(lambda: model(torch.ones(2, 4)))
    assert modules(tl) == [
        ("Model", None),
        ("embed", "Model"),
        ("layers.0", "Model"),
        ("layers.0.attn", "layers.0"),
        ("layers.0.ffn", "layers.0"),
        ("layers.1", "Model"),
        ("layers.1.attn", "layers.1"),
        ("layers.1.ffn", "layers.1"),
    ]
    ev = tl.events[tl.events["kind"] == Kind.MODULE]
    assert (ev["end"] >= ev["start"]).all()
    assert (ev["tid"] == threading.get_native_id()).all()
    root = tl.parent[np.flatnonzero(tl.events["kind"] == Kind.MODULE)[0]]
    assert tl.events["kind"][root] == Kind.ROUND  # the root module sits in its round


def test_depth_limit() -> None:
    model = Model()
    tl, _ = traced(lambda: model(torch.ones(2, 4)), max_depth=2)
    assert [n for n, _ in modules(tl)] == ["Model", "embed", "layers.0", "layers.1"]
    tl, _ = traced(lambda: model(torch.ones(2, 4)), max_depth=0)
    assert [n for n, _ in modules(tl)] == ["Model"]
    tl, _ = traced(lambda: model(torch.ones(2, 4)), max_depth=9)
    names = [n for n, _ in modules(tl)]
    assert "layers.1.ffn.0" in names and "layers.1.ffn.1" in names and len(names) == 12
    with pytest.raises(ValueError):
        ModuleTracker(TraceBuffer(size_mb=1), max_depth=-1)


def test_a_module_outside_any_root_gets_its_class_name() -> None:
    lone = nn.Linear(4, 4)
    tl, _ = traced(lambda: lone(torch.ones(1, 4)))
    assert modules(tl) == [("Linear", None)]


def test_an_exception_closes_the_span_and_stop_removes_the_hooks() -> None:
    model = Model()
    model.layers[1].fail = True  # type: ignore[union-attr]

    def body() -> None:
        with pytest.raises(RuntimeError, match="boom"):
            model(torch.ones(2, 4))
        model.layers[0](torch.ones(2, 4))  # a fresh top-level call: the stack was emptied

    tl, tracker = traced(body)
    got = modules(tl)
    assert got[:7] == [
        ("Model", None),
        ("embed", "Model"),
        ("layers.0", "Model"),
        ("layers.0.attn", "layers.0"),
        ("layers.0.ffn", "layers.0"),
        ("layers.1", "Model"),
        ("layers.1.attn", "layers.1"),
    ]
    # layers.0 called on its own is a root of its own, its depths counted from it
    assert got[7:] == [("Block", None), ("attn", "Block"), ("ffn", "Block"), ("ffn.0", "ffn"), ("ffn.1", "ffn")]
    ev = tl.events[tl.events["kind"] == Kind.MODULE]
    first_end = int(ev["end"][0])
    assert first_end <= int(ev["start"][7])  # Model closed when the exception left it, not at stop()

    assert not tracker.active
    before = len(tracker.buffer.to_array())
    model.layers[1].fail = False  # type: ignore[union-attr]
    model(torch.ones(2, 4))
    assert len(tracker.buffer.to_array()) == before


def test_stop_closes_spans_still_open() -> None:
    buf = TraceBuffer(size_mb=1)
    tracker = ModuleTracker(buf)
    seen: list[int] = []

    class Stopper(nn.Module):
        def forward(self, x: Any) -> Any:
            tracker.stop()  # stop while this forward (and its root) are open
            seen.append(host_clock_ns())
            return x

    class Outer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = Stopper()

        def forward(self, x: Any) -> Any:
            return self.inner(x)

    assert tracker.start()
    Outer()(1)
    ev = buf.to_array()
    ev = ev[ev["kind"] == Kind.MODULE]
    assert sorted(buf.strings[n] for n in ev["name"]) == ["Outer", "inner"]
    assert (ev["end"] <= seen[0]).all()  # closed at the stop time


def test_two_threads_record_on_their_own_thread() -> None:
    a, b = Model(), Model()
    tids: dict[str, int] = {}
    barrier = threading.Barrier(2)

    def worker(key: str, model: Model) -> None:
        tids[key] = threading.get_native_id()
        barrier.wait()
        for _ in range(20):
            model(torch.ones(2, 4))

    def body() -> None:
        threads = [threading.Thread(target=worker, args=(k, m)) for k, m in (("a", a), ("b", b))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    tl, _ = traced(body)
    ev = tl.events
    for tid in tids.values():
        mine = np.flatnonzero((ev["kind"] == Kind.MODULE) & (ev["tid"] == tid))
        assert len(mine) == 20 * 8
        names = [tl.name(i) for i in mine]
        assert names.count("Model") == 20 and names.count("layers.1.ffn") == 20
        for i in mine:  # every non-root module's parent is a module of the same thread
            p = int(tl.parent[i])
            if tl.name(i) != "Model":
                assert ev["kind"][p] == Kind.MODULE and ev["tid"][p] == tid


def test_start_is_a_no_op_without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch had never been imported
    tracker = ModuleTracker(TraceBuffer(size_mb=1))
    assert tracker.start() is False and not tracker.active
    tracker.stop()  # harmless
    monkeypatch.undo()
    model = Model()
    model(torch.ones(2, 4))
    assert len(tracker.buffer.to_array()) == 0


def test_start_twice_hooks_once() -> None:
    buf = TraceBuffer(size_mb=1)
    tracker = ModuleTracker(buf, max_depth=0)
    assert tracker.start() and tracker.start()
    try:
        nn.Linear(4, 4)(torch.ones(1, 4))
    finally:
        tracker.stop()
    assert (buf.to_array()["kind"] == Kind.MODULE).sum() == 1


def test_analyzer_aggregates_modules() -> None:
    from pytest_inferscope.analyzer import analyze

    model = Model()
    tl, _ = traced(lambda: model(torch.ones(2, 4)), max_depth=2, rounds=3)
    scopes = {s.path: s for s in analyze(tl).scopes}
    assert set(scopes) >= {"Model", "Model/embed", "Model/layers.0", "Model/layers.1"}
    for path in ("Model", "Model/embed", "Model/layers.0"):
        assert scopes[path].kind == "module" and scopes[path].count == 3 and scopes[path].total_ms > 0
    assert scopes["Model"].total_ms >= scopes["Model/layers.0"].total_ms
