"""The Anthropic Messages API, with tool use and prompt caching.

The transcript is OpenAI-shaped, so it is converted on the way out: the system
prompt goes top-level, tool calls become tool_use blocks, tool results become
tool_result blocks in a user message, and messages of the same role are merged
because the API requires user and assistant to alternate.

Caching (the API caches only where a request asks, with `cache_control`; at most
four breakpoints): the request is tools, then the system blocks (the swarm's
instructions, then what every lane of the run shares: the task, the contract),
then the conversation, which starts with the lane's own goal and slice. The
breakpoints sit at the end of the shared system blocks (written once, read by
every lane of the run), at the end of the lane's first message (its own
prefix), at the end of the previous request (read this turn, whatever the
API's 20-block lookback) and at the end of this one (read next turn). The
cache-miss reason the API gives (its cache diagnostics, on by default against
api.anthropic.com, REPOSWARM_CACHE_DIAGNOSTICS=1 or 0 elsewhere) is kept with
the reply for the ledger.

Replies as the API ends them: `max_tokens` (what the model allows unless the
lane or the worker says less: reposwarm/models/limits.py) is the reply's limit,
and a reply cut there says so in its stop reason; `pause_turn` is continued in
the same call, its content sent back as it came; `refusal` keeps the API's
explanation. With extended thinking (a lane's `thinking_tokens`, interleaved
with tool use) the thinking blocks are kept verbatim with the reply and sent
back first in its assistant message on every later turn.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from typing import Annotated, Any, Literal

import httpx
from pydantic import BaseModel, Discriminator, Tag, model_validator

from reposwarm.contracts import Usage
from reposwarm.contracts.model import ModelReply, ModelRequest
from reposwarm.models import ModelError, tool_call
from reposwarm.models.http import base_url, parse_arguments, post
from reposwarm.models.limits import anthropic_max_tokens

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
_UNSAFE_ID = re.compile(r"[^a-zA-Z0-9_-]")


# --- the reply, as the API sends it (type, role, model, stop_sequence... are ignored) ---


class _TextBlock(BaseModel):
    type: Literal["text"]
    text: str


class _ToolUseBlock(BaseModel):
    type: Literal["tool_use"]
    id: str
    name: str
    input: Any = None  # an object; anything else (or one nested too deep) is that call's error, not the reply's


class _OtherBlock(BaseModel):
    """thinking, redacted_thinking (kept from the raw content), server tool blocks...: nothing the lane runs."""

    type: str


def _block_kind(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if kind in ("text", "tool_use") else "other"


_Block = Annotated[
    Annotated[_TextBlock, Tag("text")] | Annotated[_ToolUseBlock, Tag("tool_use")] | Annotated[_OtherBlock, Tag("other")],
    Discriminator(_block_kind),
]


class _Usage(BaseModel):
    input_tokens: int = 0
    output_tokens: int = 0
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Diagnostics(BaseModel):
    cache_miss_reason: Any = None  # {"type": "messages_changed", "cache_missed_input_tokens": n}, or null


class _StopDetails(BaseModel):
    type: str = ""
    category: str | None = None
    explanation: str | None = None


class _Container(BaseModel):
    id: str = ""


class _Message(BaseModel):
    type: Literal["message"] = "message"
    id: str = ""
    content: list[_Block]
    raw_content: list[Any] = []  # the content blocks as sent: thinking, and a paused turn, go back as they came
    stop_reason: str | None = None
    stop_details: _StopDetails | None = None
    container: _Container | None = None  # a server tool's container, which a paused turn's continuation names
    usage: _Usage = _Usage()
    diagnostics: _Diagnostics | None = None

    @model_validator(mode="before")
    @classmethod
    def _keep_raw(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("content"), list):
            data = {**data, "raw_content": data["content"]}
        return data


def kept_thinking(content: list[Any]) -> list[dict[str, Any]]:
    """The thinking blocks of a reply that can go back to the API: signed ones (a block cut short before its
    signature proves nothing and would be refused) and redacted ones, in their order, each as it came."""
    return [b for b in content if isinstance(b, dict) and (
        (b.get("type") == "thinking" and isinstance(b.get("signature"), str) and b["signature"]
         and isinstance(b.get("thinking"), str))
        or (b.get("type") == "redacted_thinking" and isinstance(b.get("data"), str) and b["data"]))]


# --- the request ---


def _safe_id(call_id: str) -> str:
    """tool_use ids must match ^[a-zA-Z0-9_-]+$; ids from other providers may not, so map them alike both ways.
    A mapped id carries a hash of the original, so two ids ("a.b", "a:b") never map to one."""
    if call_id and not _UNSAFE_ID.search(call_id):
        return call_id
    digest = hashlib.sha256(call_id.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{_UNSAFE_ID.sub('_', call_id)[:64]}_{digest}"


def _blocks(message: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """One OpenAI-style message as (Anthropic role, content blocks)."""
    role, text = message.get("role"), message.get("content") or ""
    if role == "tool":
        return "user", [{"type": "tool_result", "tool_use_id": _safe_id(str(message.get("tool_call_id", ""))),
                         "content": str(text)}]
    blocks: list[dict[str, Any]] = [{"type": "text", "text": str(text)}] if str(text).strip() else []
    if role == "assistant":
        blocks[:0] = _thinking_of(message)  # first, as the API wrote them: it checks them in a tool loop
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            blocks.append({"type": "tool_use", "id": _safe_id(str(call.get("id", ""))),
                           "name": function.get("name", ""),
                           "input": parse_arguments(function.get("arguments") or "") or {}})
        return "assistant", blocks
    return "user", blocks


def _thinking_of(message: dict[str, Any]) -> list[dict[str, Any]]:
    """The thinking blocks an assistant message of the transcript keeps (its `thinking` key: the JSON text of
    the blocks as the API sent them, so their bytes and order come back the same); a fresh copy each time."""
    raw = message.get("thinking")
    if not isinstance(raw, str) or not raw:
        return []
    try:
        blocks = json.loads(raw)
    except ValueError:
        return []
    return kept_thinking(blocks) if isinstance(blocks, list) else []


def convert_messages(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(extra system text, alternating Anthropic messages) from an OpenAI-style transcript."""
    system: list[str] = []
    merged: list[dict[str, Any]] = []
    for message in messages:
        if message.get("role") == "system":
            system.append(str(message.get("content") or ""))
            continue
        role, blocks = _blocks(message)
        if not blocks:  # the API rejects empty content; dropping it may let neighbours merge
            continue
        if merged and merged[-1]["role"] == role:
            merged[-1]["content"].extend(blocks)
        else:
            merged.append({"role": role, "content": blocks})
    for message in merged:  # tool results must open a user message, before any text
        message["content"].sort(key=lambda b: b["type"] != "tool_result")
    return "\n\n".join(s for s in system if s), merged


