"""A ref the clone does not have, as CI checkouts make them (ab/refs.py): the error says what to fetch, in one
paragraph.

GitHub Actions' actions/checkout makes an empty repository with an `origin` remote (the default refspec), fetches the
one commit it builds with `--depth=1 --no-tags` into `refs/remotes/origin/BRANCH`, and checks it out detached; a
`git clone --depth 1` fetches only its branch, and its refspec covers only that branch (docs/ab.md)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pytest_inferscope.ab.worktree import ABInputError, find_repo, resolve_commit
from pytest_inferscope.parsers import parse_ref


def git(where: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(["git", *args], cwd=where, check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture(scope="module")
def origin(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """main with three commits and a tag on the first; feature one commit ahead of main."""
    root = tmp_path_factory.mktemp("origin")
    git(root, "init", "-q", "-b", "main")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    for n in range(3):
        (root / "f.txt").write_text(f"{n}\n")
        git(root, "add", "f.txt")
        git(root, "commit", "-qm", f"c{n}")
        if n == 0:
            git(root, "tag", "v1")
    git(root, "checkout", "-qb", "feature")
    (root / "f.txt").write_text("feature\n")
    git(root, "commit", "-qam", "feature")
    return root


def actions_checkout(origin: Path, where: Path) -> Path:
    """What actions/checkout@v4 does by default for a push to `feature`."""
    where.mkdir()
    git(where, "init", "-q")
    git(where, "remote", "add", "origin", origin.as_uri())
    sha = git(origin, "rev-parse", "feature")
    git(where, "fetch", "-q", "--no-tags", "--depth=1", "origin", f"+{sha}:refs/remotes/origin/feature")
    git(where, "checkout", "-q", "--detach", sha)
    return where


def error(where: Path, ref: str) -> str:
    with pytest.raises(ABInputError) as info:
        resolve_commit(find_repo(where, ref), ref)
    text = str(info.value)
    assert "\n" not in text  # one paragraph
    return text


def test_an_ancestor_in_a_shallow_ci_checkout(origin: Path, tmp_path: Path) -> None:
    where = actions_checkout(origin, tmp_path / "ci")
    text = error(where, "HEAD~2")
    assert "shallow" in text
    assert "git fetch --deepen=2" in text
    assert "fetch-depth: 0" in text
    git(where, "fetch", "-q", "--deepen=2")  # and the advice works
    resolve_commit(find_repo(where, "HEAD~2"), "HEAD~2")


def test_the_base_branch_not_fetched_by_actions_checkout(origin: Path, tmp_path: Path) -> None:
    where = actions_checkout(origin, tmp_path / "ci")
    text = error(where, "origin/main")
    assert "`git fetch origin main`" in text  # the remote's refspec covers every branch: this makes origin/main
    assert "fetch-depth: 0" in text
    git(where, "fetch", "-q", "origin", "main")  # and the advice works
    resolve_commit(find_repo(where, "origin/main"), "origin/main")


def test_a_single_branch_clone_needs_the_refspec_spelled_out(origin: Path, tmp_path: Path) -> None:
    where = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "feature", origin.as_uri(), str(where))
    text = error(where, "origin/main")
    advice = "git fetch origin +refs/heads/main:refs/remotes/origin/main"
    assert f"`{advice}`" in text
    git(where, *advice.split()[1:])
    resolve_commit(find_repo(where, "origin/main"), "origin/main")


def test_a_local_branch_name_that_ci_has_as_a_remote_one(origin: Path, tmp_path: Path) -> None:
    where = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--branch", "feature", origin.as_uri(), str(where))  # no local `main`
    assert "--inferscope-ab=origin/main" in error(where, "main")
    ci = actions_checkout(origin, tmp_path / "ci")  # neither main nor origin/main
    text = error(ci, "main")
    assert "`git fetch origin main`" in text and "--inferscope-ab=origin/main" in text


def test_a_tag_not_fetched(origin: Path, tmp_path: Path) -> None:
    where = actions_checkout(origin, tmp_path / "ci")  # actions/checkout fetches with --no-tags
    text = error(where, "v1")
    assert "`git fetch origin tag v1`" in text
    git(where, "fetch", "-q", "origin", "tag", "v1")
    resolve_commit(find_repo(where, "v1"), "v1")


def test_a_commit_hash_not_in_the_clone(origin: Path, tmp_path: Path) -> None:
    where = actions_checkout(origin, tmp_path / "ci")
    sha = git(origin, "rev-parse", "main~1")
    text = error(where, sha)
    assert f"`git fetch origin {sha}`" in text and "fetch-depth: 0" in text
    assert "git fetch --deepen" in error(where, sha[:10])  # a short hash cannot be fetched by name


def test_upstream_of_a_detached_head(origin: Path, tmp_path: Path) -> None:
    where = actions_checkout(origin, tmp_path / "ci")
    text = error(where, "@{upstream}")
    assert "detached" in text and "--inferscope-ab=origin/main" in text


def test_an_empty_ref_from_a_merge_base_that_printed_nothing() -> None:
    with pytest.raises(ValueError, match=r"empty.*merge-base.*fetch-depth: 0"):
        parse_ref("")


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0, reason="making a folder another user's needs root")
def test_a_checkout_owned_by_another_user_is_said_to_be(origin: Path, tmp_path: Path) -> None:
    """A CI container job runs as root in a checkout the runner's user made: git refuses it ("dubious ownership"),
    and the error said the folder "is not inside a git repository", with git's three lines in it."""
    import shutil

    where = actions_checkout(origin, tmp_path / "ci")
    nobody = 65534
    for path in [where, *where.rglob("*")]:
        os.chown(path, nobody, nobody, follow_symlinks=False)
    with pytest.raises(ABInputError) as info:
        find_repo(where, "origin/main")
    text = str(info.value)
    assert "\n" not in text and "not inside a git repository" not in text
    assert f"`git config --global --add safe.directory {where}`" in text
    shutil.rmtree(where)
