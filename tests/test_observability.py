"""Observability: the ledger's figures, a trace of a whole run, secrets kept out, explain and report."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter

from reposwarm import telemetry
from reposwarm.cli.runs import build_request, start
from reposwarm.cli.worker import make_worker
from reposwarm.contracts import Phase, ReviewDecision
from reposwarm.runs import ledger, metrics
from reposwarm.runs.store import run_dir
from tests.fake_models import FakeModelServer
from tests.helpers import ROOT, finish, make_repo, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

LANES = ["api", "web", "db", "docs"]
ENV_SECRET = "hunter2-planted-env-secret-0123456789"
FILE_SECRET = "sk-" + "planted0file0secret0abcdefghijklmnop"  # fake, shaped like a key on purpose


def four_lanes(tmp_path: Path, turns: int = 3) -> tuple[Path, Path, Path, dict]:
    files = {f"{n}/x.txt": "0\n" for n in LANES}
    files["api/config.txt"] = f"token = {FILE_SECRET}\nenv = {ENV_SECRET}\n"
    repo = make_repo(tmp_path / "repo", files)
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"max_parallel": 4, "lanes": {
        n: {"allowed_paths": [f"{n}/"]} for n in LANES}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [
        {"lane": n, "goal": f"Mark {n}."} for n in LANES]})
    script = {"lanes": {n: {1: [
        *[turn((f"{n}r{i}", "read_file", {"path": "api/config.txt" if n == "api" else f"{n}/x.txt"}))
          for i in range(turns - 2)],
        turn((f"{n}w", "write_file", {"path": f"{n}/x.txt", "content": f"{n}\n", "reason": f"Mark {n} as done"})),
        finish(f"{n}f", f"{n} marked")]} for n in LANES}}
    return repo, lanes, plan, script


async def test_figures_trace_and_secrets_of_a_whole_run(client, reposwarm_home, tmp_path, monkeypatch):
    exporter = InMemorySpanExporter()
    interceptors = telemetry.setup_tracing("reposwarm-test", exporter=exporter)
    traced = await Client.connect(client.service_client.config.target_host, data_converter=pydantic_data_converter,
                                  interceptors=interceptors)
    queue = f"traced-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    monkeypatch.setenv("PLANTED_API_KEY", ENV_SECRET)  # a credential in the worker's environment
    repo, lanes, plan, script = four_lanes(tmp_path)
    with FakeModelServer("openai", script, delay_s=0.4) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-observability-test-key-000000")
        async with make_worker(traced, queue):
            req = build_request(argparse.Namespace(repo=str(repo), task="Mark every lane", lanes=str(lanes),
                                                   plan=str(plan), model="openai:fake"))
            await start(traced, req)
            run_id = req.run_id
            await wait_for_phase(client, run_id, Phase.review)
            handle = traced.get_workflow_handle_for(SwarmWorkflow.run, run_id)
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
            await handle.result()
            status = await handle.query(SwarmWorkflow.status)

    lines = ledger.read(run_id)
    report = metrics.report(run_id, lines)
    # Parallel efficiency, from the worker's ledger and from the run's own record on the server (the workflow's
    # clock), is one formula over each one's recorded inputs: the lanes' own running time / (lanes x the time lanes
    # were running). Both see the same round of four lanes; the ledger's spans (worktree made .. branch described)
    # lie within the server's (the lane workflow's start .. its result), lane by lane and for the round. How close
    # the two figures come on a loaded machine is a matter of overheads, which the bench measures.
    recorded = metrics.from_status(status, 0.0)
    for source in (report, recorded):
        assert [(r.round, r.lanes) for r in source.rounds] == [(1, len(LANES))]
        (only,) = source.rounds
        assert 0 < only.busy_s <= only.lanes * only.lanes_s
        assert only.parallel_efficiency == round(only.busy_s / (only.lanes * only.lanes_s), 3)
        assert source.parallel_efficiency == only.parallel_efficiency
        assert sum(f.seconds for f in source.lanes) == pytest.approx(only.busy_s, abs=0.01)
    server_lanes = {f.lane: f.seconds for f in recorded.lanes}
    assert {f.lane for f in report.lanes} == set(server_lanes) == set(LANES)
    assert all(0 < f.seconds <= server_lanes[f.lane] for f in report.lanes), (report.lanes, recorded.lanes)
    assert report.rounds[0].lanes_s <= recorded.rounds[0].lanes_s
    assert report.first_pass_merge_rate == 1.0 and report.changesets == 4
    assert report.tool_calls == sum(f.tool_calls for f in report.lanes) == 4 * 2  # a read and a write each
    assert report.tokens_in == sum(e["input_tokens"] for e in lines if e["event"] == "model_call")
    assert len([e for e in lines if e["event"] == "model_call"]) == len(fake.requests)

    # The trace holds the workflow, every lane, and every model and tool call.
    names = [s.name for s in exporter.get_finished_spans()]
    assert "StartWorkflow:SwarmWorkflow" in names and "RunWorkflow:SwarmWorkflow" in names
    assert names.count("RunWorkflow:LaneWorkflow") >= len(LANES)
    # every request is a lane's turn, or the one call that wrote the round's shared prefix to the cache first;
    # each has its span, model_call, in the model_turn activity that asked it (which may ask several turns)
    assert names.count("RunActivity:warm_prefix") == fake.warmed
    assert names.count("model_call") == len(fake.requests)
    assert len(LANES) <= names.count("RunActivity:model_turn") < len(fake.requests) - fake.warmed
    # (a call its model turn ran itself has a span of its own there, "run_tool")
    assert names.count("RunActivity:run_tool") + names.count("run_tool") == report.tool_calls
    model_spans = [s for s in exporter.get_finished_spans() if s.name == "model_call"]
    assert {s.attributes["reposwarm.lane"] for s in model_spans} >= set(LANES)
    assert all(s.attributes["reposwarm.tokens_in"] > 0 for s in model_spans)

    # Planted secrets appear nowhere: not in history, ledger, transcripts, store or the review package.
    histories = [await client.get_workflow_handle(w.id, run_id=w.run_id).fetch_history()
                 async for w in client.list_workflows(f"WorkflowId STARTS_WITH '{run_id}'")]
    for history in histories:
        text = history.to_json()
        assert ENV_SECRET not in text and FILE_SECRET not in text
    for path in run_dir(run_id).rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            assert ENV_SECRET.encode() not in data and FILE_SECRET.encode() not in data, path
    api_read = next(e for e in lines if e["event"] == "tool_call" and e["call_id"] == "apir0")
    seen = (run_dir(run_id) / "store" / api_read["output_ref"][7:9] / api_read["output_ref"][7:]).read_text()
    assert "[redacted" in seen  # the lane did read the file; what it saw was redacted

    # explain and report from the worker host's ledger (--home), as a user runs them there
    env = {**os.environ, "REPOSWARM_HOME": str(reposwarm_home)}
    explained = await asyncio.to_thread(subprocess.run, [sys.executable, str(ROOT / "starter.py"), "explain", run_id,
                                                         "web/x.txt", "--home", str(reposwarm_home)],
                                        capture_output=True, text=True, env=env, timeout=60)
    assert explained.returncode == 0, explained.stderr
    assert "lane web, round 1, turn 2: write_file" in explained.stdout and "Mark web as done" in explained.stdout
    assert f"swarm/{run_id}" in explained.stdout
    reported = await asyncio.to_thread(subprocess.run, [sys.executable, str(ROOT / "starter.py"), "report", run_id,
                                                        "--json", "--home", str(reposwarm_home)], capture_output=True, text=True, env=env, timeout=60)
    figures = json.loads(reported.stdout)
    for key in ("changesets_per_hour", "parallel_efficiency", "first_pass_merge_rate", "tokens_in", "tokens_out",
                "cost_usd", "tool_calls", "lanes"):
        assert key in figures
    assert {lane["lane"] for lane in figures["lanes"]} == set(LANES)
