"""A lane that fails keeps its evidence, and a round where nothing merged cannot be approved."""

from __future__ import annotations

import pytest
from temporalio.client import WorkflowUpdateFailedError

from reposwarm.contracts import LaneStatus, Phase, ReviewDecision
from reposwarm.review.package import render_review, render_status
from reposwarm.runs import ledger
from tests.helpers import make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")


async def test_a_failed_lane_keeps_its_turns_and_a_round_with_nothing_merged_cannot_be_approved(client, tmp_path):
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports VERSION.",
                                               "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
    # Two turns of work, then the model fails for good (the script has no third turn: a permanent error whose
    # message names the script's absolute path on the worker's disk).
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("a1", "read_file", {"path": "api/app.py"}), ("a2", "read_file", {"path": "../outside"})),
        turn(("a3", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                   "reason": "Set VERSION to 2 as the goal says"})),
    ]}}})

    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)

    lane = status.review.lanes[0]
    assert lane.status == LaneStatus.failed
    assert (lane.turns, lane.tool_calls, lane.refusals) == (2, 3, 1)
    assert lane.usage.model_calls == 2 and lane.usage.total_tokens > 0
    assert "no turn 3" in lane.reason and "\n" not in lane.reason
    assert str(tmp_path) not in lane.reason and "Traceback" not in lane.reason
    assert [e.path for e in lane.edits] == ["api/app.py"]  # its checkpointed work is shown, though not merged
    state = next(s for s in status.lanes if s.lane == "api")
    assert (state.turns, state.tool_calls) == (2, 3)
    # the whole error, with its path, is in the ledger for whoever debugs the worker
    errors = [e for e in ledger.read(run_id) if e["event"] == "activity_error"]
    assert any("no turn 3" in e["error"] and "Traceback" in e["traceback"] for e in errors)

    assert status.review.nothing_merged
    assert "Nothing merged" in render_review(status.review)
    assert "nothing merged" in render_status(status)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
    assert "nothing was merged" in refused.value.cause.message
    # a Signal with the same approval is ignored, with the same reason kept for the status
    await handle.signal(SwarmWorkflow.review_signal, ReviewDecision(approve=True, reviewer="ann"))
    after = await handle.query(SwarmWorkflow.status)
    assert after.phase == Phase.review and any("nothing was merged" in s for s in after.ignored_signals)
    await handle.terminate("test over")


async def test_checks_run_unsandboxed_say_so_in_status_review_and_web_ui_details(client, tmp_path, monkeypatch):
    monkeypatch.setenv("REPOSWARM_SANDBOX", "off")  # read by the in-process worker when each check runs
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
        "validation": {"profiles": {"default": {"commands": [["python3", "-c", "import api.app"]]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports VERSION.",
                                               "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("w1", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                   "reason": "Set VERSION to 2 as the goal says"})),
        turn(("f1", "finish", {"summary": "VERSION is 2"}))]}}})

    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)

    assert status.review.test_report.unsandboxed
    assert any("UNSANDBOXED" in w for w in status.warnings)
    assert "UNSANDBOXED" in render_status(status) and "**Warning:** checks ran UNSANDBOXED" in render_review(
        status.review)
    # what the Web UI shows as the run's current details (its "User Metadata" tab)
    metadata = await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata")
    assert "Warning:** checks ran UNSANDBOXED" in str(metadata)
    await client.get_workflow_handle(run_id).terminate("test over")
