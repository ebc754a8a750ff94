"""A dry run's estimate of what each lane will spend, before any lane starts.

A coarse model, stated plainly: each turn sends the whole conversation so far
(system prompt, tool specs, the lane's first message, and every earlier turn's
call and result) and gets a short reply. It is an estimate, for comparing a
plan against the lanes' budgets, not a promise.
"""

from __future__ import annotations

from reposwarm.contracts import HelperRole, LaneEstimate, ModelPrice

TOOL_SPEC_TOKENS = 1_100  # the nine tool specs as JSON schema
SYSTEM_TOKENS = 150
TURN_GROWTH_TOKENS = 900  # a tool call and a typical result, added to every later turn
REPLY_TOKENS = 250
TYPICAL_TURNS = 12


def estimate_lane(lane: str, model: str, role: HelperRole, first_message: str,
                  price: ModelPrice | None) -> LaneEstimate:
    turns = min(role.max_turns, TYPICAL_TURNS)
    first = SYSTEM_TOKENS + TOOL_SPEC_TOKENS + len(first_message) // 4
    input_tokens = sum(min(first + t * TURN_GROWTH_TOKENS, role.context_tokens) for t in range(turns))
    output_tokens = turns * REPLY_TOKENS
    return LaneEstimate(lane=lane, model=model, turns=turns, input_tokens=input_tokens, output_tokens=output_tokens,
                        token_budget=role.token_budget,
                        cost_usd=price.cost(input_tokens, output_tokens) if price else None)
