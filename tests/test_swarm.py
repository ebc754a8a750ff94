"""Whole swarm runs on a real dev server, real git repositories and real check commands."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from reposwarm.contracts import Phase, ReviewDecision
from reposwarm.runs import ledger
from reposwarm.runs.store import Store
from tests.helpers import (
    HINT_PYTHON,
    ROOT,
    assignment_spans,
    finish,
    git,
    make_repo,
    start_run,
    temporal_binary,
    turn,
    wait_for_phase,
    write_yaml,
)
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")

DEMO_LANES = ROOT / "reposwarm" / "demo" / "lanes.yaml"


def run_example_tests(checkout: Path) -> None:
    """The example's own validation commands, run for real on a checkout."""
    import yaml

    profile = yaml.safe_load(DEMO_LANES.read_text())["validation"]["profiles"]["default"]
    for argv in profile["commands"]:
        proc = subprocess.run(argv, cwd=checkout, capture_output=True, text=True)
        assert proc.returncode == 0, f"{argv} failed on the delivered branch:\n{proc.stdout}{proc.stderr}"


async def test_demo_end_to_end(client, temporal_address, tmp_path):
    # In a thread: the worker shares this event loop and must keep answering while the starter runs.
    proc = await asyncio.to_thread(
        subprocess.run, [sys.executable, str(ROOT / "starter.py"), "demo", "--yes"], cwd=ROOT, capture_output=True, text=True,
        env={**os.environ, "TEMPORAL_ADDRESS": temporal_address}, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    approved = re.fullmatch(r"approved round 1 of (reposwarm-taskboard-\w+); delivered (\S+) in (.+)", lines[-2])
    assert approved, lines[-2]
    run_id, branch, repo = approved.groups()
    assert lines[-1].endswith(f"starter.py status|review|report {run_id}")  # they answer with no worker running
    assert branch == f"swarm/{run_id}"
    repo_path = Path(repo)
    assert "## Checks" in proc.stdout and "**PASSED**" in proc.stdout

    # The user's checkout is as it was: on main, clean, at the initial commit.
    assert git(repo_path, "rev-parse", "--abbrev-ref", "HEAD") == "main"
    assert git(repo_path, "status", "--porcelain") == ""
    assert git(repo_path, "rev-list", "--count", "main") == "1"
    # Only the delivered branch is left; the run's worktrees are gone.
    assert git(repo_path, "branch", "--format=%(refname:short)").splitlines() == ["main", branch]
    assert len(git(repo_path, "worktree", "list").splitlines()) == 1

    # Every lane's edits are on the branch, and the example's tests pass there.
    changed = set(git(repo_path, "diff", "--name-only", "main", branch).splitlines())
    assert {"db/migrations/0002_add_priority.sql", "services/api/taskboard_api/handlers.py",
            "clients/web/src/client.js", "services/api/tests/test_priority.py",
            "clients/web/test/priority.test.js"} <= changed
    checkout = tmp_path / "delivered"
    subprocess.run(["git", "clone", "-q", "-b", branch, str(repo_path), str(checkout)], check=True)
    run_example_tests(checkout)

    # The run is listed by repository and status through the search attributes.
    runs = [w.id async for w in client.list_workflows(
        f"RepoSwarmRepo = '{repo_path}' AND RepoSwarmStatus = 'delivered'")]
    assert runs == [run_id]
    # The ledger recorded the run's spine.
    events = {e["event"] for e in ledger.read(run_id)}
    assert {"prepare", "helper_spawn", "model_call", "tool_call", "checkpoint", "merge", "validation",
            "delivery"} <= events


def two_lane_setup(tmp_path: Path) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n", "web/client.js": "export const v = 1;\n",
                                         "README.md": "demo\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_parallel": 2, "lanes": {
            "api": {"allowed_paths": ["api/"], "read_only_paths": ["web/"]},
            "web": {"allowed_paths": ["web/"], "read_only_paths": ["api/"], "depends_on": ["api"]},
        }},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "import api.app"]],
                                                "timeout_s": 60}}},
    })
    plan = write_yaml(tmp_path / "plan.yaml", {
        "interface_contract": "api/app.py exports VERSION (int) and NAME (str).",
        "lanes": [{"lane": "api", "goal": "Add NAME = 'swarm' to api/app.py."},
                  {"lane": "web", "goal": "Use NAME from the API in web/client.js."}],
    })
    return repo, lanes, plan


