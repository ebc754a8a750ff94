"""Cleaning up a worker host without losing work.

A run's worktree is removed only when nothing in it is unique: no uncommitted
change, and its HEAD commit is on a branch (or a kept ref) of its repository.
Worktrees of runs still running are kept. Ledgers, review packages and stores
stay: they are the record.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from reposwarm.runs.store import home
from reposwarm.vcs import gitcmd


@dataclass
class Verdict:
    path: Path
    run_id: str
    remove: bool
    why: str
    repo: str | None = None


def _git(cwd: Path | str, *args: str) -> subprocess.CompletedProcess[str]:
    return gitcmd.run(["-C", str(cwd), *args], capture_output=True, text=True)


def _repo_of(worktree: Path) -> str | None:
    """The main repository of a linked worktree, from its .git file (gitdir: <repo>/.git/worktrees/<name>)."""
    try:
        gitdir = (worktree / ".git").read_text().strip().removeprefix("gitdir: ")
    except OSError:
        return None
    common = Path(gitdir).parent.parent
    return str(common.parent if common.name == ".git" else common)


def survey(running: set[str]) -> list[Verdict]:
    verdicts = []
    for run in sorted((home() / "runs").glob("*")):
        for worktree in sorted(p.parent for p in run.rglob(".git") if p.is_file()):
            repo = _repo_of(worktree)
            if run.name in running:
                verdicts.append(Verdict(worktree, run.name, False, "its run is still running", repo))
            elif repo is None or not Path(repo).exists():
                verdicts.append(Verdict(worktree, run.name, False, "its repository is gone; look before deleting"))
            elif _git(worktree, "status", "--porcelain").stdout.strip():
                verdicts.append(Verdict(worktree, run.name, False, "uncommitted changes", repo))
            else:
                head = _git(worktree, "rev-parse", "HEAD").stdout.strip()
                kept = _git(repo, "for-each-ref", "--contains", head, "--format=%(refname:short)",
                            "refs/heads", "refs/reposwarm").stdout.split()
                verdicts.append(Verdict(worktree, run.name, bool(kept), f"its commits are on {kept[0]}" if kept
                                        else f"commit {head[:12]} is on no branch", repo))
    return verdicts


def remove(verdict: Verdict) -> None:
    if verdict.repo is not None:
        _git(verdict.repo, "worktree", "remove", "--force", str(verdict.path))
        _git(verdict.repo, "worktree", "prune")
