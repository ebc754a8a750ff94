"""Prompt caching through a whole swarm (docs/cost.md): runs on a real dev server whose worker talks to a fake
model server with a fake prompt cache (tests/fake_caching.py) that counts and caches as Anthropic and OpenAI
document theirs. The fake's records are the provider's word: what each request read, wrote and was billed.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from reposwarm.cli.runs import build_request, start
from reposwarm.cli.worker import make_worker
from reposwarm.contracts import LaneStatus, Phase, SwarmStatus
from reposwarm.review.package import render_review, render_status
from reposwarm.runs import ledger
from tests.fake_caching import AnthropicCache, CacheRecord, OpenAICache
from tests.fake_models import FakeModelServer
from tests.helpers import finish, make_repo, start_dev_server, turn, wait_for_phase, write_yaml

SONNET = "anthropic:claude-sonnet-4-5"
PRICE = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
# About 2 KB: with the tool specs and LANE_SYSTEM the shared prefix is well past the 1,024-token minimum.
CONTRACT = "\n".join(f"- shared/names.py defines NAME_{i} = 'swarm-{i}'; every lane imports it from there and "
                     f"never redefines it (item {i} of the interface)." for i in range(18))
THREE = ("api", "web", "db")
# About 2 KB: each read adds a few hundred tokens, more than OpenAI's 128-token caching step
APP = "VERSION = 1  # {lane}\n" + "".join(f"# line {i}: nothing here but the version above\n" for i in range(40))


def scenario(tmp_path: Path, lanes: tuple[str, ...], model: str, *, contract: str = CONTRACT,
             files: dict[str, str] | None = None, **role: Any) -> tuple[Path, Path, Path]:
    """A repository with a folder per lane, a lanes file with a price for `model`, and a plan with no dependencies."""
    repo = make_repo(tmp_path / "repo", files or {f"{n}/app.py": APP.format(lane=n) for n in lanes})
    config = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {n: {"allowed_paths": [f"{n}/"], **role} for n in lanes}},
        "prices": {model: PRICE}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": contract, "summary": "names", "lanes": [
        {"lane": n, "goal": f"Read {n}/app.py and report its VERSION."} for n in lanes]})
    return repo, config, plan


def reads(lane: str, turns: int = 2, path: str = "") -> list[dict[str, Any]]:
    """A lane's script: `turns` reads of its file, then finish."""
    return [*[turn((f"{lane}{i}", "read_file", {"path": path or f"{lane}/app.py"})) for i in range(turns)],
            finish(f"{lane}f", f"{lane} read")]


@contextlib.asynccontextmanager
async def fake_worker(client: Client, monkeypatch: pytest.MonkeyPatch, wire: str, script: dict[str, Any],
                      caching: AnthropicCache | OpenAICache, delay_s: float = 0.3) -> AsyncIterator[FakeModelServer]:
    """A worker on a queue of its own whose provider (`wire`) is the fake server, with its fake cache."""
    queue = f"caching-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    prefix = "OPENAI" if wire == "openai" else "ANTHROPIC"
    with FakeModelServer(wire, script, caching=caching, delay_s=delay_s) as server:
        monkeypatch.setenv(f"{prefix}_BASE_URL", server.base_url)
        monkeypatch.setenv(f"{prefix}_API_KEY", "sk-caching-test-key")  # fake
        async with make_worker(client, queue):
            yield server


async def run_to_review(client: Client, files: tuple[Path, Path, Path], model: str) -> tuple[str, SwarmStatus]:
    repo, lanes, plan = files
    req = build_request(argparse.Namespace(repo=str(repo), task="Every lane reads its app's VERSION.",
                                           lanes=str(lanes), plan=str(plan), model=model))
    await start(client, req)
    status = await wait_for_phase(client, req.run_id, Phase.review, timeout=60)
    return req.run_id, status


async def three_lanes(client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                      ) -> tuple[FakeModelServer, AnthropicCache, str, SwarmStatus]:
    """Three lanes with no dependencies, on Anthropic, each reading twice then finishing: the run at its review."""
    cache = AnthropicCache()
    script = {"lanes": {n: {1: reads(n)} for n in THREE}}
    async with fake_worker(client, monkeypatch, "anthropic", script, cache) as server:
        run_id, status = await run_to_review(client, scenario(tmp_path, THREE, SONNET), SONNET)
    await client.get_workflow_handle(run_id).terminate("test done")
    return server, cache, run_id, status


