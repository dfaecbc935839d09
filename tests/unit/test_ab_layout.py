"""ab/layout.py: when an A/B run executes pytest again with address-space randomisation off, and what the summary
says where it does not (docs/ab.md, "Each process's own speed")."""

from __future__ import annotations

import dataclasses
import errno
import sys
import types
from typing import Any

import pytest

from pytest_inferscope import ab
from pytest_inferscope.ab import layout
from pytest_inferscope.options import default_settings


class _Config:
    """What fix_layout reads of a pytest.Config: its invocation arguments, stash, options and plugins."""

    def __init__(self, args: tuple[str, ...] = ("-q",), options: dict[str, Any] | None = None) -> None:
        self.invocation_params = types.SimpleNamespace(args=args)
        self.stash = pytest.Stash()
        self.options = options or {}
        self.capture_stopped = False
        config = self

        class Capture:
            def stop_global_capturing(self) -> None:
                config.capture_stopped = True

        self.pluginmanager = types.SimpleNamespace(
            getplugin=lambda name: Capture() if name == "capturemanager" else None
        )

    def getoption(self, name: str, default: Any = None) -> Any:
        return self.options.get(name, default)


def _main_module(monkeypatch: pytest.MonkeyPatch, spec_name: str | None, argv: list[str], orig: list[str]) -> None:
    main = types.ModuleType("__main__")
    main.__spec__ = types.SimpleNamespace(name=spec_name) if spec_name else None  # type: ignore[assignment]
    monkeypatch.setitem(sys.modules, "__main__", main)
    monkeypatch.setattr(sys, "argv", argv)
    monkeypatch.setattr(sys, "orig_argv", orig)


def _note(config: _Config, **change: Any) -> str:
    return layout.layout_note(config, dataclasses.replace(default_settings(), **change))  # type: ignore[arg-type]


def test_own_command_line_python_m_pytest(monkeypatch: pytest.MonkeyPatch) -> None:
    _main_module(monkeypatch, "pytest.__main__", ["/x/pytest/__main__.py", "-q", "--inferscope-ab=main"],
                 ["python3", "-X", "dev", "-m", "pytest", "-q", "--inferscope-ab=main"])  # fmt: skip
    argv = layout.own_command_line(("-q", "--inferscope-ab=main"))
    assert argv == [sys.executable, "-X", "dev", "-m", "pytest", "-q", "--inferscope-ab=main"]


def test_own_command_line_console_script(monkeypatch: pytest.MonkeyPatch) -> None:
    _main_module(monkeypatch, None, ["/venv/bin/pytest", "tests"], ["/venv/bin/python3", "/venv/bin/pytest", "tests"])
    assert layout.own_command_line(["tests"]) == [sys.executable, "/venv/bin/pytest", "tests"]
    _main_module(monkeypatch, None, ["/usr/bin/pytest-3", "tests"], ["/usr/bin/python3", "/usr/bin/pytest-3", "tests"])
    assert layout.own_command_line(["tests"]) == [sys.executable, "/usr/bin/pytest-3", "tests"]


def test_own_command_line_not_a_program_calling_pytest_main(monkeypatch: pytest.MonkeyPatch) -> None:
    # run.py calls pytest.main(["-q"]): executed again, the program would run from its start
    _main_module(monkeypatch, None, ["run.py"], ["python3", "run.py"])
    assert layout.own_command_line(("-q",)) is None
    # ... even where its own arguments are the ones it gave pytest.main()
    _main_module(monkeypatch, None, ["run.py", "-q"], ["python3", "run.py", "-q"])
    assert layout.own_command_line(("-q",)) is None
    # pytest's own process, but pytest.main() called inside it with other arguments (pytester's in-process runs)
    _main_module(
        monkeypatch, "pytest.__main__", ["/x/pytest/__main__.py", "tests"], ["python3", "-m", "pytest", "tests"]
    )
    assert layout.own_command_line(("-q", "--inferscope-ab=main")) is None


