"""What a model call costs, with prompt caching, and the budgets that ask before a lane or run goes past them.

A call's usage (base.Usage) holds what its provider reported: every prompt token (`input_tokens`), of which
`cache_read_tokens` were read from the provider's prompt cache and `cache_write_tokens` written to it, and the
output. Prices are per million tokens; a price that leaves out the cached rates gets the provider's published
ratios to its input price (Anthropic: reads 0.1x, writes 1.25x for the 5-minute cache and 2x for the hour;
OpenAI: writes cost nothing extra, reads 0.1x to 0.5x by model family).

Budgets count what is billed. `token_budget` is in input-token equivalents: a fresh input token counts 1, a
cache read its read ratio (0.1 for Anthropic), a cache write its write ratio, an output token the ratio of the
output price to the input price (the model's price when the configuration gives one, else the provider's
usual ratio: 5 for Anthropic, 4 for OpenAI; 1 for the replay and oracle models, which bill nothing). So
`token_budget` times the input price is the money it allows. `cost_budget_usd` counts dollars, where a price is
given. Pure functions: the workflows decide budgets with them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from reposwarm.contracts.base import Contract, Usage

# The provider's published ratios to its input price, where the configuration gives no cached rates.
ANTHROPIC_READ, ANTHROPIC_WRITE, ANTHROPIC_WRITE_1H = 0.1, 1.25, 2.0
# OpenAI: cached input by model family (gpt-5: 0.1x, gpt-4.1 and the o-series: 0.25x, gpt-4o and the rest: 0.5x).
OPENAI_READ = (("gpt-5", 0.1), ("gpt-4.1", 0.25), ("o3", 0.25), ("o4", 0.25), ("o1", 0.5), ("gpt-4o", 0.5))
OPENAI_READ_OTHER = 0.5
OUTPUT_RATIO = {"anthropic": 5.0, "openai": 4.0}  # an output token against an input token, with no price given


# The shortest prefix a provider caches, in tokens (Anthropic: 4,096 for Opus 4.5 and the Haiku 4.5 family, 2,048
# for the older Haiku, 1,024 for the rest; OpenAI: 1,024).
MIN_CACHED = (("claude-opus-4-5", 4096), ("claude-haiku-4-5", 4096), ("claude-3-5-haiku", 2048),
              ("claude-3-haiku", 2048))
MIN_CACHED_OTHER = 1024


def min_cached(model_name: str) -> int:
    model = model_name.partition(":")[2]
    return next((n for prefix, n in MIN_CACHED if model.startswith(prefix)), MIN_CACHED_OTHER)


def warming_pays(model_name: str, price: ModelPrice | None, prefix_tokens: int, lanes: int) -> bool:
    """Whether one call that writes the shared prefix before `lanes` lanes start at once costs less than their
    writing it each (concurrent requests all miss, so each pays a write): S*w + N*S*r < N*S*w, i.e.
    N*(w - r) > w, with the warm call's own reply (one token) left out. Only where the provider caches, and the
    prefix is long enough to be cached at all."""
    if provider_of(model_name) not in ("anthropic", "openai") or prefix_tokens < min_cached(model_name):
        return False
    r = rates(model_name, price)
    return lanes * (r.write - r.read) > r.write


class ModelPrice(Contract):
    """US dollars per million tokens, for the cost shown per call, lane and run."""

    input_per_mtok: float = Field(ge=0, description="$ per million input tokens")
    output_per_mtok: float = Field(ge=0, description="$ per million output tokens")
    # The cached rates; None: the provider's published ratio to input_per_mtok (cost_of says which).
    cached_input_per_mtok: float | None = Field(default=None, ge=0, description="$ per million tokens read from the "
                                                "prompt cache; null: the provider's ratio to input_per_mtok")
    cache_write_per_mtok: float | None = Field(default=None, ge=0, description="$ per million tokens written to the "
                                               "5-minute cache; null: the provider's ratio")
    cache_write_1h_per_mtok: float | None = Field(default=None, ge=0, description="$ per million tokens written to "
                                                  "the one-hour cache; null: the provider's ratio")

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        """Tokens with no caching at all."""
        return round((input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6, 6)


class Rates(Contract):
    """Per-token ratios to the input price, for one model: what each kind of token counts in a budget."""

    read: float
    write: float
    write_1h: float
    output: float


def provider_of(model_name: str) -> str:
    return model_name.partition(":")[0]


def rates(model_name: str, price: ModelPrice | None) -> Rates:
    """The ratios a model's tokens bill at against a fresh input token."""
    provider, model = provider_of(model_name), model_name.partition(":")[2]
    if provider == "anthropic":
        read, write, write_1h = ANTHROPIC_READ, ANTHROPIC_WRITE, ANTHROPIC_WRITE_1H
    elif provider == "openai":
        read = next((r for prefix, r in OPENAI_READ if model.startswith(prefix)), OPENAI_READ_OTHER)
        write = write_1h = 1.0
    else:  # replay, oracle: nothing is billed; tokens count as sent
        read = write = write_1h = 1.0
    output = OUTPUT_RATIO.get(provider, 1.0)
    if price is not None and price.input_per_mtok > 0:
        base = price.input_per_mtok
        read = price.cached_input_per_mtok / base if price.cached_input_per_mtok is not None else read
        write = price.cache_write_per_mtok / base if price.cache_write_per_mtok is not None else write
        write_1h = price.cache_write_1h_per_mtok / base if price.cache_write_1h_per_mtok is not None else write_1h
        output = price.output_per_mtok / base
    return Rates(read=read, write=write, write_1h=write_1h, output=output)