def system_breakpoint(record: CacheRecord) -> Any:
    """The breakpoint at the end of the system blocks: the shared prefix."""
    marks = [b for b in record.breakpoints if b.region == "system"]
    assert len(marks) == 1, record.breakpoints
    return marks[0]


def cost(fresh: int, read: int, written: int, out: int) -> float:
    """Sonnet at $3 in / $15 out: reads at 0.1x, five-minute writes at 1.25x (the published ratios)."""
    return (fresh * 3 + read * 0.3 + written * 3.75 + out * 15) / 1e6


async def test_the_shared_prefix_is_written_once_by_the_warm_call_and_every_turn_reads_the_one_before(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server, cache, _, status = await three_lanes(client, tmp_path, monkeypatch)
    assert status.review is not None
    assert {lane.lane: lane.status for lane in status.review.lanes} == {n: LaneStatus.done for n in THREE}
    assert server.warmed == 1
    warm = next(r for r in cache.records if r.lane is None)
    assert warm.index == 0  # before any lane asked
    shared = system_breakpoint(warm)
    assert shared.prefix_tokens >= cache.min_tokens
    assert shared.hash in warm.written and cache.writes_of(shared.hash) == 1  # written once, by the warm call
    for lane in THREE:
        mine = cache.by_lane(lane)
        assert len(mine) == 3, lane
        first = mine[0]
        # the lanes started together (concurrent, during the fake's latency) and each read what the warm call wrote
        assert system_breakpoint(first).hash == shared.hash
        assert first.read == [shared.hash] and first.read_tokens == shared.prefix_tokens, lane
        for before, later in itertools.pairwise(mine):
            assert later.read_tokens >= before.prompt_tokens, (lane, later.index)
    assert cache.reads_of(shared.hash) == 3
    assert status.usage.cache_read_tokens == cache.read_tokens


@pytest.mark.parametrize("wire,model,lanes", [("anthropic", SONNET, ("api",)),
                                              ("openai", "openai:gpt-4o", ("api", "web"))])
async def test_no_warm_call_where_warming_does_not_pay(client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       wire: str, model: str, lanes: tuple[str, ...]) -> None:
    """One lane on Anthropic (its own first request writes the prefix), or two on gpt-4o whose cached input is half
    price (2 * (1 - 0.5) is not more than 1): the lanes write the prefix themselves."""
    cache: AnthropicCache | OpenAICache = AnthropicCache() if wire == "anthropic" else OpenAICache()
    script = {"lanes": {n: {1: reads(n, 1)} for n in lanes}}
    async with fake_worker(client, monkeypatch, wire, script, cache) as server:
        run_id, status = await run_to_review(client, scenario(tmp_path, lanes, model), model)
    await client.get_workflow_handle(run_id).terminate("test done")
    assert server.warmed == 0
    assert sorted(r.lane or "" for r in cache.records) == sorted(n for n in lanes for _ in range(2))
    if isinstance(cache, AnthropicCache):
        first, second = cache.by_lane("api")
        shared = system_breakpoint(first)
        assert shared.hash in first.written and first.read_tokens == 0  # the lane wrote it itself...
        assert second.read_tokens >= first.prompt_tokens  # ...and its next turn read it all
    else:
        assert all(cache.by_lane(n)[1].read_tokens > 0 for n in lanes)  # each lane's second turn hits


async def test_the_ledger_and_the_status_bill_what_the_provider_reported(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, cache, run_id, status = await three_lanes(client, tmp_path, monkeypatch)
    calls = [e for e in ledger.read(run_id) if e["event"] == "model_call"]
    assert len(calls) == len(cache.records) == 10 and all(e["outcome"] == "ok" for e in calls)
    for agent in ("cache", *THREE):
        lines = [e for e in calls if e["agent"] == agent]
        records = [r for r in cache.records if r.lane == (None if agent == "cache" else agent)]
        assert len(lines) == len(records) > 0, agent
        for e, r in zip(lines, records, strict=True):  # a lane's calls arrive one after the other, in ledger order
            fresh = r.prompt_tokens - r.read_tokens - r.written_tokens
            said = (e["input_tokens"], e["cache_read_tokens"], e["cache_write_tokens"], e["output_tokens"])
            assert said == (r.prompt_tokens, r.read_tokens, r.written_tokens, r.output_tokens), e["call_id"]
            assert e["cost_usd"] == pytest.approx(cost(fresh, r.read_tokens, r.written_tokens, r.output_tokens),
                                                  abs=1e-6), e["call_id"]
            assert e["uncached_cost_usd"] == pytest.approx((r.prompt_tokens * 3 + r.output_tokens * 15) / 1e6,
                                                           abs=1e-6), e["call_id"]
            assert e["billed_tokens"] == round(fresh + r.read_tokens * 0.1 + r.written_tokens * 1.25
                                               + r.output_tokens * 5), e["call_id"]
    u = status.usage
    assert u.model_calls == len(cache.records)
    assert u.input_tokens == sum(r.prompt_tokens for r in cache.records)
    assert u.cache_read_tokens == cache.read_tokens and u.cache_write_tokens == cache.written_tokens
    assert u.output_tokens == sum(r.output_tokens for r in cache.records)
    fresh_total = cache.uncached_tokens
    assert u.cost_usd == pytest.approx(cost(fresh_total, cache.read_tokens, cache.written_tokens, u.output_tokens),
                                       abs=1e-5)
    assert u.uncached_cost_usd == pytest.approx((u.input_tokens * 3 + u.output_tokens * 15) / 1e6, abs=1e-5)
    assert u.cost_usd < u.uncached_cost_usd / 2  # the cache more than halves this run's bill


async def test_the_turn_after_compaction_still_reads_the_lane_s_prefix(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lane with a 2,000-token context reads files of ~4 KB: its transcript is folded, and the request after that
    still reads the shared prefix and the lane's first message from the cache."""
    files = {f"api/part{i}.py": "".join(f"VALUE_{i}_{j} = {j}  # a line of part {i}\n" for j in range(110))
             for i in range(3)}
    cache = AnthropicCache()
    # (the fake counts the turns a compaction folded from its summary, "(N turns;": the lane goes on to finish)
    script = {"lanes": {"api": {1: [*[turn((f"r{i}", "read_file", {"path": f"api/part{i}.py"})) for i in range(3)],
                                    finish("f", "read all three")]}}}
    contract = CONTRACT[:1000]  # the head (shared context and goal) stays well inside the small context
    monkeypatch.setenv("REPOSWARM_CACHE_DIAGNOSTICS", "1")  # a custom base URL asks for them only when told
    async with fake_worker(client, monkeypatch, "anthropic", script, cache, delay_s=0.1) as server:
        run_id, status = await run_to_review(client, scenario(
            tmp_path, ("api",), SONNET, contract=contract, files=files, context_tokens=2000), SONNET)
    await client.get_workflow_handle(run_id).terminate("test done")
    assert status.review is not None and status.review.lanes[0].status == LaneStatus.done
    records = cache.by_lane("api")
    bodies = [b for b in server.answered if "Goal for lane api:" in json.dumps(b["messages"])]
    assert len(records) == len(bodies) == 4
    folded = [i for i, b in enumerate(bodies) if "Earlier turns, summarised" in json.dumps(b["messages"])]
    assert folded[0] == 2, "the transcript was not compacted at its third request"
    first, before, after = records[:3]
    assert after.prompt_tokens < before.prompt_tokens + 500  # folded: it did not grow by a whole file
    marks = [b for b in first.breakpoints if b.region == "messages"]
    assert marks, first.breakpoints
    lane_prefix = marks[0]  # the end of the lane's first message
    assert system_breakpoint(first).prefix_tokens >= cache.min_tokens
    assert lane_prefix.hash in first.written
    assert after.read_tokens >= lane_prefix.prefix_tokens, (after.read_tokens, lane_prefix.prefix_tokens)
    # the provider's reason for what it could not reuse, in the ledger: the folded messages
    lines = [e for e in ledger.read(run_id) if e["event"] == "model_call" and e["agent"] == "api"]
    assert [e.get("cache_miss", "").split(" ")[0] for e in lines][:3] == ["", "", "messages_changed"], lines


async def test_openai_requests_carry_the_run_s_cache_key_and_the_warm_call_serves_the_lanes(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = OpenAICache()
    script = {"lanes": {n: {1: reads(n)} for n in THREE}}
    model = "openai:gpt-4.1"  # cached input at a quarter: warming pays from two lanes
    async with fake_worker(client, monkeypatch, "openai", script, cache) as server:
        run_id, _ = await run_to_review(client, scenario(tmp_path, THREE, model), model)
    await client.get_workflow_handle(run_id).terminate("test done")
    key = f"reposwarm-{run_id}"[:64]
    assert server.requests and all(seen.body.get("prompt_cache_key") == key for seen in server.requests)
    assert {r.machine for r in cache.records} == {f"key:{key}"}
    assert server.warmed == 1 and cache.records[0].lane is None
    for lane in THREE:
        first, second, third = cache.by_lane(lane)
        assert first.read_tokens >= cache.min_tokens, lane  # what the warm call wrote: tools and system message
        # each later turn reads the whole turn before, to the 128-token step
        assert second.read_tokens > first.prompt_tokens - cache.step, lane
        assert third.read_tokens > second.prompt_tokens - cache.step, lane


async def test_status_and_review_show_the_cache_and_the_cost_without_it(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _, cache, _, status = await three_lanes(client, tmp_path, monkeypatch)
    shown = render_status(status)
    share = round(100 * cache.read_tokens / sum(r.prompt_tokens for r in cache.records))
    found = re.search(r"cache: (\d+)% of input read", shown)
    assert found, shown
    assert abs(int(found.group(1)) - share) <= 1
    assert status.review is not None
    review = render_review(status.review)
    cost_section = review.split("## Cost", 1)[1]
    assert "without caching" in cost_section and re.search(r"cache: \d+% of input read", cost_section)


async def test_an_hour_long_cache_marks_every_breakpoint_and_bills_its_writes_at_2x(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, lanes, plan = scenario(tmp_path, ("api",), SONNET)
    config = yaml.safe_load(lanes.read_text())
    config["swarm"]["cache_ttl"] = "1h"
    write_yaml(lanes, config)
    cache = AnthropicCache()
    async with fake_worker(client, monkeypatch, "anthropic", {"lanes": {"api": {1: reads("api")}}}, cache):
        run_id, _ = await run_to_review(client, (repo, lanes, plan), SONNET)
    await client.get_workflow_handle(run_id).terminate("test done")
    assert cache.records and all(b.ttl == "1h" for r in cache.records for b in r.breakpoints)
    assert sum(r.written_tokens for r in cache.records) > 0
    calls = [e for e in ledger.read(run_id) if e["event"] == "model_call" and e["outcome"] == "ok"]
    assert len(calls) == len(cache.records)
    for line, record in zip(calls, cache.records, strict=True):
        fresh = record.prompt_tokens - record.read_tokens - record.written_tokens
        expected = (fresh * 3 + record.read_tokens * 0.3 + record.written_tokens * 6 + record.output_tokens * 15) / 1e6
        assert line["cost_usd"] == pytest.approx(expected, abs=1e-6)


async def test_a_lane_that_continues_as_new_reads_its_conversation_on_the_turn_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reposwarm_home: Any) -> None:
    # (10 events, and turns that search: a search is no quick tool, so each turn is an activity of its own and the
    # lane can continue as new between them; turns of reads alone would all go on in its first activity)
    env = await start_dev_server(["--dynamic-config-value", "limit.historyCount.suggestContinueAsNew=10"])
    try:
        cache = AnthropicCache()
        files = scenario(tmp_path, ("api",), SONNET)
        searches = [*[turn((f"api{i}", "search", {"pattern": "VERSION"})) for i in range(8)], finish("apif", "api read")]
        async with fake_worker(env.client, monkeypatch, "anthropic", {"lanes": {"api": {1: searches}}}, cache):
            run_id, status = await run_to_review(env.client, files, SONNET)
        assert status.review is not None and status.review.lanes[0].status == LaneStatus.done
        runs = [w async for w in env.client.list_workflows(f"WorkflowId = '{run_id}.api'")]
        assert len(runs) > 1, "the lane never continued as new"
        lane = cache.by_lane("api")
        assert len(lane) == 9
        for before, after in itertools.pairwise(lane):  # the turn after each continue-as-new too
            assert after.read_tokens >= before.prompt_tokens, (before.index, after.index)
        await env.client.get_workflow_handle(run_id).terminate("test done")
    finally:
        await env.shutdown()
