"""A fake model server on loopback that speaks the real OpenAI Chat Completions, Anthropic Messages or OpenAI
Responses wire format (wire "openai", "anthropic" or "responses").

It plays a replay-format script: the agent is read from the request (the
planner's system prompt, or a lane's first message "Goal for lane X:"), the
turn from the number of assistant messages already in the conversation. Every
request is kept (path, headers, body) so a test can check what was sent.

With `caching` (tests/fake_caching.py) the usage is the fake cache's, not the
script's: what the request reads and writes, as the provider documents it.

A script entry `{"wire": {...}}` is sent as it is: a reply exactly as the API
sent it (tests/fixtures/provider_replies/), thinking blocks, stop reasons and
all. `{"wire": [paused, continued, ...]}` answers a turn Anthropic paused
(`pause_turn`): the request that continues it (its last message the turn so
far, as an assistant message) gets the next reply. The other entries are
replay-format replies shaped into the wire format; a script's usage may also give
`cache_read_tokens` and `cache_write_tokens`, which the reply reports as its API does.

A request with `"stream": true` is answered as the API streams (server-sent events, chunked): Anthropic's
message_start ... message_stop, Chat Completions' chunks and `[DONE]` (the usage chunk only where the request
asked for it with `stream_options.include_usage`), the Responses API's response.created ... response.completed.
The Responses API's conversation (`instructions` and `input` items) is read as the Chat Completions one is.
"""

from __future__ import annotations

import copy
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.fake_caching import AnthropicCache, CacheRequestError, OpenAICache, text_of, text_tokens


@dataclass
class Seen:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    raw: bytes


