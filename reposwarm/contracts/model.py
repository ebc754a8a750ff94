"""A model call as every layer sees it: the request a lane or the planner makes, and the provider's reply, in the
provider-neutral shape the adapters (reposwarm/models/) translate to and from each provider's wire format. Kept
with the contracts because a run's records hold them: the reply cache, recordings and replay scripts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from reposwarm.contracts.base import Usage
from reposwarm.contracts.turns import ToolCall


class ModelRequest(BaseModel):
    model: str  # the part after "provider:"
    system: str
    messages: list[dict[str, Any]]  # OpenAI-style chat messages: role, content, tool_calls, tool_call_id
    tools: list[dict[str, Any]]  # JSON-schema tool specs: name, description, parameters
    agent: str  # "planner" or a lane name
    round: int
    turn: int  # index of this reply within the agent's conversation this round
    attempt: int = 1  # the lane's dispatch within the round (a re-dispatch after a conflict is 2, ...)
    # Prompt caching: how long the provider keeps the cached prefix ("5m", "1h"), and the key that routes a run's
    # requests to the same cache (OpenAI's prompt_cache_key: the run, so its lanes share their common prefix).
    cache_ttl: str = "5m"
    cache_key: str = ""
    max_tokens: int | None = None  # the reply's limit, where the call or the lane sets one (the warming call: 1)
    thinking_tokens: int | None = None  # Anthropic's extended thinking budget (none: no thinking asked for)
    reasoning_effort: str | None = None  # OpenAI reasoning models' effort ("low", "medium", "high"...)


class ModelReply(BaseModel):
    content: str = ""
    tool_calls: list[ToolCall] = []
    usage: Usage = Usage()
    provider_id: str = ""  # the provider's id of this reply (Anthropic's cache diagnostics compare against it)
    cache_miss: str = ""  # why the provider could not reuse the previous request's prefix, when it said
    # Why the reply ended, in the provider's word: "end_turn", "tool_use", "stop", "tool_calls"; cut at the output
    # limit: "max_tokens", "length" (reposwarm/models/limits.py); declined: "refusal". "": the provider did not say.
    stop_reason: str = ""
    stop_detail: str = ""  # what the provider said of it (a refusal's explanation)
    output_limit: int | None = None  # the max_tokens the request carried (None: none, the model's own applied)
    # Anthropic's thinking and redacted_thinking blocks, as the JSON text of the list the API sent (their order,
    # their signatures): sent back first in the reply's assistant message, which the API requires in a tool loop.
    thinking: str = ""
