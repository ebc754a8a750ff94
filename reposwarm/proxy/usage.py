"""A call's usage as the provider reported it, read from a JSON reply or from the events of an SSE stream.

Counted as the built-in providers count theirs (reposwarm/models/anthropic.py, openai.py), into the project's
Usage: every prompt token in `input_tokens`, of which `cache_read_tokens` were read from the provider's prompt
cache and `cache_write_tokens` written to it.

- Anthropic Messages: `usage.input_tokens` is the uncached part only, so the input is it plus
  `cache_creation_input_tokens` plus `cache_read_input_tokens`. Streamed, `message_start` carries the message's
  usage and each `message_delta` the figures so far (cumulative: the later figure wins).
- OpenAI Responses: `usage.input_tokens` (cached ones included, `input_tokens_details.cached_tokens`) and
  `output_tokens` (reasoning included). Streamed, the usage is in `response.completed` (or `.incomplete`,
  `.failed`).
- OpenAI Chat Completions: `prompt_tokens` (`prompt_tokens_details.cached_tokens` of them cached) and
  `completion_tokens`, reasoning tokens added where a server reports them beside it. Streamed, the last chunk
  carries it when the request asked (the proxy asks: wire.with_stream_usage).

A reply that reports no usage at all (a local server that counts nothing) gets the built-in loop's size estimate
(reposwarm/models/calls.py `_estimate`): the conversation sent at 4 characters a token, and the reply's text and
tool-call arguments likewise, at least one. A reply that is not what its API sends (not JSON, fields of the wrong
type) is counted so, never an error: the agent has its reply as the provider sent it.
"""

from __future__ import annotations

import json
from typing import Any

from reposwarm.contracts.base import Usage
from reposwarm.proxy.wire import ANTHROPIC, CHAT, RESPONSES


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


class EventSplitter:
    """An SSE stream cut into whole events (each with its blank line), whatever the chunks it arrives in."""

    def __init__(self) -> None:
        self._buffer = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        events: list[bytes] = []
        while True:
            ends = [(i, len(sep)) for sep in (b"\n\n", b"\r\n\r\n") if (i := self._buffer.find(sep)) >= 0]
            if not ends:
                return events
            at, size = min(ends)
            events.append(self._buffer[:at + size])
            self._buffer = self._buffer[at + size:]

    def rest(self) -> bytes:
        """What came after the last whole event (a stream cut short, or one not ended by a blank line)."""
        rest, self._buffer = self._buffer, b""
        return rest


def event_data(event: bytes) -> Any:
    """An SSE event's data as JSON (its `data:` lines joined), or None ([DONE], a comment, not JSON)."""
    lines = event.decode("utf-8", "replace").splitlines()
    data = "\n".join(line[5:].removeprefix(" ") for line in lines if line.startswith("data:"))
    if not data or data == "[DONE]":
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None


