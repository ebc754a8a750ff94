"""README promises that no other test checked (issue 21, item 5, part B), each checked for real: the session's dev
server and in-process worker, real git repositories, the replay model, the fake GitHub server, `starter.py gc` as a
user runs it.

- gc keeps work that is on no branch, keeps the worktrees of a run still running, and keeps (without crashing) the
  worktrees of a repository that is gone (README: Deployment and durability, "Cleanup that cannot lose work").
- the gate rolls back to the last green state, which is a later green check when there was one, not the base
  (README: "returns to the last green state").
- `REPOSWARM_CHECK_ENV_PASS` names reach the check commands, in the sandbox; other variables do not (README:
  Environment, Containment).
- `delivery.draft: true` opens the pull request as a draft (README: Delivery).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from reposwarm.contracts import Phase, Plan, ReviewDecision, SwarmStatus
from reposwarm.runs.store import run_dir
from tests.fake_github import FakeGitHub
from tests.helpers import ROOT, finish, git, make_repo, start_run, wait_for_phase, write_yaml
from tests.test_review import bump, one_lane
from tests.test_validation import BREAK, edit, lanes_yaml, plan, repo_with_tests
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")


def gc(temporal_address: str, *args: str, home: Path | None = None) -> str:
    """`starter.py gc` in a process of its own, as a user on the worker host runs it."""
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address}
    if home is not None:
        env["REPOSWARM_HOME"] = str(home)
    out = subprocess.run([sys.executable, str(ROOT / "starter.py"), "gc", *args], cwd=ROOT, capture_output=True,
                         text=True, timeout=60, env=env)
    assert out.returncode == 0, f"gc exited {out.returncode}:\n{out.stdout}\n{out.stderr}"
    return out.stdout


def add_worktree(repo: Path, home: Path, run: str, lane: str, *args: str) -> Path:
    """A linked worktree where a run's lane worktree lives (REPOSWARM_HOME/runs/<run>/lanes/<lane>)."""
    path = home / "runs" / run / "lanes" / lane
    path.parent.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "add", "-q", *args[:-1], str(path), args[-1])
    return path


# --- 1. gc ---


async def test_gc_keeps_a_worktree_whose_commit_is_on_no_branch(temporal_address, tmp_path):
    """Catches gc removing a clean worktree whose HEAD commit no branch or kept ref holds (the `for-each-ref
    --contains` test in reposwarm/vcs/gc.py dropped or widened): that commit would be lost with the worktree.
    The two worktrees beside it (one on a branch, one on a refs/reposwarm ref) are removed, so the test also
    fails if gc stops removing anything in this home."""
    home = tmp_path / "home"
    repo = make_repo(tmp_path / "repo", {"f.txt": "0\n"})
    run = f"reposwarm-repo-{uuid.uuid4().hex[:12]}"  # no such workflow: an ended run, as far as gc can tell
    safe = add_worktree(repo, home, run, "a-safe", "-b", f"swarm/{run}/a-safe", "main")
    (safe / "f.txt").write_text("safe on its branch\n")
    git(safe, "commit", "-q", "-am", "on the lane's branch")
    kept = add_worktree(repo, home, run, "b-kept", "--detach", "main")
    (kept / "f.txt").write_text("kept\n")
    git(kept, "commit", "-q", "-am", "held by a kept ref")
    git(repo, "update-ref", f"refs/reposwarm/{run}/rolled-back/x", git(kept, "rev-parse", "HEAD"))
    orphan = add_worktree(repo, home, run, "c-orphan", "--detach", "main")
    (orphan / "f.txt").write_text("work that is only here\n")
    git(orphan, "commit", "-q", "-am", "on no branch")
    only_here = git(orphan, "rev-parse", "HEAD")
    assert git(repo, "for-each-ref", "--contains", only_here) == ""  # (the premise: nothing else holds it)

    listed = await asyncio.to_thread(gc, temporal_address, home=home)
    assert f"keep   {orphan}: commit {only_here[:12]} is on no branch" in listed
    assert f"remove {safe}: its commits are on swarm/{run}/a-safe" in listed
    assert f"remove {kept}: its commits are on " in listed
    assert "2 of 3 worktrees can go" in listed

    await asyncio.to_thread(gc, temporal_address, "--yes", home=home)
    assert not safe.exists() and not kept.exists()
    assert (orphan / "f.txt").read_text() == "work that is only here\n"
    assert git(orphan, "rev-parse", "HEAD") == only_here
    assert str(orphan) in git(repo, "worktree", "list")


