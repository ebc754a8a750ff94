"""What every contract shares: the strict base model, and token usage (which every boundary reports)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Contract(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Usage(Contract):
    input_tokens: int = 0
    output_tokens: int = 0
    model_calls: int = 0
    cost_usd: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            model_calls=self.model_calls + other.model_calls,
            cost_usd=round(self.cost_usd + other.cost_usd, 6),
        )

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens
