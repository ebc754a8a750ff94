"""Real provider replies, as the APIs send them (tests/fixtures/provider_replies/), through the real providers' code.

A reply cut at the output limit, extended thinking (signed and redacted blocks), several calls in one reply, a
refusal, a paused turn, OpenAI's `length` and a reasoning model's usage: each is sent as is by the fake model server
(a script entry `{"wire": ...}`) to a lane on a real dev server, and each lane goes on. Every lane may make only
one malformed reply (`max_malformed_replies: 1`), so a reply wrongly counted as malformed fails it.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from reposwarm.cli.runs import build_request, start
from reposwarm.cli.worker import make_worker
from reposwarm.contracts import LaneResult, LanesFile, LaneStatus, Phase
from reposwarm.contracts.errors import ConfigError
from reposwarm.contracts.model import ModelRequest
from reposwarm.lanes.loading import load_lanes_file
from reposwarm.models import ModelError
from reposwarm.models.anthropic import INTERLEAVED_THINKING_BETA, MAX_CONTINUATIONS, AnthropicProvider
from reposwarm.models.limits import model_limit
from reposwarm.models.openai import OpenAIProvider
from reposwarm.runs import ledger
from tests.fake_models import FakeModelServer, Seen
from tests.helpers import finish, lane_workflow, make_repo, turn, wait_for_phase, write_yaml

FIXTURES = Path(__file__).parent / "fixtures" / "provider_replies"
GOAL = "Set VERSION to 2 in api/app.py."
EDIT = turn(("e1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n", "new": "VERSION = 2\n",
                                 "reason": "Set VERSION to 2 as the goal says"}))
SONNET, GPT, O4 = "anthropic:claude-sonnet-4-5", "openai:gpt-4.1", "openai:o4-mini"


def fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text(encoding="utf-8"))


def wire(*names: str) -> dict[str, Any]:
    """A script entry that sends the fixture (a paused turn and its continuations: several) as is."""
    replies = [fixture(n) for n in names]
    return {"wire": replies[0] if len(replies) == 1 else replies}


def compact(value: Any) -> bytes:
    """A JSON value as the HTTP client writes it into a request (httpx: compact, UTF-8)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def ask(model: str, **fields: Any) -> ModelRequest:
    return ModelRequest(model=model, system="You are a lane.", tools=[], agent="api", round=1, turn=0,
                        messages=[{"role": "user", "content": f"Goal for lane api: {GOAL}"}], **fields)


@pytest.fixture
def keys(monkeypatch: pytest.MonkeyPatch) -> Callable[[FakeModelServer], None]:
    monkeypatch.delenv("REPOSWARM_MAX_OUTPUT_TOKENS", raising=False)
    monkeypatch.setenv("REPOSWARM_CACHE_DIAGNOSTICS", "0")
    for prefix in ("OPENAI", "ANTHROPIC"):  # never a real API: a key, and no base URL until a fake serves one
        monkeypatch.delenv(f"{prefix}_BASE_URL", raising=False)
        monkeypatch.setenv(f"{prefix}_API_KEY", "sk-provider-replies-test-key")  # fake

    def serving(server: FakeModelServer) -> None:
        prefix = "OPENAI" if server.wire == "openai" else "ANTHROPIC"
        monkeypatch.setenv(f"{prefix}_BASE_URL", server.base_url)
        monkeypatch.setenv(f"{prefix}_API_KEY", "sk-provider-replies-test-key")  # fake
    return serving


# --- the reply's limit, thinking and reasoning options, as the providers send them ---


@pytest.mark.parametrize("model,limit", [
    ("claude-opus-4-1-20250805", 32_000), ("claude-opus-4-20250514", 32_000), ("claude-opus-4-5", 64_000),
    ("claude-sonnet-4-5-20250929", 64_000), ("claude-sonnet-4-20250514", 64_000), ("claude-haiku-4-5", 64_000),
    ("claude-3-7-sonnet-latest", 64_000), ("claude-3-5-haiku-20241022", 8_192), ("claude-3-5-sonnet-20241022", 8_192),
    ("claude-3-haiku-20240307", 4_096), ("anthropic.claude-sonnet-4-5-20250929-v1:0", 64_000),
    ("claude-next-preview", 8_192), ("my-gateway-model", 8_192)])
def test_max_tokens_defaults_to_what_the_model_allows(model: str, limit: int, keys: Any):
    assert model_limit(model) == limit
    assert AnthropicProvider().request_body(ask(model))["max_tokens"] == limit