class UsageReader:
    """The usage of one call, read from its reply as it comes: `json_reply` for a whole body, `event` for each
    event of a stream; then `usage()`, `stop_reason` and `cache_ttl`."""

    def __init__(self, api_name: str) -> None:
        self.api = api_name
        self.stop_reason = ""
        self.cache_ttl = "5m"
        self._fields: dict[str, Any] = {}  # the API's usage object, as far as it has come
        self._said = 0  # characters of the reply's text and tool-call arguments, for an estimate

    def json_reply(self, body: bytes) -> None:
        try:
            reply = json.loads(body)
        except (ValueError, RecursionError):
            return
        reply = _dict(reply)
        if self.api == ANTHROPIC:
            self._fields = _dict(reply.get("usage"))
            self.stop_reason = str(reply.get("stop_reason") or "")
            for block in reply.get("content") or []:
                block = _dict(block)
                self._said += len(_str(block.get("text"))) + (len(json.dumps(block.get("input")))
                                                              if block.get("type") == "tool_use" else 0)
        elif self.api == RESPONSES:
            self._response(reply)
            for item in reply.get("output") or []:
                item = _dict(item)
                self._said += len(_str(item.get("arguments"))) + sum(
                    len(_str(_dict(part).get("text"))) for part in item.get("content") or [])
        elif self.api == CHAT:
            self._fields = _dict(reply.get("usage"))
            choices = reply.get("choices")
            if isinstance(choices, list) and choices:
                self.stop_reason = self._chat_stop(_dict(choices[0]))
                message = _dict(_dict(choices[0]).get("message"))
                self._said += len(_str(message.get("content"))) + sum(
                    len(_str(_dict(_dict(call).get("function")).get("arguments")))
                    for call in message.get("tool_calls") or [])

    def event(self, event: bytes) -> None:
        data = _dict(event_data(event))
        kind = data.get("type")
        if self.api == ANTHROPIC:
            if kind == "message_start":
                self._fields = dict(_dict(_dict(data.get("message")).get("usage")))
            elif kind == "message_delta":
                self._fields.update(_dict(data.get("usage")))  # cumulative figures: the latest win
                self.stop_reason = str(_dict(data.get("delta")).get("stop_reason") or self.stop_reason)
            elif kind == "content_block_delta":
                delta = _dict(data.get("delta"))
                self._said += len(_str(delta.get("text"))) + len(_str(delta.get("partial_json")))
        elif self.api == RESPONSES:
            if kind in ("response.completed", "response.incomplete", "response.failed"):
                self._response(_dict(data.get("response")))
            elif kind in ("response.output_text.delta", "response.function_call_arguments.delta"):
                self._said += len(_str(data.get("delta")))
        elif self.api == CHAT:
            if _dict(data.get("usage")):
                self._fields = _dict(data.get("usage"))
            for choice in data.get("choices") or []:
                if stop := self._chat_stop(_dict(choice)):
                    self.stop_reason = stop
                delta = _dict(_dict(choice).get("delta"))
                self._said += len(_str(delta.get("content"))) + sum(
                    len(_str(_dict(_dict(call).get("function")).get("arguments")))
                    for call in delta.get("tool_calls") or [])

    def _response(self, response: dict[str, Any]) -> None:
        self._fields = _dict(response.get("usage"))
        if response.get("status") == "incomplete":
            reason = str(_dict(response.get("incomplete_details")).get("reason") or "incomplete")
            self.stop_reason = "max_tokens" if reason == "max_output_tokens" else reason
        elif any(_dict(item).get("type") == "refusal" for output in response.get("output") or []
                 for item in _dict(output).get("content") or []):
            self.stop_reason = "refusal"

    @staticmethod
    def _chat_stop(choice: dict[str, Any]) -> str:
        if _dict(choice.get("message")).get("refusal") or _dict(choice.get("delta")).get("refusal"):
            return "refusal"
        return str(choice.get("finish_reason") or "")[:64]

    def usage(self, conversation: Any = None) -> Usage:
        """The call's usage; where the reply reported none, the estimate from `conversation` (what was sent: the
        request's messages, or the Responses API's input) and the reply's text."""
        counted = self._counted()
        if counted.input_tokens or counted.output_tokens:
            return counted
        return Usage(input_tokens=len(json.dumps(conversation)) // 4, output_tokens=max(1, self._said // 4),
                     model_calls=1)

    def _counted(self) -> Usage:
        f = self._fields
        if self.api == ANTHROPIC:
            written, read = _int(f.get("cache_creation_input_tokens")), _int(f.get("cache_read_input_tokens"))
            split = _dict(f.get("cache_creation"))
            if _int(split.get("ephemeral_1h_input_tokens")) > _int(split.get("ephemeral_5m_input_tokens")):
                self.cache_ttl = "1h"  # priced at the hour's write rate (a call that writes both: the larger)
            return Usage(input_tokens=_int(f.get("input_tokens")) + written + read,
                         output_tokens=_int(f.get("output_tokens")), cache_read_tokens=read,
                         cache_write_tokens=written, model_calls=1)
        if self.api == RESPONSES:
            prompt = _int(f.get("input_tokens"))
            cached = min(prompt, _int(_dict(f.get("input_tokens_details")).get("cached_tokens")))
            return Usage(input_tokens=prompt, output_tokens=_int(f.get("output_tokens")), cache_read_tokens=cached,
                         model_calls=1)
        prompt, completion = _int(f.get("prompt_tokens")), _int(f.get("completion_tokens"))
        cached = min(prompt, _int(_dict(f.get("prompt_tokens_details")).get("cached_tokens")))
        reasoning = _int(_dict(f.get("completion_tokens_details")).get("reasoning_tokens"))
        output = completion if completion >= reasoning else completion + reasoning  # as reposwarm/models/openai.py
        return Usage(input_tokens=prompt, output_tokens=output, cache_read_tokens=cached, model_calls=1)
