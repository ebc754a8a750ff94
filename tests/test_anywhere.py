"""A run answers from anywhere (issue 22): through the Temporal server alone, with or without a worker, during
and after the run; no command waits in silence; a decision never applies itself behind the user's back.

Each test runs `worker.py` in a process of its own on a task queue of its own (so "no worker" is true), and the
CLI as a user runs it, in subprocesses with an empty REPOSWARM_HOME (so nothing comes from a worker's disk).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from reposwarm.contracts import Phase
from tests.helpers import ROOT, WorkerProcess, finish, make_repo, turn, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.timeout(240)

# The waits a command makes for a worker that has just stopped (it still counts as polling for a minute), made
# shorter where a test waits them out: the same answer comes after them, sooner. Their defaults are 8 s for a query
# and 20 s for a decision (reposwarm/cli/run_state.py QUERY_TIMEOUT_S, reposwarm/cli/runs.py NOT_AFTER_S).
QUERY_WAIT_S, DECISION_WAIT_S = 2, 3
SHORT_WAITS = {"REPOSWARM_QUERY_TIMEOUT_S": str(QUERY_WAIT_S), "REPOSWARM_DECISION_WAIT_S": str(DECISION_WAIT_S)}


def cli(address: str, queue: str, home: Path, *args: str, timeout: float = 60, console_script: bool = False,
        extra_env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """The CLI as a user runs it, from another folder and with its own (empty) home; returns it and its seconds."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": address, "REPOSWARM_TASK_QUEUE": queue,
           "REPOSWARM_HOME": str(home), "HOME": str(home), "REPOSWARM_REVIEWER": "ana", **(extra_env or {})}
    argv = [str(Path(sys.executable).parent / "reposwarm")] if console_script else [sys.executable,
                                                                                    str(ROOT / "starter.py")]
    began = time.monotonic()
    proc = subprocess.run([*argv, *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=home)
    return proc, time.monotonic() - began


def watch_on_a_terminal(address: str, queue: str, home: Path, run_id: str) -> str:
    """`watch` with a terminal for its output: one view drawn in place (rich), a row per lane, the next step."""
    import os
    import pty

    main_fd, tty_fd = pty.openpty()
    env = {"PATH": "/usr/bin:/bin", "TEMPORAL_ADDRESS": address, "REPOSWARM_TASK_QUEUE": queue,
           "REPOSWARM_HOME": str(home), "HOME": str(home), "TERM": "xterm", "COLUMNS": "120"}
    proc = subprocess.Popen([sys.executable, str(ROOT / "starter.py"), "watch", run_id], stdout=tty_fd,
                            stderr=subprocess.PIPE, env=env, cwd=home)
    os.close(tty_fd)
    out = b""
    while True:
        try:
            chunk = os.read(main_fd, 4096)
        except OSError:  # the other end closed
            break
        if not chunk:
            break
        out += chunk
    assert proc.wait(timeout=60) == 0, proc.stderr.read() if proc.stderr else ""
    text = out.decode(errors="replace")
    assert "lane" in text and "now" in text and "tokens" in text and "api" in text and "merged" in text
    assert "waiting for review:" in text
    return text


def setup(tmp_path: Path, *, planner: dict | None = None) -> tuple[Path, Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n", "calc/__init__.py": "", "README.md": "x\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/", "calc/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "import api.app"]],
                                                "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {
        "interface_contract": "api/app.py exports NAME.",
        "lanes": [{"lane": "api", "goal": "Add NAME to api/app.py and keep calc/__init__.py as it is."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, **({"planner": planner} if planner else {}),
        "lanes": {"api": {r: [turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n",
                                                        "new": f"VERSION = 1\nNAME = 'r{r}'\n",
                                                        "reason": f"Add NAME, as round {r} asks"})),
                              finish("a2", "added NAME")] for r in (1, 2, 3)}}})
    return repo, lanes, plan, script


def start(address: str, queue: str, home: Path, repo: Path, lanes: Path, plan: Path, script: Path) -> str:
    proc, _ = cli(address, queue, home, "run", "--repo", str(repo), "--task", "Add NAME to the API",
                  "--lanes", str(lanes), "--plan", str(plan), "--model", f"replay:{script}")
    assert proc.returncode == 0, proc.stderr
    return next(line.split()[1] for line in proc.stdout.splitlines() if line.startswith("run: "))


