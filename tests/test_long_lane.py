"""A lane of 1,000 tool calls: history stays bounded (continue-as-new, claim checks, compaction)."""

from __future__ import annotations

import asyncio
import json

import pytest_asyncio

from reposwarm.cli.worker import make_worker
from reposwarm.contracts import LaneStatus, Phase
from reposwarm.runs.store import run_dir
from tests.helpers import finish, git, make_repo, start_dev_server, start_run, turn, wait_for_phase, write_yaml

TOOL_CALLS = 1000
PER_TURN = 8  # (a turn runs its reads itself, and goes on to the next turn: one activity for up to 16 turns)


@pytest_asyncio.fixture(scope="module")
async def suggesting_client(reposwarm_home):
    """A dev server of its own that suggests continue-as-new after 20 events, as a long run would hit at 4K+ (a
    lane's activity runs up to 16 turns of reads: its 125 turns take a few dozen events)."""
    env = await start_dev_server(["--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=20"])
    async with make_worker(env.client):
        yield env.client
    await env.shutdown()


async def test_a_lane_of_1000_tool_calls_keeps_history_bounded(suggesting_client, tmp_path):
    client = suggesting_client
    repo = make_repo(tmp_path / "repo", {f"src/f{i}.py": f"X{i} = {i}\n" for i in range(PER_TURN)})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"src": {
        "allowed_paths": ["src/"], "token_budget": 50_000_000, "max_turns": 200, "context_tokens": 4000}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-",
                                               "lanes": [{"lane": "src", "goal": "Read everything, many times."}]})
    turns = [turn(*[(f"c{t}_{i}", "read_file", {"path": f"src/f{i}.py"}) for i in range(PER_TURN)])
             for t in range(TOOL_CALLS // PER_TURN - 1)]
    turns.append(turn(*[(f"c_last_{i}", "list_dir", {"path": "src"}) for i in range(PER_TURN - 1)],
                      ("w", "write_file", {"path": "src/done.txt", "content": "read it all\n",
                                           "reason": "Mark the long read as done"})))
    turns.append(finish("end", "read everything"))
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"src": {1: turns}}})

    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=600)
    lane = status.review.lanes[0]
    assert lane.status == LaneStatus.done, lane.reason
    assert lane.tool_calls == TOOL_CALLS + 1  # and the finish call
    assert [e.path for e in lane.edits] == ["src/done.txt"]

    executions = [w async for w in client.list_workflows(f"WorkflowId STARTS_WITH '{run_id}'")]
    lane_runs = [w for w in executions if w.workflow_type == "LaneWorkflow"]
    assert len(lane_runs) > 2, "the lane never continued as new"
    biggest_history, biggest_event = 0, 0
    for w in executions:
        history = await client.get_workflow_handle(w.id, run_id=w.run_id).fetch_history()
        biggest_history = max(biggest_history, len(history.events))
        biggest_event = max(biggest_event, *(e.ByteSize() for e in history.events))
    assert biggest_history < 10_240
    assert biggest_event < 256 * 1024  # so no payload in any event comes near it
    # The transcript was compacted: no stored transcript grew far past the lane's context size.
    transcripts = []
    for blob in (run_dir(run_id) / "store").rglob("*"):
        try:
            data = json.loads(blob.read_bytes()) if blob.is_file() else None
        except ValueError:
            continue
        if isinstance(data, list):
            transcripts.append(len(blob.read_bytes()))
    assert transcripts and max(transcripts) < 4000 * 4 * 2
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_a_long_review_loop_continues_as_new_carrying_its_state(suggesting_client, tmp_path):
    from reposwarm.contracts import ReviewDecision
    from workflows.swarm import SwarmWorkflow

    client = suggesting_client
    names = [f"l{i}" for i in range(12)]
    repo = make_repo(tmp_path / "repo", {f"{n}/x.txt": "0\n" for n in names})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_parallel": 12, "max_helper_loops": 5, "lanes": {n: {"allowed_paths": [f"{n}/"]} for n in names}},
        "validation": {"profiles": {"default": {"commands": [["python3", "-c", "pass"]]}}}})
    plan = {"interface_contract": "-", "lanes": [{"lane": n, "goal": f"Bump {n}."} for n in names]}
    plan_file = write_yaml(tmp_path / "plan.yaml", plan)

    def bump(n: str, v: int) -> list[dict]:
        return [turn((f"{n}w{v}", "write_file", {"path": f"{n}/x.txt", "content": f"{v}\n",
                                                  "reason": f"Bump {n} to {v}, as planned"})), finish(f"{n}f{v}")]

    script = write_yaml(tmp_path / "replay.yaml", {"version": 1,
        "planner": {r: {"content": json.dumps(plan)} for r in (2, 3)},
        "lanes": {n: {r: bump(n, r) for r in (1, 2, 3)} for n in names}})
    run_id = await start_run(client, repo, lanes, script, plan=plan_file)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    for round_no, comment in ((1, "again, please"), (2, "once more")):
        status = await wait_for_phase(client, run_id, Phase.review, timeout=120)
        assert status.round == round_no
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=False, comment=comment))
        await asyncio.sleep(0.5)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=120)
    assert status.round == 3 and status.review.previous_comments == ["again, please", "once more"]
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
    result = await handle.result()
    assert result.rounds == 3
    runs = [w async for w in client.list_workflows(f"WorkflowId = '{run_id}'")]
    assert len(runs) >= 2, "the swarm never continued as new"
    final = await handle.query(SwarmWorkflow.status)
    assert [d.comment for d in final.decisions] == ["again, please", "once more", ""]
    assert all(git(repo, "show", f"{result.delivered_branch}:{n}/x.txt") == "3" for n in names)
