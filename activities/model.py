"""Model calls as activities: one lane turn, or one planning round.

The transcript lives in the run's store; history carries its reference, the
tool calls of the reply, and the usage. Temporal owns retries: a retryable
model error is raised as is, a permanent one as a non-retryable failure.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import re
import sqlite3
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from opentelemetry import trace
from pydantic import ValidationError
from temporalio import activity
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError

from activities.repo import lane_worktree
from reposwarm import gitcmd
from reposwarm.agent.prompts import LANE_SYSTEM, PLANNER_SYSTEM, planner_message
from reposwarm.agent.tools import parse_args, tool_specs
from reposwarm.config import ConfigError, check_plan
from reposwarm.contracts import (
    Finish,
    LanesFile,
    ModelPrice,
    ModelTurnInput,
    ModelTurnResult,
    Plan,
    PlanInput,
    PlanOutcome,
    SwarmConfig,
    ToolCall,
    Usage,
)
from reposwarm.intel.repomap import repo_map
from reposwarm.intel.symbols import SymbolIndexError
from reposwarm.models import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_REPLY_BYTES,
    ModelError,
    ModelReply,
    ModelRequest,
    json_depth,
    provider_for,
    too_deep,
    value_depth,
)
from reposwarm.runs import ledger, recording
from reposwarm.runs.store import Store, run_dir

tracer = trace.get_tracer("reposwarm")


def _estimate(messages: list[dict[str, Any]], reply: ModelReply) -> Usage:
    """Providers that report no usage (the replay model without recorded usage) get a size estimate."""
    if reply.usage.input_tokens or reply.usage.output_tokens:
        return reply.usage.model_copy(update={"model_calls": 1})
    sent = len(json.dumps(messages))
    said = len(reply.content) + sum(len(c.raw_arguments) for c in reply.tool_calls)
    return Usage(input_tokens=sent // 4, output_tokens=max(1, said // 4), model_calls=1)


def _kept_reply_path(run_id: str, model_name: str, request_fields: dict[str, Any]) -> Path:
    key = hashlib.sha256(json.dumps([model_name, request_fields], sort_keys=True, default=str).encode()).hexdigest()
    return run_dir(run_id) / "replies" / key[:2] / f"{key}.json"


def _keep_reply(path: Path, reply: ModelReply) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(ledger.redact(reply.model_dump_json()))
    os.replace(tmp, path)


MAX_CALLS = 64  # tool calls run from one reply; each is an activity and history events
MAX_CONTENT_CHARS = 100_000  # a reply's text kept in the transcript
MAX_SUMMARY_CHARS = 20_000  # a finish summary rides in history (the lane's result, the review)
MAX_ERROR_CHARS = 1_000
CALL_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")  # what providers send (call_..., toolu_..., functions.x:0)
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SURROGATE = re.compile("[\ud800-\udfff]")  # lone halves of a pair, which JSON can spell and UTF-8 cannot


def _text(value: str) -> str:
    """A model's string as text every later step can encode: no NUL (it would end up in a commit message
    or a summary), no lone surrogate (UTF-8 cannot store one)."""
    return _SURROGATE.sub("\ufffd", value.replace("\x00", "\ufffd"))


def _not_text(call: ToolCall) -> bool:
    try:
        call.raw_arguments.encode("utf-8")
        json.dumps(call.arguments, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _bounded(reply: ModelReply, where: str) -> ModelReply:
    """A provider's reply made safe to store, to put in history and to run, whatever the model sent.

    Nothing is thrown away silently: a call that cannot be run as sent keeps its place and carries an error
    the model reads next turn; only a reply too big to hold at all is refused whole (a non-retryable model
    error: a retry would pay for another one like it). Call ids become unique and safe where they are not
    (the transcript carries the new id, so the model's next turn still pairs each result with its call).
    """
    size = len(reply.content.encode("utf-8", "replace")) + sum(
        len(c.raw_arguments) + len(c.id) + len(c.name) for c in reply.tool_calls)
    if size > MAX_REPLY_BYTES:
        raise ModelError(f"{where}: the model's reply is about {size:,} bytes, over the limit of "
                         f"{MAX_REPLY_BYTES:,}; none of it was kept", retryable=False)
    content = _text(reply.content)
    if len(content) > MAX_CONTENT_CHARS:
        content = content[:MAX_CONTENT_CHARS] + f"\n[reposwarm: {len(content) - MAX_CONTENT_CHARS:,} more characters cut]"
    if len(reply.tool_calls) > MAX_CALLS:
        content += (f"\n[reposwarm: this reply held {len(reply.tool_calls)} tool calls; only the first {MAX_CALLS} "
                    f"were kept and run. Send the others again, at most {MAX_CALLS} per reply.]")
    calls, seen = [], set()
    for index, call in enumerate(reply.tool_calls[:MAX_CALLS]):
        update: dict[str, Any] = {}
        errors = [call.error] if call.error else []
        if not TOOL_NAME.match(call.name):
            update["name"] = _text(call.name[:64])
            errors.append(f"{call.name[:64]!r} is not a tool name; the tools are named in letters, digits and '_'")
        bad_id = not CALL_ID.match(call.id)
        if bad_id:
            errors.append(f"the call id {call.id[:40]!r}{'...' if len(call.id) > 40 else ''} is not usable (ids are "
                          "1 to 128 letters, digits, '_', '-', '.' or ':'); the call was not run and has a new id")
        if bad_id or call.id in seen:  # a repeated id would pair two results with one call
            digest = hashlib.sha256(f"{index}\0{call.id}".encode("utf-8", "surrogatepass")).hexdigest()[:12]
            update["id"] = f"call_{index}_{digest}"
        oversized, not_text = len(call.raw_arguments) > MAX_ARGUMENT_CHARS, False
        if oversized:
            errors.append(f"the arguments are {len(call.raw_arguments):,} characters, over the limit of "
                          f"{MAX_ARGUMENT_CHARS:,}; the call was not run")
        elif json_depth(call.raw_arguments) > MAX_ARGUMENT_DEPTH or value_depth(call.arguments) > MAX_ARGUMENT_DEPTH:
            errors.append(too_deep())
        elif _not_text(call):
            not_text = True
            errors.append("the arguments hold a lone surrogate (half of a UTF-16 pair), which is not text; "
                          "the call was not run")
        if oversized or too_deep() in errors or not_text:  # dropped: kept, they would break the transcript
            update.update(arguments=None, raw_arguments="{}")
        if errors:
            update["error"] = "; ".join(dict.fromkeys(errors))[:MAX_ERROR_CHARS]
        seen.add(update.get("id", call.id))
        calls.append(call.model_copy(update=update) if update else call)
    return reply.model_copy(update={"content": content, "tool_calls": calls})


async def _complete(model_name: str, request_fields: dict[str, Any], run_id: str, call_id: str, *,
                    price: ModelPrice | None = None, record: bool = False) -> ModelReply:
    """One model request. Every attempt is a ledger line (so the ledger matches what the provider saw),
    and a span carrying the lane and the token counts."""
    agent = str(request_fields.get("agent", ""))
    with tracer.start_as_current_span("model_call", attributes={"reposwarm.lane": agent,
                                                                "reposwarm.model": model_name}) as span:
        started = time.monotonic()
        kept = _kept_reply_path(run_id, model_name, request_fields)
        if kept.exists():
            # This exact request was answered before (the worker died before Temporal heard of it): reuse the
            # answer rather than ask, and pay, again.
            reply = ModelReply.model_validate_json(kept.read_text(encoding="utf-8"))
            ledger.record_activity(run_id, "model_call", call_id=call_id, agent=agent, model=model_name,
                                   outcome="reused", input_tokens=0, output_tokens=0, cost_usd=0.0, latency_s=0.0)
            return reply
        try:
            provider, model = provider_for(model_name)
            request = ModelRequest(model=model, **request_fields)
            # bounded before it is kept, recorded or put in a transcript: nothing downstream sees it as it came
            reply = _bounded(await provider.complete(request), f"{model_name.partition(':')[0]} model")
        except ModelError as err:
            ledger.record_activity(run_id, "model_call", call_id=call_id, agent=agent, model=model_name,
                                   outcome="error", error=str(err)[:300],
                                   latency_s=round(time.monotonic() - started, 3))
            delay = timedelta(seconds=err.retry_after) if err.retry_after else None
            raise ApplicationError(str(err), type="ModelError", non_retryable=not err.retryable,
                                   next_retry_delay=delay) from err
        usage = _estimate(request.messages, reply)
        if price is not None:
            usage = usage.model_copy(update={"cost_usd": price.cost(usage.input_tokens, usage.output_tokens)})
        reply = reply.model_copy(update={"usage": usage})
        span.set_attributes({"reposwarm.tokens_in": usage.input_tokens, "reposwarm.tokens_out": usage.output_tokens,
                             "reposwarm.tool_calls": len(reply.tool_calls)})
        _keep_reply(kept, reply)
        if record:
            recording.save(run_id, request.agent, request.round, request.turn, reply, attempt=request.attempt)
        ledger.record_activity(run_id, "model_call", call_id=call_id, agent=agent, model=model_name, outcome="ok",
                               input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                               cost_usd=usage.cost_usd, latency_s=round(time.monotonic() - started, 3))
        return reply


def _assistant_message(reply: ModelReply) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content}
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.raw_arguments}}
            for c in reply.tool_calls
        ]
    return message


INLINE_ARGS = 1024  # tool-call arguments larger than this ride in the store, not in history
KEEP_RECENT = 6  # assistant turns kept whole when a transcript is compacted


def _tokens(messages: list[dict[str, Any]]) -> int:
    return len(json.dumps(messages)) // 4


def compact(messages: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], bool]:
    """Keep the first message (the goal) and the recent turns; fold the middle into a summary.

    The summary is mechanical (which tools ran on which paths, and what the
    model said), so compaction costs no model call and is the same on a retry.
    Cuts fall on assistant messages, so no tool result loses its call.
    """
    if _tokens(messages) < limit * 0.8 or len(messages) < 3:
        return messages, False
    starts = [i for i, m in enumerate(messages) if m.get("role") == "assistant" and i > 0]
    keep_from = starts[-KEEP_RECENT] if len(starts) > KEEP_RECENT else (starts[-1] if starts else len(messages))
    while keep_from < len(messages) and _tokens(messages[:1] + messages[keep_from:]) > limit * 0.6:
        later = [i for i in starts if i > keep_from]
        if not later:
            break
        keep_from = later[0]
    folded = messages[1:keep_from]
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
    summary = {"role": "user", "content": "Earlier turns, summarised to fit the context window "
               "(your edits are on disk; read files again if you need their text):\n" + "\n".join(lines)}
    return [messages[0], summary, *messages[keep_from:]], True


def _checked_calls(reply: ModelReply, store: Store) -> tuple[list[ToolCall], Finish | None]:
    """Validate each call once, here; park large arguments in the store."""
    finishes = [c for c in reply.tool_calls if c.name == "finish"]
    calls, finish = [], None
    for call in reply.tool_calls:
        error = call.error  # set by _bounded: the call cannot be run as sent, whatever its arguments say
        if error is None:
            try:
                args = parse_args(call.name, call.arguments, call.raw_arguments)
                if call.name == "finish":
                    if len(finishes) > 1:
                        raise ValueError(f"finish was called {len(finishes)} times in one reply; call it once")
                    finish = _finish(args)  # type: ignore[arg-type]
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
    running for ever. _bounded makes that impossible for what it knows of; this checks the result itself
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
        calls[i] = ToolCall(id=call.id, name=_text(call.name), raw_arguments="{}",
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
    lane_worktree(req.run_id, req.agent)  # its transcript is in the same worker's store
    store = Store(req.run_id)
    messages: list[dict[str, Any]] = store.get_json(req.transcript_ref) if req.transcript_ref else []
    for message in req.new_messages:
        message = dict(message)
        if "content_ref" in message:
            message["content"] = store.get(message.pop("content_ref")).decode("utf-8")
        messages.append(message)
    messages, compacted = compact(messages, req.context_tokens)
    reply = await _complete(
        req.model,
        dict(system=req.system or LANE_SYSTEM, messages=messages, tools=tool_specs(), agent=req.agent,
             round=req.round, turn=req.turn, attempt=req.attempt),
        req.run_id, f"{req.agent}-r{req.round}-t{req.turn}", price=req.price, record=req.record,
    )
    messages.append(_assistant_message(reply))
    calls, finish = _checked_calls(reply, store)
    return _decodable(ModelTurnResult(transcript_ref=store.put_json(messages), content=reply.content[:2000],
                                      tool_calls=calls, finish=finish, usage=reply.usage, model=req.model,
                                      compacted=compacted))


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
    calls = [c for c in reply.tool_calls if c.name == "submit_plan"]
    text = calls[0].raw_arguments if calls else reply.content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    if not text:
        raise ValueError("the reply holds no plan: call submit_plan with the plan")
    try:
        plan = Plan.model_validate_json(text)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'plan'}: {e['msg']}" for e in err.errors()[:5])
        raise ValueError(f"the plan does not match the Plan schema: {problems}") from None
    try:
        check_plan(plan, lanes, "plan")
    except ConfigError as err:
        raise ValueError(str(err)) from None
    return plan


def _listing(files: list[str], budget_tokens: int) -> list[str]:
    """The file list cut to a token budget, shallow paths first so the whole tree's shape shows."""
    out, used = [], 0
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
    listing = await asyncio.to_thread(gitcmd.repo(req.repo_path).ls_tree, "-r", "--name-only", req.base_sha)
    loop = asyncio.get_running_loop()

    def progress(message: str) -> None:  # from the map's thread: heartbeat details, shown by `starter.py watch`
        loop.call_soon_threadsafe(activity.heartbeat, message)

    map_text = await asyncio.to_thread(_repo_map, req.repo_path, req.base_sha,
                                       "\n".join([req.task, *req.feedback]), progress)
    files = _listing(listing.splitlines(), REPO_LISTING_TOKENS if map_text else REPO_LISTING_ONLY_TOKENS)
    lanes = LanesFile(swarm=SwarmConfig(lanes=req.lanes))
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": planner_message(req.task, req.lanes, req.feedback, req.previous_plan, files,
                                                    repo_map=map_text)}
    ]
    error, usage = "", Usage()
    for turn in range(2):
        reply = await _complete(
            req.model, dict(system=PLANNER_SYSTEM, messages=messages, tools=[SUBMIT_PLAN], agent="planner",
                            round=req.round, turn=turn),
            req.run_id, f"planner-r{req.round}-t{turn}", price=req.price, record=req.record,
        )
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
