"""Per-layer attribution: one MODULE span per `torch.nn.Module` call, from torch's global forward hooks.

Every kernel, copy and runtime call a forward launches then lands inside its module's span, and the
merger gives GPU work the span its launch ran in, so GPU time, CPU time and launches add up per module
without any further bookkeeping (see `merger._hierarchy`).

A global hook does not know a module's name. On the first call of a top-level module (no module
active on this thread) the tracker walks its `named_modules()` once and caches, for that root,
`id(submodule) -> interned qualified name` (or None when the name path is deeper than `max_depth`),
so a call costs one dict lookup to skip, and a push, a pop and one `buffer.record` to record.

torch is never imported here: `start()` hooks only when the process has already imported it.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import Any

from ..buffer import TraceBuffer
from ..events import Kind, host_clock_ns

DEFAULT_MAX_DEPTH = 3

_UNKNOWN = -2  # a module that is not in the active root's tree (made in forward, passed in, ...)


class _Thread:
    """One thread's state: the active root's name map and the stack of open module calls."""

    __slots__ = ("names", "stack", "tid")

    def __init__(self) -> None:
        self.names: dict[int, int | None] = {}
        self.stack: list[tuple[int, int, int]] = []  # (id(module), name id, start ns)
        self.tid = threading.get_native_id()


class ModuleTracker:
    """Records a MODULE span for every module call whose name path is at most `max_depth` deep.

    Depth counts the components of the qualified name under the outermost module called: the root
    itself is depth 0 (recorded under its class name), `encoder` depth 1, `encoder.layers.2` depth 3,
    `encoder.layers.2.attn` depth 4. A module called outside any known root is recorded under its
    class name as a root of its own.
    """

    def __init__(self, buffer: TraceBuffer, max_depth: int = DEFAULT_MAX_DEPTH) -> None:
        if max_depth < 0:
            raise ValueError(f"max_depth must be >= 0, got {max_depth}")
        self.buffer = buffer
        self.max_depth = max_depth
        self._roots: dict[int, tuple[Any, dict[int, int | None]]] = {}  # id(root) -> (root, its name map)
        self._threads: list[_Thread] = []
        self._lock = threading.Lock()  # taken once per new thread and per new root, never per call
        self._local = threading.local()
        self._handles: list[Any] = []

    @property
    def active(self) -> bool:
        """Whether the hooks are installed."""
        return bool(self._handles)

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> bool:
        """Install the global hooks; False (and nothing installed) when torch is not imported or too old."""
        if self._handles:
            return True
        torch = sys.modules.get("torch")
        if torch is None:
            return False
        try:
            module_mod = torch.nn.modules.module
            register_pre = module_mod.register_module_forward_pre_hook
            register_post = module_mod.register_module_forward_hook
        except AttributeError:
            return False
        pre, post = self._make_hooks()
        try:
            post_handle = register_post(post, always_call=True)
        except TypeError:  # torch < 2.0: no always_call; an exception then leaves the span to stop()
            post_handle = register_post(post)
        self._handles = [register_pre(pre), post_handle]
        return True

    def stop(self) -> None:
        """Remove the hooks and close every span still open (a forward that never returned) at the stop time."""
        if not self._handles:
            return
        for handle in self._handles:
            handle.remove()
        self._handles = []
        end = host_clock_ns()
        with self._lock:
            threads = list(self._threads)
        for state in threads:
            while state.stack:
                _, name, start = state.stack.pop()
                self.buffer.record(Kind.MODULE, name, start, end, tid=state.tid)
        self._roots.clear()

    # -- the hooks ---------------------------------------------------------------

    def _state(self) -> _Thread:
        state = _Thread()
        with self._lock:
            self._threads.append(state)
        self._local.state = state
        return state

    def _enter_root(self, module: Any, state: _Thread) -> int | None:
        """Make `module` the thread's root (walking its tree on first sight) and return its name id."""
        key = id(module)
        cached = self._roots.get(key)
        if cached is None or cached[0] is not module:
            intern = self.buffer.strings.intern
            names: dict[int, int | None] = {}
            for qualified, sub in module.named_modules():
                if not qualified:
                    names[id(sub)] = intern(type(sub).__name__)
                else:
                    names[id(sub)] = intern(qualified) if qualified.count(".") < self.max_depth else None
            cached = (module, names)
            with self._lock:
                self._roots[key] = cached
        state.names = cached[1]
        return cached[1][key]

    def _make_hooks(self) -> tuple[Callable[[Any, Any], None], Callable[[Any, Any, Any], None]]:
        """The pre- and post-forward hooks, as closures over locals (the hot path: no attribute loads on self)."""
        local = self._local
        new_state = self._state
        enter_root = self._enter_root
        record = self.buffer.record
        intern = self.buffer.strings.intern
        clock = host_clock_ns
        max_depth = self.max_depth
        kind = int(Kind.MODULE)
        unknown = _UNKNOWN

        def pre(module: Any, args: Any) -> None:
            try:
                state = local.state
            except AttributeError:
                state = new_state()
            stack = state.stack
            if stack:
                name = state.names.get(id(module), unknown)
                if name is None:  # deeper than max_depth
                    return
                if name == unknown:
                    if len(stack) > max_depth:
                        return
                    name = intern(type(module).__name__)
            else:
                name = enter_root(module, state)
                if name is None:
                    return
            stack.append((id(module), name, clock()))

        def post(module: Any, args: Any, output: Any) -> None:
            end = clock()
            try:
                state = local.state
            except AttributeError:
                return
            stack = state.stack
            if not stack:
                return
            mid = id(module)
            if stack[-1][0] != mid:
                if state.names.get(mid, unknown) is None or all(entry[0] != mid for entry in stack):
                    return  # a skipped module
                # Calls above it never reached their post hook (an exception torch's
                # always_call path does not cover, such as KeyboardInterrupt): close them here.
                while stack[-1][0] != mid:
                    _, name, start = stack.pop()
                    record(kind, name, start, end, tid=state.tid)
            _, name, start = stack.pop()
            record(kind, name, start, end, tid=state.tid)

        return pre, post
