"""A lane's turns of reads and edits go on in one activity (patch turns-in-activity, activities/model.py _go_on).

What the lane did is what it would have done a turn an activity (turns, calls, edits, the ledger's lines, the
checkpoint), in fewer activities and history events; it stops going on where the workflow has something to
decide (a call that is no quick tool, a finish, its token budget), and never past them.
"""

from __future__ import annotations

import sys
from collections import Counter

import pytest
from temporalio.api.enums.v1 import EventType

from reposwarm.contracts import LaneStatus, Phase
from reposwarm.runs import ledger
from tests.helpers import finish, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")
READS = 6  # quick turns after the first, each one read


async def lane_at_review(client, tmp_path, replies: list, lane: dict, swarm: dict | None = None) -> tuple:
    """Lane api of a run played from `replies` until the run waits for review: its review and the run's id."""
    repo, lanes, plan = lane_files(tmp_path, lane, swarm)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: replies}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).terminate("test done")
    return status.review.lanes[0], run_id


def lane_files(tmp_path, lane: dict, swarm: dict | None = None) -> tuple:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n", "api/util.py": "X = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"], **lane}}, **(swarm or {})},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "pass"]], "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports VERSION.",
                                               "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
    return repo, lanes, plan


async def model_turn_activities(client, workflow_id: str) -> int:
    return await activities_named(client, workflow_id, "model_turn")


async def activities_named(client, workflow_id: str, name: str) -> int:
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    return sum(1 for e in history.events if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
               and e.activity_task_scheduled_event_attributes.activity_type.name == name)


async def test_quick_turns_go_on_in_one_activity_and_count_as_turns(client, tmp_path):
    api, run_id = await lane_at_review(client, tmp_path, [
        turn(("r0", "list_dir", {"path": "api"})),  # the first turn: its activity makes the worktree too
        *(turn((f"r{i}", "read_file", {"path": "api/util.py"})) for i in range(1, READS + 1)),
        turn(("w1", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                   "reason": "Set VERSION to 2 as the goal says"}),
             ("r9", "read_file", {"path": "api/missing.py"})),
        turn(("c1", "run_checks", {})),  # no quick tool: the activity stops before running it
        finish("f1", "VERSION is 2"),
    ], {})
    assert api.status == LaneStatus.done, api.reason
    assert api.turns == READS + 4 and api.tool_calls == READS + 5, (api.turns, api.tool_calls)
    assert api.tool_errors == 1 and api.failed_calls == [
        f"turn {READS + 2} read_file api/missing.py: error: api/missing.py: no such file"], api.failed_calls
    assert [e.path for e in api.edits] == ["api/app.py"]
    # The first turn (its worktree made in its activity, patch worktree-in-turn: it runs its list_dir and goes on),
    # turns 2 to READS + 3 (reads, the write) and the one whose run_checks stopped it, in one; the finish.
    assert await model_turn_activities(client, f"{run_id}.api") == 2
    assert await activities_named(client, f"{run_id}.api", "create_lane_worktree") == 0
    lines = ledger.read(run_id)
    assert [e["lane"] for e in lines if e["event"] == "helper_spawn"] == ["api"]  # the worktree, made once
    calls = Counter(e["call_id"] for e in lines if e["event"] == "model_call" and e.get("agent") == "api")
    assert calls == Counter({f"api-r1-t{t}": 1 for t in range(READS + 4)}), calls
    tools = Counter(e["call_id"] for e in lines if e["event"] == "tool_call" and e.get("lane") == "api")
    assert set(tools) == {"r0", *(f"r{i}" for i in range(1, READS + 1)), "w1", "r9", "c1"}, tools
    assert all(n == 1 for n in tools.values()), tools


async def test_turns_stop_going_on_at_the_token_budget(client, tmp_path):
    """A budget that the next call would exceed stops the activity there: the workflow decides (here it ends the
    lane at its budget, no one to ask), and no call is made past it."""
    api, run_id = await lane_at_review(client, tmp_path, [
        *(turn((f"r{i}", "read_file", {"path": "api/util.py"})) for i in range(20)), finish("f1", "done"),
    ], {"token_budget": 8000, "max_turns": 30}, {"budget_wait_s": 0})
    assert api.status == LaneStatus.budget_exhausted, api.reason
    asked = [e for e in ledger.read(run_id) if e["event"] == "model_call" and e.get("agent") == "api"]
    billed = [e.get("billed_tokens") for e in asked]
    assert len(asked) == api.turns and 2 < api.turns < 20, billed
    assert sum(billed) <= 8000 and api.usage.billed == sum(billed), billed  # no call made past the budget
    assert await model_turn_activities(client, f"{run_id}.api") < api.turns  # and the turns went on by themselves
