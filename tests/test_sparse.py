"""Sparse lane worktrees: only the lane's folders on disk, the whole tree in every commit."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.repo import create_lane_worktree
from reposwarm.agent.tools import ReadFileArgs, Toolbox
from reposwarm.contracts import HelperRole, HelperTask, Phase, ReviewDecision
from reposwarm.runs.store import run_dir
from reposwarm.slices.policy import PathPolicy
from tests.helpers import finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

FILES = {"a/one.txt": "1\n", "b/two.txt": "2\n", "c/three.txt": "3\n", "README.md": "root\n"}


@pytest.mark.usefixtures("worker")
async def test_a_sparse_lane_checks_out_its_slice_and_delivers_the_whole_tree(client, tmp_path):
    repo = make_repo(tmp_path / "repo", FILES)
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"sparse": True, "lanes": {
        "a": {"allowed_paths": ["a/"], "read_only_paths": ["b/"]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [{"lane": "a", "goal": "Edit a."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"a": {1: [
        turn(("s1", "read_file", {"path": "b/two.txt"})),
        turn(("s2", "write_file", {"path": "a/one.txt", "content": "one\n", "reason": "Spell the number out"})),
        finish("s3")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.review)
    worktree = run_dir(run_id) / "lanes" / "a"
    on_disk = sorted(p.relative_to(worktree).as_posix() for p in worktree.rglob("*") if p.is_file()
                     and ".git" not in p.parts)
    assert on_disk == ["README.md", "a/one.txt", "b/two.txt"]  # no c/: not the lane's
    assert git(worktree, "sparse-checkout", "list").splitlines() == ["a", "b"]
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
    result = await handle.result()
    delivered = git(repo, "ls-tree", "-r", "--name-only", result.delivered_branch).splitlines()
    assert delivered == ["README.md", "a/one.txt", "b/two.txt", "c/three.txt"]
    assert git(repo, "show", f"{result.delivered_branch}:a/one.txt") == "one"


def test_a_readable_file_outside_the_checkout_is_read_from_git(tmp_path):
    repo = make_repo(tmp_path / "repo", FILES)
    wt = tmp_path / "wt"
    git(repo, "worktree", "add", "-q", "--no-checkout", str(wt), "HEAD")
    git(wt, "sparse-checkout", "set", "--cone", "--sparse-index", "a")
    git(wt, "checkout", "-q", "-f")
    assert not (wt / "c" / "three.txt").exists()
    tools = Toolbox(PathPolicy(wt, ["a/"], ["c/"]))
    assert tools.read_file(ReadFileArgs(path="c/three.txt")).endswith("3\n")


@pytest.mark.parametrize("sparse", [True, False])
def test_a_lane_worktree_is_made_again_where_a_killed_add_left_it_locked(tmp_path, monkeypatch, sparse):
    """A worker killed during `git worktree add` leaves the folder half made and its registration locked
    ("initializing"); the lane's next attempt adds the worktree over it rather than fail at every retry."""
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    repo = make_repo(tmp_path / "repo", {"api/app.py": "X = 1\n", "docs/index.md": "# Docs\n"})
    task = HelperTask(task_id="sparse-locked.api.r1", run_id="sparse-locked", repo_path=str(repo), lane="api",
                      round=1, role=HelperRole(allowed_paths=["api/"]), goal="g", task="t", interface_contract="",
                      allowed_paths=["api/"], branch="swarm/sparse-locked/api", base_sha=git(repo, "rev-parse", "HEAD"),
                      model="openai:any", max_loops=1, checkpoint_key="k", sparse=sparse)
    path = Path(ActivityEnvironment().run(create_lane_worktree, task).path)
    git(repo, "worktree", "lock", "--reason", "initializing", str(path))
    shutil.rmtree(path)
    made = ActivityEnvironment().run(create_lane_worktree, task)
    assert made.path == str(path) and (path / "api" / "app.py").read_text() == "X = 1\n"
    assert (path / "docs" / "index.md").exists() is not sparse
    # killed while an add of another worktree wrote its registration: `commondir` empty, which fails every
    # later add of the repository, this lane's too
    other = tmp_path / "other"
    git(repo, "worktree", "add", "-q", "--detach", str(other), "HEAD")
    registration = Path(git(other, "rev-parse", "--absolute-git-dir"))
    (registration / "commondir").write_text("")
    shutil.rmtree(path)
    again = ActivityEnvironment().run(create_lane_worktree, task)
    assert again.path == str(path) and (path / "api" / "app.py").read_text() == "X = 1\n"
