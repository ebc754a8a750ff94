"""The conversation as typed messages (reposwarm/agent/conversation.py): the dicts at its edges are the very bytes
reposwarm always built (a provider's prompt cache and the recorded histories depend on them), every open call is
answered, and finish is checked once."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from reposwarm.agent import conversation
from reposwarm.agent.conversation import (
    AssistantMessage,
    RequestedCall,
    SystemMessage,
    ToolResult,
    UserMessage,
    answer_open_calls,
    checked_calls,
    finish_outcome,
    from_wire,
    replied,
    to_wire,
)
from reposwarm.agent.prompts import LOST_RESULT
from reposwarm.contracts import ToolCall
from reposwarm.contracts.model import ModelReply

HISTORIES = sorted((Path(__file__).parent / "histories").glob("*/*.json"))

# Each kind of message as reposwarm built it as a dict before it had types, key for key in that order.
AS_BUILT: list[dict[str, Any]] = [
    {"role": "system", "content": "The whole change (for context):\nx"},
    {"role": "user", "content": "Goal for lane api:\ndo it"},
    {"role": "assistant", "content": "I read it first.", "provider_id": "msg_01", "thinking": "[{\"type\": \"t\"}]",
     "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "read_file",
                                                                  "arguments": "{\"path\": \"api/app.py\"}"}}]},
    {"role": "assistant", "content": ""},
    {"role": "tool", "tool_call_id": "c1", "content": "1: VERSION = 1"},
    {"role": "tool", "tool_call_id": "c2", "content_ref": "sha256-abc"},
]


def test_every_kind_of_message_comes_back_as_the_same_bytes() -> None:
    typed = from_wire(AS_BUILT)
    assert [type(m) for m in typed] == [SystemMessage, UserMessage, AssistantMessage, AssistantMessage, ToolResult,
                                        ToolResult]
    assert json.dumps(to_wire(typed)) == json.dumps(AS_BUILT)  # same keys, same order: the same request bytes


def test_a_reply_becomes_the_assistant_message_it_always_was() -> None:
    reply = ModelReply(content="I read it first.", provider_id="msg_01", thinking="[{\"type\": \"t\"}]",
                       tool_calls=[ToolCall(id="c1", name="read_file", arguments={"path": "api/app.py"},
                                            raw_arguments="{\"path\": \"api/app.py\"}")])
    assert json.dumps(replied(reply).wire()) == json.dumps(AS_BUILT[2])
    assert replied(ModelReply()).wire() == {"role": "assistant", "content": ""}  # no bookkeeping keys when empty


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_the_messages_in_recorded_histories_keep_their_shape(path: Path) -> None:
    """Every message a lane put in workflow history (a model turn's new messages, the messages to start afresh
    from), read as typed messages and written back, is the JSON it was."""
    seen, events = 0, json.loads(path.read_text())["events"]
    for event in events:
        scheduled = event.get("activityTaskScheduledEventAttributes")
        if not scheduled or scheduled["activityType"]["name"] != "model_turn":
            continue
        turn = json.loads(base64.b64decode(scheduled["input"]["payloads"][0]["data"]))
        for messages in (turn.get("new_messages") or [], turn.get("if_lost") or []):
            assert json.dumps(to_wire(from_wire(messages))) == json.dumps(messages)
            seen += len(messages)
    if events[0]["workflowExecutionStartedEventAttributes"]["workflowType"]["name"] == "LaneWorkflow":
        assert seen, f"{path.name}: a lane's history with no model turn's messages"


def test_an_open_call_is_answered_as_lost_and_an_answered_one_is_left_alone() -> None:
    messages = from_wire([
        {"role": "user", "content": "goal"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "read_file", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "read_file", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "a", "content": "ok"},
        {"role": "user", "content": "You are resuming on another machine"},
    ])
    answered = to_wire(answer_open_calls(messages))
    assert answered[3] == {"role": "tool", "tool_call_id": "b", "content": LOST_RESULT}
    assert [m["role"] for m in answered] == ["user", "assistant", "tool", "tool", "user"]
    assert to_wire(answer_open_calls(messages[:3])) == to_wire(messages[:3])  # nothing after the calls: as it was


def test_compaction_counts_the_turns_an_earlier_summary_folded() -> None:
    messages: list[conversation.Message] = [UserMessage(content="Goal for lane api: do the thing")]
    for i in range(30):
        messages += [AssistantMessage(content=f"step {i}", tool_calls=[RequestedCall(
            id=f"c{i}", name="read_file", arguments=json.dumps({"path": f"api/f{i}.py"}))]),
            ToolResult(tool_call_id=f"c{i}", content="x" * 2000)]
    once, changed = conversation.compact(messages, limit=8000)
    assert changed and isinstance(once[1], UserMessage)
    first = int(once[1].content.split("(", 1)[1].split(" turns")[0])
    more = once + [m for i in range(30, 40) for m in (
        AssistantMessage(content=f"step {i}", tool_calls=[RequestedCall(id=f"c{i}", name="list_dir")]),
        ToolResult(tool_call_id=f"c{i}", content="y" * 2000))]
    twice, changed = conversation.compact(more, limit=8000)
    assert changed
    second = int(twice[1].content.split("(", 1)[1].split(" turns")[0])
    assert second > first  # the second summary counts the turns the first one folded too
    assert conversation.tokens(twice) < 8000


def test_finish_is_checked_once_and_its_outcome_counts_as_a_call() -> None:
    good = ToolCall(id="f1", name="finish", arguments={"summary": "done"}, raw_arguments="{\"summary\": \"done\"}")
    calls, finish = checked_calls([good], 1_000)
    assert finish is not None and finish.summary == "done" and calls[0].error is None
    outcome = finish_outcome(calls[0])
    assert outcome.ok and outcome.output == "finished" and not outcome.malformed

    twice, finish = checked_calls([good, good.model_copy(update={"id": "f2"})], 1_000)
    assert finish is None and all("called 2 times" in (c.error or "") for c in twice)
    bad = finish_outcome(twice[0])
    assert not bad.ok and bad.malformed and bad.output.startswith("error: finish was called 2 times")
    assert bad.output_chars == len(bad.output)

    nul = ToolCall(id="f3", name="finish", arguments={"summary": "a\x00b"}, raw_arguments="{}")
    calls, finish = checked_calls([nul], 1_000)
    assert finish is None and "NUL" in (calls[0].error or "")
    long = ToolCall(id="f4", name="read_file", arguments={}, raw_arguments="{}")
    calls, _ = checked_calls([long], 20)
    assert calls[0].error is not None and len(calls[0].error) == 20  # an error is bounded as asked