@pytest.fixture
def execs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str], dict[str, str]]]:
    """os.execve recorded instead of done; the process's layout randomised; pytest's own command line."""
    calls: list[tuple[str, list[str], dict[str, str]]] = []
    monkeypatch.setattr(layout.os, "execve", lambda path, argv, env: calls.append((path, argv, env)))
    monkeypatch.setattr(layout, "layout_fixed", lambda: False)
    monkeypatch.setattr(layout, "own_command_line", lambda args: [sys.executable, "-m", "pytest", *args])
    monkeypatch.setattr(layout.sys, "platform", "linux")
    monkeypatch.delenv(layout.ENV, raising=False)
    return calls


def test_fix_layout_executes_again_with_the_flag(monkeypatch: pytest.MonkeyPatch, execs: list[Any]) -> None:
    asked: list[int] = []

    def personality(persona: int) -> tuple[int, int]:
        asked.append(persona)
        return 0, 0  # the current persona (PER_LINUX), then success

    monkeypatch.setattr(layout, "_personality", personality)
    config = _Config(("-q", "--inferscope-ab=main"))
    layout.fix_layout(config)  # type: ignore[arg-type]
    assert asked == [0xFFFFFFFF, layout.ADDR_NO_RANDOMIZE]
    ((path, argv, env),) = execs
    assert path == sys.executable and argv == [sys.executable, "-m", "pytest", "-q", "--inferscope-ab=main"]
    assert env[layout.ENV] == "1"
    assert config.capture_stopped  # the terminal's file descriptors back before the new process starts


def test_fix_layout_refused_says_why(monkeypatch: pytest.MonkeyPatch, execs: list[Any]) -> None:
    monkeypatch.setattr(layout, "_personality", lambda p: (0, 0) if p == 0xFFFFFFFF else (-1, errno.EPERM))
    config = _Config()
    layout.fix_layout(config)  # type: ignore[arg-type]
    assert execs == []
    note = _note(config)
    assert note.startswith("inferscope A/B: address-space layout randomisation on in both processes: ")
    assert "EPERM" in note and "seccomp" in note and "randomize_va_space=0" in note and "docs/ab.md" in note


def test_fix_layout_never_twice(monkeypatch: pytest.MonkeyPatch, execs: list[Any]) -> None:
    monkeypatch.setenv(layout.ENV, "1")  # executed again already, and still randomised
    monkeypatch.setattr(layout, "_personality", lambda p: pytest.fail("not asked again"))
    config = _Config()
    layout.fix_layout(config)  # type: ignore[arg-type]
    assert execs == []
    assert "did not hold" in _note(config)


def test_fix_layout_not_a_program_calling_pytest_main(monkeypatch: pytest.MonkeyPatch, execs: list[Any]) -> None:
    monkeypatch.setattr(layout, "own_command_line", lambda args: None)
    config = _Config()
    layout.fix_layout(config)  # type: ignore[arg-type]
    assert execs == []
    assert "pytest.main()" in _note(config) and "setarch -R" in _note(config)


def test_fix_layout_already_off(monkeypatch: pytest.MonkeyPatch, execs: list[Any]) -> None:
    monkeypatch.setattr(layout, "layout_fixed", lambda: True)
    config = _Config()
    layout.fix_layout(config)  # type: ignore[arg-type]
    assert execs == []
    assert _note(config) == "inferscope A/B: address-space layout randomisation off in both processes"
    monkeypatch.setenv(layout.ENV, "1")
    layout.fix_layout(config)  # type: ignore[arg-type]
    assert _note(config).endswith("off in both processes (pytest executed itself again with it off)")
    assert layout.ENV not in layout.os.environ  # the twin and the tests' own processes are not told they were


