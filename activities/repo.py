"""Git side effects: prepare a run, lane worktrees, checkpoints, merges, delivery.

The user's checkout is never touched: work happens in worktrees under the
worker's REPOSWARM_HOME and on new branches under swarm/<run>/. Merges use
`git merge-tree --write-tree`, which needs no working tree at all. Every
activity here can run twice and leave the same state (Temporal delivers at
least once).
"""

from __future__ import annotations

import functools
import re
import shutil
from pathlib import Path

import git
from temporalio import activity
from temporalio.exceptions import ApplicationError

from reposwarm.client import lane_queue
from reposwarm.contracts import (
    BaseInput,
    BaseMove,
    CheckpointInput,
    CheckpointResult,
    HelperTask,
    LaneDescription,
    LaneWorktree,
    MergeInput,
    MergeResult,
    PrepareInput,
    PrepareResult,
)
from reposwarm.runs import ledger
from reposwarm.runs.store import run_dir
from reposwarm.slices.leftovers import stage_slice
from reposwarm.slices.policy import PathPolicy, cone_dirs
from reposwarm.text import inert
from reposwarm.vcs import gitcmd
from reposwarm.vcs.branches import integration_branch
from reposwarm.vcs.gitcmd import IDENTITY, healthy_worktree, is_ancestor, mend_worktree_registrations, rev, try_git
from reposwarm.vcs.remote import Repository, is_url, open_repository, worktree_lock


def _git(cwd: str | Path) -> git.Git:
    return gitcmd.repo(str(cwd))


def lane_worktree_path(run_id: str, lane: str) -> Path:
    return run_dir(run_id) / "lanes" / lane


def lane_worktree(run_id: str, lane: str) -> Path:
    """The lane's worktree on this worker, or a clear error (retried: another worker may hold it) if it is not."""
    path = lane_worktree_path(run_id, lane)
    if not (path / ".git").exists():
        raise ApplicationError(
            f"lane {lane}'s worktree is not on this worker ({path} is missing). Workers on several machines, or "
            "with several REPOSWARM_HOME folders on one, must all run with REPOSWARM_AFFINITY=host",
            type="LaneWorktreeMissing")
    return path


def open_repo(path: str) -> git.Git:
    """The repository's git on this host (a URL's is this host's clone of it; reposwarm/vcs/remote.py)."""
    return open_repository(path).git


def synced(spec: str, run_id: str, *refs: str) -> Repository:
    """The repository with the run's integration branch and states (and `refs`) as the remote has them.

    Never all lane branches: a lane on this host may have committed and not pushed yet."""
    repo = open_repository(spec)
    repo.fetch(*repo.run_refs(run_id), *refs)
    return repo


@activity.defn
def prepare_run(req: PrepareInput) -> PrepareResult:
    """Resolve the base commit and create the integration branch on it."""
    repo = open_repository(req.repo_path)
    g = repo.git
    base = rev(g, req.base_ref) if repo.url is None else repo.base(req.base_ref)
    if base is None:
        raise ApplicationError(f"base {req.base_ref!r} is not a commit in {req.repo_path}", non_retryable=True)
    branch = integration_branch(req.run_id)
    repo.fetch(f"refs/heads/{branch}", *([f"refs/heads/{req.swarm_branch}"] if req.swarm_branch else []))
    existing = rev(g, f"refs/heads/{branch}")
    if existing is None and req.create_branch:
        if rev(g, f"refs/heads/{req.swarm_branch}") is not None:
            raise ApplicationError(
                f"branch {req.swarm_branch!r} already exists in {req.repo_path}; choose another SWARM_BRANCH",
                non_retryable=True,
            )
        g.branch(branch, base)
    repo.push(f"refs/heads/{branch}")
    ledger.record_activity(req.run_id, "prepare", repo=req.repo_path, base_sha=base, integration_branch=branch)
    queue, shared = _lane_queue()
    return PrepareResult(base_sha=base, integration_branch=branch, lane_queue=queue if shared else "")


