"""The model proxy (reposwarm/proxy/), for real: the proxy serving on loopback, real httpx clients posting each API's
real wire format to it, and as the provider the project's fake model server (tests/fake_models.py), which speaks
Anthropic Messages, OpenAI Responses and Chat Completions, streamed (SSE) and not.

Held: usage and cost counted per lane and call for each API, streamed and not, in the tally and in the ledger line
the built-in loop writes; a wrong token refused in the provider's shape; the worker's real key and planted secrets
never reaching the agent or the record; an agent restarted over a new proxy answered from the record, byte for
byte, with no provider call; a budget hook that refuses, and one that waits then allows; hostile input (not JSON,
too big, too slow, nested too deep, unknown paths) refused clearly, the proxy serving on.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from reposwarm.proxy import ALLOW, BudgetAnswer, LaneKey, LaneTally, ModelProxy, refuse
from reposwarm.runs import ledger
from reposwarm.runs.objects import run_dir
from tests.fake_models import FakeModelServer

ANTHROPIC_KEY = "sk-" + "ant-api03-REALWORKERKEY-0123456789abcdef"  # fake, shaped as the real ones
OPENAI_KEY = "sk-" + "proj-REALWORKERKEY-fedcba9876543210"  # fake
PLANTED = "planted-secret-7f3a9c1e5b"  # a secret in the worker's environment, under a secret-looking name

WIRE = {"anthropic": "anthropic", "responses": "responses", "chat": "openai"}  # the fake server's name for each API
PATH = {"anthropic": "/v1/messages", "responses": "/v1/responses", "chat": "/v1/chat/completions"}
USAGE = {"input_tokens": 1000, "output_tokens": 50, "cache_read_tokens": 600, "cache_write_tokens": 200}


def script(*replies: dict[str, Any], lane: str = "api") -> dict[str, Any]:
    return {"lanes": {lane: {1: list(replies)}}}


def reply(text: str, usage: dict[str, int] | None = None) -> dict[str, Any]:
    return {"content": text, "usage": usage or USAGE}


def body(api: str, *, stream: bool, lane: str = "api", said: str = "do it") -> dict[str, Any]:
    """A first request of a lane's conversation, in the API's own shape."""
    goal = f"Goal for lane {lane}: {said}"
    if api == "anthropic":
        return {"model": "claude-sonnet-4-5", "max_tokens": 1024, "stream": stream,
                "system": [{"type": "text", "text": "You are a lane.", "cache_control": {"type": "ephemeral"}}],
                "messages": [{"role": "user", "content": goal}]}
    if api == "responses":
        return {"model": "gpt-4.1", "instructions": "You are a lane.", "stream": stream,
                "input": [{"role": "user", "content": [{"type": "input_text", "text": goal}]}]}
    return {"model": "gpt-4.1", "stream": stream,
            "messages": [{"role": "system", "content": "You are a lane."}, {"role": "user", "content": goal}]}


def headers(api: str, token: str) -> dict[str, str]:
    if api == "anthropic":
        return {"x-api-key": token, "anthropic-version": "2023-06-01"}
    return {"authorization": f"Bearer {token}"}


def events(raw: bytes) -> list[dict[str, Any]]:
    """An SSE stream's JSON data, event by event ([DONE] left out)."""
    found = []
    for event in raw.split(b"\n\n"):
        data = [line[6:] for line in event.decode().splitlines() if line.startswith("data: ")]
        if data and data[0] != "[DONE]":
            found.append(json.loads("\n".join(data)))
    return found


def text_of_reply(api: str, raw: bytes, streamed: bool) -> str:
    """The text an agent reads from the reply, as its SDK would put it together."""
    if not streamed:
        data = json.loads(raw)
        if api == "anthropic":
            return "".join(b["text"] for b in data["content"] if b["type"] == "text")
        if api == "responses":
            return "".join(c["text"] for item in data["output"] if item["type"] == "message" for c in item["content"])
        return data["choices"][0]["message"]["content"]
    found = events(raw)
    if api == "anthropic":
        return "".join(e["delta"]["text"] for e in found if e["type"] == "content_block_delta")
    if api == "responses":
        return "".join(e["delta"] for e in found if e["type"] == "response.output_text.delta")
    return "".join(e["choices"][0]["delta"].get("content") or "" for e in found if e["choices"])


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch, reposwarm_home: Path) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", OPENAI_KEY)
    monkeypatch.setenv("PLANTED_SECRET", PLANTED)


