"""A review a person can act on (issue 33.5): the round's figures as status has them, each lane's passes, every
lane being approved across rounds, the bounded diff with its command, the verdict first, the moved base, a queued
decision in status, report and report --home agreeing, and an HTML error page shown as one line."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

import pytest

from reposwarm.cli.worker import make_worker
from reposwarm.contracts import LaneState, Phase, Plan, ReviewDecision, ReviewPackage, SwarmStatus
from reposwarm.review.package import DIFF_LINES, render_review, render_status
from tests.helpers import ROOT, finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from tests.test_validation import BREAK, lanes_yaml, plan, repo_with_tests
from workflows.swarm import SwarmWorkflow

LONG = "".join(f"line {i}\n" for i in range(600))  # a file longer than the package's diff holds


def cli_now(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TEMPORAL_ADDRESS": address, "REPOSWARM_REVIEWER": "ana"}
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, env=env)


async def cli(address: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI as a user runs it, in a thread: the worker in this process goes on meanwhile."""
    return await asyncio.to_thread(cli_now, address, *args)


def write(call_id: str, path: str, content: str) -> dict:
    return turn((call_id, "write_file", {"path": path, "content": content, "reason": f"Write {path} for the goal"}))


@pytest.mark.usefixtures("worker")
async def test_a_repaired_and_rolled_back_lane_shows_the_pass_that_wrote_the_file(client, tmp_path):
    """The lane breaks a test, its repair writes nothing, the gate rolls back: the review still shows the first
    pass's turns and file, and its usage is status's."""
    repo = repo_with_tests(tmp_path)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"calc": {
        1: [BREAK, finish("b2", "sub added")],
        "1.2": [finish("g2", "nothing to fix, I think")],  # the repair: one turn, no file
    }}})
    run_id = await start_run(client, repo, lanes_yaml(tmp_path, fails=2), script, plan=plan(tmp_path))
    status = await wait_for_phase(client, run_id, Phase.review, timeout=120)
    package = status.review
    (calc,) = package.lanes
    assert [(p.turns, [e.path for e in p.edits]) for p in calc.passes] == [(2, ["calc/ops.py"]), (1, [])]
    assert calc.turns == 3 and calc.dispatches == 2 and [e.path for e in calc.edits] == ["calc/ops.py"]
    assert calc.in_tree is False  # rolled back: its branch head is not in the merged tree
    assert package.usage == status.usage and package.usage.model_calls == 3
    assert package.rollbacks == 1 and package.merged == 0 and package.nothing_merged
    assert status.rounds[-1].merged == 0 and status.rounds[-1].rollbacks == 1
    markdown = render_review(package)
    assert markdown.splitlines()[2].startswith("Verdict: nothing merged in round 1")
    assert "- first pass: 2 turns, 2 tool calls, 1 files (`calc/ops.py`)" in markdown
    assert "- repair 1: 1 turns, 1 tool calls, 0 files (no file)" in markdown
    assert "**not in the merged tree** (rolled back)" in markdown
    assert f"The run so far (as `status` shows it: planning, lanes and converger): {status.usage.model_calls} " \
           "model calls" in markdown
    shown = render_status(status)
    assert "3 turns, 3 tool calls, 1 files" in shown and "in 2 passes" in shown
    assert "merged this round: 0 lane(s); 1 rollback(s)" in shown
    assert f"usage: {package.usage.model_calls} model calls" in shown
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_a_second_round_review_holds_every_lane_the_diff_the_moved_base_and_a_queued_decision(
        client, tmp_path, temporal_address, reposwarm_home, monkeypatch):
    queue = f"figures-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n", "web/page.txt": "page\n", "README.md": "x\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["web/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "pass"]], "timeout_s": 60}}}})
    first = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [
        {"lane": "api", "goal": "Set VERSION to 2."}, {"lane": "web", "goal": "Title the page."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        "api": {1: [write("a1", "api/app.py", "VERSION = 2\n"), finish("a2", "VERSION is 2")]},
        "web": {1: [write("w1", "web/page.txt", "Title\npage\n"), finish("w2", "titled")],
                2: [write("w3", "web/long.txt", LONG), finish("w4", "the long page")]}}})
    async with make_worker(client, queue):
        run_id = await start_run(client, repo, lanes, script, plan=first, task="Version and title")
        handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
        await wait_for_phase(client, run_id, Phase.review)
        (repo / "README.md").write_text("the team's readme\n")  # main moves before round 2 ends
        git(repo, "commit", "-q", "-am", "team: readme")
        second = Plan.model_validate({"interface_contract": "-", "lanes": [
            {"lane": "web", "goal": "Add the long page web/long.txt."}]})
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(
            approve=False, comment="Add the long page too.", reviewer="bo", plan=second))
        status = await wait_for_phase(client, run_id, Phase.review)
        reviewed = await cli(temporal_address, "review", run_id)
        live_status = await cli(temporal_address, "status", run_id)
    package = status.review
    assert package.round == 2
    # every lane being approved: round 2's web, and round 1's api and web, whose work the merged tree holds
    assert sorted((ln.lane, ln.round) for ln in package.lanes) == [("api", 1), ("web", 1), ("web", 2)]
    assert all(ln.in_tree for ln in package.lanes)
    markdown = reviewed.stdout
    assert reviewed.returncode == 0, reviewed.stderr
    lines = markdown.splitlines()
    assert lines[0] == f"# Review: {run_id} (round 2)"
    assert lines[2] == (f"Verdict: checks PASSED, 1 lane merged (and 2 lanes from earlier rounds) — approve: "
                        f"reposwarm approve {run_id}, or reject: reposwarm reject {run_id} --comment \"...\"")
    assert "### api (round 1): merged" in markdown and "### web (round 1): merged" in markdown
    # the diff, bounded, with the command that shows it whole
    command = f"git -C {repo} diff {package.base_sha[:12]} swarm/{run_id}/integration"
    assert f"`{command}`" in markdown and "## Diff" in markdown
    assert package.diff_truncated and package.diff_lines > DIFF_LINES
    assert package.diff.count("\n") <= DIFF_LINES and len(package.diff.encode()) <= 40_000
    assert "+VERSION = 2" in package.diff and "+Title" not in package.diff  # (web/page.txt comes after the cut)
    whole = subprocess.run(command.split(), capture_output=True, text=True, check=True).stdout
    assert len(whole.splitlines()) == package.diff_lines and "+Title" in whole
    assert f"the first {package.diff.count(chr(10))} of its {package.diff_lines} lines" in markdown
    # the moved base, in the review and in status
    assert package.base_moved and "moved by 1 commit(s)" in package.base_moved
    assert f"**The base moved:** {package.base_moved}" in markdown
    assert live_status.returncode == 0 and f"base moved: {package.base_moved}" in live_status.stdout

    # no worker: an approval queued as a Signal is said by status
    queued = await cli(temporal_address, "approve", run_id, "--queue")
    assert queued.returncode == 0 and queued.stdout.startswith("queued:"), queued.stderr
    waiting = await cli(temporal_address, "status", run_id)
    assert waiting.returncode == 0, waiting.stderr
    (said,) = [line for line in waiting.stdout.splitlines() if line.startswith("a decision is queued")]
    assert said.startswith("a decision is queued: approve by ana at ") and said.endswith(
        " UTC; it applies when a worker runs"), said
    assert f"base moved: {package.base_moved}" in waiting.stdout

    # a worker takes it; then report and report --home agree on every figure both show
    async with make_worker(client, queue):
        result = await handle.result()
    assert result.delivered_branch
    served = await cli(temporal_address, "report", run_id, "--json")
    hosted = await cli(temporal_address, "report", run_id, "--json", "--home", str(reposwarm_home))
    assert served.returncode == 0 and hosted.returncode == 0, (served.stderr, hosted.stderr)
    a, b = json.loads(served.stdout), json.loads(hosted.stdout)
    ledger_only = {"source", "retries", "from_ledger", "note"}
    assert {k: v for k, v in a.items() if k not in ledger_only | {"lanes"}} == \
        {k: v for k, v in b.items() if k not in ledger_only | {"lanes"}}
    assert [{k: v for k, v in f.items() if k != "retries"} for f in a["lanes"]] == \
        [{k: v for k, v in f.items() if k != "retries"} for f in b["lanes"]]
    assert b["from_ledger"] == ["retries"] and b["retries"] is not None and a["retries"] is None
    assert a["rounds"][0]["merged"] == 2 and a["rounds"][1]["merged"] == 1
    text = (await cli(temporal_address, "report", run_id, "--home", str(reposwarm_home))).stdout
    assert "from this host's ledger: retries" in text


