"""The model proxy's HTTP server: a lane's token in, the provider's answer out, every call counted and recorded.

One server per worker (aiohttp, in the worker's event loop, on loopback; a free port unless told one). For each
request, in order, and a provider-shaped error at whichever step refuses it:

1. the route (wire.APIS) and the method (POST);
2. the lane's token, as `x-api-key` or `Authorization: Bearer` (401 for any other);
3. the body: at most `max_body_bytes` (413), arriving within `body_timeout_s`, a JSON object (400);
4. the record: a request this lane had answered before (the same canonical hash, the same occurrence) is
   answered from it, byte-identical, stream included, and the provider is not asked (exchanges.py);
5. the lane's budget hook: go on, wait, or refuse (lanes.py);
6. the provider, with the worker's real key; its reply, scrubbed of the worker's secrets, goes to the agent as it
   comes (streamed event by event), is counted (usage.py, accounting.py) and recorded. An agent that hangs up
   mid-stream does not cut the call short: the proxy reads the provider's reply to its end, so the call is
   counted and recorded, and the agent restarted asks nothing twice.

The real keys live in this process only: the agent sends its lane token, the proxy sends the key. Every byte the
agent gets from the proxy has the worker's secret values taken out (reposwarm/runs/ledger.py `redact`: the values
of the worker's environment, whatever their names, and key shapes), the provider's replies included.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import secrets
import ssl
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx
from aiohttp import web

from reposwarm.contracts import ModelPrice
from reposwarm.models import MAX_REPLY_BYTES
from reposwarm.models.http import timeouts
from reposwarm.proxy import accounting, exchanges
from reposwarm.proxy.lanes import BudgetHook, LaneKey, LanePass, LaneTally, mint_token, token_digest
from reposwarm.proxy.usage import EventSplitter, UsageReader
from reposwarm.proxy.wire import (
    APIS,
    BUDGET_STATUS,
    RETURNED_HEADERS,
    Api,
    api_for_path,
    error_body,
    stream_error,
    wants_stream,
    with_stream_usage,
)
from reposwarm.runs.ledger import redact

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 * 1024 * 1024  # Anthropic's own limit on a Messages request
BODY_TIMEOUT_S = 60.0  # a body that trickles in slower than this is refused, not waited on for ever
REPLAY_CHUNK = 64 * 1024


class _Refusal(Exception):
    """A request the proxy answers itself, with the API's error body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


@dataclass
class _Lane:
    key: LaneKey
    budget: BudgetHook | None
    tally: LaneTally


@dataclass
class _Call:
    """One request on its way: who asks, what, and under which record."""

    lane: _Lane
    api: Api
    body: dict[str, Any]
    raw: bytes
    headers: dict[str, str]  # the agent's headers that go on to the provider
    query: str
    digest: str
    occurrence: int = 0
    model: str = ""
    started: float = field(default_factory=time.monotonic)

    @property
    def streamed(self) -> bool:
        return wants_stream(self.body)