def test_the_lane_s_limit_then_the_worker_s_then_the_model_s(keys: Any, monkeypatch: pytest.MonkeyPatch):
    provider = AnthropicProvider()
    monkeypatch.setenv("REPOSWARM_MAX_OUTPUT_TOKENS", "2048")
    assert provider.request_body(ask("claude-opus-4-1"))["max_tokens"] == 2048
    assert provider.request_body(ask("claude-opus-4-1", max_tokens=12_000))["max_tokens"] == 12_000
    thinking = ask("claude-sonnet-4-5", thinking_tokens=10_000)
    body = provider.request_body(thinking)
    # the worker's 2,048 is below the budget: raised to fit it, as the API requires max_tokens above it
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 10_000} and body["max_tokens"] > 10_000
    assert INTERLEAVED_THINKING_BETA in provider.headers(thinking)["anthropic-beta"].split(",")
    assert "anthropic-beta" not in provider.headers(ask("claude-sonnet-4-5"))
    with pytest.raises(ModelError, match="must be below") as err:
        provider.request_body(ask("claude-sonnet-4-5", thinking_tokens=10_000, max_tokens=8_000))
    assert not err.value.retryable
    monkeypatch.setenv("REPOSWARM_MAX_OUTPUT_TOKENS", "lots")
    with pytest.raises(ModelError, match="REPOSWARM_MAX_OUTPUT_TOKENS"):
        AnthropicProvider()


def test_openai_sends_no_limit_unless_set_and_reasoning_models_get_max_completion_tokens(keys: Any):
    provider = OpenAIProvider()
    assert not {"max_tokens", "max_completion_tokens", "reasoning_effort"} & set(provider.request_body(ask("gpt-4.1")))
    assert provider.request_body(ask("gpt-4.1", max_tokens=4096))["max_tokens"] == 4096
    for model in ("o1", "o3-mini", "o4-mini-2025-04-16", "gpt-5", "gpt-5-mini", "gpt-5.1", "openai/gpt-5-nano"):
        body = provider.request_body(ask(model, max_tokens=16_000, reasoning_effort="high"))
        assert (body["max_completion_tokens"], body["reasoning_effort"]) == (16_000, "high"), model
        assert "max_tokens" not in body
    assert "max_completion_tokens" not in provider.request_body(ask("gpt-4o", max_tokens=10))


def test_the_lanes_file_checks_the_reply_options(tmp_path: Path):
    def load(**role: Any) -> LanesFile:
        return load_lanes_file(write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"api": {
            "allowed_paths": ["api/"], **role}}}}))
    lane = load(max_output_tokens=16_000, thinking_tokens=8_000, reasoning_effort="high").swarm.lanes["api"]
    assert (lane.max_output_tokens, lane.thinking_tokens, lane.reasoning_effort) == (16_000, 8_000, "high")
    for bad, said in [({"thinking_tokens": 8_000, "max_output_tokens": 4_000}, "must be below max_output_tokens"),
                      ({"thinking_tokens": 512}, "thinking_tokens"), ({"reasoning_effort": "max"}, "reasoning_effort"),
                      ({"max_output_tokens": 0}, "max_output_tokens")]:
        with pytest.raises(ConfigError, match=said):
            load(**bad)


# --- each fixture through the provider's code ---


async def reply_to(wire_name: str, entry: dict[str, Any], keys: Any, model: str, **fields: Any):
    with FakeModelServer(wire_name, {"lanes": {"api": {1: [entry]}}}) as server:
        keys(server)
        provider = AnthropicProvider() if wire_name == "anthropic" else OpenAIProvider()
        return await provider.complete(ask(model, **fields)), server


async def test_anthropic_replies_keep_their_stop_reason_thinking_and_calls(keys: Any):
    cut, _ = await reply_to("anthropic", wire("anthropic/max_tokens_mid_tool_use.json"), keys, "claude-sonnet-4-5",
                            max_tokens=8192)
    assert (cut.stop_reason, cut.output_limit, cut.usage.output_tokens) == ("max_tokens", 8192, 8192)
    assert [c.name for c in cut.tool_calls] == ["write_file"] and cut.thinking == ""
    sent = fixture("anthropic/redacted_thinking.json")
    reply, _ = await reply_to("anthropic", {"wire": sent}, keys, "claude-sonnet-4-5", thinking_tokens=4096)
    assert json.loads(reply.thinking) == sent["content"][:2]  # the thinking and the redacted block, as they came
    assert reply.stop_reason == "tool_use" and [c.id for c in reply.tool_calls] == ["toolu_01Nd4Fg7Kp2Qw9Xs6Bv3Yt8M"]
    refused, _ = await reply_to("anthropic", wire("anthropic/refusal.json"), keys, "claude-sonnet-4-5")
    assert refused.stop_reason == "refusal" and "cyber harm" in refused.stop_detail and refused.content == ""


