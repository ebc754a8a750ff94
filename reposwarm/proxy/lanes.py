"""A lane as the model proxy knows it: its key, the token that stands for it, its tally and its budget hook.

These are the proxy's own contracts for now (reposwarm/contracts/ is not this room's to change): LaneKey says which
lane of which run a call belongs to, LanePass is what the lane's agent is given, LaneTally is what the proxy counted
for it, and BudgetAnswer is what the lane's budget hook says before each call that would reach the provider.

A budget hook is an async callable given per lane. It is asked before each call the proxy would send upstream (a
call answered from the record costs nothing and is not asked about) and answers ALLOW, or refuse(why). To make
the call wait (the pause-and-ask of a lane at its budget), the hook awaits before it answers: the agent's request
waits with it, then goes on or is refused.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Awaitable, Callable

from pydantic import Field

from reposwarm.contracts.base import Contract, Usage
from reposwarm.runs.objects import check_run_id

TOKEN_PREFIX = "rsw-lane-"  # what a lane token looks like: never a provider's key shape


class LaneKey(Contract):
    """One lane's dispatch: the run, the lane, the round and the dispatch within the round (`attempt`, as the
    built-in loop's calls count it). The record of the lane's exchanges is keyed by it, so an agent restarted for
    the same dispatch (a new proxy, a new token) finds the answers the proxy already gave."""

    run_id: str
    lane: str = Field(min_length=1, max_length=200)
    round: int = Field(default=1, ge=0)
    attempt: int = Field(default=1, ge=1)

    def model_post_init(self, _context: object) -> None:
        check_run_id(self.run_id)

    @property
    def name(self) -> str:
        """The key as one string (hashed wherever it names a file: the lane's name is the configuration's)."""
        return f"{self.run_id}/{self.lane}/r{self.round}/a{self.attempt}"


class LanePass(Contract):
    """What a lane's agent gets: the token that works only through this proxy, for this lane."""

    key: LaneKey
    token: str


class LaneTally(Contract):
    """What the proxy counted for one lane since it opened it: usage and cost of the calls the provider answered,
    and how many calls went upstream, came from the record, were refused by the budget or failed upstream."""

    key: LaneKey
    usage: Usage = Usage()
    upstream_calls: int = 0  # sent to the provider and answered (2xx)
    replayed_calls: int = 0  # answered from the record, the provider not asked
    refused_calls: int = 0  # refused by the lane's budget hook
    failed_calls: int = 0  # sent upstream and answered with an error, or not answered at all


class BudgetAnswer(Contract):
    """The budget hook's answer: go on, or refuse with a reason the agent reads."""

    go: bool
    reason: str = ""


ALLOW = BudgetAnswer(go=True)


def refuse(reason: str = "") -> BudgetAnswer:
    return BudgetAnswer(go=False, reason=reason)


BudgetHook = Callable[[LaneKey, LaneTally], Awaitable[BudgetAnswer]]


def mint_token() -> str:
    """A fresh random lane token (256 bits)."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_digest(token: str) -> str:
    """What the proxy keeps of a token: its hash, so a token is looked up without holding it as a key."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()
