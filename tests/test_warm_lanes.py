"""Warm lanes (issue 19): a lane is one workflow for the whole run. A repair after a red check and the next round's
goal after a rejection reach it as its next assignment, and it goes on with its conversation: the model is sent
what the lane said and saw before. With `warm_lanes: false`, each dispatch starts cold, as a fresh lane.
"""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path

import pytest
import yaml

from reposwarm.cli.runs import build_request, start
from reposwarm.contracts import Phase, Plan, ReviewDecision
from tests.fake_models import FakeModelServer
from tests.helpers import finish, lane_assignments, turn, wait_for_phase
from tests.test_validation import BREAK, FIX, lanes_yaml, plan, repo_with_tests
from worker import make_worker
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


async def run_repair(client, tmp_path: Path, monkeypatch, *, warm: bool) -> tuple[FakeModelServer, str]:
    repo = repo_with_tests(tmp_path)
    lanes = lanes_yaml(tmp_path)
    config = yaml.safe_load(lanes.read_text())
    config["swarm"]["warm_lanes"] = warm
    lanes.write_text(yaml.safe_dump(config))
    script = {"lanes": {"calc": {1: [BREAK, finish("b2", "sub added (or so I think)")],
                                 "1.2": [FIX, finish("f2", "mul fixed, sub added")],
                                 2: [NEXT_ROUND, finish("n2", "sub marked")]}}}
    queue = f"warm-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    with FakeModelServer("openai", script) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-warm-lanes-test")
        async with make_worker(client, queue):
            req = build_request(argparse.Namespace(repo=str(repo), task="Add sub", lanes=str(lanes),
                                                   plan=str(plan(tmp_path)), model="openai:fake"))
            await start(client, req)
            status = await wait_for_phase(client, req.run_id, Phase.review, timeout=120)
            if warm:
                assert status.review.test_report.passed and status.lanes[0].attempt == 2  # repaired, then green  # round 2 through a rejection with the reviewer's plan: the same lane, warm again
                handle = client.get_workflow_handle_for(SwarmWorkflow.run, req.run_id)
                await handle.execute_update(SwarmWorkflow.review, ReviewDecision(
                    approve=False, comment="Mark sub.", reviewer="ann", plan=Plan(
                        interface_contract="calc.ops keeps add, mul and sub.",
                        lanes=[{"lane": "calc", "goal": "Mark sub in calc/ops.py."}])))
                await wait_for_phase(client, req.run_id, Phase.review, timeout=120)
                await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
                await handle.result()
    return fake, req.run_id


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
        monkeypatch.setenv("REPOSWARM_TASK_QUEUE", "warm-can")
        with FakeModelServer("openai", script) as fake:
            monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
            monkeypatch.setenv("OPENAI_API_KEY", "sk-warm-lanes-test")
            async with make_worker(client, "warm-can"):
                req = build_request(argparse.Namespace(repo=str(repo), task="Add sub", lanes=str(lanes),
                                                       plan=str(plan(tmp_path)), model="openai:fake"))
                await start(client, req)
                status = await wait_for_phase(client, req.run_id, Phase.review, timeout=180)
                assert status.review.test_report.passed and status.lanes[0].attempt == 2
                runs = [w async for w in client.list_workflows(f"WorkflowId = '{req.run_id}.calc'")]
                assert len(runs) > 1, "the lane never continued as new"
                repair = requests_for(fake, "Next assignment for lane calc (round 1, dispatch 2)")
                assert repair and '"r0"' in repair[0] and '"b1"' in repair[0]  # its whole earlier conversation
                await client.get_workflow_handle(req.run_id).terminate("test done")
    finally:
        await env.shutdown()
