"""The twin's command line: this run's, less what only this side should do (write JUnit XML, reports or
baselines, spread over xdist workers, start another twin, share pytest's temporary folder), and less the options of
the plugins the twin runs without (`-p no:xdist -p no:cacheprovider`, which also turns stepwise off): given to it,
they would stop it with "unrecognized arguments".

The same filter runs on the command line here, on PYTEST_ADDOPTS for the twin's environment, and in the twin itself
(`in_twin`, from `pytest_load_initial_conftests`) on what pytest put together there, with the ref's ini `addopts`.
The twin's environment (`twin_env`) and the `-p` that keeps this plugin on there (`plugin_on`) are here too.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pytest

    from ..options import Settings
    from .worktree import Worktree

#: The options of the plugins the twin runs without, as their pytest_addoption adds them (a unit test checks these
#: against the installed versions: tests/unit/test_ab_args.py).
XDIST_WITH_VALUE = frozenset({
    "-n", "--numprocesses", "--maxprocesses", "--max-worker-restart", "--dist", "--tx", "--px", "--rsyncdir",
    "--rsyncignore", "--testrunuid", "--maxschedchunk",
})  # fmt: skip
XDIST_FLAGS = frozenset({"-d", "--loadscope-reorder", "--no-loadscope-reorder", "-f", "--looponfail"})
CACHE_WITH_VALUE = frozenset({"--lfnf", "--last-failed-no-failures"})
CACHE_FLAGS = frozenset({
    "--lf", "--last-failed", "--ff", "--failed-first", "--nf", "--new-first", "--cache-clear", "--cache-show",
    "--sw", "--stepwise", "--sw-skip", "--stepwise-skip", "--sw-reset", "--stepwise-reset",
})  # fmt: skip
#: This side's outputs and A/B options, the twin's own folder, and pytest-randomly's seed (given as this side resolved
#: it: `SEED_ENV`).
OWN_WITH_VALUE = frozenset({
    "--junitxml", "--junit-xml", "--basetemp", "--inferscope-ab", "--inferscope-ab-python", "--inferscope-report",
    "--inferscope-save-baseline", "--inferscope-compare", "--inferscope-gpus", "--html", "--json-report-file",
    "--randomly-seed",
})  # fmt: skip
#: pytest-randomly's seed as this side resolved it, for the twin: each side reseeds `random` (and numpy's) before every
#: test from it, so with another seed the twin's tests drew other random inputs (sizes, batches) than this side's, and
#: `--randomly-seed=last` stopped the twin, which runs without the cache that `last` reads.
SEED_ENV = "INFERSCOPE_AB_RANDOMLY_SEED"

#: Options dropped with their value ("--x v", "--x=v"; short ones also "-n2").
WITH_VALUE = XDIST_WITH_VALUE | CACHE_WITH_VALUE | OWN_WITH_VALUE
FLAGS = XDIST_FLAGS | CACHE_FLAGS


def twin_args(args: Sequence[str], tree: Worktree | None) -> list[str]:
    """`args` without the options above; paths into the user's checkout pointed at the worktree."""
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        name = arg.split("=", 1)[0]
        if arg in FLAGS or (name in FLAGS and name.startswith("--")):  # (--cache-show=GLOB)
            continue
        if name in WITH_VALUE:
            skip = "=" not in arg
            continue
        if arg.startswith("-n") and not arg.startswith("--") and len(arg) > 2:  # -n2, -nauto
            continue
        if tree is not None:
            # (`--rootdir=/abs/pkg`, `--config-file=...`, `--confcutdir=...`, as CI scripts spell them out: left
            # pointing at this checkout, the twin's rootdir was this side's folder, and no node id of its matched)
            opt, eq, value = arg.partition("=") if arg.startswith("--") else ("", "", arg)
            arg = opt + eq + _map(value, tree)
        out.append(arg)
    return out


def _map(value: str, tree: Worktree) -> str:
    """`value`, when an absolute path (a node id's `::` part aside) in this checkout that exists, as the worktree's."""
    path, sep, rest = value.partition("::")
    if not path.startswith("/") or not Path(path).exists():
        return value
    return str(tree.map_path(Path(path))) + sep + rest