class ModelProxy:
    """The proxy: start it, open a lane per agent, give the agent `agent_env(token)`, read `tally(token)`."""

    def __init__(self, *, prices: dict[str, ModelPrice] | None = None, host: str = "127.0.0.1", port: int = 0,
                 max_body_bytes: int = MAX_BODY_BYTES, body_timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.prices = dict(prices or {})
        self.host, self.port = host, port
        self.max_body_bytes, self.body_timeout_s = max_body_bytes, body_timeout_s
        self._lanes: dict[str, _Lane] = {}  # by the hash of the lane's token
        self._locks: dict[tuple[str, str], asyncio.Lock] = {}  # one request of a kind at a time per lane
        self._answered: dict[tuple[str, str], int] = {}  # how often each request was answered per lane
        self._session = secrets.token_hex(6)  # names this proxy's `reused` and `error` ledger lines
        self._seq = itertools.count(1)
        self._runner: web.AppRunner | None = None
        self._client: httpx.AsyncClient | None = None
        self.upstream_calls = 0  # every lane's calls the provider answered
        self.replayed_calls = 0  # every lane's calls answered from the record

    # --- running it ---

    async def start(self) -> str:
        """Serve on host:port (port 0: a free one); the proxy's base URL."""
        app = web.Application(client_max_size=self.max_body_bytes)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._client = httpx.AsyncClient(verify=ssl.create_default_context(),
                                         limits=httpx.Limits(max_connections=None, max_keepalive_connections=64))
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None, handler_cancellation=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port)
        await site.start()
        address = self._runner.addresses[0]
        self.port = int(address[1])
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def __aenter__(self) -> ModelProxy:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        await self.stop()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def anthropic_base_url(self) -> str:
        """ANTHROPIC_BASE_URL for an agent (its SDK appends /v1/messages)."""
        return self.url

    @property
    def openai_base_url(self) -> str:
        """OPENAI_BASE_URL for an agent (its SDK appends /responses or /chat/completions)."""
        return f"{self.url}/v1"

    # --- lanes ---

    def open_lane(self, key: LaneKey, budget: BudgetHook | None = None) -> LanePass:
        """A new token for the lane: the only credential its agent gets. Each call asks `budget` first."""
        token = mint_token()
        self._lanes[token_digest(token)] = _Lane(key, budget, LaneTally(key=key))
        return LanePass(key=key, token=token)

    def close_lane(self, token: str) -> LaneTally:
        """The token stops working; the lane's tally, as it ends."""
        return self._lanes.pop(token_digest(token)).tally.model_copy(deep=True)

    def tally(self, token: str) -> LaneTally:
        """What the proxy counted for the lane so far (a copy)."""
        return self._lanes[token_digest(token)].tally.model_copy(deep=True)

    def agent_env(self, token: str) -> dict[str, str]:
        """The variables that point an agent's SDKs at the proxy, with the lane's token as their key."""
        return {"ANTHROPIC_BASE_URL": self.anthropic_base_url, "ANTHROPIC_API_KEY": token,
                "OPENAI_BASE_URL": self.openai_base_url, "OPENAI_API_KEY": token}

    # --- one request ---

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        headers = {name.lower(): value for name, value in request.headers.items()}
        api = api_for_path(request.path, headers)
        try:
            return await self._serve(request, api, headers)
        except _Refusal as refusal:
            return self._error(api, refusal.status, refusal.message)
        except Exception as err:  # the agent gets an answer whatever went wrong here; the worker keeps serving
            log.exception("model proxy: %s %s failed", request.method, request.path[:200])
            return self._error(api, 500, f"the reposwarm model proxy failed on this request: {type(err).__name__}")

    def _error(self, api: Api, status: int, message: str) -> web.Response:
        return web.Response(status=status, body=error_body(api, status, self._scrub_text(message)),
                            content_type="application/json")

    async def _serve(self, request: web.Request, api: Api, headers: dict[str, str]) -> web.StreamResponse:
        if request.path not in APIS:
            raise _Refusal(404, f"the reposwarm model proxy serves POST {', '.join(APIS)}; not "
                                f"{request.method} {request.path[:200]!r}")
        if request.method != "POST":
            raise _Refusal(405, f"{request.path} takes POST, not {request.method[:20]}")
        lane = self._lanes.get(token_digest(_token(headers)))
        if lane is None:
            raise _Refusal(401, "invalid lane token: this proxy accepts only the token reposwarm gave the lane")
        raw = await self._body(request)
        call = _call(lane, api, raw, headers, request.query_string)
        counted = (lane.key.name, call.digest)
        lock = self._locks.setdefault(counted, asyncio.Lock())
        async with lock:  # the same request twice at once in one lane: the second waits, to know its occurrence
            call.occurrence = self._answered.get(counted, 0)
            found = await asyncio.to_thread(exchanges.recorded, lane.key, call.digest, call.occurrence)
            if found is not None:
                self._answered[counted] = call.occurrence + 1
                return await self._replay(request, call, *found)
            await self._ask_budget(call)
            response, answered = await self._upstream(request, call)
            if answered:
                self._answered[counted] = call.occurrence + 1
            return response

    async def _body(self, request: web.Request) -> bytes:
        if request.content_length is not None and request.content_length > self.max_body_bytes:
            raise _Refusal(413, f"the request is {request.content_length:,} bytes, over the proxy's limit of "
                                f"{self.max_body_bytes:,}")
        chunks, size = [], 0

        async def read() -> None:
            nonlocal size
            while chunk := await request.content.read(REPLAY_CHUNK):
                size += len(chunk)
                if size > self.max_body_bytes:
                    raise _Refusal(413, f"the request is over the proxy's limit of {self.max_body_bytes:,} bytes")
                chunks.append(chunk)

        try:
            await asyncio.wait_for(read(), self.body_timeout_s)
        except TimeoutError:
            raise _Refusal(400, f"the request's body did not arrive within {self.body_timeout_s:g}s") from None
        return b"".join(chunks)

    async def _ask_budget(self, call: _Call) -> None:
        lane = call.lane
        if lane.budget is None:
            return
        try:
            answer = await lane.budget(lane.key, lane.tally.model_copy(deep=True))
        except Exception as err:
            log.exception("model proxy: the budget hook of %s failed", lane.key.name)
            raise _Refusal(500, f"the lane's budget could not be asked ({type(err).__name__})") from None
        if not answer.go:
            lane.tally.refused_calls += 1
            why = f": {answer.reason}" if answer.reason else ""
            raise _Refusal(BUDGET_STATUS[call.api.provider],
                           f"lane {lane.key.lane} has used up its budget; the call was not made{why}")

    # --- answers ---

    async def _replay(self, request: web.Request, call: _Call, exchange: exchanges.Exchange,
                      reply: bytes) -> web.StreamResponse:
        """The recorded answer, byte for byte (a stream as a stream): the provider is not asked."""
        lane = call.lane
        lane.tally.replayed_calls += 1
        self.replayed_calls += 1
        await self._line(call, exchange.model, "reused", line_key=f"reused/{self._session}/{next(self._seq)}")
        if not exchange.streamed:
            return web.Response(status=exchange.status, body=reply, headers=exchange.headers)
        response = web.StreamResponse(status=exchange.status, headers=exchange.headers)
        await response.prepare(request)
        try:
            for at in range(0, len(reply), REPLAY_CHUNK):
                await response.write(reply[at:at + REPLAY_CHUNK])
            await response.write_eof()
        except ConnectionError:
            pass  # the agent hung up: nothing was asked of the provider, nothing is lost
        return response

    async def _upstream(self, request: web.Request, call: _Call) -> tuple[web.StreamResponse, bool]:
        """Ask the provider; the answer for the agent, and whether the provider answered it (2xx, whole)."""
        api = call.api
        key = api.key()
        if key is None and api.needs_key():
            raise _Refusal(500, f"the worker has no {api.key_env} for its model proxy to call {api.provider} with")
        assert self._client is not None
        extended = with_stream_usage(api, call.body)
        content = call.raw if extended is None else json.dumps(extended).encode("utf-8")
        limit = call.body.get("max_tokens") or call.body.get("max_output_tokens") or \
            call.body.get("max_completion_tokens")
        sent = self._client.build_request(
            "POST", api.upstream_url(call.query), headers=api.upstream_headers(call.headers, key), content=content,
            timeout=timeouts(limit if isinstance(limit, int) and not isinstance(limit, bool) else None))
        try:
            upstream = await self._client.send(sent, stream=True)
        except httpx.TimeoutException:
            return await self._failed(call, 504, f"{api.provider} did not answer in time"), False
        except httpx.HTTPError as err:
            return await self._failed(call, 502, f"could not reach {api.provider}: {type(err).__name__}: {err}"), False
        try:
            returned = {name: upstream.headers[name] for name in RETURNED_HEADERS if name in upstream.headers}
            if not upstream.is_success:
                text = (await _read_capped(upstream)).decode("utf-8", "replace")
                if upstream.status_code in (401, 403):  # the body may echo part of the worker's key: not passed on
                    text = f"{api.provider} refused the worker's key (check {api.key_env} on the worker)"
                    body = error_body(api, upstream.status_code, text)
                else:
                    body = self._scrub(text.encode("utf-8"))
                await self._count_failure(call, f"HTTP {upstream.status_code}: {text}")
                return web.Response(status=upstream.status_code, body=body, headers=returned), False
            if call.streamed and upstream.headers.get("content-type", "").startswith("text/event-stream"):
                return await self._stream(request, call, upstream, returned)
            reply = self._scrub(await _read_capped(upstream))
            reader = UsageReader(api.name)
            reader.json_reply(reply)
            await self._answered_call(call, reader, upstream.status_code, returned, reply, streamed=False)
            return web.Response(status=upstream.status_code, body=reply, headers=returned), True
        except httpx.HTTPError as err:
            return await self._failed(call, 502, f"{api.provider}'s reply broke off: {type(err).__name__}"), False
        except _Refusal as refusal:
            return await self._failed(call, refusal.status, refusal.message), False
        finally:
            await upstream.aclose()

    async def _stream(self, request: web.Request, call: _Call, upstream: httpx.Response,
                      returned: dict[str, str]) -> tuple[web.StreamResponse, bool]:
        """The provider's events passed on one by one as they come, each scrubbed; counted and recorded at the end."""
        response = web.StreamResponse(status=upstream.status_code, headers=returned)
        await response.prepare(request)
        splitter, reader, kept, size, agent_here = EventSplitter(), UsageReader(call.api.name), [], 0, True

        async def send(event: bytes) -> None:
            nonlocal size, agent_here
            clean = self._scrub(event)
            reader.event(clean)
            kept.append(clean)
            size += len(clean)
            if size > MAX_REPLY_BYTES:
                raise _Refusal(502, f"the provider's reply is over the limit of {MAX_REPLY_BYTES:,} bytes")
            if agent_here:
                try:
                    await response.write(clean)
                except ConnectionError:
                    agent_here = False  # read on to the end all the same: the call is paid for, so it is kept

        whole = False
        try:
            async for chunk in upstream.aiter_bytes():
                for event in splitter.feed(chunk):
                    await send(event)
            if rest := splitter.rest():
                await send(rest)
            whole = True
        except (httpx.HTTPError, _Refusal) as err:
            await self._count_failure(call, f"the stream broke off: {err}")
            if agent_here:  # the stream ends as its API ends a failed one, so the agent knows to ask again
                with contextlib.suppress(ConnectionError):
                    await response.write(stream_error(call.api, "reposwarm model proxy: the provider's stream "
                                                                "broke off; ask again"))
        if whole:
            await self._answered_call(call, reader, upstream.status_code, returned, b"".join(kept), streamed=True)
        if agent_here:
            try:
                await response.write_eof()
            except ConnectionError:
                pass
        return response, whole

    async def _failed(self, call: _Call, status: int, message: str) -> web.Response:
        await self._count_failure(call, message)
        return self._error(call.api, status, f"reposwarm model proxy: {message}")

    async def _count_failure(self, call: _Call, message: str) -> None:
        call.lane.tally.failed_calls += 1
        await self._line(call, call.model, "error", line_key=f"error/{self._session}/{next(self._seq)}",
                         error=self._scrub_text(message))

    async def _answered_call(self, call: _Call, reader: UsageReader, status: int, returned: dict[str, str],
                             reply: bytes, *, streamed: bool) -> None:
        """A call the provider answered: priced, on the lane's tally, its ledger line, then its record."""
        lane = call.lane
        usage = accounting.priced_usage(reader, call.model, self.prices, call.body)
        lane.tally.usage = lane.tally.usage + usage
        lane.tally.upstream_calls += 1
        self.upstream_calls += 1
        await self._line(call, call.model, "ok", line_key="ok", usage=usage, stop_reason=reader.stop_reason)
        try:
            await asyncio.to_thread(exchanges.record, lane.key, api_name=call.api.name, model=call.model,
                                    status=status, headers=returned, streamed=streamed, reply=reply, request=call.raw,
                                    digest=call.digest, occurrence=call.occurrence)
        except Exception:  # the agent has its answer all the same; asked again, the call is made again
            log.exception("model proxy: the exchange of %s could not be recorded", lane.key.name)

    async def _line(self, call: _Call, model: str, outcome: str, *, line_key: str, **figures: Any) -> None:
        """The call's ledger line; a ledger that cannot be written is logged, and the agent has its answer."""
        key = call.lane.key
        try:
            await asyncio.to_thread(
                accounting.write_line, key,
                line_key=f"proxy/{key.name}/{call.digest[:32]}/{call.occurrence}/{line_key}",
                call=accounting.call_id(key, call.digest, call.occurrence), model=model, api_name=call.api.name,
                streamed=call.streamed, outcome=outcome, latency_s=time.monotonic() - call.started, **figures)
        except Exception:
            log.exception("model proxy: the ledger line of a call of %s could not be written", key.name)

    # --- secrets ---

    def _scrub_text(self, text: str) -> str:
        """The worker's provider keys and every other secret value of its environment taken out."""
        for api in APIS.values():
            if (key := api.key()) and key in text:
                text = text.replace(key, "[redacted]")
        return redact(text)

    def _scrub(self, data: bytes) -> bytes:
        """_scrub_text for bytes: bytes that are not UTF-8 come back as they were."""
        text = data.decode("utf-8", "surrogateescape")
        clean = self._scrub_text(text)
        return data if clean == text else clean.encode("utf-8", "surrogateescape")


