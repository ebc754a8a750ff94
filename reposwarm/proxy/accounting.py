"""What one proxied call cost, and its ledger line: the same figures, in the same line, as the built-in loop's.

reposwarm/models/calls.py `complete` prices a call with contracts/cost.py `priced` (cached tokens at their rates,
the billed tokens a lane's budget counts) and writes a `model_call` line per call: `ok` with its tokens and cost,
`error` for a call the provider failed, `reused` (no tokens, no cost) for an answer taken from the record. The
proxy writes the same lines, with the same fields, so `report`, `status` and the cache-hit share count a lane run
by an outside agent as they count the built-in one; `via: proxy`, the API, the round, the dispatch and whether
it streamed say where each came from. The line's key makes it idempotent: an exchange is one `ok` line however
often its writing is retried. The ledger redacts every line (reposwarm/runs/ledger.py).
"""

from __future__ import annotations

from typing import Any

from reposwarm.contracts import ModelPrice
from reposwarm.contracts.base import Usage
from reposwarm.contracts.cost import priced
from reposwarm.models.limits import CUT_REASONS, REFUSAL
from reposwarm.models.prices import price_of
from reposwarm.proxy.lanes import LaneKey
from reposwarm.proxy.usage import UsageReader
from reposwarm.runs import ledger

UNUSUAL_STOPS = CUT_REASONS | {REFUSAL, "pause_turn"}  # as reposwarm/models/calls.py: the stops a line names
MAX_ERROR_CHARS = 300


def model_name(provider: str, body: dict[str, Any]) -> str:
    """The project's name for the model a request asks for: `provider:model`."""
    model = body.get("model")
    return f"{provider}:{model if isinstance(model, str) else ''}"[:200]


def call_id(key: LaneKey, digest: str, occurrence: int) -> str:
    """The call's name in the ledger, the same on every proxy that answers it (a restarted agent's included)."""
    dispatch = f".{key.attempt}" if key.attempt > 1 else ""
    return f"{key.lane}-r{key.round}{dispatch}-{digest[:12]}.{occurrence}"


def sent_conversation(body: dict[str, Any]) -> Any:
    """What a request sends as its conversation, for a size estimate (the built-in loop measures its messages)."""
    return body.get("messages", body.get("input"))


def priced_usage(reader: UsageReader, name: str, prices: dict[str, ModelPrice], body: dict[str, Any]) -> Usage:
    usage = reader.usage(sent_conversation(body))
    price, _ = price_of(name, prices)
    return priced(usage, name, price, reader.cache_ttl)


def write_line(key: LaneKey, *, line_key: str, call: str, model: str, api_name: str, streamed: bool,
               outcome: str, latency_s: float, usage: Usage | None = None, stop_reason: str = "",
               error: str = "") -> None:
    """The call's `model_call` line (blocking file work: the server calls it in a thread)."""
    figures: dict[str, Any]
    if usage is not None:
        figures = dict(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens, cost_usd=usage.cost_usd,
                       billed_tokens=usage.billed_tokens, cache_read_tokens=usage.cache_read_tokens,
                       cache_write_tokens=usage.cache_write_tokens, uncached_cost_usd=usage.uncached_cost_usd)
    elif outcome == "reused":
        figures = dict(input_tokens=0, output_tokens=0, cost_usd=0.0)
    else:
        figures = {}
    if error:
        figures["error"] = error[:MAX_ERROR_CHARS]
    if stop_reason in UNUSUAL_STOPS:
        figures["stop_reason"] = stop_reason
    # `dispatch`, not `attempt`: a ledger line's `attempt` is its activity's retry (reposwarm/runs/metrics.py)
    ledger.record(key.run_id, "model_call", key=line_key, call_id=call, agent=key.lane, model=model,
                  outcome=outcome, latency_s=round(latency_s, 3), via="proxy", api=api_name, round=key.round,
                  dispatch=key.attempt, streamed=streamed, **figures)