async def test_a_paused_turn_is_continued_with_its_content_as_it_came_and_its_usage_summed(keys: Any):
    paused, continued = fixture("anthropic/pause_turn.json"), fixture("anthropic/pause_turn_continued.json")
    reply, server = await reply_to("anthropic", {"wire": [paused, continued]}, keys, "claude-sonnet-4-5")
    first, second = (seen.body for seen in server.requests)
    assert second["messages"] == [*first["messages"], {"role": "assistant", "content": paused["content"]}]
    assert {k: v for k, v in second.items() if k != "messages"} == {k: v for k, v in first.items() if k != "messages"}
    assert reply.stop_reason == "tool_use" and [c.name for c in reply.tool_calls] == ["read_file"]
    assert reply.content.startswith(paused["content"][0]["text"]) and continued["content"][0]["text"] in reply.content
    assert (reply.usage.input_tokens, reply.usage.output_tokens) == (2231 + 2950, 96 + 61)
    # bounded: a turn that pauses every time is continued MAX_CONTINUATIONS times, then given back as it stands
    reply, server = await reply_to("anthropic", {"wire": [paused] * 10}, keys, "claude-sonnet-4-5")
    assert len(server.requests) == 1 + MAX_CONTINUATIONS and reply.stop_reason == "pause_turn"
    assert [len(s.body["messages"][-1]["content"]) for s in server.requests[1:]] == [3, 6, 9]


async def test_openai_replies_keep_length_refusal_and_reasoning_tokens(keys: Any):
    cut, _ = await reply_to("openai", wire("openai/length_tool_call.json"), keys, "gpt-4.1", max_tokens=4096)
    assert (cut.stop_reason, cut.output_limit) == ("length", 4096)
    assert cut.tool_calls[0].arguments == {"path": "api/app.py"} and cut.tool_calls[1].arguments is None
    reasoning, server = await reply_to("openai", wire("openai/reasoning_usage.json"), keys, "o4-mini",
                                       max_tokens=16_000, reasoning_effort="low")
    assert reasoning.usage.output_tokens == 1186  # completion_tokens, whose 1,024 reasoning tokens are output
    assert (reasoning.usage.input_tokens, reasoning.usage.cache_read_tokens) == (1902, 1792)
    assert server.requests[0].body["max_completion_tokens"] == 16_000
    refused, _ = await reply_to("openai", wire("openai/refusal.json"), keys, "gpt-4.1")
    assert refused.stop_reason == "refusal" and refused.stop_detail.startswith("I'm sorry") and refused.content == ""


# --- each in a lane on a real dev server, which goes on ---


async def lane_run(client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: Any, model: str,
                   turns: list[dict[str, Any]], **role: Any) -> tuple[list[Seen], LaneResult, str, str]:
    """One lane (api/, `role` in the lanes file) whose model plays `turns`, run to its review: what the model
    server was sent, the lane's result, its workflow's history (JSON) and the run."""
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"api": {
        "allowed_paths": ["api/"], "max_malformed_replies": 1, **role}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports VERSION.",
                                               "lanes": [{"lane": "api", "goal": GOAL}]})
    queue = f"replies-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    with FakeModelServer(model.partition(":")[0], {"lanes": {"api": {1: turns}}}) as server:
        keys(server)
        async with make_worker(client, queue):
            req = build_request(argparse.Namespace(repo=str(repo), task=GOAL, lanes=str(lanes), plan=str(plan),
                                                   model=model))
            await start(client, req)
            status = await wait_for_phase(client, req.run_id, Phase.review, timeout=60)
            history = await client.get_workflow_handle(await lane_workflow(client, req.run_id, "api")).fetch_history()
    await client.get_workflow_handle(req.run_id).terminate("test done")
    assert status.review is not None
    return server.requests, status.review.lanes[0], history.to_json(), req.run_id


def done(lane: LaneResult, calls: int) -> None:
    """The lane finished, with its edit of api/app.py and nothing else (no cut call ran), and made `calls` calls."""
    assert (lane.status, lane.reason) == (LaneStatus.done, ""), lane.reason
    assert [e.path for e in lane.edits] == ["api/app.py"] and lane.tool_calls == calls


