"""The record of every exchange the proxy had with a provider for a lane, and the answers it gives from it.

An exchange is keyed by its lane (LaneKey: run, lane, round, dispatch), the request's canonical hash (its API, the
headers that go on to the provider, its query string and its JSON body with sorted keys, less the fields in which
the agent's process says who it is: the_question) and its occurrence: the number of times this lane had this very
request answered before. The record is the run's file proxy/<2 hex>/<hash of that key>.json
(reposwarm.runs.exactly_once.keyed_path), which names the request's and the reply's bytes in the run's
content-addressed store (reposwarm.runs.store): local, and in the shared object store where one is configured, so
a proxy on another host finds it too.

The reply is kept as the agent got it (already scrubbed of the worker's secrets: server.py), so an answer from the
record is byte-identical to the first, stream and all. The request is kept redacted (it is for reading, never
sent again). The record is written last, after the ledger line: a record proves the call was counted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from reposwarm.proxy.lanes import LaneKey
from reposwarm.proxy.wire import RESPONSES
from reposwarm.runs import objects
from reposwarm.runs.exactly_once import keyed_path
from reposwarm.runs.ledger import redact
from reposwarm.runs.store import Store


class Exchange(BaseModel):
    """One recorded exchange: what the agent got back, and where its bytes are."""

    api: str
    model: str
    status: int
    headers: dict[str, str]  # the provider's headers the agent got (wire.RETURNED_HEADERS)
    streamed: bool
    reply: str  # sha256:... in the run's store: the reply's bytes as the agent got them
    request: str  # sha256:... the request as the agent sent it, redacted
    request_hash: str
    occurrence: int


# What a request's hash leaves out: the fields in which an agent's process says who it is, never what the model is
# asked. An agent restarted as a new process (its worker killed) sends the same conversation with new values in
# them; kept in the hash, they would make every call of the restarted agent a new one, asked and paid for again.
# The model, the instructions, the messages or input items (their content, tool calls and call ids), the tools,
# the reasoning and sampling settings all stay in. Found by diffing the requests of two processes of each CLI
# given the same prompt (tests/test_agent_replay.py runs them): Claude Code 2.1.332 differs in `metadata` only,
# Codex 0.163.0 in `client_metadata`, `prompt_cache_key` and its input items' `id`s. Headers are hashed only as
# far as they go on to the provider (wire.Api.passed_headers), so Claude Code's `x-claude-code-session-id` and
# Codex's `session-id`, `thread-id`, `x-client-request-id` and `x-codex-*` headers are out already.
NOT_THE_QUESTION = frozenset({
    # Anthropic's `metadata.user_id`: Claude Code puts its session id there (with a device id) for abuse tracking.
    # The Responses API's `metadata` is labels kept with the response. Neither reaches the model.
    "metadata",
    # OpenAI's end-user id for abuse tracking (`user`, and `safety_identifier`, which replaces it).
    "user",
    "safety_identifier",
    # Which prompt cache to route to: Codex sends its thread id. It changes what is cached, not what is answered
    # (the built-in loop's record leaves its cache key out too: reposwarm/models/calls.py).
    "prompt_cache_key",
    # Codex's telemetry for OpenAI (Responses API): session, thread, turn and window ids, the installation id, the
    # turn's start time in ms, the worktree's commit. Fresh in every process and every turn; the model never sees it.
    "client_metadata",
})
# The Responses API's input items carry an `id` each: Codex mints a new one per process for the items it makes
# (`msg_...` for its developer and user messages, `fco_...` for a tool's output). Without `store` (Codex sends
# `store: false`) an item's id names it, nothing more: its content and its `call_id` (which output answers which
# call) say what is asked. An `item_reference` is the exception: there the id IS the content (a stored item).
ID_IS_THE_CONTENT = frozenset({"item_reference"})


def the_question(api_name: str, body: Any) -> Any:
    """The request body as far as it says what the model is asked (NOT_THE_QUESTION and the input items' ids)."""
    if not isinstance(body, dict):
        return body
    question = {k: v for k, v in body.items() if k not in NOT_THE_QUESTION}
    items = question.get("input")
    if api_name == RESPONSES and isinstance(items, list):
        question["input"] = [
            {k: v for k, v in item.items() if k != "id"}
            if isinstance(item, dict) and item.get("type") not in ID_IS_THE_CONTENT else item
            for item in items]
    return question


def request_hash(api_name: str, query: str, headers: dict[str, str], body: Any) -> str:
    """The request's canonical hash: the same request however its JSON was spaced or its keys ordered, whichever
    process of the agent asked it (the_question)."""
    canonical = json.dumps([api_name, query, sorted(headers.items()), the_question(api_name, body)], sort_keys=True,
                           separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8", "surrogatepass")).hexdigest()


def _path(key: LaneKey, digest: str, occurrence: int) -> Path:
    return keyed_path(key.run_id, "proxy", f"{key.name}\0{digest}\0{occurrence}")


def recorded(key: LaneKey, digest: str, occurrence: int) -> tuple[Exchange, bytes] | None:
    """The exchange recorded for this request's `occurrence` in this lane, with the reply's bytes; None when there
    is none (or it cannot be read whole: the call is then made again, as if never made)."""
    data = objects.read_file(_path(key, digest, occurrence))
    if data is None:
        return None
    try:
        exchange = Exchange.model_validate_json(data)
        return exchange, Store(key.run_id).get(exchange.reply)
    except (ValidationError, ValueError, FileNotFoundError):
        return None


def record(key: LaneKey, *, api_name: str, model: str, status: int, headers: dict[str, str], streamed: bool,
           reply: bytes, request: bytes, digest: str, occurrence: int) -> Exchange:
    """Keep an exchange: the reply's and the request's bytes in the store, then the record that names them."""
    store = Store(key.run_id)
    exchange = Exchange(api=api_name, model=model, status=status, headers=headers, streamed=streamed,
                        reply=store.put(reply),
                        request=store.put(redact(request.decode("utf-8", "replace"))),
                        request_hash=digest, occurrence=occurrence)
    objects.write_file(_path(key, digest, occurrence), exchange.model_dump_json().encode("utf-8"))
    return exchange
