"""`reposwarm lane-test --repo PATH --lane NAME --goal TEXT [--model M] [--agent AGENT] [--lanes FILE] [--task TEXT]
[--contract TEXT]`: one lane of your lanes file, pointed at a model (a real one, with its key in the worker's
environment) on your own repository, with a goal of yours; then its whole transcript, turn by turn: what the model
said, each tool call and the head of each result. For judging a change to the prompts or the tools on your own code.

`--agent claude-code`, `codex`, `builtin` or `acp:COMMAND ARGS` runs the lane with that agent instead of the one
its lanes file names (docs/agents.md): an outside agent's lane then ends with its session (its id, its tool calls,
its last words, what was reverted outside its slice) where the built-in lane's transcript would be.

It is a run like any other (the lane in its slice and its sandbox, its checkpoints, the merge and the checks),
planned by you rather than the planner (a plan of one lane), started on a local dev server and worker when none
answers (reposwarm/cli/local.py). The transcript is read from this host's store, where a worker this command uses
keeps it. The run is left waiting for review: `review` shows its diff; approve it to get the branch, or reject it.
"""

from __future__ import annotations

import argparse
import json
import shlex
import tempfile
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client

from reposwarm.cli.common import UserError
from reposwarm.contracts import AgentSessionResult, ModelTurnResult, SwarmRequest
from reposwarm.runs.store import Store
from reposwarm.text import inert, inert_line

RESULT_LINES = 6  # lines of each tool result shown
RESULT_CHARS = 600
ARGUMENT_CHARS = 300


def plan_file(folder: Path, lane: str, goal: str, contract: str) -> Path:
    path = folder / "plan.json"
    path.write_text(json.dumps({"interface_contract": contract or "(none: this lane works alone)",
                                "summary": f"lane-test of {lane}", "lanes": [{"lane": lane, "goal": goal}]}))
    return path


def with_agent(req: SwarmRequest, lane: str, agent: str) -> SwarmRequest:
    """The request with `lane` run by `agent` (builtin, claude-code, codex, or acp:COMMAND ARGS), checked as the
    lanes file's `agent` is."""
    value: object = {"acp": shlex.split(agent[4:])} if agent.startswith("acp:") else agent
    role = req.config.swarm.lanes[lane]
    try:
        role = type(role).model_validate({**role.model_dump(), "agent": value})
    except ValidationError as err:
        raise UserError(f"--agent {agent}: {err.errors()[0]['msg']}") from None
    swarm = req.config.swarm.model_copy(update={"lanes": {**req.config.swarm.lanes, lane: role}})
    return req.model_copy(update={"config": req.config.model_copy(update={"swarm": swarm})})


async def last_result(client: Client, workflow_id: str, activity: str) -> Any:
    """The last completed `activity`'s result payloads in the lane's history (its latest run's), or None."""
    handle = client.get_workflow_handle(workflow_id)
    scheduled: set[int] = set()
    last = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name == activity:
                scheduled.add(event.event_id)
        elif (event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
              and event.activity_task_completed_event_attributes.scheduled_event_id in scheduled):
            last = event.activity_task_completed_event_attributes.result.payloads
    return last


def render_session(done: AgentSessionResult) -> str:
    """An outside agent's session as a person reads it."""
    out = [f"{done.agent} session {done.session_id or '-'}: {done.turns} turns, {done.tool_calls} tool calls, "
           f"{done.upstream_calls} model calls ({done.replayed_calls} answered from the proxy's record), "
           f"{done.usage.input_tokens:,} tokens in, {done.usage.output_tokens:,} out",
           *([f"ended: {done.reason}"] if done.reason else []),
           *[f"reverted outside the lane's slice: {line}" for line in done.reverted],
           *[f"changed: {edit.path}" for edit in done.edits],
           "", "its last words:", *[f"  {line}" for line in done.final_text.splitlines()[:40]]]
    return inert("\n".join(out))


