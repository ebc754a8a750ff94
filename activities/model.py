"""Model calls as activities: one lane turn, or one planning round.

The transcript lives in the run's store; history carries its reference, the
tool calls of the reply, and the usage. The call itself (reuse of a paid
answer, retries, bounds, usage, span, recording, ledger) is
reposwarm.models.calls.complete, shared with the converger.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from temporalio import activity
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from activities.repo import lane_worktree
from reposwarm import gitcmd
from reposwarm.agent.prompts import LANE_SYSTEM, PLANNER_SYSTEM, WARM_MESSAGE, planner_message
from reposwarm.agent.specs import parse_args, tool_specs
from reposwarm.config import ConfigError, check_plan
from reposwarm.contracts import (
    Finish,
    LanesFile,
    ModelTurnInput,
    ModelTurnResult,
    Plan,
    PlanInput,
    PlanOutcome,
    SwarmConfig,
    ToolCall,
    Usage,
    WarmInput,
)
from reposwarm.intel.repomap import repo_map
from reposwarm.intel.symbols import SymbolIndexError
from reposwarm.models import ModelReply, schema_problems, structured_reply
from reposwarm.models.calls import MAX_ERROR_CHARS, as_text, complete
from reposwarm.models.limits import REFUSAL, cut_note, is_cut
from reposwarm.remote import open_repository
from reposwarm.runs.store import Store


def _assistant_message(reply: ModelReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.provider_id:  # bookkeeping, never sent as is: the next request's cache diagnostics name it
        message["provider_id"] = reply.provider_id
    if reply.thinking:  # bookkeeping too: Anthropic's thinking blocks, sent back first in this message, to it only
        message["thinking"] = reply.thinking
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
            for c in reply.tool_calls
        ]
    return message


INLINE_ARGS = 1024  # tool-call arguments larger than this ride in the store, not in history
MAX_SUMMARY_CHARS = 20_000  # a finish summary rides in history (the lane's result, the review)
KEEP_RECENT = 6  # assistant turns kept whole when a transcript is compacted


LOST_RESULT = "(no result: the machine running this call was lost before it reported; run it again if needed)"


def answer_open_calls(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool call gets its answer before the conversation goes on (providers refuse a transcript with an
    unanswered call): a call whose result was lost with its machine says so."""
    out: list[dict[str, Any]] = []
    open_ids: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "tool":
            open_ids = [i for i in open_ids if i != message.get("tool_call_id")]
        else:
            out += [{"role": "tool", "tool_call_id": i, "content": LOST_RESULT} for i in open_ids]
            open_ids = [c["id"] for c in message.get("tool_calls") or []] if role == "assistant" else []
        out.append(message)
    return out


def _tokens(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages)) // 4


def _head(messages: list[dict[str, Any]]) -> int:
    """How many messages open the conversation and are never folded: the run's shared context (a system message)
    and the lane's first message (its goal and slice). Kept byte for byte, they stay the cached prefix."""
    first_user = next((i for i, m in enumerate(messages) if m.get("role") == "user"), 0)
    return first_user + 1


_SUMMARY = re.compile(r"^Earlier turns, summarised to fit the context window \((\d+) turns")


def _summarised(message: dict[str, Any]) -> int:
    """The turns an earlier summary folded (a second compaction folds the first summary too)."""
    found = _SUMMARY.match(str(message.get("content") or "")) if message.get("role") == "user" else None
    return int(found.group(1)) if found else 0


