"""The typed contracts shared by the starter, the workflows and the activities.

Every Temporal boundary takes one of these models in and gives one out. Names
follow the reference design (HelperTask, FileEdit, ChangeSet, TestReport...).
Large data (file contents, transcripts, logs) never travels in these models:
it lives in the run's content-addressed store and is passed as a `ref`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class Contract(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- configuration (the lanes file, in the reference design's helpers.yaml shape) ---


class HelperRole(Contract):
    """One lane of the lanes file: what a helper may touch and spend."""

    model: str | None = None
    allowed_paths: list[str] = Field(min_length=1)
    read_only_paths: list[str] = []
    token_budget: int = Field(default=64_000, gt=0)
    max_turns: int = Field(default=40, gt=0)
    max_wall_s: float = Field(default=6 * 3600, gt=0)
    max_malformed_replies: int = Field(default=3, gt=0)
    context_tokens: int = Field(default=100_000, ge=2_000)
    depends_on: list[str] = []


class CheckProfile(Contract):
    """A validation profile: argv lists run in the sandbox (reposwarm/checks/sandbox.py), with its limits."""

    commands: list[list[str]] = Field(min_length=1)
    timeout_s: float = Field(default=600, gt=0)
    # What the sandboxed commands may see and use; everything else is denied.
    env: dict[str, str] = {}  # variables the commands see, besides PATH, HOME (private), locale and CI=true
    network: bool = False  # no network unless the profile asks for it
    # address space per process (RLIMIT_AS); Node's own fetch() (WebAssembly) reserves ~10 GiB of it at once
    memory_mb: int = Field(default=16384, gt=0)
    max_processes: int = Field(default=256, gt=0)  # processes in the sandbox at once
    max_file_mb: int = Field(default=512, gt=0)  # largest file a command may write (RLIMIT_FSIZE)
    max_output_mb: int = Field(default=16, gt=0)  # output kept per command; more ends the command

    @field_validator("commands")
    @classmethod
    def _argv_lists(cls, commands: list[list[str]]) -> list[list[str]]:
        for argv in commands:
            if not argv or not all(isinstance(a, str) and a for a in argv):
                raise ValueError("each command is a non-empty list of non-empty strings (an argv, no shell)")
        return commands


class ValidationConfig(Contract):
    profile: str = "default"
    profiles: dict[str, CheckProfile] = {}

    @model_validator(mode="after")
    def _profile_exists(self) -> ValidationConfig:
        if self.profiles and self.profile not in self.profiles:
            raise ValueError(f"profile {self.profile!r} is not one of {sorted(self.profiles)}")
        return self


class SwarmConfig(Contract):
    max_parallel: int = Field(default=4, gt=0)
    max_helper_loops: int = Field(default=3, gt=0)
    max_consecutive_test_fails: int = Field(default=3, gt=0)
    max_review_rounds: int = Field(default=5, gt=0)
    review_timeout_s: float | None = Field(default=None, gt=0)  # then the run ends as expired, branches kept
    host_timeout_s: float = Field(default=60, gt=0)  # a lane's host gone this long: rebuild it elsewhere
    # Lane worktrees check out only the lane's folders (cone mode, sparse index); None: when the repo is big.
    sparse: bool | None = None
    on_red: Literal["review", "fail"] = "review"  # after a rollback: go to review with the report, or fail
    model: str | None = None
    lanes: dict[str, HelperRole] = Field(min_length=1)


class ModelPrice(Contract):
    """US dollars per million tokens, for the cost shown per call, lane and run."""

    input_per_mtok: float = Field(ge=0)
    output_per_mtok: float = Field(ge=0)

    def cost(self, input_tokens: int, output_tokens: int) -> float:
        return round((input_tokens * self.input_per_mtok + output_tokens * self.output_per_mtok) / 1e6, 6)


class DeliveryConfig(Contract):
    """Where the approved branch goes besides the target repository."""

    remote: str | None = None  # push the branch to this git remote
    pull_request: bool = False  # open a pull request (GitHub REST API; GITHUB_TOKEN in the worker's environment)
    github_repo: str | None = Field(default=None, pattern=r"^[\w.-]+/[\w.-]+$")  # owner/name; else from the remote's URL
    draft: bool = False


class LanesFile(Contract):
    swarm: SwarmConfig
    validation: ValidationConfig = ValidationConfig()
    prices: dict[str, ModelPrice] = {}  # by model name, e.g. "openai:gpt-4.1"
    delivery: DeliveryConfig = DeliveryConfig()


# --- the plan ---


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


# --- the request that starts a run ---


class SwarmRequest(Contract):
    run_id: str
    repo_path: str
    task: str = Field(min_length=1)
    config: LanesFile
    plan: Plan | None = None
    model: str
    base_ref: str = "HEAD"
    swarm_branch: str | None = None
    test_profile: str | None = None
    auto_approve: bool = False
    dry_run: bool = False  # plan and estimate, dispatch nothing
    record: bool = False  # keep every model exchange, to replay the run offline later
    base_branch: str | None = None  # the branch the base commit came from (a pull request's base)
    ui_url: str = ""  # the run in the Temporal Web UI, for the review package
    resume: SwarmResume | None = None  # set when the run continues as new between review rounds


# --- lanes ---


class HelperTask(Contract):
    """One assignment for one lane, as the reference design names it."""

    task_id: str
    run_id: str
    repo_path: str
    lane: str
    round: int
    attempt: int = 1  # >1 when the lane is re-dispatched within a round (a conflict to redo)
    role: HelperRole
    goal: str
    task: str
    interface_contract: str
    feedback: list[str] = []  # the reviewer's comments from earlier rounds
    allowed_paths: list[str] = Field(min_length=1)
    read_only_paths: list[str] = []
    branch: str
    base_sha: str
    model: str
    max_loops: int
    checkpoint_key: str
    check_profiles: dict[str, CheckProfile] = {}
    default_profile: str = "default"
    price: ModelPrice | None = None
    record: bool = False
    sparse: bool | None = None
    host_timeout_s: float = 60
    resume: LaneResume | None = None


class FileEdit(Contract):
    path: str
    operation: Literal["create", "modify", "delete"]
    reason: str = Field(min_length=12)
    content_ref: str | None = None


class TestFailure(Contract):
    """One failing test (from JUnit XML), or one failing command when its runner wrote none."""

    __test__ = False

    name: str
    file: str | None = None
    message: str = ""
    command: str = ""

    @property
    def key(self) -> str:
        return f"{self.command}::{self.file or ''}::{self.name}"


class TestReport(Contract):
    __test__ = False  # not a pytest class

    passed: bool
    failures: list[TestFailure] = []  # new failures: the ones the swarm is answerable for
    pre_existing: list[TestFailure] = []  # failing on the base commit too: never blamed on the swarm
    flaky: list[TestFailure] = []  # failed, then passed on an immediate re-run
    duration_s: float = 0.0
    coverage_delta: float | None = None
    commands: list[CommandResult] = []
    ref: str = ""
    unsandboxed: bool = False  # a command ran without the sandbox (REPOSWARM_SANDBOX=off)
    # Per test (reposwarm/checks/runners.py, reposwarm/checks/verdicts.py): None where no command gave per-test results.
    tests_run: int | None = None  # tests that ran (not skipped) on this tree
    base_tests_run: int | None = None  # the same on the base commit, once judged against it
    fixed: list[TestFailure] = []  # failing on the base commit, passing here
    problems: list[str] = []  # why it did not pass besides new failures: fewer tests ran, a worse exit, not judged


class CommandResult(Contract):
    argv: list[str]  # as configured ({junit} not yet filled in)
    exit_code: int | None
    timed_out: bool = False
    duration_s: float
    output_tail: str = ""
    log_ref: str | None = None
    sandboxed: bool = True  # False when it ran without the sandbox (REPOSWARM_SANDBOX=off)
    runner: str = ""  # the test runner known by its command line (reposwarm/checks/runners.py), or ""
    exit_class: str = ""  # passed | tests failed | no tests ran | error | timed out
    tests_run: int | None = None  # tests that ran (not skipped); None: no per-test results
    cases_ref: str | None = None  # every test's result, as JSON in the run's store


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


class ChangeSet(Contract):
    task_id: str
    edits: list[FileEdit] = []
    conflicts: list[str] = []
    test_report: TestReport | None = None
    summary: str = ""
    assumptions: list[str] = []
    diff_stat: str = ""
    head_sha: str = ""


class LaneStatus(str, Enum):
    done = "done"
    budget_exhausted = "budget_exhausted"
    failed = "failed"
    cancelled = "cancelled"


class LaneResult(Contract):
    lane: str
    status: LaneStatus
    reason: str = ""
    changeset: ChangeSet
    usage: Usage = Usage()
    turns: int = 0
    tool_calls: int = 0
    refusals: int = 0
    elapsed_s: float = 0.0


# --- model turns and tool calls (one activity each) ---


class ToolCall(Contract):
    id: str
    name: str
    arguments: dict[str, Any] | None = None  # None when not a JSON object, or when kept in the store
    raw_arguments: str = ""  # as the model sent them (a preview when arguments_ref is set)
    arguments_ref: str | None = None  # large arguments (a whole file) live in the store
    error: str | None = None  # why the call is malformed (unknown tool, bad arguments), shown to the model


class Finish(Contract):
    summary: str
    assumptions: list[str] = []


class LaneResume(Contract):
    """What a lane carries across continue-as-new."""

    turn: int
    transcript_ref: str | None
    pending: list[dict[str, Any]]
    usage: Usage
    edits: list[FileEdit] = []
    tool_calls: int = 0
    refusals: int = 0
    malformed: int = 0
    started_at: float
    continued: int = 0
    host_queue: str = ""
    shared_queue: bool = False  # host_queue is the shared queue (REPOSWARM_AFFINITY): quick tools run locally
    rebuilt: int = 0  # times the worktree was rebuilt on another host


class ModelTurnInput(Contract):
    run_id: str
    agent: str  # "planner" or the lane name
    round: int
    turn: int
    model: str
    transcript_ref: str | None  # None for the first turn
    attempt: int = 1
    new_messages: list[dict[str, Any]] = []  # appended before the call (tool results, user text)
    system: str = ""
    context_tokens: int = 100_000  # the transcript is compacted as it nears this
    price: ModelPrice | None = None
    record: bool = False


class ModelTurnResult(Contract):
    transcript_ref: str
    content: str = ""
    tool_calls: list[ToolCall] = []
    finish: Finish | None = None  # set when the reply holds exactly one valid finish call
    usage: Usage = Usage()
    model: str = ""
    compacted: bool = False


class ToolInput(Contract):
    run_id: str
    lane: str
    call: ToolCall
    round: int = 1
    attempt: int = 1
    turn: int = 0  # the lane turn (1-based) that made the call: for the ledger and `starter.py explain`
    allowed_paths: list[str]
    read_only_paths: list[str] = []
    check_profiles: dict[str, CheckProfile] = {}
    default_profile: str = "default"
    default_reason: str = ""


class ToolOutcome(Contract):
    call_id: str
    name: str
    ok: bool
    output: str  # a short preview; the model sees the whole output from output_ref
    output_ref: str
    refused: bool = False
    malformed: bool = False
    output_chars: int = 0
    edit: FileEdit | None = None


class CheckpointInput(Contract):
    run_id: str
    lane: str
    message: str
    # The lane's slice: only paths it may write are staged. (Empty in runs started before the slice was
    # carried here: those stage every change, as they did.)
    allowed_paths: list[str] = []
    read_only_paths: list[str] = []


class LaneWorktree(Contract):
    path: str
    branch: str
    head_sha: str
    host_queue: str = ""  # the task queue of the worker host holding this worktree
    shared_queue: bool = False  # ... which is the shared queue: every worker on it holds the worktree


# --- merge, validation, review, delivery ---


class MergeInput(Contract):
    run_id: str
    repo_path: str
    lane: str
    lane_branch: str
    integration_branch: str
    message: str
    goal: str = ""
    interface_contract: str = ""  # frozen at plan time; a lane changing its declared surface is flagged


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


class ValidateInput(Contract):
    run_id: str
    repo_path: str
    ref: str
    profile_name: str
    profile: CheckProfile
    label: str = ""  # "baseline", or "round 1 check 2": names the kept ref of a validated state
    baseline: TestReport | None = None  # the base commit's report: the result is judged against it, per test


class AttributeInput(Contract):
    repo_path: str
    ref: str
    failures: list[TestFailure]
    touched: dict[str, list[str]]  # lane -> files it changed this round
    lane_paths: dict[str, list[str]]  # lane -> its allowed paths


class RollbackInput(Contract):
    run_id: str
    repo_path: str
    integration_branch: str
    from_sha: str
    to_sha: str


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
    elapsed_s: float = 0.0


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


class ReviewDecision(Contract):
    approve: bool
    comment: str = ""
    reviewer: str = ""
    decided_at: str = ""  # set by the run when it takes the decision (ISO 8601, UTC)
    round: int = 0  # set by the run


class ReviewReceipt(Contract):
    """What the review Update answers: the decision was taken, and where the run went next."""

    run_id: str
    round: int
    approve: bool
    phase: Phase


class Phase(str, Enum):
    preparing = "preparing"
    planning = "planning"
    running_lanes = "running_lanes"
    validating = "validating"
    review = "review"
    planned = "planned"  # a dry run ends here
    expired = "expired"  # no review decision in time
    not_approved = "not_approved"  # automatic review (trials) of a red result: nothing delivered
    delivering = "delivering"
    delivered = "delivered"
    failed = "failed"


class LaneState(Contract):
    lane: str
    attempt: int = 1
    state: str = "pending"  # pending | running | merged | done | budget_exhausted | failed | cancelled
    goal: str = ""
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    reason: str = ""


class SwarmStatus(Contract):
    run_id: str
    repo_path: str
    task: str
    phase: Phase
    round: int
    lanes: list[LaneState] = []
    integration_branch: str = ""
    integration_sha: str = ""
    test_report: TestReport | None = None
    review: ReviewPackage | None = None
    decisions: list[ReviewDecision] = []
    ignored_signals: list[str] = []
    delivered_branch: str | None = None
    pull_request_url: str | None = None
    review_path: str | None = None  # the latest review package, as files on the worker's host
    error: str | None = None
    usage: Usage = Usage()
    overlaps: list[Overlap] = []
    resolutions: list[str] = []
    contract_flags: list[str] = []
    first_pass_merge_rate: float | None = None
    validations: list[str] = []  # one line per check of the round, and any rollback
    warnings: list[str] = []  # what a person must know about this run (checks that ran unsandboxed...)


class DeliverInput(Contract):
    run_id: str
    repo_path: str
    integration_sha: str
    branch: str
    delivery: DeliveryConfig = DeliveryConfig()
    base_branch: str | None = None
    title: str = ""
    review_ref: str | None = None  # the review package (Markdown) in the run's store: the pull request's body


class Delivered(Contract):
    branch: str
    pushed_to: str | None = None
    pull_request_url: str | None = None


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


class PrepareInput(Contract):
    run_id: str
    repo_path: str
    base_ref: str
    swarm_branch: str
    create_branch: bool = True


class PrepareResult(Contract):
    base_sha: str
    integration_branch: str


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


class LaneEstimate(Contract):
    lane: str
    model: str
    turns: int
    input_tokens: int
    output_tokens: int
    token_budget: int
    cost_usd: float | None  # None when the model has no price in the configuration

    @property
    def within_budget(self) -> bool:
        return self.input_tokens + self.output_tokens <= self.token_budget


class PlanOutcome(Contract):
    plan: Plan
    usage: Usage = Usage()


class SwarmResult(Contract):
    run_id: str
    expired: bool = False  # no decision within the review timeout: nothing delivered, branches kept
    pull_request_url: str | None = None
    delivered_branch: str = ""
    delivered_sha: str = ""
    final_sha: str = ""  # the integration branch's last state, delivered or not
    rounds: int
    usage: Usage
    plan: Plan | None = None
    estimates: list[LaneEstimate] = []


TestReport.model_rebuild()
HelperTask.model_rebuild()
ReviewReceipt.model_rebuild()


# --- trials: replaying a repository's own commits as swarm tasks ---


class TrialSpec(Contract):
    sha: str
    parent: str
    message: str


class TrialBatchRequest(Contract):
    batch_id: str
    repo_path: str  # the user's repository; trials run in a clone of it
    trials: list[TrialSpec] = Field(min_length=1)
    config: LanesFile
    model: str  # a real model, or "oracle" (the harness's own proof)
    oracle_options: str = ""  # e.g. "extra=api&skip=web", for a deliberately wrong oracle
    max_parallel: int = Field(default=2, gt=0)


class TrialScore(Contract):
    sha: str
    run_id: str
    message: str
    status: str  # "scored", or "failed: why" when the swarm run itself failed
    tests: list[str] = []  # the commit's own test files
    tests_passed: bool | None = None  # run against the swarm's result; None when the commit has no tests
    stray: list[str] = []  # files the swarm changed that the commit did not
    missed: list[str] = []  # files the commit changed that the swarm did not
    lines_swarm: int = 0
    lines_commit: int = 0
    validations: int = 0
    conflicts: int = 0
    resolutions: int = 0
    interventions: int = 0  # re-dispatches and rollbacks the run needed
    tokens: int = 0
    cost_usd: float = 0.0
    wall_s: float = 0.0
    lanes: list[dict[str, Any]] = []


class ScoreInput(Contract):
    batch_id: str
    clone_path: str
    spec: TrialSpec
    run_id: str
    result_sha: str | None  # the swarm's delivered commit; None when the run failed
    failure: str = ""
    profile: CheckProfile | None = None


class TrialBatchResult(Contract):
    batch_id: str
    scores: list[TrialScore]


class SwarmResume(Contract):
    """What a swarm run carries across continue-as-new, between review rounds."""

    status: SwarmStatus
    base_sha: str
    next_round: int
    plan: Plan | None
    feedback: list[str] = []
    reviewed_sha: str | None = None
    review_ref: str | None = None
    dispatches: dict[str, int] = {}
    baseline: TestReport | None = None
    last_green: str | None = None
    consecutive_fails: int = 0
    checks: int = 0


SwarmRequest.model_rebuild()