@dataclass
class FakeModelServer:
    wire: str  # "openai" (Chat Completions), "anthropic" (Messages) or "responses" (OpenAI Responses)
    script: dict[str, Any]
    requests: list[Seen] = field(default_factory=list)
    rate_limit_first: int = 0  # answer this many requests with 429 and Retry-After: 1 first
    delay_s: float = 0.0  # latency of every answer, as a real model has
    outage_after: int | None = None  # after this many answers, the provider is down (503) for outage_s seconds
    outage_s: float = 0.0
    answered: list[dict[str, Any]] = field(default_factory=list)  # the requests answered 200, in order
    refused: int = 0  # requests answered 503 during the outage
    outage_page: str = ""  # the 503's body as a proxy in front of the provider sends it (HTML), instead of JSON
    outage_retry_after: str = ""  # the 503's Retry-After header during the outage, if any
    warmed: int = 0  # the calls that only wrote the shared prefix to the cache (scheduler's warm_prefix)
    caching: AnthropicCache | OpenAICache | None = None  # usage from a fake prompt cache instead of the script
    event_delay_s: float = 0.0  # a streamed reply's pause between its events, as a model writing its answer

    def __post_init__(self) -> None:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the providers' servers: a client may reuse its connection
            disable_nagle_algorithm = True  # the body goes out without waiting for the ACK of the headers

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                raw = self.rfile.read(int(self.headers.get("content-length", 0)))
                body = json.loads(raw)
                server.requests.append(Seen(self.path, {k.lower(): v for k, v in self.headers.items()}, body, raw))
                expected = {"openai": "/v1/chat/completions", "responses": "/v1/responses"}.get(server.wire,
                                                                                                "/v1/messages")
                if self.path != expected:
                    return self._send(404, {"error": {"message": f"no route {self.path}"}})
                if server.rate_limit_first > 0:
                    server.rate_limit_first -= 1
                    return self._send(429, {"error": {"type": "rate_limit_error", "message": "slow down"}},
                                      {"retry-after": "1"})
                if server.in_outage():
                    server.refused += 1
                    after = {"retry-after": server.outage_retry_after} if server.outage_retry_after else {}
                    if server.outage_page:
                        return self._send_text(503, server.outage_page, "text/html", after)
                    return self._send(503, {"error": {"type": "overloaded_error", "message": "down for a while"}},
                                      after)
                if server.caching is not None:
                    return self._cached(body)
                if server.delay_s:
                    time.sleep(server.delay_s)
                try:
                    reply = server.reply_for(body)
                except LookupError as err:
                    return self._send(400, {"error": {"type": "invalid_request_error", "message": str(err)}})
                server.answered.append(body)
                if body.get("stream") is True:
                    return self._send_events(sse_events(server.wire, reply, body))
                self._send(200, reply)

            def _send_events(self, events: list[bytes]) -> None:
                """A streamed reply: each event a chunk of its own, as a provider sends them."""
                self.send_response(200)
                self.send_header("content-type", "text/event-stream; charset=utf-8")
                self.send_header("cache-control", "no-cache")
                self.send_header("transfer-encoding", "chunked")
                self.end_headers()
                for event in events:
                    self.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                    self.wfile.flush()
                    time.sleep(server.event_delay_s)
                self.wfile.write(b"0\r\n\r\n")

            def _cached(self, body: dict[str, Any]) -> None:
                # Priced on arrival, committed when the response goes out (after the latency): requests that
                # arrive meanwhile miss what this one writes, as at the provider.
                assert server.caching is not None
                try:
                    reply = server.reply_for(body)
                    charge = server.caching.usage_for(body, dict(self.headers.items()), output_tokens(reply))
                except (LookupError, CacheRequestError) as err:
                    if server.wire == "openai":
                        return self._send(400, {"error": {"message": str(err), "type": "invalid_request_error",
                                                          "param": None, "code": None}})
                    return self._send(400, {"type": "error",
                                            "error": {"type": "invalid_request_error", "message": str(err)}})
                reply["usage"] = charge.usage
                reply["id"] = charge.message_id
                if charge.diagnosed:
                    reply["diagnostics"] = charge.diagnostics
                if server.delay_s:
                    time.sleep(server.delay_s)
                server.caching.commit(charge)
                server.answered.append(body)
                self._send(200, reply)

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                self._send_text(status, json.dumps(payload), "application/json", headers)

            def _send_text(self, status: int, text: str, kind: str, headers: dict[str, str] | None = None) -> None:
                data = text.encode()
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    _outage_began: float | None = None

    def in_outage(self) -> bool:
        """Down from the moment `outage_after` answers were given, for `outage_s` seconds."""
        if self.outage_after is None or len(self.answered) < self.outage_after:
            return False
        if self._outage_began is None:
            self._outage_began = time.monotonic()
        return time.monotonic() - self._outage_began < self.outage_s

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        assert isinstance(host, str)
        return f"http://{host}:{port}" + ("/v1" if self.wire in ("openai", "responses") else "")

    def __enter__(self) -> FakeModelServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    # --- choosing and shaping the reply ---

    def _conversation(self, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
        """The system prompt's text (its blocks' texts joined) and the other messages."""
        if self.wire == "responses":
            return responses_conversation(body)
        if self.wire == "openai":
            messages = body["messages"]
            system = "\n".join(text_of(m["content"]) for m in messages if m["role"] == "system")
            return system, [m for m in messages if m["role"] != "system"]
        return text_of(body.get("system") or ""), body["messages"]

    def reply_for(self, body: dict[str, Any]) -> dict[str, Any]:
        system, messages = self._conversation(body)
        users = [text_of(m["content"]) for m in messages if m["role"] == "user"]
        first_text = users[0] if users else ""
        # the turns so far: the replies in the conversation, and those a compaction summary folded ("(N turns;")
        turn = sum(1 for m in messages if m["role"] == "assistant") + sum(
            int(found.group(1)) for m in messages if m["role"] == "user"
            for found in [re.search(r"Earlier turns, summarised to fit the context window \((\d+) turns",
                                   text_of(m["content"]))] if found)
        if users and users[-1].startswith("(reposwarm: this call only writes"):  # prompts.WARM_MESSAGE: the cache
            self.warmed += 1
            return self._wire({"content": "OK"}, body["model"])
        if "no one has split the repository into lanes" in system:  # the proposer (agent/prompts.py PROPOSER_SYSTEM)
            replies = self.script.get("proposer") or []
            agent, replies = "proposer", replies if isinstance(replies, list) else [replies]
        elif "You are the planner" in system:  # PLANNER_SYSTEM's start; a lane's system may hold the task's words
            # round = 1 + the reviewer comments the planner was given
            comments = first_text.split("Their comments, oldest first:")[1:]
            round_no = 1 + (comments[0].count("\n- ") if comments else 0)
            agent, replies = "planner", self.script.get("planner", {}).get(round_no, [])
            replies = replies if isinstance(replies, list) else [replies]
        else:
            # the lane's goal is in its first message, or in a later one (or the system text) if others come first
            said_in = next((t for t in [first_text, *users[1:], system] if re.search(r"Goal for lane \S+:", t)), "")
            match = re.search(r"Goal for lane (\S+):", said_in)
            if not match:
                raise LookupError("cannot tell which lane is asking")
            agent = match.group(1)
            said = re.search(r"^Round (\d+)\.", said_in, re.M) or re.search(r"^Round (\d+)\.", system, re.M)
            key: int | str = int(said.group(1)) if said else 1
            # A warm lane's later assignment (reposwarm/agent/prompts.py: lane_next_message) goes on in the same
            # conversation: its round and dispatch are in that message, its turns are the replies after it.
            nexts = [i for i, m in enumerate(messages) if m["role"] == "user"
                     and text_of(m["content"]).startswith(f"Next assignment for lane {agent} ")]
            if nexts:
                head = re.match(r"Next assignment for lane \S+ \(round (\d+), dispatch (\d+)\)",
                                text_of(messages[nexts[-1]]["content"]))
                assert head is not None
                round_no, dispatch = int(head.group(1)), int(head.group(2))
                key = round_no if f"{round_no}.{dispatch}" not in self.script["lanes"][agent] else \
                    f"{round_no}.{dispatch}"
                turn = sum(1 for m in messages[nexts[-1]:] if m["role"] == "assistant")
            replies = self.script["lanes"][agent][key]
        so_far = None
        if messages and messages[-1]["role"] == "assistant" and 0 < turn <= len(replies):
            paused = replies[turn - 1]  # a paused turn continued: its reply so far, last, is no turn of its own
            if isinstance(paused, dict) and isinstance(paused.get("wire"), list):
                so_far, turn = messages[-1]["content"], turn - 1
        if turn >= len(replies):
            raise LookupError(f"the script has no turn {turn + 1} for {agent}")
        return self._wire(replies[turn], body["model"], so_far)

    def _wire(self, reply: dict[str, Any], model: str, so_far: list[Any] | None = None) -> dict[str, Any]:
        if "wire" in reply:  # a reply as the API sent it: sent as is (a paused turn's next, as far as it came)
            answers = reply["wire"] if isinstance(reply["wire"], list) else [reply["wire"]]
            index, sent = 0, len(so_far or [])
            while sent > 0 and index < len(answers) - 1:
                sent -= len(answers[index]["content"])
                index += 1
            return copy.deepcopy(answers[index])
        usage = reply.get("usage", {"input_tokens": 1200, "output_tokens": 80})
        calls = reply.get("tool_calls") or []
        if self.wire == "responses":
            return responses_reply(reply, model, usage)
        if self.wire == "openai":
            message: dict[str, Any] = {"role": "assistant", "content": reply.get("content") or None, "refusal": None}
            if calls:
                message["tool_calls"] = [
                    {"id": c["id"], "type": "function",
                     "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}} for c in calls]
            return {
                "id": f"chatcmpl-{int(time.time() * 1000)}", "object": "chat.completion", "created": int(time.time()),
                "model": model, "system_fingerprint": "fp_fake",
                "choices": [{"index": 0, "message": message, "logprobs": None,
                             "finish_reason": "tool_calls" if calls else "stop"}],
                "usage": {"prompt_tokens": usage["input_tokens"], "completion_tokens": usage["output_tokens"],
                          "total_tokens": usage["input_tokens"] + usage["output_tokens"],
                          **({"prompt_tokens_details": {"cached_tokens": usage["cache_read_tokens"]}}
                             if "cache_read_tokens" in usage else {})},
            }
        content: list[dict[str, Any]] = []
        if reply.get("content"):
            content.append({"type": "text", "text": reply["content"]})
        content += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["arguments"]} for c in calls]
        return {
            "id": f"msg_{int(time.time() * 1000)}", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": "tool_use" if calls else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": usage["input_tokens"], "output_tokens": usage["output_tokens"],
                      "cache_creation_input_tokens": usage.get("cache_write_tokens", 0),
                      "cache_read_input_tokens": usage.get("cache_read_tokens", 0)},
        }


