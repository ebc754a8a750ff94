"""Where a lane's worktree activities run (REPOSWARM_AFFINITY): on the shared queue, or on the worktree host's own
queue. Either way a reply's quick tool calls are run by its model turn on the lane's host (one activity a step); on
the shared queue, those of the first turn, whose worktree is made beside it, are local activities in the lane's own
workflow task. Each call runs once, is ledgered once and lands in the lane's branch."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType

from reposwarm.client import affinity
from reposwarm.contracts import LaneStatus, Phase
from reposwarm.runs import ledger
from tests.helpers import ROOT, WorkerProcess, finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml

ET = EventType


@pytest.mark.parametrize(("env", "target", "expected"), [
    ({}, "localhost:7233", "shared"),
    ({}, "127.0.0.1:7233", "shared"),
    ({}, "[::1]:7233", "shared"),
    ({}, "temporal.internal:7233", "host"),
    ({}, "10.0.0.5:7233", "host"),
    ({"REPOSWARM_HOST_ID": "box-1"}, "localhost:7233", "host"),  # naming hosts means there are several
    ({"REPOSWARM_AFFINITY": "host"}, "localhost:7233", "host"),
    ({"REPOSWARM_AFFINITY": "Shared"}, "temporal.internal:7233", "shared"),
])
def test_affinity_follows_the_setting_and_the_server(monkeypatch, env, target, expected):
    monkeypatch.delenv("REPOSWARM_AFFINITY", raising=False)
    monkeypatch.delenv("REPOSWARM_HOST_ID", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert affinity(target) == expected


def test_a_bad_affinity_is_named_and_the_worker_does_not_start(monkeypatch, temporal_address, tmp_path):
    monkeypatch.setenv("REPOSWARM_AFFINITY", "nearby")
    with pytest.raises(ValueError, match="REPOSWARM_AFFINITY must be host, shared or auto, not 'nearby'"):
        affinity("localhost:7233")
    proc = subprocess.run([sys.executable, str(ROOT / "worker.py")], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, env={"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": temporal_address,
                                           "REPOSWARM_HOME": str(tmp_path), "REPOSWARM_AFFINITY": "nearby"})
    assert proc.returncode != 0
    assert "REPOSWARM_AFFINITY must be host, shared or auto, not 'nearby'" in proc.stderr
    assert "Traceback" not in proc.stderr


def _run_files(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"src/a.py": "A = 1\n", "src/b.py": "B = 1\n", "README.md": "r\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"src": {"allowed_paths": ["src/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "print('ok')"]],
                                                "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-",
                                               "lanes": [{"lane": "src", "goal": "Set A and B to 2."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"src": {1: [
        turn(("r1", "read_file", {"path": "src/a.py"}), ("l1", "list_dir", {"path": "src"})),
        turn(("w1", "write_file", {"path": "src/a.py", "content": "A = 2\n", "reason": "A is 2 now"}),
             ("e1", "edit_file", {"path": "src/b.py", "old": "B = 1", "new": "B = 2", "reason": "B is 2 now"})),
        turn(("s1", "search", {"pattern": "B = 2"}), ("c1", "run_checks", {})),
        finish("f1")]}}})
    return repo, lanes, plan, script


async def _lane_history(client, run_id: str) -> tuple[list[str], list[str], int]:
    """The lane's activity types and their task queues, and how many local activities it recorded."""
    history = await client.get_workflow_handle(f"{run_id}.src").fetch_history()
    scheduled = [e.activity_task_scheduled_event_attributes for e in history.events
                 if e.event_type == ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED]
    markers = sum(e.event_type == ET.EVENT_TYPE_MARKER_RECORDED
                  and e.marker_recorded_event_attributes.marker_name == "core_local_activity" for e in history.events)
    return [a.activity_type.name for a in scheduled], [a.task_queue.name for a in scheduled], markers


def _check_delivered_work(repo: Path, run_id: str, status) -> None:
    lane = status.review.lanes[0]
    assert lane.status == LaneStatus.done, lane.reason
    assert git(repo, "show", f"{status.review.integration_sha}:src/a.py") == "A = 2"
    assert git(repo, "show", f"{status.review.integration_sha}:src/b.py") == "B = 2"
    calls = [e for e in ledger.read(run_id) if e["event"] == "tool_call"]
    assert sorted(e["call_id"] for e in calls) == ["c1", "e1", "l1", "r1", "s1", "w1"]  # each once
    assert all(e["outcome"] == "ok" for e in calls), [e for e in calls if e["outcome"] != "ok"]