async def test_depends_on_lane_sees_its_dependency(client, tmp_path):
    repo, lanes, plan = two_lane_setup(tmp_path)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        "api": {1: [turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n",
                                              "new": "VERSION = 1\nNAME = 'swarm'\n",
                                              "reason": "Add NAME as the interface contract says"})),
                    finish("a2", "added NAME")]},
        "web": {1: [turn(("w1", "read_file", {"path": "api/app.py"})),
                    turn(("w2", "write_file", {"path": "web/client.js",
                                               "content": "export const name = 'swarm';\n",
                                               "reason": "Mirror the API's NAME in the client"}),
                         ("w3", "edit_file", {"path": "api/app.py", "old": "NAME = 'swarm'",
                                              "new": "NAME = 'x'"})),  # api/ is read-only for web
                    finish("w4", "client uses NAME")]},
    }})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    lanes_by_name = {lane.lane: lane for lane in status.review.lanes}
    assert status.lanes[0].state == "merged" and status.lanes[1].state == "merged"

    spans = assignment_spans(run_id)
    assert spans["web"][0][0] >= spans["api"][0][1], "the dependent lane started before its dependency finished"

    # The dependent lane read the dependency's edit in its own worktree, and could not change it.
    tool_lines = [e for e in ledger.read(run_id) if e["event"] == "tool_call" and e["lane"] == "web"]
    assert [(e["call_id"], e["outcome"]) for e in tool_lines] == [("w1", "ok"), ("w2", "ok"), ("w3", "refused")]
    assert "NAME = 'swarm'" in Store(run_id).get(tool_lines[0]["output_ref"]).decode()
    assert lanes_by_name["web"].refusals == 1
    assert git(repo, "show", f"{status.integration_sha}:api/app.py") == "VERSION = 1\nNAME = 'swarm'"
    await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).execute_update(
        SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="t"))


async def test_reject_then_replan_then_approve(client, tmp_path):
    repo, lanes, plan = two_lane_setup(tmp_path)
    round2_plan = {"interface_contract": "api/app.py also exports OWNER (str).", "summary": "add OWNER",
                   "lanes": [{"lane": "api", "goal": "Add OWNER = 'team' to api/app.py."}]}
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1,
        "planner": {2: {"content": json.dumps(round2_plan)}},
        "lanes": {
            "api": {1: [turn(("a1", "write_file", {"path": "api/app.py", "content": "VERSION = 1\nNAME = 'swarm'\n",
                                                   "reason": "Add NAME as the interface contract says"})),
                        finish("a2")],
                    2: [turn(("b1", "edit_file", {"path": "api/app.py", "old": "NAME = 'swarm'\n",
                                                  "new": "NAME = 'swarm'\nOWNER = 'team'\n",
                                                  "reason": "Add OWNER as the reviewer asked"})),
                        finish("b2", "added OWNER")]},
            "web": {1: [turn(("w1", "write_file", {"path": "web/client.js", "content": "export const v = 2;\n",
                                                   "reason": "Bump the client version for NAME"})),
                        finish("w2")]},
        }})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    status = await wait_for_phase(client, run_id, Phase.review)
    assert status.review.test_report.passed

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=False, comment="  "))
    assert "needs a comment" in refused.value.cause.message
    after = await handle.execute_update(SwarmWorkflow.review,
                                        ReviewDecision(approve=False, comment="Also export OWNER.", reviewer="ann"))
    assert after.phase != Phase.review

    status = await wait_for_phase(client, run_id, Phase.review)
    assert status.round == 2
    assert status.review.previous_comments == ["Also export OWNER."]
    assert status.review.plan.interface_contract == round2_plan["interface_contract"]
    # round 2's lane, then every earlier lane whose work the merged tree holds: an approval delivers them all
    assert [(lane.lane, lane.round) for lane in status.review.lanes] == [("api", 2), ("api", 1), ("web", 1)]
    # A Signal outside the review phase is ignored, with its reason kept.
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
    await handle.signal(SwarmWorkflow.review_signal, ReviewDecision(approve=True))
    result = await handle.result()
    assert result.rounds == 2
    final = (await handle.query(SwarmWorkflow.status))
    assert any("not waiting for review" in why for why in final.ignored_signals)
    assert [d.reviewer for d in final.decisions] == ["ann", "ann"]
    text = git(repo, "show", f"{result.delivered_branch}:api/app.py")
    assert "NAME = 'swarm'" in text and "OWNER = 'team'" in text
    assert git(repo, "show", f"{result.delivered_branch}:web/client.js") == "export const v = 2;"
    with pytest.raises(RPCError, match="workflow execution already completed"):  # no more decisions
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))


