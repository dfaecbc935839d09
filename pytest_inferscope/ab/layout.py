"""--inferscope-ab-aslr=off: the two A/B processes without address-space randomisation.

Linux places each process's stack, heap, libraries and executable at random addresses (ASLR). The A/B pairs
compare two processes that take turns on one core, and with their layouts drawn apart the same Python code can run
at different speeds in them for as long as they live: on the 2-core dev VM (AMD EPYC) unchanged pure-Python bodies
read 1-6% faster on this side, and in a few sessions 15-70% slower. With randomisation off in both processes (the
personality flag ADDR_NO_RANDOMIZE, which the twin inherits) the layouts are the same at every run: the offset of
such a suite stays within ~2%, but it is the same offset every time, of either sign (docs/ab.md, "Each process's
own speed"). So it is asked for, not the default.

A process cannot change its own layout, so this one, asked to fix it, sets the flag and executes itself again, at
`pytest_cmdline_main`, before pytest has run anything: only where it is pytest's own process (the `pytest` script
or `python -m pytest`, with its arguments as given), never a program that called `pytest.main()`, which would run
twice. Where that cannot be done the session goes on, and its summary says why.
"""

from __future__ import annotations

import ctypes
import errno
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .args import given

if TYPE_CHECKING:
    from ..options import Settings

ADDR_NO_RANDOMIZE = 0x0040000  # <linux/personality.h>
#: Set in the process that executed itself again, so that it says so and never does it twice.
ENV = "INFERSCOPE_AB_REEXEC"
_WHY = pytest.StashKey[str]()  # why the layout is as it is, for the summary's note (`layout_note`)
_PYTEST_SCRIPT = re.compile(r"(pytest|py\.test)(-?3(\.\d+)?)?")


def layout_fixed() -> bool | None:
    """Whether this process runs without address-space randomisation (its personality flag, or the system's
    `kernel.randomize_va_space` at 0); None where it cannot tell (not Linux)."""
    try:
        if Path("/proc/sys/kernel/randomize_va_space").read_text().strip() == "0":
            return True
        return bool(int(Path("/proc/self/personality").read_text(), 16) & ADDR_NO_RANDOMIZE)
    except (OSError, ValueError):
        return None


def own_command_line(args: tuple[str, ...] | list[str]) -> list[str] | None:
    """The command line that starts this pytest again as it was started; None where this process is not pytest's
    own: a program that called `pytest.main()` (its arguments are not the process's, or its main module is not
    pytest's), which executing again would run from its start."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    by_module = spec is not None and spec.name in ("pytest", "pytest.__main__")
    by_script = spec is None and _PYTEST_SCRIPT.fullmatch(Path(sys.argv[0]).name) is not None
    if not (by_module or by_script) or tuple(sys.argv[1:]) != tuple(args):
        return None
    return [sys.executable, *sys.orig_argv[1:]]


def _personality(persona: int) -> tuple[int, int]:
    """personality(2): (its result, errno)."""
    call = ctypes.CDLL(None, use_errno=True).personality
    call.argtypes, call.restype = [ctypes.c_ulong], ctypes.c_int
    return call(persona), ctypes.get_errno()


def fix_layout(config: pytest.Config) -> None:
    """Execute this pytest again with address-space randomisation off, unless it is off already; where that cannot
    be done, remember why for the summary (`layout_note`)."""
    fixed = layout_fixed()
    if fixed:
        # (taken out: the twin and what the tests start inherit the flag, not this process's history)
        config.stash[_WHY] = "reexec" if os.environ.pop(ENV, None) else "started"
        return
    if fixed is None or not sys.platform.startswith("linux"):
        config.stash[_WHY] = f"this platform ({sys.platform}) has no way to turn it off for one process"
        return
    if os.environ.get(ENV):  # executed again with the flag set, and randomised all the same: never a second time
        config.stash[_WHY] = "the flag set before pytest executed itself again did not hold"
        return
    argv = own_command_line(config.invocation_params.args)
    if argv is None:
        config.stash[_WHY] = (
            "pytest was started by a program (pytest.main()), which is not executed again: start that program under "
            "`setarch -R`"
        )
        return
    current, err = _personality(0xFFFFFFFF)
    if current != -1:
        result, err = _personality(current | ADDR_NO_RANDOMIZE)
    if current == -1 or result == -1:
        config.stash[_WHY] = (
            f"personality(ADDR_NO_RANDOMIZE) was refused ({errno.errorcode.get(err, err)}; a container's default "
            "seccomp profile refuses it: allow the personality call, or set kernel.randomize_va_space=0 on the host)"
        )
        return
    capture = config.pluginmanager.getplugin("capturemanager")
    if capture is not None:
        capture.stop_global_capturing()  # the terminal's own file descriptors back, for the new process
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, {**os.environ, ENV: "1"})


def layout_note(config: pytest.Config, settings: Settings) -> str:
    """The summary's line on the processes' layout: this one and its twin, or with --inferscope-ab-pairs=twins this
    one and its two twins (a twin inherits the layout setting)."""
    why = config.stash.get(_WHY, "") or ("started" if layout_fixed() else "")
    every = "in every process (pytest's and its twins)" if settings.ab_pairs == "twins" else "in both processes"
    if why == "reexec":
        return (
            f"inferscope A/B: address-space layout randomisation off {every} (pytest executed itself again with it off)"
        )
    if why == "started":
        return f"inferscope A/B: address-space layout randomisation off {every}"
    if why:  # off was asked for, and could not be had
        state = f"on {every}: {why}"
    else:
        asked = (
            "the default"
            if settings.sources.get("ab_aslr", "default") == "default"
            else "as " + given(settings, "ab_aslr", "keep") + " asked"
        )
        state = f"on {every} ({asked}; --inferscope-ab-aslr=off turns it off)"
    return (
        f"inferscope A/B: address-space layout randomisation {state}. Each process's layout can offset the pairs of "
        'pure-Python code by a few per cent, and at times by much more (docs/ab.md, "Each process\'s own speed")'
    )
