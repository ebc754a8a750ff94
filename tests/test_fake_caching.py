"""The fake prompt caches (tests/fake_caching.py) hold to what the providers document, so swarm tests can trust them."""

from __future__ import annotations

import concurrent.futures
import json
from typing import Any

import httpx
import pytest

from tests.fake_caching import (
    DIAGNOSTICS_BETA,
    AnthropicCache,
    CacheRequestError,
    OpenAICache,
    canonical,
    tokens,
)
from tests.fake_models import FakeModelServer

BETA = {"anthropic-beta": DIAGNOSTICS_BETA}
EPHEMERAL = {"type": "ephemeral"}


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def text(n_tokens: int, fill: str = "a") -> dict[str, Any]:
    """A text block of exactly n_tokens fake tokens (its canonical JSON is 4 * n_tokens characters)."""
    overhead = len(canonical({"type": "text", "text": ""}))
    return {"type": "text", "text": fill * (4 * n_tokens - overhead)}


def marked(block: dict[str, Any], ttl: str | None = None) -> dict[str, Any]:
    return {**block, "cache_control": {**EPHEMERAL, **({"ttl": ttl} if ttl else {})}}


def body(system: list[dict[str, Any]], *messages: Any, model: str = "claude-x", **extra: Any) -> dict[str, Any]:
    turns = [{"role": "user" if i % 2 == 0 else "assistant", "content": m} for i, m in enumerate(messages)]
    return {"model": model, "max_tokens": 100, "system": system, "messages": turns, **extra}


def ask(cache: AnthropicCache, request: dict[str, Any], headers: dict[str, str] | None = None) -> dict[str, Any]:
    charge = cache.usage_for(request, headers)
    cache.commit(charge)
    return charge.usage


def test_tokens_are_a_quarter_of_the_canonical_json_rounded_up_without_cache_control() -> None:
    assert tokens({"a": "b"}) == 3  # '{"a": "b"}' is 10 characters
    assert tokens({"b": 1, "a": "b", "cache_control": EPHEMERAL}) == tokens({"a": "b", "b": 1}) == 5
    assert tokens(text(1500)) == 1500


def test_a_second_identical_request_reads_the_whole_prefix() -> None:
    cache = AnthropicCache()
    request = body([marked(text(2000))], "hello")
    first, second = ask(cache, request), ask(cache, request)
    rest = tokens({"type": "text", "text": "hello"})
    assert (first["cache_creation_input_tokens"], first["cache_read_input_tokens"], first["input_tokens"]) == \
        (2000, 0, rest)
    assert first["cache_creation"] == {"ephemeral_5m_input_tokens": 2000, "ephemeral_1h_input_tokens": 0}
    assert (second["cache_creation_input_tokens"], second["cache_read_input_tokens"], second["input_tokens"]) == \
        (0, 2000, rest)
    assert (cache.written_tokens, cache.read_tokens) == (2000, 2000)


def test_a_string_and_a_text_block_are_the_same_prefix() -> None:
    cache = AnthropicCache()
    ask(cache, body([marked(text(1500))], "hi"))
    as_string = {**body([], [marked({"type": "text", "text": "hi"})]), "system": text(1500)["text"]}
    assert ask(cache, as_string)["cache_read_input_tokens"] == 1500
    # and the string message is the block the second request marked and wrote
    assert ask(cache, body([text(1500)], "hi", cache_control=EPHEMERAL))["input_tokens"] == 0


def test_a_prefix_below_the_minimum_is_never_cached() -> None:
    cache = AnthropicCache()
    request = body([marked(text(1000))], "hello")
    for usage in (ask(cache, request), ask(cache, request)):
        assert (usage["cache_creation_input_tokens"], usage["cache_read_input_tokens"]) == (0, 0)
        assert usage["input_tokens"] == 1000 + tokens({"type": "text", "text": "hello"})
    assert ask(AnthropicCache(min_tokens=500), request)["cache_creation_input_tokens"] == 1000


def test_five_breakpoints_are_refused() -> None:
    request = body([marked(text(10)) for _ in range(4)], [marked(text(10))])
    with pytest.raises(CacheRequestError, match=r"A maximum of 4 blocks with cache_control may be provided. Found 5"):
        AnthropicCache().usage_for(request)
    automatic = body([marked(text(10)) for _ in range(4)], "the last block", cache_control=EPHEMERAL)
    with pytest.raises(CacheRequestError, match="Found 5"):  # automatic caching takes a slot of its own
        AnthropicCache().usage_for(automatic)
    AnthropicCache().usage_for(body([marked(text(10)) for _ in range(4)]))  # four are fine