@activity.defn
def look_at_base(req: BaseInput) -> BaseMove:
    """Where the run's base branch is now. When it has moved, its head is held under refs/reposwarm/<run>/base
    (never a branch of the user's touched) for the merge, with the commits since the run started and the files
    both the base and the run's change touched."""
    repo = open_repository(req.repo_path)
    g = repo.git
    head = repo.base(req.base_branch)
    if head is None or head == req.start_sha:
        return BaseMove(head_sha=head or "")
    ref = f"refs/reposwarm/{req.run_id}/base"
    g.update_ref(ref, head)
    repo.push(ref)
    commits = int(g.rev_list("--count", f"{req.start_sha}..{head}") or 0)
    theirs = set(g.diff("--name-only", req.start_sha, head).splitlines())
    ours = set(g.diff("--name-only", req.start_sha, req.integration_sha).splitlines())
    ledger.record_activity(req.run_id, "base_moved", branch=req.base_branch, head=head, commits=commits)
    return BaseMove(head_sha=head, ref=ref, commits=commits, files_both=sorted(theirs & ours))


@activity.defn
def create_lane_worktree(task: HelperTask) -> LaneWorktree:
    """Give the lane a worktree on its branch for this assignment.

    If the branch already holds work on top of task.base_sha (a lane resumed
    after continue-as-new, or rebuilt on another host), it is checked out as is.
    Otherwise the branch is set to base_sha; commits of it not already in the
    base are first kept under <branch>-kept-<sha>, so nothing is lost.
    A worktree that exists is recycled (cheaper than remove + add).
    """
    repo = open_repository(task.repo_path)
    g = repo.git
    path = lane_worktree_path(task.run_id, task.lane)
    branch = task.branch
    # On a remote, the lane's branch as its last host pushed it (this host's own is kept when it is ahead)
    repo.fetch(*repo.run_refs(task.run_id), f"refs/heads/{branch}", keep_ahead=(f"refs/heads/{branch}",))
    current = rev(g, f"refs/heads/{branch}")
    kept = []
    if current is not None and is_ancestor(g, task.base_sha, current):
        start = current  # this assignment's own work: keep it
    else:
        if current is not None and not is_ancestor(g, current, task.base_sha):
            g.branch("-f", f"{branch}-kept-{current[:10]}", current)
            kept.append(f"refs/heads/{branch}-kept-{current[:10]}")
        start = task.base_sha
    if (path / ".git").exists() and not healthy_worktree(path):
        # A checkout that died half-way (its activity was killed): nothing of the lane's is only there (its
        # work is in commits), so it is made again.
        shutil.rmtree(path)
    if (path / ".git").exists():
        wt = _git(path)
        on_branch = wt.rev_parse("--abbrev-ref", "HEAD") == branch
        if not (on_branch and rev(wt, "HEAD") == start):
            wt.checkout("-f", "-B", branch, start)
            wt.clean("-fdx")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        cone = _sparse_cone(g, task, start)
        # The branch as it is (a rebuild: it may still be checked out in a lost host's worktree, which -f
        # allows), or set to the start (-B).
        # -f twice: also over a registration an add killed half-way left locked ("initializing")
        target = ["-f", "-f", str(path), branch] if start == current else ["-f", "-f", "-B", branch, str(path), start]
        with worktree_lock(repo.path):  # lanes adding worktrees at once trip over each other's metadata
            add = ["worktree", "add", *(target if cone is None else ["--no-checkout", *target])]
            if try_git(g, *add)[0] != 0:  # a worktree whose folder is gone still registered: forget it, then add;
                mend_worktree_registrations(g)  # and one an add killed half-way left unreadable
                g.worktree("prune")
                g.execute(["git", *add])
        if cone is not None:
            # Only the lane's folders on disk, sharing the object store: a fraction of a full checkout.
            wt = _git(path)
            wt.sparse_checkout("set", "--cone", "--sparse-index", "--", *cone)  # (folders, never options)
            wt.checkout("-f", "-q", branch)
    head = start  # a worktree just added, or a recycled one checked out, is at its start
    repo.push(*kept, f"refs/heads/{branch}")
    # "helper_spawn": the reference design's name for a lane's start, kept in the ledger (metrics read it)
    ledger.record_activity(task.run_id, "helper_spawn" if task.resume is None else "checkpoint_restore",
                           lane=task.lane, round=task.round, branch=branch, base_sha=task.base_sha, head=head,
                           model=task.model)
    queue, shared = _lane_queue()
    return LaneWorktree(path=str(path), branch=branch, head_sha=head, host_queue=queue, shared_queue=shared)