@contextmanager
def provider(monkeypatch: pytest.MonkeyPatch, api: str, replies: dict[str, Any]) -> Iterator[FakeModelServer]:
    """The fake provider of `api`, where the proxy looks for it (the built-in providers' variables)."""
    with FakeModelServer(WIRE[api], replies) as server:
        monkeypatch.setenv("ANTHROPIC_BASE_URL" if api == "anthropic" else "OPENAI_BASE_URL", server.base_url)
        yield server


def new_run() -> str:
    return f"proxy-{uuid.uuid4().hex[:10]}"


def every_byte_written(run_id: str) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(run_dir(run_id).rglob("*")) if p.is_file())


def model_lines(run_id: str) -> list[dict[str, Any]]:
    return [line for line in ledger.read(run_id) if line["event"] == "model_call"]


# --- usage and cost, per lane, for each API, streamed and not ---

COST = {"anthropic": 0.00468, "responses": 0.0015, "chat": 0.0015}  # worked out by hand below
INPUT = {"anthropic": 1800, "responses": 1000, "chat": 1000}
WRITTEN = {"anthropic": 200, "responses": 0, "chat": 0}


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
async def test_usage_and_cost_are_counted_per_lane_and_call(
        keys: None, monkeypatch: pytest.MonkeyPatch, api: str, streamed: bool) -> None:
    # claude-sonnet-4-5 ($3 in, $15 out, reads $0.30, 5-minute writes $3.75): Anthropic's input_tokens is the
    # uncached part, so 1000 + 600 read + 200 written = 1800 in; 1000*3 + 600*0.3 + 200*3.75 + 50*15 = $0.00468.
    # gpt-4.1 ($2 in, $0.50 cached, $8 out): 1000 in of which 600 cached: 400*2 + 600*0.5 + 50*8 = $0.0015.
    run_id = new_run()
    replies = {"lanes": {"api": {1: [reply("api's answer")]}, "web": {1: [reply("web's answer", {
        "input_tokens": 10, "output_tokens": 5})]}}}
    with provider(monkeypatch, api, replies) as fake:
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            api_lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api", round=1, attempt=1))
            web_lane = proxy.open_lane(LaneKey(run_id=run_id, lane="web", round=1, attempt=1))
            got = await agent.post(proxy.url + PATH[api], json=body(api, stream=streamed),
                                   headers=headers(api, api_lane.token))
            other = await agent.post(proxy.url + PATH[api], json=body(api, stream=streamed, lane="web"),
                                     headers=headers(api, web_lane.token))
            tally, web_tally = proxy.tally(api_lane.token), proxy.tally(web_lane.token)
    assert got.status_code == 200 and other.status_code == 200, (got.text, other.text)
    assert got.headers["content-type"].startswith("text/event-stream" if streamed else "application/json")
    assert text_of_reply(api, got.content, streamed) == "api's answer"
    assert text_of_reply(api, other.content, streamed) == "web's answer"
    assert (tally.usage.input_tokens, tally.usage.output_tokens) == (INPUT[api], 50)
    assert (tally.usage.cache_read_tokens, tally.usage.cache_write_tokens) == (600, WRITTEN[api])
    assert tally.usage.cost_usd == pytest.approx(COST[api])
    assert (tally.usage.model_calls, tally.upstream_calls, tally.replayed_calls) == (1, 1, 0)
    assert (web_tally.usage.input_tokens, web_tally.usage.output_tokens, web_tally.upstream_calls) == (10, 5, 1)
    # the provider got the worker's key, never the lane's token
    sent = fake.requests[0]
    if api == "anthropic":
        assert sent.headers["x-api-key"] == ANTHROPIC_KEY
    else:
        assert sent.headers["authorization"] == f"Bearer {OPENAI_KEY}"
    assert api_lane.token.encode() not in sent.raw and api_lane.token not in json.dumps(sent.headers)
    if api == "chat" and streamed:  # asked for the usage chunk the agent did not ask for
        assert sent.body["stream_options"] == {"include_usage": True}
    else:  # everything else goes on as the agent sent it, prompt caching marks and all
        assert sent.body == body(api, stream=streamed)
    # the ledger line is the built-in loop's, per lane
    lines = {line["agent"]: line for line in model_lines(run_id)}
    line = lines["api"]
    assert (line["outcome"], line["via"], line["streamed"], line["round"]) == ("ok", "proxy", streamed, 1)
    assert (line["input_tokens"], line["output_tokens"], line["cache_read_tokens"]) == (INPUT[api], 50, 600)
    assert line["cost_usd"] == pytest.approx(COST[api]) and line["billed_tokens"] > 0
    assert line["model"] == ("anthropic:claude-sonnet-4-5" if api == "anthropic" else "openai:gpt-4.1")
    assert lines["web"]["input_tokens"] == 10


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
async def test_a_provider_that_reports_no_usage_gets_the_built_in_loops_estimate(
        keys: None, monkeypatch: pytest.MonkeyPatch, api: str, streamed: bool) -> None:
    # a local server that counts nothing: the conversation sent and the reply said, at 4 characters a token, as
    # reposwarm/models/calls.py estimates, so a lane's budget still counts it
    run_id = new_run()
    said = {"content": "x" * 40, "tool_calls": [{"id": "c1", "name": "read_file", "arguments": {"path": "a.py"}}],
            "usage": {"input_tokens": 0, "output_tokens": 0}}
    request = body(api, stream=streamed)
    with provider(monkeypatch, api, script(said)):
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api"))
            got = await agent.post(proxy.url + PATH[api], json=request, headers=headers(api, lane.token))
            tally = proxy.tally(lane.token)
    assert got.status_code == 200
    sent = request["input" if api == "responses" else "messages"]
    assert (tally.usage.input_tokens, tally.usage.output_tokens) == (len(json.dumps(sent)) // 4, (40 + 16) // 4)
    assert tally.usage.cost_usd > 0 and model_lines(run_id)[0]["output_tokens"] == 14


async def test_many_lanes_at_once_each_count_their_own(keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # 12 lanes, each asking twice at the same moment (the same request: two occurrences, both sent), streamed and not
    run_id = new_run()
    names = [f"lane{i}" for i in range(12)]
    replies = {"lanes": {name: {1: [reply(f"{name} says", {"input_tokens": 100 + i, "output_tokens": 10})]}
                         for i, name in enumerate(names)}}
    with provider(monkeypatch, "anthropic", replies) as fake:
        fake.delay_s = 0.05
        fake._httpd.socket.listen(64)  # as a provider takes 48 connections at once (http.server's backlog is 5)
        async with ModelProxy() as proxy, httpx.AsyncClient(timeout=60) as agent:
            lanes = {name: proxy.open_lane(LaneKey(run_id=run_id, lane=name)) for name in names}

            async def ask(name: str, streamed: bool) -> httpx.Response:
                return await agent.post(proxy.url + PATH["anthropic"], json=body("anthropic", stream=streamed,
                                                                                 lane=name),
                                        headers=headers("anthropic", lanes[name].token))

            answers = await asyncio.gather(*(ask(name, streamed) for name in names for streamed in (False, True)
                                             for _ in range(2)))
            tallies = {name: proxy.tally(lane.token) for name, lane in lanes.items()}
    assert [a.status_code for a in answers] == [200] * 48, [a.text[:300] for a in answers if a.status_code != 200][:3]
    assert len(fake.requests) == 48
    for i, name in enumerate(names):
        said = {text_of_reply("anthropic", a.content, a.headers["content-type"].startswith("text/event-stream"))
                for a in answers[i * 4:(i + 1) * 4]}
        assert said == {f"{name} says"}
        assert (tallies[name].upstream_calls, tallies[name].usage.input_tokens) == (4, 4 * (100 + i))
    per_lane = {name: sum(1 for line in model_lines(run_id) if line["agent"] == name) for name in names}
    assert per_lane == {name: 4 for name in names}


# --- tokens and keys ---


@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
async def test_a_token_the_proxy_did_not_give_is_refused_in_the_providers_shape(
        keys: None, monkeypatch: pytest.MonkeyPatch, api: str) -> None:
    run_id = new_run()
    with provider(monkeypatch, api, script(reply("never sent"))) as fake:
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api"))
            closed = proxy.open_lane(LaneKey(run_id=run_id, lane="old"))
            proxy.close_lane(closed.token)
            real_key = ANTHROPIC_KEY if api == "anthropic" else OPENAI_KEY
            tries = [{}, headers(api, "rsw-lane-made-up"), headers(api, real_key), headers(api, closed.token),
                     headers(api, lane.token[:-1])]
            answers = [await agent.post(proxy.url + PATH[api], json=body(api, stream=False), headers=h) for h in tries]
    for answer in answers:
        assert answer.status_code == 401
        error = answer.json()
        if api == "anthropic":
            assert error["type"] == "error" and error["error"]["type"] == "authentication_error"
        else:
            assert error["error"]["code"] == "invalid_api_key"
        assert "lane token" in answer.text
    assert fake.requests == [] and model_lines(run_id) == []


@pytest.mark.parametrize("streamed", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
async def test_the_real_key_and_planted_secrets_never_reach_the_agent_or_the_record(
        keys: None, monkeypatch: pytest.MonkeyPatch, api: str, streamed: bool) -> None:
    # a provider (or a model) that says the worker's key and a secret of its environment back
    run_id = new_run()
    real_key = ANTHROPIC_KEY if api == "anthropic" else OPENAI_KEY
    echo = f"your key is {real_key} and the secret is {PLANTED}"
    with provider(monkeypatch, api, script(reply(echo))):
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api"))
            # the agent's request says the secret too (it read a planted file): the record keeps it redacted
            got = await agent.post(proxy.url + PATH[api], json=body(api, stream=streamed, said=PLANTED),
                                   headers=headers(api, lane.token))
            # a provider error, and the proxy's own errors, name no key either
            missing = await agent.post(proxy.url + PATH[api], json=body(api, stream=streamed, lane="nobody"),
                                       headers=headers(api, lane.token))
    assert got.status_code == 200 and missing.status_code == 400
    said = text_of_reply(api, got.content, streamed)
    assert said.startswith("your key is [redacted") and "the secret is [redacted:PLANTED_SECRET]" in said
    for seen in (got.content, missing.content, every_byte_written(run_id)):
        assert real_key.encode() not in seen and PLANTED.encode() not in seen
    assert json.dumps(model_lines(run_id)).count('"outcome": "error"') == 1


# --- the record: a restarted agent asks the provider nothing twice ---


@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
async def test_an_agent_restarted_over_a_new_proxy_is_answered_from_the_record(
        keys: None, monkeypatch: pytest.MonkeyPatch, api: str) -> None:
    run_id = new_run()
    key = LaneKey(run_id=run_id, lane="api", round=2, attempt=1)
    session = {"metadata": {"user_id": "session_1"}} if api == "anthropic" else {"prompt_cache_key": "session_1"}
    first, second = {**body(api, stream=False), **session}, {**body(api, stream=True, said="go on"), **session}
    with provider(monkeypatch, api, script(reply("one"), reply("two"))) as fake:
        # before the "kill": the same request twice (two answers, two occurrences), then a streamed one
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(key)
            before = [await agent.post(proxy.url + PATH[api], json=b, headers=headers(api, lane.token))
                      for b in (first, first, second)]
            assert proxy.upstream_calls == 3 and proxy.tally(lane.token).upstream_calls == 3
        asked = len(fake.requests)
        # the worker killed; a new proxy (a new token) over the same run's store, the agent asking the same again,
        # as a new process: a new session id where its requests carry one, its JSON spaced and ordered its own way
        session = {"metadata": {"user_id": "session_2"}} if api == "anthropic" else {"prompt_cache_key": "session_2"}
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(key)
            auth = {**headers(api, lane.token), "content-type": "application/json"}
            after = [await agent.post(proxy.url + PATH[api], headers=auth,
                                      content=json.dumps(dict(reversed({**b, **session}.items())), indent=1))
                     for b in (first, first, second)]
            replayed = (proxy.upstream_calls, proxy.replayed_calls, proxy.tally(lane.token))
            assert len(fake.requests) == asked  # the provider was asked nothing
            # a third time is a new occurrence: the provider is asked
            third = await agent.post(proxy.url + PATH[api], json=first, headers=headers(api, lane.token))
            assert len(fake.requests) == asked + 1 and third.status_code == 200
    assert [a.status_code for a in after] == [200, 200, 200]
    assert [a.content for a in after] == [b.content for b in before]  # byte for byte, the stream included
    assert after[2].headers["content-type"].startswith("text/event-stream")
    assert text_of_reply(api, after[2].content, True) == "one"  # the fake's first turn, "go on" is a new request
    upstream, replays, tally = replayed
    assert (upstream, replays, tally.replayed_calls, tally.upstream_calls, tally.usage.cost_usd) == (0, 3, 3, 0, 0)
    outcomes = [line["outcome"] for line in model_lines(run_id)]
    assert outcomes == ["ok", "ok", "ok", "reused", "reused", "reused", "ok"]
    reused = [line for line in model_lines(run_id) if line["outcome"] == "reused"]
    assert all(line["input_tokens"] == 0 and line["cost_usd"] == 0 for line in reused)
    oks = [line["call_id"] for line in model_lines(run_id) if line["outcome"] == "ok"]
    assert sorted(line["call_id"] for line in reused) == sorted(oks[:3])  # the same calls, named alike


def codex_like(process: str) -> dict[str, Any]:
    """A Codex request (the Responses API) as one process of it sends it: the ids Codex mints are its own (client
    metadata, the prompt cache key, its input items' ids); the model's own item ids and call ids are the provider's."""
    return {"model": "gpt-5.5", "instructions": "You are a lane.", "stream": True, "store": False,
            "reasoning": {"effort": "medium"}, "include": ["reasoning.encrypted_content"], "tool_choice": "auto",
            "tools": [{"type": "function", "name": "exec_command", "parameters": {"type": "object"}}],
            "prompt_cache_key": process,
            "client_metadata": {"session_id": process, "turn_id": f"turn-{process}", "x-codex-turn-metadata":
                                json.dumps({"session_id": process, "turn_started_at_unix_ms": hash(process)})},
            "input": [
                {"type": "message", "id": f"msg_{process}_0", "role": "developer",
                 "content": [{"type": "input_text", "text": "Work in /repo."}]},
                {"type": "message", "id": f"msg_{process}_1", "role": "user",
                 "content": [{"type": "input_text", "text": "Goal for lane api: do it"}]},
                {"type": "function_call", "id": "fc_provider_1", "call_id": "call_1", "name": "exec_command",
                 "arguments": json.dumps({"cmd": "ls"})},
                {"type": "function_call_output", "id": f"fco_{process}_1", "call_id": "call_1", "output": "README.md"},
                {"type": "item_reference", "id": "rs_stored_1"}]}


# What changes the question: each is asked of the provider, whichever process asks.
QUESTION_CHANGED: dict[str, Any] = {
    "the user's words": lambda b: b["input"][1]["content"][0].update(text="Goal for lane api: undo it"),
    "a tool's output": lambda b: b["input"][3].update(output="README.md\nsrc"),
    "which call an output answers": lambda b: b["input"][3].update(call_id="call_2"),
    "a stored item referred to": lambda b: b["input"][4].update(id="rs_stored_2"),
    "the tools": lambda b: b["tools"].append({"type": "function", "name": "write_stdin", "parameters": {}}),
    "the model": lambda b: b.update(model="gpt-5.6-sol"),
    "the instructions": lambda b: b.update(instructions="You are another lane."),
    "the reasoning effort": lambda b: b["reasoning"].update(effort="high"),
}


async def test_another_process_of_the_agent_asking_the_same_is_answered_from_the_record(
        keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted Codex sends the same conversation under new ids of its own: the same question, answered from
    the record. Whatever changes what the model is asked is a new question, sent on."""
    key = LaneKey(run_id=new_run(), lane="api")
    with provider(monkeypatch, "responses", script(reply("one"), reply("two"))) as fake:
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(key)
            first = await agent.post(proxy.url + PATH["responses"], json=codex_like("process-1"),
                                     headers=headers("responses", lane.token))
        asked = len(fake.requests)
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(key)
            # (each changed question first: one taken for the recorded one would be answered from the record)
            for n, (what, change) in enumerate(QUESTION_CHANGED.items(), start=1):
                changed = codex_like("process-2")
                change(changed)
                answer = await agent.post(proxy.url + PATH["responses"], json=changed,
                                          headers=headers("responses", lane.token))
                assert answer.status_code == 200 and len(fake.requests) == asked + n, what
            same = await agent.post(proxy.url + PATH["responses"], json=codex_like("process-2"),
                                    headers=headers("responses", lane.token))
            assert len(fake.requests) == asked + len(QUESTION_CHANGED) and same.content == first.content
            tally = proxy.tally(lane.token)
    assert first.status_code == 200 and text_of_reply("responses", first.content, True) == "two"
    assert (tally.replayed_calls, tally.upstream_calls) == (1, len(QUESTION_CHANGED))


# --- the budget on the wire ---


@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
async def test_a_budget_that_refuses_gives_the_agent_a_providers_error(
        keys: None, monkeypatch: pytest.MonkeyPatch, api: str) -> None:
    run_id = new_run()
    asked: list[LaneTally] = []

    async def spent(key: LaneKey, tally: LaneTally) -> BudgetAnswer:
        asked.append(tally)
        return refuse("spent $5.00 of $5.00")

    with provider(monkeypatch, api, script(reply("never sent"))) as fake:
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api"), budget=spent)
            answer = await agent.post(proxy.url + PATH[api], json=body(api, stream=True),
                                      headers=headers(api, lane.token))
            tally = proxy.tally(lane.token)
    assert fake.requests == [] and len(asked) == 1
    assert "used up its budget" in answer.text and "spent $5.00 of $5.00" in answer.text
    if api == "anthropic":
        assert answer.status_code == 400 and answer.json()["error"]["type"] == "invalid_request_error"
    else:
        assert answer.status_code == 429 and answer.json()["error"]["code"] == "insufficient_quota"
    assert (tally.refused_calls, tally.upstream_calls) == (1, 0)


async def test_a_budget_that_waits_holds_the_call_then_lets_it_go(
        keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = new_run()
    raised = asyncio.Event()
    seen: list[int] = []

    async def paused(key: LaneKey, tally: LaneTally) -> BudgetAnswer:
        seen.append(tally.usage.model_calls)
        if tally.usage.model_calls >= 1:  # at its budget after one call: wait for a person to raise it
            await raised.wait()
        return ALLOW

    with provider(monkeypatch, "anthropic", script(reply("first"), reply("second"))) as fake:
        async with ModelProxy() as proxy, httpx.AsyncClient(timeout=30) as agent:
            lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api"), budget=paused)
            url, auth = proxy.url + PATH["anthropic"], headers("anthropic", lane.token)
            assert (await agent.post(url, json=body("anthropic", stream=False), headers=auth)).status_code == 200
            later = body("anthropic", stream=True)
            later["messages"] += [{"role": "assistant", "content": "first"}, {"role": "user", "content": "go on"}]
            waiting = asyncio.ensure_future(agent.post(url, json=later, headers=auth))
            await asyncio.sleep(0.5)
            assert not waiting.done() and len(fake.requests) == 1  # held before the provider
            raised.set()
            answer = await asyncio.wait_for(waiting, 10)
            tally = proxy.tally(lane.token)
    assert answer.status_code == 200 and text_of_reply("anthropic", answer.content, True) == "second"
    assert seen == [0, 1] and len(fake.requests) == 2 and tally.upstream_calls == 2


# --- hostile input ---


async def test_hostile_requests_get_a_clear_error_and_the_proxy_serves_on(
        keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    run_id = new_run()
    with provider(monkeypatch, "chat", script(reply("still here"))) as fake:
        async with ModelProxy(max_body_bytes=64 * 1024, body_timeout_s=0.5) as proxy, \
                httpx.AsyncClient() as agent:
            lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api"))
            auth = headers("chat", lane.token)
            url = proxy.url + PATH["chat"]
            answers = {
                "not json": await agent.post(url, content=b"{not json", headers=auth),
                "an array": await agent.post(url, content=b"[1, 2]", headers=auth),
                "no model": await agent.post(url, json={"messages": []}, headers=auth),
                "stream not a flag": await agent.post(url, json={"model": "gpt-4.1", "stream": "yes"}, headers=auth),
                "nested too deep": await agent.post(url, content=b"[" * 30_000 + b"]" * 30_000, headers=auth),
                "too big": await agent.post(url, content=b" " * (64 * 1024 + 1), headers=auth),
                "unknown path": await agent.post(proxy.url + "/v1/embeddings", json={"model": "x"}, headers=auth),
                "wrong method": await agent.get(url, headers=auth),
            }
            # a body that never arrives whole: refused after body_timeout_s, not waited on
            reader, writer = await asyncio.open_connection(proxy.host, proxy.port)
            writer.write(f"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\nauthorization: Bearer {lane.token}\r\n"
                         "content-type: application/json\r\ncontent-length: 100\r\n\r\n{\"mo".encode())
            await writer.drain()
            slow = await asyncio.wait_for(reader.read(4096), 5)
            writer.close()
            good = await agent.post(url, json=body("chat", stream=False), headers=auth)
    expected = {"not json": 400, "an array": 400, "no model": 400, "stream not a flag": 400, "nested too deep": 400,
                "too big": 413, "unknown path": 404, "wrong method": 405}
    assert {what: a.status_code for what, a in answers.items()} == expected
    for what, answer in answers.items():
        error = answer.json()["error"]
        assert error["message"] and error["type"] == "invalid_request_error", what
    assert "not JSON" in answers["not json"].text and "/v1/responses" in answers["unknown path"].text
    assert slow.startswith(b"HTTP/1.1 400") and b"did not arrive within 0.5s" in slow
    assert good.status_code == 200 and len(fake.requests) == 1  # nothing hostile reached the provider


async def test_a_provider_error_passes_through_uncounted_and_unrecorded(
        keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # the fake provider cannot tell which lane asks: its own 400, in its own shape, reaches the agent; the call is a
    # failed one on the tally and an `error` ledger line; nothing is recorded, so asking again asks the provider
    run_id = new_run()
    with provider(monkeypatch, "anthropic", script(reply("x"))) as fake:
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api"))
            stray = {**body("anthropic", stream=False), "messages": [{"role": "user", "content": "hello"}]}
            answers = [await agent.post(proxy.url + PATH["anthropic"], json=stray,
                                        headers=headers("anthropic", lane.token)) for _ in range(2)]
            tally = proxy.tally(lane.token)
    assert [a.status_code for a in answers] == [400, 400] and len(fake.requests) == 2
    assert "cannot tell which lane is asking" in answers[0].json()["error"]["message"]
    assert (tally.failed_calls, tally.upstream_calls, tally.usage.model_calls) == (2, 0, 0)
    assert [line["outcome"] for line in model_lines(run_id)] == ["error", "error"]
    assert not (run_dir(run_id) / "proxy").exists()


# --- streams cut short, on either side ---


async def test_an_agent_that_hangs_up_mid_stream_still_gets_the_call_recorded(
        keys: None, monkeypatch: pytest.MonkeyPatch) -> None:
    # the agent (its worker killed) drops the connection after the first bytes; the provider goes on writing. The
    # proxy reads the reply to its end: the call is counted once, recorded, and the restarted agent's same request
    # is answered from the record
    run_id = new_run()
    key = LaneKey(run_id=run_id, lane="api")
    request = body("anthropic", stream=True)
    with provider(monkeypatch, "anthropic", script(reply("a long answer"))) as fake:
        fake.event_delay_s = 0.15
        async with ModelProxy() as proxy:
            lane = proxy.open_lane(key)
            async with httpx.AsyncClient() as agent, agent.stream(
                    "POST", proxy.url + PATH["anthropic"], json=request,
                    headers=headers("anthropic", lane.token)) as cut:
                first = await anext(cut.aiter_raw())
            assert b"message_start" in first and proxy.tally(lane.token).upstream_calls == 0  # still streaming
            for _ in range(100):
                if proxy.tally(lane.token).upstream_calls:
                    break
                await asyncio.sleep(0.1)
            tally = proxy.tally(lane.token)
        assert (tally.upstream_calls, tally.failed_calls, tally.usage.output_tokens) == (1, 0, 50)
        async with ModelProxy() as proxy, httpx.AsyncClient() as agent:
            lane = proxy.open_lane(key)
            again = await agent.post(proxy.url + PATH["anthropic"], json=request,
                                     headers=headers("anthropic", lane.token))
            assert (proxy.upstream_calls, proxy.replayed_calls) == (0, 1)
    assert len(fake.requests) == 1
    assert text_of_reply("anthropic", again.content, True) == "a long answer"


@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
async def test_a_provider_stream_that_breaks_off_ends_in_the_apis_error_and_is_not_recorded(
        keys: None, monkeypatch: pytest.MonkeyPatch, api: str) -> None:
    # a provider that starts a stream and drops the connection half way
    async def half_a_stream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        event = b'event: message_start\ndata: {"type": "message_start", "message": {"usage": {"input_tokens": 9}}}\n\n'
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
                     + f"{len(event):x}\r\n".encode() + event + b"\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(half_a_stream, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("ANTHROPIC_BASE_URL" if api == "anthropic" else "OPENAI_BASE_URL",
                       f"http://127.0.0.1:{port}" + ("" if api == "anthropic" else "/v1"))
    run_id = new_run()
    async with server, ModelProxy() as proxy, httpx.AsyncClient() as agent:
        lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api"))
        got = await agent.post(proxy.url + PATH[api], json=body(api, stream=True), headers=headers(api, lane.token))
        tally = proxy.tally(lane.token)
    assert got.status_code == 200 and got.content.startswith(b"event: message_start")
    last = events(got.content)[-1]
    assert "broke off" in json.dumps(last) and ("error" in last or last.get("type") == "error")
    assert (tally.failed_calls, tally.upstream_calls) == (1, 0)
    assert [line["outcome"] for line in model_lines(run_id)] == ["error"]
    assert not (run_dir(run_id) / "proxy").exists()


@pytest.mark.parametrize("api", ["anthropic", "responses", "chat"])
async def test_a_provider_that_refuses_the_key_and_echoes_it_never_shows_it(
        keys: None, monkeypatch: pytest.MonkeyPatch, api: str) -> None:
    # the provider refuses the worker's key and quotes the credentials it got, as some gateways do
    async def refusing(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = (await reader.readuntil(b"\r\n\r\n")).decode()
        length = int(next(line.split(":")[1] for line in head.split("\r\n")
                          if line.lower().startswith("content-length")))
        await reader.readexactly(length)
        said = json.dumps({"error": {"message": f"bad credentials in: {head}", "type": "authentication_error"}})
        writer.write(f"HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {len(said)}\r\n"
                     f"connection: close\r\n\r\n{said}".encode())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(refusing, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    monkeypatch.setenv("ANTHROPIC_BASE_URL" if api == "anthropic" else "OPENAI_BASE_URL",
                       f"http://127.0.0.1:{port}" + ("" if api == "anthropic" else "/v1"))
    run_id = new_run()
    async with server, ModelProxy() as proxy, httpx.AsyncClient() as agent:
        lane = proxy.open_lane(LaneKey(run_id=run_id, lane="api"))
        refused = await agent.post(proxy.url + PATH[api], json=body(api, stream=False),
                                   headers=headers(api, lane.token))
        # a worker with no key at all for the provider's default address: said so, nothing sent
        monkeypatch.delenv("ANTHROPIC_BASE_URL" if api == "anthropic" else "OPENAI_BASE_URL")
        monkeypatch.delenv("ANTHROPIC_API_KEY" if api == "anthropic" else "OPENAI_API_KEY")
        keyless = await agent.post(proxy.url + PATH[api], json=body(api, stream=False),
                                   headers=headers(api, lane.token))
    real_key = ANTHROPIC_KEY if api == "anthropic" else OPENAI_KEY
    assert refused.status_code == 401 and "refused the worker's key" in refused.text
    assert keyless.status_code == 500 and "API_KEY" in keyless.text
    for seen in (refused.content, keyless.content, every_byte_written(run_id)):
        assert real_key.encode() not in seen and real_key[:20].encode() not in seen