def test_a_longer_ttl_must_come_first_and_only_known_ttls_pass() -> None:
    with pytest.raises(CacheRequestError, match="ttl='1h' cache_control block must not come after a ttl='5m'"):
        AnthropicCache().usage_for(body([marked(text(1500)), marked(text(10), "1h")], "x"))
    with pytest.raises(CacheRequestError, match="ttl"):
        AnthropicCache().usage_for(body([marked(text(1500), "10m")], "x"))
    usage = AnthropicCache().usage_for(body([marked(text(1500), "1h")], [marked(text(600))])).usage
    assert usage["cache_creation"] == {"ephemeral_1h_input_tokens": 1500, "ephemeral_5m_input_tokens": 600}
    assert usage["cache_creation_input_tokens"] == 2100


def test_an_entry_expires_its_ttl_after_it_was_last_written_or_read() -> None:
    clock = Clock()
    cache = AnthropicCache(clock=clock, ttl_s={"5m": 10, "1h": 100})
    request = body([marked(text(1500))], "x")
    assert ask(cache, request)["cache_creation_input_tokens"] == 1500
    clock.now = 8
    assert ask(cache, request)["cache_read_input_tokens"] == 1500  # and the read keeps it until 18
    clock.now = 17
    assert ask(cache, request)["cache_read_input_tokens"] == 1500
    clock.now = 27.5
    expired = ask(cache, request)
    assert (expired["cache_read_input_tokens"], expired["cache_creation_input_tokens"]) == (0, 1500)
    clock.now = 100  # a 1h entry outlives the 5m one
    ask(cache, body([marked(text(1500), "1h")], "y"))
    clock.now = 190
    assert ask(cache, body([marked(text(1500), "1h")], "z"))["cache_read_input_tokens"] == 1500


def test_the_lookback_finds_an_entry_up_to_20_blocks_before_a_breakpoint() -> None:
    base = [text(1100)] + [text(10, fill=str(i)) for i in range(9)]

    def grown(extra: int) -> dict[str, Any]:
        blocks = base + [text(10, fill=chr(65 + i % 26)) for i in range(extra)]
        return body([], blocks[:-1] + [marked(blocks[-1])])

    for extra, read in ((15, 1100 + 9 * 10), (20, 1100 + 9 * 10), (25, 0)):
        cache = AnthropicCache()
        ask(cache, grown(0))
        usage = ask(cache, grown(extra))
        assert usage["cache_read_input_tokens"] == read, extra
        assert usage["cache_creation_input_tokens"] == 1100 + (9 + extra) * 10 - read


def test_requests_that_arrive_before_a_write_is_committed_miss_it() -> None:
    cache = AnthropicCache()
    request = body([marked(text(1500))], "x")
    one, two = cache.usage_for(request), cache.usage_for(request)
    cache.commit(one)
    cache.commit(two)
    assert [c.usage["cache_creation_input_tokens"] for c in (one, two)] == [1500, 1500]
    assert ask(cache, request)["cache_read_input_tokens"] == 1500
    assert cache.writes_of(one.record.breakpoints[0].hash) == 2


def test_automatic_caching_moves_its_breakpoint_to_the_end_and_the_next_turn_reads_it() -> None:
    cache = AnthropicCache()
    first = body([text(1200)], "question one", cache_control=EPHEMERAL)
    assert ask(cache, first)["cache_creation_input_tokens"] == tokens({"type": "text", "text": "question one"}) + 1200
    later = body([text(1200)], "question one", [text(30)], "question two", cache_control=EPHEMERAL)
    usage = ask(cache, later)
    assert usage["cache_read_input_tokens"] == 1200 + tokens({"type": "text", "text": "question one"})
    assert usage["input_tokens"] == 0 and usage["cache_creation_input_tokens"] == 30 + tokens(
        {"type": "text", "text": "question two"})