async def wait_phase(client, run_id: str, *phases: Phase, timeout: float = 90):
    import asyncio

    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            status = await handle.query(SwarmWorkflow.status)
            if status.phase in phases:
                return status
        except Exception:  # noqa: BLE001 - not started yet
            pass
        await asyncio.sleep(0.3)
    raise AssertionError(f"{run_id} did not reach {phases}")


async def test_a_closed_run_answers_every_command_with_no_worker_and_no_home(client, temporal_address, tmp_path):
    queue = f"anywhere-{uuid.uuid4().hex[:6]}"
    repo, lanes, plan, script = setup(tmp_path)
    worker = WorkerProcess(temporal_address, queue, tmp_path / "worker-home").start()
    try:
        await worker.ready()
        run_id = start(temporal_address, queue, tmp_path / "cli", repo, lanes, plan, script)
        await wait_phase(client, run_id, Phase.review)
        assert "\x1b[" in watch_on_a_terminal(temporal_address, queue, tmp_path / "cli", run_id)
        approved, _ = cli(temporal_address, queue, tmp_path / "cli", "approve", run_id)
        assert approved.returncode == 0, approved.stderr
        assert f"delivered swarm/{run_id}" in approved.stdout  # approve waits for the delivered branch
    finally:
        worker.stop()

    elsewhere = tmp_path / "elsewhere"  # another machine: no worker, no home, not the worker's folder
    status, seconds = cli(temporal_address, queue, elsewhere, "status", run_id)
    assert status.returncode == 0, status.stderr
    assert "delivered" in status.stdout and f"ended: delivered swarm/{run_id}" in status.stdout
    assert seconds < 10
    review, _ = cli(temporal_address, queue, elsewhere, "review", run_id, "--json")
    assert review.returncode == 0, review.stderr
    package = json.loads(review.stdout)  # the note goes to stderr: stdout stays JSON
    assert package["run_id"] == run_id and package["lanes"][0]["lane"] == "api"
    report, _ = cli(temporal_address, queue, elsewhere, "report", run_id, "--json")
    assert report.returncode == 0, report.stderr
    figures = json.loads(report.stdout)
    assert figures["source"] == "server" and figures["changesets"] == 1
    assert figures["lanes"][0]["lane"] == "api" and figures["lanes"][0]["tool_calls"] == 2
    assert figures["rounds"][0]["decision"] == "approved by ana"
    assert 0 < figures["rounds"][0]["parallel_efficiency"] <= 1
    explained, _ = cli(temporal_address, queue, elsewhere, "explain", run_id, "api/app.py")
    assert explained.returncode == 0, explained.stderr
    assert "lane api, round 1, turn 1: modify: Add NAME, as round 1 asks" in explained.stdout
    # an ended run says how it ended, not "no such run"
    again, _ = cli(temporal_address, queue, elsewhere, "approve", run_id)
    assert again.returncode == 2 and "has ended (delivered" in again.stderr
    # a closed pipe ends the command quietly
    piped = subprocess.run(f"{sys.executable} {ROOT / 'starter.py'} status {run_id} | head -c 10",
                           shell=True, capture_output=True, text=True, timeout=60,
                           env={"TEMPORAL_ADDRESS": temporal_address, "HOME": str(elsewhere), "PATH": "/usr/bin:/bin"})
    assert "Traceback" not in piped.stderr and "BrokenPipe" not in piped.stderr


async def test_with_no_worker_run_wait_and_watch_say_so_in_one_line(client, temporal_address, tmp_path):
    queue = f"idle-{uuid.uuid4().hex[:6]}"  # never polled
    repo, lanes, plan, script = setup(tmp_path)
    home = tmp_path / "cli"
    waited, seconds = cli(temporal_address, queue, home, "run", "--repo", str(repo), "--task", "x", "--lanes",
                          str(lanes), "--plan", str(plan), "--model", f"replay:{script}", "--wait",
                          console_script=True)
    assert waited.returncode == 2 and seconds < 15
    assert waited.stderr.count("\n") == 1 and f"no worker is polling task queue {queue!r}" in waited.stderr
    assert "nothing was started" in waited.stderr and "reposwarm worker" in waited.stderr  # the hint as it was run
    run_id = start(temporal_address, queue, home, repo, lanes, plan, script)  # allowed: it starts when one runs
    watched, seconds = cli(temporal_address, queue, home, "watch", run_id)
    assert watched.returncode == 2 and seconds < 15
    assert watched.stderr.strip().count("\n") == 0 and "no worker is polling" in watched.stderr
    assert f"({sys.executable} {ROOT / 'worker.py'}," in watched.stderr  # pasted anywhere, it runs


