"""Fake model servers for the real agent CLIs (issue 47): Anthropic Messages and OpenAI Responses, streamed as SSE.

Claude Code (through ANTHROPIC_BASE_URL) and Codex (through a custom model provider, `wire_api = "responses"`)
talk to these exactly as to their providers, so a test drives the real binaries with no account and no network.
Each server plays a script: a function from the request body to what the model "says" next, as a list of
`Text(...)` and `Call(name, input)`. The main agent loop is told apart from a CLI's side calls (titles, quota
probes...) by whether the request offers tools; side calls get a short text. Every request is kept (path,
headers, body) so a test can check what was sent: the token it carried, the tools it offered, the tool results.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Call:
    name: str
    input: dict[str, Any]


Said = list[Text | Call]
Script = Callable[[dict[str, Any]], Said]


class Drop(Exception):
    """Raised by a script: the server closes the connection with no answer at all, as a provider (or a worker's
    proxy) that died mid-call."""


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


def _sse(event: dict[str, Any]) -> bytes:
    return f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode()


class _Server:
    """A loopback HTTP server in a thread; subclasses answer POSTs."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[Seen] = []
        self.errors: list[str] = []  # requests the fake could not make sense of
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                with server._lock:
                    server.requests.append(Seen(self.path, _lower(self.headers.items()), {}))
                self._json(404, {"error": {"type": "not_found_error", "message": f"no route {self.path}"}})

            def do_HEAD(self) -> None:  # noqa: N802
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_POST(self) -> None:  # noqa: N802
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"unparsed": raw.decode(errors="replace")}
                with server._lock:
                    server.requests.append(Seen(self.path, _lower(self.headers.items()), body))
                try:
                    server.answer(self, body)
                except Drop:
                    self.close_connection = True

            def _json(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def stream(self, events: list[dict[str, Any]]) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("connection", "close")
                self.end_headers()
                try:
                    for event in events:
                        self.wfile.write(_sse(event))
                        self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # (the agent is gone: killed mid-reply, as a test may do)
                self.close_connection = True

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def answer(self, handler: Any, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def next_id(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):04d}"

    @property
    def port(self) -> int:
        return int(self._httpd.server_address[1])

    def start(self) -> _Server:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def _lower(items: Any) -> dict[str, str]:
    return {k.lower(): v for k, v in items}


# --- Anthropic Messages ---


class FakeMessages(_Server):
    """`POST /v1/messages` (stream or not); `count_tokens` answered with a small count."""

    @property
    def base_url(self) -> str:  # ANTHROPIC_BASE_URL: the client adds /v1/messages
        return f"http://127.0.0.1:{self.port}"

    def model_requests(self) -> list[Seen]:
        """The agent loop's requests (those offering tools), not the CLI's side calls."""
        return [r for r in self.requests if r.path.startswith("/v1/messages") and "count_tokens" not in r.path
                and r.body.get("tools")]

    def answer(self, handler: Any, body: dict[str, Any]) -> None:
        if "count_tokens" in handler.path:
            return handler._json(200, {"input_tokens": 10})
        if not handler.path.startswith("/v1/messages"):
            return handler._json(404, {"type": "error", "error": {"type": "not_found_error", "message": "no route"}})
        said: Said = self.script(body) if body.get("tools") else [Text("ok")]
        blocks: list[dict[str, Any]] = []
        for part in said:
            if isinstance(part, Text):
                blocks.append({"type": "text", "text": part.text})
            else:
                blocks.append({"type": "tool_use", "id": self.next_id("toolu_fake"), "name": part.name,
                               "input": part.input})
        stop = "tool_use" if any(b["type"] == "tool_use" for b in blocks) else "end_turn"
        model = body.get("model", "claude-fake")
        message_id = self.next_id("msg_fake")
        if not body.get("stream"):
            return handler._json(200, {"id": message_id, "type": "message", "role": "assistant", "model": model,
                                       "content": blocks, "stop_reason": stop, "stop_sequence": None,
                                       "usage": {"input_tokens": 12, "output_tokens": 20}})
        events: list[dict[str, Any]] = [{"type": "message_start", "message": {
            "id": message_id, "type": "message", "role": "assistant", "model": model, "content": [],
            "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 1, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0}}}]
        for i, block in enumerate(blocks):
            if block["type"] == "text":
                events.append({"type": "content_block_start", "index": i, "content_block": {"type": "text", "text": ""}})
                events.append({"type": "content_block_delta", "index": i,
                               "delta": {"type": "text_delta", "text": block["text"]}})
            else:
                start = {**block, "input": {}}
                partial = json.dumps(block["input"])
                half = len(partial) // 2  # in two pieces, as the API streams a tool's input
                events.append({"type": "content_block_start", "index": i, "content_block": start})
                for piece in (partial[:half], partial[half:]):
                    events.append({"type": "content_block_delta", "index": i,
                                   "delta": {"type": "input_json_delta", "partial_json": piece}})
            events.append({"type": "content_block_stop", "index": i})
        events.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                       "usage": {"output_tokens": 20}})
        events.append({"type": "message_stop"})
        handler.stream(events)


def tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The tool_result blocks of a Messages request, in order."""
    found = []
    for message in body.get("messages", []):
        content = message.get("content")
        if isinstance(content, list):
            found += [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return found


# --- OpenAI Responses ---


class FakeResponses(_Server):
    """`POST /v1/responses`, streamed: response.created, output items added and done, response.completed."""

    @property
    def base_url(self) -> str:  # a Codex provider's base_url: the client adds /responses
        return f"http://127.0.0.1:{self.port}/v1"

    def model_requests(self) -> list[Seen]:
        return [r for r in self.requests if r.path.endswith("/responses") and r.body.get("tools")]

    def answer(self, handler: Any, body: dict[str, Any]) -> None:
        if not handler.path.endswith("/responses"):
            return handler._json(404, {"error": {"type": "invalid_request_error", "message": f"no route {handler.path}"}})
        said: Said = self.script(body) if body.get("tools") else [Text("ok")]
        response_id = self.next_id("resp_fake")
        model = body.get("model", "gpt-fake")
        base = {"id": response_id, "object": "response", "model": model, "status": "in_progress", "output": []}
        events: list[dict[str, Any]] = [{"type": "response.created", "response": base}]
        output: list[dict[str, Any]] = []
        custom = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict) and t.get("type") == "custom"}
        for index, part in enumerate(said):
            item: dict[str, Any]
            if isinstance(part, Text):
                item_id = self.next_id("msg_fake")
                item = {"type": "message", "id": item_id, "role": "assistant", "status": "completed",
                        "content": [{"type": "output_text", "text": part.text, "annotations": []}]}
                events.append({"type": "response.output_item.added", "output_index": index,
                               "item": {**item, "status": "in_progress", "content": []}})
                events.append({"type": "response.output_text.delta", "item_id": item_id, "output_index": index,
                               "content_index": 0, "delta": part.text})
            elif part.name in custom:  # a freeform tool (Codex's apply_patch): its input is the text itself
                item = {"type": "custom_tool_call", "id": self.next_id("ctc_fake"), "call_id": self.next_id("call_fake"),
                        "name": part.name, "input": str(part.input.get("input", "")), "status": "completed"}
                events.append({"type": "response.output_item.added", "output_index": index, "item": item})
            else:
                item = {"type": "function_call", "id": self.next_id("fc_fake"), "call_id": self.next_id("call_fake"),
                        "name": part.name, "arguments": json.dumps(part.input), "status": "completed"}
                events.append({"type": "response.output_item.added", "output_index": index, "item": item})
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
            output.append(item)
        usage = {"input_tokens": 11, "input_tokens_details": {"cached_tokens": 0}, "output_tokens": 7,
                 "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": 18}
        events.append({"type": "response.completed",
                       "response": {**base, "status": "completed", "output": output, "usage": usage}})
        handler.stream(events)


def function_outputs(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The function_call_output (and custom_tool_call_output) items of a Responses request, in order."""
    return [i for i in body.get("input", []) if isinstance(i, dict)
            and i.get("type") in ("function_call_output", "custom_tool_call_output")]


@dataclass
class Turns:
    """A script by turn: the n-th agent-loop request (counted by the tool results it carries) gets `turns[n]`;
    past the end, a closing text. Whatever the request, the turn is read from its own history, so a retried or
    resumed request gets the same answer."""

    turns: list[Said]
    closing: str = "done"
    counted: Callable[[dict[str, Any]], int] = field(default=lambda body: 0)

    def __call__(self, body: dict[str, Any]) -> Said:
        n = self.counted(body)
        return self.turns[n] if n < len(self.turns) else [Text(self.closing)]


def messages_turns(turns: list[Said], closing: str = "done") -> Turns:
    return Turns(turns, closing, lambda body: len(tool_results(body)))


def responses_turns(turns: list[Said], closing: str = "done") -> Turns:
    return Turns(turns, closing, lambda body: len(function_outputs(body)))
