"""A run with no lanes file proposes its own lanes and waits for a person to confirm them (issue 34; docs/lanes.md).

Real runs on the session's dev server and worker, a real git repository (a small Python project with its own
tests), and a replay model answering in the documented proposal format (`proposer:`); the command line as a user
runs it, in a subprocess; the confirmation as an Update from another client.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.contrib.pydantic import pydantic_data_converter

from reposwarm.cli.runs import build_request, start
from reposwarm.contracts import LanesDecision, LanesFile, Phase, ProposeOptions, ReviewDecision, SwarmConfig
from reposwarm.lanes.loading import apply_env, load_lanes_file, load_plan_file
from reposwarm.lanes.proposal_file import lanes_data, plan_data, proposal_text
from reposwarm.slices.policy import PathPolicy
from tests.fake_models import FakeModelServer
from tests.helpers import cli, finish, git, make_repo, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

ROOT = Path(__file__).resolve().parents[1]

PRICES = "def total(prices):\n    return sum(prices)\n"
VIEW = 'from shop.prices import total\n\n\ndef show(prices):\n    return f"total: {total(prices)}"\n'
TEST = "from shop.prices import total\n\n\ndef test_total():\n    assert total([1, 2]) == 3\n"
FILES = {"pyproject.toml": '[project]\nname = "shopdemo"\nversion = "0.1"\n', "shop/__init__.py": "",
         "shop/prices.py": PRICES, "web/__init__.py": "", "web/view.py": VIEW, "tests/test_prices.py": TEST}
# the change the task asks for, as the lanes make it
NEW_PRICES = "def total(prices, discount=0):\n    return sum(prices) - discount\n"
NEW_VIEW = VIEW.replace("def show(prices):", "def show(prices, discount=0):").replace(
    "total(prices)", "total(prices, discount)")
NEW_TEST = TEST + "\n\ndef test_discount():\n    assert total([1, 2], discount=1) == 2\n"
CHANGED = ["shop/prices.py", "web/view.py", "tests/test_prices.py"]
TASK = "Add a discount to shop.prices.total, show it in web.view, and test it"


def lane(name: str, paths: list[str], goal: str, depends_on: list[str] | None = None,
         reads: list[str] | None = None) -> dict[str, Any]:
    return {"name": name, "goal": goal, "allowed_paths": paths, "read_only_paths": reads or [],
            "depends_on": depends_on or []}


GOOD = [lane("shop", ["shop/**"], "Give total(prices, discount=0) a discount it subtracts."),
        lane("web", ["web/**"], "Pass a discount through show() to total().", ["shop"], ["shop/**"]),
        lane("tests", ["tests/**"], "Test total's discount.", ["shop", "web"], ["shop/**", "web/**"])]


def submit(lanes: list[dict[str, Any]], overlaps: list[str] | None = None, call_id: str = "p1") -> dict[str, Any]:
    return turn((call_id, "submit_lanes", {"interface_contract": "shop.prices.total(prices, discount=0) -> number",
                                           "summary": "a discount, end to end", "lanes": lanes,
                                           "overlaps": overlaps or []}))


def write(call_id: str, path: str, content: str) -> dict[str, Any]:
    return turn((call_id, "write_file", {"path": path, "content": content, "reason": f"the discount, in {path}"}))


LANES = {"shop": {1: [write("s1", "shop/prices.py", NEW_PRICES), finish("s2")]},
         "web": {1: [write("w1", "web/view.py", NEW_VIEW), finish("w2")]},
         "tests": {1: [write("t1", "tests/test_prices.py", NEW_TEST), finish("t2")]}}


def project(tmp_path: Path, proposer: Any) -> tuple[Path, Path]:
    """The repository (no lanes file in it) and the replay script."""
    repo = make_repo(tmp_path / "shop", FILES)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "proposer": proposer, "lanes": LANES})
    return repo, script


async def start_proposing(client: Client, repo: Path, script: Path, **opts: Any) -> str:
    """Start a run with only a task and a repository, as `run` does with no lanes file."""
    ns = argparse.Namespace(repo=str(repo), task=TASK, lanes=None, plan=None, model=f"replay:{script}")
    req = build_request(ns, config=apply_env(LanesFile(swarm=SwarmConfig())))
    req.propose = ProposeOptions(**opts)
    await start(client, req)
    return req.run_id


def second_client(client: Client) -> Any:
    return Client.connect(client.service_client.config.target_host, namespace=client.namespace,
                          data_converter=pydantic_data_converter)


def covered_once(lanes: dict[str, Any], paths: list[str]) -> None:
    """Each changed file is writable by exactly one lane: the slices cover the change and do not meet on it."""
    for path in paths:
        writers = [n for n, role in lanes.items() if PathPolicy(".", role.allowed_paths,
                                                                role.read_only_paths).writable(path)]
        assert len(writers) == 1, f"{path}: writable by {writers}"


async def approve_and_deliver(client: Client, run_id: str) -> None:
    status = await wait_for_phase(client, run_id, Phase.review, timeout=240)
    assert status.test_report is not None and status.test_report.passed, status.validations
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ana"))
    result = await asyncio.wait_for(handle.result(), 180)
    assert result.delivered_branch


def project_tests_pass_on(repo: Path, branch: str, tmp_path: Path) -> None:
    """The project's own tests, run on the delivered branch (a worktree of it)."""
    tree = tmp_path / "delivered"
    git(repo, "worktree", "add", "-q", str(tree), branch)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tree,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout


