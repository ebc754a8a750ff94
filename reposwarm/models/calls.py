"""The model-call seam: one call to a model, from an activity, with everything a call owes the run.

Lanes (model_turn), the planner (plan_round) and the converger (resolve_conflict) all ask through
complete(), which in one place:

- reuses an answer already paid for (the run's exactly-once record of this very request);
- asks the provider, and maps its ModelError to the ApplicationError Temporal retries, or does not;
- bounds the reply, so nothing downstream (transcript, history, tools) ever sees it as it came;
- counts its tokens (estimated when the provider said nothing) and prices them, cached ones at their rates
  (reposwarm/contracts/cost.py), with the billed tokens a lane's budget counts;
- and leaves its traces: a span with the lane and token counts, the `--record` recording, a ledger line.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from typing import Any

from opentelemetry import trace
from temporalio.exceptions import ApplicationError

from reposwarm.contracts import ModelPrice, ToolCall, Usage
from reposwarm.contracts.cost import priced
from reposwarm.contracts.model import ModelReply, ModelRequest
from reposwarm.models import (
    MAX_ARGUMENT_CHARS,
    MAX_ARGUMENT_DEPTH,
    MAX_REPLY_BYTES,
    ModelError,
    json_depth,
    outage,
    provider_for,
    too_deep,
    value_depth,
)
from reposwarm.models.limits import CUT_REASONS, REFUSAL
from reposwarm.runs import ledger, recording
from reposwarm.runs.exactly_once import Once, keyed_path

tracer = trace.get_tracer("reposwarm")

MAX_CALLS = 64  # tool calls run from one reply; each is an activity and history events
MAX_CONTENT_CHARS = 100_000  # a reply's text kept in the transcript
MAX_ERROR_CHARS = 1_000
CALL_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,128}$")  # what providers send (call_..., toolu_..., functions.x:0)
TOOL_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_SURROGATE = re.compile("[\ud800-\udfff]")  # lone halves of a pair, which JSON can spell and UTF-8 cannot
UNUSUAL_STOPS = CUT_REASONS | {REFUSAL, "pause_turn"}  # stop reasons a call's ledger line names


async def complete(run_id: str, model_name: str, *, agent: str, round_no: int, turn: int, system: str,
                   messages: list[dict[str, Any]], tools: list[dict[str, Any]], attempt: int = 1,
                   price: ModelPrice | None = None, record: bool = False, call_id: str | None = None,
                   cache_ttl: str = "5m", max_tokens: int | None = None, thinking_tokens: int | None = None,
                   reasoning_effort: str | None = None) -> ModelReply:
    """One model request from the running activity: the bounded, priced reply.

    `agent`, `round_no`, `turn` and `attempt` (the lane's dispatch within the round) say where the call falls;
    the replay model answers by them, and the recording files the reply under them. `call_id` names the call
    in the ledger (default `<agent>-r<round>-t<turn>`). Every attempt that reaches the provider is a ledger
    line, so the ledger matches what the provider saw. `cache_ttl` is how long the provider keeps the cached
    prefix; the run is the cache key (not part of the request's record: caching never changes what was asked).
    `max_tokens` is the reply's limit (None: the provider's default, reposwarm/models/limits.py), `thinking_tokens`
    Anthropic's extended thinking budget, `reasoning_effort` an OpenAI reasoning model's effort.
    """
    fields: dict[str, Any] = dict(system=system, messages=messages, tools=tools, agent=agent, round=round_no,
                                  turn=turn, attempt=attempt)
    call_id = call_id or f"{agent}-r{round_no}-t{turn}"

    def line(**figures: Any) -> None:
        ledger.record_activity(run_id, "model_call", call_id=call_id, agent=agent, model=model_name, **figures)

    async def ledger_line(**figures: Any) -> None:  # file work in a thread: the event loop serves every lane
        await asyncio.to_thread(line, **figures)

    with tracer.start_as_current_span("model_call", attributes={"reposwarm.lane": agent,
                                                                "reposwarm.model": model_name}) as span:
        kept = _kept_reply(run_id, model_name, fields)
        if (reply := await asyncio.to_thread(kept.recorded)) is not None:
            # This exact request was answered before (the worker died before Temporal heard of it): reuse the
            # answer rather than ask, and pay, again.
            await ledger_line(outcome="reused", input_tokens=0, output_tokens=0, cost_usd=0.0, latency_s=0.0)
            return reply
        started = time.monotonic()
        try:
            provider, model = provider_for(model_name)
            request = ModelRequest(model=model, cache_ttl=cache_ttl, cache_key=f"reposwarm-{run_id}"[:64],
                                   max_tokens=max_tokens, thinking_tokens=thinking_tokens,
                                   reasoning_effort=reasoning_effort, **fields)
            # bounded before it is kept, recorded or put in a transcript: nothing downstream sees it as it came
            reply = bounded(await provider.complete(request), f"{model_name.partition(':')[0]} model")
        except ModelError as err:
            await ledger_line(outcome="error", error=str(err)[:300], latency_s=round(time.monotonic() - started, 3))
            final = outage.gives_up(err, outage.activity_attempt())
            if err.unavailable and not final:
                await outage.tell_run(run_id, outage.waiting(model_name, agent, err))
            raise ApplicationError(str(err), type="ModelError", non_retryable=final,
                                   next_retry_delay=outage.next_delay(err)) from err
        if outage.activity_attempt() > 1:
            await outage.tell_run(run_id, outage.answered(model_name, agent))
        usage = priced(_estimate(messages, reply), model_name, price, cache_ttl)
        reply = reply.model_copy(update={"usage": usage})
        span.set_attributes({"reposwarm.tokens_in": usage.input_tokens, "reposwarm.tokens_out": usage.output_tokens,
                             "reposwarm.tool_calls": len(reply.tool_calls)})
        latency_s = round(time.monotonic() - started, 3)

        def traces(reply: ModelReply) -> ModelReply:  # in one trip to a thread: each trip costs the loop a wake-up
            if record:
                recording.save(run_id, agent, round_no, turn, reply, attempt=attempt)
            cache = {"cache_read_tokens": usage.cache_read_tokens, "cache_write_tokens": usage.cache_write_tokens,
                     "uncached_cost_usd": usage.uncached_cost_usd,
                     **({"cache_miss": reply.cache_miss} if reply.cache_miss else {}),
                     # a reply that did not end as replies do (cut at its limit, declined, still paused) says so
                     **({"stop_reason": reply.stop_reason} if reply.stop_reason in UNUSUAL_STOPS else {})}
            line(outcome="ok", input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
                 cost_usd=usage.cost_usd, billed_tokens=usage.billed_tokens, latency_s=latency_s, **cache)
            # Kept last: an attempt killed before this asks (and pays) again, and its ledger line says so; one
            # killed after it has left every trace of the call, so a retry that reuses the reply owes none.
            return kept.record(reply)

        return await asyncio.to_thread(traces, reply)


def _kept_reply(run_id: str, model_name: str, fields: dict[str, Any]) -> Once[ModelReply]:
    """The record of this exact request's answer. Replies may quote what the model read, secrets included,
    so the record is redacted."""
    key = json.dumps([model_name, fields], sort_keys=True, default=str)
    return Once(keyed_path(run_id, "replies", key), ModelReply, redacted=True)


def _estimate(messages: list[dict[str, Any]], reply: ModelReply) -> Usage:
    """Providers that report no usage (the replay model without recorded usage) get a size estimate."""
    if reply.usage.input_tokens or reply.usage.output_tokens:
        return reply.usage.model_copy(update={"model_calls": 1})
    sent = len(json.dumps(messages))
    said = len(reply.content) + sum(len(c.raw_arguments) for c in reply.tool_calls)
    return Usage(input_tokens=sent // 4, output_tokens=max(1, said // 4), model_calls=1)


def as_text(value: str) -> str:
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


def bounded(reply: ModelReply, where: str) -> ModelReply:
    """A provider's reply made safe to store, to put in history and to run, whatever the model sent.

    Nothing is thrown away silently: a call that cannot be run as sent keeps its place and carries an error
    the model reads next turn; only a reply too big to hold at all is refused whole (a non-retryable model
    error: a retry would pay for another one like it). Call ids become unique and safe where they are not
    (the transcript carries the new id, so the model's next turn still pairs each result with its call).
    """
    size = len(reply.content.encode("utf-8", "replace")) + len(reply.thinking) + sum(
        len(c.raw_arguments) + len(c.id) + len(c.name) for c in reply.tool_calls)
    if size > MAX_REPLY_BYTES:
        raise ModelError(f"{where}: the model's reply is about {size:,} bytes, over the limit of "
                         f"{MAX_REPLY_BYTES:,}; none of it was kept", retryable=False)
    content = as_text(reply.content)
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
            update["name"] = as_text(call.name[:64])
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
    # The thinking goes back to the provider as it came, or its signature fails: kept as is, never rewritten; one
    # that is not text (a lone surrogate) could be neither stored nor sent, and is dropped.
    thinking = reply.thinking if reply.thinking == as_text(reply.thinking) else ""
    return reply.model_copy(update={"content": content, "tool_calls": calls, "thinking": thinking,
                                    "stop_detail": as_text(reply.stop_detail)})
