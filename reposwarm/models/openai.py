"""OpenAI-compatible Chat Completions, with tool calling.

The same wire format serves api.openai.com and local servers (vLLM, Ollama,
llama.cpp): set OPENAI_BASE_URL and the key becomes optional. Prompt caching
is the API's own (prefixes of 1,024 tokens and more); each request carries the
run as `prompt_cache_key`, so that the lanes of a run, whose requests begin
alike, reach the same cache, and the usage's cached_tokens is kept. The transcript is
already OpenAI-shaped, so the request is nearly a copy; the reply is validated
against pydantic models of the wire format rather than picked apart by hand.

The reply's limit is sent only where one is set (the lane's `max_output_tokens`,
the warming call's one token): as `max_completion_tokens` to the reasoning models
(o1, o3, o4, gpt-5 families), which refuse `max_tokens`, and as `max_tokens` to
the rest. A lane's `reasoning_effort` goes as is; the reasoning tokens are
output tokens (completion_tokens holds them). `finish_reason: "length"` (the
reply cut at its limit) and a `refusal` are kept as the reply's stop reason.
"""

from __future__ import annotations

import os
import re
from typing import Any

import httpx
from pydantic import BaseModel, Field

from reposwarm.contracts import ToolCall, Usage
from reposwarm.contracts.model import ModelReply, ModelRequest
from reposwarm.models import ModelError, tool_call
from reposwarm.models.http import base_url, post

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# The reasoning models, by family, whatever the suffix or a gateway's prefix ("openai/gpt-5-mini").
_REASONING_MODEL = re.compile(r"(^|/)(o[1-9]|gpt-5)([-.:]|$)", re.IGNORECASE)
_MESSAGE_KEYS = ("role", "content", "tool_calls", "tool_call_id", "name")


# --- the reply, as the API sends it (extra fields such as id, object, created are ignored) ---


class _Function(BaseModel):
    name: str
    arguments: Any = ""  # a JSON string; a few local servers send the object itself (or anything at all)


class _ToolCall(BaseModel):
    id: str | int | None = None
    type: str = "function"
    function: _Function


class _Message(BaseModel):
    role: str = "assistant"
    content: str | None = None
    refusal: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(BaseModel):
    index: int = 0
    message: _Message
    finish_reason: str | None = None


class _PromptDetails(BaseModel):
    cached_tokens: int | None = 0


class _CompletionDetails(BaseModel):
    reasoning_tokens: int | None = 0


class _Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    prompt_tokens_details: _PromptDetails | None = None
    completion_tokens_details: _CompletionDetails | None = None

    @property
    def output_tokens(self) -> int:
        """The reply's tokens, its reasoning included: OpenAI counts reasoning tokens in completion_tokens; a
        server that reports them beside it (fewer completion than reasoning tokens) has them added."""
        reasoning = (self.completion_tokens_details or _CompletionDetails()).reasoning_tokens or 0
        return self.completion_tokens if self.completion_tokens >= reasoning else self.completion_tokens + reasoning


class _Completion(BaseModel):
    choices: list[_Choice] = Field(min_length=1)
    usage: _Usage | None = None


# --- the provider ---


def _wire_message(message: dict[str, Any]) -> dict[str, Any]:
    """Only the keys the API knows; store bookkeeping never goes over the wire."""
    return {k: message[k] for k in _MESSAGE_KEYS if k in message}


def is_reasoning_model(model: str) -> bool:
    return bool(_REASONING_MODEL.search(model))


def _tool_call(call: _ToolCall, index: int) -> ToolCall:
    # the id is kept exactly as given (the model activity judges it); invented only when a server sends none
    return tool_call(call.id if call.id not in (None, "") else f"call_{index}", call.function.name,
                     call.function.arguments)


class OpenAIProvider:
    """A Chat Completions endpoint; credentials come from the worker's environment."""

    name = "openai"

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        custom_url = os.environ.get("OPENAI_BASE_URL", "").strip()
        self._base_url = base_url("OPENAI_BASE_URL", DEFAULT_BASE_URL)
        self._key = os.environ.get("OPENAI_API_KEY", "").strip() or None
        if self._key is None and not custom_url:
            raise ModelError("OPENAI_API_KEY is not set on this worker (set it, or set OPENAI_BASE_URL "
                             "for a local server that needs no key)", retryable=False)
        self._transport = transport

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIProvider(base_url={self._base_url!r})"

    def request_body(self, request: ModelRequest) -> dict[str, Any]:
        # the leading system messages (the run's shared context) joined to the system prompt: one system message,
        # which every chat template takes, and the same bytes for every lane of the run
        lead = next((i for i, m in enumerate(request.messages) if m.get("role") != "system"), len(request.messages))
        system = "\n\n".join(t for t in [request.system, *(str(m.get("content") or "")
                                                           for m in request.messages[:lead])] if t)
        messages = [{"role": "system", "content": system}] if system else []
        messages += [_wire_message(m) for m in request.messages[lead:]]
        body: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.tools:
            body["tools"] = [
                {"type": "function", "function": {"name": t["name"], "description": t.get("description", ""),
                                                  "parameters": t.get("parameters") or {"type": "object"}}}
                for t in request.tools
            ]
            body["tool_choice"] = "auto"
        if request.cache_key:  # prompt caching is automatic; the key keeps a run's requests on one cache
            body["prompt_cache_key"] = request.cache_key
        if request.max_tokens is not None:
            body["max_completion_tokens" if is_reasoning_model(request.model) else "max_tokens"] = request.max_tokens
        if request.reasoning_effort:
            body["reasoning_effort"] = request.reasoning_effort
        return body

    async def complete(self, request: ModelRequest) -> ModelReply:
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        reply = await post(
            f"{self._base_url}/chat/completions",
            headers=headers,
            body=self.request_body(request),
            reply_type=_Completion,
            where=f"openai model {request.model}",
            key_env="OPENAI_API_KEY",
            secret=self._key,
            transport=self._transport,
        )
        choice = reply.choices[0]
        message = choice.message
        usage = reply.usage or _Usage()
        cached = min(usage.prompt_tokens, (usage.prompt_tokens_details or _PromptDetails()).cached_tokens or 0)
        return ModelReply(
            content=message.content or "",
            tool_calls=[_tool_call(c, i) for i, c in enumerate(message.tool_calls or [])],
            usage=Usage(input_tokens=usage.prompt_tokens, output_tokens=usage.output_tokens,
                        cache_read_tokens=cached, model_calls=1),
            # a refusal is a message of its own, whatever the finish reason ("stop")
            stop_reason="refusal" if message.refusal else (choice.finish_reason or "")[:64],
            stop_detail=(message.refusal or "")[:1000],
            output_limit=request.max_tokens,
        )