# --- caching ---

DIAGNOSTICS_BETA = "cache-diagnosis-2026-04-07"
MAX_BREAKPOINTS = 4


def _cache_control(ttl: str) -> dict[str, str]:
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


def mark_breakpoints(system: list[dict[str, Any]], messages: list[dict[str, Any]], ttl: str) -> None:
    """cache_control on the last system block, the lane's first message, the previous request's end and this
    request's end (in place; never more than the API's four, never twice on one block)."""
    last_reply = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    places = [0, last_reply - 1 if last_reply else None, len(messages) - 1]
    marked: list[dict[str, Any]] = [system[-1]] if system else []
    for index in places:
        if index is None or index < 0 or not messages[index]["content"]:
            continue
        block = messages[index]["content"][-1]
        if all(block is not b for b in marked):
            marked.append(block)
    for block in marked[:MAX_BREAKPOINTS]:
        block["cache_control"] = _cache_control(ttl)


def _diagnostics_on(custom_url: str) -> bool:
    said = os.environ.get("REPOSWARM_CACHE_DIAGNOSTICS", "").strip()
    return said == "1" if said else not custom_url


def _miss_reason(diagnostics: _Diagnostics | None) -> str:
    reason = diagnostics.cache_miss_reason if diagnostics is not None else None
    if not isinstance(reason, dict):
        return ""
    missed = reason.get("cache_missed_input_tokens")
    return str(reason.get("type") or "unknown")[:60] + (f" ({missed} tokens)" if isinstance(missed, int) else "")


# --- the provider ---

INTERLEAVED_THINKING_BETA = "interleaved-thinking-2025-05-14"  # thinking between tool calls, not only before them
MAX_CONTINUATIONS = 3  # a paused turn (pause_turn) is continued at most this many times in one call


