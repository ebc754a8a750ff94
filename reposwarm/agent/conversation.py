"""A conversation with a model, as typed messages: how a lane's starts, what a reply adds, how every call gets its
answer (finish's included), and how a long one is compacted. Pure functions: safe inside workflows.

Four kinds of message, as the OpenAI-style transcript has them (the shape every provider adapter reads, in
reposwarm/models/): the system text, the user's (the swarm's) text, the model's reply with its tool calls, and a
tool call's result. At the edges a conversation is that transcript, plain dicts: what the store keeps, what
workflow history carries (LaneResume.pending, ModelTurnInput.new_messages) and what a ModelRequest sends.
`wire()` and `to_wire` give exactly the dicts reposwarm always built, key for key and in the same order, so the
bytes a provider caches stay the same and recorded histories keep their shape; `from_wire` reads them back.

`finish` is the lane's own tool, not one a worker runs: its arguments are checked here, once, when the reply comes
(checked_calls: a reply's finish is valid when called once, with bounded plain text), and here its call gets its
outcome (finish_outcome). The lane ends on the turn's checked finish (workflows/lane.py).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, Field, TypeAdapter, model_validator

from reposwarm.agent import prompts
from reposwarm.agent.specs import FINISH, FinishArgs, parse_args
from reposwarm.contracts import Finish, HelperTask, ToolCall, ToolOutcome

MAX_SUMMARY_CHARS = 20_000  # a finish summary rides in history (the lane's result, the review)
KEEP_RECENT = 6  # assistant turns kept whole when a transcript is compacted
CHARS_PER_TOKEN = 4  # reposwarm's own count (reposwarm/models/calls.py, reposwarm/agent/estimate.py)


class SystemMessage(BaseModel):
    role: Literal["system"] = "system"
    content: str

    def wire(self) -> dict[str, Any]:
        return {"role": "system", "content": self.content}


class UserMessage(BaseModel):
    role: Literal["user"] = "user"
    content: str

    def wire(self) -> dict[str, Any]:
        return {"role": "user", "content": self.content}


class RequestedCall(BaseModel):
    """One tool call of a reply, as the transcript keeps it: its arguments as the JSON text the model sent."""

    id: str
    name: str
    arguments: str = ""

    @model_validator(mode="before")
    @classmethod
    def _from_wire(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("function"), dict):
            function = data["function"]
            return {"id": data.get("id"), "name": function.get("name"), "arguments": function.get("arguments", "")}
        return data

    def wire(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str
    # Bookkeeping, never sent as is: the provider's id of the reply (the next request's cache diagnostics name
    # it), and Anthropic's thinking blocks (sent back first in this message, to Anthropic only).
    provider_id: str = ""
    thinking: str = ""
    tool_calls: list[RequestedCall] = []

    def wire(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.provider_id:
            message["provider_id"] = self.provider_id
        if self.thinking:
            message["thinking"] = self.thinking
        if self.tool_calls:
            message["tool_calls"] = [call.wire() for call in self.tool_calls]
        return message


class ToolResult(BaseModel):
    """A tool call's result: its text, or (in workflow history, before the model turn reads it) a reference to
    the text in the run's store."""

    role: Literal["tool"] = "tool"
    tool_call_id: str
    content: str | None = None
    content_ref: str | None = None

    def wire(self) -> dict[str, Any]:
        if self.content_ref is not None:
            return {"role": "tool", "tool_call_id": self.tool_call_id, "content_ref": self.content_ref}
        return {"role": "tool", "tool_call_id": self.tool_call_id, "content": self.content}


Message = Annotated[SystemMessage | UserMessage | AssistantMessage | ToolResult, Field(discriminator="role")]
_MESSAGES: TypeAdapter[list[Message]] = TypeAdapter(list[Message])


def from_wire(messages: list[dict[str, Any]]) -> list[Message]:
    """Messages from the transcript's dicts (the store, workflow history)."""
    return _MESSAGES.validate_python(messages)


