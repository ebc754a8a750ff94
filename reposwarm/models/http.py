"""The HTTP seam shared by the real providers.

One POST per model call, no retries of its own (Temporal owns retries), with
every failure turned into a ModelError here, so the activity only has to ask
`retryable`. The API key travels in a header and nowhere else: it is scrubbed
from anything that could end up in an error message.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import json
import os
import re
import ssl
import time
import weakref
from email.utils import parsedate_to_datetime
from typing import Any, TypeVar

import httpx
from pydantic import BaseModel, ValidationError

from reposwarm.models import MAX_ARGUMENT_DEPTH, MAX_REPLY_BYTES, ModelError, json_depth
from reposwarm.text import error_line

T = TypeVar("T", bound=BaseModel)

CONTEXT_HINT = "the conversation is longer than the model's context window"
_CONTEXT_WORDS = re.compile(
    r"context[ _](length|window|size)|too many tokens|maximum context|prompt is too long|"
    r"reduce the length|exceeds? the (available )?context",
    re.IGNORECASE,
)


def env_number(name: str, default: float) -> float:
    """A positive number from the worker's environment; a bad value is a configuration error."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if value <= 0:
        raise ModelError(f"{name}={raw!r} must be a positive number", retryable=False)
    return value


READ_S = 300  # a reply's read timeout by default ...
TOKENS_PER_S = 50  # ... longer for a request that allows a long reply (at about this many tokens a second) ...
READ_CEILING_S = 570  # ... but always inside the model activity's 10-minute start-to-close (workflows/options.py)


def timeouts(max_tokens: int | None = None) -> httpx.Timeout:
    """Explicit timeouts: a model may think for minutes, but connecting should be quick. The read timeout is
    REPOSWARM_MODEL_TIMEOUT_S where set; else 300 s, or the time a reply of `max_tokens` takes, up to 570 s."""
    if os.environ.get("REPOSWARM_MODEL_TIMEOUT_S", "").strip():
        read = env_number("REPOSWARM_MODEL_TIMEOUT_S", READ_S)
    else:
        read = min(READ_CEILING_S, max(READ_S, (max_tokens or 0) / TOKENS_PER_S))
    return httpx.Timeout(connect=10, read=read, write=30, pool=10)


def base_url(env: str, default: str) -> str:
    return (os.environ.get(env, "").strip() or default).rstrip("/")


def parse_arguments(raw: str) -> dict[str, Any] | None:
    """Tool-call arguments as a dict when they are a JSON object; None tells the lane they were malformed
    (arguments nested too deep to decode safely included)."""
    try:
        if json_depth(raw) > MAX_ARGUMENT_DEPTH:
            return None
        parsed = json.loads(raw)
    except (ValueError, TypeError, RecursionError):
        return None
    return parsed if isinstance(parsed, dict) else None


class _ErrorDetail(BaseModel):
    message: str = ""
    type: str | None = None
    code: str | int | None = None


class _ErrorBody(BaseModel):
    """Error bodies: OpenAI/Anthropic nest {"error": {...}}; vLLM, Ollama and proxies vary."""

    error: _ErrorDetail | str | None = None
    message: str | None = None
    detail: Any = None


def _api_message(text: str) -> str:
    try:
        body = _ErrorBody.model_validate_json(text)
    except ValidationError:  # not the API's JSON: a proxy's page (its title), or plain text, on one line
        return error_line(text[:65536], 500)
    if isinstance(body.error, _ErrorDetail):
        parts = [body.error.message, str(body.error.code or "")]
        return " ".join(p for p in parts if p).strip() or text.strip()[:500]
    for candidate in (body.error, body.message, body.detail):
        if candidate:
            return str(candidate)[:500]
    return text.strip()[:500]


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait, from retry-after-ms, or Retry-After as seconds or an HTTP date."""
    if ms := headers.get("retry-after-ms"):
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError):
        return None


def _scrub(text: str, secret: str | None) -> str:
    return text.replace(secret, "[redacted]") if secret else text


def status_error(response: httpx.Response, text: str, *, where: str, key_env: str, secret: str | None) -> ModelError:
    """Map an HTTP error status (and the body's text) to a ModelError that says what to do about it."""
    status = response.status_code
    api = _scrub(_api_message(text), secret)
    head = f"{where}: HTTP {status}"
    if status in (408, 409, 429) or status >= 500:
        wait = _retry_after(response.headers)
        why = "rate limited" if status == 429 else "overloaded" if status == 529 else "server error"
        after = f", retry after {wait:g}s" if wait is not None else ""
        return ModelError(f"{head} ({why}{after}): {api}", retryable=True, retry_after=wait, unavailable=True)
    if status in (401, 403):
        detail = f": {api}" if status == 403 else ""  # a 401 body may echo part of the key
        return ModelError(f"{head}: bad or missing API key (check {key_env}){detail}", retryable=False)
    if status == 404:
        return ModelError(f"{head}: unknown model or wrong base URL: {api}", retryable=False)
    if 300 <= status < 400:
        return ModelError(f"{head}: unexpected redirect (check the base URL)", retryable=False)
    if _CONTEXT_WORDS.search(api):
        return ModelError(f"{head}: {CONTEXT_HINT}: {api}", retryable=False)
    return ModelError(f"{head}: the API refused the request: {api}", retryable=False)


@functools.lru_cache(maxsize=1)
def _ssl_context() -> ssl.SSLContext:
    """One SSL context for every client: building it costs ~40 ms of CPU."""
    return ssl.create_default_context()


_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, list[httpx.AsyncClient]] = weakref.WeakKeyDictionary()
# Clients per event loop, taken in turn. httpcore looks at every connection of a pool (a system call each) to place
# each request and again as it ends: with one pool, 64 lanes' calls cost 7% of the worker's Python time there.
SHARDS = 16
_turn = itertools.count()


