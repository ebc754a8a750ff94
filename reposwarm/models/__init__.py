"""Model providers behind one small protocol.

A model is named `provider:name`:

- `replay:<script path>` plays back a recorded script (the demo and the tests);
- `openai:<model>` is any OpenAI-compatible Chat Completions API (OPENAI_API_KEY,
  OPENAI_BASE_URL for vLLM, Ollama, llama.cpp and other local servers);
- `anthropic:<model>` is the Anthropic Messages API (ANTHROPIC_API_KEY,
  ANTHROPIC_BASE_URL);
- `oracle:<repository>#<sha>` replays one real commit of a repository: as
  planner it gives each lane whose paths the commit touched the goal of making
  its change, as a lane it writes the commit's files in its paths
  (reposwarm/models/oracle.py). Offline and free: `reposwarm try` runs a whole
  swarm with it, and the trials prove their harness with it. It is read in the
  worker, from the repository, which the lanes never see.

Credentials are read from the worker's environment by the provider, never
passed through workflows. Providers raise ModelError for every failure, with
`retryable` (and `retry_after`, when the API said how long to wait) so that
Temporal, which owns retries, can decide.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any, Protocol

from pydantic import ValidationError

from reposwarm.contracts import ToolCall
from reposwarm.contracts.model import ModelReply, ModelRequest

# What a model reply may hold. Past these, a reply is not passed on as it came: a call nested deeper than
# MAX_ARGUMENT_DEPTH would overflow the recursion limits of json and pydantic further on (pydantic's JSON
# parser stops at 200 levels, so a lane's workflow could not even decode the turn's result), a call larger
# than MAX_ARGUMENT_CHARS is no tool's input (a write is at most 1 MB), and a whole reply over
# MAX_REPLY_BYTES is no answer a lane can use.
MAX_ARGUMENT_DEPTH = 32
MAX_ARGUMENT_CHARS = 4_000_000
MAX_REPLY_BYTES = 8 * 1024 * 1024
# Brackets and whole strings of JSON text: a string's brackets are not nesting.
_JSON_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]')


def json_depth(text: str, limit: int = MAX_ARGUMENT_DEPTH) -> int:
    """How deep JSON text nests (an object or array is one level), counted without decoding it, so text
    that would overflow a decoder can be measured; counting stops just past `limit`."""
    depth = deepest = 0
    for match in _JSON_TOKENS.finditer(text):
        char = match.group()
        if char in ("[", "{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    break
        elif char in ("]", "}"):
            depth -= 1
    return deepest


def value_depth(value: Any, limit: int = MAX_ARGUMENT_DEPTH) -> int:
    """How deep a decoded JSON value nests, walked without recursion; counting stops just past `limit`."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, depth)
        if deepest > limit:
            break
        stack.extend((child, depth + 1) for child in children)
    return deepest


def too_deep() -> str:
    return (f"the arguments nest more than {MAX_ARGUMENT_DEPTH} levels deep, which is more than any tool takes; "
            "the call was not run: send the arguments as the tool's schema says")


def tool_call(call_id: Any, name: Any, arguments: Any) -> ToolCall:
    """A ToolCall from what a provider sent: `arguments` as the JSON text, or as the value itself.

    Arguments nested past MAX_ARGUMENT_DEPTH are never decoded or encoded (that is what overflows): the
    call keeps `{}` as its raw arguments and carries the reason as its error, which the model reads.
    Arguments that are not a JSON object keep their text and get None, which the lane reports as malformed.
    """
    call_id, name = str(call_id), str(name)
    if isinstance(arguments, str):
        depth = json_depth(arguments)
        if depth > MAX_ARGUMENT_DEPTH:
            return ToolCall(id=call_id, name=name, raw_arguments="{}", error=too_deep())
        try:
            parsed = json.loads(arguments)
        except (ValueError, RecursionError):
            parsed = None
        return ToolCall(id=call_id, name=name, arguments=parsed if isinstance(parsed, dict) else None,
                        raw_arguments=arguments)
    depth = value_depth(arguments)
    if depth > MAX_ARGUMENT_DEPTH:
        return ToolCall(id=call_id, name=name, raw_arguments="{}", error=too_deep())
    try:
        raw = json.dumps(arguments)
    except (TypeError, ValueError):  # not JSON at all (a replay script may hold anything YAML can say)
        raw = str(arguments)
    return ToolCall(id=call_id, name=name, arguments=arguments if isinstance(arguments, dict) else None,
                    raw_arguments=raw)


def structured_reply(reply: ModelReply, tool: str, what: str) -> str:
    """The JSON a planner's reply carries: its `tool` call's arguments, or its text (a ```json fence taken off);
    a ValueError, which goes back to the model, when there is none."""
    calls = [c for c in reply.tool_calls if c.name == tool]
    text = calls[0].raw_arguments if calls else reply.content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    if not text:
        raise ValueError(f"the reply holds no {what}: call {tool} with the {what}")
    return text


def schema_problems(err: ValidationError, root: str, limit: int) -> str:
    """A pydantic error as one line for the model: each problem's place and message."""
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or root}: {e['msg']}" for e in err.errors()[:limit])


class ModelError(Exception):
    """A model call that failed; `retryable` says whether another attempt may help."""

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None,
                 unavailable: bool = False) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after  # seconds the API asked us to wait (Retry-After), if it said
        # The provider did not answer, or answered that it cannot now (a timeout, a refused connection, 429, 5xx):
        # an outage, retried for the run's whole outage window. A retryable failure that is not one (a malformed
        # reply) gets a few attempts only.
        self.unavailable = unavailable


class Provider(Protocol):
    async def complete(self, request: ModelRequest) -> ModelReply: ...


def split_model_name(name: str) -> tuple[str, str]:
    provider, sep, model = name.partition(":")
    if not sep or not model:
        raise ModelError(f"model {name!r} must be named provider:model (for example replay:script.yaml)", retryable=False)
    return provider, model


KNOWN_PROVIDERS = ("replay", "openai", "anthropic", "oracle")


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