async def test_gc_keeps_a_repository_that_is_gone_and_goes_on(temporal_address, tmp_path):
    """Catches gc crashing (a git error, a traceback, a non-zero exit) or removing anything when a worktree's
    repository has been deleted: it must say `its repository is gone; look before deleting`, keep the
    worktree's files, and still handle the other worktrees (a later one, in a live repository, is removed)."""
    home = tmp_path / "home"
    gone_repo = make_repo(tmp_path / "gone", {"f.txt": "0\n"})
    live_repo = make_repo(tmp_path / "live", {"f.txt": "0\n"})
    run = f"reposwarm-gone-{uuid.uuid4().hex[:12]}"
    gone = add_worktree(gone_repo, home, run, "a-gone", "-b", f"swarm/{run}/a-gone", "main")
    (gone / "f.txt").write_text("committed only in a repository that is no more\n")
    git(gone, "commit", "-q", "-am", "work")
    live = add_worktree(live_repo, home, run, "b-live", "-b", f"swarm/{run}/b-live", "main")
    (live / "f.txt").write_text("safe on its branch\n")
    git(live, "commit", "-q", "-am", "on the lane's branch")
    shutil.rmtree(gone_repo)

    listed = await asyncio.to_thread(gc, temporal_address, home=home)
    assert f"keep   {gone}: its repository is gone; look before deleting" in listed
    assert f"remove {live}: its commits are on swarm/{run}/b-live" in listed

    await asyncio.to_thread(gc, temporal_address, "--yes", home=home)
    assert (gone / "f.txt").read_text() == "committed only in a repository that is no more\n"
    assert (gone / ".git").is_file()
    assert not live.exists()


async def test_gc_leaves_the_worktrees_of_a_running_run_alone(client, temporal_address, tmp_path):
    """Catches gc deciding on a running run's worktrees (the `running` set from Temporal ignored, or the query
    for running runs broken): the lane's worktree is clean and its commits are on its branch, so gc --yes would
    remove it from under the live run. Once the run is terminated the same worktree is listed for removal, which
    shows it was kept for its run alone."""
    repo, lanes, plan_file = one_lane(tmp_path)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: bump()}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan_file)
    await wait_for_phase(client, run_id, Phase.review)
    worktree = run_dir(run_id) / "lanes" / "api"
    assert git(worktree, "status", "--porcelain") == ""  # (the premise: nothing uncommitted keeps it)
    try:
        out = await asyncio.to_thread(gc, temporal_address, "--yes")
        assert f"keep   {worktree}: its run is still running" in out
        assert (worktree / "api" / "app.py").read_text() == "VERSION = 2\n"
    finally:
        await client.get_workflow_handle(run_id).terminate("test done")

    deadline = asyncio.get_running_loop().time() + 30
    expected = f"remove {worktree}: its commits are on swarm/{run_id}/api"
    while expected not in (listed := await asyncio.to_thread(gc, temporal_address)):  # (visibility may lag)
        assert asyncio.get_running_loop().time() < deadline, listed
        await asyncio.sleep(0.5)
    assert worktree.exists()  # listing removes nothing


# --- 2. rollback to a later green state ---


async def _at_round(client, run_id: str, round_no: int, timeout: float = 180) -> SwarmStatus:
    """The run waiting for review of round `round_no` (not still showing the last round's review)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        status = await wait_for_phase(client, run_id, Phase.review, timeout=timeout)
        if status.round == round_no and status.review is not None and status.review.round == round_no:
            return status
        assert asyncio.get_running_loop().time() < deadline, f"round {round_no} never reached review"
        await asyncio.sleep(0.2)


async def test_rollback_goes_to_a_later_green_state_not_the_base(client, tmp_path):
    """Round 1 passes its checks (green, after the base); round 2 breaks mul and its repair does not fix it, so
    after MAX_CONSECUTIVE_TEST_FAILS=2 red checks the gate rolls back. Catches a gate that forgets a green check
    (Gate.last_green not moved on a pass in workflows/validation.py) or a rollback that goes to the base commit
    (rollback_integration given the base): the integration branch would lose round 1's sub()."""
    repo = repo_with_tests(tmp_path)
    base = git(repo, "rev-parse", "HEAD")
    add_sub = edit("s1", "return a * b\n", "return a * b\n\n\ndef sub(a, b):\n    return a - b\n")
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"calc": {
        1: [add_sub, finish("s2", "sub added")],
        2: [BREAK, finish("b2", "mul changed")],
        "2.2": [edit("g1", "return a + b", "return b + a"), finish("g2", "tried something")],
    }}})
    run_id = await start_run(client, repo, lanes_yaml(tmp_path, fails=2, loops=5), script, plan=plan(tmp_path))
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    try:
        first = await _at_round(client, run_id, 1)
        green = first.integration_sha
        assert first.review.test_report.passed, first.review.validations
        assert green != base and "def sub(a, b)" in git(repo, "show", f"{green}:calc/ops.py")
        round2 = Plan(interface_contract="calc.ops keeps add, mul and sub.",
                      lanes=[{"lane": "calc", "goal": "Make mul(a, b) return one more."}])
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(
            approve=False, comment="Now change mul, please.", reviewer="ann", plan=round2))

        second = await _at_round(client, run_id, 2)
        report = second.review.test_report
        assert not report.passed and [f.file for f in report.failures] == ["tests/test_ops.py"]
        assert second.integration_sha == green, (second.integration_sha, green, base, second.review.validations)
        assert git(repo, "rev-parse", f"refs/heads/{second.integration_branch}") == green
        assert f"to the last green state {green[:12]}" in second.review.validations[-1]
        assert git(repo, "show", f"{green}:calc/ops.py").count("+ 1") == 0
        red = git(repo, "for-each-ref", "--format=%(refname)", f"refs/reposwarm/{run_id}/rolled-back/")
        assert red and git(repo, "show", f"{red}:calc/ops.py").count("+ 1") == 1  # the red state is kept
    finally:
        await handle.terminate("test done")


