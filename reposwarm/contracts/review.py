"""The review gate: the package a person reads, their decision, and its publishing."""

from __future__ import annotations

from reposwarm.contracts.base import Contract, Usage
from reposwarm.contracts.lane import FileEdit, LaneResult
from reposwarm.contracts.merge import Overlap
from reposwarm.contracts.plan import Plan
from reposwarm.contracts.states import LaneStatus, Phase
from reposwarm.contracts.validation import TestReport


class LaneReview(Contract):
    lane: str
    goal: str
    status: LaneStatus
    reason: str = ""
    summary: str = ""
    assumptions: list[str] = []
    edits: list[FileEdit] = []
    diff_stat: str = ""
    usage: Usage = Usage()
    turns: int = 0
    tool_calls: int = 0
    refusals: int = 0
    tool_errors: int = 0
    failed_calls: list[str] = []
    flags: list[str] = []  # what a reviewer should doubt: a summary claiming green checks that failed
    elapsed_s: float = 0.0

    @classmethod
    def of(cls, result: LaneResult, goal: str) -> LaneReview:
        """A lane's part of the review: its result and its change set's account, under the same field names."""
        fields = set(cls.model_fields)
        return cls.model_validate({**result.model_dump(include=fields), **result.changeset.model_dump(include=fields),
                                   "goal": goal})


class ReviewPackage(Contract):
    run_id: str
    round: int
    task: str
    repo_path: str
    base_sha: str
    integration_sha: str
    plan: Plan
    lanes: list[LaneReview]
    test_report: TestReport | None = None
    conflicts: list[str] = []  # unresolved: the lane's branch is kept, nothing of either side dropped
    resolutions: list[str] = []  # how each conflict was settled (converger, or the lane redone)
    overlaps: list[Overlap] = []
    contract_flags: list[str] = []
    first_pass_merge_rate: float | None = None
    validations: list[str] = []
    usage: Usage = Usage()
    previous_comments: list[str] = []
    since_last_round: str = ""  # what changed since the last round's review (diff stat)
    ui_url: str = ""
    nothing_merged: bool = False  # no lane's work reached the merged tree this round: nothing to approve
    warnings: list[str] = []  # said first, in plain words (checks that ran unsandboxed...)
    base_moved: str = ""  # the base moved since the run started: by how much, where it was refreshed, files both touched
    planning_error: str = ""  # the next round's planning failed: this round is back at review, still decidable


class ReviewDecision(Contract):
    approve: bool
    comment: str = ""
    reviewer: str = ""
    decided_at: str = ""  # set by the run when it takes the decision (ISO 8601, UTC)
    round: int = 0  # set by the run
    plan: Plan | None = None  # a rejection's next plan, handed in by the reviewer (the planning model is skipped)
    # A decision sent by `reposwarm approve|reject` is refused once this time (ISO 8601, UTC) has passed, so one
    # the command gave up on (no worker took it) can never apply itself later. Empty: no deadline (the Signal).
    not_after: str = ""
    # An approval of a round whose checks FAILED, or PASSED WITH TEST CHANGES, is refused unless it says so.
    accept_red: bool = False
    accept_test_changes: bool = False


class ReviewReceipt(Contract):
    """What the review Update answers: the decision was taken, and where the run went next."""

    run_id: str
    round: int
    approve: bool
    phase: Phase


class PublishInput(Contract):
    run_id: str
    repo_path: str
    package: ReviewPackage
    previous_sha: str | None = None


class Published(Contract):
    markdown_ref: str
    json_ref: str
    path: str  # the package as files under the run's folder, readable after the run ends
    since_last_round: str = ""  # diff stat from the previous round's tree
