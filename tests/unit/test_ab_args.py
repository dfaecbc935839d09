"""The twin's arguments (ab/args.py): this side's outputs dropped, and every option of the plugins the twin runs
without (xdist, cacheprovider and with it stepwise), checked against the installed plugins' own option lists."""

from __future__ import annotations

import importlib
import shlex
from typing import Any

import pytest

from pytest_inferscope.ab.args import FLAGS, WITH_VALUE, in_twin, randomly_seed, twin_addopts, twin_args


class _Recorder:
    """Stands in for pytest's parser and its groups in a plugin's pytest_addoption: records each option's names."""

    def __init__(self) -> None:
        self.options: list[tuple[tuple[str, ...], dict[str, Any]]] = []

    def getgroup(self, *args: Any, **kwargs: Any) -> _Recorder:
        return self

    def addoption(self, *names: str, **kwargs: Any) -> None:
        self.options.append((names, kwargs))

    _addoption = addoption  # (xdist adds its short options, -n, -d and -f, through the group's _addoption)

    def addini(self, *args: Any, **kwargs: Any) -> None:
        pass


@pytest.mark.parametrize("module", ["_pytest.cacheprovider", "_pytest.stepwise", "xdist.plugin", "xdist.looponfail"])
def test_every_option_of_the_plugins_the_twin_runs_without_is_dropped(module: str) -> None:
    mod = pytest.importorskip(module) if module.startswith("xdist") else importlib.import_module(module)
    parser = _Recorder()
    mod.pytest_addoption(parser)
    assert parser.options
    for names, kwargs in parser.options:
        takes_value = kwargs.get("action", "store") in ("store", "append") and kwargs.get("nargs") != "?"
        for name in names:
            assert name in (WITH_VALUE if takes_value else FLAGS), f"{module}: {name} is given to the twin"


def test_those_options_are_dropped_in_each_form() -> None:
    args = [
        "--cache-clear", "--nf", "--lfnf=all", "--lfnf", "none", "--sw-skip", "--stepwise-reset", "--cache-show=x*",
        "--max-worker-restart=0", "--maxschedchunk", "1", "--no-loadscope-reorder", "-d", "--tx", "popen", "-nauto",
        "-k", "decode", "tests",
    ]  # fmt: skip
    assert twin_args(args, None) == ["-k", "decode", "tests"]


def test_pytest_addopts_and_the_twins_own_arguments_filtered() -> None:
    value = "--junitxml='/tmp/my junit.xml' --basetemp=/tmp/bt -x -n 2 -k 'a or b'"
    assert shlex.split(twin_addopts(value, None)) == ["-x", "-k", "a or b"]
    args = ["-n", "2", "-p", "no:cacheprovider", "--lf", "test_x.py", "-p", "no:xdist"]
    in_twin(args)
    assert args == ["-p", "no:cacheprovider", "test_x.py", "-p", "no:xdist"]


@pytest.mark.parametrize("given", [["--randomly-seed=last"], ["--randomly-seed", "last"], ["--randomly-seed=123"], []])
def test_the_twin_gets_pytest_randomlys_seed_as_this_side_resolved_it(given: list[str]) -> None:
    # With its own seed the twin's tests drew other random inputs than this side's; `last` stopped it (no cache there).
    args = ["-q", *given, "tests"]
    in_twin(args, has_randomly=True, seed="4242")
    assert args == ["-q", "tests", "--randomly-seed=4242"]
    args = ["-q", *given, "tests"]
    in_twin(args, has_randomly=False, seed="4242")  # a twin's interpreter without the plugin: no option it lacks
    assert args == ["-q", "tests"]


def test_this_sides_seed_is_read_once_the_plugin_resolved_it() -> None:
    class Config:
        def __init__(self, seed: object) -> None:
            self.option = type("Options", (), {"randomly_seed": seed})()

    assert randomly_seed(Config(123)) == "123"
    assert randomly_seed(Config("default")) is None and randomly_seed(Config(True)) is None
    assert randomly_seed(object()) is None
