"""A lane's model turn as an activity (model_turn), and the call that warms a round's shared prefix (warm_prefix).

One turn: the conversation so far (reposwarm/agent/conversation.py: the transcript from the run's store, the new
messages, every open call answered, compacted to the context), the model's reply, and the turn's result: the
reply's calls checked (finish among them), a reply cut at its output limit or declined told so, and the
transcript stored again. History carries the transcript's reference, the tool calls of the reply, and the
usage. The call itself (reuse of a paid answer, retries, bounds, usage, span, recording, ledger) is
reposwarm.models.calls.complete, shared with the planner (activities/planning.py) and the converger.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from temporalio import activity
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from activities.repo import create_lane_worktree, lane_worktree
from activities.tool_call import answer
from reposwarm.agent import conversation
from reposwarm.agent.conversation import Message, SystemMessage, ToolResult, UserMessage
from reposwarm.agent.prompts import LANE_SYSTEM, WARM_MESSAGE, WITHHELD_REPLY, cut_note, declined_note
from reposwarm.agent.specs import tool_specs
from reposwarm.contracts import (
    ModelTurnInput,
    ModelTurnResult,
    ToolCall,
    ToolInput,
    ToolOutcome,
    TurnSteps,
    Usage,
    WarmInput,
)
from reposwarm.contracts.cost import next_billed, over_budget
from reposwarm.contracts.model import ModelReply
from reposwarm.models.calls import MAX_ERROR_CHARS, as_text, complete
from reposwarm.models.limits import REFUSAL, is_cut
from reposwarm.runs.store import Store

INLINE_ARGS = 1024  # tool-call arguments larger than this ride in the store, not in history


@activity.defn
async def model_turn(req: ModelTurnInput) -> ModelTurnResult:
    """One turn of a lane: append the new messages, ask the model, store the transcript; with `req.steps`, the
    turns that follow while the model only reads and edits (_go_on)."""
    store = Store(req.run_id)
    started = time.monotonic()
    # A first turn may make the lane's worktree, beside the model call: its calls run once it is there
    making = asyncio.create_task(asyncio.to_thread(create_lane_worktree, req.worktree)) if req.worktree else None
    try:
        # The store's reads and writes run in a thread, as complete()'s do: the worker's event loop serves every
        # lane's activities and workflow tasks, and a slow disk must not hold them up.
        messages, wire, compacted = await asyncio.to_thread(_conversation, req, store)
        reply = await _ask(req, req.turn, wire)
    except BaseException:
        if making is not None:  # (the worktree's git done before the retry makes it again; the turn's error is said)
            await asyncio.gather(making, return_exceptions=True)
        raise
    made = await making if making is not None else None  # (its failure is the activity's, retried as one)
    if req.steps is None:
        return (await asyncio.to_thread(_turn_result, req, store, messages, reply, compacted, req.turn)
                ).model_copy(update={"worktree": made})
    turns: list[ModelTurnResult] = []
    spent = req.steps.spent
    while True:
        result, spent, going = await asyncio.to_thread(_stepped, req, req.steps, store, messages, reply, compacted,
                                                       req.turn + len(turns), spent, len(turns) + 1, started)
        turns.append(result)
        if going is None:
            break
        messages, wire, compacted = going
        try:
            reply = await _ask(req, req.turn + len(turns), wire)
        except Exception as err:  # noqa: BLE001 - the turns done are kept; the next activity asks again
            # A model call failing after the first turn ends the activity with the turns it has: the workflow then
            # asks for the next turn as an activity of its own, with its own retries (and the provider's outage
            # window), and an error that is no outage fails it there, as it would have failed this one.
            _not_asked(req, req.turn + len(turns) + 1, err)
            break
    transcript = await asyncio.to_thread(store.put_json, conversation.to_wire(messages))
    done = [t.model_copy(update={"transcript_ref": transcript}) for t in turns]
    return done[0].model_copy(update={"then": done[1:], "worktree": made})


async def _ask(req: ModelTurnInput, turn: int, wire: list[dict[str, Any]]) -> ModelReply:
    """The model's reply to the conversation as sent (`wire`), for the lane's turn `turn` (0-based, as counted
    before it): the run's exactly-once record answers a request it has answered before (a retried activity)."""
    return await complete(req.run_id, req.model, agent=req.agent, round_no=req.round, turn=turn,
                          attempt=req.attempt, system=req.system or LANE_SYSTEM, messages=wire,
                          tools=tool_specs(), price=req.price, record=req.record, cache_ttl=req.cache_ttl,
                          max_tokens=req.max_output_tokens, thinking_tokens=req.thinking_tokens,
                          reasoning_effort=req.reasoning_effort)


