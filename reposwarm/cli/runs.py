"""The run commands: start a swarm run (run), follow it (watch, status, list), review it (review, approve,
reject); demo and try, which start a local server and worker when missing, are in local.py and trying.py. These
reach the run through Temporal alone, so they work from any machine that reaches the cluster, with or without a
worker, during and after the run (reposwarm/cli/run_state.py); `review --home` reads the package saved on a worker
host once the run has left Temporal.

Every input is checked here, before any workflow starts; a problem is a UserError (one line, exit 2).
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ValidationError
from temporalio.client import (
    Client,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowUpdateStage,
)

from reposwarm.cli.common import (
    RemoteHeads,
    UserError,
    check_repo,
    client_or_die,
    git_out,
    if_interrupted,
    load_config,
    prog,
    repo_slug,
    resolve_model,
    run_model,
    said_if_slow,
    ui_url,
    worker_hint,
)
from reposwarm.cli.live import age, follow, next_step, with_lane_progress
from reposwarm.cli.run_state import QUERY_TIMEOUT_S, NoWorker, RunView, last_poll, update_failures, view, worker_polling
from reposwarm.client import task_queue
from reposwarm.contracts import (
    LanesFile,
    Phase,
    ReviewDecision,
    SwarmRequest,
    SwarmResult,
)
from reposwarm.gitvalues import ref_problem
from reposwarm.lanes.loading import load_plan_file
from reposwarm.review import webui
from reposwarm.review.package import render_review, render_status
from reposwarm.review.webui import DRY_RUN, KIND_ATTR, REPO_ATTR, RUN, STATUS_ATTR, TASK_ATTR, registered_names
from reposwarm.runs import objects
from reposwarm.text import inert
from workflows.attributes import start_attributes
from workflows.failures import root_cause
from workflows.review import red_refusal

if TYPE_CHECKING:
    from workflows.swarm import SwarmWorkflow  # (imported where a run is started or decided: see swarm_workflow)


def swarm_workflow() -> type[SwarmWorkflow]:
    """The workflow's class, for the commands that start or decide a run: its module brings every activity's
    (a second of imports), which the commands that only read a run do not wait for."""
    from workflows.swarm import SwarmWorkflow

    return SwarmWorkflow



def _checked_request_env() -> tuple[str | None, str | None]:
    """BASE_BRANCH and SWARM_BRANCH, each a branch name git reads as one (never an option)."""
    values = []
    for key in ("BASE_BRANCH", "SWARM_BRANCH"):
        value = os.environ.get(key) or None
        if value is not None and (why := ref_problem(value)) is not None and value != "HEAD":
            raise UserError(f"{key}={value!r} {why}")
        values.append(value)
    return values[0], values[1]


def build_request(args: argparse.Namespace, *, auto_approve: bool = False,
                  config: LanesFile | None = None, config_path: Path | None = None) -> SwarmRequest:
    """The run's request from the command line, every input checked; `config` instead of a lanes file: a run
    that proposes its lanes (reposwarm/cli/proposing.py), in the configuration read from `config_path`, if any."""
    if not (args.task or "").strip():
        raise UserError("--task is empty: say in words what to change (--task \"Add a /health endpoint\")")
    from reposwarm.vcs.remote import is_url

    remote = RemoteHeads(args.repo) if is_url(args.repo) else None
    if remote is not None and not args.lanes and config is None:
        raise UserError(f"a repository named by URL needs --lanes FILE (the lanes file is read here, not from {args.repo})")
    if remote is None:
        repo = check_repo(args.repo)
    else:  # (what a lanes file or a configuration names, a replay script say, is relative to it)
        repo = Path(args.lanes or config_path or Path.cwd() / "-").resolve().parent
    env_base, swarm_branch = _checked_request_env()
    lanes_path, config = load_config(repo, args.lanes) if config is None else \
        (config_path or repo / "(no lanes file)", config)
    # Lane models: replay scripts named relative to the lanes file.
    for name, role in config.swarm.lanes.items():
        if role.model:
            role.model = resolve_model(role.model, lanes_path.parent.resolve(), f"{lanes_path}: swarm.lanes.{name}.model")
    plan = load_plan_file(args.plan, config) if args.plan else None
    if getattr(args, "pin_base", False):
        config.swarm.pin_base = True
    base_ref = env_base or "HEAD"
    if remote is not None:
        base_branch = env_base or remote.head_branch
        found = remote.commit(base_ref)
        if found is None:
            raise UserError(f"base {base_ref!r} (BASE_BRANCH) is not a branch of {args.repo}")
        base_sha = found
    else:
        try:
            base_branch = env_base or git_out(repo, "symbolic-ref", "--short", "-q", "HEAD")
        except subprocess.CalledProcessError:
            base_branch = None  # a detached HEAD: no pull request base to name
        try:
            base_sha = git_out(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{base_ref}^{{commit}}")
        except subprocess.CalledProcessError:
            raise UserError(f"base {base_ref!r} (BASE_BRANCH) is not a commit in {repo}") from None
        if git_out(repo, "status", "--porcelain", "--untracked-files=no"):
            print(f"note: {repo} has uncommitted changes; the swarm works from commit {base_sha[:12]} and leaves them "
                  "alone", file=sys.stderr)
    slug = repo_slug(args.repo if remote is not None else repo)
    run_id = f"reposwarm-{slug}-{uuid.uuid4().hex[:6]}"
    if swarm_branch:
        try:
            git_out(repo, "check-ref-format", "--branch", swarm_branch)
        except subprocess.CalledProcessError:
            raise UserError(f"SWARM_BRANCH={swarm_branch!r} is not a valid branch name") from None
        if (remote.commit(f"refs/heads/{swarm_branch}") if remote is not None
                else git_out(repo, "branch", "--list", "--", swarm_branch)):
            raise UserError(f"SWARM_BRANCH {swarm_branch!r} already exists in {repo}; reposwarm only adds new branches")
    model = run_model(args.model, config, lanes_path)
    from reposwarm.models.prices import models_in_use, with_list_prices  # (the configuration's own prices win)

    config = with_list_prices(config, models_in_use(config, model))
    unpriced(config, model, lanes_path)
    return SwarmRequest(
        run_id=run_id, repo_path=args.repo if remote is not None else str(repo), task=args.task, config=config, plan=plan,
        model=model, base_ref=base_sha, swarm_branch=swarm_branch,
        test_profile=os.environ.get("TEST_PROFILE") or None,
        auto_approve=auto_approve, base_branch=base_branch or None, ui_url=ui_url(run_id),
    )


def unpriced(config: LanesFile, model: str, lanes_path: Path) -> None:
    """A cost budget counts dollars: its model needs a price, or nothing would ever count against it."""
    budgets = [(f"swarm.lanes.{n}", r.model or model) for n, r in config.swarm.lanes.items() if r.cost_budget_usd]
    if config.swarm.cost_budget_usd:
        budgets += [("swarm", m) for m in sorted({model, *(r.model or model for r in config.swarm.lanes.values())})]
    missing = [f"{where}.cost_budget_usd needs a price for {m} in prices:" for where, m in budgets
               if m not in config.prices]
    if missing:
        raise UserError(f"{lanes_path}: " + "; ".join(dict.fromkeys(missing))
                        + " (input_per_mtok and output_per_mtok, docs/configuration.md)")


async def has_search_attributes(client: Client) -> bool:
    return REPO_ATTR.name in await webui.registered_attributes(client)


async def start(client: Client, req: SwarmRequest) -> None:
    plan_note = ("lanes and plan proposed by the model, for a person to confirm" if req.propose
                 else "from a plan file" if req.plan else "planned by the model")
    queue = task_queue()  # read before the first await: a caller's environment is this moment's, not a later one's
    # only the attributes the server has (it refuses a run that sets another); the run upserts only those too
    registered = registered_names(await webui.registered_attributes(client))
    req = req.model_copy(update={"search_attributes": registered})
    await client.start_workflow(
        swarm_workflow().run, req, id=req.run_id, task_queue=queue,
        search_attributes=start_attributes(registered, repo=req.repo_path,
                                           phase=(Phase.proposing if req.propose else Phase.preparing).value,
                                           kind=DRY_RUN if req.dry_run else RUN, task=req.task),
        static_summary=webui.static_summary(req.task),
        static_details=webui.static_details(req.task, req.repo_path, req.base_ref, list(req.config.swarm.lanes),
                                            plan_note, req.model),
    )


NOT_AFTER_S = 20  # a decision no worker takes within this is refused by the run if it arrives later


def not_after_s() -> float:
    """How long a decision waits for a worker to take it: NOT_AFTER_S, or REPOSWARM_DECISION_WAIT_S (at least 1 s)."""
    text = os.environ.get("REPOSWARM_DECISION_WAIT_S", "").strip()
    try:
        return max(1.0, float(text)) if text else NOT_AFTER_S
    except ValueError:
        raise UserError(f"REPOSWARM_DECISION_WAIT_S={text!r} is not a number of seconds") from None


async def decide(client: Client, run_id: str, decision: ReviewDecision, *, queue_it: bool = False,
                 wait: bool = True) -> str:
    """Send a review decision and say what became of it. With a worker, an Update: taken or refused, and never
    applied later once this command has given up (it carries a deadline the run checks). With none, refused,
    unless `queue_it`: then a Signal, which Temporal holds until a worker runs, and the command says so.

    Every wait is said as it begins (what for, how long at most), and a Ctrl-C in it says what it leaves."""
    word = "approval" if decision.approve else "rejection"
    with if_interrupted(f"no {word} was sent"):
        # The run's record, not a query: a worker stopped a moment ago still counts as polling for a minute, and a
        # query to it would wait QUERY_TIMEOUT_S for nothing. The record has the phase and the package (the Update
        # itself is refused by the run if it no longer applies).
        try:
            v = await view(client, run_id, live=False)
        except NoWorker:
            raise
        except UserError:  # a run from before runs kept a record (or none such): only a worker can say
            v = await view(client, run_id)
        if v.closed:
            raise UserError(f"run {run_id} has ended ({v.ending}): there is nothing to decide")
        if v.status.phase != Phase.review:
            raise UserError(f"run {run_id} is not waiting for review (phase: {v.status.phase.value}); "
                            f"{prog()} watch {run_id} follows it")
        review = v.status.review or v.review  # said here at once, before a queued Signal would be ignored for it
        if decision.approve and review is not None and review.test_report is not None and (
                why := red_refusal(review.round, review.test_report, decision)) is not None:
            raise UserError(f"review refused: {why}")
        handle = client.get_workflow_handle_for(swarm_workflow().run, run_id)
        if not queue_it and not await worker_polling(client, v.queue):
            raise NoWorker(v.queue, f"the {word} was not sent (pass --queue to leave it queued until one runs)")
    if queue_it:
        with if_interrupted(f"the {word} may or may not be queued: {prog()} status {run_id} shows a queued one"):
            # by name: the run's handler takes the raw payload (so it can record one that is no decision)
            await handle.signal("review_signal", decision)
        return (f"queued: the {word} of round {v.status.round} of {run_id} is held by Temporal, not yet taken; it "
                f"applies when a worker on task queue {v.queue!r} takes it (start one: {worker_hint()}); "
                f"{prog()} status {run_id} shows when it is taken")
    polled = await last_poll(client, v.queue)
    wait_s = not_after_s()
    deadline = datetime.now(UTC) + timedelta(seconds=wait_s)
    decision = decision.model_copy(update={"not_after": deadline.isoformat()})
    last = f"last polled at {polled:%H:%M:%S} UTC" if polled else "polled a moment ago"
    def timed_out() -> Exception:
        return NoWorker(v.queue, f"the {word} was not taken within {wait_s:g} s; it expired at "
                                 f"{deadline:%H:%M:%S} UTC and will not apply later")

    with update_failures(run_id, timed_out, "review refused"):
        with if_interrupted(f"the {word} was sent and may still apply, if a worker takes it before "
                            f"{deadline:%H:%M:%S} UTC: {prog()} status {run_id}"):
            update = await said_if_slow(
                handle.start_update(swarm_workflow().review, decision, wait_for_stage=WorkflowUpdateStage.ACCEPTED),
                f"waiting up to {wait_s:g} s for a worker to take the {word} (task queue {v.queue!r} was {last}; "
                f"a worker stopped since then still counts for a minute) ...", timeout_s=wait_s + 2)
        with if_interrupted(f"the {word} was taken by the run: {prog()} status {run_id}"):
            receipt = await said_if_slow(update.result(), f"the {word} was taken; waiting for the run to act on it ...")
    if not decision.approve:
        return (f"rejected round {receipt.round} of {run_id}; round {receipt.round + 1} is "
                f"{receipt.phase.value}: {prog()} watch {run_id}")
    if not wait:
        return f"approved round {receipt.round} of {run_id}; it is {receipt.phase.value}: {prog()} status {run_id}"
    with if_interrupted(f"the approval was taken; the run delivers without this command: {prog()} status {run_id}"):
        return f"approved round {receipt.round} of {run_id}; " + await said_if_slow(
            delivered(client, run_id, v.status.repo_path),
            f"approved round {receipt.round} of {run_id}; waiting for it to be delivered (--no-wait returns at once) ...")


async def delivered(client: Client, run_id: str, repo_path: str) -> str:
    """Wait for the run to end after an approval, saying so if no worker is there to deliver it."""
    handle = client.get_workflow_handle_for(swarm_workflow().run, run_id)
    while True:
        try:
            result = await asyncio.wait_for(asyncio.shield(handle.result()), timeout=QUERY_TIMEOUT_S)
        except TimeoutError:
            desc = await handle.describe()
            if desc.status == WorkflowExecutionStatus.RUNNING and not await worker_polling(client, desc.task_queue):
                raise NoWorker(desc.task_queue, "delivery waits (the approval stands; it delivers when a worker "
                                                "runs)") from None
            continue
        except WorkflowFailureError as err:
            raise UserError(f"run {run_id} failed while delivering: {root_cause(err)}") from None
        pr = f" and {result.pull_request_url}" if result.pull_request_url else ""
        return f"delivered {result.delivered_branch}{pr} in {repo_path}"


def render_dry_run(result: SwarmResult) -> str:
    plan = result.plan
    lines = [f"dry run {result.run_id}: nothing was dispatched", ""]
    if plan is not None:
        lines += ["Interface contract:", plan.interface_contract.rstrip(), ""]
        lines += [f"- {lp.lane}: {lp.goal}" + (f" (paths: {', '.join(lp.allowed_paths)})" if lp.allowed_paths else "")
                  for lp in plan.lanes]
    width = max([len("model"), *(len(e.model) for e in result.estimates)])
    lines += ["", "Estimated per lane (reposwarm/agent/estimate.py says how):",
              f"{'lane':<16} {'model':<{width}} {'turns':>5} {'tokens in':>10} {'out':>7} {'billed':>9} "
              f"{'budget':>9}  fits  cost (without caching)"]
    total = uncached = 0.0
    for e in result.estimates:
        cost = "no price" if e.cost_usd is None else f"${e.cost_usd:.4f} (${e.uncached_cost_usd or 0:.4f})"
        total, uncached = total + (e.cost_usd or 0.0), uncached + (e.uncached_cost_usd or 0.0)
        lines.append(f"{e.lane:<16} {e.model:<{width}} {e.turns:>5} {e.input_tokens:>10} {e.output_tokens:>7} "
                     f"{e.billed_tokens or e.input_tokens + e.output_tokens:>9} {e.token_budget:>9}  "
                     f"{'yes' if e.within_budget else 'NO':<4}  {cost}")
    lines.append(f"total estimated cost: ${total:.4f} with prompt caching, ${uncached:.4f} without (models without "
                 "a price, in the configuration's prices or reposwarm's list prices: not counted; billed: "
                 "input-token equivalents, what "
                 "token_budget counts)")
    if result.usage.model_calls:
        lines.append(f"planning spent {result.usage.total_tokens} tokens, ${result.usage.cost_usd:.4f}")
    return "\n".join(lines)


async def cmd_run(args: argparse.Namespace) -> int:
    from reposwarm.cli import doctor, proposing

    doctor.refuse_run(args.repo, args.model)  # (a worker on this host: the sandbox and git it needs, said first)
    if proposing.wants_proposal(args):  # no lanes file: the run proposes its lanes, a person confirms them
        return await proposing.cmd_run_proposing(args)
    proposing.refuse_proposal_flags(args)
    req = build_request(args)
    from reposwarm.cli import preflight  # (a worker on this host needs the profile's toolchains: said before starting)

    preflight.refuse_run(req.config, args.repo, req.base_ref)
    req.dry_run, req.record = args.dry_run, args.record
    with if_interrupted("nothing was started"):
        client = await client_or_die()
        queue = task_queue()
        polling = await worker_polling(client, queue)
        if not polling and (args.wait or args.dry_run):
            raise NoWorker(queue, f"nothing was started (run --{'wait' if args.wait else 'dry-run'} needs one)")
    with if_interrupted(f"run {req.run_id} may have started: {prog()} status {req.run_id}"):
        await start(client, req)
    if req.dry_run:
        with if_interrupted(f"the dry run goes on (it dispatches nothing): {prog()} status {req.run_id}"):
            try:
                result = await said_if_slow(
                    client.get_workflow_handle_for(swarm_workflow().run, req.run_id).result(),
                    f"dry run {req.run_id}: waiting for its plan ({'the plan file' if req.plan else req.model}) "
                    "and the estimates ...")
            except WorkflowFailureError as err:
                # (its planning failed: a user's mistake as often as not, a replay script without a planner reply
                # say; `list` leaves the failed dry run out, as it does every dry run, unless --all)
                raise UserError(f"dry run {req.run_id} failed: {' '.join(root_cause(err).split())}") from None
        print(render_dry_run(result))
        return 0
    print(f"run: {req.run_id}")
    print(f"web ui: {ui_url(req.run_id)}")
    if not polling:
        print(f"note: no worker is polling task queue {queue!r}: the run starts when one does ({worker_hint()})")
    if args.wait:
        return await cmd_watch(argparse.Namespace(run=req.run_id))
    return 0


def reviewer_name() -> str:
    try:
        return os.environ.get("REPOSWARM_REVIEWER") or getpass.getuser()
    except Exception:
        return "reviewer"


def _note(v: RunView, as_json: bool) -> None:
    """Where the answer came from and how the run ended: beside a JSON answer on stderr, so it stays JSON."""
    for text in (v.ending and f"ended: {v.ending}", v.source):
        if text:
            print(text, file=sys.stderr if as_json else sys.stdout)


async def cmd_status(args: argparse.Namespace) -> int:
    client = await client_or_die()
    v = await view(client, args.run)
    if v.live:
        await with_lane_progress(client, v.status)
    # model-written text is inert in the contracts already; this seam holds for anything older or overlooked
    print(v.status.model_dump_json(indent=2) if args.json else inert(render_status(v.status)))
    _note(v, args.json)
    return 0


async def cmd_review(args: argparse.Namespace) -> int:
    if args.home:  # (main.py has made it this command's REPOSWARM_HOME)
        name = "review/latest.json" if args.json else "review/latest.md"
        saved = objects.get(args.run, name, fresh=True)  # this folder's copy, or the shared object store's
        if saved is None:
            raise UserError(f"no saved review package at {objects.describe(args.run, name)}")
        print(inert(saved.decode("utf-8", "replace")), end="")
        return 0
    v = await view(await client_or_die(), args.run)
    package = v.status.review or v.review
    if package is None:
        raise UserError(f"run {args.run} has no review package yet (phase: {v.status.phase.value})")
    print(package.model_dump_json(indent=2) if args.json else inert(render_review(package, ui_url(args.run))))
    _note(v, args.json)
    return 0


async def cmd_watch(args: argparse.Namespace) -> int:
    with if_interrupted(f"the run goes on: {prog()} watch {args.run}"):  # (watching it changes nothing)
        v = await follow(await client_or_die(), args.run, until_review=True)
    if v.closed:
        print(inert(render_status(v.status)))
    print(inert(next_step(v)))
    return 1 if v.status.phase in (Phase.failed, Phase.expired, Phase.not_approved) or (
        v.closed and v.status.phase not in (Phase.delivered, Phase.planned)) else 0


LIST_WINDOW = 500  # runs read to order the list newest first


LIST_TASK_CHARS = 48  # of a task, in `list` (RepoSwarmTask holds 100; status shows it whole)


async def cmd_list(args: argparse.Namespace) -> int:
    client = await client_or_die()
    query = "WorkflowType = 'SwarmWorkflow'"
    if args.repo:
        query += f" AND RepoSwarmRepo = '{check_repo(args.repo)}'"
    found = []
    # (the server's order is not by start time on every visibility store: read a window, newest first here)
    async for wf in client.list_workflows(query, limit=max(args.limit * 10, LIST_WINDOW)):
        attrs = wf.typed_search_attributes
        phase = attrs.get(STATUS_ATTR) or (wf.status.name.lower() if wf.status else "?")
        if wf.status is not None and wf.status != WorkflowExecutionStatus.RUNNING and phase not in (
                "delivered", "expired", "not_approved", "planned"):
            phase = wf.status.name.lower()
        # A dry run (nothing dispatched) by its kind, or by its end where a run predates the kind: planned. One
        # that failed (its planning did) is a dry run too, left out with the others.
        dry_run = attrs.get(KIND_ATTR) == DRY_RUN or phase == "planned"
        if dry_run and phase != "planned":
            phase = f"{phase} (dry run)"
        task = " ".join((attrs.get(TASK_ATTR) or "-").split())  # (a server without RepoSwarmTask: "-")
        found.append((wf.start_time, wf.id, phase, attrs.get(REPO_ATTR) or "-", dry_run, task))
    found.sort(key=lambda row: row[0], reverse=True)
    dry = [row for row in found if row[4]]
    shown = (found if args.all else [row for row in found if not row[4]])[:args.limit]
    width = max([14, *(len(row[2]) for row in shown)])
    task_width = max([4, *(len(row[5][:LIST_TASK_CHARS]) for row in shown)])
    rows = [f"{run:<40} {phase:<{width}} {age((datetime.now(UTC) - started).total_seconds()):>8}  "
            f"{task[:LIST_TASK_CHARS]:<{task_width}}  {repo}" for started, run, phase, repo, _, task in shown]
    print(f"{'run':<40} {'phase':<{width}} {'age':>8}  {'task':<{task_width}}  repository")
    print(inert("\n".join(rows)) if rows else "(no runs)")
    if dry and not args.all:
        print(f"({len(dry)} dry run(s) not shown: list --all)")
    return 0


async def cmd_decide(args: argparse.Namespace) -> int:
    approve = args.command == "approve"
    plan = None
    if not approve and args.plan:
        plan = load_plan_file(args.plan, None)
    try:
        decision = ReviewDecision(approve=approve, comment=args.comment or "", reviewer=reviewer_name(), plan=plan,
                                  accept_red=bool(getattr(args, "accept_red", False)),
                                  accept_test_changes=bool(getattr(args, "accept_test_changes", False)),
                                  accept_unjudged=bool(getattr(args, "accept_unjudged", False)))
    except ValidationError as err:  # a comment over the limit, say: one line naming the field
        problem = err.errors(include_url=False)[0]
        raise UserError(f"{'.'.join(map(str, problem['loc']))}: {problem['msg']}") from None
    print(await decide(await client_or_die(), args.run, decision, queue_it=args.queue,
                       wait=not getattr(args, "no_wait", False)))
    return 0
