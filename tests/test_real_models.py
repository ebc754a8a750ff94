"""Real providers end to end: a worker in its own process talks to a fake model server on loopback that
speaks the real OpenAI or Anthropic wire format; the run is recorded, and the recording replays offline."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from reposwarm.agent.specs import TOOL_ARGS
from reposwarm.contracts import Phase, ReviewDecision
from reposwarm.runs import ledger
from tests.fake_models import FakeModelServer
from tests.helpers import ROOT, WorkerProcess, finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

KEY = "sk-" + "e2e-fake-key-0123456789abcdefABCDEF"  # fake
PLAN = {"interface_contract": "api/app.py exports NAME = 'swarm'; web/client.js exports name = 'swarm'.",
        "summary": "NAME everywhere",
        "lanes": [{"lane": "api", "goal": "Add NAME = 'swarm' to api/app.py."},
                  {"lane": "web", "goal": "Export name = 'swarm' from web/client.js, as the API does."}]}
SCRIPT = {
    "planner": {1: [turn(("plan_1", "submit_plan", PLAN))]},
    "lanes": {
        "api": {1: [turn(("api_1", "read_file", {"path": "api/app.py"}), content="Reading the API first."),
                    turn(("api_2", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n",
                                                 "new": "VERSION = 1\nNAME = 'swarm'\n",
                                                 "reason": "Export NAME as the interface contract says"})),
                    finish("api_3", "api/app.py exports NAME")]},
        "web": {1: [turn(("web_1", "read_file", {"path": "api/app.py"})),
                    turn(("web_2", "write_file", {"path": "web/client.js", "content": "export const name = 'swarm';\n",
                                                  "reason": "Mirror the API's NAME in the client"})),
                    finish("web_3", "web/client.js exports name")]},
    },
}


def scenario(tmp_path: Path) -> tuple[Path, Path]:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n", "web/client.js": "export const v = 1;\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"], "read_only_paths": ["web/"]},
                            "web": {"allowed_paths": ["web/"], "read_only_paths": ["api/"], "depends_on": ["api"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "import api.app"]]}}},
        "prices": {"openai:fake-coder": {"input_per_mtok": 2.0, "output_per_mtok": 8.0},
                   "anthropic:fake-claude": {"input_per_mtok": 3.0, "output_per_mtok": 15.0}},
    })
    return repo, lanes


def starter(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=120, env=env)


@pytest.mark.parametrize("wire,model,env_prefix", [("openai", "openai:fake-coder", "OPENAI"),
                                                   ("anthropic", "anthropic:fake-claude", "ANTHROPIC")])
async def test_real_provider_end_to_end_and_replay(client, worker, temporal_address, tmp_path, wire, model,
                                                   env_prefix):
    queue = f"e2e-{uuid.uuid4().hex[:8]}"
    home = tmp_path / "worker-home"
    with FakeModelServer(wire, SCRIPT, rate_limit_first=1) as fake:
        proc = WorkerProcess(temporal_address, queue, home, {
            f"{env_prefix}_BASE_URL": fake.base_url, f"{env_prefix}_API_KEY": KEY}).start()
        try:
            await proc.ready()
            repo, lanes = scenario(tmp_path)
            env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_"))}
            env.update(TEMPORAL_ADDRESS=temporal_address, REPOSWARM_TASK_QUEUE=queue, REPOSWARM_HOME=str(home))
            started = await asyncio.to_thread(starter, "run", "--repo", str(repo), "--task", "NAME everywhere",
                                              "--lanes", str(lanes), "--model", model, "--record", env=env)
            assert started.returncode == 0, started.stderr
            run_id = started.stdout.splitlines()[0].removeprefix("run: ")
            status = await wait_for_phase(client, run_id, Phase.review)
            handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="e2e"))
            result = await handle.result()
            recorded = await asyncio.to_thread(starter, "recording", run_id, "--out", str(tmp_path / "rec.yaml"),
                                               env=env)
            assert recorded.returncode == 0, recorded.stderr
            histories = [await client.get_workflow_handle(w.id, run_id=w.run_id).fetch_history()
                         async for w in client.list_workflows(f"WorkflowId STARTS_WITH '{run_id}'")]
        finally:
            proc.stop()

    # The requests the model server received: tools by their public names and schemas, the key only in its header.
    lane_requests = [r for r in fake.requests if "submit_plan" not in r.raw.decode()]
    planner_requests = [r for r in fake.requests if r not in lane_requests]
    # The first planner request met a 429: Temporal retried it (the HTTP client never retries on its own).
    assert len(planner_requests) == 2 and planner_requests[0].raw == planner_requests[1].raw
    assert len(lane_requests) == 6
    ledger_lines = [json.loads(line) for line in next(home.rglob("ledger.jsonl")).read_text().splitlines()]
    planner_lines = [e for e in ledger_lines if e["event"] == "model_call" and e["agent"] == "planner"]
    assert [(e["attempt"], e["outcome"]) for e in planner_lines] == [(1, "error"), (2, "ok")]
    # The ledger's model calls are the requests the server received, one for one, the retried one included.
    assert len([e for e in ledger_lines if e["event"] == "model_call"]) == len(fake.requests)
    for seen in lane_requests:
        tools = seen.body["tools"]
        specs = {t["function"]["name"]: t["function"]["parameters"] for t in tools} if wire == "openai" else {
            t["name"]: t["input_schema"] for t in tools}
        assert list(specs) == list(TOOL_ARGS)
        assert all(s["type"] == "object" and "properties" in s for s in specs.values())
        assert specs["edit_file"]["required"] == ["path", "old", "new"]
    for seen in fake.requests:
        header = "authorization" if wire == "openai" else "x-api-key"
        assert KEY in seen.headers[header]
        assert KEY not in seen.raw.decode() and KEY not in seen.path
        assert not any(KEY in v for k, v in seen.headers.items() if k != header)
    # The lane's first message carries its goal verbatim; tool-call ids went back as the model gave them.
    web_last = lane_requests[-1].body["messages"]
    assert PLAN["lanes"][1]["goal"] in json.dumps(web_last[0] if wire == "anthropic" else web_last[1])
    assert "web_2" in json.dumps(web_last)
    # No credential in history, ledger, store or recording.
    for history in histories:
        assert KEY not in history.to_json()
    for path in home.rglob("*"):
        if path.is_file():
            assert KEY.encode() not in path.read_bytes(), path
    # Usage and cost: 7 calls of 1,200 in / 80 out, priced from the lanes file.
    price_in, price_out = (2.0, 8.0) if wire == "openai" else (3.0, 15.0)
    assert result.usage.model_calls == 7
    assert result.usage.cost_usd == pytest.approx(7 * (1200 * price_in + 80 * price_out) / 1e6)
    assert status.review.usage.cost_usd > 0
    delivered_tree = git(repo, "rev-parse", f"{result.delivered_branch}^{{tree}}")
    assert git(repo, "show", f"{result.delivered_branch}:api/app.py") == "VERSION = 1\nNAME = 'swarm'"

    # The recording replays offline (no model server at all) to the same delivered tree.
    again = make_repo(tmp_path / "again", {"api/app.py": "VERSION = 1\n", "web/client.js": "export const v = 1;\n"})
    replay_id = await start_run(client, again, lanes, tmp_path / "rec.yaml", task="NAME everywhere")
    await wait_for_phase(client, replay_id, Phase.review)
    replay = client.get_workflow_handle_for(SwarmWorkflow.run, replay_id)
    await replay.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
    replayed = await replay.result()
    assert git(again, "rev-parse", f"{replayed.delivered_branch}^{{tree}}") == delivered_tree


async def test_an_invalid_plan_goes_back_once_then_fails_the_run_with_nothing_dispatched(client, worker, tmp_path):
    repo, lanes = scenario(tmp_path)
    bad = {"interface_contract": "x", "lanes": [{"lane": "ghost", "goal": "haunt"}]}
    worse = {"interface_contract": "", "lanes": []}
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "planner": {1: [
        turn(("p1", "submit_plan", bad)), turn(("p2", "submit_plan", worse))]}})
    run_id = await start_run(client, repo, lanes, script)
    status = await wait_for_phase(client, run_id, Phase.failed)
    assert "the planner's plan was invalid twice" in status.error
    assert "interface_contract" in status.error  # the second plan's problem, shown
    assert [w.id async for w in client.list_workflows(f"WorkflowId STARTS_WITH '{run_id}.'")] == []
    # ...and a plan corrected on the second try goes ahead.
    fixed = write_yaml(tmp_path / "fixed.yaml", {"version": 1, "planner": {1: [
        turn(("p1", "submit_plan", bad)), {"content": json.dumps({**PLAN, "lanes": PLAN["lanes"][:1]})}]},
        "lanes": {"api": {1: [finish("f1")]}}})
    run_id = await start_run(client, repo, lanes, fixed)
    status = await wait_for_phase(client, run_id, Phase.review)
    assert [lane.lane for lane in status.lanes] == ["api"]
    # both planner calls are in the ledger, each its own line (one activity attempt made them both)
    planner_calls = [e for e in ledger.read(run_id) if e["event"] == "model_call" and e["agent"] == "planner"]
    assert sorted(e["call_id"] for e in planner_calls) == ["planner-r1-t0", "planner-r1-t1"]
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_dry_run_shows_the_plan_and_estimates_and_dispatches_nothing(client, worker, temporal_address,
                                                                            tmp_path):
    repo, lanes = scenario(tmp_path)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "planner": SCRIPT["planner"]})
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address}
    out = await asyncio.to_thread(starter, "run", "--repo", str(repo), "--task", "NAME everywhere", "--lanes",
                                  str(lanes), "--model", f"replay:{script}", "--dry-run", env=env)
    assert out.returncode == 0, out.stderr
    assert PLAN["interface_contract"] in out.stdout
    lines = {line.split()[0]: line for line in out.stdout.splitlines() if line.startswith(("api ", "web "))}
    assert set(lines) == {"api", "web"} and all(" yes " in line or " NO " in line for line in lines.values())
    assert "no price" in lines["api"]  # replay models have no price in this lanes file
    run_id = out.stdout.split()[2].rstrip(":")
    assert [w.id async for w in client.list_workflows(f"WorkflowId STARTS_WITH '{run_id}.'")] == []
    assert git(repo, "branch", "--format=%(refname:short)") == "main"  # not even an integration branch
