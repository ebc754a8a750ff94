"""A lane's account of itself: the calls that failed, a summary its own checks contradict, and what it is doing now."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.service import RPCError

from reposwarm.cli.worker import make_worker
from reposwarm.contracts import LaneReview, LaneState, LaneStatus, Phase, ReviewPackage
from reposwarm.review.package import render_review
from reposwarm.runs.store import run_dir
from tests.helpers import finish, make_repo, start_dev_server, start_run, turn, wait_for_phase, write_yaml
from workflows.lane import CHECKS_FLAG, LaneWorkflow
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")
# A check failing while api/app.py says BROKEN: the base commit passes it, so a lane's failure of it is new.
BROKEN_FAILS = "import sys; sys.exit('BROKEN' in open('api/app.py').read())"


def one_lane(tmp_path: Path, check: str) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", check]], "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports VERSION.",
                                               "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
    return repo, lanes, plan


async def test_failed_calls_and_a_summary_its_checks_contradict_reach_the_review(client, tmp_path):
    repo, lanes, plan = one_lane(tmp_path, BROKEN_FAILS)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("e1", "edit_file", {"path": "api/app.py", "old": "VERSION = 7", "new": "VERSION = 2",
                                  "reason": "Set VERSION to 2 as the goal says"})),
        turn(("w1", "write_file", {"path": "api/app.py", "content": "VERSION = 'BROKEN'\n",
                                   "reason": "A first try at the new version"}),
             ("c1", "run_checks", {})),
        # mended after the failing check, but never checked again
        turn(("w2", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                   "reason": "Set VERSION to 2 as the goal says"})),
        finish("f1", "VERSION is 2; all tests pass"),
    ]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).terminate("test done")

    api = status.review.lanes[0]
    assert api.status == LaneStatus.done, api.reason
    assert api.tool_calls == 5 and api.refusals == 0
    assert api.tool_errors == 1
    assert len(api.failed_calls) == 1
    assert api.failed_calls[0].startswith("turn 1 edit_file api/app.py: error: api/app.py: `old` occurs 0 times")
    assert api.flags == [CHECKS_FLAG]
    # the --json package holds it all; the Markdown says it
    folder = run_dir(run_id) / "review"
    saved = ReviewPackage.model_validate(json.loads((folder / "latest.json").read_text()))
    assert saved.lanes[0].failed_calls == api.failed_calls and saved.lanes[0].flags == api.flags
    markdown = (folder / "latest.md").read_text()
    assert "5 tool calls, 0 refused, 1 failed" in markdown
    assert "  - turn 1 edit_file api/app.py: error:" in markdown
    assert f"**Flag:** {CHECKS_FLAG}" in markdown


async def test_a_summary_after_checks_that_passed_at_last_is_not_flagged(client, tmp_path):
    repo, lanes, plan = one_lane(tmp_path, BROKEN_FAILS)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("w1", "write_file", {"path": "api/app.py", "content": "VERSION = 'BROKEN'\n",
                                   "reason": "A first try at the new version"}),
             ("c1", "run_checks", {}), ("r1", "read_file", {"path": "api/nowhere.py"})),
        turn(("w2", "write_file", {"path": "web/app.py", "content": "x\n", "reason": "Outside the lane's slice"})),
        turn(("w3", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                   "reason": "Set VERSION to 2 as the goal says"}), ("c2", "run_checks", {})),
        finish("f1", "VERSION is 2; all tests pass"),
    ]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).terminate("test done")
    api = status.review.lanes[0]
    assert api.status == LaneStatus.done, api.reason
    assert api.flags == []
    assert (api.tool_errors, api.refusals) == (1, 1)
    assert [line.split(":")[0] for line in api.failed_calls] == ["turn 1 read_file api/nowhere.py",
                                                                 "turn 2 write_file web/app.py"]
    assert "refused" in api.failed_calls[1]


def test_the_markdown_lists_a_few_failed_calls_and_counts_the_rest():
    lines = [f"turn {i} edit_file api/app.py: error: no match" for i in range(1, 51)] + ["... and 7 more"]
    lane = LaneReview(lane="api", goal="g", status=LaneStatus.done, tool_calls=60, refusals=2, tool_errors=55,
                      failed_calls=lines)
    package = ReviewPackage.model_validate({
        "run_id": "r", "round": 1, "task": "t", "repo_path": "/r", "base_sha": "0" * 40, "integration_sha": "1" * 40,
        "plan": {"interface_contract": "-", "lanes": [{"lane": "api", "goal": "g"}]}, "lanes": [lane.model_dump()]})
    markdown = render_review(package)
    assert "60 tool calls, 2 refused, 55 failed" in markdown
    assert "  - turn 10 edit_file" in markdown and "turn 11 edit_file" not in markdown
    assert "  - ... 47 more" in markdown
    assert "**Flag:**" not in markdown


async def test_the_progress_query_says_what_the_lane_is_doing(client, tmp_path):
    repo, lanes, plan = one_lane(tmp_path, "import time; time.sleep(3)")
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("c1", "run_checks", {})), finish("f1", "checked")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    lane = client.get_workflow_handle_for(LaneWorkflow.run, f"{run_id}.api")
    seen: list[LaneState] = []
    for _ in range(150):
        try:
            seen.append(await lane.query(LaneWorkflow.progress))
        except RPCError:  # the lane has not started yet
            pass
        if seen and seen[-1].step == "run_checks":
            break
        await asyncio.sleep(0.1)
    assert seen and seen[-1].step == "run_checks", [s.step for s in seen]
    state = seen[-1]
    assert state.step_since is not None and time.time() - 60 < state.step_since <= time.time()
    assert state.turns == 1
    await wait_for_phase(client, run_id, Phase.review)
    ended = await lane.query(LaneWorkflow.progress)
    assert ended.step == "" and ended.step_since is None
    await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).terminate("test done")


@pytest_asyncio.fixture(scope="module")
async def suggesting_client(reposwarm_home):
    """A dev server of its own that suggests continue-as-new after 30 events, so a short lane continues."""
    env = await start_dev_server(["--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=30"])
    async with make_worker(env.client):
        yield env.client
    await env.shutdown()


async def test_the_account_survives_continue_as_new(suggesting_client, tmp_path):
    client = suggesting_client
    repo, lanes, plan = one_lane(tmp_path, BROKEN_FAILS)
    # 160 failed reads, five a turn: the turn runs them itself and goes on to the next (one activity for up to 16
    # turns), so it takes activities, not turns or calls, to reach the 30 events after which the server suggests
    # continuing as new; budgets that last them
    write_yaml(lanes, {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"], "max_turns": 60,
                                                   "token_budget": 50_000_000}}},
                       "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", BROKEN_FAILS]],
                                                               "timeout_s": 60}}}})
    misses = [turn(*[(f"m{t}_{i}", "read_file", {"path": f"api/missing{i}.py"}) for i in range(5)])
              for t in range(32)]
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("w1", "write_file", {"path": "api/app.py", "content": "VERSION = 'BROKEN'\n",
                                   "reason": "A first try at the new version"}), ("c1", "run_checks", {})),
        *misses,
        turn(("w2", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                   "reason": "Set VERSION to 2 as the goal says"})),
        finish("f1", "VERSION is 2, tests passing"),
    ]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=300)
    await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).terminate("test done")
    executions = [w async for w in client.list_workflows(f"WorkflowId = '{run_id}.api'")]
    assert len(executions) > 1, "the lane never continued as new"
    api = status.review.lanes[0]
    assert api.status == LaneStatus.done, api.reason
    assert api.tool_errors == 160 and api.refusals == 0
    assert len(api.failed_calls) == 51 and api.failed_calls[-1] == "... and 110 more"
    assert api.failed_calls[0] == "turn 2 read_file api/missing0.py: error: api/missing0.py: no such file"
    assert api.flags == [CHECKS_FLAG]