async def test_an_abandoned_approval_never_applies_later_and_a_queued_one_says_so(client, temporal_address,
                                                                                 tmp_path):
    queue = f"decide-{uuid.uuid4().hex[:6]}"
    repo, lanes, plan, script = setup(tmp_path)
    home = tmp_path / "cli"
    worker = WorkerProcess(temporal_address, queue, tmp_path / "worker-home").start()
    await worker.ready()
    run_id = start(temporal_address, queue, home, repo, lanes, plan, script)
    await wait_phase(client, run_id, Phase.review)
    worker.stop()

    # A running run with no worker answers from its record, and says so.
    status, seconds = cli(temporal_address, queue, home, "status", run_id, extra_env=SHORT_WAITS)
    assert status.returncode == 0 and "review" in status.stdout and "record on the Temporal server" in status.stdout
    assert f"waiting up to {QUERY_WAIT_S} s for a worker to answer" in status.stderr, status.stderr
    # The worker just left, so the server still lists its poller: the approval is sent as an Update, and no worker
    # takes it. The command gives up after its wait, saying the decision expired and will not apply later.
    approved, seconds = cli(temporal_address, queue, home, "approve", run_id, extra_env=SHORT_WAITS)
    assert approved.returncode == 2 and DECISION_WAIT_S <= seconds < DECISION_WAIT_S + 20, (seconds, approved.stderr)
    assert "expired" in approved.stderr and "will not apply later" in approved.stderr
    assert f"not taken within {DECISION_WAIT_S} s" in approved.stderr, approved.stderr
    worker = WorkerProcess(temporal_address, queue, tmp_path / "worker-home").start()
    try:
        await worker.ready()
        import asyncio

        await asyncio.sleep(5)  # the worker takes the held Update now: its deadline has passed, so it is refused
        status_now = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
        assert status_now.phase == Phase.review and status_now.decisions == []
    finally:
        worker.stop()

    # Queued on purpose: a Signal Temporal holds, said plainly, applied when a worker runs.
    queued, _ = cli(temporal_address, queue, home, "approve", run_id, "--queue")
    assert queued.returncode == 0 and queued.stdout.startswith("queued:") and "applies when a worker" in queued.stdout
    worker = WorkerProcess(temporal_address, queue, tmp_path / "worker-home").start()
    try:
        result = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).result()
        assert result.delivered_branch == f"swarm/{run_id}"
    finally:
        worker.stop()