def _client() -> httpx.AsyncClient:
    """Clients kept per event loop (the worker has one), so turns reuse their connections to the provider: no TCP
    and TLS handshake per turn. No cap on connections: the worker's activity slots bound the calls at once."""
    loop = asyncio.get_running_loop()
    clients = _clients.setdefault(loop, [])
    i = next(_turn) % SHARDS
    if i >= len(clients):
        i = len(clients)
        clients.append(_new_client())
    elif clients[i].is_closed:
        clients[i] = _new_client()
    return clients[i]


def _new_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(verify=_ssl_context(),
                             limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))


async def _read_capped(response: httpx.Response, url: str, where: str) -> bytes:
    """The body, read as it streams in, and never more than MAX_REPLY_BYTES of it.

    A reply over the cap is refused, not retried: a cut JSON body holds nothing usable, and a server that
    sent one will likely send the next one alike, each paid for.
    """
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
        raise ModelError(f"{where}: the reply from {url} is {int(declared):,} bytes, over the limit of "
                         f"{MAX_REPLY_BYTES:,}; it was not read", retryable=False)
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise ModelError(f"{where}: the reply from {url} is over the limit of {MAX_REPLY_BYTES:,} bytes; "
                             "reading stopped there", retryable=False)
        chunks.append(chunk)
    return b"".join(chunks)


async def post(
    url: str,
    *,
    headers: dict[str, str],
    body: dict[str, Any],
    reply_type: type[T],
    where: str,
    key_env: str,
    secret: str | None,
    transport: httpx.AsyncBaseTransport | None = None,
) -> T:
    """POST a JSON body and validate the reply against the wire model; every failure is a ModelError."""
    limit = body.get("max_tokens") or body.get("max_completion_tokens")
    timeout = timeouts(limit if isinstance(limit, int) else None)
    try:
        async with contextlib.AsyncExitStack() as stack:  # a transport of its own (tests): a client of its own
            client = _client() if transport is None else await stack.enter_async_context(
                httpx.AsyncClient(transport=transport, verify=_ssl_context()))
            async with client.stream("POST", url, headers=headers, json=body, timeout=timeout) as response:
                content = await _read_capped(response, url, where)
    except httpx.TimeoutException as err:
        limit = timeout.connect if isinstance(err, httpx.ConnectTimeout) else timeout.read
        raise ModelError(f"{where}: {type(err).__name__}: no answer from {url} within {limit:g}s "
                         f"(REPOSWARM_MODEL_TIMEOUT_S sets the read timeout)", retryable=True,
                         unavailable=True) from None
    except httpx.UnsupportedProtocol:
        raise ModelError(f"{where}: {url} is not an http(s) URL (check the base URL)", retryable=False) from None
    except httpx.TransportError as err:
        raise ModelError(f"{where}: could not reach {url}: {type(err).__name__}: "
                         f"{_scrub(str(err), secret)}", retryable=True, unavailable=True) from None
    if not response.is_success:
        raise status_error(response, content.decode("utf-8", "replace"), where=where, key_env=key_env,
                           secret=secret)
    malformed = f"{where}: the reply from {url} was malformed (not JSON, or not the expected shape)"
    # Decoded with json and validated as Python data, not with pydantic's JSON parser, which refuses a
    # whole reply at 200 levels of nesting: arguments nested too deep are that call's error only
    # (reposwarm.models.tool_call). Nesting past Python's own recursion limit leaves nothing usable.
    try:
        data = json.loads(content)
    except RecursionError:
        raise ModelError(f"{malformed}: it nests too deep to decode", retryable=False) from None
    except ValueError as err:
        raise ModelError(f"{malformed}: {_scrub(str(err), secret)[:200]}", retryable=True) from None
    try:
        return reply_type.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'body'}: {e['msg']}" for e in err.errors()[:3])
        raise ModelError(f"{malformed}: {_scrub(problems, secret)}", retryable=True) from None