async def test_out_of_bounds_writes_are_refused_and_the_lane_finishes(client, tmp_path):
    repo, lanes, plan = two_lane_setup(tmp_path)
    (tmp_path / "outside.txt").write_text("untouched\n")
    attempts = [
        ("x1", "write_file", {"path": "web/evil.js", "content": "x"}),          # another lane's slice
        ("x2", "write_file", {"path": "../outside.txt", "content": "pwned"}),   # outside the repository
        ("x3", "write_file", {"path": str(tmp_path / "outside.txt"), "content": "pwned"}),  # absolute
        ("x4", "write_file", {"path": ".git/config", "content": "pwned"}),      # git internals
        ("x5", "delete_file", {"path": "README.md"}),                            # outside allowed paths
        ("x6", "edit_file", {"path": "web/client.js", "old": "1", "new": "2"}),  # read-only for api
        ("x7", "read_file", {"path": ".git/config"}),
    ]
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        "api": {1: [turn(*attempts), turn(("ok1", "write_file", {"path": "api/app.py",
                                                                "content": "VERSION = 1\nNAME = 'swarm'\n",
                                                                "reason": "Add NAME as the contract says"})),
                    finish("ok2")]},
        "web": {1: [finish("w1", "nothing to do")]},
    }})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    api = next(lane for lane in status.review.lanes if lane.lane == "api")
    assert api.status.value == "done"
    assert api.refusals == len(attempts)
    assert [e.path for e in api.edits] == ["api/app.py"]
    refused = [e for e in ledger.read(run_id) if e["event"] == "tool_call" and e["outcome"] == "refused"]
    assert sorted(e["call_id"] for e in refused) == [a[0] for a in attempts]
    assert (tmp_path / "outside.txt").read_text() == "untouched\n"
    assert git(repo, "show", f"{status.integration_sha}:README.md") == "demo"
    assert git(repo, "show", f"{status.integration_sha}:web/client.js") == "export const v = 1;"
    await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).terminate("test done")


async def test_user_checkout_is_never_touched(client, tmp_path):
    repo, lanes, plan = two_lane_setup(tmp_path)
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "api" / "app.py").write_text("VERSION = 1  # work in progress\n")  # unstaged change
    (repo / "web" / "client.js").write_text("export const v = 99;\n")
    git(repo, "add", "web/client.js")  # a staged change
    (repo / "notes.txt").write_text("untracked\n")  # an untracked file
    before = {
        "head": git(repo, "rev-parse", "HEAD"), "branch": git(repo, "rev-parse", "--abbrev-ref", "HEAD"),
        "status": git(repo, "status", "--porcelain"), "staged": git(repo, "diff", "--cached"),
        "unstaged": git(repo, "diff"), "branches": git(repo, "for-each-ref", "--format=%(refname) %(objectname)"),
    }
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        "api": {1: [turn(("a1", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                               "reason": "Bump the version for the test run"})), finish("a2")]},
        "web": {1: [turn(("w1", "write_file", {"path": "web/client.js", "content": "export const v = 2;\n",
                                               "reason": "Bump the client for the test run"})), finish("w2")]},
    }})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.review)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
    result = await handle.result()

    after = {
        "head": git(repo, "rev-parse", "HEAD"), "branch": git(repo, "rev-parse", "--abbrev-ref", "HEAD"),
        "status": git(repo, "status", "--porcelain"), "staged": git(repo, "diff", "--cached"),
        "unstaged": git(repo, "diff"),
        "branches": "\n".join(line for line in git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
                              .splitlines() if not line.startswith(f"refs/heads/{result.delivered_branch} ")),
    }
    assert after == before
    assert (repo / "notes.txt").read_text() == "untracked\n"
    # The delivered branch starts from the committed base, not from the uncommitted work.
    assert git(repo, "show", f"{result.delivered_branch}:api/app.py") == "VERSION = 2"


