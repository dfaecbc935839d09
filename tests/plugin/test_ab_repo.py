"""--inferscope-ab leaves the user's repository as it was: the commit a pre-commit hook runs in, the index, the
user's own worktrees, and no entry or folder of ours after the run, however it ends (docs/ab.md)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from gitrepo import child_env, git, pytest_cmd, worktrees

BODY = """
import time, pytest

@pytest.mark.inferscope(rounds=3, warmup=0)
def test_one():
    time.sleep(0.001){extra}
"""


def make_repo(root: Path, extra: str = "") -> Path:
    """A repository with two commits of test_x.py (the second adds a comment)."""
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q")
    git(root, "config", "user.email", "t@example.com")
    git(root, "config", "user.name", "t")
    (root / "test_x.py").write_text(BODY.format(extra=extra))
    git(root, "add", "test_x.py")
    git(root, "commit", "-qm", "first")
    (root / "test_x.py").write_text(BODY.format(extra=extra) + "# second\n")
    git(root, "commit", "-qam", "second")
    return root


def test_a_pre_commit_hook_running_ab_leaves_the_commit_alone(tmp_path: Path) -> None:
    """git runs the hook with GIT_INDEX_FILE (.git/index.lock under `commit -a`): `git worktree add` must not use it."""
    root = make_repo(tmp_path / "repo")
    out = tmp_path / "hook.out"
    hook = root / ".git" / "hooks" / "pre-commit"
    cmd = " ".join(f"'{a}'" for a in pytest_cmd("--inferscope-ab=HEAD~1", "test_x.py"))
    hook.write_text(f"#!/bin/sh\n{cmd} > '{out}' 2>&1\necho \"rc=$?\" >> '{out}'\n")
    hook.chmod(0o755)
    (root / "test_x.py").write_text(BODY.format(extra="") + "# third\n")
    (root / "new.txt").write_text("staged\n")
    git(root, "add", "new.txt")
    git(root, "commit", "-qam", "third", env=child_env())
    text = out.read_text()
    assert "rc=0" in text and "vs HEAD~1" in text, text
    committed = git(root, "show", "HEAD:test_x.py")
    assert committed.endswith("# third\n")  # the commit has this checkout's files, not HEAD~1's
    assert git(root, "show", "HEAD:new.txt") == "staged\n"
    assert git(root, "status", "--porcelain") == ""  # and the index matches the working tree
    assert len(worktrees(root)) == 1


def test_git_dir_and_work_tree_from_the_environment(tmp_path: Path) -> None:
    """A repository found only through GIT_DIR / GIT_WORK_TREE (its git folder elsewhere, as dotfile managers keep
    it): the worktree is made in it, the twin runs without them, and only our entry comes and goes."""
    root = make_repo(tmp_path / "repo")
    store = tmp_path / "store.git"
    (root / ".git").rename(store)
    env = child_env(GIT_DIR=str(store), GIT_WORK_TREE=str(root))
    proc = subprocess.run(
        pytest_cmd("--inferscope-ab=HEAD~1", "test_x.py"), cwd=root, env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    row = next(line for line in proc.stdout.splitlines() if line.startswith("test_x.py::test_one"))
    assert "unchanged" in row or "inconclusive" in row, proc.stdout
    assert len(worktrees(root / ".." / "store.git")) == 1
    assert git(root, "status", "--porcelain", env={**env, "GIT_INDEX_FILE": str(store / "index")}) == ""


def test_the_users_worktrees_stay_listed(tmp_path: Path) -> None:
    """A worktree of the user's whose folder is missing for now (an unmounted disk) keeps its entry: a repo-wide
    `git worktree prune` would drop it."""
    root = make_repo(tmp_path / "repo")
    away = tmp_path / "usb" / "feature"
    git(root, "worktree", "add", "-q", "-b", "feature", str(away))
    git(root, "worktree", "add", "-q", "--detach", str(tmp_path / "mine"))
    before = worktrees(root)
    shutil.rmtree(away.parent)  # unmounted
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD~1", "test_x.py"), cwd=root, env=child_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert worktrees(root) == before


def test_the_users_hooks_do_not_run_on_our_checkout(tmp_path: Path) -> None:
    """A post-checkout hook (npm install, an LFS fetch) is not for our temporary checkout: it does not run, so neither
    its cost nor its failure stops the run, and no entry is left behind."""
    root = make_repo(tmp_path / "repo")
    ran = tmp_path / "hook-ran"
    hook = root / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch '{ran}'\necho 'post-checkout hook says no' >&2\nexit 1\n")
    hook.chmod(0o755)
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD~1", "test_x.py"), cwd=root, env=child_env(),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not ran.exists()
    assert len(worktrees(root)) == 1


def test_a_failed_worktree_add_is_a_usage_error_quoting_git(tmp_path: Path) -> None:
    """`git worktree add` failing (here: a required smudge filter fails in the checkout) is a usage error quoting git,
    without a guess about locks, and leaves no entry and no folder."""
    root = make_repo(tmp_path / "repo")
    (root / ".gitattributes").write_text("test_x.py filter=bad\n")
    git(root, "add", ".gitattributes")
    git(root, "commit", "-qm", "attributes")
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    config = {"GIT_CONFIG_COUNT": "2", "GIT_CONFIG_KEY_0": "filter.bad.smudge", "GIT_CONFIG_VALUE_0": "false",
              "GIT_CONFIG_KEY_1": "filter.bad.required", "GIT_CONFIG_VALUE_1": "true"}  # fmt: skip
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD", "test_x.py"), cwd=root, env=child_env(TMPDIR=str(tmp),
                          **config), capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout + proc.stderr
    assert "--inferscope-ab=HEAD: `git worktree add --detach" in proc.stderr
    assert "smudge filter bad failed" in proc.stderr and "locked" not in proc.stderr
    assert "Traceback" not in proc.stdout + proc.stderr
    assert len(worktrees(root)) == 1 and list(tmp.iterdir()) == []


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def test_a_later_run_removes_the_worktrees_of_killed_runs_and_only_those(tmp_path: Path) -> None:
    import socket

    root = make_repo(tmp_path / "repo")
    tmp = tmp_path / "tmp"
    host = socket.gethostname()

    def add(folder: str, reason: str) -> Path:
        path = tmp / folder / "repo"
        git(root, "worktree", "add", "-q", "--detach", "--lock", "--reason", reason, str(path), "HEAD~1")
        return path

    killed = add("inferscope-ab-killed", f"pytest-inferscope A/B run (pid {dead_pid()} on {host})")
    (killed.parent / "twin-main.log").write_text("its log")
    running = add("inferscope-ab-running", f"pytest-inferscope A/B run (pid {os.getpid()} on {host})")
    other_host = add("inferscope-ab-other", f"pytest-inferscope A/B run (pid {dead_pid()} on not-{host})")
    users = add("mine", f"pytest-inferscope A/B run (pid {dead_pid()} on {host})")  # not in a folder of ours
    users_lock = add("inferscope-ab-users", "on a USB disk")
    proc = subprocess.run(pytest_cmd("--inferscope-ab=HEAD~1", "test_x.py"), cwd=root, env=child_env(TMPDIR=str(tmp)),
                          capture_output=True, text=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    listed = worktrees(root)
    assert f"worktree {killed}" not in listed and not killed.parent.exists()
    for kept in (running, other_host, users, users_lock):
        assert f"worktree {kept}" in listed and kept.exists()
    assert len(listed) == 5


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_sigterm_and_sighup_leave_no_worktree_folder_or_twin(tmp_path: Path, sig: signal.Signals) -> None:
    if signal.getsignal(sig) == signal.SIG_IGN:
        # Under `nohup` (a CI step started so) the signal is ignored here and in the run below, which inherits that;
        # the plugin leaves an ignored signal ignored (ab/signals.py), so the run went on to its end (status 0).
        pytest.skip(f"{sig.name} is ignored in this process (nohup?), and so in the run it would send it to")
    root = make_repo(
        tmp_path / "repo",
        extra=f"""
    import os
    side = "twin" if os.environ.get("INFERSCOPE_AB_TWIN") else "here"
    with open(os.path.join({str(tmp_path)!r}, side + ".pid"), "w") as f:
        f.write(str(os.getpid()))
    time.sleep(0.05)""".replace("rounds=3", "rounds=400"),
    )
    (root / "test_x.py").write_text((root / "test_x.py").read_text().replace("rounds=3", "rounds=400"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(pytest_cmd("--inferscope-ab=HEAD", "test_x.py"), cwd=root, env=child_env(TMPDIR=str(tmp)),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    pids = [tmp_path / "here.pid", tmp_path / "twin.pid"]
    for _ in range(600):
        if all(p.exists() for p in pids) or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert proc.poll() is None, proc.communicate()[0].decode()
    assert len(worktrees(root)) == 2 and list(tmp.iterdir())  # the run is under way
    twin = int(pids[1].read_text())
    proc.send_signal(sig)
    proc.communicate(timeout=60)
    assert proc.returncode == -sig  # still ended by the signal
    assert len(worktrees(root)) == 1
    assert list(tmp.iterdir()) == []  # neither the checkout nor the twin's log
    for _ in range(100):  # (the twin may take a moment to be reaped by init)
        try:
            os.kill(twin, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the twin is still running")


def test_a_later_run_removes_the_twin_log_of_a_killed_ab_python_run_and_only_such(tmp_path: Path) -> None:
    """With --inferscope-ab-python alone the twin's log is a file in TMPDIR (no worktree folder to hold it): a run
    killed outright (SIGKILL) left it there for good. Its name now carries the run's pid and host, and a later A/B run
    removes the logs whose process is gone from this host; a live run's, another host's, and anything else stay."""
    import socket

    root = make_repo(
        tmp_path / "repo",
        extra=f"""
    import os
    if not os.environ.get("INFERSCOPE_AB_TWIN"):
        open(os.path.join({str(tmp_path)!r}, "started"), "w").close()
    time.sleep(0.05)""",
    )
    (root / "test_x.py").write_text((root / "test_x.py").read_text().replace("rounds=3", "rounds=400"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    args = pytest_cmd(f"--inferscope-ab-python={sys.executable}", "test_x.py")
    proc = subprocess.Popen(args, cwd=root, env=child_env(TMPDIR=str(tmp)), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    for _ in range(600):
        if (tmp_path / "started").exists() or proc.poll() is not None:
            break
        time.sleep(0.05)
    assert proc.poll() is None
    proc.kill()  # SIGKILL: no cleanup of its own
    proc.wait()
    (killed,) = list(tmp.iterdir())  # what it left: the twin's log
    host = socket.gethostname()
    assert killed.name.startswith(f"inferscope-twin-{proc.pid}@{host}-") and killed.suffix == ".log"
    live = tmp / f"inferscope-twin-{os.getpid()}@{host}-live.log"  # a run still going
    elsewhere = tmp / f"inferscope-twin-{dead_pid()}@not-{host}-other.log"  # another host sharing TMPDIR
    unnamed = tmp / "inferscope-twin-k3j2h1g0.log"  # before names carried a pid: whose, is unknown
    foreign = tmp / f"notes-{dead_pid()}@{host}-x.log"
    folder = tmp / f"inferscope-twin-{dead_pid()}@{host}-dir.log"
    folder.mkdir()
    link = tmp / f"inferscope-twin-{dead_pid()}@{host}-link.log"
    link.symlink_to(foreign)
    for f in (live, elsewhere, unnamed, foreign):
        f.write_text("kept")
    (root / "test_x.py").write_text((root / "test_x.py").read_text().replace("rounds=400", "rounds=3"))
    again = subprocess.run(args, cwd=root, env=child_env(TMPDIR=str(tmp)), capture_output=True, text=True,
                           timeout=300)  # fmt: skip
    assert again.returncode == 0, again.stdout + again.stderr
    assert sorted(tmp.iterdir()) == sorted([live, elsewhere, unnamed, foreign, folder, link])
    assert all(f.read_text() == "kept" for f in (live, elsewhere, unnamed, foreign))
