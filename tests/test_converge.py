"""Converging lanes: clean merges, converger resolutions, redone lanes, unresolved conflicts, provenance."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reposwarm.contracts import Phase, ReviewDecision
from reposwarm.runs import ledger
from tests.helpers import finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")

BASE = 'def greet(name):\n    return "hello " + name\n'
A_SIDE = 'def greet(name):\n    return "hello, " + name.title()\n'  # lane a: a comma and title case
B_SIDE = 'def greet(name):\n    return "hello " + name + "!"\n'  # lane b: an exclamation mark
BOTH = 'def greet(name):\n    return "hello, " + name.title() + "!"\n'


def edit(call_id: str, old: str, new: str, reason: str) -> dict:
    return turn((call_id, "edit_file", {"path": "app/greet.py", "old": old, "new": new, "reason": reason}))


def lane_a() -> list[dict]:
    return [edit("a1", '"hello " + name\n', '"hello, " + name.title()\n', "Greet with a comma, in title case"),
            finish("a2", "comma and title case")]


def lane_b() -> list[dict]:
    # b reads a few times first, so it finishes after a and is the one that conflicts
    reads = [turn((f"b_read{i}", "read_file", {"path": "app/greet.py"})) for i in range(4)]
    return [*reads, edit("b1", '"hello " + name\n', '"hello " + name + "!"\n', "End the greeting with a bang"),
            finish("b2", "exclamation mark")]


def redo_scripts() -> dict:
    """Each lane's redo, on top of the other's merged work (whichever of them conflicted)."""
    return {
        "1.2": [edit("r1", 'name.title()\n', 'name.title() + "!"\n', "End the greeting with a bang, again"),
                finish("r2", "exclamation mark on top of the comma")],
    }, {
        "1.2": [edit("s1", '"hello " + name + "!"', '"hello, " + name.title() + "!"', "Comma and title, again"),
                finish("s2", "comma and title case on top of the bang")],
    }


def setup(tmp_path: Path, script: dict, *, loops: int = 3) -> tuple[Path, Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"app/greet.py": BASE, "docs/a.md": "a\n", "docs/b.md": "b\n"})
    # both lanes write app/ on purpose (their merges conflict), so the lanes file declares it
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"max_parallel": 2, "max_helper_loops": loops,
        "overlaps": ["app/"], "lanes": {"a": {"allowed_paths": ["app/"]}, "b": {"allowed_paths": ["app/"]}}},
        "validation": {"profiles": {"default": {"commands": [["python3", "-c", "import app.greet"]]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {
        "interface_contract": "app/greet.py keeps greet(name) -> str.",
        "lanes": [{"lane": "a", "goal": "Greet with a comma and title case."},
                  {"lane": "b", "goal": "End the greeting with an exclamation mark."}]})
    return repo, lanes, plan, write_yaml(tmp_path / "replay.yaml", {"version": 1, **script})


def all_lane_commits_reachable(repo: Path, run_id: str) -> None:
    """No commit of any lane is lost: each checkpoint is on a branch that still exists."""
    shas = [e["sha"] for e in ledger.read(run_id) if e["event"] == "checkpoint"]
    assert shas
    for sha in shas:
        assert git(repo, "branch", "--contains", sha), f"checkpoint {sha} is on no branch"


async def test_four_disjoint_lanes_merge_first_pass_with_provenance(client, tmp_path):
    names = ["api", "web", "db", "docs"]
    repo = make_repo(tmp_path / "repo", {f"{n}/x.txt": "0\n" for n in names})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"max_parallel": 4, "lanes": {
        n: {"allowed_paths": [f"{n}/"]} for n in names}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [
        {"lane": n, "goal": f"Write the {n} marker."} for n in names]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {n: {1: [
        turn((f"{n}1", "write_file", {"path": f"{n}/x.txt", "content": f"{n}\n", "reason": f"Mark {n} as done"})),
        finish(f"{n}2", f"{n} marked")]} for n in names}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    assert status.first_pass_merge_rate == 1.0 and status.review.first_pass_merge_rate == 1.0
    assert status.overlaps == [] and status.resolutions == []
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
    result = await handle.result()
    merges = git(repo, "log", "--merges", "--format=%s%n%b", result.delivered_branch)
    for n in names:  # one merge commit per lane, with its goal and the reasons of its edits
        assert f"reposwarm {n} (round 1)" in merges and f"Goal: Write the {n} marker." in merges
        assert f"Mark {n} as done" in merges
        blame = git(repo, "blame", "--porcelain", result.delivered_branch, "--", f"{n}/x.txt")
        # the line is the lane's own commit (after turn 2: its write and its finish went in one activity)
        assert f"reposwarm {n}: checkpoint after turn 2" in blame, blame
    all_lane_commits_reachable(repo, run_id)


async def test_the_converger_resolves_a_conflict_keeping_both_intents(client, tmp_path):
    resolve = {"tool_calls": [{"id": "c1", "name": "resolve", "arguments": {
        "files": [{"path": "app/greet.py", "content": BOTH}],
        "explanation": "Kept a's comma and title case and b's exclamation mark."}}]}
    repo, lanes, plan, script = setup(tmp_path, {"converger": {1: [resolve]},
                                                 "lanes": {"a": {1: lane_a()}, "b": {1: lane_b()}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    assert git(repo, "show", f"{status.integration_sha}:app/greet.py") == BOTH.strip()
    assert status.first_pass_merge_rate == 0.5
    assert [o.path for o in status.overlaps] == ["app/greet.py"] and sorted(status.overlaps[0].lanes) == ["a", "b"]
    assert len(status.resolutions) == 1 and "converger resolved" in status.resolutions[0]
    assert status.review.test_report.passed
    # The resolution is a commit of its own, saying what and how; blame shows it on the merged line.
    head_message = git(repo, "log", "-1", "--format=%B", status.integration_sha)
    assert head_message.startswith("reposwarm converger: resolve") and "exclamation mark" in head_message
    blame = git(repo, "blame", "--porcelain", status.integration_sha, "--", "app/greet.py")
    assert "reposwarm converger: resolve" in blame  # line 2, the resolved one
    assert "checkpoint after turn" in blame or "initial" in blame  # line 1 keeps its older author
    await client.get_workflow_handle(run_id).terminate("test done")
    all_lane_commits_reachable(repo, run_id)


async def test_a_resolution_with_markers_is_refused_and_the_lane_is_redone(client, tmp_path):
    markers = {"tool_calls": [{"id": "c1", "name": "resolve", "arguments": {
        "files": [{"path": "app/greet.py", "content": "<<<<<<< ours\nx\n=======\ny\n>>>>>>> theirs\n"}],
        "explanation": "left it to you"}}]}
    redo_b, redo_a = redo_scripts()
    repo, lanes, plan, script = setup(tmp_path, {"converger": {1: [markers]}, "lanes": {
        "a": {1: lane_a(), **redo_a}, "b": {1: lane_b(), **redo_b}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    assert git(repo, "show", f"{status.integration_sha}:app/greet.py") == BOTH.strip()
    assert "still has conflict markers" in status.resolutions[0]
    redone = [s for s in status.lanes if s.attempt == 2]
    assert len(redone) == 1 and redone[0].state == "merged"
    # the conflicting first attempt's commits were kept on a branch, not dropped
    kept = git(repo, "branch", "--list", f"swarm/{run_id}/{redone[0].lane}-kept-*")
    assert kept
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
    await handle.result()
    all_lane_commits_reachable(repo, run_id)  # after delivery too (swarm-kept/...)
    assert git(repo, "branch", "--list", f"swarm-kept/{run_id}/*")


async def test_an_unresolvable_conflict_waits_at_review_with_both_sides_intact(client, tmp_path):
    refusal = {"content": "I cannot merge these."}  # no resolve call at all
    repo, lanes, plan, script = setup(tmp_path, {"converger": {1: [refusal]},
                                                 "lanes": {"a": {1: lane_a()}, "b": {1: lane_b()}}}, loops=1)
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    conflicted = next(s for s in status.lanes if s.state == "conflict")
    merged = next(s for s in status.lanes if s.state == "merged")
    sides = {"a": A_SIDE.strip(), "b": B_SIDE.strip()}
    assert git(repo, "show", f"{status.integration_sha}:app/greet.py") == sides[merged.lane]
    assert git(repo, "show", f"swarm/{run_id}/{conflicted.lane}:app/greet.py") == sides[conflicted.lane]
    assert any(conflicted.lane in c and "kept" in c for c in status.review.conflicts)
    assert "did not call resolve" in status.resolutions[0]
    await client.get_workflow_handle(run_id).terminate("test done")
    all_lane_commits_reachable(repo, run_id)


async def test_a_lane_changing_the_contract_surface_is_flagged(client, tmp_path):
    repo = make_repo(tmp_path / "repo", {"api/app.py": "def create_task(db, title):\n    return title\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {
        "interface_contract": "create_task(db, title) -> str stays as it is.",
        "lanes": [{"lane": "api", "goal": "Add logging to the API module."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("x1", "edit_file", {"path": "api/app.py", "old": "def create_task(db, title):",
                                  "new": "def create_task(db, title, owner):", "reason": "Sneak in an owner arg"})),
        finish("x2")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    assert len(status.review.contract_flags) == 1
    assert "create_task" in status.review.contract_flags[0] and "api/app.py" in status.review.contract_flags[0]
    await client.get_workflow_handle(run_id).terminate("test done")
    assert json.dumps(status.review.model_dump()).count("create_task") >= 1
