"""The review gate: the package a person reads, their decision, and its publishing."""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import Field, StrictBool, field_validator

from reposwarm.contracts.base import Contract, Usage
from reposwarm.contracts.lane import FileEdit, LanePass, LaneResult
from reposwarm.contracts.merge import Overlap
from reposwarm.contracts.plan import Plan
from reposwarm.contracts.states import LaneStatus, Phase
from reposwarm.contracts.validation import TestReport
from reposwarm.text import inert, inert_line, inert_text

# A decision is a payload anyone able to signal the run can send: every field is bounded well below Temporal's
# 2 MB payload limit, so no decision can make a workflow task fail (issue 30.6).
MAX_COMMENT = 20_000
MAX_REVIEWER = 200
MAX_STAMP = 64


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
    commands: list[str] = []  # its last pass's `run` commands and how each ended ("$ python gen.py -> exit 0")
    # Since issue 33: the figures above are the lane's whole round (its first pass and every repair, as status
    # has them), `edits` every file its passes changed, and `passes` each pass on its own.
    round: int = 0  # the round the work is from: an earlier round's lane whose work is still in the merged tree
    dispatches: int = 0
    passes: list[LanePass] = []
    state: str = ""  # where merging left it: merged, conflict, cancelled... (LaneState.state)
    head_sha: str = ""  # its branch's head: in the merged tree when the integration branch holds it
    in_tree: bool | None = None  # whether the merged tree holds its work (None: not known, as before issue 33)
    agent: str = "builtin"  # who did the work: builtin, claude-code, codex, acp (LaneResult.agent)

    _inert = field_validator("summary", "assumptions", "reason", "failed_calls", "commands")(
        lambda cls, v: inert_text(v))

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
    # Since issue 33: the change as a diff (bounded: diff_lines says how long the whole one is), its command, the
    # round's own lanes' usage (`usage` is the run's so far, as status has it) and its rollbacks.
    integration_branch: str = ""
    diff: str = ""
    diff_lines: int = 0  # lines of the whole diff (base to merged tree); more than `diff` holds when it is cut
    diff_truncated: bool = False
    round_usage: Usage = Usage()
    rollbacks: int = 0
    merged: int | None = None  # lanes of this round whose work is in the merged tree (None: not counted)


class ReviewDecision(Contract):
    approve: StrictBool  # true or false, never "yes" or 1: a decision is read as sent
    comment: str = Field("", max_length=MAX_COMMENT)
    reviewer: str = Field("", max_length=MAX_REVIEWER)
    decided_at: str = Field("", max_length=MAX_STAMP)  # set by the run when it takes the decision (ISO 8601, UTC)
    round: int = Field(0, ge=0)  # set by the run
    plan: Plan | None = None  # a rejection's next plan, handed in by the reviewer (the planning model is skipped)
    # A decision sent by `reposwarm approve|reject` is refused once this time (ISO 8601, UTC) has passed, so one
    # the command gave up on (no worker took it) can never apply itself later. Empty: no deadline (the Signal).
    # Kept as text (recorded histories hold text), but only a date and time with its zone is accepted.
    not_after: str = Field("", max_length=MAX_STAMP)
    # An approval of a round whose checks FAILED, PASSED WITH TEST CHANGES, or were NOT JUDGED (they ran another
    # copy of the changed code) is refused unless it says so.
    accept_red: StrictBool = False
    accept_test_changes: StrictBool = False
    accept_unjudged: StrictBool = False

    @field_validator("comment")
    @classmethod
    def _comment(cls, value: str) -> str:
        return inert(value)  # newlines and tabs stay: a comment is prose

    @field_validator("reviewer")
    @classmethod
    def _reviewer(cls, value: str) -> str:
        return inert_line(value)

    @field_validator("decided_at", "not_after")
    @classmethod
    def _stamp(cls, value: str) -> str:
        if value and stamp_problem(value) is not None:
            raise ValueError(stamp_problem(value))
        return value

    @property
    def deadline(self) -> datetime | None:
        """not_after as a time (validated above, so it parses), or None."""
        return datetime.fromisoformat(self.not_after) if self.not_after else None


def stamp_problem(value: str) -> str | None:
    """Why a time stamp is not an ISO 8601 date and time with its zone (None when it is)."""
    try:
        when = datetime.fromisoformat(value)
    except (TypeError, ValueError):
        return f"{value[:40]!r} is not an ISO 8601 date and time"
    if when.tzinfo is None or when.utcoffset() is None:
        return f"{value[:40]!r} has no time zone (add +00:00 or Z)"
    try:
        when.astimezone(UTC)  # a time whose UTC falls outside years 1-9999 is no deadline either
    except (OverflowError, ValueError):
        return f"{value[:40]!r} is out of range"
    return None


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
    diff: str = ""  # the change (base to merged tree), bounded (reposwarm/review/package.py bounded_diff)
    diff_lines: int = 0
    diff_truncated: bool = False
    not_in_tree: list[str] = []  # "<lane>@<round>" of lanes whose branch head the merged tree does not hold
    tree_checked: bool = False  # the lanes' heads were looked for in the merged tree (False: recorded before)