async def last_transcript(client: Client, workflow_id: str) -> str | None:
    """The lane's latest transcript reference: the last model turn's result in its workflow's history (the latest
    run's: a lane that continued as new carries its transcript there)."""
    last = await last_result(client, workflow_id, "model_turn")
    if last is None:
        return None
    [result] = await client.data_converter.decode(last, [ModelTurnResult])
    return result.transcript_ref


def render(messages: list[dict[str, Any]]) -> str:
    """A transcript as a person reads it: turns numbered by the model's replies."""
    out: list[str] = []
    turn = 0
    for message in messages:
        role, text = message.get("role"), str(message.get("content") or "")
        if role == "system":
            out.append(f"[the run's shared context: {len(text):,} characters]")
        elif role == "user":
            out += ["", "user:", *[f"  {line}" for line in text.splitlines()[:40]]]
        elif role == "assistant":
            turn += 1
            out += ["", f"turn {turn}:"] + ([f"  {line}" for line in text.splitlines()] if text.strip() else [])
            for call in message.get("tool_calls") or []:
                function = call.get("function") or {}
                arguments = str(function.get("arguments") or "")
                cut = "..." if len(arguments) > ARGUMENT_CHARS else ""
                out.append(f"  -> {function.get('name')}({arguments[:ARGUMENT_CHARS]}{cut})")
        elif role == "tool":
            lines = text[:RESULT_CHARS].splitlines()[:RESULT_LINES]
            more = " ..." if len(text) > RESULT_CHARS or len(text.splitlines()) > RESULT_LINES else ""
            out += [f"     <- {line}" for line in lines[:1]] + [f"        {line}" for line in lines[1:]]
            if more:
                out[-1] += more
    return inert("\n".join(out))


async def cmd_lane_test(args: argparse.Namespace) -> int:
    from reposwarm.cli.live import follow, next_step
    from reposwarm.cli.local import local_swarm, say
    from reposwarm.cli.runs import build_request, start

    if not args.goal.strip():
        raise UserError("--goal is empty: say what the lane should do")
    with tempfile.TemporaryDirectory(prefix="reposwarm-lane-test-") as folder:
        ns = argparse.Namespace(repo=args.repo, task=args.task or args.goal, lanes=args.lanes,
                                plan=str(plan_file(Path(folder), args.lane, args.goal, args.contract or "")),
                                model=args.model)
        req = build_request(ns)  # the lane is checked against the lanes file here: an unknown one is one line
    if args.agent:
        req = with_agent(req, args.lane, args.agent)
    agent = req.config.swarm.lanes[args.lane].agent_name
    async with local_swarm() as local:
        await start(local.client, req)
        say(f"started {req.run_id}: lane {args.lane} on {req.config.swarm.lanes[args.lane].model or req.model}"
            + (f", agent {agent}" if agent != "builtin" else ""))
        v = await follow(local.client, req.run_id, until_review=True)
        lane = next((s for s in v.status.lanes if s.lane == args.lane), None)
        if agent != "builtin":  # an outside agent's lane: its session, not a transcript of turns
            payloads = await last_result(local.client, lane.workflow_id, "agent_session") \
                if lane and lane.workflow_id else None
            if payloads is None:
                say(f"lane {args.lane}'s {agent} session did not end: {inert_line(lane.reason if lane else '')}")
            else:
                [done] = await local.client.data_converter.decode(payloads, [AgentSessionResult])
                print(render_session(done))
        elif (ref := await last_transcript(local.client, lane.workflow_id)
              if lane and lane.workflow_id else None) is None:
            say(f"lane {args.lane} made no model turn: {inert_line(lane.reason if lane else '')}")
        else:
            try:
                messages = Store(req.run_id).get_json(ref)
            except FileNotFoundError:
                raise UserError(f"the lane's transcript is not in this host's store ({ref}): the worker that ran "
                                "it keeps it; run lane-test where the worker runs") from None
            print(render(messages))
        print()
        print(f"lane {args.lane}: {lane.state if lane else '?'}" + (f" ({inert_line(lane.reason)})"
                                                                   if lane and lane.reason else ""))
        print(inert(next_step(v)))
    return 0