# --- the run proposes, waits, and a person (another client) confirms ---


async def test_a_task_and_a_repository_are_enough_the_run_proposes_lanes_and_waits(client, worker, tmp_path):
    repo, script = project(tmp_path, [submit(GOOD)])
    run_id = await start_proposing(client, repo, script)
    status = await wait_for_phase(client, run_id, Phase.proposing, timeout=120)
    while status.proposal is None:
        await asyncio.sleep(0.2)
        status = await wait_for_phase(client, run_id, Phase.proposing, timeout=120)
    proposal = status.proposal
    assert list(proposal.lanes) == ["shop", "web", "tests"] and not proposal.problems, proposal
    covered_once(proposal.lanes, CHANGED)
    assert proposal.lanes["web"].depends_on == ["shop"]
    assert proposal.plan is not None and [lp.lane for lp in proposal.plan.lanes] == ["shop", "web", "tests"]
    assert proposal.profile is not None and proposal.profile.commands[0][-2:] == ["pytest", "-q"]
    assert all(proposal.estimated_tokens[n] > 0 for n in proposal.lanes)
    assert all(role.token_budget >= 64_000 for role in proposal.lanes.values())
    assert proposal.attempts == 1 and not status.lanes  # nothing dispatched while it waits
    # it waits durably: still proposing a moment later, its record on the server has the proposal
    await asyncio.sleep(1)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    assert (await handle.query(SwarmWorkflow.status)).phase == Phase.proposing
    shown = await cli(client, tmp_path / "cli", "status", run_id)
    assert shown.returncode == 0 and "proposed lanes (3" in shown.stdout and "shop/**" in shown.stdout, shown
    watched = await cli(client, tmp_path / "cli", "watch", run_id)
    assert watched.returncode == 0 and f"confirm {run_id}" in watched.stdout, watched

    # the Signal twin with a payload that is no decision: ignored, kept, the run waiting still
    await handle.signal("confirm_lanes_signal", {"accept": "perhaps", "lanes_yaml": 3})
    # an edit that does not load (two lanes writing one folder) is refused at once by the Update's validator
    overlapping = {**lanes_data(proposal), "plan": plan_data(proposal.plan)}
    overlapping["swarm"]["lanes"]["web"]["allowed_paths"] = ["web/**", "shop/**"]
    import yaml

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(SwarmWorkflow.confirm_lanes, LanesDecision(
            accept=True, lanes_yaml=yaml.safe_dump(overlapping), reviewer="ana"))
    assert "shop/" in str(refused.value.cause) and "web" in str(refused.value.cause), refused.value.cause
    # an edit whose problem only the repository's files show (the test lane no longer depends on the code it
    # tests) is refused after the Update is taken, by the activity: the person hears why
    untied = {**lanes_data(proposal), "plan": plan_data(proposal.plan)}
    untied["swarm"]["lanes"]["tests"]["depends_on"] = []
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(SwarmWorkflow.confirm_lanes, LanesDecision(
            accept=True, lanes_yaml=yaml.safe_dump(untied), reviewer="ana"))
    assert "does not depend on 'shop'" in str(refused.value.cause), refused.value.cause
    status = await handle.query(SwarmWorkflow.status)
    assert status.phase == Phase.proposing and status.proposal == proposal  # the refused edits changed nothing
    assert any(s.startswith("confirm_lanes_signal: not a lanes decision") for s in status.ignored_signals), \
        status.ignored_signals

    # accepted from another client, by the Update
    other = await second_client(client)
    receipt = await other.get_workflow_handle_for(SwarmWorkflow.run, run_id).execute_update(
        SwarmWorkflow.confirm_lanes, LanesDecision(accept=True, reviewer="bo"))
    assert receipt.accepted and receipt.lanes == ["shop", "web", "tests"]
    await approve_and_deliver(client, run_id)
    status = await handle.query(SwarmWorkflow.status)
    assert status.proposal is not None and status.proposal.decided.startswith("accepted by bo at ")
    history = [e async for e in handle.fetch_history_events()]
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name for e in history
                 if e.HasField("activity_task_scheduled_event_attributes")]
    assert scheduled[0] == "propose_lanes" and "plan_round" not in scheduled, scheduled
    assert scheduled.count("check_proposal_edit") == 1  # the edit that loaded; the other was refused before
    project_tests_pass_on(repo, status.delivered_branch or "", tmp_path)


