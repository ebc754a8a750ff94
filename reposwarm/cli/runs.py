"""The run commands: start a swarm run (run, demo), follow it (watch, status, list), review it (review,
approve, reject). They reach the run through Temporal, so they work from any machine that reaches the
cluster; `review` alone falls back to the package saved under the worker host's REPOSWARM_HOME once the
run has left Temporal.

Every input is checked here, before any workflow starts; a problem is a UserError (one line, exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowUpdateFailedError,
)
from temporalio.common import TypedSearchAttributes
from temporalio.service import RPCError, RPCStatusCode

from reposwarm import gitcmd
from reposwarm.cli.common import (
    UserError,
    check_repo,
    client_or_die,
    git_out,
    load_config,
    repo_slug,
    resolve_model,
    run_model,
    ui_url,
)
from reposwarm.client import task_queue
from reposwarm.config import load_plan_file
from reposwarm.contracts import (
    Phase,
    ReviewDecision,
    ReviewReceipt,
    SwarmRequest,
    SwarmResult,
    SwarmStatus,
)
from reposwarm.runs.review_package import render_review, render_status
from reposwarm.runs.store import run_dir
from workflows.lane import LaneWorkflow
from workflows.swarm import REPO_ATTR, STATUS_ATTR, SwarmWorkflow, search_attributes

HERE = Path(__file__).resolve().parents[2]  # the checkout: examples/ lives beside reposwarm/
DEMO = HERE / "examples" / "demo"
DEMO_TASK = "Add a priority (low|normal|high, default normal) to tasks across the DB, the API and the web client, with tests"


def build_request(args: argparse.Namespace, *, auto_approve: bool = False) -> SwarmRequest:
    repo = check_repo(args.repo)
    lanes_path, config = load_config(repo, args.lanes)
    # Lane models: replay scripts named relative to the lanes file.
    for name, role in config.swarm.lanes.items():
        if role.model:
            role.model = resolve_model(role.model, lanes_path.parent.resolve(), f"{lanes_path}: swarm.lanes.{name}.model")
    plan = load_plan_file(args.plan, config) if args.plan else None
    base_ref = os.environ.get("BASE_BRANCH") or "HEAD"
    try:
        base_branch = os.environ.get("BASE_BRANCH") or git_out(repo, "symbolic-ref", "--short", "-q", "HEAD")
    except subprocess.CalledProcessError:
        base_branch = None  # a detached HEAD: no pull request base to name
    try:
        base_sha = git_out(repo, "rev-parse", "--verify", "--quiet", f"{base_ref}^{{commit}}")
    except subprocess.CalledProcessError:
        raise UserError(f"base {base_ref!r} (BASE_BRANCH) is not a commit in {repo}") from None
    if git_out(repo, "status", "--porcelain", "--untracked-files=no"):
        print(f"note: {repo} has uncommitted changes; the swarm works from commit {base_sha[:12]} and leaves them alone",
              file=sys.stderr)
    slug = repo_slug(repo)
    run_id = f"reposwarm-{slug}-{uuid.uuid4().hex[:6]}"
    swarm_branch = os.environ.get("SWARM_BRANCH") or None
    if swarm_branch:
        try:
            git_out(repo, "check-ref-format", "--branch", swarm_branch)
        except subprocess.CalledProcessError:
            raise UserError(f"SWARM_BRANCH={swarm_branch!r} is not a valid branch name") from None
        if git_out(repo, "branch", "--list", swarm_branch):
            raise UserError(f"SWARM_BRANCH {swarm_branch!r} already exists in {repo}; reposwarm only adds new branches")
    return SwarmRequest(
        run_id=run_id, repo_path=str(repo), task=args.task, config=config, plan=plan,
        model=run_model(args.model, config, lanes_path), base_ref=base_sha, swarm_branch=swarm_branch,
        test_profile=os.environ.get("TEST_PROFILE") or None,
        auto_approve=auto_approve, base_branch=base_branch or None, ui_url=ui_url(run_id),
    )


async def has_search_attributes(client: Client) -> bool:
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    try:
        resp = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace))
    except RPCError:
        return False
    return REPO_ATTR.name in resp.custom_attributes


async def start(client: Client, req: SwarmRequest) -> None:
    plan_note = "from a plan file" if req.plan else "planned by the model"
    await client.start_workflow(
        SwarmWorkflow.run, req, id=req.run_id, task_queue=task_queue(),
        search_attributes=search_attributes(req.repo_path, Phase.preparing.value)
        if await has_search_attributes(client) else TypedSearchAttributes.empty,
        static_summary=f"reposwarm: {req.task[:120]}",
        static_details=(f"**Task:** {req.task}\n\n**Repository:** `{req.repo_path}` at `{req.base_ref[:12]}`\n\n"
                        f"**Lanes:** {', '.join(req.config.swarm.lanes)} ({plan_note})\n\n**Model:** {req.model}"),
    )


QUERY_TIMEOUT_S = 8


class RunNotAnswering(UserError):
    """The run exists but cannot be queried now: no worker, or its workflow task fails. Often passes."""


async def get_status(client: Client, run_id: str) -> SwarmStatus:
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    try:
        # a running worker answers in milliseconds; with none, the server would wait 30 s before saying so
        status = await handle.query(SwarmWorkflow.status, rpc_timeout=timedelta(seconds=QUERY_TIMEOUT_S))
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise UserError(f"no such run: {run_id}") from None
        raise RunNotAnswering(
            f"run {run_id} cannot answer now ({err.message}). Is a worker running (python worker.py)? If one is, "
            f"its log says why the run's workflow task fails; the Web UI shows it too: {ui_url(run_id)}") from None
    for lane in status.lanes:  # live progress of running lanes, from the lanes themselves
        if lane.state == "running":
            try:
                suffix = f".a{lane.attempt}" if lane.attempt > 1 else ""
                live = await client.get_workflow_handle(f"{run_id}.{lane.lane}.r{status.round}{suffix}").query(
                    LaneWorkflow.progress)
                lane.turns, lane.tool_calls, lane.tokens = live.turns, live.tool_calls, live.tokens
                lane.cost_usd = live.cost_usd
            except RPCError:
                pass
    return status


def _age(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"


def _view(status: SwarmStatus, elapsed: float, compact: bool, notes: list[str] | None = None) -> str:
    notes = notes or []
    if compact:
        return f"[{status.phase.value}] " + "  ".join(
            f"{lane.lane}:{lane.state}" + (f"({lane.turns}t)" if lane.turns else "") for lane in status.lanes) + "".join(
            f"  ({note})" for note in notes)
    lines = [f"{status.run_id}  {status.phase.value}  round {status.round}  elapsed {_age(elapsed)}"]
    lines += [f"  {note}" for note in notes]
    for lane in status.lanes:
        lines.append(f"  {lane.lane:<16} {lane.state:<26} {lane.turns:>4} turns {lane.tokens:>9} tokens"
                     + (f"  attempt {lane.attempt}" if lane.attempt > 1 else ""))
    return "\n".join(lines)


async def _progress_notes(client: Client, desc: WorkflowExecutionDescription) -> list[str]:
    """What the run's own activities last said of their progress (heartbeat details: "indexing the
    repository: 4,000 of 20,272 new files parsed"), so a long step shows it is moving."""
    notes = []
    for pending in desc.raw_description.pending_activities:
        if not pending.heartbeat_details.payloads:
            continue
        try:
            details = await client.data_converter.decode(pending.heartbeat_details.payloads)
        except Exception:  # noqa: BLE001 - progress is a courtesy; an odd payload must not stop the watch
            continue
        if details and isinstance(details[0], str):
            notes.append(f"{pending.activity_type.name}: {details[0]}")
    return notes