def tool_results(seen: Seen) -> dict[str, str]:
    """The tool results a request carries, by call id (Anthropic: those of its last message)."""
    messages = seen.body["messages"]
    if any(m["role"] == "tool" for m in messages):  # OpenAI: a message per result
        return {m["tool_call_id"]: m["content"] for m in messages if m["role"] == "tool"}
    return {b["tool_use_id"]: b["content"] for b in messages[-1]["content"] if b["type"] == "tool_result"}


async def test_a_cut_reply_and_thinking_go_on_without_a_strike_and_the_thinking_goes_back_intact(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: Any):
    thought, cut = fixture("anthropic/thinking_tool_use.json"), fixture("anthropic/max_tokens_mid_tool_use.json")
    interleaved = fixture("anthropic/thinking_after_tool_result.json")
    sent, lane, history, run_id = await lane_run(client, tmp_path, monkeypatch, keys, SONNET, [
        {"wire": thought}, {"wire": cut}, {"wire": interleaved}, finish("f1")],
        thinking_tokens=4096, max_output_tokens=8192)
    done(lane, 4)  # read; the cut write (not run: a reply with no usable call, yet no strike); edit; finish
    assert [s.body["max_tokens"] for s in sent] == [8192] * 4
    assert all(s.body["thinking"] == {"type": "enabled", "budget_tokens": 4096} for s in sent)
    assert all(INTERLEAVED_THINKING_BETA in s.headers["anthropic-beta"] for s in sent)
    block, later = thought["content"][0], interleaved["content"][0]
    # Every later request's assistant message opens with its thinking block, byte for byte, signature included.
    for seen in sent[1:]:
        assert seen.body["messages"][1]["content"][0] == block
        assert compact(block) in seen.raw
    assert sent[3].body["messages"][5]["content"][0] == later and compact(later) in sent[3].raw
    # The cut reply: its cut write did not run, and its result said why and how to go on.
    note = tool_results(sent[2])["toolu_01VRhY4XU4dcBZ1fCyaSBdiT"]
    assert "cut at the output limit of 8,192 tokens" in note and "write_file of api/handlers.py" in note
    assert "edit_file" in note and "in parts" in note and "before it ran" not in note
    cut_call = sent[2].body["messages"][3]["content"][-1]
    assert cut_call["id"] == "toolu_01VRhY4XU4dcBZ1fCyaSBdiT" and cut_call["input"] == {}  # not its cut text
    assert any("write_file api/handlers.py" in line for line in lane.failed_calls)
    # The thinking stayed out of Temporal's history: in the store only. The ledger names the cut.
    assert block["signature"] not in history and later["signature"] not in history
    calls = [e for e in ledger.read(run_id) if e["event"] == "model_call" and e["agent"] == "api"]
    assert [e.get("stop_reason") for e in calls] == [None, "max_tokens", None, None]


async def test_redacted_thinking_goes_back_in_order_and_several_calls_run_in_order(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: Any):
    redacted, parallel = fixture("anthropic/redacted_thinking.json"), fixture("anthropic/parallel_tool_use.json")
    sent, lane, *_ = await lane_run(client, tmp_path, monkeypatch, keys, SONNET, [
        {"wire": redacted}, {"wire": parallel}, EDIT, finish("f1")], thinking_tokens=2048)
    done(lane, 6)
    assert sent[1].body["messages"][1]["content"][:2] == redacted["content"][:2]
    assert compact(redacted["content"][1]) in sent[1].raw
    # Three calls in one reply, with thinking before them: each ran, in order, and each was answered.
    assistant = sent[2].body["messages"][3]["content"]
    assert [b["type"] for b in assistant] == ["thinking", "text", "tool_use", "tool_use", "tool_use"]
    ids = [b["id"] for b in parallel["content"] if b["type"] == "tool_use"]
    results = sent[2].body["messages"][4]["content"]
    assert [b["tool_use_id"] for b in results if b["type"] == "tool_result"] == ids
    answers = tool_results(sent[2])
    assert answers[ids[0]].endswith("VERSION = 1\n") and "app.py" in answers[ids[1]] and "api/app.py" in answers[ids[2]]


async def test_a_paused_turn_continues_in_its_own_call_and_the_lane_goes_on(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: Any):
    paused = fixture("anthropic/pause_turn.json")
    sent, lane, *_ = await lane_run(client, tmp_path, monkeypatch, keys, SONNET, [
        wire("anthropic/pause_turn.json", "anthropic/pause_turn_continued.json"), EDIT, finish("f1")])
    done(lane, 3)
    assert len(sent) == 4 and sent[1].body["messages"][-1] == {"role": "assistant", "content": paused["content"]}
    assert lane.usage.model_calls == 3 and lane.usage.input_tokens >= 2231 + 2950
    # the next turn's transcript holds the whole turn: both texts and the client tool's call, no server blocks
    turn_kept = sent[2].body["messages"][1]["content"]
    assert [b["type"] for b in turn_kept] == ["text", "tool_use"] and "Reading the module" in turn_kept[0]["text"]


