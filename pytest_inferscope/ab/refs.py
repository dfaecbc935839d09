"""Why git does not know an --inferscope-ab ref here, and what to fetch: one paragraph for the usage error.

CI checkouts hold little of the repository: GitHub Actions' actions/checkout fetches the one commit it builds
(`--depth=1 --no-tags`) into a repository whose `origin` has the default refspec, and checks it out detached; a
`git clone --depth 1 --branch B` fetches B alone, with a refspec that covers B alone (then `git fetch origin main`
updates only FETCH_HEAD, and `origin/main` is still unknown). The advice is made for the clone at hand: the ancestors
of a shallow HEAD (`git fetch --deepen=N`), a branch of the remote (`git fetch origin main`, or the refspec spelled
out), a name that is a remote branch here (`origin/main`, not `main`), a tag (`git fetch origin tag v1`), a commit
hash, `@{upstream}` on a detached HEAD. Nothing here changes the repository: only reading git commands run.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from ..units import fmt_count

_ANCESTRY = re.compile(r"^(.+?)((?:[~^]\d*)+)$")
_UPSTREAM = re.compile(r"^(.*)@\{(u|upstream|push)\}$", re.IGNORECASE)
_HASH = re.compile(r"[0-9a-fA-F]{7,40}")
_EVERYTHING = "`fetch-depth: 0` in actions/checkout's `with:`, which fetches every branch and tag with their history"


def explain(git: Callable[..., str | None], top: Path, ref: str) -> str:
    """The paragraph for a `ref` git does not resolve in the repository `git` runs on (`git(*args)`: its stdout, or
    None when the command failed)."""
    head = f"--inferscope-ab={ref}: git does not know the revision {ref!r} in {top}"
    shallow = git("rev-parse", "--is-shallow-repository") == "true"
    remotes = (git("remote") or "").split()
    remote = "origin" if "origin" in remotes else (remotes[0] if remotes else None)
    why = _why(git, ref, shallow, remote, remotes)
    if shallow:
        why = (
            "This clone is shallow (a CI checkout such as GitHub Actions' actions/checkout fetches only the commit it "
            "builds, `--depth=1`, by default), so most of the history is not in it. " + why
        )
    return f"{head}. {why}"


def _why(git: Callable[..., str | None], ref: str, shallow: bool, remote: str | None, remotes: list[str]) -> str:
    base = _default_branch(git, remote)
    if match := _UPSTREAM.match(ref):
        branch = match[1] or (git("symbolic-ref", "-q", "--short", "HEAD") or "")
        if not branch or branch == "HEAD":
            return (
                "HEAD is detached (CI checks out the commit it builds, not a branch), so there is no upstream branch "
                f"to compare with: name the branch, e.g. --inferscope-ab={base}"
            )
        return (
            f"The branch {branch} has no {match[2]} branch here: set one (`git branch --set-upstream-to={base} "
            f"{branch}`) or name the branch, e.g. --inferscope-ab={base}"
        )
    if (match := _ANCESTRY.match(ref)) and not ref.endswith("}"):
        depth = sum(int(step[1:] or 1) for step in re.findall(r"[~^]\d*", match[2]))
        if git("rev-parse", "--verify", "--quiet", f"{match[1]}^{{commit}}") is not None:
            if shallow:
                return (
                    f"{match[1]} is here but not the {fmt_count(depth, 'commit')} of history before it that {ref} "
                    f"needs: fetch them before pytest (`git fetch --deepen={depth}`), or use {_EVERYTHING}"
                )
            return f"{match[1]} has fewer than {fmt_count(depth, 'commit')} before it (`git log --oneline {match[1]}`)"
        return _why(git, match[1], shallow, remote, remotes)  # the name itself is not here: what to fetch
    if _HASH.fullmatch(ref):
        if len(ref) == 40 and remote is not None:
            return (
                f"The commit is not in this clone: fetch it before pytest (`git fetch {remote} {ref}`: GitHub and most "
                f"servers give a commit by its full hash), or use {_EVERYTHING}"
            )
        deepen = "`git fetch --deepen=N`, `git fetch --unshallow`" if shallow else f"`git fetch {remote or 'REMOTE'}`"
        return (
            f"No commit here starts with {ref}: fetch the history that has it before pytest ({deepen}, or "
            f"{_EVERYTHING}; a short hash cannot be fetched by name, the full one can: `git fetch REMOTE SHA`)"
        )
    for name in remotes:
        if ref.startswith(f"{name}/"):
            branch = ref.removeprefix(f"{name}/")
            return (
                f"The branch {branch} of {name} has not been fetched into this clone (CI fetches only the commit it "
                f"builds): fetch it before pytest (`{_fetch(git, name, branch)}`), or use {_EVERYTHING}"
            )
    if remote is None:
        return "Give a branch, tag or commit that exists here (`git log --oneline -5`, `git branch -a`, `git tag`)"
    for name in remotes:
        if git("rev-parse", "--verify", "--quiet", f"refs/remotes/{name}/{ref}") is not None:
            return (
                f"There is no local branch {ref} (a CI checkout makes no local branch but the one it builds, if any); "
                f"the remote's is {name}/{ref}: --inferscope-ab={name}/{ref}"
            )
    return (
        f"Neither a branch nor a tag {ref} is in this clone. A branch of {remote}: fetch it before pytest "
        f"(`{_fetch(git, remote, ref)}`) and give --inferscope-ab={remote}/{ref}; a tag: `git fetch {remote} tag "
        f"{ref}` (actions/checkout fetches no tags); or use {_EVERYTHING}"
    )


def _fetch(git: Callable[..., str | None], remote: str, branch: str) -> str:
    """The command that makes `remote/branch` here: `git fetch REMOTE BRANCH` where the remote's refspec maps the
    branch to it (git then updates it too), else the refspec spelled out (a single-branch clone's covers its own)."""
    for spec in (git("config", "--get-all", f"remote.{remote}.fetch") or "").split():
        src, _, dst = spec.lstrip("+").partition(":")
        mapped = (
            ("refs/heads/*", f"refs/remotes/{remote}/*"),
            (f"refs/heads/{branch}", f"refs/remotes/{remote}/{branch}"),
        )
        if (src, dst) in mapped:
            return f"git fetch {remote} {branch}"
    return f"git fetch {remote} +refs/heads/{branch}:refs/remotes/{remote}/{branch}"


def _default_branch(git: Callable[..., str | None], remote: str | None) -> str:
    """The remote's default branch as a ref here (`origin/main`), from `refs/remotes/R/HEAD` when the clone has it."""
    if remote is None:
        return "main"
    head = git("symbolic-ref", "-q", "--short", f"refs/remotes/{remote}/HEAD")
    return head or f"{remote}/main"