async def test_an_edit_sent_by_signal_with_a_problem_is_kept_and_the_run_waits(client, worker, tmp_path):
    repo, script = project(tmp_path, [submit(GOOD)])
    run_id = await start_proposing(client, repo, script)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    status = await wait_for_phase(client, run_id, Phase.proposing)
    while status.proposal is None:
        await asyncio.sleep(0.2)
        status = await handle.query(SwarmWorkflow.status)
    untied = {**lanes_data(status.proposal), "plan": plan_data(status.proposal.plan)}
    untied["swarm"]["lanes"]["tests"]["depends_on"] = []
    import yaml

    await handle.signal("confirm_lanes_signal", LanesDecision(accept=True, lanes_yaml=yaml.safe_dump(untied)))
    for _ in range(300):
        status = await handle.query(SwarmWorkflow.status)
        if status.ignored_signals:
            break
        await asyncio.sleep(0.2)
    assert status.phase == Phase.proposing
    assert status.ignored_signals[0].startswith("confirm_lanes_signal: the edited lanes were refused: lane 'tests'")
    # a stop, sent by the CLI's confirm: the run ends, nothing dispatched, and list shows it as not approved
    stopped = await cli(client, tmp_path / "cli", "confirm", run_id, "--reject")
    assert stopped.returncode == 0 and "nothing was dispatched" in stopped.stdout, stopped
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.proposal is not None and not result.final_sha and result.rounds == 0
    listed = await cli(client, tmp_path / "cli", "list", "--repo", str(repo))
    assert any(line.startswith(run_id) and "not_approved" in line for line in listed.stdout.splitlines()), listed


# --- the command line ---


async def test_run_with_yes_proposes_accepts_and_delivers(client, worker, tmp_path):
    repo, script = project(tmp_path, submit(GOOD))  # one reply, not a list: as documented too
    started = await cli(client, tmp_path / "cli", "run", "--repo", str(repo), "--task", TASK, "--model",
                  f"replay:{script}", "--yes")
    assert started.returncode == 0, started.stderr
    run_id = next(line.split()[1] for line in started.stdout.splitlines() if line.startswith("run: "))
    await approve_and_deliver(client, run_id)
    status = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
    assert status.proposal is not None and status.proposal.decided == "accepted at once (run --yes)"
    assert sorted(s.lane for s in status.lanes) == ["shop", "tests", "web"]
    project_tests_pass_on(repo, status.delivered_branch or "", tmp_path)


async def test_write_lanes_writes_a_lanes_file_that_loads_and_dispatches_nothing(client, worker, tmp_path):
    repo, script = project(tmp_path, [submit(GOOD)])
    out = tmp_path / "proposed.yaml"
    written = await cli(client, tmp_path / "cli", "run", "--repo", str(repo), "--task", TASK, "--model",
                  f"replay:{script}", "--write-lanes", str(out))
    assert written.returncode == 0, written.stderr
    assert "waiting for its proposal of lanes" in written.stderr  # said as the wait begins
    assert "nothing was dispatched" in written.stdout and "proposed lanes (3" in written.stdout, written.stdout
    config = load_lanes_file(out)
    assert list(config.swarm.lanes) == ["shop", "web", "tests"]
    assert config.validation.profiles["default"].commands[0][-2:] == ["pytest", "-q"]
    plan = load_plan_file(tmp_path / "proposed.plan.yaml", config)
    assert [lp.lane for lp in plan.lanes] == ["shop", "web", "tests"]
    assert git(repo, "branch", "--list") == "* main"  # no integration branch: nothing was started on it
    listed = await cli(client, tmp_path / "cli", "list", "--repo", str(repo), "--all")
    assert "failed" not in listed.stdout and "planned" in listed.stdout, listed.stdout
    hidden = await cli(client, tmp_path / "cli", "list", "--repo", str(repo))
    assert "(no runs)" in hidden.stdout, hidden.stdout


