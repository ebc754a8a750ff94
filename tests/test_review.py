"""The human gate and delivery: review rounds that close the loop, refusals, a review timeout, a pull request."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError

from reposwarm.contracts import Phase, ReviewDecision
from reposwarm.runs import ledger
from reposwarm.runs.store import run_dir
from tests.fake_github import FakeGitHub
from tests.fake_models import FakeModelServer
from tests.helpers import HINT_PYTHON, ROOT, finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")
COMMENT = "Also record WHO owns the app in api/owner.py, please."


def one_lane(tmp_path: Path, **extra) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}},
                                                           **extra.pop("swarm", {})}, **extra})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports VERSION.",
                                               "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
    return repo, lanes, plan


def bump() -> list[dict]:
    return [turn(("v1", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                       "reason": "Set VERSION to 2 as the goal says"})), finish("v2", "VERSION is 2")]


async def test_two_review_rounds_carry_the_comment_into_the_next_plan(client, tmp_path, monkeypatch):
    repo, lanes, plan = one_lane(tmp_path)
    round2 = {"interface_contract": "api/owner.py exports OWNER.", "summary": "owner",
              "lanes": [{"lane": "api", "goal": "Add api/owner.py with OWNER."}]}
    script = {"planner": {2: [turn(("p2", "submit_plan", round2))]}, "lanes": {"api": {
        1: bump(),
        2: [turn(("o1", "write_file", {"path": "api/owner.py", "content": "OWNER = 'team'\n",
                                       "reason": "Record the owner, as the reviewer asked"})), finish("o2")]}}}
    with FakeModelServer("openai", script) as fake:
        # the worker in this process reads these when it calls the model, as a real worker would
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-review-test-key-0123456789")
        ns_model = "openai:fake-coder"
        import argparse

        from reposwarm.cli.runs import build_request, start

        req = build_request(argparse.Namespace(repo=str(repo), task="Bump the version", lanes=str(lanes),
                                               plan=str(plan), model=ns_model))
        await start(client, req)
        handle = client.get_workflow_handle_for(SwarmWorkflow.run, req.run_id)
        first = await wait_for_phase(client, req.run_id, Phase.review)
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=False, reviewer="ann"))
        assert "needs a comment" in refused.value.cause.message
        await handle.execute_update(SwarmWorkflow.review,
                                    ReviewDecision(approve=False, comment=COMMENT, reviewer="ann"))
        second = await wait_for_phase(client, req.run_id, Phase.review)
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="bob"))
        result = await handle.result()

    # The second plan demonstrably received the comment, and so did the lane of round 2.
    planner = [r for r in fake.requests if "submit_plan" in r.raw.decode()]
    assert len(planner) == 1 and COMMENT in planner[0].raw.decode()
    round2_lane = [r for r in fake.requests if "Add api/owner.py with OWNER." in r.raw.decode()]
    assert round2_lane and COMMENT in json.dumps(round2_lane[0].body["messages"])
    # The second package shows what changed since the first.
    assert first.review.round == 1 and second.review.round == 2
    assert "api/owner.py" in second.review.since_last_round and "api/app.py" not in second.review.since_last_round
    assert second.review.previous_comments == [COMMENT]
    final = await handle.query(SwarmWorkflow.status)
    assert [(d.reviewer, d.approve, d.round) for d in final.decisions] == [("ann", False, 1), ("bob", True, 2)]
    assert all(d.decided_at for d in final.decisions)
    assert git(repo, "show", f"{result.delivered_branch}:api/owner.py") == "OWNER = 'team'"
    # The package stays readable after the run from the worker host's files (--home), even with Temporal out of reach.
    saved = subprocess.run([sys.executable, str(ROOT / "starter.py"), "review", req.run_id,
                            "--home", os.environ["REPOSWARM_HOME"]], cwd=ROOT,
                           capture_output=True, text=True, timeout=60,
                           env={**os.environ, "TEMPORAL_ADDRESS": "127.0.0.1:1"})
    assert saved.returncode == 0, saved.stderr
    assert saved.stdout.startswith(f"# Review: {req.run_id} (round 2)")
    assert "## What changed since the last round" in saved.stdout


async def test_a_decision_outside_the_review_phase_is_refused(client, tmp_path, temporal_address):
    repo, lanes, plan = one_lane(tmp_path)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: bump()}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
    assert "not waiting for review" in refused.value.cause.message
    await wait_for_phase(client, run_id, Phase.review)
    watched = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(ROOT / "starter.py"), "watch", run_id], cwd=ROOT, capture_output=True,
        text=True, timeout=60, env={**os.environ, "TEMPORAL_ADDRESS": temporal_address})
    assert watched.returncode == 0, watched.stderr
    # not a terminal: one line per change, then the next step
    assert "[review r1] api:merged" in watched.stdout
    assert watched.stdout.strip().splitlines()[-1].startswith(f"waiting for review: {HINT_PYTHON} {ROOT / 'starter.py'} "
                                                              f"review {run_id}, then")
    await handle.terminate("test done")


async def test_no_decision_within_the_review_timeout_expires_the_run_and_keeps_its_branches(client, tmp_path):
    repo, lanes, plan = one_lane(tmp_path, swarm={"review_timeout_s": 1})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: bump()}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    result = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).result()
    assert result.expired and not result.delivered_branch
    status = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
    assert status.phase == Phase.expired
    branches = git(repo, "branch", "--format=%(refname:short)").splitlines()
    assert f"swarm/{run_id}/api" in branches and f"swarm/{run_id}/integration" in branches
    assert git(repo, "show", f"swarm/{run_id}/integration:api/app.py") == "VERSION = 2"


async def test_delivery_pushes_and_opens_a_pull_request(client, tmp_path, monkeypatch, temporal_address):
    github = FakeGitHub()
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    repo, lanes, plan = one_lane(tmp_path, delivery={"remote": "origin", "pull_request": True,
                                                     "github_repo": "acme/taskboard"})
    git(repo, "remote", "add", "origin", str(remote))
    monkeypatch.setenv("GITHUB_TOKEN", github.token)
    monkeypatch.setenv("GITHUB_API_URL", github.url)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: bump()}}})
    try:
        run_id = await start_run(client, repo, lanes, script, plan=plan, task="Bump the version to 2")
        await wait_for_phase(client, run_id, Phase.review)
        handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
        result = await handle.result()
    finally:
        github.close()
    assert result.pull_request_url == "https://github.com/acme/taskboard/pull/1"
    (request,) = github.requests
    assert request["path"] == "/repos/acme/taskboard/pulls"
    assert request["headers"]["x-github-api-version"] == "2022-11-28"
    body = request["body"]
    assert body["head"] == f"swarm/{run_id}" and body["base"] == "main"
    assert body["title"] == "reposwarm: Bump the version to 2"
    assert body["body"].startswith(f"# Review: {run_id} (round 1)") and "Set VERSION to 2" in body["body"]
    # the branch is on the remote
    assert subprocess.run(["git", "-C", str(remote), "rev-parse", f"swarm/{run_id}"], capture_output=True,
                          text=True).stdout.strip() == result.delivered_sha
    # the token is nowhere but the request's header: not in history, ledger, store or review files
    history = await client.get_workflow_handle(run_id).fetch_history()
    assert github.token not in history.to_json()
    for path in run_dir(run_id).rglob("*"):
        if path.is_file():
            assert github.token.encode() not in path.read_bytes()
    assert any(e["event"] == "pull_request" for e in ledger.read(run_id))
    # and `starter.py list` shows the run, delivered
    listed = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(ROOT / "starter.py"), "list", "--repo", str(repo)], cwd=ROOT,
        capture_output=True, text=True, timeout=60, env={**os.environ, "TEMPORAL_ADDRESS": temporal_address})
    assert listed.returncode == 0, listed.stderr
    assert run_id in listed.stdout and "delivered" in listed.stdout
