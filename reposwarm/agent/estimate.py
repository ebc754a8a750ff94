"""A dry run's estimate of what each lane will spend, before any lane starts.

The model, stated plainly. Every turn sends the whole request again: the system prompt, the tool specs,
the lane's first message and the conversation so far; each turn adds its reply and its tool results to
that conversation, and gets a short reply.

    request(t) = SYSTEM + TOOLS + FIRST + t * GROWTH        (turn t = 0, 1, ...; capped where compaction cuts)
    input      = sum of request(t) over the lane's turns
    output     = turns * REPLY

- SYSTEM and TOOLS are measured at import from the very text and specs the lane sends (prompts.LANE_SYSTEM,
  tools.tool_specs()), and FIRST from the lane's own first message, as JSON, at 4 characters a token: the
  count reposwarm itself uses when a provider reports no usage (models/calls.py) and for compaction
  (agent/conversation.py). SYSTEM was 124 and TOOLS 865 tokens when calibrated below; since the operating
  procedure and the `run` tool (2026-12-01) they are 711 and 1,190, and FIRST includes the run's shared
  context (conversation.lane_opening). With a provider that caches, billed_tokens counts the shared prefix as read,
  each turn as reading the one before and writing what it added (contracts/cost.py rates).
- turns = 1 (find one's way: list, read what the change builds on) + 2 per target (read it, then write
  or edit it) + 2 (run the checks, finish), at most the role's max_turns. The targets are what the lane
  will touch, the most of: the distinct paths and file names its goal names, the paths it may write (the
  plan's slice when the plan narrowed one), and one per GOAL_CHARS_PER_TARGET characters of goal (a long
  goal is a lot of work even when it names no file). The goal and paths are read back from the first
  message, whose layout prompts.lane_first_message fixes.
- The conversation never outgrows what compaction leaves: it is folded once it reaches 80% of the role's
  context_tokens (conversation.compact), so no turn sends more than SYSTEM + TOOLS + that.

Calibrated on the bundled demo (reposwarm/demo: lanes.yaml, plan.yaml, replay.yaml) run end to end through
the test harness; tests/test_estimate.py runs it again and checks each lane is within 2x. "Tokens" are what
the run counted for the lane: the usage its replies recorded, as a real provider reports it (system prompt
and tool specs included).

    lane          turns  tokens (in + out)   estimated turns  estimated tokens   estimate / actual
    db_migration      6       20,830               7              25,207              1.21
    api_layer         5       19,040               5              15,230              0.80
    client            5       18,900               5              15,180              0.80
    test_author       5       23,490               7              25,368              1.08

and what the demo's requests measured: the first request is 6,450-6,560 characters (system 497, tool specs
3,461, first message 2,490-2,590), about 1,610 tokens against the 1,400-1,600 its providers recorded; the
conversation then grew by 2,322 characters a turn on average (assistant replies of 1,030 characters, tool
results of 650 each, 1.5 a turn), hence GROWTH = REPLY + RESULT = 250 + 330 tokens; and the replies were
246 output tokens a turn on average (5,160 over 21 turns), hence REPLY = 250. The demo's files are small;
a repository of larger files grows faster per turn, so treat the figure for a big lane as a floor.

Not calibrated on the oracle (models/oracle.py, for trials): its lanes take 2 turns (every file in one
reply, then finish) and report no usage, so the run counts only the messages at 4 characters a token,
leaving out the system prompt and tool specs a real model is sent (293-618 tokens a lane on
tests/test_trials.py's history, where a real request would carry about 1,000 more a turn).

An estimate, for comparing a plan against the lanes' budgets, not a promise. It reads nothing and asks
nothing at call time (it runs inside the workflow); the module-level figures are computed once at import.
"""

from __future__ import annotations

import json
import math
import re

from reposwarm.agent import conversation
from reposwarm.agent.conversation import CHARS_PER_TOKEN, Message, UserMessage
from reposwarm.agent.prompts import LANE_SYSTEM
from reposwarm.agent.specs import tool_specs
from reposwarm.contracts import HelperRole, LaneEstimate, ModelPrice
from reposwarm.contracts.cost import rates

SYSTEM_TOKENS = len(LANE_SYSTEM) // CHARS_PER_TOKEN  # sent with every turn
TOOL_SPEC_TOKENS = len(json.dumps(tool_specs())) // CHARS_PER_TOKEN  # sent with every turn
REPLY_TOKENS = 250  # a turn's reply (its tool calls, a written file's content); demo: 246
RESULT_TOKENS = 330  # the tool results a turn adds to the conversation; demo: 1.5 results of 650 characters
TURN_GROWTH_TOKENS = REPLY_TOKENS + RESULT_TOKENS  # demo: 2,322 characters a turn
OPENING_TURNS = 1  # find one's way: list a folder, read what the change builds on
TURNS_PER_TARGET = 2  # read it, then write or edit it
CLOSING_TURNS = 2  # run the checks, finish
GOAL_CHARS_PER_TARGET = 300  # the demo's goals are 190-250 characters, one to two files each
COMPACT_AT = 0.8  # conversation.compact folds the conversation once it reaches this share of context_tokens

