"""A lane's model turns and tool calls (one activity each)."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator

from reposwarm.contracts.base import Contract, Usage
from reposwarm.contracts.config import CheckProfile, ModelPrice
from reposwarm.contracts.lane import FileEdit, HelperTask, LaneWorktree
from reposwarm.text import inert_text


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

    # Model-written: made inert at once (reposwarm/text.py), so it reaches no terminal or commit with escapes.
    _inert = field_validator("summary", "assumptions")(lambda cls, v: inert_text(v))


class TurnTools(Contract):
    """The quick tool calls a lane's model turn runs itself, on the lane's host, before it returns: the reply's
    calls from the first, while they name one of these tools (workflows/lane.py QUICK_TOOLS), so a step of
    reads and edits is one activity (activities/model.py)."""

    names: list[str]
    allowed_paths: list[str]
    read_only_paths: list[str] = []


class TurnSteps(Contract):
    """How far a lane's model turn may go on by itself (patch "turns-in-activity", activities/model.py): while a
    turn's every call was a quick one run in the turn (TurnTools), and nothing ended it (a finish, a reply cut or
    declined, a malformed call), the activity asks the model again with the calls' results, up to `turns` turns
    and for `seconds`, never past the lane's wall-time budget or its token and dollar budgets. A step of reads
    and edits then costs the workflow no task of its own: the workflow reads the turns from the result."""

    turns: int  # at most this many turns in the activity, its first included
    seconds: float  # no turn starts this long after the activity's first
    wall_deadline: float  # epoch seconds: the lane's wall-time budget ends then
    spent: Usage  # the assignment's usage before the activity's first turn
    token_budget: int
    cost_budget_usd: float | None = None


class ModelTurnInput(Contract):
    run_id: str
    agent: str  # "planner" or the lane name
    round: int
    turn: int
    model: str
    transcript_ref: str | None  # None for the first turn
    attempt: int = 1
    new_messages: list[dict[str, Any]] = []  # appended before the call (tool results, user text)
    if_lost: list[dict[str, Any]] = []  # used instead of transcript + new_messages when the transcript is unreadable
    system: str = ""
    context_tokens: int = 100_000  # the transcript is compacted as it nears this
    price: ModelPrice | None = None
    record: bool = False
    cache_ttl: str = "5m"  # prompt caching: how long the provider keeps the cached prefix (swarm.cache_ttl)
    # The lane's reply options (HelperRole): the reply's limit, Anthropic's thinking budget, OpenAI's effort
    max_output_tokens: int | None = None
    thinking_tokens: int | None = None
    reasoning_effort: str | None = None
    tools: TurnTools | None = None  # the quick calls to run in the turn (None: every call is the workflow's to run)
    steps: TurnSteps | None = None  # the turns it may go on to by itself (None: one turn)
    # A first turn on the shared queue: the lane's worktree to make in this activity, beside the model call and
    # before the calls run (activities/repo.py create_lane_worktree), rather than as an activity of its own
    worktree: HelperTask | None = None


class WarmInput(Contract):
    """One call that writes a round's shared prompt prefix to the provider's cache before its lanes start
    (activities/model.py warm_prefix), so that they all read it rather than each write it."""

    run_id: str
    round: int
    model: str
    shared: str  # the run's shared context (prompts.run_context), exactly as each lane will send it
    price: ModelPrice | None = None
    cache_ttl: str = "5m"
    record: bool = False


class ModelTurnResult(Contract):
    transcript_ref: str
    content: str = ""
    tool_calls: list[ToolCall] = []
    finish: Finish | None = None  # set when the reply holds exactly one valid finish call
    usage: Usage = Usage()
    model: str = ""
    compacted: bool = False
    # How the reply ended, when not as a reply should: cut at the output limit (its cut call not run), or the
    # model declined (refusal; nothing of it run). Neither is a malformed reply: the model was told and goes on.
    cut: bool = False
    declined: bool = False
    # The outcomes of the reply's first calls, run in the turn (ModelTurnInput.tools): outcomes[i] answers
    # tool_calls[i]; the workflow runs the calls after them.
    outcomes: list[ToolOutcome] = []
    # The turns the activity went on to by itself (ModelTurnInput.steps), in order, each with every call's outcome;
    # their calls' results are in the transcript already. transcript_ref is the transcript after the last of them.
    then: list[ModelTurnResult] = []
    worktree: LaneWorktree | None = None  # the worktree made in the activity (ModelTurnInput.worktree)


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
    shell: bool | None = None  # the lane's `run` tool: HelperRole.shell (None: on when the worker's sandbox is)


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
    # A `run` call: the command and how it ended, as the lane's result lists it ("$ python gen.py -> exit 0"), and
    # the files it changed inside the slice (committed at the turn's checkpoint, as the file tools' edits are).
    ran: str = ""
    edits: list[FileEdit] = []


class ProviderWait(Contract):
    """A model provider that does not answer now: what a model call tells its run (a Signal), so the run says
    "waiting for openai since 14:02" once, rather than every lane failing. `cleared`: it answered again."""

    provider: str
    agent: str  # the lane (or planner, converger) whose call waits
    since: str = ""  # ISO 8601: when this call was first tried
    attempt: int = 1
    next_retry_s: float = 0.0
    error: str = ""
    cleared: bool = False


ModelTurnResult.model_rebuild()  # (its outcomes are ToolOutcomes, defined after it; a TypeAdapter needs it whole)
