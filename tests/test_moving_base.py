"""A base that moves during the run (issue 19): the team commits to main while the lanes work.

The run merges main's new commits into its integration branch before the review (and again before delivery),
checks the refreshed tree, says so in the review package, and delivers on top of the latest main; with
`pin_base` it keeps the commit it started from.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from reposwarm.contracts import Phase, ReviewDecision
from reposwarm.runs import ledger
from tests.helpers import finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")

CHECK = "import api.app, api.util"


def setup(tmp_path: Path, *, pin: bool = False) -> tuple[Path, Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"api/__init__.py": "", "api/app.py": "VERSION = 1\n",
                                         "api/util.py": "def helper():\n    return 1\n", "README.md": "x\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"pin_base": pin, "lanes": {"api": {"allowed_paths": ["api/"]}}},
        "validation": {"profiles": {
            "default": {"commands": [[sys.executable, "-c", CHECK]], "timeout_s": 60},
            "slow": {"commands": [[sys.executable, "-c", "import time; time.sleep(4)"]], "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports NAME.",
                                               "lanes": [{"lane": "api", "goal": "Add NAME to api/app.py."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n", "new": "VERSION = 1\nNAME = 'swarm'\n",
                                  "reason": "Add NAME as the contract says"})),
        turn(("a2", "run_checks", {"profile": "slow"})),  # the lane works a while: the team commits meanwhile
        finish("a3", "added NAME")]}}})
    return repo, lanes, plan, script


def team_commit(repo: Path, path: str, text: str, message: str) -> str:
    (repo / path).write_text(text)
    git(repo, "add", path)
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


async def test_commits_on_main_during_the_run_are_in_the_delivered_branch(client, tmp_path):
    repo, lanes, plan, script = setup(tmp_path)
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.running_lanes)
    await asyncio.sleep(1)
    # A teammate changes the file the lane edits (another part of it) and another one, on main.
    first = team_commit(repo, "api/app.py", "# owned by the api team\nVERSION = 1\n", "team: header")
    status = await wait_for_phase(client, run_id, Phase.review)
    package = status.review
    assert package.base_moved.startswith("the base main moved by 1 commit(s) since the run started; refreshed at "
                                         f"{first[:12]}"), package.base_moved
    assert "files both touched: api/app.py" in package.base_moved
    assert package.test_report is not None and package.test_report.passed
    assert git(repo, "merge-base", "--is-ancestor", first, package.integration_sha) == ""

    # main moves again after the review: the delivery refreshes once more and checks before delivering.
    second = team_commit(repo, "api/util.py", "def helper():\n    return 2\n", "team: helper returns 2")
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
    result = await handle.result()
    delivered = result.delivered_branch
    assert subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", second, delivered]).returncode == 0
    assert git(repo, "show", f"{delivered}:api/app.py") == "# owned by the api team\nVERSION = 1\nNAME = 'swarm'"
    assert git(repo, "show", f"{delivered}:api/util.py") == "def helper():\n    return 2"
    final = await handle.query(SwarmWorkflow.status)
    assert "moved by 2 commit(s)" in final.base_moved and second[:12] in final.base_moved
    checkout = tmp_path / "checkout"
    git(repo, "worktree", "add", "-q", str(checkout), delivered)
    assert subprocess.run([sys.executable, "-c", CHECK], cwd=checkout).returncode == 0  # the repo's check, green
    assert git(repo, "rev-parse", "main") == second  # the user's main: untouched by the run


async def test_a_pinned_base_stays_where_the_run_started(client, tmp_path):
    repo, lanes, plan, script = setup(tmp_path, pin=True)
    start = git(repo, "rev-parse", "HEAD")
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.running_lanes)
    moved = team_commit(repo, "README.md", "moved\n", "team: readme")
    status = await wait_for_phase(client, run_id, Phase.review)
    assert status.review.base_moved == ""
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
    result = await handle.result()
    assert git(repo, "merge-base", result.delivered_branch, "main") == start
    assert subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", moved,
                           result.delivered_branch]).returncode == 1


async def test_a_base_that_conflicts_goes_to_the_converger_with_the_base_side_respected(client, tmp_path):
    """The team changes the very line the lane changes: the converger is asked (its prompt names the base's new
    commits as the side to respect: workflows/moving_base.py BASE_GOAL), and its resolution lands on the integration
    branch before the review, checked."""
    repo, lanes, plan, _ = setup(tmp_path)
    resolve = {"tool_calls": [{"id": "r1", "name": "resolve", "arguments": {
        "files": [{"path": "api/app.py", "content": "VERSION = 2\nNAME = 'swarm'\n"}],
        "explanation": "kept the team's VERSION 2 and the lane's NAME"}}]}
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "converger": {1: [resolve]}, "lanes": {"api": {1: [
        turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n", "new": "VERSION = 1\nNAME = 'swarm'\n",
                                  "reason": "Add NAME as the contract says"})),
        turn(("a2", "run_checks", {"profile": "slow"})),
        finish("a3", "added NAME")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.running_lanes)
    await asyncio.sleep(1)
    team = team_commit(repo, "api/app.py", "VERSION = 2\n", "team: version 2")
    status = await wait_for_phase(client, run_id, Phase.review)
    assert "refreshed at" in status.review.base_moved, status.review.base_moved
    assert any(r.startswith("base main: api/app.py: kept the team's VERSION 2") for r in status.review.resolutions)
    assert git(repo, "show", f"{status.integration_sha}:api/app.py") == "VERSION = 2\nNAME = 'swarm'"
    assert git(repo, "merge-base", "--is-ancestor", team, status.integration_sha) == ""
    assert status.review.test_report is not None and status.review.test_report.passed
    asked = [e for e in ledger.read(run_id) if e["event"] == "model_call" and e.get("agent") == "converger"]
    assert len(asked) == 1 and asked[0]["outcome"] == "ok"  # asked once, answered
    await client.get_workflow_handle(run_id).terminate("test done")
