"""The record of every exchange the proxy had with a provider for a lane, and the answers it gives from it.

An exchange is keyed by its lane (LaneKey: run, lane, round, dispatch), the request's canonical hash (its API, the
headers that go on to the provider, its query string and its JSON body with sorted keys) and its occurrence: the
number of times this lane had this very request answered before. The record is the run's file
proxy/<2 hex>/<hash of that key>.json (reposwarm.runs.exactly_once.keyed_path), which names the request's and the
reply's bytes in the run's content-addressed store (reposwarm.runs.store): local, and in the shared object store
where one is configured, so a proxy on another host finds it too.

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


# Top-level fields that name who asks or which cache to use, never what is asked: an agent restarted as a new process
# sends a new session id in them (Claude Code's metadata.user_id, Codex's prompt_cache_key), and its request is the
# same request all the same. As the built-in loop's record leaves its cache key out (reposwarm/models/calls.py).
NOT_THE_QUESTION = frozenset({"metadata", "user", "prompt_cache_key", "safety_identifier"})


def request_hash(api_name: str, query: str, headers: dict[str, str], body: Any) -> str:
    """The request's canonical hash: the same request however its JSON was spaced or its keys ordered, whoever
    the agent's process said it was (NOT_THE_QUESTION)."""
    if isinstance(body, dict):
        body = {k: v for k, v in body.items() if k not in NOT_THE_QUESTION}
    canonical = json.dumps([api_name, query, sorted(headers.items()), body], sort_keys=True, separators=(",", ":"),
                           ensure_ascii=False)
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