def compact(messages: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Keep the opening (the shared context and the goal) and the recent turns; fold the middle into a summary.

    The summary is mechanical (which tools ran on which paths, and what the
    model said), so compaction costs no model call and is the same on a retry.
    Cuts fall on assistant messages, so no tool result loses its call. The
    opening is the cached prefix every turn shares: it is never touched.
    """
    head = _head(messages)
    if _tokens(messages) < limit * 0.8 or len(messages) < head + 2:
        return messages, False
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i >= head]
    keep_from = starts[-KEEP_RECENT] if len(starts) > KEEP_RECENT else (starts[-1] if starts else len(messages))
    while keep_from < len(messages) and _tokens(messages[:head] + messages[keep_from:]) > limit * 0.6:
        later = [i for i in starts if i > keep_from]
        if not later:
            break
        keep_from = later[0]
    folded = messages[head:keep_from]
    if not folded:
        return messages, False
    lines = []
    for m in folded:
        if m.get("role") == "assistant":
            if m.get("content"):
                lines.append(f"- you said: {str(m['content'])[:200]}")
            for call in m.get("tool_calls") or []:
                fn = call.get("function", {})
                args = fn.get("arguments", "")
                try:
                    parsed = json.loads(args)
                    target = parsed.get("path") or parsed.get("pattern") or parsed.get("symbol") or ""
                except (ValueError, AttributeError):
                    target = ""
                lines.append(f"- you called {fn.get('name')}({target})")
        elif m.get("role") == "tool" and str(m.get("content", "")).startswith(("error", "refused")):
            lines.append(f"  -> {str(m['content'])[:200]}")
    turns = sum(m.get("role") == "assistant" for m in folded) + sum(_summarised(m) for m in folded)
    summary = {"role": "user", "content": f"Earlier turns, summarised to fit the context window ({turns} turns; "
               "your edits are on disk; read files again if you need their text):\n" + "\n".join(lines)}
    return [*messages[:head], summary, *messages[keep_from:]], True


def _checked_calls(reply: ModelReply, store: Store) -> tuple[list[ToolCall], Finish | None]:
    """Validate each call once, here; park large arguments in the store."""
    finishes = [c for c in reply.tool_calls if c.name == "finish"]
    calls, finish = [], None
    for call in reply.tool_calls:
        error = call.error  # set by bounded(): the call cannot be run as sent, whatever its arguments say
        if error is None:
            try:
                args = parse_args(call.name, call.arguments, call.raw_arguments)
                if call.name == "finish":
                    if len(finishes) > 1:
                        raise ValueError(f"finish was called {len(finishes)} times in one reply; call it once")
                    finish = _finish(args)
            except ValueError as err:
                error = str(err)[:MAX_ERROR_CHARS]
        if len(call.raw_arguments) > INLINE_ARGS:
            call = call.model_copy(update={"arguments": None, "arguments_ref": store.put(call.raw_arguments),
                                           "raw_arguments": call.raw_arguments[:200]})
        calls.append(call.model_copy(update={"error": error}))
    return calls, finish


def _finish(args: Any) -> Finish:
    """The lane's summary rides in history and ends up in commit messages and the review: bounded, and text."""
    texts = [args.summary, *args.assumptions]
    if len(args.summary) > MAX_SUMMARY_CHARS or sum(map(len, texts)) > 2 * MAX_SUMMARY_CHARS:
        raise ValueError(f"finish's summary and assumptions are {sum(map(len, texts)):,} characters; keep the "
                         f"summary under {MAX_SUMMARY_CHARS:,} and all of it under {2 * MAX_SUMMARY_CHARS:,}")
    if any("\x00" in text for text in texts):
        raise ValueError("finish's summary or assumptions hold a NUL byte; send plain text")
    return Finish(summary=args.summary, assumptions=args.assumptions)


_PAYLOADS = pydantic_data_converter.payload_converter


def _decodable(result: ModelTurnResult) -> ModelTurnResult:
    """The turn's result as the lane's workflow will decode it, or the calls that stop that turned into errors.

    A result the workflow cannot decode fails its workflow task on every attempt: the lane would look
    running for ever. bounded() makes that impossible for what it knows of; this checks the result itself
    with the very converter the workflow uses, so whatever it does not know of ends as a call error too.
    """
    def fails(value: ModelTurnResult) -> str | None:
        try:
            _PAYLOADS.from_payloads(_PAYLOADS.to_payloads([value]), [ModelTurnResult])
        except Exception as err:  # noqa: BLE001 - any failure to encode or decode is the same problem
            return f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
        return None

    problem = fails(result)
    if problem is None:
        return result
    calls = list(result.tool_calls)
    for i, call in enumerate(calls):
        if fails(ModelTurnResult(transcript_ref=result.transcript_ref, tool_calls=[call])) is None:
            continue
        calls[i] = ToolCall(id=call.id, name=as_text(call.name), raw_arguments="{}",
                            error=f"the call could not be passed on as sent ({problem}); it was not run")
    result = result.model_copy(update={"tool_calls": calls, "finish": None if fails(
        ModelTurnResult(transcript_ref=result.transcript_ref, finish=result.finish)) else result.finish})
    if (problem := fails(result)) is not None:
        raise ApplicationError(f"the model's reply could not be made into a turn result: {problem}",
                               type="ModelError", non_retryable=True)
    return result


@activity.defn
async def model_turn(req: ModelTurnInput) -> ModelTurnResult:
    """One turn of a lane: append the new messages, ask the model, store the transcript."""
    store = Store(req.run_id)
    # The store's reads and writes run in a thread, as complete()'s do: the worker's event loop serves every
    # lane's activities and workflow tasks, and a slow disk must not hold them up.
    messages, compacted = await asyncio.to_thread(_conversation, req, store)
    reply = await complete(req.run_id, req.model, agent=req.agent, round_no=req.round, turn=req.turn,
                           attempt=req.attempt, system=req.system or LANE_SYSTEM, messages=messages,
                           tools=tool_specs(), price=req.price, record=req.record, cache_ttl=req.cache_ttl,
                           max_tokens=req.max_output_tokens, thinking_tokens=req.thinking_tokens,
                           reasoning_effort=req.reasoning_effort)
    return await asyncio.to_thread(_turn_result, req, store, messages, reply, compacted)


def _conversation(req: ModelTurnInput, store: Store) -> tuple[list[dict[str, Any]], bool]:
    """The transcript so far with the new messages, compacted to the context; and whether it was."""
    if req.transcript_ref:  # its transcript is in the same worker's store (a first turn may run as the worktree is made)
        lane_worktree(req.run_id, req.agent)
    new_messages = req.new_messages
    try:
        messages: list[dict[str, Any]] = store.get_json(req.transcript_ref) if req.transcript_ref else []
    except FileNotFoundError:
        if not req.if_lost:
            raise
        # The lane moved off a lost host whose transcript no store here holds (no shared object store): it
        # starts afresh from its goal and its committed work.
        messages, new_messages = [], req.if_lost
    for message in new_messages:
        message = dict(message)
        if "content_ref" in message:
            message["content"] = store.get(message.pop("content_ref")).decode("utf-8")
        messages.append(message)
    return compact(answer_open_calls(messages), req.context_tokens)


def _turn_result(req: ModelTurnInput, store: Store, messages: list[dict[str, Any]], reply: ModelReply,
                 compacted: bool) -> ModelTurnResult:
    cut, declined = is_cut(reply.stop_reason), reply.stop_reason == REFUSAL
    note = ""
    if declined:
        reply, note = _withheld(reply)
    elif cut:
        reply, note = _cut_short(reply)
    messages.append(_assistant_message(reply))
    if note and not reply.tool_calls:  # with calls, the note is the cut call's result (it must follow the calls)
        messages.append({"role": "user", "content": note})
    calls, finish = _checked_calls(reply, store)
    content = (reply.stop_detail or "the model gave no reason") if declined else reply.content
    return _decodable(ModelTurnResult(transcript_ref=store.put_json(messages), content=content[:2000],
                                      tool_calls=calls, finish=finish, usage=reply.usage, model=req.model,
                                      compacted=compacted, cut=cut, declined=declined))


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
    why = f" ({reply.stop_detail[:300]})" if reply.stop_detail else ""
    note = (f"reposwarm: the model declined to answer{why}; that reply was withheld and none of its calls ran. "
            "Go on with the goal if it can be done within the usage policies, leaving out what was declined; if "
            "it cannot, call finish and say why.")
    kept = reply.model_copy(update={"content": "(reposwarm: this reply was declined and withheld)", "tool_calls": [],
                                    "thinking": ""})
    return kept, note


@activity.defn
async def warm_prefix(req: WarmInput) -> Usage:
    """Write a round's shared prefix (tool specs, the swarm's instructions, the run's context) to the provider's
    cache before its lanes start, with a one-token reply: the lanes that start together then read it."""
    messages = [{"role": "system", "content": req.shared}, {"role": "user", "content": WARM_MESSAGE}]
    reply = await complete(req.run_id, req.model, agent="cache", round_no=req.round, turn=0, system=LANE_SYSTEM,
                           messages=messages, tools=tool_specs(), price=req.price, record=req.record,
                           cache_ttl=req.cache_ttl, max_tokens=1)
    return reply.usage


SUBMIT_PLAN = {
    "name": "submit_plan",
    "description": "Submit the plan: the interface contract and one goal per lane.",
    "parameters": {k: v for k, v in Plan.model_json_schema().items() if k != "title"},
}
REPO_MAP_TOKENS = 4_000  # the repository map: the most relevant definitions, by file
REPO_LISTING_TOKENS = 1_500  # the shallow file list after the map
REPO_LISTING_ONLY_TOKENS = 6_000  # the file list when there is no map (no language the index parses)


def _parse_plan(reply: ModelReply, lanes: LanesFile) -> Plan:
    """The plan comes as a submit_plan call (structured output) or as JSON in the reply's text."""
    text = structured_reply(reply, "submit_plan", "plan")
    try:
        plan = Plan.model_validate_json(text)
    except ValidationError as err:
        problems = schema_problems(err, "plan", 5)
        raise ValueError(f"the plan does not match the Plan schema: {problems}") from None
    try:
        check_plan(plan, lanes, "plan")
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return plan


def _listing(files: list[str], budget_tokens: int) -> list[str]:
    """The file list cut to a token budget, shallow paths first so the whole tree's shape shows."""
    out: list[str] = []
    used = 0
    for name in sorted(files, key=lambda f: (f.count("/"), f)):
        used += len(name) // 4 + 1
        if used > budget_tokens:
            out.append(f"... and {len(files) - len(out)} more files")
            break
        out.append(name)
    return sorted(out[:-1]) + out[-1:] if used > budget_tokens else sorted(out)


def _repo_map(repo_path: str, base_sha: str, focus: str, progress: Callable[[str], None]) -> str:
    """The repository map of the base commit; without one (an index failure) the planner gets the file list."""
    try:
        return repo_map(repo_path, base_sha, budget_tokens=REPO_MAP_TOKENS, focus_text=focus, progress=progress)
    except (SymbolIndexError, sqlite3.Error, ImportError, OSError) as err:
        activity.logger.warning("no repository map for %s: %s", repo_path, err)
        return ""


@activity.defn
async def plan_round(req: PlanInput) -> PlanOutcome:
    """Ask the model for a Plan; an invalid plan goes back to it once with the error, then fails the run."""
    def local() -> str:  # where git opens the repository on this host (a remote's clone, with the base in it)
        repo = open_repository(req.repo_path)
        repo.have(req.base_sha)
        return str(repo.path)

    repo_path = await asyncio.to_thread(local)
    listing = await asyncio.to_thread(gitcmd.repo(repo_path).ls_tree, "-r", "--name-only", req.base_sha)
    loop = asyncio.get_running_loop()

    def progress(message: str) -> None:  # from the map's thread: heartbeat details, shown by `starter.py watch`
        loop.call_soon_threadsafe(activity.heartbeat, message)

    map_text = await asyncio.to_thread(_repo_map, repo_path, req.base_sha,
                                       "\n".join([req.task, *req.feedback]), progress)
    files = _listing(listing.splitlines(), REPO_LISTING_TOKENS if map_text else REPO_LISTING_ONLY_TOKENS)
    lanes = LanesFile(swarm=SwarmConfig(lanes=req.lanes))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": planner_message(req.task, req.lanes, req.feedback, req.previous_plan, files,
                                                    repo_map=map_text)}
    ]
    error, usage = "", Usage()
    for turn in range(2):
        reply = await complete(req.run_id, req.model, agent="planner", round_no=req.round, turn=turn,
                               system=PLANNER_SYSTEM, messages=messages, tools=[SUBMIT_PLAN], price=req.price,
                               record=req.record, cache_ttl=req.cache_ttl)
        usage = usage + reply.usage
        try:
            return PlanOutcome(plan=_parse_plan(reply, lanes), usage=usage)
        except ValueError as err:
            error = str(err)
            correction = f"That plan is invalid: {error}\nSubmit a corrected plan."
            messages.append(_assistant_message(reply))
            if reply.tool_calls:
                messages += [{"role": "tool", "tool_call_id": c.id, "content": correction} for c in reply.tool_calls]
            else:
                messages.append({"role": "user", "content": correction})
    raise ApplicationError(f"the planner's plan was invalid twice: {error}", type="InvalidPlan", non_retryable=True)