def twin_addopts(value: str, tree: Worktree | None) -> str:
    """PYTEST_ADDOPTS for the twin: filtered as the command line is (with `--junitxml` in it, the twin wrote over
    this side's JUnit XML after it, and with `--basetemp`, wiped this side's temporary folder)."""
    return shlex.join(twin_args(shlex.split(value), tree))


def in_twin(args: list[str], has_randomly: bool = False, seed: str | None = None) -> None:
    """In the twin, before pytest parses its arguments: `args` (the command line, PYTEST_ADDOPTS and the ref's ini
    `addopts`, as pytest joined them) filtered in place, so that an `addopts = -n 2` in the ref's pytest.ini does
    not stop it; with this side's pytest-randomly `seed`, where the twin has the plugin too, that seed."""
    args[:] = twin_args(args, None)
    if has_randomly and seed is not None and seed.isdigit():
        args.append(f"--randomly-seed={seed}")


def randomly_seed(config: object) -> str | None:
    """This side's pytest-randomly seed as it resolved it (an int: `default` and `last` are resolved in its
    pytest_configure), or None without the plugin."""
    seed = getattr(getattr(config, "option", None), "randomly_seed", None)
    return str(seed) if isinstance(seed, int) and not isinstance(seed, bool) else None


def not_at_ref(positional: Sequence[str], here: Path, tree: Worktree | None) -> list[str]:
    """The test files and folders named on the command line (`positional`, relative to `here` or absolute, a node id's
    `::` part aside) that exist here and not in the worktree: new, or deleted at the ref. Given them, the twin stopped
    with "file or directory not found" after reporting no test, and every test of the run read `new`."""
    if tree is None:
        return []
    out = []
    for arg in positional:
        path = here / arg.partition("::")[0]
        if path.exists() and not tree.map_path(path).exists():
            out.append(arg)
    return out


def given(settings: Settings, name: str, value: object) -> str:
    """`--inferscope-NAME=VALUE`, and where it was set when not on the command line."""
    source = settings.sources.get(name, "cli")
    flag = f"--inferscope-{name.replace('_', '-')}={value}"
    return flag if source.startswith("cli") else f"{flag} (from {source})"


def plugin_on(config: pytest.Config) -> list[str]:
    """`-p NAME`: this plugin, under the name it has here, for the twin. Last on its command line, after the ref's
    ini `addopts` and PYTEST_ADDOPTS, so that a `-p no:inferscope` there does not leave the twin without it (it ran
    the whole suite as a plain run): the A/B needs the plugin on both sides, as the measuring instrument."""
    module = sys.modules.get(f"{__package__.rpartition('.')[0]}.plugin")  # (not imported: plugin imports this)
    name = config.pluginmanager.get_name(module) if module is not None else None
    return ["-p", name] if name else []


def twin_env(config: pytest.Config, tree: Worktree | None) -> dict[str, str]:
    """The environment of a twin at `tree` (None: this checkout's twin): this process's, less xdist's and the step
    summary's variables and a git hook's, PYTEST_ADDOPTS filtered as the command line is, pytest-randomly's seed as
    this side resolved it, and for the ref's twin its import paths first and its packages named (`ENV_PACKAGES`)."""
    from .twin import ENV_PACKAGES
    from .worktree import import_paths, own_packages, without_git_repo_vars

    drop = ("GITHUB_STEP_SUMMARY", "PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_CURRENT_TEST")
    # Without the variables a git hook exports for its own repository and index: the twin's tests (and any git
    # command they run) are about the worktree, and must not write to the commit being made.
    env = {k: v for k, v in without_git_repo_vars(dict(os.environ)).items() if k not in drop}
    if env.get("PYTEST_ADDOPTS"):
        env["PYTEST_ADDOPTS"] = twin_addopts(env["PYTEST_ADDOPTS"], tree)
    seed = randomly_seed(config)
    if seed is not None:
        env[SEED_ENV] = seed
    if tree is not None:
        first = import_paths(tree.path, sys.path, tree)
        env["PYTHONPATH"] = os.pathsep.join([*first, *filter(None, [env.get("PYTHONPATH", "")])])
        env[ENV_PACKAGES] = f"{tree.path}|{','.join(dict.fromkeys(own_packages(tree.path, first)))}"
    return env
