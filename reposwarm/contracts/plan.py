"""Planning: the plan_round activity's input and output, the plan itself, and a dry run's estimates."""

from __future__ import annotations

from pydantic import Field, field_validator

from reposwarm.contracts.base import Contract, Usage
from reposwarm.contracts.config import HelperRole, ModelPrice


class LanePlan(Contract):
    lane: str
    goal: str = Field(min_length=1)
    allowed_paths: list[str] | None = None  # a narrower slice, within what the lanes file allows


class Plan(Contract):
    """What the planner (a model, or a plan file) decides: the contract and one goal per lane."""

    interface_contract: str = Field(min_length=1)
    lanes: list[LanePlan] = Field(min_length=1)
    summary: str = ""

    @field_validator("lanes")
    @classmethod
    def _unique(cls, lanes: list[LanePlan]) -> list[LanePlan]:
        names = [lane.lane for lane in lanes]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"lane(s) planned twice: {', '.join(dupes)}")
        return lanes


class PlanInput(Contract):
    run_id: str
    repo_path: str
    base_sha: str
    round: int
    task: str
    model: str
    lanes: dict[str, HelperRole]
    feedback: list[str] = []
    previous_plan: Plan | None = None
    price: ModelPrice | None = None
    record: bool = False
    cache_ttl: str = "5m"


class PlanOutcome(Contract):
    plan: Plan
    usage: Usage = Usage()


class LaneEstimate(Contract):
    lane: str
    model: str
    turns: int
    input_tokens: int
    output_tokens: int
    token_budget: int
    cost_usd: float | None  # None when the model has no price in the configuration (with caching, where cached)
    billed_tokens: int = 0  # what the lane's token_budget counts (contracts/cost.py); 0 in older results
    uncached_cost_usd: float | None = None  # the same calls with no caching

    @property
    def within_budget(self) -> bool:
        return (self.billed_tokens or self.input_tokens + self.output_tokens) <= self.token_budget