async def test_a_planning_failure_after_a_rejection_returns_the_run_to_review(client, temporal_address, tmp_path):
    """The replay script has no planner reply for round 2: planning fails. The reviewed round comes back to review
    with the planner's error; the reviewer hands in the next plan with `reject --plan`; round 3 runs it."""
    queue = f"replan-{uuid.uuid4().hex[:6]}"
    repo, lanes, plan, script = setup(tmp_path)
    home = tmp_path / "cli"
    worker = WorkerProcess(temporal_address, queue, tmp_path / "worker-home").start()
    try:
        await worker.ready()
        began = time.monotonic()  # round 1's lanes run after this and before the review is seen
        run_id = start(temporal_address, queue, home, repo, lanes, plan, script)
        await wait_phase(client, run_id, Phase.review)
        spans = [time.monotonic() - began]
        rejected, _ = cli(temporal_address, queue, home, "reject", run_id, "--comment", "Name it better.")
        assert rejected.returncode == 0, rejected.stderr
        status = await wait_phase(client, run_id, Phase.review)
        assert status.round == 2 and "planning round 2 failed" in status.review.planning_error
        assert "no planner reply for round 2" in status.review.planning_error
        assert status.review.round == 1  # the reviewed round, still decidable
        metadata = await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata")
        details = str(metadata)
        assert "WAITING FOR YOUR REVIEW" in details and "review_signal" in details
        assert f"reposwarm approve {run_id}" in details and "planning round 2 failed" in details

        bad = write_yaml(tmp_path / "bad-plan.yaml", {"interface_contract": "x",
                                                      "lanes": [{"lane": "nope", "goal": "something to do"}]})
        refused, _ = cli(temporal_address, queue, home, "reject", run_id, "--comment", "this plan", "--plan",
                         str(bad))
        assert refused.returncode == 2 and "unknown lane 'nope'" in refused.stderr, refused.stderr
        given = write_yaml(tmp_path / "plan3.yaml", {
            "interface_contract": "api/app.py exports NAME = 'r3'.",
            "lanes": [{"lane": "api", "goal": "Set NAME in api/app.py to the round's name."}]})
        began = time.monotonic()  # round 3's lanes run after this and before its review is seen
        handed, _ = cli(temporal_address, queue, home, "reject", run_id, "--comment", "Use my plan.", "--plan",
                        str(given))
        assert handed.returncode == 0, handed.stderr
        status = await wait_phase(client, run_id, Phase.review)
        spans.append(time.monotonic() - began)
        assert status.round == 3 and status.review.plan.interface_contract == "api/app.py exports NAME = 'r3'."
        assert not status.review.planning_error
        approved, _ = cli(temporal_address, queue, home, "approve", run_id)
        assert approved.returncode == 0 and "delivered" in approved.stdout, approved.stderr
    finally:
        worker.stop()
    report, _ = cli(temporal_address, queue, tmp_path / "elsewhere", "report", run_id, "--json")
    figures = json.loads(report.stdout)
    rounds = figures["rounds"]
    assert [r["round"] for r in rounds] == [1, 2, 3]
    assert "planning round 2 failed" in rounds[1]["decision"] and rounds[2]["decision"] == "approved by ana"
    # Parallel efficiency over lane-running time only: each round's figure is its lane's own seconds over the
    # time its lanes were running, and that time ends before the round's review (the review waits, planning and
    # checks are outside it). What the figure reaches on this machine is the bench's (bench/bench_swarm.py).
    ran = [rounds[0], rounds[2]]
    assert [r["lanes"] for r in rounds] == [1, 0, 1] and rounds[1]["parallel_efficiency"] is None  # none ran
    for r, seen_in_review_after in zip(ran, spans, strict=True):
        assert 0 < r["busy_s"] <= r["lanes_s"] < seen_in_review_after, (r, seen_in_review_after)
        assert r["parallel_efficiency"] == round(r["busy_s"] / (r["lanes"] * r["lanes_s"]), 3)
    assert figures["parallel_efficiency"] == round(sum(r["busy_s"] for r in ran) / sum(r["lanes_s"] for r in ran), 3)
    # report --home shows the same figures (the host's ledger adds its retries, issue 33.5)
    ledger, _ = cli(temporal_address, queue, tmp_path / "elsewhere", "report", run_id, "--json", "--home",
                    str(tmp_path / "worker-home"))
    assert ledger.returncode == 0, ledger.stderr
    hosted = json.loads(ledger.stdout)
    assert hosted["rounds"] == rounds and hosted["parallel_efficiency"] == figures["parallel_efficiency"]
    # The worker host's ledger on its own: one lane span a round, so the lanes ran the whole time lanes were running.
    from reposwarm.runs import metrics
    from tests.helpers import home_ledger

    own = metrics.report(run_id, [e for e in home_ledger(tmp_path / "worker-home") if e.get("run") == run_id])
    assert [(r.round, r.lanes) for r in own.rounds] == [(1, 1), (3, 1)]
    assert all(r.busy_s == r.lanes_s > 0 and r.parallel_efficiency == 1.0 for r in own.rounds)
    assert own.parallel_efficiency == 1.0


def test_free_text_in_the_web_ui_reads_as_written() -> None:
    """The Web UI renders summaries and details as Markdown: `calc/__init__.py` in a goal must not turn bold."""
    from markdown_it import MarkdownIt

    from reposwarm.review.webui import md_escape, static_details

    goal = "Edit calc/__init__.py and *not* calc/[x].py <b>"
    html = MarkdownIt().render(md_escape(goal))
    assert "<strong>" not in html and "<em>" not in html and "<b>" not in html
    assert "calc/__init__.py" in html and "*not*" in html
    details = MarkdownIt().render(static_details(goal, "/src/repo", "a" * 40, ["api_layer"], "from a plan file",
                                                 "openai:gpt-4.1"))
    assert "<strong>Task:</strong> Edit calc/__init__.py and *not* calc/[x].py &lt;b&gt;</p>" in details