@pytest.mark.parametrize("model,name", [(SONNET, "anthropic/refusal.json"), (GPT, "openai/refusal.json")])
async def test_a_refusal_is_told_to_the_lane_and_twice_in_a_row_ends_it(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: Any, model: str, name: str):
    sent, lane, *_ = await lane_run(client, tmp_path / "once", monkeypatch, keys, model,
                                   [wire(name), EDIT, finish("f1")])
    done(lane, 2)
    why = "cyber harm" if model == SONNET else "I'm sorry, but I can't help"
    text = json.dumps(sent[1].body["messages"])
    assert "declined to answer" in text and why in text and "this reply was declined and withheld" in text
    sent, lane, *_ = await lane_run(client, tmp_path / "twice", monkeypatch, keys, model,
                                   [wire(name), wire(name), finish("f1")])
    assert lane.status == LaneStatus.failed and len(sent) == 2
    assert "declined 2 replies in a row" in lane.reason and why in lane.reason


async def test_openai_length_with_a_cut_call_and_a_reasoning_model_go_on(
        client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, keys: Any):
    sent, lane, *_ = await lane_run(client, tmp_path / "length", monkeypatch, keys, GPT, [
        wire("openai/length_tool_call.json"), EDIT, finish("f1")], max_output_tokens=4096)
    done(lane, 4)
    assert sent[0].body["max_tokens"] == 4096 and "max_completion_tokens" not in sent[0].body
    calls = sent[1].body["messages"][2]["tool_calls"]
    assert [c["function"]["arguments"] for c in calls] == ['{"path":"api/app.py"}', "{}"]  # the cut one: not its text
    results = tool_results(sent[1])
    assert results["call_Vx1bT9kQm2Lr8Pz4"].endswith("VERSION = 1\n")
    assert "cut at the output limit of 4,096 tokens" in results["call_Zz8Pq3Wn6Ys1Kd5J"]
    sent, lane, *_ = await lane_run(client, tmp_path / "reasoning", monkeypatch, keys, O4, [
        wire("openai/reasoning_usage.json"), EDIT, finish("f1")], reasoning_effort="high", max_output_tokens=16_000)
    done(lane, 3)
    assert all((s.body["reasoning_effort"], s.body["max_completion_tokens"]) == ("high", 16_000) for s in sent)
    assert all("max_tokens" not in s.body and "thinking" not in m for s in sent for m in s.body["messages"])
    assert lane.usage.output_tokens >= 1186  # the reasoning tokens counted


def test_a_recorded_cut_reply_plays_back_as_a_cut_reply(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """`--record` keeps how a reply ended, so its replay script cuts where the provider cut (not runs a half call)."""
    from reposwarm.contracts.model import ModelReply
    from reposwarm.models import tool_call
    from reposwarm.models.replay import _reply
    from reposwarm.runs import recording

    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path))
    cut = ModelReply(tool_calls=[tool_call("c1", "write_file", '{"path": "a.py", "content": "x = ')],
                     stop_reason="max_tokens", output_limit=8192)
    recording.save("run-cut", "api", 1, 0, cut)
    script = recording.replay_script("run-cut")
    played = _reply(script["lanes"]["api"][1][0], "api r1 t0")
    assert (played.stop_reason, played.output_limit) == ("max_tokens", 8192)
    plain = _reply({"content": "done"}, "api r1 t1")
    assert (plain.stop_reason, plain.output_limit) == ("", None)


def test_a_request_that_allows_a_long_reply_waits_for_it_inside_the_activity_s_time(
        monkeypatch: pytest.MonkeyPatch):
    from reposwarm.models.http import timeouts

    monkeypatch.delenv("REPOSWARM_MODEL_TIMEOUT_S", raising=False)
    assert timeouts().read == 300 and timeouts(8_192).read == 300  # a short reply: the default
    assert timeouts(20_000).read == 400  # 20,000 tokens at 50 a second
    assert timeouts(64_000).read == 570  # never past the model activity's 10-minute start-to-close
    monkeypatch.setenv("REPOSWARM_MODEL_TIMEOUT_S", "90")
    assert timeouts(64_000).read == 90  # the worker's own setting wins
