"""Delivery: the approved tree on its branch, pushed and proposed as a pull request where configured.

Credentials (GITHUB_TOKEN) are read here, from the worker's environment, and
go nowhere but the request's Authorization header.
"""

from __future__ import annotations

from pathlib import Path

import git
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.repo import synced
from reposwarm.checks import setup
from reposwarm.checks.sandbox import caches
from reposwarm.contracts import Delivered, DeliverInput
from reposwarm.gitvalues import remote_problem
from reposwarm.runs import ledger
from reposwarm.runs.store import Store, run_dir
from reposwarm.vcs import forge
from reposwarm.vcs.gitcmd import is_ancestor, rev, try_git
from reposwarm.vcs.remote import shown, worktree_lock


@activity.defn
def deliver(req: DeliverInput) -> Delivered:
    """Put the approved tree on the delivery branch and retire the run's working branches.

    Lane and integration branches are deleted only when their commits are in
    the delivered commit (merged); any other is kept under swarm-kept/<run>/.
    Worktrees of the run are removed, never the user's own.
    """
    repo = synced(req.repo_path, req.run_id)
    repo.have(req.integration_sha)
    g = repo.git
    target = f"refs/heads/{req.branch}"
    repo.fetch(target)  # a branch of that name on the remote is as much in the way as a local one
    existing = rev(g, target)
    if existing is not None and existing != req.integration_sha:
        raise ApplicationError(f"branch {req.branch!r} already exists in {req.repo_path}", non_retryable=True)
    root = run_dir(req.run_id)
    with worktree_lock(repo.path):
        for line in g.worktree("list", "--porcelain").splitlines():
            if line.startswith("worktree ") and Path(line[9:]).is_relative_to(root):
                g.worktree("remove", "--force", line[9:])
        g.worktree("prune")
    # the lanes' own build caches and setup entries on this host (a lane's are only ever its own)
    caches.remove_lane_caches(req.run_id)
    setup.remove_lane_entries(req.run_id)
    prefix = f"refs/heads/swarm/{req.run_id}/"
    # on a remote, every lane's branch as its host pushed it: those not merged are kept, like local ones
    repo.fetch(f"{prefix}*")
    kept, gone = [], []
    for line in g.for_each_ref("--format=%(refname) %(objectname)", prefix).splitlines():
        ref, sha = line.split()
        if not is_ancestor(g, sha, req.integration_sha):
            kept.append(f"refs/heads/swarm-kept/{req.run_id}/{ref[len(prefix):]}")
            g.update_ref(kept[-1], sha)
        g.update_ref("-d", ref, sha)
        gone.append(ref)
    # Validated and rolled-back states: kept while their commits are not in the delivered one.
    for line in g.for_each_ref("--format=%(refname) %(objectname)", f"refs/reposwarm/{req.run_id}/").splitlines():
        ref, sha = line.split()
        if is_ancestor(g, sha, req.integration_sha):
            g.update_ref("-d", ref, sha)
            gone.append(ref)
    # the remote as here: kept branches first, then the merged ones go, then the delivered branch comes
    # (swarm/<run> can only be made once no swarm/<run>/... is left)
    repo.push(*kept, delete=tuple(gone))
    if existing is None:
        g.update_ref(target, req.integration_sha, "0" * 40)
    repo.push(new=(target,))
    ledger.record_activity(req.run_id, "delivery", branch=req.branch, sha=req.integration_sha)
    return Delivered(branch=req.branch, pushed_to=_push(g, req), pull_request_url=_pull_request(g, req))


def _push(g: git.Git, req: DeliverInput) -> str | None:
    remote = req.delivery.remote
    if not remote:
        return None
    if (why := remote_problem(remote)) is not None:  # (checked when the lanes file was read; again at the seam)
        raise ApplicationError(f"delivery.remote {shown(remote)!r} {why}", non_retryable=True)
    status, _, err = try_git(g, "push", "--porcelain", "--no-verify", "--", remote,
                             f"refs/heads/{req.branch}:refs/heads/{req.branch}")
    if status != 0:
        raise ApplicationError(f"git push to {shown(remote)} failed: {shown(err.strip())[:500]}")
    ledger.record_activity(req.run_id, "push", remote=shown(remote), branch=req.branch)
    return remote


def _pull_request(g: git.Git, req: DeliverInput) -> str | None:
    if not req.delivery.pull_request:
        return None
    repo = req.delivery.github_repo
    if repo is None and req.delivery.remote:
        repo = forge.github_repo_of(g.remote("get-url", "--", req.delivery.remote))
    if repo is None:
        raise ApplicationError("delivery.pull_request needs delivery.github_repo (owner/name) or a GitHub remote",
                               non_retryable=True)
    if not req.base_branch:
        raise ApplicationError("a pull request needs the base branch the run started from (BASE_BRANCH)",
                               non_retryable=True)
    body = Store(req.run_id).get(req.review_ref).decode("utf-8") if req.review_ref else ""
    url = forge.open_pull_request(repo, head=req.branch, base=req.base_branch, title=req.title, body=body,
                                  draft=req.delivery.draft)
    ledger.record_activity(req.run_id, "pull_request", url=url)
    return url

