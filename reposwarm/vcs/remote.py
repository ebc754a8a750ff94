"""Where a run's repository lives: a local path every worker opens, or a git remote named by URL.

A local path (the embedded default) is opened as it is, and nothing here does anything more.

A URL (file://, ssh://, https://, or scp-like user@host:path) lets worker hosts share nothing but the remote:
each host keeps its own bare clone under REPOSWARM_HOME/repos (asked for blob-less, so a sparse lane checks out
only its slice's files, where the remote allows it), and the run's refs live on the remote. An activity that
reads the run's refs fetches them first (`fetch`); one that writes them pushes them before it returns
(`push`), so any host can continue any lane, merge or check from what the remote holds. The remote is the
truth for every ref a run shares; a local ref ahead of it (a push cut short by a kill) is pushed by the
retry. The user's own branches are only read: the run writes nothing but its own refs (swarm/<run>/...,
refs/reposwarm/<run>/..., swarm-kept/<run>/... and the delivered branch), as with a local path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import git
from temporalio.exceptions import ApplicationError

from reposwarm.gitvalues import url_problem
from reposwarm.vcs import gitcmd
from reposwarm.vcs.gitcmd import is_ancestor, rev, try_git

_SCHEME = re.compile(r"^(file|ssh|git|https?)://", re.I)
_SCP = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^/]")  # git@github.com:org/repo.git
SHADOW = "refs/reposwarm-remote/"  # where fetched refs land before they are taken (git refuses to fetch into a
# branch a worktree has checked out, and a lane's branch is checked out in its worktree)


def is_url(repo: str) -> bool:
    return bool(_SCHEME.match(repo) or _SCP.match(repo))


def _home() -> Path:
    from reposwarm.runs.store import home

    return home()


def cache_path(url: str) -> Path:
    """This host's clone of `url`."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", url.rstrip("/").rsplit("/", 1)[-1])[:40] or "repo"
    return _home() / "repos" / f"{name}-{hashlib.sha1(url.encode()).hexdigest()[:12]}.git"


@contextlib.contextmanager
def repo_lock(key: str, what: str = "fetch") -> Iterator[None]:
    """One `what` at a time per repository on this host (a lock file under REPOSWARM_HOME)."""
    lock = _home() / "locks" / f"{hashlib.sha1(key.encode()).hexdigest()}.{what}.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    with lock.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def worktree_lock(repo_dir: str | Path) -> contextlib.AbstractContextManager[None]:
    """One change to a repository's worktree registrations at a time on this host: an add (a lane's worktree,
    a check's checkout) writes `.git/worktrees/<name>/` file by file, and a prune or a mend of half-made
    registrations (gitcmd.mend_worktree_registrations) beside it would take the one being written for one a
    killed add left empty, and remove it under the lane. `repo_dir` is the folder git opens (Repository.path)."""
    return repo_lock(str(Path(repo_dir).resolve()), "worktree")


def shown(text: str) -> str:
    """Text naming a URL, fit to show: no password or token of a URL (https://x:TOKEN@host/...), no secret."""
    from reposwarm.runs.ledger import redact

    return redact(re.sub(r"(://)[^/@\s]+@", r"\1[redacted]@", text))


def _failed(what: str, url: str, err: str) -> ApplicationError:
    detail = shown(err.strip())[-800:]
    # ("Could not read from remote repository" alone is also what ssh says when the network is down: retried)
    gone = re.search(r"not found|does not appear to be a git repository|repository .* does not exist|"
                     r"authentication failed", err, re.I)
    # A repository that is not there (or not ours to read) stays so on a retry; a network blip does not.
    return ApplicationError(f"{what} {shown(url)} failed: {detail}", type="RemoteUnavailable",
                            non_retryable=bool(gone))