def _go_on(req: ModelTurnInput, steps: TurnSteps, result: ModelTurnResult, done: int, spent: Usage,
           started: float) -> bool:
    """Whether the activity asks the model again by itself after `result`, its `done`-th turn: only where the
    workflow would have asked the next turn at once, and nothing it decides between turns is at stake.

    Every call of the reply ran in the turn (a quick tool) and none was malformed; the reply was no finish, not cut
    and not declined; the activity is within its turns and seconds, the lane within its wall-time budget, and the
    next call within the lane's budgets as the workflow reckons them (reposwarm/contracts/cost.py). Otherwise the
    workflow reads the turns, runs what is left and decides, as after any turn."""
    if result.finish is not None or result.cut or result.declined or not result.tool_calls:
        return False
    if len(result.outcomes) != len(result.tool_calls) or any(o.malformed for o in result.outcomes):
        return False
    if done >= steps.turns or time.monotonic() - started >= steps.seconds or time.time() >= steps.wall_deadline:
        return False
    new_chars = sum(o.output_chars for o in result.outcomes)
    next_call = next_billed(req.model, req.price, result.usage, new_chars)
    return over_budget(req.agent, req.price, spent, steps.token_budget, steps.cost_budget_usd, next_call) is None


def _stepped(req: ModelTurnInput, steps: TurnSteps, store: Store, messages: list[Message], reply: ModelReply,
             compacted: bool, turn: int, spent: Usage, done: int, started: float,
             ) -> tuple[ModelTurnResult, Usage, tuple[list[Message], list[dict[str, Any]], bool] | None]:
    """A turn of model_turn's batch, in one trip to a thread (each trip costs the event loop a wake-up): its
    result (_turn_result, the transcript kept for the end), the usage spent with it, and, where the activity goes
    on (_go_on), the conversation to send next (_answered); None where it stops there."""
    result = _turn_result(req, store, messages, reply, compacted, turn, keep=False)
    spent = spent + result.usage
    if not _go_on(req, steps, result, done, spent, started):
        return result, spent, None
    try:
        return result, spent, _answered(req, store, messages, result)
    except Exception as err:  # noqa: BLE001 - the turns done are kept; the next activity asks again
        _not_asked(req, turn + 2, err)
        return result, spent, None


def _not_asked(req: ModelTurnInput, turn: int, err: Exception) -> None:
    activity.logger.info("lane %s: turn %d not asked in this activity: %s", req.agent, turn, str(err)[:200])


def _answered(req: ModelTurnInput, store: Store, messages: list[Message],
              result: ModelTurnResult) -> tuple[list[Message], list[dict[str, Any]], bool]:
    """The conversation after a turn whose calls all ran in it: each call's output answers it, as the workflow's
    next turn would have sent them (its tool results, read back from the store), compacted to the context."""
    answered = [*messages, *(ToolResult(tool_call_id=o.call_id, content=store.get(o.output_ref).decode("utf-8"))
                             for o in result.outcomes)]
    compacted_messages, compacted = conversation.compact(conversation.answer_open_calls(answered), req.context_tokens)
    return compacted_messages, conversation.to_wire(compacted_messages), compacted