@pytest.mark.usefixtures("worker")
async def test_on_the_shared_queue_quick_tools_are_local_activities(client, tmp_path):
    repo, lanes, plan, script = _run_files(tmp_path)
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    _check_delivered_work(repo, run_id, status)
    types, queues, markers = await _lane_history(client, run_id)
    # the first turn made the worktree in its activity (patch worktree-in-turn) and ran its read_file and
    # list_dir there, then went on to the second turn's write_file and edit_file and the third (turns-in-activity);
    # search and run_checks can take long, so they stay activities; then the finish's turn; the lane's end
    # describes its branch in a local activity (describe-local); and everything is on the workflow's own queue
    # (eager dispatch)
    assert markers == 1 and "create_lane_worktree" not in types, types
    assert types.count("run_tool") == 2 and types.count("model_turn") == 2
    assert set(queues) == {"reposwarm"}, queues
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_with_host_affinity_every_tool_call_goes_to_the_worktree_host(client, temporal_address, tmp_path,
                                                                             monkeypatch):
    queue = f"hostq-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    home = tmp_path / "home"
    worker = WorkerProcess(temporal_address, queue, home, env={"REPOSWARM_AFFINITY": "host",
                                                               "REPOSWARM_HOST_ID": "box-1"}).start()
    try:
        await worker.ready()
        assert "lane worktrees on the host queue" in worker.log.read_text()
        repo, lanes, plan, script = _run_files(tmp_path)
        run_id = await start_run(client, repo, lanes, script, plan=plan)
        status = await wait_for_phase(client, run_id, Phase.review)
        # the worker process has its own REPOSWARM_HOME: its ledger is there
        monkeypatch.setenv("REPOSWARM_HOME", str(home))
        _check_delivered_work(repo, run_id, status)
        types, queues, markers = await _lane_history(client, run_id)
        assert markers == 0
        # the quick calls ran in their model turns, on the host, the first turn going on to the second and third
        # (the worktree made first); search and run_checks as activities there; then the finish's turn
        assert types.count("run_tool") == 2 and types.count("model_turn") == 2
        host = f"{queue}-host-box-1"
        assert queues[0] == queue  # the worktree is made by whichever worker takes it from the shared queue
        assert set(queues[1:]) == {host}, queues  # then everything goes to that host
        await client.get_workflow_handle(run_id).terminate("test done")
    finally:
        worker.stop()
        print(json.dumps({"worker_log": worker.log.read_text()[-2000:]}))


async def test_a_worker_without_the_lane_worktree_says_which_setting_is_wrong(reposwarm_home):
    """Workers with separate REPOSWARM_HOME folders on the shared queue (the mistake `auto` cannot see): each
    lane activity that lands on a worker without the worktree fails, retryably, saying so and what to set."""
    from temporalio.exceptions import ApplicationError
    from temporalio.testing import ActivityEnvironment

    from activities.model import model_turn
    from activities.repo import checkpoint_lane, describe_lane
    from activities.tool_call import run_tool
    from reposwarm.contracts import CheckpointInput, HelperTask, ModelTurnInput, ToolCall, ToolInput

    run_id = f"elsewhere-{uuid.uuid4().hex[:8]}"
    env = ActivityEnvironment()
    calls = [
        lambda: env.run(run_tool, ToolInput(run_id=run_id, lane="api", call=ToolCall(id="c1", name="list_dir",
                                                                                        arguments={"path": "."}),
                                            allowed_paths=["api/"])),
        lambda: env.run(checkpoint_lane, CheckpointInput(run_id=run_id, lane="api", message="m")),
        lambda: env.run(describe_lane, HelperTask.model_validate({
            "run_id": run_id, "task_id": "t", "lane": "api", "round": 1, "goal": "g", "repo_path": "/nowhere",
            "base_sha": "0" * 40, "branch": "b", "model": "replay:x", "role": {"allowed_paths": ["api/"]},
            "task": "t", "interface_contract": "-", "allowed_paths": ["api/"], "max_loops": 1,
            "checkpoint_key": "k"})),
        lambda: env.run(model_turn, ModelTurnInput(run_id=run_id, agent="api", round=1, turn=1, model="replay:x",
                                                   transcript_ref="missing", new_messages=[])),
    ]
    for call in calls:
        with pytest.raises(ApplicationError) as caught:
            result = call()
            if hasattr(result, "__await__"):
                await result
        assert caught.value.type == "LaneWorktreeMissing" and not caught.value.non_retryable
        assert "lane api's worktree is not on this worker" in str(caught.value)
        assert "REPOSWARM_AFFINITY=host" in str(caught.value)
