"""Trials: a clone to replay commits in, and the scoring of each trial against what the engineers did."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import git
from temporalio import activity
from temporalio.exceptions import ApplicationError

from reposwarm.checks.runner import run_profile
from reposwarm.checks.sandbox import SandboxUnavailable
from reposwarm.contracts import (
    CheckProfile,
    ScoreInput,
    TestReport,
    TrialClone,
    TrialCloneInput,
    TrialOutcome,
    TrialScore,
    TrialSpec,
    TrialVetInput,
    TrialVetting,
)
from reposwarm.runs import ledger, metrics
from reposwarm.runs.store import home
from reposwarm.vcs import gitcmd

TEST_FILE = re.compile(r"(^|/)(tests?/|test_[^/]*$|[^/]*_test\.(py|go)$|[^/]*\.(test|spec)\.[jt]sx?$)")
BASE_REF = "refs/heads/trial-base"  # the one ref of a trial's clone: its base commit
VETTING = 1  # bumped when what a vetting means changes, so older cached answers are not reused


def trials_dir(batch_id: str) -> Path:
    return home() / "trials" / batch_id


@activity.defn
def prepare_trial_clone(req: TrialCloneInput) -> TrialClone:
    """A trial's clone: its base commit and the base's history, and nothing after (see clone_base)."""
    clone = trials_dir(req.batch_id) / req.sha[:12] / "repo.git"
    if not (clone / "HEAD").exists() or gitcmd.rev(gitcmd.repo(clone), BASE_REF) != req.base:
        clone_base(req.repo_path, req.base, req.sha, clone)
    return TrialClone(path=str(clone))


def clone_base(repo_path: str, base: str, gold: str, clone: Path) -> None:
    """A fresh bare repository that fetched the base commit alone: the pack the fetch brings holds exactly the
    objects the base reaches, so no later commit, tag, note or stray object of the user's repository is there.
    Nothing links back to it either: no alternates, no remote, no FETCH_HEAD, no reflog (a bare repository
    keeps none), no template files (hooks, info/) from the user's init.templateDir. Built beside its place and
    renamed, so a retried activity never finds half a clone."""
    user = gitcmd.repo(repo_path)
    status, fmt, _ = gitcmd.try_git(user, "rev-parse", "--show-object-format")
    clone.parent.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix="clone-", dir=clone.parent))
    try:
        gitcmd.run(["init", "--quiet", "--bare", "--template=", f"--object-format={fmt.strip() or 'sha1'}",
                    str(building)], check=True, capture_output=True)
        g = gitcmd.repo(building)
        g.fetch("--quiet", "--no-tags", "--no-write-fetch-head", "--no-recurse-submodules", "--", repo_path, base)
        g.update_ref(BASE_REF, base)
        g.symbolic_ref("HEAD", BASE_REF)
        if gitcmd.try_git(g, "cat-file", "-e", gold)[0] == 0:  # cannot happen for a parent; never let it pass
            raise ApplicationError(f"the clone of {base[:12]} holds the commit {gold[:12]} it is to find",
                                   non_retryable=True)
        shutil.rmtree(clone, ignore_errors=True)
        os.replace(building, clone)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _scoring_git(req: ScoreInput) -> git.Git:
    """Git where both the swarm's result and the gold commit are: the trial's clone reading the user's
    repository's objects too, for this process only (the clone on disk still knows nothing of them)."""
    if not req.clone_path:  # a bad task: no swarm ran
        return gitcmd.repo(req.repo_path)
    g = gitcmd.repo(req.clone_path)
    g.update_environment(GIT_ALTERNATE_OBJECT_DIRECTORIES=_objects_dir(req.repo_path))
    return g


def _objects_dir(repo_path: str) -> str:
    out = gitcmd.repo(repo_path).rev_parse("--path-format=absolute", "--git-path", "objects")
    return str(Path(out.strip()))


def _files(g: git.Git, a: str, b: str) -> tuple[set[str], int]:
    names = set(g.diff("--name-only", "--no-renames", a, b).splitlines())
    lines = 0
    for row in g.diff("--numstat", "--no-renames", a, b).splitlines():
        added, removed, _ = row.split("\t", 2)
        lines += (int(added) if added.isdigit() else 0) + (int(removed) if removed.isdigit() else 0)
    return names, lines


def _overlay(g: git.Git, sha: str, tests: list[str], checkout: Path) -> None:
    """The commit's versions of its test files on a checkout (a file it deleted, deleted)."""
    for path in tests:
        content = gitcmd.show(g, sha, path)
        target = checkout / path
        if content is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content, encoding="utf-8")
        elif target.exists():
            target.unlink()  # the commit deleted it


async def _checks(profile: CheckProfile, tree: Path, *, rerun: bool) -> TestReport:
    try:
        return await run_profile(profile, tree, None, rerun=rerun)
    except SandboxUnavailable as err:  # retrying cannot help until bubblewrap is installed
        raise ApplicationError(str(err), type="SandboxUnavailable", non_retryable=True) from None


async def _commit_tests_pass(g: git.Git, req: ScoreInput, tests: list[str]) -> bool | None:
    """The commit's own test files, taken from the commit, run on the swarm's result."""
    if not tests or req.profile is None or req.result_sha is None:
        return None
    with tempfile.TemporaryDirectory(prefix="reposwarm-trial-") as tmp:
        checkout = Path(tmp) / "tree"
        await asyncio.to_thread(g.worktree, "add", "--detach", "-f", str(checkout), req.result_sha)
        try:
            _overlay(g, req.spec.sha, tests, checkout)
            return (await _checks(req.profile, checkout, rerun=False)).passed
        finally:
            await asyncio.to_thread(g.worktree, "remove", "--force", str(checkout))


