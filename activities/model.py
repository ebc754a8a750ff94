"""Model calls as activities: one lane turn, or one planning round.

The transcript lives in the run's store; history carries its reference, the
tool calls of the reply, and the usage. Temporal owns retries: a retryable
model error is raised as is, a permanent one as a non-retryable failure.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import git
from pydantic import ValidationError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.tools import tool_specs
from reposwarm import ledger
from reposwarm.config import ConfigError, check_plan
from reposwarm.contracts import LanesFile, ModelTurnInput, ModelTurnResult, Plan, PlanInput, SwarmConfig, Usage
from reposwarm.models import ModelError, ModelReply, ModelRequest, provider_for
from reposwarm.prompts import LANE_SYSTEM, PLANNER_SYSTEM, planner_message
from reposwarm.store import Store


def _estimate(messages: list[dict[str, Any]], reply: ModelReply) -> Usage:
    """Providers that report no usage (the replay model without recorded usage) get a size estimate."""
    if reply.usage.input_tokens or reply.usage.output_tokens:
        return reply.usage.model_copy(update={"model_calls": 1})
    sent = len(json.dumps(messages))
    said = len(reply.content) + sum(len(c.raw_arguments) for c in reply.tool_calls)
    return Usage(input_tokens=sent // 4, output_tokens=max(1, said // 4), model_calls=1)


async def _complete(model_name: str, request_fields: dict[str, Any], run_id: str, call_id: str) -> ModelReply:
    try:
        provider, model = provider_for(model_name)
        request = ModelRequest(model=model, **request_fields)
        started = time.monotonic()
        reply = await provider.complete(request)
    except ModelError as err:
        raise ApplicationError(str(err), type="ModelError", non_retryable=not err.retryable) from err
    usage = _estimate(request.messages, reply)
    reply = reply.model_copy(update={"usage": usage})
    info = activity.info()
    ledger.record(run_id, "model_call", key=f"{info.workflow_id}/{info.activity_id}/model", call_id=call_id,
                  agent=request.agent, model=model_name, input_tokens=usage.input_tokens,
                  output_tokens=usage.output_tokens, cost_usd=usage.cost_usd,
                  latency_s=round(time.monotonic() - started, 3), attempt=info.attempt)
    return reply


def _assistant_message(reply: ModelReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
            for c in reply.tool_calls
        ]
    return message


@activity.defn
async def model_turn(req: ModelTurnInput) -> ModelTurnResult:
    """One turn of a lane: append the new messages, ask the model, store the transcript."""
    store = Store(req.run_id)
    messages: list[dict[str, Any]] = store.get_json(req.transcript_ref) if req.transcript_ref else []
    for message in req.new_messages:
        message = dict(message)
        if "content_ref" in message:
            message["content"] = store.get(message.pop("content_ref")).decode("utf-8")
        messages.append(message)
    reply = await _complete(
        req.model,
        dict(system=req.system or LANE_SYSTEM, messages=messages, tools=tool_specs(), agent=req.agent,
             round=req.round, turn=req.turn),
        req.run_id, f"{req.agent}-r{req.round}-t{req.turn}",
    )
    messages.append(_assistant_message(reply))
    return ModelTurnResult(transcript_ref=store.put_json(messages), content=reply.content,
                           tool_calls=reply.tool_calls, usage=reply.usage, model=req.model)


def _parse_plan(reply: ModelReply, lanes: LanesFile) -> Plan:
    text = reply.content.strip()
    if not text and reply.tool_calls:
        text = reply.tool_calls[0].raw_arguments
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        plan = Plan.model_validate_json(text)
    except ValidationError as err:
        raise ValueError(f"the plan does not match the Plan schema: {err}") from None
    try:
        check_plan(plan, lanes, "plan")
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return plan


@activity.defn
async def plan_round(req: PlanInput) -> Plan:
    """Ask the model for a Plan; an invalid plan goes back to it once with the error, then fails the run."""
    listing = await asyncio.to_thread(git.Git(req.repo_path).ls_tree, "-r", "--name-only", req.base_sha)
    files = listing.splitlines()
    lanes = LanesFile(swarm=SwarmConfig(lanes=req.lanes))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": planner_message(req.task, req.lanes, req.feedback, req.previous_plan, files)}
    ]
    error = ""
    for turn in range(2):
        reply = await _complete(
            req.model, dict(system=PLANNER_SYSTEM, messages=messages, tools=[], agent="planner",
                            round=req.round, turn=turn),
            req.run_id, f"planner-r{req.round}-t{turn}",
        )
        try:
            return _parse_plan(reply, lanes)
        except ValueError as err:
            error = str(err)
            messages += [{"role": "assistant", "content": reply.content},
                         {"role": "user", "content": f"That plan is invalid: {error}\nReply with a corrected plan."}]
    raise ApplicationError(f"the planner's plan was invalid twice: {error}", type="InvalidPlan", non_retryable=True)