def output_tokens(reply: dict[str, Any]) -> int:
    """A wire reply's output at 4 characters a token: its text, then each tool call's arguments as JSON."""
    if "choices" in reply:
        message = reply["choices"][0]["message"]
        return text_tokens(message.get("content") or "") + sum(
            text_tokens(c["function"]["arguments"]) for c in message.get("tool_calls") or [])
    return sum(text_tokens(b["text"]) if b["type"] == "text" else text_tokens(json.dumps(b["input"]))
               if b["type"] == "tool_use" else text_tokens(json.dumps(b)) for b in reply["content"])


# --- the OpenAI Responses API ---


def responses_conversation(body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    """A Responses request's system text (`instructions`, system and developer items) and its conversation as
    Chat Completions messages: a run of the model's own items (message, function_call, reasoning) is one
    assistant message, as it was one reply."""
    system = [body["instructions"]] if isinstance(body.get("instructions"), str) else []
    items = body.get("input")
    items = [{"role": "user", "content": items}] if isinstance(items, str) else items or []
    messages: list[dict[str, Any]] = []
    for item in items:
        kind, role = item.get("type", "message"), item.get("role")
        if kind == "message" and role in ("system", "developer"):
            system.append(text_of(item.get("content")))
        elif kind == "message" and role == "user":
            messages.append({"role": "user", "content": text_of(item.get("content"))})
        elif kind in ("message", "function_call", "reasoning"):
            if not messages or messages[-1]["role"] != "assistant":
                messages.append({"role": "assistant", "content": ""})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "content": str(item.get("output"))})
    return "\n".join(system), messages


