"""The real model providers against their wire formats, over httpx.MockTransport.

The bodies are what the APIs really send (ids, object, created, finish_reason,
stop_reason...), so a change that parses by hand-made fixtures alone shows up.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from reposwarm.contracts.model import ModelRequest
from reposwarm.models import ModelError, provider_for
from reposwarm.models.anthropic import AnthropicProvider
from reposwarm.models.http import CONTEXT_HINT
from reposwarm.models.openai import OpenAIProvider

OPENAI_KEY = "sk-" + "test-0123456789abcdef-secret"  # fake
ANTHROPIC_KEY = "sk-" + "ant-api03-test-secret-key"  # fake
TOOLS = [
    {"name": "read_file", "description": "Read a file.",
     "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}},
    {"name": "finish", "description": "Say you are done.",
     "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": ["summary"]}},
]
TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "user", "content": "Add a health endpoint."},
    {"role": "assistant", "content": "Reading both files.", "tool_calls": [
        {"id": "call_A1", "type": "function", "function": {"name": "read_file", "arguments": '{"path": "app.py"}'}},
        {"id": "call_B2", "type": "function", "function": {"name": "read_file", "arguments": '{"path": '}},
    ]},
    {"role": "tool", "tool_call_id": "call_A1", "content": "print('hi')"},
    {"role": "tool", "tool_call_id": "call_B2", "content": "error: arguments were not JSON"},
    {"role": "user", "content": "Budget: 3 turns left."},
]


def request(messages: list[dict[str, Any]] | None = None, tools: list[dict[str, Any]] | None = None) -> ModelRequest:
    return ModelRequest(model="test-model", system="You are a lane.", messages=messages or TRANSCRIPT,
                        tools=TOOLS if tools is None else tools, agent="api", round=1, turn=0)


class Recorder:
    """A MockTransport that answers with one canned response and keeps what was sent."""

    def __init__(self, status: int = 200, body: Any = None, headers: dict[str, str] | None = None,
                 raw: bytes | None = None, raises: type[Exception] | None = None) -> None:
        self.status, self.body, self.headers, self.raw, self.raises = status, body, headers or {}, raw, raises
        self.requests: list[httpx.Request] = []
        self.transport = httpx.MockTransport(self.handle)

    def handle(self, req: httpx.Request) -> httpx.Response:
        self.requests.append(req)
        if self.raises:
            raise self.raises("boom", request=req)
        content = self.raw if self.raw is not None else json.dumps(self.body).encode()
        return httpx.Response(self.status, content=content, headers=self.headers)

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.requests[-1].content)


@pytest.fixture(autouse=True)
def env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "REPOSWARM_MODEL_TIMEOUT_S", "REPOSWARM_MAX_OUTPUT_TOKENS"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)


def openai_reply(message: dict[str, Any], finish: str = "stop") -> dict[str, Any]:
    return {
        "id": "chatcmpl-B9MBs8CjcvOU2jLn4n570S5qMJKcT", "object": "chat.completion", "created": 1741569952,
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": 0, "message": {"role": "assistant", "refusal": None, "annotations": [], **message},
                     "logprobs": None, "finish_reason": finish}],
        "usage": {"prompt_tokens": 1017, "completion_tokens": 42, "total_tokens": 1059,
                  "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                  "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                                "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}},
        "service_tier": "default", "system_fingerprint": "fp_f9f4fb6dbf",
    }


def anthropic_reply(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "id": "msg_01XFDUDYJgAACzvnptvVoYEL", "type": "message", "role": "assistant",
        "model": "claude-sonnet-4-20250514", "content": content, "stop_reason": stop, "stop_sequence": None,
        "usage": {"input_tokens": 2095, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0,
                  "output_tokens": 503, "service_tier": "standard"},
    }


def oa_error(message: str, kind: str, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def an_error(message: str, kind: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_011CSHoEeqs5C35K2UUqR7Fy"}


# --- OpenAI ---


async def test_openai_plain_text_reply_and_usage():
    rec = Recorder(body=openai_reply({"content": "Hello! The plan is ready."}))
    reply = await OpenAIProvider(transport=rec.transport).complete(request(tools=[]))
    assert reply.content == "Hello! The plan is ready." and reply.tool_calls == []
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.model_calls) == (1017, 42, 1)
    assert "tools" not in rec.json and "tool_choice" not in rec.json


async def test_openai_two_tool_calls_keep_ids_and_raw_arguments():
    calls = [{"id": "call_Vx1bT9kQm2", "type": "function",
              "function": {"name": "read_file", "arguments": "{\"path\": \"services/api/app.py\"}"}},
             {"id": "call_Zz8Pq3", "type": "function",
              "function": {"name": "finish", "arguments": "{\"summary\":\"done\"}"}}]
    rec = Recorder(body=openai_reply({"content": None, "tool_calls": calls}, finish="tool_calls"))
    reply = await OpenAIProvider(transport=rec.transport).complete(request())
    assert reply.content == ""
    assert [c.id for c in reply.tool_calls] == ["call_Vx1bT9kQm2", "call_Zz8Pq3"]
    assert [c.name for c in reply.tool_calls] == ["read_file", "finish"]
    assert reply.tool_calls[0].arguments == {"path": "services/api/app.py"}
    assert reply.tool_calls[0].raw_arguments == "{\"path\": \"services/api/app.py\"}"
    assert reply.tool_calls[1].raw_arguments == "{\"summary\":\"done\"}"


@pytest.mark.parametrize("raw", ["{\"path\": \"app.py\"", "[\"app.py\"]", "not json at all"])
async def test_openai_arguments_that_are_not_a_json_object(raw: str):
    calls = [{"id": "call_bad", "type": "function", "function": {"name": "read_file", "arguments": raw}}]
    rec = Recorder(body=openai_reply({"content": None, "tool_calls": calls}, finish="tool_calls"))
    (call,) = (await OpenAIProvider(transport=rec.transport).complete(request())).tool_calls
    assert call.id == "call_bad" and call.arguments is None and call.raw_arguments == raw


async def test_openai_request_sent():
    rec = Recorder(body=openai_reply({"content": "ok"}))
    await OpenAIProvider(transport=rec.transport).complete(request())
    sent = rec.requests[-1]
    assert str(sent.url) == "https://api.openai.com/v1/chat/completions" and sent.method == "POST"
    assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert OPENAI_KEY not in str(sent.url) and OPENAI_KEY not in sent.content.decode()
    assert [v for k, v in sent.headers.items() if OPENAI_KEY in v and k != "authorization"] == []
    assert sent.extensions["timeout"] == {"connect": 10, "read": 300, "write": 30, "pool": 10}
    body = rec.json
    assert body["model"] == "test-model" and body["tool_choice"] == "auto"
    assert body["messages"][0] == {"role": "system", "content": "You are a lane."}
    assert body["messages"][1:] == TRANSCRIPT
    assert body["tools"] == [{"type": "function", "function": t} for t in TOOLS]


async def test_openai_base_url_without_key_sends_no_authorization(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://localhost:8000/v1/")
    monkeypatch.setenv("REPOSWARM_MODEL_TIMEOUT_S", "42")
    rec = Recorder(body=openai_reply({"content": "local"}))
    assert (await OpenAIProvider(transport=rec.transport).complete(request())).content == "local"
    sent = rec.requests[-1]
    assert str(sent.url) == "http://localhost:8000/v1/chat/completions"
    assert "authorization" not in sent.headers and sent.extensions["timeout"]["read"] == 42


async def test_openai_needs_a_key_without_a_base_url(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ModelError, match="OPENAI_API_KEY") as err:
        provider_for("openai:gpt-4o")
    assert not err.value.retryable


# --- Anthropic ---


async def test_anthropic_plain_text_reply_and_usage():
    rec = Recorder(body=anthropic_reply([{"type": "text", "text": "Here is the plan."}]))
    reply = await AnthropicProvider(transport=rec.transport).complete(request(tools=[]))
    assert reply.content == "Here is the plan." and reply.tool_calls == []
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.model_calls) == (2095, 503, 1)
    assert "tools" not in rec.json


async def test_anthropic_two_tool_calls():
    rec = Recorder(body=anthropic_reply([
        {"type": "text", "text": "I'll read the app first."},
        {"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "read_file",
         "input": {"path": "services/api/app.py"}},
        {"type": "tool_use", "id": "toolu_01B7xYz", "name": "finish", "input": {"summary": "done"}},
    ], stop="tool_use"))
    reply = await AnthropicProvider(transport=rec.transport).complete(request())
    assert reply.content == "I'll read the app first."
    assert [c.id for c in reply.tool_calls] == ["toolu_01A09q90qw90lq917835lq9", "toolu_01B7xYz"]
    assert reply.tool_calls[0].arguments == {"path": "services/api/app.py"}
    assert json.loads(reply.tool_calls[0].raw_arguments) == {"path": "services/api/app.py"}
    assert reply.tool_calls[1].arguments == {"summary": "done"}


async def test_anthropic_request_sent(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("REPOSWARM_MAX_OUTPUT_TOKENS", "8192")
    rec = Recorder(body=anthropic_reply([{"type": "text", "text": "ok"}]))
    await AnthropicProvider(transport=rec.transport).complete(request())
    sent = rec.requests[-1]
    assert str(sent.url) == "https://api.anthropic.com/v1/messages"
    assert sent.headers["x-api-key"] == ANTHROPIC_KEY and sent.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in sent.headers
    assert ANTHROPIC_KEY not in str(sent.url) and ANTHROPIC_KEY not in sent.content.decode()
    assert [v for k, v in sent.headers.items() if ANTHROPIC_KEY in v and k != "x-api-key"] == []
    body = rec.json
    assert sent.headers["anthropic-beta"] == "cache-diagnosis-2026-04-07"  # the cache's miss reasons, asked for
    cached = {"type": "ephemeral"}  # breakpoints: the system prompt, the first message, the latest message
    assert body["model"] == "test-model" and body["max_tokens"] == 8192
    assert body["system"] == [{"type": "text", "text": "You are a lane.", "cache_control": cached}]
    assert body["diagnostics"] == {"previous_message_id": None}
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Add a health endpoint.", "cache_control": cached}]},
        {"role": "assistant", "content": [
            {"type": "text", "text": "Reading both files."},
            {"type": "tool_use", "id": "call_A1", "name": "read_file", "input": {"path": "app.py"}},
            {"type": "tool_use", "id": "call_B2", "name": "read_file", "input": {}},  # unparsable arguments
        ]},
        {"role": "user", "content": [  # both results and the user's text: one user message
            {"type": "tool_result", "tool_use_id": "call_A1", "content": "print('hi')"},
            {"type": "tool_result", "tool_use_id": "call_B2", "content": "error: arguments were not JSON"},
            {"type": "text", "text": "Budget: 3 turns left.", "cache_control": cached},
        ]},
    ]
    assert body["tools"] == [{"name": t["name"], "description": t["description"], "input_schema": t["parameters"]}
                             for t in TOOLS]


async def test_anthropic_merges_same_role_and_drops_empty_messages():
    messages = [{"role": "user", "content": "one"}, {"role": "user", "content": "two"},
                {"role": "assistant", "content": ""}, {"role": "user", "content": "three"}]
    rec = Recorder(body=anthropic_reply([{"type": "text", "text": "ok"}]))
    await AnthropicProvider(transport=rec.transport).complete(request(messages=messages))
    assert rec.json["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "one"}, {"type": "text", "text": "two"},
        {"type": "text", "text": "three", "cache_control": {"type": "ephemeral"}}]}]


# --- errors, for both providers ---

PROVIDERS: dict[str, dict[str, Any]] = {
    "openai": dict(make=OpenAIProvider, key=OPENAI_KEY, key_env="OPENAI_API_KEY",
                   url="https://api.openai.com/v1/chat/completions",
                   ok=openai_reply({"content": "ok"}),
                   rate=oa_error("Rate limit reached for gpt-4o on tokens per min (TPM).", "tokens",
                                 "rate_limit_exceeded"),
                   server=oa_error("The server had an error while processing your request.", "server_error", None),
                   context=oa_error("This model's maximum context length is 128000 tokens. However, your messages "
                                    "resulted in 130412 tokens. Please reduce the length of the messages.",
                                    "invalid_request_error", "context_length_exceeded"),
                   auth=oa_error(f"Incorrect API key provided: {OPENAI_KEY}.", "invalid_request_error",
                                 "invalid_api_key"),
                   missing=oa_error("The model `gpt-9` does not exist or you do not have access to it.",
                                    "invalid_request_error", "model_not_found")),
    "anthropic": dict(make=AnthropicProvider, key=ANTHROPIC_KEY, key_env="ANTHROPIC_API_KEY",
                      url="https://api.anthropic.com/v1/messages",
                      ok=anthropic_reply([{"type": "text", "text": "ok"}]),
                      rate=an_error("This request would exceed the rate limit for your organization.",
                                    "rate_limit_error"),
                      server=an_error("Internal server error", "api_error"),
                      context=an_error("prompt is too long: 215324 tokens > 200000 maximum",
                                       "invalid_request_error"),
                      auth=an_error(f"invalid x-api-key {ANTHROPIC_KEY}", "authentication_error"),
                      missing=an_error("model: claude-nope", "not_found_error")),
}


@pytest.fixture(params=sorted(PROVIDERS))
def api(request: pytest.FixtureRequest) -> dict[str, Any]:
    return PROVIDERS[request.param]


async def fail(api: dict[str, Any], rec: Recorder) -> ModelError:
    with pytest.raises(ModelError) as err:
        await api["make"](transport=rec.transport).complete(request())
    assert api["key"] not in str(err.value)
    return err.value


async def test_429_with_retry_after(api: dict[str, Any]):
    err = await fail(api, Recorder(429, api["rate"], headers={"Retry-After": "7"}))
    assert err.retryable and err.retry_after == 7 and "429" in str(err)


@pytest.mark.parametrize("status", [500, 502, 503, 529])
async def test_server_errors_are_retryable(api: dict[str, Any], status: int):
    err = await fail(api, Recorder(status, api["server"]))
    assert err.retryable and err.retry_after is None and str(status) in str(err)


async def test_a_proxys_html_page_is_one_line_with_its_title(api: dict[str, Any]):
    page = (b"<html>\r\n<head><title>503 Service Temporarily Unavailable</title></head>\r\n<body>\r\n<center>"
            b"<h1>503 Service Temporarily Unavailable</h1></center>\r\n<hr><center>nginx</center>\r\n</body></html>")
    err = await fail(api, Recorder(503, raw=page, headers={"content-type": "text/html"}))
    assert err.retryable and "503 Service Temporarily Unavailable" in str(err)
    assert "<" not in str(err) and "\n" not in str(err), str(err)


async def test_400_context_length(api: dict[str, Any]):
    err = await fail(api, Recorder(400, api["context"]))
    assert not err.retryable and CONTEXT_HINT in str(err) and "tokens" in str(err)


async def test_401_names_the_key_variable(api: dict[str, Any]):
    err = await fail(api, Recorder(401, api["auth"]))
    assert not err.retryable and api["key_env"] in str(err) and "API key" in str(err)


async def test_404_unknown_model(api: dict[str, Any]):
    err = await fail(api, Recorder(404, api["missing"]))
    assert not err.retryable and "unknown model or wrong base URL" in str(err)


@pytest.mark.parametrize("raw", [b"<html><body>502 Bad Gateway</body></html>", b'{"unexpected": true}', b""])
async def test_malformed_reply_is_retryable(api: dict[str, Any], raw: bytes):
    err = await fail(api, Recorder(200, raw=raw))
    assert err.retryable and "malformed" in str(err)


@pytest.mark.parametrize("exc", [httpx.ConnectError, httpx.ReadTimeout, httpx.RemoteProtocolError])
async def test_transport_errors_are_retryable(api: dict[str, Any], exc: type[Exception]):
    err = await fail(api, Recorder(raises=exc))
    assert err.retryable and api["url"] in str(err)


async def test_a_good_reply_after_all(api: dict[str, Any]):
    reply = await api["make"](transport=Recorder(body=api["ok"]).transport).complete(request())
    assert reply.content == "ok"


# --- provider_for ---


def test_provider_for_knows_the_real_providers():
    assert isinstance(provider_for("openai:gpt-4o")[0], OpenAIProvider)
    provider, model = provider_for("anthropic:claude-sonnet-4-20250514")
    assert isinstance(provider, AnthropicProvider) and model == "claude-sonnet-4-20250514"
    assert OPENAI_KEY not in repr(provider_for("openai:gpt-4o")[0])


def test_provider_for_unknown_provider():
    with pytest.raises(ModelError, match="known: replay, openai, anthropic") as err:
        provider_for("gemini:pro")
    assert not err.value.retryable