def _conversation(req: ModelTurnInput, store: Store) -> tuple[list[Message], list[dict[str, Any]], bool]:
    """The transcript so far with the new messages, compacted to the context (as messages, and as sent); and
    whether it was compacted."""
    if req.transcript_ref:  # its transcript is in the same worker's store (a first turn may run as the worktree is made)
        lane_worktree(req.run_id, req.agent)
    new_messages = req.new_messages
    try:
        messages = conversation.from_wire(store.get_json(req.transcript_ref)) if req.transcript_ref else []
    except FileNotFoundError:
        if not req.if_lost:
            raise
        # The lane moved off a lost host whose transcript no store here holds (no shared object store): it
        # starts afresh from its goal and its committed work.
        messages, new_messages = [], req.if_lost
    for message in conversation.from_wire(new_messages):
        if isinstance(message, ToolResult) and message.content_ref is not None:  # a tool's output, from the store
            message = ToolResult(tool_call_id=message.tool_call_id,
                                 content=store.get(message.content_ref).decode("utf-8"))
        messages.append(message)
    messages, compacted = conversation.compact(conversation.answer_open_calls(messages), req.context_tokens)
    return messages, conversation.to_wire(messages), compacted


def _turn_result(req: ModelTurnInput, store: Store, messages: list[Message], reply: ModelReply,
                 compacted: bool, turn: int, *, keep: bool = True) -> ModelTurnResult:
    """The turn's result, the reply appended to `messages`; the transcript stored, unless not `keep` (a turn
    going on by itself: model_turn stores it once, after its last turn)."""
    cut, declined = is_cut(reply.stop_reason), reply.stop_reason == REFUSAL
    note = ""
    if declined:
        reply, note = _withheld(reply)
    elif cut:
        reply, note = _cut_short(reply)
    messages.append(conversation.replied(reply))
    if note and not reply.tool_calls:  # with calls, the note is the cut call's result (it must follow the calls)
        messages.append(UserMessage(content=note))
    calls, finish = conversation.checked_calls(reply.tool_calls, MAX_ERROR_CHARS)
    content = (reply.stop_detail or "the model gave no reason") if declined else reply.content
    transcript = store.put_json(conversation.to_wire(messages)) if keep else ""
    result = _decodable(ModelTurnResult(transcript_ref=transcript,
                                        content=content[:2000], tool_calls=[_parked(c, store) for c in calls],
                                        finish=finish, usage=reply.usage, model=req.model, compacted=compacted,
                                        cut=cut, declined=declined))
    return _with_quick_calls(req, result, turn)


def _with_quick_calls(req: ModelTurnInput, result: ModelTurnResult, turn: int) -> ModelTurnResult:
    """The reply's first calls run here, while they are quick tools (req.tools): a step of reads and edits is then
    this one activity, not a tool call's round trip after it (bench/results.json: step, host_affinity).

    Each runs exactly as the workflow would have run it (run_tool: the same input, exactly-once record, ledger
    line, and outcome), in order, stopping at the first call that is not one of them: the workflow runs that one
    and those after it, as it always has, so calls still run one at a time in the reply's order."""
    if req.tools is None:
        return result
    outcomes: list[ToolOutcome] = []
    for call in result.tool_calls:
        if call.name not in req.tools.names:
            break
        try:
            outcomes.append(answer(ToolInput(
                run_id=req.run_id, lane=req.agent, call=call, round=req.round, attempt=req.attempt,
                turn=turn + 1, allowed_paths=req.tools.allowed_paths, read_only_paths=req.tools.read_only_paths,
                default_reason=result.content[:200]), in_turn=True))
        except Exception:  # noqa: BLE001 - run_tool answers every call; what it raises is the workflow's to retry
            break  # (this call and the rest go to the workflow's activities, their own retries, as they always did)
    # (the rest of the result was checked by _decodable; an outcome the workflow could not decode, none known, is
    # left to the workflow: it runs the calls as activities, whose exactly-once records answer as recorded here)
    if not outcomes or _fails(ModelTurnResult(transcript_ref=result.transcript_ref, outcomes=outcomes)):
        return result
    return result.model_copy(update={"outcomes": outcomes})


