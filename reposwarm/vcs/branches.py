"""Names of the refs a run makes: pure functions, shared by workflows (which must not run git) and the git seam."""

from __future__ import annotations


def integration_branch(run_id: str) -> str:
    return f"swarm/{run_id}/integration"


def lane_branch(run_id: str, lane: str) -> str:
    return f"swarm/{run_id}/{lane}"


def delivered_branch(run_id: str, chosen: str | None = None) -> str:
    """The branch an approved run lands on: SWARM_BRANCH when the user named one."""
    return chosen or f"swarm/{run_id}"
