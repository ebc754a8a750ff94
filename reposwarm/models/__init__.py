"""Model providers behind one small protocol.

A model is named `provider:name`:

- `replay:<script path>` plays back a recorded script (the demo and the tests);
- `openai:<model>` is any OpenAI-compatible Chat Completions API (OPENAI_API_KEY,
  OPENAI_BASE_URL for vLLM, Ollama, llama.cpp and other local servers);
- `anthropic:<model>` is the Anthropic Messages API (ANTHROPIC_API_KEY,
  ANTHROPIC_BASE_URL).

Credentials are read from the worker's environment by the provider, never
passed through workflows. Providers raise ModelError for every failure, with
`retryable` (and `retry_after`, when the API said how long to wait) so that
Temporal, which owns retries, can decide.
"""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel

from reposwarm.contracts import ToolCall, Usage


class ModelRequest(BaseModel):
    model: str  # the part after "provider:"
    system: str
    messages: list[dict[str, Any]]  # OpenAI-style chat messages: role, content, tool_calls, tool_call_id
    tools: list[dict[str, Any]]  # JSON-schema tool specs: name, description, parameters
    agent: str  # "planner" or a lane name
    round: int
    turn: int  # index of this reply within the agent's conversation this round
    attempt: int = 1  # the lane's dispatch within the round (a re-dispatch after a conflict is 2, ...)


class ModelReply(BaseModel):
    content: str = ""
    tool_calls: list[ToolCall] = []
    usage: Usage = Usage()


class ModelError(Exception):
    """A model call that failed; `retryable` says whether another attempt may help."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after  # seconds the API asked us to wait (Retry-After), if it said


class Provider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelReply: ...


def split_model_name(name: str) -> tuple[str, str]:
    provider, sep, model = name.partition(":")
    if not sep or not model:
        raise ModelError(f"model {name!r} must be named provider:model (for example replay:script.yaml)", retryable=False)
    return provider, model


KNOWN_PROVIDERS = ("replay", "openai", "anthropic")


def provider_for(name: str) -> tuple[Provider, str]:
    """The provider for `provider:model`, built now so a missing key fails before any call."""
    provider, model = split_model_name(name)
    if provider == "replay":
        from reposwarm.models.replay import ReplayProvider

        return ReplayProvider(model), model
    if provider == "openai":
        from reposwarm.models.openai import OpenAIProvider

        return OpenAIProvider(), model
    if provider == "anthropic":
        from reposwarm.models.anthropic import AnthropicProvider

        return AnthropicProvider(), model
    if provider == "oracle":
        from reposwarm.models.oracle import OracleProvider

        return OracleProvider(model), model
    raise ModelError(f"unknown model provider {provider!r} in {name!r} (known: {', '.join(KNOWN_PROVIDERS)})",
                     retryable=False)
