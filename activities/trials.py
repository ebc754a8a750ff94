"""Trials: a clone to replay commits in, and the scoring of each trial against what the engineers did."""

from __future__ import annotations

import asyncio
import json
import re
import tempfile
from pathlib import Path

import git
from temporalio import activity
from temporalio.exceptions import ApplicationError

from reposwarm import gitcmd
from reposwarm.checks.runner import run_profile
from reposwarm.checks.sandbox import SandboxUnavailable
from reposwarm.contracts import ScoreInput, TrialClone, TrialCloneInput, TrialOutcome, TrialScore
from reposwarm.runs import ledger, metrics
from reposwarm.runs.store import home

TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*$|[^/]*_test\.(py|go)$|[^/]*\.(test|spec)\.[jt]sx?$)")


def trials_dir(batch_id: str) -> Path:
    return home() / "trials" / batch_id


@activity.defn
def prepare_trial_clone(req: TrialCloneInput | str, repo_path: str | None = None) -> TrialClone:
    """A bare clone sharing the repository's objects: every commit is there, and the user's repo is untouched.

    Batches scheduled before TrialCloneInput call it with two strings (batch id, repository). The SDK decodes
    arguments by type only when their count is the signature's, so the one-model call arrives as a dict."""
    req = TrialCloneInput.model_validate(req if repo_path is None else {"batch_id": req, "repo_path": repo_path})
    clone = trials_dir(req.batch_id) / "repo.git"
    if not (clone / "HEAD").exists():
        clone.parent.mkdir(parents=True, exist_ok=True)
        gitcmd.repo(str(clone.parent)).clone("--quiet", "--bare", "--shared", req.repo_path, str(clone))
    return TrialClone(path=str(clone))


def _files(g: git.Git, a: str, b: str) -> tuple[set[str], int]:
    names = set(g.diff("--name-only", "--no-renames", a, b).splitlines())
    lines = 0
    for row in g.diff("--numstat", "--no-renames", a, b).splitlines():
        added, removed, _ = row.split("\t", 2)
        lines += (int(added) if added.isdigit() else 0) + (int(removed) if removed.isdigit() else 0)
    return names, lines


async def _commit_tests_pass(g: git.Git, req: ScoreInput, tests: list[str]) -> bool | None:
    """The commit's own test files, taken from the commit, run on the swarm's result."""
    if not tests or req.profile is None or req.result_sha is None:
        return None
    with tempfile.TemporaryDirectory(prefix="reposwarm-trial-") as tmp:
        checkout = Path(tmp) / "tree"
        await asyncio.to_thread(g.worktree, "add", "--detach", "-f", str(checkout), req.result_sha)
        try:
            for path in tests:
                content = gitcmd.show(g, req.spec.sha, path)
                target = checkout / path
                if content is not None:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_text(content, encoding="utf-8")
                elif target.exists():
                    target.unlink()  # the commit deleted it
            try:
                report = await run_profile(req.profile, checkout, None, rerun=False)
            except SandboxUnavailable as err:  # retrying cannot help until bubblewrap is installed
                raise ApplicationError(str(err), type="SandboxUnavailable", non_retryable=True) from None
            return report.passed
        finally:
            await asyncio.to_thread(g.worktree, "remove", "--force", str(checkout))


@activity.defn
async def score_trial(req: ScoreInput) -> TrialScore:
    """Compare the swarm's result with the commit; append the score to the batch's results file."""
    g = gitcmd.repo(req.clone_path)
    commit_files, commit_lines = _files(g, req.spec.parent, req.spec.sha)
    tests = sorted(p for p in commit_files if TEST_FILE.search(p))
    figures = metrics.report(req.run_id, ledger.read(req.run_id))
    score = TrialScore(sha=req.spec.sha, run_id=req.run_id, message=req.spec.message.splitlines()[0][:200],
                       status=TrialOutcome.failed if req.failure else TrialOutcome.scored,
                       failure=req.failure or "", tests=tests,
                       lines_commit=commit_lines, validations=figures.validations, resolutions=figures.resolutions,
                       tokens=figures.tokens_in + figures.tokens_out, cost_usd=figures.cost_usd,
                       wall_s=figures.elapsed_s, lanes=[lane.model_dump() for lane in figures.lanes])
    lines = ledger.read(req.run_id)
    score.conflicts = sum(1 for e in lines if e["event"] == "merge" and not e.get("merged"))
    score.interventions = sum(max(0, lane.dispatches - 1) for lane in figures.lanes) + sum(
        1 for e in lines if e["event"] == "rollback")
    if req.result_sha is not None:
        swarm_files, score.lines_swarm = _files(g, req.spec.parent, req.result_sha)
        score.stray = sorted(swarm_files - commit_files)
        score.missed = sorted(commit_files - swarm_files)
        score.tests_passed = await _commit_tests_pass(g, req, tests)
    else:
        score.missed = sorted(commit_files)
    out = trials_dir(req.batch_id) / "results.jsonl"
    done = {json.loads(line)["sha"] for line in out.read_text().splitlines()} if out.exists() else set()
    if req.spec.sha not in done:  # written as each trial finishes; a retried activity writes it once
        with out.open("a", encoding="utf-8") as f:
            f.write(score.model_dump_json() + "\n")
    return score
