"""Model providers behind one small protocol.

A model is named `provider:name`. Today: `replay:<script path>` plays back a
recorded script (the demo and the tests). Real providers (OpenAI-compatible,
Anthropic) plug in behind the same protocol. Credentials are read from the
worker's environment by the provider, never passed through workflows.
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


class ModelReply(BaseModel):
    content: str = ""
    tool_calls: list[ToolCall] = []
    usage: Usage = Usage()


class ModelError(Exception):
    """A model call that failed; `retryable` says whether another attempt may help."""

    def __init__(self, message: str, *, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


class Provider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelReply: ...


def split_model_name(name: str) -> tuple[str, str]:
    provider, sep, model = name.partition(":")
    if not sep or not model:
        raise ModelError(f"model {name!r} must be named provider:model (for example replay:script.yaml)", retryable=False)
    return provider, model


def provider_for(name: str) -> tuple[Provider, str]:
    provider, model = split_model_name(name)
    if provider == "replay":
        from reposwarm.models.replay import ReplayProvider

        return ReplayProvider(model), model
    raise ModelError(f"unknown model provider {provider!r} in {name!r} (known: replay)", retryable=False)