async def test_never_more_than_max_parallel_lanes_and_signal_review(client, tmp_path):
    repo = make_repo(tmp_path / "repo", {f"{n}/f.txt": "0\n" for n in "abc"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"max_parallel": 2, "lanes": {
        n: {"allowed_paths": [f"{n}/"]} for n in "abc"}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "none", "lanes": [
        {"lane": n, "goal": f"Write 1 to {n}/f.txt."} for n in "abc"]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        n: {1: [turn((f"{n}1", "list_dir", {"path": n})), turn((f"{n}2", "search", {"pattern": "0"})),
                turn((f"{n}3", "write_file", {"path": f"{n}/f.txt", "content": "1\n",
                                              "reason": "Write 1 as the goal says"})),
                finish(f"{n}4")]} for n in "abc"}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review)
    assert status.test_report is None  # no check profile configured: nothing run, and the package says so
    spans = [span for n in "abc" for span in assignment_spans(run_id)[n]]
    assert len(spans) == 3
    for t, _ in spans:  # at any lane's start, at most max_parallel lanes are open
        assert sum(1 for s, e in spans if s <= t < e) <= 2
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    # The Web UI can send Signals: a rejection without a comment is ignored with its reason, an approval works.
    await handle.signal(SwarmWorkflow.review_signal, ReviewDecision(approve=False))
    await handle.signal(SwarmWorkflow.review_signal, ReviewDecision(approve=True, reviewer="ui"))
    result = await handle.result()
    final = await handle.query(SwarmWorkflow.status)
    assert any("needs a comment" in why for why in final.ignored_signals)
    assert [d.reviewer for d in final.decisions] == ["ui"]
    assert all(git(repo, "show", f"{result.delivered_branch}:{n}/f.txt") == "1" for n in "abc")


async def test_approve_from_the_temporal_cli(client, temporal_address, tmp_path):
    repo = make_repo(tmp_path / "repo", {"a/f.txt": "0\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"a": {"allowed_paths": ["a/"]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "none",
                                               "lanes": [{"lane": "a", "goal": "Write 1 to a/f.txt."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"a": {1: [
        turn(("c1", "write_file", {"path": "a/f.txt", "content": "1\n", "reason": "Write 1 as the goal says"})),
        finish("c2")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.review)

    def cli(payload: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [temporal_binary(), "workflow", "update", "execute", "--address", temporal_address,
             "--workflow-id", run_id, "--name", "review", "--input", payload],
            capture_output=True, text=True, timeout=60)

    refused = await asyncio.to_thread(cli, '{"approve": false}')
    assert refused.returncode != 0 and "needs a comment" in refused.stdout + refused.stderr
    approved = await asyncio.to_thread(cli, '{"approve": true, "reviewer": "cli"}')
    assert approved.returncode == 0, approved.stderr
    result = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).result()
    assert git(repo, "show", f"{result.delivered_branch}:a/f.txt") == "1"


async def test_status_of_a_run_no_worker_serves_says_so_in_one_line(client, temporal_address, tmp_path, monkeypatch):
    queue = f"nobody-{os.getpid()}-{tmp_path.name[-6:]}"  # no worker polls this queue
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    repo = make_repo(tmp_path / "repo", {"src/a.txt": "a\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"src": {"allowed_paths": ["src/"]}}}})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {}})
    run_id = await start_run(client, repo, lanes, script)
    try:
        env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "REPOSWARM_TASK_QUEUE": queue}
        proc = await asyncio.to_thread(subprocess.run, [sys.executable, str(ROOT / "starter.py"), "status", run_id],
                                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert "Traceback" not in proc.stderr, proc.stderr
        line = proc.stderr.strip().splitlines()[-1]
        assert line == (f"error: no worker is polling task queue {queue!r}, so run {run_id} has not begun; start one "
                        f"({HINT_PYTHON} {ROOT / 'worker.py'}, with the same TEMPORAL_ADDRESS and REPOSWARM_TASK_QUEUE) and "
                        "try again"), line
    finally:
        await client.get_workflow_handle(run_id).terminate("test done")