def to_wire(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The transcript's dicts, exactly as reposwarm has always built them."""
    return [message.wire() for message in messages]


class Reply(Protocol):
    """What a conversation keeps of a model's reply (reposwarm.contracts.model.ModelReply)."""

    @property
    def content(self) -> str: ...
    @property
    def tool_calls(self) -> list[ToolCall]: ...
    @property
    def provider_id(self) -> str: ...
    @property
    def thinking(self) -> str: ...


def replied(reply: Reply) -> AssistantMessage:
    """The model's reply as the conversation's next message."""
    return AssistantMessage(content=reply.content, provider_id=reply.provider_id, thinking=reply.thinking,
                            tool_calls=[RequestedCall(id=c.id, name=c.name, arguments=c.raw_arguments)
                                        for c in reply.tool_calls])


def corrected(reply: Reply, correction: str) -> list[Message]:
    """A refused answer of the planner or the proposer, and the correction it gets back: each of its calls answered
    with it, or (no call) a user message."""
    answers: list[Message] = ([ToolResult(tool_call_id=c.id, content=correction) for c in reply.tool_calls]
                              if reply.tool_calls else [UserMessage(content=correction)])
    return [replied(reply), *answers]


# --- a lane's conversation ---


def lane_opening(task: HelperTask, note: str = "") -> list[Message]:
    """A lane's conversation as it starts: the run's shared context (a system message, after the swarm's
    instructions and the tool specs: the prefix every lane's requests share), then the lane's first message."""
    first = prompts.lane_first_message(task) + (f"\n\n{note}" if note else "")
    return [SystemMessage(content=prompts.run_context(task)), UserMessage(content=first)]


def answer_open_calls(messages: list[Message]) -> list[Message]:
    """Every tool call gets its answer before the conversation goes on (providers refuse a transcript with an
    unanswered call): a call whose result was lost with its machine says so."""
    out: list[Message] = []
    open_ids: list[str] = []
    for message in messages:
        if isinstance(message, ToolResult):
            open_ids = [i for i in open_ids if i != message.tool_call_id]
        else:
            out += [ToolResult(tool_call_id=i, content=prompts.LOST_RESULT) for i in open_ids]
            open_ids = [c.id for c in message.tool_calls] if isinstance(message, AssistantMessage) else []
        out.append(message)
    return out


def tokens(messages: Sequence[Message]) -> int:
    """The conversation's size in tokens, as reposwarm counts it: its transcript's JSON at 4 characters a token."""
    return len(json.dumps(to_wire(messages))) // CHARS_PER_TOKEN


def _head(messages: list[Message]) -> int:
    """How many messages open the conversation and are never folded: the run's shared context (a system message)
    and the lane's first message (its goal and slice). Kept byte for byte, they stay the cached prefix."""
    first_user = next((i for i, m in enumerate(messages) if isinstance(m, UserMessage)), 0)
    return first_user + 1


_SUMMARY = re.compile(re.escape(prompts.EARLIER_TURNS) + r"(\d+) turns")


def _summarised(message: Message) -> int:
    """The turns an earlier summary folded (a second compaction folds the first summary too)."""
    found = _SUMMARY.match(message.content) if isinstance(message, UserMessage) else None
    return int(found.group(1)) if found else 0


def _target(arguments: str) -> Any:
    """What a call worked on, for the summary: its path, pattern or symbol."""
    try:
        parsed = json.loads(arguments)
        return parsed.get("path") or parsed.get("pattern") or parsed.get("symbol") or ""
    except (ValueError, AttributeError):
        return ""


def compact(messages: list[Message], limit: int) -> tuple[list[Message], bool]:
    """Keep the opening (the shared context and the goal) and the recent turns; fold the middle into a summary.

    The summary is mechanical (which tools ran on which paths, and what the
    model said), so compaction costs no model call and is the same on a retry.
    Cuts fall on assistant messages, so no tool result loses its call. The
    opening is the cached prefix every turn shares: it is never touched.
    """
    head = _head(messages)
    if tokens(messages) < limit * 0.8 or len(messages) < head + 2:
        return messages, False
    starts = [i for i, m in enumerate(messages) if isinstance(m, AssistantMessage) and i >= head]
    keep_from = starts[-KEEP_RECENT] if len(starts) > KEEP_RECENT else (starts[-1] if starts else len(messages))
    while keep_from < len(messages) and tokens(messages[:head] + messages[keep_from:]) > limit * 0.6:
        later = [i for i in starts if i > keep_from]
        if not later:
            break
        keep_from = later[0]
    folded = messages[head:keep_from]
    if not folded:
        return messages, False
    lines = []
    for m in folded:
        if isinstance(m, AssistantMessage):
            if m.content:
                lines.append(f"- you said: {m.content[:200]}")
            lines += [f"- you called {call.name}({_target(call.arguments)})" for call in m.tool_calls]
        elif isinstance(m, ToolResult) and (m.content or "").startswith(("error", "refused")):
            lines.append(f"  -> {(m.content or '')[:200]}")
    turns = sum(isinstance(m, AssistantMessage) for m in folded) + sum(_summarised(m) for m in folded)
    summary = UserMessage(content=prompts.earlier_turns(turns, lines))
    return [*messages[:head], summary, *messages[keep_from:]], True


# --- finish: the lane's own tool ---


def is_finish(call: ToolCall) -> bool:
    return call.name == FINISH


def checked_calls(calls: list[ToolCall], error_chars: int) -> tuple[list[ToolCall], Finish | None]:
    """A reply's calls, each checked once, here (its error set, which the model reads next, at most `error_chars`
    long); and the lane's finish, when the reply holds one valid finish call."""
    finishes = sum(map(is_finish, calls))
    checked, finish = [], None
    for call in calls:
        error = call.error  # set by bounded(): the call cannot be run as sent, whatever its arguments say
        if error is None:
            try:
                args = parse_args(call.name, call.arguments, call.raw_arguments)
                if isinstance(args, FinishArgs):
                    if finishes > 1:
                        raise ValueError(f"finish was called {finishes} times in one reply; call it once")
                    finish = _finish(args)
            except ValueError as err:
                error = str(err)[:error_chars]
        checked.append(call.model_copy(update={"error": error}))
    return checked, finish


def _finish(args: FinishArgs) -> Finish:
    """The lane's summary rides in history and ends up in commit messages and the review: bounded, and text."""
    texts = [args.summary, *args.assumptions]
    if len(args.summary) > MAX_SUMMARY_CHARS or sum(map(len, texts)) > 2 * MAX_SUMMARY_CHARS:
        raise ValueError(f"finish's summary and assumptions are {sum(map(len, texts)):,} characters; keep the "
                         f"summary under {MAX_SUMMARY_CHARS:,} and all of it under {2 * MAX_SUMMARY_CHARS:,}")
    if any("\x00" in text for text in texts):
        raise ValueError("finish's summary or assumptions hold a NUL byte; send plain text")
    return Finish(summary=args.summary, assumptions=args.assumptions)


def finish_outcome(call: ToolCall) -> ToolOutcome:
    """A finish call's outcome, as a tool call's is tallied: no tool runs it; valid, it ends the lane (the turn's
    finish); invalid, its error is its answer and counts as a failed, malformed call."""
    answer = f"error: {call.error}" if call.error else prompts.FINISHED
    return ToolOutcome(call_id=call.id, name=call.name, ok=call.error is None, output=answer, output_ref="",
                       malformed=call.error is not None, output_chars=len(answer))
