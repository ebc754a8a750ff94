"""Budgets that pause and ask (workflows/budgets.py): a lane at its budget waits with its work committed; a raise
lets it go on where it stopped, with no model call asked twice; a stop, or no answer in time, ends it as
budget_exhausted; the run's own cost budget pauses before the next dispatch. Replayed lanes on a real server."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client
from temporalio.common import RawValue

from reposwarm.cli.common import UserError
from reposwarm.cli.runs import build_request
from reposwarm.contracts import BudgetChange, LanePhase, LaneState, LaneStatus, Phase, SwarmStatus
from reposwarm.runs import ledger
from tests.helpers import cli, finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")
USAGE = {"input_tokens": 1000, "output_tokens": 100}  # the replay model's ratios are 1: 1,100 billed a call


def write(call_id: str, path: str, text: str) -> dict[str, Any]:
    return {**turn((call_id, "write_file", {"path": path, "content": text,
                                            "reason": f"Part of the change: {path} as the goal says"})), "usage": USAGE}


def lane_script(lane: str, prefix: str) -> list[dict[str, Any]]:
    """Four calls: three writes and a finish; a budget of 3,000 billed tokens stops it before the third."""
    return [write(f"{lane}1", f"{prefix}/a.py", "A = 2\n"), write(f"{lane}2", f"{prefix}/b.py", "B = 2\n"),
            write(f"{lane}3", f"{prefix}/c.py", "C = 2\n"), {**finish(f"{lane}4", "all three set"), "usage": USAGE}]


def setup(tmp_path: Path, swarm: dict[str, Any], lanes: dict[str, Any], prices: dict[str, Any] | None = None,
          scripts: dict[str, list[dict[str, Any]]] | None = None) -> tuple[Path, Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {f"{d}/{f}.py": f"{f.upper()} = 1\n" for d in ("api", "web") for f in "abc"})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        name: {1: steps} for name, steps in (scripts or {"api": lane_script("a", "api")}).items()}})
    data: dict[str, Any] = {"swarm": {"max_parallel": 2, "lanes": lanes, **swarm}}
    if prices is not None:
        data["prices"] = {f"replay:{script}": prices}
    lanes_path = write_yaml(tmp_path / "lanes.yaml", data)
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [
        {"lane": name, "goal": f"Set A, B and C to 2 in {name}/."} for name in lanes]})
    return repo, lanes_path, script, plan


async def paused(client: Client, run_id: str, lane: str = "api", timeout: float = 90) -> SwarmStatus:
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        status = await handle.query(SwarmWorkflow.status)
        if any(p.lane == lane for p in status.paused):
            return status
        await asyncio.sleep(0.2)
    raise AssertionError(f"{lane or 'the run'} did not pause at its budget in {timeout}s")


def model_calls(run_id: str, agent: str) -> list[str]:
    return [e["call_id"] for e in ledger.read(run_id) if e["event"] == "model_call" and e["agent"] == agent]


async def test_a_lane_at_its_budget_pauses_and_a_raise_lets_it_finish_with_nothing_asked_twice(client, tmp_path):
    repo, lanes, script, plan = setup(tmp_path, {"budget_wait_s": 600},
                                      {"api": {"allowed_paths": ["api/"], "token_budget": 3000}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await paused(client, run_id)
    pause = next(p for p in status.paused if p.lane == "api")
    assert (pause.what, pause.spent, pause.budget) == ("tokens", 2200, 3000)
    # said where a person looks: status (and watch, which prints the same line), and the lane's own progress
    shown = await cli(client, tmp_path / "home", "status", run_id)
    assert f"lane api paused at its budget (2,200 of 3,000 tokens): raise it or stop it (reposwarm budget " \
           f"{run_id} --lane api --raise 2x" in shown.stdout, shown.stdout
    details = str(await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata"))  # the Web UI's
    assert "lane api paused at its budget (2,200 of 3,000 tokens): raise it or stop it" in details
    lane = await client.get_workflow_handle(pause.workflow_id).query("progress", result_type=LaneState)
    assert lane.state == LanePhase.paused and lane.turns == 2
    # its work so far is committed on its branch while it waits
    assert git(repo, "show", f"swarm/{run_id}/api:api/b.py") == "B = 2"

    # a budget that is not paused is refused, saying what is
    refused = await cli(client, tmp_path / "home", "budget", run_id, "--lane", "web", "--raise", "2x")
    assert refused.returncode == 2 and "lane web is not paused at its budget (paused: lane api)" in refused.stderr

    raised = await cli(client, tmp_path / "home", "budget", run_id, "--lane", "api", "--raise", "2x")
    assert raised.returncode == 0, raised.stderr
    assert "raised the budget of lane api" in raised.stdout and "6,000 billed tokens" in raised.stdout

    status = await wait_for_phase(client, run_id, Phase.review)
    api = status.review.lanes[0]
    assert api.status == LaneStatus.done and api.summary == "all three set" and api.turns == 4
    assert git(repo, "show", f"{status.integration_sha}:api/c.py") == "C = 2"
    assert status.paused == []
    calls = model_calls(run_id, "api")
    assert len(calls) == 4 and len(set(calls)) == 4  # every turn asked once: it went on where it stopped
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_a_pause_left_unanswered_ends_the_lane_as_before_with_its_work(client, tmp_path):
    repo, lanes, script, plan = setup(tmp_path, {"budget_wait_s": 2},
                                      {"api": {"allowed_paths": ["api/"], "token_budget": 3000}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    api = status.review.lanes[0]
    assert api.status == LaneStatus.budget_exhausted and api.turns == 2
    assert "token budget of 3,000 billed tokens (2,200 spent)" in api.reason and "no raise came in 2 s" in api.reason
    assert {e.path for e in api.edits} == {"api/a.py", "api/b.py"}
    assert status.paused == [] and len(model_calls(run_id, "api")) == 2
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_a_stop_sent_as_a_signal_ends_the_lane_and_a_bad_one_is_kept_as_ignored(client, tmp_path):
    repo, lanes, script, plan = setup(tmp_path, {"budget_wait_s": 600},
                                      {"api": {"allowed_paths": ["api/"], "token_budget": 3000}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await paused(client, run_id)
    handle = client.get_workflow_handle(run_id)
    await handle.signal("budget_signal", {"lane": "api", "raise_factor": 0.5})  # not a raise: refused, kept
    await handle.signal("budget_signal", RawValue(client.data_converter.payload_converter.to_payloads(
        [BudgetChange(lane="api", stop=True, by="ana")])[0]))
    status = await wait_for_phase(client, run_id, Phase.review)
    api = status.review.lanes[0]
    assert api.status == LaneStatus.budget_exhausted and "stopped at its budget by ana" in api.reason
    assert any(s.startswith("budget: ") and "raise_factor" in s for s in status.ignored_signals), \
        status.ignored_signals
    await handle.terminate("test done")


async def test_the_run_pauses_at_its_cost_budget_before_the_next_lane_and_a_raise_dispatches_it(client, tmp_path):
    scripts = {"api": lane_script("a", "api"), "web": lane_script("w", "web")}
    repo, lanes, script, plan = setup(
        tmp_path, {"budget_wait_s": 600, "cost_budget_usd": 0.005},
        {"api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["web/"], "depends_on": ["api"]}},
        prices={"input_per_mtok": 1.0, "output_per_mtok": 5.0}, scripts=scripts)
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await paused(client, run_id, lane="")
    pause = next(p for p in status.paused if p.lane == "")
    assert pause.what == "cost" and pause.spent == pytest.approx(0.006)  # api's 4 calls at $0.0015 each
    assert "the run paused at its budget ($0.0060 of $0.0050)" in pause.line(run_id)
    assert not any(e["agent"] == "web" for e in ledger.read(run_id) if e["event"] == "model_call")
    wrong = await cli(client, tmp_path / "home", "budget", run_id, "--add-tokens", "1000")
    assert wrong.returncode == 2 and "paused at its cost budget: use --raise or --add-usd" in wrong.stderr
    raised = await cli(client, tmp_path / "home", "budget", run_id, "--add-usd", "1")
    assert raised.returncode == 0 and "to $1.00" in raised.stdout, raised.stdout + raised.stderr
    status = await wait_for_phase(client, run_id, Phase.review)
    assert {lane.lane: lane.status for lane in status.review.lanes} == {"api": LaneStatus.done,
                                                                        "web": LaneStatus.done}
    assert status.usage.cost_usd == pytest.approx(0.012)  # priced exactly: 8 calls of 1,000 in and 100 out
    await client.get_workflow_handle(run_id).terminate("test done")


def test_a_cost_budget_without_a_price_is_refused_before_the_run(tmp_path):
    repo, lanes, script, plan = setup(tmp_path, {}, {"api": {"allowed_paths": ["api/"], "cost_budget_usd": 2}})
    ns = argparse.Namespace(repo=str(repo), task="t", lanes=str(lanes), plan=None, model=f"replay:{script}")
    with pytest.raises(UserError, match=r"swarm\.lanes\.api\.cost_budget_usd needs a price for replay:"):
        build_request(ns)