def test_fix_layout_other_platforms(monkeypatch: pytest.MonkeyPatch, execs: list[Any]) -> None:
    monkeypatch.setattr(layout, "layout_fixed", lambda: None)
    monkeypatch.setattr(layout.sys, "platform", "darwin")
    config = _Config()
    layout.fix_layout(config)  # type: ignore[arg-type]
    assert execs == []
    assert "this platform (darwin) has no way" in _note(config)


def test_note_when_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(layout, "layout_fixed", lambda: False)
    note = _note(_Config(), ab_aslr="keep", sources={"ab_aslr": "env INFERSCOPE_AB_ASLR"})
    assert note.startswith(
        "inferscope A/B: address-space layout randomisation on in both processes (as --inferscope-ab-aslr=keep (from "
        "env INFERSCOPE_AB_ASLR) asked; --inferscope-ab-aslr=off turns it off). Each process's layout can offset"
    )
    default = _note(_Config(), ab_aslr="keep")
    assert "on in both processes (the default; --inferscope-ab-aslr=off turns it off)" in default
    monkeypatch.setattr(layout, "layout_fixed", lambda: True)  # kept, but the run was started under setarch -R
    assert (
        _note(_Config(), ab_aslr="keep") == "inferscope A/B: address-space layout randomisation off in both processes"
    )


def test_note_names_every_process_with_twins(monkeypatch: pytest.MonkeyPatch) -> None:
    """With --inferscope-ab-pairs=twins three processes run (this one, its twin and the ref's), each with the layout
    pytest's has."""
    monkeypatch.setattr(layout, "layout_fixed", lambda: False)
    kept = _note(_Config(), ab_pairs="twins")
    assert "randomisation on in every process (pytest's and its twins) (the default; " in kept
    assert "both" not in kept
    monkeypatch.setattr(layout, "layout_fixed", lambda: True)
    assert _note(_Config(), ab_pairs="twins") == (
        "inferscope A/B: address-space layout randomisation off in every process (pytest's and its twins)"
    )


@pytest.mark.parametrize(
    ("change", "env", "options", "fixes"),
    [
        ({"ab": "main", "ab_aslr": "off"}, {}, {}, True),
        ({"ab_python": "/venv/bin/python", "ab_aslr": "off"}, {}, {}, True),
        ({"ab_aslr": "off"}, {}, {}, False),  # no A/B
        ({"ab": "main"}, {}, {}, False),  # kept: the default
        ({"ab": "main", "ab_aslr": "off", "enable": False}, {}, {}, False),
        ({"ab": "main", "ab_aslr": "off"}, {"INFERSCOPE_AB_TWIN": "3,4"}, {}, False),  # the twin inherits its parent's
        ({"ab": "main", "ab_aslr": "off"}, {}, {"collectonly": True}, False),
        ({"ab": "main", "ab_aslr": "off"}, {}, {"help": True}, False),
        ({"ab": "main", "ab_aslr": "off", "save_baseline": "main"}, {}, {}, False),  # refused at pytest_configure
    ],
)
def test_fix_ab_layout_only_for_an_ab_run(
    monkeypatch: pytest.MonkeyPatch, change: dict[str, Any], env: dict[str, str], options: dict[str, Any], fixes: bool
) -> None:
    from pytest_inferscope.ab import twin

    monkeypatch.delenv(twin.ENV, raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    called: list[object] = []
    monkeypatch.setattr(layout, "fix_layout", lambda config: called.append(config))
    ab.fix_ab_layout(_Config(options=options), dataclasses.replace(default_settings(), **change))  # type: ignore[arg-type]
    assert bool(called) is fixes


def test_fix_ab_layout_not_in_an_xdist_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    called: list[object] = []
    monkeypatch.setattr(layout, "fix_layout", lambda config: called.append(config))
    config = _Config()
    config.workerinput = {"workerid": "gw0"}  # type: ignore[attr-defined]
    ab.fix_ab_layout(config, dataclasses.replace(default_settings(), ab="main", ab_aslr="off"))  # type: ignore[arg-type]
    assert called == []
