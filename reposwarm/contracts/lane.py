"""A lane: its assignment, its worktree and checkpoints, what it changed, its result and its progress."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from reposwarm.contracts.base import Contract, Usage
from reposwarm.contracts.config import CheckProfile, HelperRole, ModelPrice
from reposwarm.contracts.states import LanePhase, LaneStatus
from reposwarm.contracts.validation import TestReport
from reposwarm.text import inert, inert_text


class FileEdit(Contract):
    path: str
    operation: Literal["create", "modify", "delete"]
    reason: str = Field(min_length=12)
    content_ref: str | None = None
    turns: list[int] = []  # the lane's turns that changed the file (for `explain`)

    # Model-written: made inert here, so no terminal, page or commit message shows its escapes (never raises).
    _inert = field_validator("reason")(lambda cls, v: inert(v))


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
    declined: int = 0  # replies in a row the model declined (stop reason refusal)
    started_at: float
    continued: int = 0
    host_queue: str = ""
    shared_queue: bool = False  # host_queue is the shared queue (REPOSWARM_AFFINITY): quick tools run locally
    rebuilt: int = 0  # times the worktree was rebuilt on another host
    # After a rebuild: the messages to start afresh from, should the transcript be in no store the new host
    # reads (separate homes and no object store); with a shared store the conversation goes on.
    if_lost: list[dict[str, Any]] = []
    reassigned: bool = False  # a warm lane's next assignment: its worktree is brought to the new base first
    tool_errors: int = 0
    failed_calls: list[str] = []
    last_checks_ok: bool | None = None  # how the lane's last run_checks call went; None: it ran none
    commands: list[str] = []  # the `run` commands it ran and how each ended, the first ones ("$ make -> exit 0")
    commands_run: int = 0  # every `run` command it ran (more than `commands` holds past its cap)
    # This assignment's budgets as a person raised them at a pause (None: the role's)
    token_budget: int | None = None
    cost_budget_usd: float | None = None
    # A lane run by an outside agent (HelperRole.agent): the CLI's session to resume for the next assignment
    agent_session: str = ""
    agent_told: list[str] = []  # what it wrote outside its slice, reverted: told in its next message


class HelperTask(Contract):
    """One assignment for one lane, as the reference design names it."""

    # "Helper" only in the reference design's contract names (HelperTask, HelperRole), kept for compatibility.
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
    outage_s: float = 1800  # how long its model calls are retried while the provider does not answer
    # The lane stays for the run (workflows/lane.py): after this assignment it reports by a Signal and waits for
    # the next (a repair, the next round's goal), keeping its conversation, worktree and branch.
    warm: bool = False
    resume: LaneResume | None = None
    # Where the lane's worktree will be served when known before it is made (PrepareResult.lane_queue): its
    # first model turn then runs while the worktree is made. Empty: the worktree first, then the turn.
    lane_queue: str = ""
    budget_wait_s: float = 0  # at its budget the lane pauses this long for a raise (0: it ends at once)
    cache_ttl: str = "5m"  # how long the provider keeps its cached prompt prefix (swarm.cache_ttl)
    # The other lanes of the plan, each with its goal and slice in a line: told to an outside agent (HelperRole
    # .agent) in its prompt. Empty for the built-in loop, whose lanes learn each other from the contract.
    other_lanes: dict[str, str] = {}


class LaneStarts(Contract):
    """Warm lanes for the client to start (activities/lanes.py), by workflow id, on the run's task queue."""

    task_queue: str
    lanes: dict[str, HelperTask]


class LaneEnd(Contract):
    """A lane's workflow that ended without answering its run, as the server tells it."""

    workflow_id: str
    status: str  # the execution's status: FAILED, TERMINATED, TIMED_OUT, CANCELED, COMPLETED...
    reason: str = ""


class ChangeSet(Contract):
    task_id: str
    edits: list[FileEdit] = []
    conflicts: list[str] = []
    test_report: TestReport | None = None
    summary: str = ""
    assumptions: list[str] = []
    diff_stat: str = ""
    head_sha: str = ""

    _inert = field_validator("summary", "assumptions")(lambda cls, v: inert_text(v))