async def watch(client: Client, run_id: str, *, until_review: bool, compact: bool = True) -> SwarmStatus:
    """Print the run's view whenever it changes, until it waits for review or ends."""
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    last, misses = "", 0
    while True:
        try:
            desc = await handle.describe()
            status = await get_status(client, run_id)
            misses = 0
        except Exception as err:
            # a worker restarting, or a workflow task failing until a fix is deployed: keep watching
            if isinstance(err, UserError) and not isinstance(err, RunNotAnswering):
                raise
            misses += 1
            if misses > 120:
                raise UserError(f"cannot follow run {run_id}: {err}") from None
            await asyncio.sleep(0.5)
            continue
        elapsed = ((desc.close_time or datetime.now(UTC)) - desc.start_time).total_seconds()
        view = _view(status, elapsed, compact, await _progress_notes(client, desc))
        if view.split("elapsed")[0] != last.split("elapsed")[0] or (not compact and view != last):
            print(view, flush=True)
            last = view
        if desc.status != WorkflowExecutionStatus.RUNNING or (until_review and status.phase == Phase.review):
            return status
        await asyncio.sleep(0.5 if compact else 1.0)


async def decide(client: Client, run_id: str, decision: ReviewDecision) -> ReviewReceipt:
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    try:
        return await handle.execute_update(SwarmWorkflow.review, decision)
    except WorkflowUpdateFailedError as err:
        raise UserError(f"review refused: {err.cause or err}") from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise UserError(f"no such run (or it has ended): {run_id}") from None
        raise