@activity.defn
async def score_trial(req: ScoreInput) -> TrialScore:
    """Compare the swarm's result with the commit; append the score to the batch's results file."""
    g = _scoring_git(req)
    commit_files, commit_lines = _files(g, req.spec.parent, req.spec.sha)
    tests = sorted(p for p in commit_files if TEST_FILE.search(p))
    if req.bad_reason:  # no swarm ran: nothing of a run to count
        return _record(req, TrialScore(sha=req.spec.sha, run_id=req.run_id, message=_title(req.spec),
                                       status=TrialOutcome.bad_task, bad_reason=req.bad_reason, tests=tests,
                                       lines_commit=commit_lines))
    figures = metrics.report(req.run_id, ledger.read(req.run_id))
    score = TrialScore(sha=req.spec.sha, run_id=req.run_id, message=_title(req.spec),
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
    return _record(req, score)


def _title(spec: TrialSpec) -> str:
    return (spec.message.splitlines() or [""])[0][:200]


def _record(req: ScoreInput, score: TrialScore) -> TrialScore:
    out = trials_dir(req.batch_id) / "results.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)  # (a batch of bad tasks made no clone, so no folder)
    done = {json.loads(line)["sha"] for line in out.read_text().splitlines()} if out.exists() else set()
    if req.spec.sha not in done:  # written as each trial finishes; a retried activity writes it once
        with out.open("a", encoding="utf-8") as f:
            f.write(score.model_dump_json() + "\n")
    return score


def _vetting_cache(spec: TrialSpec, profile: CheckProfile) -> Path:
    """One answer per commit and check profile, kept across batches: a re-run trial costs no checks."""
    key = hashlib.sha256(f"{VETTING}\n{spec.parent}\n{profile.model_dump_json()}".encode()).hexdigest()[:16]
    return home() / "trials" / "vetted" / f"{spec.sha}-{key}.json"


def _failing(report: TestReport) -> str:
    names = [f.name.splitlines()[0][:120] for f in report.failures[:3] if f.name]
    more = f" and {len(report.failures) - 3} more" if len(report.failures) > 3 else ""
    return ", ".join(names) + more


@activity.defn
async def vet_trial(req: TrialVetInput) -> TrialVetting:
    """Whether a commit can judge a swarm, before any swarm runs on it: its tests (the check profile's commands,
    in the sandbox) pass on the commit, and fail on its base with the commit's versions of the test files it
    adds or changes. A commit they cannot tell from its base would score any answer, right or wrong, the same.
    Runs in the worker, on the user's repository, in a scratch checkout of its own."""
    if req.profile is None:
        return TrialVetting(ok=False, reason="no check profile to run the commit's tests with")
    user = gitcmd.repo(req.repo_path)
    files, _ = _files(user, req.spec.parent, req.spec.sha)
    tests = sorted(p for p in files if TEST_FILE.search(p))
    if not tests:
        return TrialVetting(ok=False, reason="the commit adds or changes no test: nothing tells a right answer "
                                             "from a wrong one")
    cache = _vetting_cache(req.spec, req.profile)
    if cache.is_file():
        try:
            return TrialVetting.model_validate_json(cache.read_text()).model_copy(update={"cached": True})
        except (OSError, ValueError):
            pass  # unreadable: vet again
    answer = await _vet(req, req.profile, tests)
    cache.parent.mkdir(parents=True, exist_ok=True)
    part = cache.with_suffix(f".{os.getpid()}.part")
    part.write_text(answer.model_dump_json())
    os.replace(part, cache)
    return answer


async def _vet(req: TrialVetInput, profile: CheckProfile, tests: list[str]) -> TrialVetting:
    with tempfile.TemporaryDirectory(prefix="reposwarm-vet-") as tmp:
        tree = Path(tmp) / "tree"
        # A scratch repository reading the user's objects: checkouts of any commit, and nothing written into
        # the user's repository (not even a worktree entry).
        gitcmd.run(["init", "--quiet", "--template=", str(tree)], check=True, capture_output=True)
        (tree / ".git" / "objects" / "info").mkdir(parents=True, exist_ok=True)
        (tree / ".git" / "objects" / "info" / "alternates").write_text(_objects_dir(req.repo_path) + "\n")
        g = gitcmd.repo(tree)
        await asyncio.to_thread(g.checkout, "--quiet", "--force", "--detach", req.spec.sha)
        gold = await _checks(profile, tree, rerun=True)  # (a flaky test is not the commit's fault)
        if not gold.passed:
            return TrialVetting(ok=False, reason=f"the commit fails its own tests: {_failing(gold)}")
        await asyncio.to_thread(g.clean, "-q", "-fdx")  # nothing the first run left judges the second
        await asyncio.to_thread(g.checkout, "--quiet", "--force", "--detach", req.spec.parent)
        _overlay(g, req.spec.sha, tests, tree)
        base = await _checks(profile, tree, rerun=True)  # (only a test failing twice tells them apart)
        if base.passed:
            return TrialVetting(ok=False, reason="the base commit already passes the commit's tests: they cannot "
                                                 "tell the change from no change")
    return TrialVetting(ok=True)