class LaneResult(Contract):
    lane: str
    status: LaneStatus
    reason: str = ""
    changeset: ChangeSet
    usage: Usage = Usage()
    turns: int = 0
    tool_calls: int = 0
    refusals: int = 0
    tool_errors: int = 0  # calls that ran and failed (an edit that did not apply, a file not found...)
    failed_calls: list[str] = []  # one line per failed or refused call: "turn 3 edit_file calc/x.py: ..."
    flags: list[str] = []  # what a reviewer should doubt (a summary claiming checks pass that failed)
    elapsed_s: float = 0.0
    commands: list[str] = []  # the `run` commands, each with how it ended: "$ python gen.py -> exit 0"
    agent: str = "builtin"  # who did the work (HelperRole.agent_name): builtin, claude-code, codex, acp
    agent_session: str = ""  # an outside agent's session id (what its CLI resumes)

    _inert = field_validator("reason", "failed_calls", "commands")(lambda cls, v: inert_text(v))


class LanePass(Contract):
    """One pass of a lane within a round: its first, or a repair after a red check (a conflict's redo is part of
    the pass it redoes). What the review shows per lane, so the pass that wrote a file stays visible after a
    repair that wrote nothing."""

    dispatches: int = 1
    status: LaneStatus | None = None
    seconds: float = 0.0
    usage: Usage = Usage()
    turns: int = 0
    tool_calls: int = 0
    refusals: int = 0
    tool_errors: int = 0
    edits: list[FileEdit] = []  # what this pass's branch changed against the tree it started from


class LaneState(Contract):
    """A lane's progress: in the run's status, and what LaneWorkflow's progress query answers."""

    lane: str
    attempt: int = 1
    state: LanePhase = LanePhase.pending
    goal: str = ""
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    cost_usd: float = 0.0
    cache_read_tokens: int = 0
    reason: str = ""
    workflow_id: str = ""  # the lane's workflow (a warm lane keeps one for the run)
    step: str = ""  # what the lane is doing right now: "model turn 4", "run_checks", "edit_file calc/x.py"
    step_since: float | None = None  # when that step began (epoch seconds, workflow time)
    agent: str = ""  # who does the lane's work (HelperRole.agent_name); "" before it is known: builtin


class LaneWorktree(Contract):
    path: str
    branch: str
    head_sha: str
    host_queue: str = ""  # the task queue of the worker host holding this worktree
    shared_queue: bool = False  # ... which is the shared queue: every worker on it holds the worktree


class CheckpointInput(Contract):
    run_id: str
    lane: str
    message: str
    repo_path: str = ""  # where the checkpoint is pushed when the repository is a remote (reposwarm/vcs/remote.py)
    # The lane's slice: only paths it may write are staged. (Empty in runs started before the slice was
    # carried here: those stage every change, as they did.)
    allowed_paths: list[str] = []
    read_only_paths: list[str] = []


class CheckpointResult(Contract):
    """What checkpoint_lane answers: the lane branch's head after the commit (or before, if nothing changed)."""

    head_sha: str
    refused: list[str] = []  # changes outside the lane's slice, undone rather than committed

    @model_validator(mode="before")
    @classmethod
    def _recorded_shape(cls, data: Any) -> Any:
        return {"head_sha": data} if isinstance(data, str) else data  # recorded before: the bare sha


class LaneDescription(Contract):
    """What describe_lane answers: the lane branch's head, its diff stat and its files against the base."""

    head_sha: str = ""
    diff_stat: str = ""
    files: dict[str, str] = {}  # path -> git's status letter (A, M, D, T...)

    @model_validator(mode="before")
    @classmethod
    def _recorded_shape(cls, data: Any) -> Any:
        # Recorded before this model: {"__head__": sha, "__stat__": stat, path: letter, ...} in one dict.
        if isinstance(data, dict) and ("__head__" in data or "__stat__" in data):
            files = {k: v for k, v in data.items() if k not in ("__head__", "__stat__")}
            return {"head_sha": data.get("__head__", ""), "diff_stat": data.get("__stat__", ""), "files": files}
        return data