def test_the_shared_prefix_is_written_once_and_read_by_the_other_lanes() -> None:
    cache = AnthropicCache()
    shared = [{"type": "text", "text": "You are one helper lane."}, marked(text(1500))]
    for lane in ("api", "web", "db"):
        ask(cache, body(shared, [marked({"type": "text", "text": f"Goal for lane {lane}:\n" + "g" * 400})]))
    system_hash = cache.records[0].breakpoints[0].hash
    assert [r.lane for r in cache.records] == ["api", "web", "db"]
    assert cache.writes_of(system_hash) == 1 and cache.reads_of(system_hash) == 2
    assert all(r.breakpoints[0].hash == system_hash and r.breakpoints[0].region == "system" for r in cache.records)
    assert [r.read_tokens for r in cache.records] == [0, tokens(shared[0]) + 1500, tokens(shared[0]) + 1500]
    assert cache.is_cached("claude-x", system_hash) and not cache.is_cached("other-model", system_hash)


def test_diagnostics_need_the_beta_header() -> None:
    with pytest.raises(CacheRequestError, match="diagnostics"):
        AnthropicCache().usage_for(body([], "x", diagnostics={"previous_message_id": None}), {})
    plain = AnthropicCache().usage_for(body([], "x"), BETA)
    assert not plain.diagnosed and plain.diagnostics is None


def test_diagnostics_name_what_changed_since_the_previous_message() -> None:
    cache = AnthropicCache()
    system = [marked(text(1500))]
    tools = [{"name": "read_file", "description": "d", "input_schema": {"type": "object"}}]

    def diagnose(request: dict[str, Any], previous: str | None) -> tuple[Any, str]:
        charge = cache.usage_for({**request, "diagnostics": {"previous_message_id": previous}}, BETA)
        cache.commit(charge)
        assert charge.diagnosed
        return charge.diagnostics, charge.message_id

    first, first_id = diagnose(body(system, "q1", tools=tools), None)
    assert first is None and first_id.startswith("msg_fake_")
    grown, grown_id = diagnose(body(system, "q1", "a1", "q2", tools=tools), first_id)
    assert grown is None and grown_id != first_id
    prompt = tokens(tools[0]) + 1500 + tokens({"type": "text", "text": "q1"})
    reasons = {
        "system_changed": (body([marked(text(1500, "b"))], "q1", tools=tools), prompt - tokens(tools[0])),
        "tools_changed": (body(system, "q1", tools=[]), prompt),
        "messages_changed": (body(system, "q1 edited", tools=tools), prompt - tokens(tools[0]) - 1500),
        "model_changed": (body(system, "q1", tools=tools, model="claude-y"), prompt),
    }
    for reason, (request, missed) in reasons.items():
        said, _ = diagnose(request, first_id)
        assert said == {"cache_miss_reason": {"type": reason, "cache_missed_input_tokens": missed}}, reason
    lost, _ = diagnose(body(system, "q1", tools=tools), "msg_nobody_sent")
    assert lost == {"cache_miss_reason": {"type": "previous_message_not_found"}}


def openai_body(chars: int, key: str | None = None, fill: str = "a", **extra: Any) -> dict[str, Any]:
    """A one-message prompt of exactly `chars` canonical characters."""
    overhead = len(canonical({"role": "user", "content": ""}))
    request = {"model": "gpt-x", "messages": [{"role": "user", "content": fill * (chars - overhead)}], **extra}
    return {**request, "prompt_cache_key": key} if key else request


def openai_ask(cache: OpenAICache, request: dict[str, Any]) -> int:
    charge = cache.usage_for(request)
    cache.commit(charge)
    return charge.usage["prompt_tokens_details"]["cached_tokens"]


def test_openai_caches_nothing_below_1024_tokens() -> None:
    cache = OpenAICache()
    request = openai_body(4 * 1023, key="run")
    assert [openai_ask(cache, request) for _ in range(3)] == [0, 0, 0]
    assert cache.records[0].usage["prompt_tokens"] == 1023


def test_openai_caches_1024_tokens_then_steps_of_128() -> None:
    cache = OpenAICache()
    assert openai_ask(cache, openai_body(4 * 1500, key="run")) == 0
    assert openai_ask(cache, openai_body(4 * 1500, key="run")) == 1408
    # sharing 1295 tokens with what was seen (its text runs out before the other's): 1280 of them are cached
    diverging = openai_body(4 * 1300, key="run")
    diverging["messages"].append({"role": "user", "content": "b" * 2000})
    assert openai_ask(cache, diverging) == 1280
    assert cache.read_tokens == 1408 + 1280


def test_openai_routes_by_prompt_cache_key() -> None:
    cache = OpenAICache()
    openai_ask(cache, openai_body(4 * 2000, key="run-1"))
    assert openai_ask(cache, openai_body(4 * 2000, key="run-2")) == 0
    assert openai_ask(cache, openai_body(4 * 2000, key="run-1")) == 1920
    assert cache.records[-1].machine == "key:run-1" and cache.records[1].machine == "key:run-2"