def priced(usage: Usage, model_name: str, price: ModelPrice | None, ttl: str = "5m") -> Usage:
    """The usage with its billed tokens, and its cost and uncached cost where the model has a price."""
    r = rates(model_name, price)
    write = r.write_1h if ttl == "1h" else r.write
    fresh = max(0, usage.input_tokens - usage.cache_read_tokens - usage.cache_write_tokens)
    billed_in = fresh + usage.cache_read_tokens * r.read + usage.cache_write_tokens * write
    update: dict[str, float | int] = {"billed_tokens": round(billed_in + usage.output_tokens * r.output)}
    if price is not None:
        update["cost_usd"] = round((billed_in * price.input_per_mtok + usage.output_tokens * price.output_per_mtok)
                                   / 1e6, 6)
        update["uncached_cost_usd"] = price.cost(usage.input_tokens, usage.output_tokens)
    return usage.model_copy(update=update)


def cache_line(usage: Usage) -> str:
    """The cache's share of a usage, for the ledger, status and the review: '' when nothing was cached."""
    if not (usage.cache_read_tokens or usage.cache_write_tokens):
        return ""
    saved = ""
    if usage.uncached_cost_usd > 0:
        saved = f"; ${usage.uncached_cost_usd:.4f} without caching ({usage.cost_usd / usage.uncached_cost_usd:.2f}x)"
    return (f"cache: {usage.cache_hit_share:.0%} of input read ({usage.cache_read_tokens:,} read, "
            f"{usage.cache_write_tokens:,} written){saved}")


def usage_line(usage: Usage) -> str:
    """Model calls, tokens and cost, with the cache's share where there was one: status, watch and the review."""
    cache = cache_line(usage)
    return (f"{usage.model_calls} model calls, {usage.input_tokens} tokens in / {usage.output_tokens} out, "
            f"${usage.cost_usd:.4f}" + (f" ({cache})" if cache else ""))


# --- budgets that pause and ask ---


def usd(amount: float) -> str:
    """Dollars as a budget is read: cents from a dollar up, tenths of a cent below."""
    return f"${amount:,.2f}" if amount >= 1 else f"${amount:.4f}"