def make_demo_repo() -> Path:
    """A fresh git repository holding the bundled example, in a temporary folder."""
    root = Path(tempfile.mkdtemp(prefix="reposwarm-demo-"))
    repo = root / "taskboard"
    shutil.copytree(DEMO / "repo", repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = {"GIT_AUTHOR_NAME": "demo", "GIT_AUTHOR_EMAIL": "demo@localhost",
           "GIT_COMMITTER_NAME": "demo", "GIT_COMMITTER_EMAIL": "demo@localhost"}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "taskboard: initial import"]):
        gitcmd.run(["-C", str(repo), *argv], check=True, env=env)
    return repo


def render_dry_run(result: SwarmResult) -> str:
    plan = result.plan
    lines = [f"dry run {result.run_id}: nothing was dispatched", ""]
    if plan is not None:
        lines += ["Interface contract:", plan.interface_contract.rstrip(), ""]
        lines += [f"- {lp.lane}: {lp.goal}" + (f" (paths: {', '.join(lp.allowed_paths)})" if lp.allowed_paths else "")
                  for lp in plan.lanes]
    lines += ["", "Estimated per lane (a coarse model: each turn resends the conversation so far):",
              f"{'lane':<16} {'model':<28} {'turns':>5} {'tokens in':>10} {'out':>7} {'budget':>9}  fits  cost"]
    total = 0.0
    for e in result.estimates:
        cost = "no price" if e.cost_usd is None else f"${e.cost_usd:.4f}"
        total += e.cost_usd or 0.0
        lines.append(f"{e.lane:<16} {e.model[-28:]:<28} {e.turns:>5} {e.input_tokens:>10} {e.output_tokens:>7} "
                     f"{e.token_budget:>9}  {'yes' if e.within_budget else 'NO':<4}  {cost}")
    lines.append(f"total estimated cost: ${total:.4f} (models without a price in the lanes file's prices: not counted)")
    if result.usage.model_calls:
        lines.append(f"planning spent {result.usage.total_tokens} tokens, ${result.usage.cost_usd:.4f}")
    return "\n".join(lines)


async def cmd_run(args: argparse.Namespace) -> int:
    req = build_request(args)
    req.dry_run, req.record = args.dry_run, args.record
    client = await client_or_die()
    await start(client, req)
    if req.dry_run:
        result = await client.get_workflow_handle_for(SwarmWorkflow.run, req.run_id).result()
        print(render_dry_run(result))
        return 0
    print(f"run: {req.run_id}")
    print(f"web ui: {ui_url(req.run_id)}")
    if args.wait:
        status = await watch(client, req.run_id, until_review=True)
        if status.phase == Phase.review:
            print(f"waiting for review: python starter.py review {req.run_id}, then approve or reject")
        else:
            print(render_status(status))
            return 0 if status.phase == Phase.delivered else 1
    return 0