def test_openai_without_a_key_hits_only_on_the_machine_that_saw_the_prefix() -> None:
    cache = OpenAICache(machines=4, seed=7)
    cached = [openai_ask(cache, openai_body(4 * 2000)) for _ in range(24)]
    machines = {r.machine for r in cache.records}
    assert 2 <= len(machines) <= 4  # 24 draws from 4 machines
    assert cached.count(0) == len(machines)  # each machine misses once, then hits
    assert all(c in (0, 1920) for c in cached)


def test_openai_entries_expire_when_idle() -> None:
    clock = Clock()
    cache = OpenAICache(clock=clock, ttl_s=60)
    openai_ask(cache, openai_body(4 * 1200, key="k"))
    clock.now = 50
    assert openai_ask(cache, openai_body(4 * 1200, key="k")) == 1152
    clock.now = 109  # 59 s after it was last read
    assert openai_ask(cache, openai_body(4 * 1200, key="k")) == 1152
    clock.now = 200
    assert openai_ask(cache, openai_body(4 * 1200, key="k")) == 0


def test_through_the_fake_server_the_reply_carries_the_cache_usage_and_the_api_errors() -> None:
    cache = AnthropicCache()
    reply = {"content": "done", "usage": {"input_tokens": 1, "output_tokens": 1}}
    call = {"content": None, "tool_calls": [{"id": "c1", "name": "finish", "arguments": {"summary": "ok"}}]}
    script = {"lanes": {"api": {1: [call, reply]}}}
    goal = {"type": "text", "text": "Goal for lane api:\nbuild it", "cache_control": EPHEMERAL}
    with FakeModelServer("anthropic", script, caching=cache) as server:
        url = f"{server.base_url}/v1/messages"
        headers = {**BETA, "anthropic-version": "2023-06-01"}
        first = httpx.post(url, headers=headers, json={**body([marked(text(1500))], [goal]),
                                                       "diagnostics": {"previous_message_id": None}}).json()
        assert first["id"] == "msg_fake_1" and first["diagnostics"] is None
        assert first["usage"]["cache_creation_input_tokens"] == 1500 + tokens(goal)
        assert first["usage"]["output_tokens"] == 5 == -(-len(json.dumps({"summary": "ok"})) // 4)
        second = httpx.post(url, headers=headers, json={
            **body([marked(text(1500))], [goal], first["content"], [{"type": "text", "text": "ok"}]),
            "diagnostics": {"previous_message_id": first["id"]}}).json()
        assert second["id"] == "msg_fake_2" and second["diagnostics"] is None
        assert second["content"] == [{"type": "text", "text": "done"}] and second["usage"]["output_tokens"] == 1
        assert second["usage"]["cache_read_input_tokens"] == 1500 + tokens(goal)
        refused = httpx.post(url, headers=headers, json=body([marked(text(10)) for _ in range(5)], [goal]))
        assert refused.status_code == 400
        assert refused.json()["type"] == "error" and refused.json()["error"]["type"] == "invalid_request_error"
        assert "Found 6" in refused.json()["error"]["message"]  # five on the system blocks, one on the goal
    assert [r.lane for r in cache.records] == ["api", "api"] and len(server.answered) == 2


def test_through_the_fake_server_requests_during_the_latency_all_miss() -> None:
    cache = OpenAICache()
    script = {"lanes": {lane: {1: [{"content": "x"}]} for lane in ("api", "web", "db")}}
    shared = [{"role": "system", "content": "You are one helper lane. " + "s" * 6000}]
    with FakeModelServer("openai", script, caching=cache, delay_s=0.5) as server:
        def ask_lane(lane: str) -> dict[str, Any]:
            messages = shared + [{"role": "user", "content": f"Goal for lane {lane}: go"}]
            return httpx.post(f"{server.base_url}/chat/completions", json={
                "model": "gpt-x", "messages": messages, "prompt_cache_key": "run-1"}).json()

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            replies = list(pool.map(ask_lane, ["api", "web"]))
        later = ask_lane("db")
    assert [r["usage"]["prompt_tokens_details"]["cached_tokens"] for r in replies] == [0, 0]
    assert later["usage"]["prompt_tokens_details"]["cached_tokens"] >= 1024
    assert sorted(r.lane or "" for r in cache.records) == ["api", "db", "web"]
    assert later["usage"]["completion_tokens"] == 1