class BudgetPause(Contract):
    """A lane (or the run, lane "") stopped at its budget, waiting for a person to raise it or stop it."""

    lane: str = ""  # "" for the run's own cost budget
    what: Literal["tokens", "cost"]
    spent: float  # billed tokens, or dollars
    budget: float
    since: str = ""  # ISO 8601, workflow time
    wait_s: float = 0  # how long it waits for an answer before it ends as budget_exhausted
    workflow_id: str = ""  # the lane's workflow, which the run forwards the answer to
    cleared: bool = False  # sent by the lane when it goes on (or ends): the pause is over

    def line(self, run_id: str = "RUN") -> str:
        who = f"lane {self.lane}" if self.lane else "the run"
        amounts = (f"{usd(self.spent)} of {usd(self.budget)}" if self.what == "cost"
                   else f"{self.spent:,.0f} of {self.budget:,.0f} tokens")
        lane = f" --lane {self.lane}" if self.lane else ""
        return (f"{who} paused at its budget ({amounts}): raise it or stop it "
                f"(reposwarm budget {run_id}{lane} --raise 2x | --add-usd 5 | --stop)")


OUTPUT_RESERVE = 512  # tokens kept back for the reply when checking the budget before a call


def next_billed(model_name: str, price: ModelPrice | None, last: Usage, new_chars: int) -> float:
    """What a lane's next call will bill, in input-token equivalents: where the provider caches, the last prompt
    is read from the cache and what was added since (the reply, and `new_chars` of tool results) is written;
    elsewhere, all of it is sent again."""
    r = rates(model_name, price)
    added = last.output_tokens + new_chars // 4
    if last.cache_read_tokens or last.cache_write_tokens:
        return last.input_tokens * r.read + added * r.write + OUTPUT_RESERVE * r.output
    return last.input_tokens + added + OUTPUT_RESERVE * r.output


def over_budget(lane: str, price: ModelPrice | None, spent: Usage, tokens: int, dollars: float | None,
                next_call: float) -> BudgetPause | None:
    """The budget (`tokens` billed, `dollars` where the model has a price) that a next call billing `next_call`
    would take a lane past, having `spent` so far; None when it fits. The lane's workflow asks before each model
    call, and a model turn going on by itself (TurnSteps) before each of its own."""
    if spent.billed + next_call > tokens:
        return BudgetPause(lane=lane, what="tokens", spent=spent.billed, budget=tokens)
    if dollars is not None and price is not None:
        next_usd = next_call * price.input_per_mtok / 1e6
        if spent.cost_usd + next_usd > dollars:
            return BudgetPause(lane=lane, what="cost", spent=spent.cost_usd, budget=dollars)
    return None


class BudgetChange(Contract):
    """A person's answer to a budget pause (the run's `budget` Update, or its Signal twin)."""

    lane: str = ""  # "" for the run's own budget
    raise_factor: float | None = Field(default=None, gt=1, le=100)  # --raise 2x
    add_usd: float | None = Field(default=None, gt=0, le=100_000)
    add_tokens: int | None = Field(default=None, gt=0, le=1_000_000_000)
    stop: bool = False
    by: str = ""


class BudgetReceipt(Contract):
    lane: str = ""
    stopped: bool = False
    budget: float = 0  # the new budget (tokens or dollars, as the pause was)
    what: Literal["tokens", "cost"] = "tokens"


def change_problem(change: BudgetChange) -> str | None:
    """Why a budget change says nothing usable (None when it says exactly one thing)."""
    said = sum(x is not None for x in (change.raise_factor, change.add_usd, change.add_tokens)) + change.stop
    if said != 1:
        return "say exactly one of: --raise FACTOR, --add-usd N, --add-tokens N, --stop"
    return None


def raised(pause: BudgetPause, change: BudgetChange) -> float | None:
    """The budget after the change (None: stopped), from the budget in force (unit_problem has refused an amount in
    the other unit)."""
    if change.stop:
        return None
    if change.raise_factor is not None:
        return pause.budget * change.raise_factor
    return pause.budget + (change.add_usd or change.add_tokens or 0)


def unit_problem(pause: BudgetPause, change: BudgetChange) -> str | None:
    """A raise in the wrong unit for the pause (dollars for a token budget, tokens for a cost budget)."""
    if change.add_usd is not None and pause.what == "tokens":
        return f"{pause.lane or 'the run'} is paused at its token budget: use --raise or --add-tokens"
    if change.add_tokens is not None and pause.what == "cost":
        return f"{pause.lane or 'the run'} is paused at its cost budget: use --raise or --add-usd"
    return None
