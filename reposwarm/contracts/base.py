"""What every contract shares: the strict base model, and token usage (which every boundary reports)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Contract(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Usage(Contract):
    """Tokens as the provider reported them, and what they cost (reposwarm/contracts/cost.py prices them)."""

    input_tokens: int = 0  # every prompt token, cached or not
    output_tokens: int = 0
    cache_read_tokens: int = 0  # of input_tokens: read from the provider's prompt cache
    cache_write_tokens: int = 0  # of input_tokens: written to it
    model_calls: int = 0
    cost_usd: float = 0.0
    uncached_cost_usd: float = 0.0  # what the same calls would have cost with no caching (where priced)
    billed_tokens: int = 0  # input-token equivalents billed: what a lane's token_budget counts (cost.py)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            model_calls=self.model_calls + other.model_calls,
            cost_usd=round(self.cost_usd + other.cost_usd, 6),
            uncached_cost_usd=round(self.uncached_cost_usd + other.uncached_cost_usd, 6),
            billed_tokens=self.billed + other.billed,
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    @property
    def billed(self) -> int:
        """Billed input-token equivalents; usage recorded before they were counted counts its tokens as sent."""
        return self.billed_tokens or self.total_tokens

    @property
    def cache_hit_share(self) -> float:
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0
