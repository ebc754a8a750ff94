"""Warm lanes (issue 19): a lane is one workflow for the whole run. A repair after a red check and the next round's
goal after a rejection reach it as its next assignment, and it goes on with its conversation: the model is sent
what the lane said and saw before. With `warm_lanes: false`, each dispatch starts cold, as a fresh lane.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.api.enums.v1 import EventType
from temporalio.service import RPCError

from reposwarm.cli.runs import build_request, start
from reposwarm.cli.worker import make_worker
from reposwarm.contracts import LanePhase, LaneStatus, Phase, Plan, ReviewDecision
from tests.fake_models import FakeModelServer
from tests.helpers import (
    finish,
    lane_assignments,
    lanes_started,
    make_repo,
    start_run,
    turn,
    wait_for_phase,
    write_yaml,
)
from tests.test_validation import BREAK, FIX, lanes_yaml, plan, repo_with_tests
from workflows.swarm import SwarmWorkflow

NEXT_ROUND = turn(("n1", "edit_file", {"path": "calc/ops.py", "old": "def sub(a, b):", "new": "def sub(a, b):  # r2",
                                       "reason": "Mark sub as the reviewer asked"}))


def requests_for(fake: FakeModelServer, marker: str) -> list[str]:
    """The requests (as JSON text) whose last user message holds `marker`."""
    found = []
    for body in fake.answered:
        users = [m for m in body["messages"] if m["role"] == "user" and isinstance(m.get("content"), str)]
        if users and marker in users[-1]["content"]:
            found.append(json.dumps(body["messages"]))
    return found


@contextlib.asynccontextmanager
async def openai_worker(client, monkeypatch, script: dict, name: str, **fake: Any) -> AsyncIterator[FakeModelServer]:
    """A worker of its own queue, its model a fake OpenAI server playing `script`."""
    queue = f"{name}-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    with FakeModelServer("openai", script, **fake) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", f"sk-{name}-test")
        async with make_worker(client, queue):
            yield server


async def start_openai_run(client, repo: Path, lanes: Path, plan_file: Path, task: str) -> str:
    req = build_request(argparse.Namespace(repo=str(repo), task=task, lanes=str(lanes), plan=str(plan_file),
                                           model="openai:fake"))
    await start(client, req)
    return req.run_id


async def run_repair(client, tmp_path: Path, monkeypatch, *, warm: bool) -> tuple[FakeModelServer, str]:
    repo = repo_with_tests(tmp_path)
    lanes = lanes_yaml(tmp_path)
    config = yaml.safe_load(lanes.read_text())
    config["swarm"]["warm_lanes"] = warm
    lanes.write_text(yaml.safe_dump(config))
    script = {"lanes": {"calc": {1: [BREAK, finish("b2", "sub added (or so I think)")],
                                 "1.2": [FIX, finish("f2", "mul fixed, sub added")],
                                 2: [NEXT_ROUND, finish("n2", "sub marked")]}}}
    async with openai_worker(client, monkeypatch, script, "warm") as fake:
        run_id = await start_openai_run(client, repo, lanes, plan(tmp_path), "Add sub")
        status = await wait_for_phase(client, run_id, Phase.review, timeout=120)
        if warm:
            assert status.review.test_report.passed and status.lanes[0].attempt == 2  # repaired, then green  # round 2 through a rejection with the reviewer's plan: the same lane, warm again
            handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(
                approve=False, comment="Mark sub.", reviewer="ann", plan=Plan(
                    interface_contract="calc.ops keeps add, mul and sub.",
                    lanes=[{"lane": "calc", "goal": "Mark sub in calc/ops.py."}])))
            await wait_for_phase(client, run_id, Phase.review, timeout=120)
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
            await handle.result()
    return fake, run_id


@pytest.mark.usefixtures("worker")
async def test_a_repair_and_the_next_round_reach_the_warm_lane_with_its_conversation(client, tmp_path, monkeypatch):
    fake, run_id = await run_repair(client, tmp_path, monkeypatch, warm=True)
    repair = requests_for(fake, "Next assignment for lane calc (round 1, dispatch 2)")
    assert repair, "the repair never reached the lane as its next assignment"
    # the model is sent what the lane did before: its first goal, its own earlier call, and what that call saw
    assert "Goal for lane calc:" in repair[0] and '"b1"' in repair[0] and "return a * b + 1" in repair[0]
    assert "The merged tree fails these checks" in repair[0]  # the failures it is answerable for
    round2 = requests_for(fake, "Next assignment for lane calc (round 2, dispatch 1)")
    assert round2 and '"f1"' in round2[0] and "Mark sub." in round2[0]  # the repair's calls, the comment
    assert await lane_assignments(client, run_id, "calc") == [f"{run_id}.calc.r1", f"{run_id}.calc.r1.a2",
                                                              f"{run_id}.calc.r2"]


@pytest.mark.usefixtures("worker")
async def test_a_cold_lane_starts_each_dispatch_afresh(client, tmp_path, monkeypatch):
    fake, run_id = await run_repair(client, tmp_path, monkeypatch, warm=False)
    firsts = [json.dumps(b["messages"]) for b in fake.answered
              if sum(m["role"] == "assistant" for m in b["messages"]) == 0]
    # (the fake cannot tell a cold repair from the first dispatch, so it breaks again: each dispatch from the start)
    assert len(firsts) >= 2
    assert '"b1"' not in firsts[1] and "The merged tree fails these checks" in firsts[1]
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_a_warm_lane_continues_as_new_and_keeps_its_conversation(tmp_path, monkeypatch):
    """On a server that suggests continue-as-new after 40 events, the warm lane continues as new mid-assignment
    and between assignments; its repair still reaches the model with the earlier conversation."""
    from tests.helpers import start_dev_server

    env = await start_dev_server(["--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=40"])
    try:
        client = env.client
        repo = repo_with_tests(tmp_path)
        lanes = lanes_yaml(tmp_path)
        reads = [turn((f"r{i}", "read_file", {"path": "calc/ops.py"})) for i in range(4)]
        script = {"lanes": {"calc": {1: [*reads, BREAK, finish("b2", "sub added (or so I think)")],
                                     "1.2": [FIX, finish("f2", "mul fixed, sub added")]}}}
        async with openai_worker(client, monkeypatch, script, "warm-can") as fake:
            run_id = await start_openai_run(client, repo, lanes, plan(tmp_path), "Add sub")
            status = await wait_for_phase(client, run_id, Phase.review, timeout=180)
            assert status.review.test_report.passed and status.lanes[0].attempt == 2
            runs = [w async for w in client.list_workflows(f"WorkflowId = '{run_id}.calc'")]
            assert len(runs) > 1, "the lane never continued as new"
            repair = requests_for(fake, "Next assignment for lane calc (round 1, dispatch 2)")
            assert repair and '"r0"' in repair[0] and '"b1"' in repair[0]  # its whole earlier conversation
            await client.get_workflow_handle(run_id).terminate("test done")
    finally:
        await env.shutdown()


def two_lanes(tmp_path: Path, **swarm: object) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n", "web/app.js": "v = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {**swarm, "lanes": {
        "api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["web/"]}}}})
    plan_file = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [
        {"lane": "api", "goal": "Read api."}, {"lane": "web", "goal": "Read web."}]})
    return repo, lanes, plan_file


@pytest.mark.usefixtures("worker")
async def test_a_round_s_lanes_are_started_together_by_the_client_not_as_children(client, tmp_path):
    """The run asks for its lanes in one workflow task and one local activity starts them all (activities/lanes.py):
    no child workflow, whose starts the server makes one after another under the run's lock."""
    repo, lanes, plan_file = two_lanes(tmp_path)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        n: {1: [finish(f"{n}f", f"{n} read")]} for n in ("api", "web")}})
    run_id = await start_run(client, repo, lanes, script, plan=plan_file)
    status = await wait_for_phase(client, run_id, Phase.review)
    assert {lane.lane: lane.status for lane in status.review.lanes} == {"api": LaneStatus.done,
                                                                        "web": LaneStatus.done}
    history = await client.get_workflow_handle(run_id).fetch_history()
    kinds = [e.event_type for e in history.events]
    assert EventType.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED not in kinds
    assert lanes_started(history.events) == [f"{run_id}.api", f"{run_id}.web"]  # one batch, both lanes
    described = await client.get_workflow_handle(f"{run_id}.api").describe()
    assert described.raw_description.workflow_execution_info.parent_execution.workflow_id == ""
    assert (await described.memo()) == {"run_id": run_id, "lane": "api"}
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_a_lane_whose_workflow_is_terminated_ends_failed_and_the_run_goes_on(client, tmp_path, monkeypatch):
    """A lane started by the client has no parent to tell of its end: the run asks after the lanes it waits for
    every swarm.host_timeout_s, and one that ended without answering ends failed with the server's reason."""
    repo, lanes, plan_file = two_lanes(tmp_path, host_timeout_s=2)
    script = {"lanes": {"api": {1: [turn(("a1", "read_file", {"path": "api/app.py"})), finish("a2", "read")]},
                        "web": {1: [turn(("w1", "read_file", {"path": "web/app.js"})), finish("w2", "read")]}}}
    async with openai_worker(client, monkeypatch, script, "ended-lane", delay_s=3):
        run_id = await start_openai_run(client, repo, lanes, plan_file, "Read both")
        lane = client.get_workflow_handle(f"{run_id}.api")
        for _ in range(100):  # its first model turn in flight
            with contextlib.suppress(RPCError):
                if ((await lane.query("progress")).get("step") or "").startswith("model turn"):
                    break
            await asyncio.sleep(0.1)
        await lane.terminate(reason="an operator stopped it")
        status = await wait_for_phase(client, run_id, Phase.review, timeout=60)
    api, web = sorted(status.review.lanes, key=lambda r: r.lane)
    assert web.status == LaneStatus.done  # the other lane went on
    assert api.status == LaneStatus.failed
    assert "ended without answering" in api.reason and "terminated" in api.reason
    assert "an operator stopped it" in api.reason
    assert next(s for s in status.lanes if s.lane == "api").state == LanePhase.failed
    await client.get_workflow_handle(run_id).terminate("test done")
