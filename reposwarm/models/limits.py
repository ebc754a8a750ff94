"""How long a model's reply may be (what a lane is told when its reply was cut at that limit: prompts.cut_note).

A reply's limit (`max_tokens`) is, in order: the lane's own `max_output_tokens` (the lanes file), the worker's
REPOSWARM_MAX_OUTPUT_TOKENS (Anthropic only, as it always was), and what the model allows. Anthropic requires a
limit and rejects one above the model's, so the table below has the published output limits, matched by model
family whatever the suffix (a date, "-latest", a gateway's prefix); a model it does not know gets a conservative
8,192. OpenAI needs none: unless the lane sets one, the request carries none and the model's own applies.
"""

from __future__ import annotations

import re

from reposwarm.models import ModelError
from reposwarm.models.http import env_number

# Longest family first where one name begins another (claude-opus-4-5 before claude-opus-4).
ANTHROPIC_OUTPUT_LIMITS: tuple[tuple[str, int], ...] = (
    ("claude-opus-4-5", 64_000),
    ("claude-opus-4-1", 32_000),
    ("claude-opus-4", 32_000),
    ("claude-sonnet-4-5", 64_000),
    ("claude-sonnet-4", 64_000),
    ("claude-haiku-4-5", 64_000),
    ("claude-3-7-sonnet", 64_000),
    ("claude-3-5-", 8_192),
    ("claude-3-", 4_096),  # claude-3-opus, claude-3-haiku
)
DEFAULT_ANTHROPIC_LIMIT = 8_192  # a model the table does not know: every current Claude model allows this much
MIN_THINKING_TOKENS = 1_024  # the API's smallest thinking budget
THINKING_ROOM = 4_096  # what a reply needs besides its thinking when the limit is raised to fit a budget

# Stop reasons that mean the reply was cut short by a length limit, whatever the provider calls it.
CUT_REASONS = frozenset({"max_tokens", "model_context_window_exceeded", "length"})
REFUSAL = "refusal"


def model_limit(model: str) -> int:
    """The most output tokens an Anthropic model allows, by family; DEFAULT_ANTHROPIC_LIMIT for one not known."""
    name = model.lower()
    for family, limit in ANTHROPIC_OUTPUT_LIMITS:
        if re.search(rf"(^|[^a-z0-9]){re.escape(family)}", name):
            return limit
    return DEFAULT_ANTHROPIC_LIMIT


def anthropic_max_tokens(model: str, asked: int | None, thinking_tokens: int | None = None) -> int:
    """The `max_tokens` of an Anthropic request: the call's or the lane's limit, else the worker's, else the
    model's; above the thinking budget, which must fit under it (a configuration error if a set limit is not)."""
    if asked is not None:
        limit = asked
    else:
        limit = int(env_number("REPOSWARM_MAX_OUTPUT_TOKENS", model_limit(model)))
    if thinking_tokens is not None and limit <= thinking_tokens:
        if asked is not None:
            raise ModelError(f"thinking_tokens {thinking_tokens:,} must be below the lane's max_output_tokens "
                             f"{asked:,} (the thinking counts in the reply's limit)", retryable=False)
        limit = max(limit, min(thinking_tokens + THINKING_ROOM, model_limit(model)))
        if limit <= thinking_tokens:
            raise ModelError(f"thinking_tokens {thinking_tokens:,} must be below {model}'s output limit of "
                             f"{model_limit(model):,} tokens", retryable=False)
    return limit


def is_cut(stop_reason: str) -> bool:
    return stop_reason in CUT_REASONS