# --- 3. REPOSWARM_CHECK_ENV_PASS ---

CHECK_ENV = """import json, os, sys
seen = {name: os.environ.get(name) for name in ("RS_PASS_ONE", "RS_PASS_TWO", "RS_NOT_PASSED")}
print("seen:", json.dumps(seen, sort_keys=True))
ok = seen == {"RS_PASS_ONE": "first-passed-value", "RS_PASS_TWO": "second-passed-value", "RS_NOT_PASSED": None}
sys.exit(0 if ok else 1)
"""


async def test_check_commands_see_the_passed_variables_and_no_others(client, tmp_path, monkeypatch):
    """The worker's environment holds three variables; REPOSWARM_CHECK_ENV_PASS names two of them (comma-separated,
    with a space). The gate's check commands, in the sandbox, on the base and on the merged tree, see exactly those
    two. Catches the pass list ignored (the check exits 1 on the base: the gate cannot judge it and goes red),
    misparsed, or the sandbox handing the check the worker's whole environment (RS_NOT_PASSED would be there)."""
    monkeypatch.setenv("RS_PASS_ONE", "first-passed-value")
    monkeypatch.setenv("RS_PASS_TWO", "second-passed-value")
    monkeypatch.setenv("RS_NOT_PASSED", "postgres://app:not-for-checks@db/x")
    monkeypatch.setenv("REPOSWARM_CHECK_ENV_PASS", "RS_PASS_ONE, RS_PASS_TWO")
    repo, lanes, plan_file = one_lane(tmp_path, swarm={"max_helper_loops": 1}, validation={"profiles": {"default": {
        "commands": [[sys.executable, "check_env.py"]], "timeout_s": 60}}})
    (repo / "check_env.py").write_text(CHECK_ENV)
    git(repo, "add", "check_env.py")
    git(repo, "commit", "-q", "-m", "an environment check")
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: bump()}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan_file)
    try:
        status = await wait_for_phase(client, run_id, Phase.review)
    finally:
        await client.get_workflow_handle(run_id).terminate("test done")
    report = status.review.test_report
    (command,) = report.commands
    seen = json.loads(command.output_tail.split("seen:", 1)[1].strip().splitlines()[0])
    assert seen == {"RS_PASS_ONE": "first-passed-value", "RS_PASS_TWO": "second-passed-value",
                    "RS_NOT_PASSED": None}, command.output_tail
    assert command.exit_code == 0 and command.sandboxed and not report.unsandboxed
    assert report.passed, (report.problems, report.failures)


# --- 4. a draft pull request ---


async def test_delivery_draft_opens_the_pull_request_as_a_draft(client, tmp_path, monkeypatch):
    """`delivery: {pull_request: true, draft: true}`: the request the (fake) GitHub API receives says draft: true.
    Catches the option dropped between the lanes file and the API call (DeliveryConfig.draft not handed to
    forge.open_pull_request by activities/delivery.py, or not put in the request body): GitHub would open a
    ready-for-review pull request."""
    github = FakeGitHub()
    repo, lanes, plan_file = one_lane(tmp_path, delivery={"pull_request": True, "github_repo": "acme/taskboard",
                                                          "draft": True})
    monkeypatch.setenv("GITHUB_TOKEN", github.token)
    monkeypatch.setenv("GITHUB_API_URL", github.url)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: bump()}}})
    try:
        run_id = await start_run(client, repo, lanes, script, plan=plan_file, task="Bump the version to 2")
        await wait_for_phase(client, run_id, Phase.review)
        handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
        result = await handle.result()
    finally:
        github.close()
    (request,) = github.requests
    assert request["path"] == "/repos/acme/taskboard/pulls"
    assert request["body"]["draft"] is True
    assert request["body"]["head"] == f"swarm/{run_id}" and request["body"]["base"] == "main"
    assert result.pull_request_url == "https://github.com/acme/taskboard/pull/1"