_GOAL = re.compile(r"\AGoal for lane [^\n]*\n(.*?)\n\n(?:The whole change \(for context\):|You may write: )", re.S)
_WRITABLE = re.compile(r"^You may write: (.*)\nYou may also read: ", re.M)
# a path (a/b, a/b.py, src/**/x) or a file name with an extension (0002_add.sql, client.js)
_PATH = re.compile(r"(?<![\w/.*-])(?:[\w.*-]+/)+[\w.*-]*|\b[\w-]+\.[A-Za-z][A-Za-z0-9]{0,4}\b")


Opening = str | list[Message]  # the lane's first message, or its whole opening (conversation.lane_opening)


def _messages(opening: Opening) -> list[Message]:
    return [UserMessage(content=opening)] if isinstance(opening, str) else opening


def _first(opening: Opening) -> str:
    return opening if isinstance(opening, str) else opening[-1].content or ""


def goal_and_paths(first_message: Opening, role: HelperRole) -> tuple[str, list[str]]:
    """The goal and writable paths, read back from the first message (prompts.lane_first_message): the goal
    the plan gave, and the paths of the plan's slice. A message in another shape is all goal, with the role's
    paths."""
    text = _first(first_message)
    goal = _GOAL.match(text)
    writable = _WRITABLE.findall(text)
    paths = [p for p in writable[-1].split(", ") if p] if writable else []
    return (goal.group(1) if goal else text), (paths or list(role.allowed_paths))


def targets(goal: str, writable: list[str]) -> int:
    """How many things the lane will touch, by what its goal names and how long it is."""
    named = {m.rstrip(".") for m in _PATH.findall(goal)}
    return max(1, len(named), len(writable), math.ceil(len(goal) / GOAL_CHARS_PER_TARGET))


def expected_turns(first_message: Opening, role: HelperRole) -> int:
    goal, writable = goal_and_paths(first_message, role)
    return min(role.max_turns, OPENING_TURNS + TURNS_PER_TARGET * targets(goal, writable) + CLOSING_TURNS)


def first_request_tokens(first_message: Opening) -> int:
    """The lane's first request, as model_turn sends it: system prompt, tool specs and the opening messages."""
    return SYSTEM_TOKENS + TOOL_SPEC_TOKENS + conversation.tokens(_messages(first_message))


def estimate_lane(lane: str, model: str, role: HelperRole, first_message: Opening,
                  price: ModelPrice | None) -> LaneEstimate:
    turns = expected_turns(first_message, role)
    fixed = SYSTEM_TOKENS + TOOL_SPEC_TOKENS  # resent every turn, never compacted
    opening = _messages(first_message)
    shared = fixed + conversation.tokens(opening[:-1]) if len(opening) > 1 else fixed
    first = first_request_tokens(first_message) - fixed
    most = max(first, int(role.context_tokens * COMPACT_AT))  # the conversation compaction lets through
    requests = [fixed + min(first + t * TURN_GROWTH_TOKENS, most) for t in range(turns)]
    output_tokens = turns * REPLY_TOKENS
    # Billed, with the provider's cache (contracts/cost.py rates; all 1 where nothing is cached): the run's shared
    # prefix is read (one write serves every lane of the round), then each turn reads the request before it and
    # writes what it added; a turn that compaction cut writes everything after the shared prefix again.
    r = rates(model, price)
    billed_in = 0.0
    for t, sent in enumerate(requests):
        if t == 0:
            billed_in += shared * r.read + (sent - shared) * r.write
        elif sent > requests[t - 1]:
            billed_in += requests[t - 1] * r.read + (sent - requests[t - 1]) * r.write
        else:
            billed_in += shared * r.read + (sent - shared) * r.write
    cost = (round((billed_in * price.input_per_mtok + output_tokens * price.output_per_mtok) / 1e6, 6)
            if price else None)
    return LaneEstimate(lane=lane, model=model, turns=turns, input_tokens=sum(requests),
                        output_tokens=output_tokens, token_budget=role.token_budget, cost_usd=cost,
                        billed_tokens=round(billed_in + output_tokens * r.output),
                        uncached_cost_usd=price.cost(sum(requests), output_tokens) if price else None)