class AnthropicProvider:
    """The Messages API; credentials come from the worker's environment."""

    name = "anthropic"

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        custom_url = os.environ.get("ANTHROPIC_BASE_URL", "").strip()
        self._base_url = base_url("ANTHROPIC_BASE_URL", DEFAULT_BASE_URL)
        self._key = os.environ.get("ANTHROPIC_API_KEY", "").strip() or None
        if self._key is None and not custom_url:
            raise ModelError("ANTHROPIC_API_KEY is not set on this worker", retryable=False)
        anthropic_max_tokens("", None)  # a bad REPOSWARM_MAX_OUTPUT_TOKENS fails now, before any call
        self._diagnostics = _diagnostics_on(custom_url)
        self._transport = transport

    def __repr__(self) -> str:  # never show the key
        return f"AnthropicProvider(base_url={self._base_url!r})"

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        extra_system, messages = convert_messages(request.messages)
        # the swarm's instructions and the run's shared context as separate blocks: the same bytes for every lane
        system = [{"type": "text", "text": text} for text in (request.system, extra_system) if text]
        mark_breakpoints(system, messages, request.cache_ttl)
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": anthropic_max_tokens(request.model, request.max_tokens, request.thinking_tokens),
            "messages": messages}
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [{"name": t["name"], "description": t.get("description", ""),
                              "input_schema": t.get("parameters") or {"type": "object", "properties": {}}}
                             for t in request.tools]
        if request.thinking_tokens:
            body["thinking"] = {"type": "enabled", "budget_tokens": request.thinking_tokens}
        if self._diagnostics:
            previous = next((str(m["provider_id"]) for m in reversed(request.messages)
                             if m.get("role") == "assistant" and m.get("provider_id")), None)
            body["diagnostics"] = {"previous_message_id": previous}
        return body

    def headers(self, request: ModelRequest) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        betas = ([DIAGNOSTICS_BETA] if self._diagnostics else []) + (
            [INTERLEAVED_THINKING_BETA] if request.thinking_tokens else [])
        if betas:
            headers["anthropic-beta"] = ",".join(betas)
        if self._key:
            headers["x-api-key"] = self._key
        return headers

    async def complete(self, request: ModelRequest) -> ModelReply:
        body, headers = self.request_body(request), self.headers(request)
        sent = body["messages"]
        replies = [await self._post(body, headers, request)]
        # A paused turn (a server tool's long loop) goes on where it stopped: the request again, with the turn so
        # far as the last, assistant, message, exactly as it came; the API's answer continues that message.
        while replies[-1].stop_reason == "pause_turn" and len(replies) <= MAX_CONTINUATIONS:
            so_far = [block for reply in replies for block in reply.raw_content]
            body = {**body, "messages": [*sent, {"role": "assistant", "content": so_far}]}
            container = replies[-1].container
            if container is not None and container.id:
                body["container"] = container.id
            replies.append(await self._post(body, headers, request))
        return _reply(replies, body["max_tokens"])

    async def _post(self, body: dict[str, Any], headers: dict[str, str], request: ModelRequest) -> _Message:
        return await post(
            f"{self._base_url}/v1/messages",
            headers=headers,
            body=body,
            reply_type=_Message,
            where=f"anthropic model {request.model}",
            key_env="ANTHROPIC_API_KEY",
            secret=self._key,
            transport=self._transport,
        )


def _reply(replies: list[_Message], limit: int) -> ModelReply:
    """One reply from a turn's answers (more than one when it paused): their content in order, usage summed."""
    blocks = [block for reply in replies for block in reply.content]
    text = "\n\n".join(b.text for b in blocks if isinstance(b, _TextBlock) and b.text)
    calls = [tool_call(b.id, b.name, b.input) for b in blocks if isinstance(b, _ToolUseBlock)]
    thinking = kept_thinking([block for reply in replies for block in reply.raw_content])
    last = replies[-1]
    details = last.stop_details
    written = sum(r.usage.cache_creation_input_tokens or 0 for r in replies)
    read = sum(r.usage.cache_read_input_tokens or 0 for r in replies)
    usage = Usage(input_tokens=sum(r.usage.input_tokens for r in replies) + written + read,
                  output_tokens=sum(r.usage.output_tokens for r in replies), cache_read_tokens=read,
                  cache_write_tokens=written, model_calls=1)
    return ModelReply(
        content=text, tool_calls=calls, provider_id=last.id[:128], usage=usage,
        cache_miss=_miss_reason(replies[0].diagnostics),  # the turn's own request, against the previous turn's
        stop_reason=(last.stop_reason or "")[:64], output_limit=limit,
        stop_detail=str((details.explanation or details.category or "") if details else "")[:1000],
        thinking=json.dumps(thinking, ensure_ascii=False) if thinking else "")