class Repository:
    """A run's repository as this host works with it: `path` is what git opens (the user's folder, or this
    host's clone of the remote), `url` the remote, or None for a local path."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.url = spec if is_url(spec) else None
        self.path = cache_path(spec) if self.url else Path(spec)
        self.git: git.Git

    def open(self) -> Repository:
        """Check the repository is there (cloning the remote on this host's first use) and return self."""
        if self.url is None:
            if not self.path.is_dir():
                raise ApplicationError(f"repository {self.spec} does not exist", non_retryable=True)
            try:
                git.Repo(self.path)
            except (git.InvalidGitRepositoryError, git.NoSuchPathError):
                raise ApplicationError(f"{self.spec} is not a git repository", non_retryable=True) from None
        elif (why := url_problem(self.spec)) is not None:
            # (the starter refuses these; a request made some other way meets the same rule here)
            raise ApplicationError(f"repository URL {shown(self.spec)} {why}", non_retryable=True)
        elif not (self.path / "HEAD").exists():
            self._clone()
        self.git = gitcmd.repo(self.path)
        return self

    def _clone(self) -> None:
        assert self.url is not None
        with repo_lock(self.url, "clone"):
            if (self.path / "HEAD").exists():
                return  # another activity of this host cloned it while this one waited
            tmp = self.path.with_name(self.path.name + ".part")
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.parent.mkdir(parents=True, exist_ok=True)
            # blob-less where the remote allows it (a sparse lane then fetches its slice's files only); a remote
            # that does not (a plain file:// one) sends everything, with a warning on stderr
            done = gitcmd.run(["clone", "--quiet", "--bare", "--filter=blob:none", "--", self.url, str(tmp)],
                              capture_output=True, text=True)
            if done.returncode != 0:
                shutil.rmtree(tmp, ignore_errors=True)
                raise _failed("git clone of", self.url, done.stderr)
            g = gitcmd.repo(tmp)
            g.config("remote.origin.fetch", "+refs/heads/*:refs/remotes/origin/*")
            os.replace(tmp, self.path)

    # -- refs ---------------------------------------------------------------------------------------------

    def base(self, ref: str) -> str | None:
        """The commit a base ref names now: for a remote, its branch as the remote has it (fetched)."""
        if self.url is None:
            return next((sha for r in (f"refs/heads/{ref}", f"refs/remotes/{ref}", ref)
                         if (sha := rev(self.git, r)) is not None), None)
        if re.fullmatch(r"[0-9a-f]{40}", ref) and rev(self.git, ref):
            return ref
        with repo_lock(self.url):
            self._git_fetch([f"+refs/heads/{ref}:refs/remotes/origin/{ref}"], allow_missing=True)
        return rev(self.git, f"refs/remotes/origin/{ref}") or rev(self.git, ref)

    def fetch(self, *refs: str, keep_ahead: tuple[str, ...] = ()) -> None:
        """Take the remote's state of these refs (full names; a trailing /* for a namespace) into this clone.

        The remote wins: a run's shared refs are written by one activity at a time, which pushes before it
        returns. A ref in keep_ahead (a lane's own branch, which only the lane's host writes) that is ahead of
        the remote's here is kept, and pushed: its push was cut short.
        """
        if self.url is None or not refs:
            return
        refs = tuple(dict.fromkeys(r for r in refs if not any(  # a ref a namespace of the list covers goes
            p.endswith("*") and p != r and _matches(r, p) for p in refs)))
        specs = [f"+{r}:{SHADOW}{r[len('refs/'):]}" for r in refs]
        prefixes = [r.rstrip("*").rstrip("/") for r in refs]  # for-each-ref matches whole path components
        with repo_lock(self.url):
            # drop the shadow copies first, so a ref deleted on the remote is not taken from an old fetch
            old = self._refs(*(SHADOW + p[len("refs/"):] for p in prefixes))
            self._update_refs("".join(f"delete {ref}\n" for ref in old))
            self._git_fetch(specs, allow_missing=True)
            theirs = {"refs/" + ref[len(SHADOW):]: sha
                      for ref, sha in self._refs(*(SHADOW + p[len("refs/"):] for p in prefixes)).items()}
            mine = self._refs(*prefixes)
            ahead = [ref for ref in keep_ahead if ref in theirs and ref in mine and mine[ref] != theirs[ref]
                     and is_ancestor(self.git, theirs[ref], mine[ref])]
            self._update_refs("".join(f"update {ref} {sha}\n" for ref, sha in theirs.items()
                                      if mine.get(ref) != sha and ref not in ahead))
        if ahead:
            self.push(*ahead)

    def have(self, *shas: str) -> None:
        """Fetch commits this clone lacks by their names (a remote serves any commit reachable there)."""
        # (object names only: anything else would reach `git fetch` as an argument)
        missing = [sha for sha in shas if re.fullmatch(r"[0-9a-f]{40,64}", sha or "") and rev(self.git, sha) is None]
        if self.url is None or not missing:
            return
        with repo_lock(self.url):
            self._git_fetch(missing, allow_missing=False)

    def push(self, *refs: str, delete: tuple[str, ...] = (), new: tuple[str, ...] = ()) -> None:
        """Put these refs (full names) on the remote as this clone has them, and delete `delete` there.

        The run's own refs are forced (a rollback moves the integration branch back). A ref in `new` (the
        delivered branch, whose name the user may also have used) is only made: the remote refuses it if a ref
        of that name is there already, unless it is this very commit (an earlier attempt pushed it)."""
        if self.url is None:
            return
        specs = [f"+{r}:{r}" for r in refs if rev(self.git, r) is not None] + [f":{r}" for r in delete]
        if specs:
            status, _, err = try_git(self.git, "push", "--quiet", "--no-verify", "--", self.url, *specs)
            if status != 0 and delete and "remote ref does not exist" in err:
                status = 0  # deleted already (an earlier attempt)
            if status != 0:
                raise _failed("git push to", self.url, err)
        for ref in new:
            sha = rev(self.git, ref)
            if sha is None:
                continue
            status, _, err = try_git(self.git, "push", "--quiet", "--no-verify", f"--force-with-lease={ref}:",
                                     "--", self.url, f"{ref}:{ref}")
            if status != 0:
                _, there, _ = try_git(self.git, "ls-remote", "--", self.url, ref)
                if there.split("\t", 1)[0].strip() != sha:
                    raise _failed("git push to", self.url, f"{ref} exists there already and is not ours; {err}")

    def run_refs(self, run_id: str) -> list[str]:
        """A run's shared refs but its lanes' branches: the integration branch, validated and rolled-back
        states, the moving base."""
        from reposwarm.vcs.branches import integration_branch

        return [f"refs/heads/{integration_branch(run_id)}", f"refs/reposwarm/{run_id}/*"]

    def _refs(self, *prefixes: str) -> dict[str, str]:
        """ref -> commit of this clone's refs under the prefixes (each a whole ref or a folder of refs)."""
        out = self.git.for_each_ref("--format=%(refname) %(objectname)", *prefixes)
        return dict(line.split() for line in out.splitlines() if line.strip())

    def _update_refs(self, commands: str) -> None:
        """Several ref updates in one `git update-ref --stdin` (its command lines: update/delete <ref> ...)."""
        if commands:
            gitcmd.run(["update-ref", "--stdin"], cwd=self.path, input=commands, text=True, check=True,
                       capture_output=True)

    def _git_fetch(self, specs: list[str], *, allow_missing: bool) -> None:
        assert self.url is not None
        # from "origin" (this clone's name for the URL), so a blob-less clone stays blob-less
        status, _, err = try_git(self.git, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", "origin",
                                 *specs)
        if status != 0 and allow_missing and "couldn't find remote ref" in err:
            # a branch not made yet: fetch the rest one by one, the missing ones are simply not there
            for spec in specs:
                try_git(self.git, "fetch", "--quiet", "--no-tags", "--no-write-fetch-head", "--", "origin", spec)
        elif status != 0:
            raise _failed("git fetch from", self.url, err)


def _matches(ref: str, pattern: str) -> bool:
    return ref.startswith(pattern[:-1]) if pattern.endswith("*") else ref == pattern


def open_repository(spec: str) -> Repository:
    return Repository(spec).open()
