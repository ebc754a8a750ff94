"""Validation: the check profile run on a clean checkout of the merged tree."""

from __future__ import annotations

import asyncio
from pathlib import Path

import git
from temporalio import activity

from reposwarm import ledger
from reposwarm.checks import run_profile
from reposwarm.contracts import TestReport, ValidateInput
from reposwarm.store import Store, run_dir


def _checkout(repo_path: str, path: Path, ref: str) -> None:
    """A clean detached worktree at `ref`, recycled when it exists (cheaper than remove + add)."""
    if (path / ".git").exists():
        wt = git.Git(str(path))
        wt.checkout("-f", "--detach", ref)
        wt.clean("-fdx")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        repo = git.Git(repo_path)
        repo.worktree("prune")
        repo.worktree("add", "-f", "--detach", str(path), ref)


@activity.defn
async def validate(req: ValidateInput) -> TestReport:
    """Run the check profile on a clean checkout of `ref` (the merged tree)."""
    path = run_dir(req.run_id) / "validate"
    await asyncio.to_thread(_checkout, req.repo_path, path, req.ref)
    report = await run_profile(req.profile, path, Store(req.run_id))
    ledger.record_activity(req.run_id, "validation", ref=req.ref, profile=req.profile_name, passed=report.passed, failures=report.failures,
                  duration_s=report.duration_s)
    return report
