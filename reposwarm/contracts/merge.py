"""Merging lanes into the integration branch, and the converger that settles their conflicts."""

from __future__ import annotations

from reposwarm.contracts.base import Contract, Usage
from reposwarm.contracts.config import ModelPrice


class MergeInput(Contract):
    run_id: str
    repo_path: str
    lane: str
    lane_branch: str
    integration_branch: str
    message: str
    lane_ref: str | None = None  # merge this ref instead of refs/heads/<lane_branch> (the base's new commits)
    goal: str = ""
    interface_contract: str = ""  # frozen at plan time; a lane changing its declared surface is flagged


class BaseInput(Contract):
    run_id: str
    repo_path: str
    base_branch: str
    start_sha: str  # the commit the run started from
    integration_sha: str


class BaseMove(Contract):
    """Where the base branch is now, against where the run started: what a refresh merges."""

    head_sha: str = ""  # "" when the branch cannot be read (gone, or not a branch here)
    ref: str = ""  # a ref of the run's holding that head (refs/reposwarm/<run>/base)
    commits: int = 0  # commits on the base since the run started
    files_both: list[str] = []  # files the base's new commits and the run's change both touched


class MergeResult(Contract):
    lane: str
    merged: bool
    integration_sha: str
    lane_sha: str = ""
    conflicts: list[str] = []  # paths with textual conflicts (nothing was merged then)
    files: list[str] = []  # paths the lane changed relative to the merge base
    contract_flags: list[str] = []


class ConflictInput(Contract):
    """A lane that conflicted with the integration branch, for the converger model to resolve."""

    run_id: str
    repo_path: str
    round: int
    attempt: int  # the converger call's index within the round (its replay turn)
    model: str
    price: ModelPrice | None = None
    record: bool = False
    lane: str
    lane_goal: str
    lane_sha: str
    integration_branch: str
    integration_sha: str
    files: list[str]
    other_goals: dict[str, str] = {}  # lanes already merged that touched these files: their goals
    interface_contract: str
    merge_message: str


class Resolution(Contract):
    lane: str
    resolved: bool
    integration_sha: str
    files: list[str] = []
    how: str = ""  # the converger's explanation, or why the resolution was refused
    usage: Usage = Usage()


class Overlap(Contract):
    path: str
    lanes: list[str]