def _token(headers: dict[str, str]) -> str:
    if token := headers.get("x-api-key", "").strip():
        return token
    scheme, _, value = headers.get("authorization", "").partition(" ")
    return value.strip() if scheme.lower() == "bearer" else ""


def _call(lane: _Lane, api: Api, raw: bytes, headers: dict[str, str], query: str) -> _Call:
    """The request read as its API's JSON, or the reason it cannot be."""
    try:
        body = json.loads(raw)
    except RecursionError:
        raise _Refusal(400, "the request's JSON nests too deep to read") from None
    except ValueError as err:
        raise _Refusal(400, f"the request's body is not JSON: {str(err)[:200]}") from None
    if not isinstance(body, dict):
        raise _Refusal(400, f"the request's body must be a JSON object, not {type(body).__name__}")
    if not isinstance(body.get("model"), str) or not body["model"]:
        raise _Refusal(400, "the request names no model (a string `model` field)")
    if "stream" in body and not isinstance(body["stream"], bool):
        raise _Refusal(400, "`stream` must be true or false")
    passed = {name: headers[name] for name in api.passed_headers if name in headers}
    call = _Call(lane, api, body, raw, passed, query, exchanges.request_hash(api.name, query, passed, body))
    call.model = accounting.model_name(api.provider, body)
    return call


async def _read_capped(response: httpx.Response) -> bytes:
    """A whole reply, never more than MAX_REPLY_BYTES of it."""
    chunks, size = [], 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > MAX_REPLY_BYTES:
            raise _Refusal(502, f"the provider's reply is over the limit of {MAX_REPLY_BYTES:,} bytes")
        chunks.append(chunk)
    return b"".join(chunks)
