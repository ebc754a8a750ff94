"""A swarm run: its request, its status (what queries answer), what it carries across continue-as-new, its
result, and the activities at its two ends (prepare, deliver)."""

from __future__ import annotations

from pydantic import Field

from reposwarm.contracts.base import Contract, Usage
from reposwarm.contracts.config import DeliveryConfig, LanesFile, ModelPrice
from reposwarm.contracts.cost import BudgetPause
from reposwarm.contracts.lane import FileEdit, LanePass, LaneResult, LaneState
from reposwarm.contracts.merge import Overlap
from reposwarm.contracts.plan import LaneEstimate, Plan
from reposwarm.contracts.proposal import DEFAULT_MAX_LANES, LaneProposal
from reposwarm.contracts.review import ReviewDecision, ReviewPackage
from reposwarm.contracts.states import LaneStatus, Phase
from reposwarm.contracts.validation import TestReport


class LaneRecord(Contract):
    """One lane's account within a round, summed over its dispatches: what `report` and `explain` read."""

    lane: str
    status: LaneStatus | None = None  # how its last dispatch ended
    dispatches: int = 0
    seconds: float = 0.0  # the lane's own running time, summed over its dispatches
    usage: Usage = Usage()
    turns: int = 0
    tool_calls: int = 0
    refusals: int = 0
    tool_errors: int = 0
    edits: list[FileEdit] = []  # what its branch changed, with the reasons (its last dispatch's account)
    passes: list[LanePass] = []  # each pass on its own: the first, then each repair (empty in older records)

    def add(self, result: LaneResult, dispatches: int) -> None:
        """Count `dispatches` more runs of the lane, `result` being the last one's."""
        self.passes.append(LanePass(
            dispatches=dispatches, status=result.status, seconds=result.elapsed_s, usage=result.usage,
            turns=result.turns, tool_calls=result.tool_calls, refusals=result.refusals,
            tool_errors=result.tool_errors, edits=list(result.changeset.edits)))
        self.status, self.dispatches = result.status, self.dispatches + dispatches
        self.seconds = round(self.seconds + result.elapsed_s, 3)
        self.usage, self.turns = self.usage + result.usage, self.turns + result.turns
        self.tool_calls += result.tool_calls
        self.refusals += result.refusals
        self.tool_errors += result.tool_errors
        self.edits = list(result.changeset.edits)


class RoundRecord(Contract):
    """A round as the run remembers it, on the server (the status memo, the result): no worker's disk needed."""

    round: int
    lanes_s: float = 0.0  # wall-clock time the round's lanes were running (repairs included; checks, review not)
    lanes: list[LaneRecord] = []
    merged: int = 0  # lanes whose work reached the integration branch (and is still there: none after a rollback)
    rollbacks: int = 0  # times the integration branch went back to the last green state in this round
    planning_error: str = ""  # the planner failed: the round before it is back at review
    decision: str = ""  # "approved by ana", "rejected by ana: ..."

    def lane(self, name: str) -> LaneRecord:
        found = next((r for r in self.lanes if r.lane == name), None)
        if found is None:
            found = LaneRecord(lane=name)
            self.lanes.append(found)
        return found

    @property
    def parallel_efficiency(self) -> float | None:
        """The lanes' own running time over (lanes x the time lanes were running): 1.0 when every lane ran the
        whole time side by side. Checks and review waits are outside lanes_s, so they do not count."""
        busy = sum(r.seconds for r in self.lanes)
        return round(busy / (len(self.lanes) * self.lanes_s), 3) if self.lanes and self.lanes_s > 0 else None


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
    base_moved: str = ""  # "the base main moved by 3 commits since the run started; refreshed at <sha>"
    provider_wait: str = ""  # "waiting for openai since 14:02 UTC (retry 7, next in 60 s)", while it lasts
    rounds: list[RoundRecord] = []  # every round so far, for report and explain from anywhere
    started_at: str = ""  # ISO 8601, workflow time
    updated_at: str = ""  # when this status was last written to the run's memo
    base_branch: str | None = None
    lane_queue: str = ""  # PrepareResult.lane_queue, carried for the lanes of later rounds
    proposal: LaneProposal | None = None  # the lanes the run proposed for its task (a run with no lanes file)
    # Set by the client, never by the run: a review decision sent as a Signal (approve --queue) that no worker has
    # taken yet, read from the run's history ("approve by ana at 2025-01-02 10:00:00 UTC").
    queued_decision: str = ""
    paused: list[BudgetPause] = []  # lanes (and the run) waiting at their budget for a person's answer
    cost_budget_usd: float | None = None  # the run's cost budget as a person raised it (None: swarm.cost_budget_usd)


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
    next_plan: Plan | None = None  # the plan a reviewer handed in with the rejection
    base_head: str | None = None  # the base branch's head last merged into the integration branch
    warm_lanes: list[str] = []  # lanes whose warm workflow this run started (<run>.<lane>), still waiting for work
    baseline: TestReport | None = None
    last_green: str | None = None
    consecutive_fails: int = 0
    checks: int = 0


class ProposeOptions(Contract):
    """A run with no lanes file proposes its own (workflows/proposing.py): at most max_lanes, then waits for a
    person's `confirm_lanes`, unless auto_accept (`run --yes`); `only` (`run --write-lanes`) ends the run with
    the proposal, dispatching nothing."""

    max_lanes: int = Field(default=DEFAULT_MAX_LANES, gt=0, le=64)
    auto_accept: bool = False
    only: bool = False


class LanesReceipt(Contract):
    """What became of a `confirm_lanes` Update: accepted (the lanes the run goes on with) or stopped."""

    run_id: str
    accepted: bool
    lanes: list[str] = []
    phase: Phase


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
    # Ours among the search attributes the server has (workflows/attributes.py): the run upserts only those
    search_attributes: list[str] = []
    # No lanes file: the run proposes its lanes first (config.swarm.lanes is empty until a person accepts them)
    propose: ProposeOptions | None = None


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
    proposal: LaneProposal | None = None  # a run that proposed its lanes: what it proposed (and, if so, accepted)


class PrepareInput(Contract):
    run_id: str
    repo_path: str
    base_ref: str
    swarm_branch: str
    create_branch: bool = True


class PrepareResult(Contract):
    base_sha: str
    integration_branch: str
    # The queue lane worktrees are served on when every worker on the run's queue shares one home (affinity
    # shared): a lane's first model turn can go there while its worktree is being made. Empty: each host serves
    # the worktrees it made on a queue of its own, known only once one is made.
    lane_queue: str = ""


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


class ProposeOutcome(Contract):
    proposal: LaneProposal  # its problems non-empty: refused twice, and the run stops with them
    usage: Usage = Usage()


class ProposeInput(Contract):
    """The propose_lanes activity's input (activities/proposing.py): the task, on the base commit."""

    run_id: str
    repo_path: str
    base_sha: str
    task: str
    model: str
    max_lanes: int = DEFAULT_MAX_LANES
    price: ModelPrice | None = None
    record: bool = False


class ProposalCheck(ProposeInput):
    """A person's edit of a proposal (its lanes, as a lanes file, and its plan), checked against the files of the
    base commit by the check_proposal_edit activity; the answer is the proposal they edited into, with its
    problems (empty: it may run)."""

    proposal: LaneProposal