HTML_503 = ("openai model: HTTP 503: <!DOCTYPE html>\n<html>\n<head><title>503 Service Temporarily Unavailable</title>"
            "</head>\n<body>\n<center><h1>503 Service Temporarily Unavailable</h1></center>\n<hr><center>nginx</center>"
            "\n</body>\n</html>\n")


def test_an_html_error_page_is_one_line_in_status_review_and_watch():
    from datetime import UTC, datetime
    from types import SimpleNamespace

    from reposwarm.cli import live

    status = SwarmStatus(run_id="r", repo_path="/repo", task="t", phase=Phase.failed, round=1, error=HTML_503,
                         provider_wait=f"waiting for openai since 10:00 UTC (retry 3, next in 8 s): {HTML_503[:160]}",
                         lanes=[LaneState(lane="api", state="failed", reason=f"model error: {HTML_503}")])
    shown = render_status(status).splitlines()
    for start in ("waiting for openai", "error: ", "  api"):
        (line,) = [x for x in shown if x.startswith(start)]
        assert "503 Service Temporarily Unavailable" in line and "<" not in line, line
    assert not any("nginx" in x or "</" in x for x in shown)
    assert "error: openai model: HTTP 503: 503 Service Temporarily Unavailable (an HTML page)" in shown
    view = SimpleNamespace(status=status, description=SimpleNamespace(start_time=datetime.now(UTC), close_time=None))
    watched = live.line(view)  # type: ignore[arg-type]
    assert "\n" not in watched and "<" not in watched and "503 Service" in watched
    step = live.step_text(status.lanes[0], 0.0)
    assert "<" not in step and "\n" not in step and len(step) <= 60, step
    package = ReviewPackage.model_validate({
        "run_id": "r", "round": 1, "task": "t", "repo_path": "/repo", "base_sha": "a" * 40, "integration_sha": "b" * 40,
        "plan": {"interface_contract": "-", "lanes": [{"lane": "api", "goal": "g"}]},
        "lanes": [{"lane": "api", "goal": "g", "status": "failed", "reason": f"model error: {HTML_503}"}]})
    (heading,) = [x for x in render_review(package).splitlines() if x.startswith("### api")]
    assert heading == "### api: failed (model error: openai model: HTTP 503: 503 Service Temporarily Unavailable " \
                      "(an HTML page))"


async def test_the_ledger_alone_says_so_when_the_server_has_no_record(tmp_path, reposwarm_home):
    """report --home for a run the server does not know: the ledger's figures, said to be the ledger's alone."""
    from reposwarm.runs import ledger

    run_id = f"reposwarm-gone-{uuid.uuid4().hex[:6]}"
    ledger.record(run_id, "merge", key=f"{run_id}/m", lane="api", merged=True)
    done = await cli("127.0.0.1:1", "report", run_id, "--home", str(reposwarm_home))
    assert done.returncode == 0, done.stderr
    assert "from this host's ledger alone (cannot reach Temporal at 127.0.0.1:1" in done.stdout