async def test_off_a_terminal_run_shows_the_proposal_and_how_to_answer_then_confirm_accepts_an_edit(
        client, worker, tmp_path):
    repo, script = project(tmp_path, [submit(GOOD)])
    shown = await cli(client, tmp_path / "cli", "run", "--repo", str(repo), "--task", TASK, "--model", f"replay:{script}")
    assert shown.returncode == 0, shown.stderr
    run_id = next(line.split()[1] for line in shown.stdout.splitlines() if line.startswith("run: "))
    for column in ("lane", "slice", "goal", "depends on", "model", "budget", "est. cost"):
        assert column in shown.stdout
    assert f"confirm {run_id} --lanes FILE" in shown.stdout and f"confirm {run_id} --reject" in shown.stdout
    status = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
    assert status.proposal is not None
    # the person's edit: the web lane goes (its file is the tests lane's to leave alone), via confirm --lanes
    text = proposal_text(status.proposal)
    import yaml

    data = yaml.safe_load(text)
    data["swarm"]["lanes"]["shop"]["allowed_paths"] = ["shop/**", "web/**"]
    del data["swarm"]["lanes"]["web"]
    data["swarm"]["lanes"]["tests"]["depends_on"] = ["shop"]
    data["swarm"]["lanes"]["tests"]["read_only_paths"] = ["shop/**", "web/**"]
    data["plan"]["lanes"] = [lp for lp in data["plan"]["lanes"] if lp["lane"] != "web"]
    edit = tmp_path / "edit.yaml"
    edit.write_text(yaml.safe_dump(data))
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("allowed_paths:", "alowed_paths:", 1))
    refused = await cli(client, tmp_path / "cli", "confirm", run_id, "--lanes", str(bad))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "alowed_paths" in refused.stderr and "did you mean 'allowed_paths'" in refused.stderr
    accepted = await cli(client, tmp_path / "cli", "confirm", run_id, "--lanes", str(edit))
    assert accepted.returncode == 0 and "accepted 2 lanes (shop, tests)" in accepted.stdout, accepted
    status = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
    assert list(status.proposal.lanes) == ["shop", "tests"] and "(edited)" in status.proposal.decided


HOSTILE = {
    "overlapping": [lane("a", ["shop/**"], "g"), lane("b", ["shop/prices.py"], "g")],
    "outside": [lane("a", ["../elsewhere/**"], "g")],
    "everything": [lane("a", ["**"], "g")],
    "200 lanes": [lane(f"l{i}", [f"d{i}/**"], "g") for i in range(200)],
    "a cycle": [lane("a", ["shop/**"], "g", ["b"]), lane("b", ["web/**"], "g", ["a"])],
}
SAID = {"overlapping": "shop/prices.py", "outside": "..", "everything": "**", "200 lanes": "200 lanes",
        "a cycle": "cycle"}


@pytest.mark.parametrize("kind", list(HOSTILE))
async def test_a_hostile_proposal_is_sent_back_once_then_the_run_stops_with_one_error_line(client, worker, tmp_path,
                                                                                          kind):
    script = {"proposer": [submit(HOSTILE[kind], call_id="h1"), submit(HOSTILE[kind], call_id="h2")], "lanes": {}}
    with FakeModelServer("openai", script) as fake:
        repo = make_repo(tmp_path / "shop", FILES)
        queue = f"proposing-{uuid.uuid4().hex[:6]}"
        from tests.helpers import WorkerProcess

        worker_proc = WorkerProcess(client.service_client.config.target_host, queue, tmp_path / "worker", env={
            "OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-proposing-test-0123456789"}).start()
        try:
            await worker_proc.ready()
            home = tmp_path / "cli"
            home.mkdir()
            env = {"PATH": os.environ["PATH"], "TEMPORAL_ADDRESS": client.service_client.config.target_host,
                   "REPOSWARM_TASK_QUEUE": queue, "REPOSWARM_HOME": str(home), "HOME": str(home)}
            done = await asyncio.to_thread(subprocess.run, [sys.executable, str(ROOT / "starter.py"), "run", "--repo", str(repo), "--task",
                                   TASK, "--model", "openai:gpt-4.1"], capture_output=True, text=True, env=env,
                                  cwd=home, timeout=300)
        finally:
            worker_proc.stop()
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert done.returncode == 2 and len(errors) == 1, done.stderr
    assert "failed while proposing its lanes: the planner's proposal of lanes was refused 2 times: " in errors[0]
    assert SAID[kind] in errors[0], errors[0]
    # the second request carried the first reply's problems back to the model
    asked = [r.body for r in fake.requests]
    assert len(asked) == 2, len(asked)
    correction = json.dumps(asked[1]["messages"][-1])
    assert "That proposal was refused" in correction and SAID[kind].replace("..", "") in correction