def responses_reply(reply: dict[str, Any], model: str, usage: dict[str, Any]) -> dict[str, Any]:
    """A replay-format reply as the Responses API sends it: a message item, then a function_call item per call."""
    stamp = int(time.time() * 1000)
    output: list[dict[str, Any]] = []
    if reply.get("content"):
        output.append({"type": "message", "id": f"msg_{stamp}", "status": "completed", "role": "assistant",
                       "content": [{"type": "output_text", "text": reply["content"], "annotations": []}]})
    output += [{"type": "function_call", "id": f"fc_{stamp}_{i}", "call_id": c["id"], "name": c["name"],
                "arguments": json.dumps(c["arguments"]), "status": "completed"}
               for i, c in enumerate(reply.get("tool_calls") or [])]
    return {
        "id": f"resp_{stamp}", "object": "response", "created_at": stamp // 1000, "status": "completed",
        "model": model, "output": output, "incomplete_details": None, "error": None,
        "usage": {"input_tokens": usage["input_tokens"],
                  "input_tokens_details": {"cached_tokens": usage.get("cache_read_tokens", 0)},
                  "output_tokens": usage["output_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": usage["input_tokens"] + usage["output_tokens"]},
    }


# --- streaming: a whole reply as the API's server-sent events ---


def _event(kind: str | None, data: Any) -> bytes:
    head = f"event: {kind}\n" if kind else ""
    return f"{head}data: {data if isinstance(data, str) else json.dumps(data)}\n\n".encode()


def sse_events(wire: str, reply: dict[str, Any], body: dict[str, Any]) -> list[bytes]:
    """The events that stream `reply` (a whole reply of the wire format) as its API streams it."""
    if wire == "anthropic":
        return _anthropic_events(reply)
    if wire == "responses":
        return _responses_events(reply)
    return _chat_events(reply, bool((body.get("stream_options") or {}).get("include_usage")))


def _anthropic_events(reply: dict[str, Any]) -> list[bytes]:
    usage = reply.get("usage") or {}
    started = {**reply, "content": [], "stop_reason": None, "stop_sequence": None,
               "usage": {**usage, "output_tokens": 1}}
    events = [_event("message_start", {"type": "message_start", "message": started}), _event("ping", {"type": "ping"})]
    for index, block in enumerate(reply.get("content") or []):
        if block["type"] == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            delta: dict[str, Any] | None = {"type": "text_delta", "text": block["text"]}
        elif block["type"] == "tool_use":
            first = {**block, "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
        else:
            first, delta = block, None
        events.append(_event("content_block_start", {"type": "content_block_start", "index": index,
                                                     "content_block": first}))
        if delta is not None:
            events.append(_event("content_block_delta", {"type": "content_block_delta", "index": index,
                                                         "delta": delta}))
        events.append(_event("content_block_stop", {"type": "content_block_stop", "index": index}))
    events.append(_event("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": reply.get("stop_reason"), "stop_sequence": None},
                                           "usage": {"output_tokens": usage.get("output_tokens", 0)}}))
    return [*events, _event("message_stop", {"type": "message_stop"})]


