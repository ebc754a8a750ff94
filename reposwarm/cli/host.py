"""The commands beyond a run's life cycle: report and explain (from the run's record on the Temporal server, or
with --home from a worker host's files); recording and gc, which read the runs' files under REPOSWARM_HOME, so they
run on a worker's host ([worker host] in --help); trial replays a repository's history as swarm tasks; mcp serves
the lanes' tools over a repository on this machine.

report and explain are read commands, quick to start: what only the other commands use (git, the ledger's
structlog, the checks' sandbox, the trial workflow and its activities) is imported in them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from temporalio.client import WorkflowExecutionStatus
from temporalio.common import WorkflowIDConflictPolicy

from reposwarm.cli import run_state
from reposwarm.cli.common import (
    UserError,
    check_repo,
    client_or_die,
    git_out,
    load_config,
    repo_slug,
    run_model,
    ui_url,
)
from reposwarm.client import connect, task_queue
from reposwarm.contracts import LanesFile, TrialBatchRequest, TrialBatchResult, TrialOutcome, TrialSpec
from reposwarm.review import webui
from reposwarm.review.webui import registered_names
from reposwarm.runs import metrics, objects
from reposwarm.runs.store import home
from reposwarm.text import error_line, inert
from reposwarm.vcs.branches import delivered_branch, integration_branch


async def cmd_mcp(args: argparse.Namespace) -> int:
    """Serve the tool surface over MCP; stdout is the protocol on stdio, so everything else goes to stderr."""
    from reposwarm.cli import mcp_server
    from reposwarm.slices.narrowing import pattern_problem

    repo = check_repo(args.repo)
    for flag, patterns in (("--allow", args.allow), ("--read-only", args.read_only)):
        for pattern in patterns:  # the server's slice is a slice like a lane's: inside the repository, readable
            if (why := pattern_problem(pattern)) is not None:
                raise UserError(f"{flag}: {why}")
    mcp_server.setup_logging()
    server = mcp_server.build_server(repo, args.allow, args.read_only, args.lanes)
    sock = None
    if args.http is not None:
        try:
            sock = mcp_server.listen(args.http)
        except (OSError, OverflowError) as err:
            raise UserError(f"--http {args.http}: cannot listen on 127.0.0.1: {getattr(err, 'strerror', None) or err}") from None
    await mcp_server.serve(server, sock)
    return 0


def _ledger_lines(run_id: str) -> list[dict]:
    """The run's ledger under --home (main.py has made it this command's REPOSWARM_HOME)."""
    from reposwarm.runs import ledger

    lines = ledger.read(run_id)
    if not lines:
        shared = objects.location()
        raise UserError(f"no ledger for run {run_id} under {ledger.ledger_path(run_id)}"
                        + (f" or in the object store {shared} ({objects.VARIABLE})" if shared else
                           " (--home must be the folder a worker of the run used, or REPOSWARM_OBJECT_STORE the "
                           "object store the workers shared)"))
    return lines


async def cmd_report(args: argparse.Namespace) -> int:
    """A run's figures, from its record on the Temporal server. With --home the same figures, and what only a
    worker host's ledger knows (its retries) added and said so; from that ledger alone only when the server has
    no record of the run (reposwarm/runs/metrics.py says how the two count)."""
    ending = ""
    if args.home:
        lines = _ledger_lines(args.run)
        hosted = metrics.report(args.run, lines)
        try:
            v = await run_state.view(await client_or_die(), args.run)
        except UserError as err:
            figures = hosted.model_copy(update={"note": (
                f"from this host's ledger alone ({error_line(str(err), 200)}): it counts every attempt of a model call, each merge of "
                "a lane, and no finish call, so a figure may differ from report's")})
        else:
            elapsed = (run_state.ended_at(v.description) - v.description.start_time).total_seconds()
            figures, ending = metrics.with_ledger(metrics.from_status(v.status, elapsed), hosted), v.ending
    else:
        v = await run_state.view(await client_or_die(), args.run)
        elapsed = (run_state.ended_at(v.description) - v.description.start_time).total_seconds()
        figures, ending = metrics.from_status(v.status, elapsed), v.ending
    if ending and not args.json:
        print(f"ended: {ending}")
    print(figures.model_dump_json(indent=2) if args.json else inert(metrics.render(figures)))
    return 0


async def cmd_explain(args: argparse.Namespace) -> int:
    """Which lane changed a file, in which round and turn, and why: from the run's record on the server (with
    --home, from a worker host's ledger, which also lists refused attempts); then the commits, where the
    repository is on this machine."""
    path = args.path.removeprefix("./")
    if args.home:
        repo = _explain_from_ledger(args.run, path, _ledger_lines(args.run))
    else:
        v = await run_state.view(await client_or_die(), args.run)
        found = [(rec.round, lane.lane, edit) for rec in v.status.rounds for lane in rec.lanes
                 for edit in lane.edits if edit.path == path]
        if not found:
            raise UserError(f"no lane of run {args.run} changed {path}")
        print(inert(f"{path} in run {args.run}:"))
        for round_no, lane_name, edit in found:
            word = "turns" if len(edit.turns) > 1 else "turn"
            turns = f", {word} {', '.join(map(str, edit.turns))}" if edit.turns else ""
            print(inert(f"- lane {lane_name}, round {round_no}{turns}: {edit.operation}: {edit.reason}"))
        repo = v.status.repo_path
    if repo and Path(repo).is_dir():
        from reposwarm.vcs import gitcmd

        delivered = delivered_branch(args.run)
        ref = delivered if git_ok(repo, "rev-parse", "--verify", "-q", delivered) else integration_branch(args.run)
        log = gitcmd.run(["-C", repo, "log", "--format=%h %s", ref, "--", path],
                         capture_output=True, text=True).stdout.strip()
        if log:
            print(f"\ncommits on {ref}:")
            print(inert(log))  # commit subjects carry lanes' words
    return 0


def _explain_from_ledger(run_id: str, path: str, lines: list[dict]) -> str | None:
    edits = [e for e in lines if e["event"] == "tool_call" and e.get("path") == path and e.get("outcome") == "ok"
             and e.get("tool") in ("write_file", "edit_file", "delete_file")]
    refused = [e for e in lines if e["event"] == "tool_call" and e.get("path") == path and e.get("outcome") != "ok"]
    if not edits and not refused:
        raise UserError(f"no lane of run {run_id} changed {path}")
    print(inert(f"{path} in run {run_id}:"))
    for e in edits:
        print(inert(f"- lane {e['lane']}, round {e.get('round', 1)}, turn {e.get('turn', '?')}: {e['tool']} "
                    f"(call {e['call_id']}): {e.get('reason') or 'no reason given'}"))
    for e in refused:
        print(inert(f"- refused: lane {e['lane']} tried {e['tool']}: {e.get('detail')}"))
    return next((e.get("repo") for e in lines if e.get("repo")), None) or _repo_of(run_id)


def git_ok(repo: str, *args: str) -> bool:
    from reposwarm.vcs import gitcmd

    return gitcmd.run(["-C", repo, *args], capture_output=True).returncode == 0


def _repo_of(run_id: str) -> str | None:
    try:
        return str(json.loads(objects.get(run_id, "review/latest.json", fresh=True) or b"")["repo_path"])
    except (OSError, ValueError, KeyError):
        return None


def select_commits(repo: Path, revs: list[str], config: LanesFile, limit: int | None) -> list[TrialSpec]:
    """Explicit SHAs as given; a range keeps non-merge commits whose change spans more than one lane."""
    from reposwarm.slices.policy import PathPolicy

    policies = {name: PathPolicy(".", role.allowed_paths) for name, role in config.swarm.lanes.items()}
    chosen: list[str] = []
    for rev in revs:
        try:
            if ".." in rev:
                for sha in git_out(repo, "rev-list", "--no-merges", "--reverse", rev).splitlines():
                    files = git_out(repo, "diff", "--name-only", f"{sha}^", sha).splitlines()
                    if sum(any(p.writable(f) for f in files) for p in policies.values()) > 1:
                        chosen.append(sha)
            else:
                chosen.append(git_out(repo, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}"))
        except subprocess.CalledProcessError:
            raise UserError(f"--commits: {rev!r} is not a commit or range of {repo}") from None
    specs = []
    for sha in chosen[:limit] if limit else chosen:
        try:
            parent = git_out(repo, "rev-parse", f"{sha}^")
        except subprocess.CalledProcessError:
            raise UserError(f"--commits: {sha[:12]} has no parent to start from") from None
        specs.append(TrialSpec(sha=sha, parent=parent, message=git_out(repo, "log", "-1", "--format=%B", sha)))
    if not specs:
        raise UserError("--commits chose no commit (a range keeps only commits that span more than one lane)")
    return specs


def render_trials(result: TrialBatchResult, oracle: bool) -> str:
    scores = result.scores
    lines = ["ORACLE RUN: proves the harness; these are not results." if oracle else "",
             f"{'commit':<12} {'tests':<6} {'stray':>5} {'missed':>6} {'lines':>11} {'checks':>6} {'cost':>9} "
             f"{'time':>7}  status"]
    for sc in scores:
        tests = "-" if sc.tests_passed is None else ("pass" if sc.tests_passed else "FAIL")
        lines.append(f"{sc.sha[:12]} {tests:<6} {len(sc.stray):>5} {len(sc.missed):>6} "
                     f"{sc.lines_swarm:>5}/{sc.lines_commit:<5} {sc.validations:>6} ${sc.cost_usd:>8.4f} "
                     f"{sc.wall_s:>6.1f}s  {sc.status}" + (f": {sc.failure or sc.bad_reason}"
                                                            if sc.failure or sc.bad_reason else ""))
    summary = trial_summary(scores)
    bad = f" ({summary['bad_tasks']} bad tasks left out)" if summary["bad_tasks"] else ""
    lines += ["", f"{summary['trials']} trials{bad}: pass rate {summary['pass_rate']}, median cost "
                  f"${summary['median_cost_usd']}, median time {summary['median_wall_s']}s, stray-edit rate "
                  f"{summary['stray_edit_rate']}"]
    return "\n".join(line for line in lines if line is not None)


def trial_summary(scores: list) -> dict:
    """The swarm's figures, over the tasks that can judge it: a bad task (its commit failed its own check) is
    counted apart, never as a pass or a failure."""
    bad = [sc for sc in scores if sc.status == TrialOutcome.bad_task]
    scores = [sc for sc in scores if sc.status != TrialOutcome.bad_task]
    tested = [sc for sc in scores if sc.tests_passed is not None]
    return {
        "trials": len(scores),
        "bad_tasks": len(bad),
        "pass_rate": round(sum(sc.tests_passed for sc in tested) / len(tested), 3) if tested else None,
        "median_cost_usd": round(statistics.median(sc.cost_usd for sc in scores), 6) if scores else None,
        "median_wall_s": round(statistics.median(sc.wall_s for sc in scores), 3) if scores else None,
        "stray_edit_rate": round(sum(bool(sc.stray) for sc in scores) / len(scores), 3) if scores else None,
    }


async def cmd_trial(args: argparse.Namespace) -> int:
    from workflows.trial import TrialWorkflow

    repo = check_repo(args.repo)
    lanes_path, config = load_config(repo, args.lanes)
    specs = select_commits(repo, args.commits, config, args.max)
    model = "oracle" if args.oracle is not None else run_model(args.model, config, lanes_path)
    from reposwarm.models.prices import models_in_use, with_list_prices  # (the configuration's own prices win)

    config = with_list_prices(config, models_in_use(config, model))
    slug = repo_slug(repo)
    batch_id = args.batch or f"trial-{slug}-{uuid.uuid4().hex[:6]}"
    client = await client_or_die()
    req = TrialBatchRequest(batch_id=batch_id, repo_path=str(repo), trials=specs, config=config, model=model,
                            oracle_options=args.oracle or "", max_parallel=args.parallel,
                            search_attributes=registered_names(await webui.registered_attributes(client)))
    handle = await client.start_workflow(
        TrialWorkflow.run, req, id=batch_id, task_queue=task_queue(),
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,  # the same --batch resumes, not restarts
        static_summary=f"reposwarm trials: {len(specs)} commits of {repo.name}")
    if not args.json:
        print(f"batch: {batch_id} ({len(specs)} trials); web ui: {ui_url(batch_id)}", flush=True)
    seen: set[str] = set()
    while True:
        desc = await handle.describe()
        if desc.status != WorkflowExecutionStatus.RUNNING:
            break
        try:
            for sc in (await handle.query(TrialWorkflow.scores)).scores:
                if sc.sha not in seen and not args.json:
                    print(f"scored {sc.sha[:12]}: {sc.status}" + (f": {sc.failure or sc.bad_reason}"
                                                                  if sc.failure or sc.bad_reason else ""),
                          flush=True)
                seen.add(sc.sha)
        except Exception:  # a query can fail while a worker restarts
            pass
        await asyncio.sleep(1.0)
    result = await handle.result()
    if args.json:
        print(json.dumps({"batch_id": batch_id, "oracle": model == "oracle", "summary": trial_summary(result.scores),
                          "trials": [sc.model_dump() for sc in result.scores]}, indent=2))
    else:
        print(render_trials(result, model == "oracle"))
    return 0


async def cmd_gc(args: argparse.Namespace) -> int:
    """List what is safe to remove on this worker host (worktrees whose work is on a branch); --yes removes it."""
    from reposwarm.checks import setup
    from reposwarm.checks.sandbox import caches
    from reposwarm.vcs import gc

    running: set[str] = set()
    try:
        client = await connect()
        running = {w.id async for w in client.list_workflows("WorkflowType = 'SwarmWorkflow' AND "
                                                              "ExecutionStatus = 'Running'")}
    except Exception:
        print("note: Temporal is out of reach; keeping every worktree of a run that may be running", file=sys.stderr)
        running = {p.name for p in (home() / "runs").glob("*")}
    verdicts = gc.survey(running)
    for v in verdicts:
        print(f"{'remove' if v.remove else 'keep  '} {v.path}: {v.why}")
        if v.remove and args.yes:
            gc.remove(v)
    ended = {p.name for p in (home() / "runs").glob("*") if p.name not in running}
    if args.yes:  # the lanes' own build caches and setup entries of runs that ended (never shared: the base's stay)
        for run in sorted(ended):
            caches.remove_lane_caches(run)
            setup.remove_lane_entries(run)
    removable = sum(v.remove for v in verdicts)
    print(f"{removable} of {len(verdicts)} worktrees {'removed' if args.yes else 'can go (run gc --yes)'}")
    return 0


async def cmd_recording(args: argparse.Namespace) -> int:
    import yaml

    from reposwarm.runs import recording

    try:
        script = recording.replay_script(args.run)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(str(err)) from None
    text = yaml.safe_dump(script, sort_keys=False, allow_unicode=True)
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
        print(f"wrote {args.out}: replay it with --model replay:{args.out}")
    else:
        print(text, end="")
    return 0