def _parked(call: ToolCall, store: Store) -> ToolCall:
    """A call as history carries it: large arguments (a whole file) in the store, a preview in history."""
    if len(call.raw_arguments) <= INLINE_ARGS:
        return call
    return call.model_copy(update={"arguments": None, "arguments_ref": store.put(call.raw_arguments),
                                   "raw_arguments": call.raw_arguments[:200]})


_PAYLOADS = pydantic_data_converter.payload_converter


def _fails(value: ModelTurnResult) -> str | None:
    """Why the workflow could not decode this result, if it could not (None: it can)."""
    try:
        _PAYLOADS.from_payloads(_PAYLOADS.to_payloads([value]), [ModelTurnResult])
    except Exception as err:  # noqa: BLE001 - any failure to encode or decode is the same problem
        return f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
    return None


def _decodable(result: ModelTurnResult) -> ModelTurnResult:
    """The turn's result as the lane's workflow will decode it, or the calls that stop that turned into errors.

    A result the workflow cannot decode fails its workflow task on every attempt: the lane would look
    running for ever. bounded() makes that impossible for what it knows of; this checks the result itself
    with the very converter the workflow uses, so whatever it does not know of ends as a call error too.
    """
    problem = _fails(result)
    if problem is None:
        return result
    calls = list(result.tool_calls)
    for i, call in enumerate(calls):
        if _fails(ModelTurnResult(transcript_ref=result.transcript_ref, tool_calls=[call])) is None:
            continue
        calls[i] = ToolCall(id=call.id, name=as_text(call.name), raw_arguments="{}",
                            error=f"the call could not be passed on as sent ({problem}); it was not run")
    result = result.model_copy(update={"tool_calls": calls, "finish": None if _fails(
        ModelTurnResult(transcript_ref=result.transcript_ref, finish=result.finish)) else result.finish})
    if (problem := _fails(result)) is not None:
        raise ApplicationError(f"the model's reply could not be made into a turn result: {problem}",
                               type="ModelError", non_retryable=True)
    return result


def _cut_short(reply: ModelReply) -> tuple[ModelReply, str]:
    """A reply cut at the output limit: its last call was cut short (its arguments end mid-way: a file's content
    cut in half would be written as if whole), so it is not run, and its result says why and how to go on. The
    calls before it were whole and run. In the transcript the cut call keeps its name and `{}`, not the cut text."""
    calls = list(reply.tool_calls)
    last = calls[-1] if calls else None
    note = cut_note(reply.output_limit, last, len(calls) - 1 if calls else 0)
    if last is not None:
        path = (last.arguments or {}).get("path")
        kept = {"path": path} if isinstance(path, str) and len(path) <= 1_000 else None  # for the lane's step line
        calls[-1] = last.model_copy(update={"arguments": kept, "raw_arguments": "{}", "error": note[:MAX_ERROR_CHARS]})
    return reply.model_copy(update={"tool_calls": calls}), note


def _withheld(reply: ModelReply) -> tuple[ModelReply, str]:
    """A reply the model declined (stop reason refusal): nothing of it runs, and it is not kept as it came (the
    provider asks that the declined turn be taken out or changed, or the next one is declined too); the lane is
    told, and goes on or finishes."""
    kept = reply.model_copy(update={"content": WITHHELD_REPLY, "tool_calls": [], "thinking": ""})
    return kept, declined_note(reply.stop_detail)


@activity.defn
async def warm_prefix(req: WarmInput) -> Usage:
    """Write a round's shared prefix (tool specs, the swarm's instructions, the run's context) to the provider's
    cache before its lanes start, with a one-token reply: the lanes that start together then read it."""
    messages: list[Message] = [SystemMessage(content=req.shared), UserMessage(content=WARM_MESSAGE)]
    reply = await complete(req.run_id, req.model, agent="cache", round_no=req.round, turn=0, system=LANE_SYSTEM,
                           messages=conversation.to_wire(messages), tools=tool_specs(), price=req.price, record=req.record,
                           cache_ttl=req.cache_ttl, max_tokens=1)
    return reply.usage