def _chat_events(reply: dict[str, Any], with_usage: bool) -> list[bytes]:
    head = {k: reply[k] for k in ("id", "created", "model", "system_fingerprint") if k in reply}
    extra = {"usage": None} if with_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _event(None, {**head, "object": "chat.completion.chunk", "choices": [choice], **extra})

    choice = reply["choices"][0]
    message = choice["message"]
    events = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        events.append(chunk({"content": message["content"]}))
    for index, call in enumerate(message.get("tool_calls") or []):
        events.append(chunk({"tool_calls": [{"index": index, "id": call["id"], "type": "function",
                                             "function": {"name": call["function"]["name"], "arguments": ""}}]}))
        events.append(chunk({"tool_calls": [{"index": index,
                                             "function": {"arguments": call["function"]["arguments"]}}]}))
    events.append(chunk({}, choice.get("finish_reason")))
    if with_usage:
        events.append(_event(None, {**head, "object": "chat.completion.chunk", "choices": [],
                                    "usage": reply.get("usage")}))
    return [*events, _event(None, "[DONE]")]


def _responses_events(reply: dict[str, Any]) -> list[bytes]:
    numbers = iter(range(1_000_000))

    def event(kind: str, **fields: Any) -> bytes:
        return _event(kind, {"type": kind, "sequence_number": next(numbers), **fields})

    going = {**reply, "status": "in_progress", "output": [], "usage": None}
    events = [event("response.created", response=going), event("response.in_progress", response=going)]
    for index, item in enumerate(reply["output"]):
        where = {"item_id": item["id"], "output_index": index}
        if item["type"] == "message":
            text = item["content"][0]["text"]
            part = {"type": "output_text", "text": "", "annotations": []}
            events += [event("response.output_item.added", output_index=index,
                             item={**item, "status": "in_progress", "content": []}),
                       event("response.content_part.added", **where, content_index=0, part=part),
                       event("response.output_text.delta", **where, content_index=0, delta=text),
                       event("response.output_text.done", **where, content_index=0, text=text),
                       event("response.content_part.done", **where, content_index=0, part={**part, "text": text})]
        elif item["type"] == "function_call":
            events += [event("response.output_item.added", output_index=index,
                             item={**item, "status": "in_progress", "arguments": ""}),
                       event("response.function_call_arguments.delta", **where, delta=item["arguments"]),
                       event("response.function_call_arguments.done", **where, arguments=item["arguments"])]
        events.append(event("response.output_item.done", output_index=index, item=item))
    return [*events, event("response.completed", response=reply)]