def _shared_queue() -> str:
    """The shared queue this worker serves (a lane worktree is made there; host queues are named after it)."""
    queue = activity.info().task_queue
    return queue.split("-host-")[0]


def _lane_queue() -> tuple[str, bool]:
    """Where this worker serves the lane worktrees it makes, and whether that is the shared queue itself."""
    shared = _shared_queue()
    queue = lane_queue(shared)
    return queue, queue == shared


SPARSE_FROM_FILES = 2_000  # with swarm.sparse unset, lanes go sparse on repositories with more files than this


def _sparse_cone(g: git.Git, task: HelperTask, start: str) -> list[str] | None:
    if task.sparse is False:
        return None
    cone = cone_dirs(task.allowed_paths + task.read_only_paths)
    if cone is None or task.sparse:
        return cone
    return cone if _many_files(str(g.working_dir), start) else None


@functools.lru_cache(maxsize=64)
def _many_files(repo: str, commit: str) -> bool:
    """Whether the commit has more than SPARSE_FROM_FILES files: counted once per commit, not once per lane."""
    files = 0
    for _ in _git(Path(repo)).ls_tree("-r", "--name-only", commit).splitlines():
        files += 1
        if files > SPARSE_FROM_FILES:
            return True
    return False


@activity.defn
def checkpoint_lane(req: CheckpointInput) -> CheckpointResult:
    """Commit the lane's own changes (paths it may write; reposwarm/slices/leftovers.py undoes the rest); a second run
    finds nothing to commit."""
    path = lane_worktree(req.run_id, req.lane)
    wt = _git(path)
    # (an input scheduled before the slice was carried here has none: every path but .git and outward symlinks)
    refused = stage_slice(PathPolicy(path, req.allowed_paths or ["**"], req.read_only_paths))
    status, _, _ = try_git(wt, "diff", "--cached", "--quiet")
    if status == 1:
        wt.execute(["git", *IDENTITY, "commit", "-q", "--no-verify", "-m", inert(req.message)])  # `git log` shows it
    head = wt.rev_parse("HEAD")
    if is_url(req.repo_path):  # on a remote, the checkpoint is where another host can take the lane up from
        open_repository(req.repo_path).push(f"refs/heads/{wt.rev_parse('--abbrev-ref', 'HEAD')}")
    if refused:  # the tools cannot write there, so a check's leftovers: run_checks already reverted and reported
        ledger.record_activity(req.run_id, "slice_refused", lane=req.lane, at="checkpoint",
                               detail="; ".join(refused)[:2000])
    ledger.record_activity(req.run_id, "checkpoint", lane=req.lane, sha=head, refused=refused or None)
    return CheckpointResult(head_sha=head, refused=refused)


@activity.defn
def describe_lane(task: HelperTask) -> LaneDescription:
    """The lane branch's head, its diff stat, and the files it changed since its base (path -> A/M/D)."""
    wt = _git(lane_worktree(task.run_id, task.lane))
    head = wt.rev_parse("HEAD")
    # One diff for both (a git process less a lane): its raw lines (":<modes> <blobs> <status>\t<path>"), then the stat
    files: dict[str, str] = {}
    stat: list[str] = []
    for line in wt.diff("--raw", "--stat", "--no-renames", task.base_sha, head).splitlines():
        if line.startswith(":"):
            fields, _, name = line.partition("\t")
            files[name] = fields.rsplit(" ", 1)[-1][:1]
        else:
            stat.append(line)
    ledger.record_activity(task.run_id, "lane_end", lane=task.lane, round=task.round, dispatch=task.attempt,
                           head=head, files=len(files))
    return LaneDescription(head_sha=head, diff_stat="\n".join(stat), files=files)


_DEFINITION = r"(?:\b(?:def|class|function|func|fn|const|let|var|type|interface|struct|enum)\s+\*?{name}\b|^\s*{name}\s*[:=])"


def contract_symbols(contract: str) -> set[str]:
    """Names an interface contract declares: called names, `quoted` names, and CONSTANTS."""
    names = set(re.findall(r"\b([A-Za-z_][A-Za-z0-9_]*)\s*\(", contract))
    names |= set(re.findall(r"`([A-Za-z_][A-Za-z0-9_]*)`", contract))
    names |= set(re.findall(r"\b([A-Z][A-Z0-9_]{2,})\b", contract))
    return {n for n in names if len(n) > 2}