async def cmd_demo(args: argparse.Namespace) -> int:
    repo = make_demo_repo()
    print(f"demo repository: {repo}")
    ns = argparse.Namespace(repo=str(repo), task=DEMO_TASK, lanes=str(DEMO / "lanes.yaml"),
                            plan=str(DEMO / "plan.yaml"), model=f"replay:{DEMO / 'replay.yaml'}")
    req = build_request(ns)
    client = await client_or_die()
    await start(client, req)
    print(f"started {req.run_id}; watch it at {ui_url(req.run_id)}")
    status = await watch(client, req.run_id, until_review=True)
    if status.phase != Phase.review or status.review is None:
        print(render_status(status))
        return 1
    print()
    print(render_review(status.review, ui_url(req.run_id)))
    if args.yes:
        approve = True
    else:
        approve = input("approve this change? [y/N] ").strip().lower() in ("y", "yes")
    if not approve:
        print(f"left waiting for review: python starter.py approve|reject {req.run_id}")
        return 0
    await decide(client, req.run_id, ReviewDecision(approve=True, reviewer=reviewer_name(), comment="demo"))
    result = await client.get_workflow_handle_for(SwarmWorkflow.run, req.run_id).result()
    print(f"run: {result.run_id}")
    print(f"delivered: {result.delivered_branch} in {repo}")
    return 0


def reviewer_name() -> str:
    try:
        return os.environ.get("REPOSWARM_REVIEWER") or getpass.getuser()
    except Exception:
        return "reviewer"


async def cmd_status(args: argparse.Namespace) -> int:
    status = await get_status(await client_or_die(), args.run)
    print(status.model_dump_json(indent=2) if args.json else render_status(status))
    return 0


async def cmd_review(args: argparse.Namespace) -> int:
    try:
        status = await get_status(await client_or_die(), args.run)
    except (UserError, RPCError) as err:
        # The run may be gone from Temporal (retention): the package is also kept as files of the run.
        folder = run_dir(args.run) / "review"
        saved = folder / ("latest.json" if args.json else "latest.md")
        if not saved.is_file():
            raise UserError(f"{err}; and no saved review package at {saved}") from None
        print(saved.read_text(encoding="utf-8"), end="")
        return 0
    if status.review is None:
        raise UserError(f"run {args.run} has no review package yet (phase: {status.phase.value})")
    print(status.review.model_dump_json(indent=2) if args.json else render_review(status.review, ui_url(args.run)))
    return 0


async def cmd_watch(args: argparse.Namespace) -> int:
    status = await watch(await client_or_die(), args.run, until_review=True, compact=False)
    print(render_status(status))
    return 0


async def cmd_list(args: argparse.Namespace) -> int:
    client = await client_or_die()
    query = "WorkflowType = 'SwarmWorkflow'"
    if args.repo:
        query += f" AND RepoSwarmRepo = '{check_repo(args.repo)}'"
    rows = []
    async for wf in client.list_workflows(query, limit=args.limit):
        attrs = wf.typed_search_attributes
        phase = attrs.get(STATUS_ATTR) or (wf.status.name.lower() if wf.status else "?")
        age = _age((datetime.now(UTC) - wf.start_time).total_seconds())
        rows.append(f"{wf.id:<40} {phase:<14} {age:>8}  {attrs.get(REPO_ATTR) or '-'}")
    print(f"{'run':<40} {'phase':<14} {'age':>8}  repository")
    print("\n".join(rows) if rows else "(no runs)")
    return 0


async def cmd_decide(args: argparse.Namespace) -> int:
    approve = args.command == "approve"
    receipt = await decide(await client_or_die(), args.run,
                           ReviewDecision(approve=approve, comment=args.comment or "", reviewer=reviewer_name()))
    print(f"{'approved' if approve else 'rejected'} round {receipt.round} of {args.run}; "
          f"it is now {receipt.phase.value}")
    return 0
