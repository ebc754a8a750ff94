"""The three wire formats the proxy speaks, toward the agent and toward the provider.

Anthropic Messages (`POST /v1/messages`), OpenAI Responses (`POST /v1/responses`, all that Codex's custom providers
speak) and OpenAI Chat Completions (`POST /v1/chat/completions`). For each: where the real provider is (the same
variables and defaults the built-in providers read: ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY, OPENAI_BASE_URL and
OPENAI_API_KEY), how its key is sent, which of the agent's headers go on to it, and the API's own error body, so
that everything the proxy itself answers (a wrong token, a refused budget, a malformed request) reads to the agent
as its provider would have said it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from reposwarm.models.anthropic import API_VERSION
from reposwarm.models.anthropic import DEFAULT_BASE_URL as ANTHROPIC_URL
from reposwarm.models.http import base_url
from reposwarm.models.openai import DEFAULT_BASE_URL as OPENAI_URL

ANTHROPIC, RESPONSES, CHAT = "anthropic-messages", "openai-responses", "openai-chat"


@dataclass(frozen=True)
class Api:
    """One wire format: its route on the proxy and what calling its provider takes."""

    name: str
    route: str  # the path an agent posts to
    provider: str  # the project's provider name, the prefix of a model name ("anthropic:claude-...")
    url_env: str
    default_url: str
    upstream_path: str  # appended to the provider's base URL (OpenAI's already ends in /v1)
    key_env: str
    passed_headers: tuple[str, ...]  # the agent's headers that go on to the provider (and into the request's hash)

    def upstream_url(self, query: str) -> str:
        return base_url(self.url_env, self.default_url) + self.upstream_path + (f"?{query}" if query else "")

    def key(self) -> str | None:
        return os.environ.get(self.key_env, "").strip() or None

    def needs_key(self) -> bool:
        """A provider at its default address needs a key; a local server at a custom one may not."""
        return not os.environ.get(self.url_env, "").strip()

    def auth_headers(self, key: str | None) -> dict[str, str]:
        if self.provider == "anthropic":
            return {"x-api-key": key} if key else {}
        return {"authorization": f"Bearer {key}"} if key else {}

    def upstream_headers(self, agent_headers: dict[str, str], key: str | None) -> dict[str, str]:
        headers = {name: agent_headers[name] for name in self.passed_headers if name in agent_headers}
        if self.provider == "anthropic":
            headers.setdefault("anthropic-version", API_VERSION)
        return {**headers, "content-type": "application/json", **self.auth_headers(key)}


APIS = {
    api.route: api for api in (
        Api(ANTHROPIC, "/v1/messages", "anthropic", "ANTHROPIC_BASE_URL", ANTHROPIC_URL, "/v1/messages",
            "ANTHROPIC_API_KEY", ("anthropic-version", "anthropic-beta")),
        Api(RESPONSES, "/v1/responses", "openai", "OPENAI_BASE_URL", OPENAI_URL, "/responses", "OPENAI_API_KEY",
            ("openai-beta",)),
        Api(CHAT, "/v1/chat/completions", "openai", "OPENAI_BASE_URL", OPENAI_URL, "/chat/completions",
            "OPENAI_API_KEY", ("openai-beta",)),
    )
}

# The provider's response headers an agent gets back: what it needs to read the body and to wait before a retry.
RETURNED_HEADERS = ("content-type", "retry-after", "retry-after-ms", "request-id", "x-request-id")


def api_for_path(path: str, headers: dict[str, str]) -> Api:
    """The API a request speaks: by its path, else (an unknown path, for its error's shape) by its headers."""
    if path in APIS:
        return APIS[path]
    anthropic = "x-api-key" in headers or "anthropic-version" in headers or path.startswith("/v1/messages")
    return APIS["/v1/messages" if anthropic else "/v1/chat/completions"]


# --- errors, in the API's own shape ---

# The error types each API names, by what went wrong.
_ANTHROPIC_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error", 405: "invalid_request_error", 413: "request_too_large",
                    429: "rate_limit_error", 500: "api_error", 502: "api_error", 504: "api_error"}
_OPENAI_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "invalid_request_error",
                 404: "invalid_request_error", 405: "invalid_request_error", 413: "invalid_request_error",
                 429: "insufficient_quota", 500: "server_error", 502: "server_error", 504: "server_error"}
_OPENAI_CODES = {401: "invalid_api_key", 429: "insufficient_quota"}

# A lane whose budget refuses a call: a status the agent does not retry on its own. Anthropic: 400 (its clients
# retry 429 and 5xx); OpenAI: 429 insufficient_quota, which its clients and Codex read as "quota used up".
BUDGET_STATUS = {"anthropic": 400, "openai": 429}


def error_body(api: Api, status: int, message: str) -> bytes:
    """The API's error body for `status`, saying `message`."""
    if api.provider == "anthropic":
        payload: dict[str, Any] = {"type": "error",
                                   "error": {"type": _ANTHROPIC_TYPES.get(status, "api_error"), "message": message}}
    else:
        payload = {"error": {"message": message, "type": _OPENAI_TYPES.get(status, "server_error"), "param": None,
                             "code": _OPENAI_CODES.get(status)}}
    return json.dumps(payload).encode("utf-8")


def stream_error(api: Api, message: str) -> bytes:
    """The event that ends a stream in failure, as the API sends it (Anthropic's and the Responses API's `error`
    event; Chat Completions has none of its own, so its error body as a data line)."""
    if api.name == ANTHROPIC:
        data = error_body(api, 500, message).decode("utf-8")
        return f"event: error\ndata: {data}\n\n".encode()
    if api.name == RESPONSES:
        event = {"type": "error", "code": "server_error", "message": message, "param": None}
        return f"event: error\ndata: {json.dumps(event)}\n\n".encode()
    return f"data: {error_body(api, 500, message).decode('utf-8')}\n\n".encode()


def wants_stream(body: dict[str, Any]) -> bool:
    return body.get("stream") is True


def with_stream_usage(api: Api, body: dict[str, Any]) -> dict[str, Any] | None:
    """A streamed Chat Completions request reports no usage unless it asks (`stream_options.include_usage`): the
    body that asks, or None where nothing needs adding (the request goes on as the agent sent it, byte for byte)."""
    if api.name != CHAT or not wants_stream(body):
        return None
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage") is True:
        return None
    return {**body, "stream_options": {**(options if isinstance(options, dict) else {}), "include_usage": True}}