def contract_flags(g: git.Git, base: str, head: str, lane: str, goal: str, contract: str) -> list[str]:
    """A lane that removes or rewrites the definition of a name the contract declares, unasked by its goal."""
    names = [n for n in contract_symbols(contract) if not re.search(rf"\b{re.escape(n)}\b", goal)]
    if not names:
        return []
    flags = []
    diff = g.diff("--unified=0", "--no-color", base, head)
    path = ""
    removed: dict[tuple[str, str], str] = {}
    added: set[str] = set()
    for line in diff.splitlines():
        if line.startswith("+++ "):
            path = line[6:] if line.startswith("+++ b/") else path
        elif line.startswith("--- a/"):
            path = line[6:]
        elif line.startswith("-") and not line.startswith("---"):
            for name in names:
                if re.search(_DEFINITION.format(name=re.escape(name)), line[1:]):
                    removed[(name, path)] = line[1:].strip()
        elif line.startswith("+") and not line.startswith("+++"):
            added.add(line[1:].strip())
    for (name, file), old in sorted(removed.items()):
        if old not in added:
            flags.append(f"{lane} changed the contract's {name} in {file} (was: {old[:120]})")
    return flags


@activity.defn
def merge_lane(req: MergeInput) -> MergeResult:
    """Three-way merge of a lane branch into the integration branch, without a working tree.

    A textual conflict merges nothing and is reported with its paths; the
    converger (or the lane, redone) settles it, and either side stays intact.
    """
    repo = synced(req.repo_path, req.run_id, req.lane_ref or f"refs/heads/{req.lane_branch}")
    g = repo.git
    integ_ref = f"refs/heads/{req.integration_branch}"
    integ = rev(g, integ_ref)
    lane_head = rev(g, req.lane_ref or f"refs/heads/{req.lane_branch}")
    if integ is None or lane_head is None:
        raise ApplicationError(f"cannot merge {req.lane_branch} into {req.integration_branch}: branch missing",
                               non_retryable=True)
    if is_ancestor(g, lane_head, integ):
        # Nothing new, or merged by an earlier attempt of this activity (which may have died before finishing):
        # then the merge commit is the branch head, and its files and contract flags are worked out again.
        files: list[str] = []
        flags: list[str] = []
        if rev(g, f"{integ}^2") == lane_head:
            base = g.merge_base(f"{integ}^1", lane_head)
            files = g.diff("--name-only", base, lane_head).splitlines()
            flags = contract_flags(g, base, lane_head, req.lane, req.goal, req.interface_contract)
        ledger.record_activity(req.run_id, "merge", lane=req.lane, merged=True, sha=integ, files=files,
                               contract_flags=flags)
        return MergeResult(lane=req.lane, merged=True, integration_sha=integ, lane_sha=lane_head, files=files,
                           contract_flags=flags)
    base = g.merge_base(integ, lane_head)
    files = g.diff("--name-only", base, lane_head).splitlines()
    flags = contract_flags(g, base, lane_head, req.lane, req.goal, req.interface_contract)
    status, out, _ = try_git(g, "merge-tree", "--write-tree", "--name-only", "--no-messages", integ, lane_head)
    lines = out.splitlines()
    if status == 1:
        conflicts = sorted(set(lines[1:]))
        ledger.record_activity(req.run_id, "merge", lane=req.lane, merged=False, conflicts=conflicts)
        return MergeResult(lane=req.lane, merged=False, integration_sha=integ, lane_sha=lane_head,
                           conflicts=conflicts, files=files, contract_flags=flags)
    if status != 0:
        raise ApplicationError(f"git merge-tree failed for lane {req.lane}: {out.strip()[:500]}")
    commit = g.execute(["git", *IDENTITY, "commit-tree", lines[0].strip(), "-p", integ, "-p", lane_head,
                        "-m", inert(req.message)])  # a lane's summary and reasons: inert in `git log`
    g.update_ref(integ_ref, commit, integ)
    repo.push(integ_ref)
    ledger.record_activity(req.run_id, "merge", lane=req.lane, merged=True, sha=commit, files=files,
                           contract_flags=flags)
    return MergeResult(lane=req.lane, merged=True, integration_sha=commit, lane_sha=lane_head, files=files,
                       contract_flags=flags)
