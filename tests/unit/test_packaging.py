"""What an install from the wheel holds: every module and data file of the package, as the source tree has them.

Development installs (`pip install -e .`, what the README and CI use) import from the source tree, so a module the
build leaves out shows only to users of the wheel: a hand-kept package list once left out `pytest_inferscope.ab`,
and with that wheel installed every pytest run stopped with an INTERNALERROR (the plugin loads with pytest).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "pytest_inferscope"
#: Built or left behind in a source tree, never shipped as they are: compiled extensions are built by build_ext.
NOT_SOURCES = {".pyc", ".so"}
#: The C sources of the three extensions (setup.py).
NATIVE = ("_cupti.c", "_replay.c", "_tick.c")


def source_files() -> set[str]:
    """The package's files in the source tree (what git tracks, when the tree is a clone)."""
    tracked = subprocess.run(
        ["git", "ls-files", "pytest_inferscope"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    if tracked.returncode == 0 and tracked.stdout.strip():
        return set(tracked.stdout.split())
    return {
        p.relative_to(ROOT).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and p.suffix not in NOT_SOURCES and "__pycache__" not in p.parts
    }


def setuptools_too_old() -> str | None:
    """Why this environment's setuptools cannot build the project (pyproject's build-system floor), or None. pip
    builds in an isolated environment with the floor; `setup.py` run here uses what is installed (a venv's own
    setuptools can be older: 65.5 in a Python 3.11 venv)."""
    import setuptools

    requires = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    floor = next((r.split(">=")[1].split()[0] for r in requires if r.startswith("setuptools>=")), "0")

    def release(v: str) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", v)[:3])

    if release(setuptools.__version__) < release(floor):
        return f"the build needs setuptools>={floor} (pyproject.toml), this environment has {setuptools.__version__}"
    return None


def test_the_build_ships_every_module_and_data_file(tmp_path: Path) -> None:
    if (why := setuptools_too_old()) is not None:
        pytest.skip(why)
    # From a copy of the sources alone: a development install's *.egg-info/SOURCES.txt in the tree lists every file
    # it was built with, and setuptools ships what it lists as data, which hid the missing package here.
    sources = source_files()
    src, lib = tmp_path / "src", tmp_path / "lib"
    for name in [*sources, "pyproject.toml", "setup.py", "README.md"]:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, src / name)
    # build_py copies what the wheel's pure part holds (packages and package data, from pyproject.toml), no compiler
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", "--build-lib", str(lib)],
        cwd=src,
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(f"setup.py build_py failed:\n{built.stdout}\n{built.stderr}")
    shipped = {p.relative_to(lib).as_posix() for p in lib.rglob("*") if p.is_file()}
    assert {"pytest_inferscope/ab/__init__.py", "pytest_inferscope/reporters/templates/report.html.j2"} <= sources
    assert sources - shipped == set(), "in the source tree but not in the wheel"
    assert {f for f in shipped - sources if not f.endswith(".pyc")} == set(), "in the wheel but not tracked"


def test_the_sdist_holds_the_docs_the_readme_links_and_the_native_sources(tmp_path: Path) -> None:
    """The sdist is what a packager (or pip without a wheel) builds from: it held the package, the native C sources,
    README.md and the build files, but none of docs/, which README.md links for everything past its first page."""
    if (why := setuptools_too_old()) is not None:
        pytest.skip(why)
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if tracked.returncode != 0 or not tracked.stdout.strip():
        pytest.skip("not a git checkout: the sdist is built from the tracked files")
    src = tmp_path / "src"
    for name in tracked.stdout.split():
        if (ROOT / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(ROOT / name, src / name)
    built = subprocess.run(
        [sys.executable, "setup.py", "-q", "sdist", "--dist-dir", str(tmp_path / "dist")],
        cwd=src,
        capture_output=True,
        text=True,
        check=False,
    )
    if built.returncode != 0:
        pytest.fail(f"setup.py sdist failed:\n{built.stdout}\n{built.stderr}")
    (archive,) = (tmp_path / "dist").glob("*.tar.gz")
    with tarfile.open(archive) as tar:
        shipped = {name.split("/", 1)[1] for name in tar.getnames() if "/" in name}
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    linked = {m for m in re.findall(r"\]\(([^)#:\s]+)(?:#[^)]*)?\)", readme)}
    assert linked and {"docs/quickstart.md", "docs/configuration.md"} <= linked
    assert linked - shipped == set(), "README.md links these, the sdist lacks them"
    docs = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*") if p.is_file()}
    assert docs - shipped == set(), "docs/ files (the pages link each other and images/) not in the sdist"
    native = {f"native/{n}" for n in ("_cupti.c", "_replay.c", "_tick.c", "README.md")}
    assert native - shipped == set()
    assert {"README.md", "pyproject.toml", "setup.py", "PKG-INFO"} <= shipped


def test_an_install_without_a_c_compiler_goes_on_and_says_what_each_skipped_extension_leaves(tmp_path: Path) -> None:
    """No compiler (CC=false): the build leaves the three extensions out and says, one line each, what runs instead;
    the sentence ended "returned non-zero exit status 1.. GPU collection will use ..." (two full stops)."""
    if (why := setuptools_too_old()) is not None:
        pytest.skip(why)
    src = tmp_path / "src"
    for name in [*source_files(), "pyproject.toml", "setup.py", "README.md", *(f"native/{c}" for c in NATIVE)]:
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if k != "INFERSCOPE_FORCE_NATIVE_BUILD"}
    built = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=src,
        env={**env, "CC": "false"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert built.returncode == 0, built.stderr
    warnings = [line for line in built.stderr.splitlines() if line.startswith("WARNING: pytest-inferscope: skipping")]
    assert len(warnings) == 3, built.stderr
    for line, then in zip(
        warnings,
        [
            "GPU collection will use cupti-python if installed.",
            "The analysis replays in Python.",
            "--inferscope-sampler=signal falls back to the sampler thread.",
        ],
        strict=True,
    ):
        assert line.endswith(f". {then[0].upper()}{then[1:]}") and ".." not in line, line  # (a compiler's or no header)
    assert list((src / "pytest_inferscope").glob("*.so")) == []
    forced = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace"],
        cwd=src,
        env={**env, "CC": "false", "INFERSCOPE_FORCE_NATIVE_BUILD": "1"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert forced.returncode != 0 and "(INFERSCOPE_FORCE_NATIVE_BUILD=1 makes this an error)" in forced.stderr
