"""How a lane's assignment ends (workflow code): its Ending, and HostLost, the lane's host gone.

Both the built-in lane (workflows/lane.py) and an outside agent's (workflows/agent_lane.py) end their work with an
Ending, and either may find its host lost.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from reposwarm.contracts import Finish, LaneStatus


class HostLost(Exception):
    """The worker host holding the lane's worktree did not pick up its work in time."""


@dataclass(frozen=True)
class Ending:
    """How an assignment ended: the lane's status, one line saying why (none when it finished), and its finish."""

    status: LaneStatus
    reason: str
    finish: Finish | None = None

    @staticmethod
    def finished(finish: Finish) -> Ending:
        return Ending(LaneStatus.done, "", finish)

    @staticmethod
    def out_of_budget(reason: str) -> Ending:
        return Ending(LaneStatus.budget_exhausted, reason)

    @staticmethod
    def failed(reason: str, finish: Finish | None = None) -> Ending:
        return Ending(LaneStatus.failed, reason, finish)
