"""The typed contracts shared by the starter, the workflows and the activities.

Every Temporal boundary takes one of these models in and gives one out. Names
follow the reference design (HelperTask, FileEdit, ChangeSet, TestReport...).
Large data (file contents, transcripts, logs) never travels in these models:
it lives in the run's content-addressed store and is passed as a `ref`.

One module per boundary; every name is re-exported here, so
`from reposwarm.contracts import X` is the one way in:

- base: Contract, Usage
- cost: ModelPrice, budgets (BudgetPause, BudgetChange, BudgetReceipt) and the pricing of cached tokens
- states: Phase, LaneStatus, LanePhase (every state as an enum)
- config: the lanes file (HelperRole, CheckProfile, SwarmConfig, LanesFile...)
- plan: Plan, LanePlan, PlanInput, PlanOutcome, LaneEstimate
- lane: HelperTask, FileEdit, ChangeSet, LaneResult, LaneState, worktree, checkpoint, description
- turns: model turns and tool calls
- agent_session: a lane run by an outside agent (Claude Code, Codex), one session as one activity
- merge: merging lanes, the converger
- validation: TestReport, failures, attribution, rollback
- review: ReviewPackage, LaneReview, ReviewDecision, publishing
- run: SwarmRequest, SwarmStatus, SwarmResume, SwarmResult, prepare, deliver
- trial: trial batches and their scores

A result whose shape changed stays decodable from histories recorded before:
its model accepts the old shape too (a `model_validator(mode="before")`).
"""

from reposwarm.contracts.agent_session import AgentSessionInput, AgentSessionResult
from reposwarm.contracts.base import Contract, Usage
from reposwarm.contracts.config import (
    AcpAgent,
    CheckProfile,
    CommandRule,
    DeliveryConfig,
    HelperRole,
    LanesFile,
    ModelPrice,
    SwarmConfig,
    ValidationConfig,
)
from reposwarm.contracts.cost import BudgetChange, BudgetPause, BudgetReceipt
from reposwarm.contracts.lane import (
    ChangeSet,
    CheckpointInput,
    CheckpointResult,
    FileEdit,
    HelperTask,
    LaneDescription,
    LaneEnd,
    LanePass,
    LaneResult,
    LaneResume,
    LaneStarts,
    LaneState,
    LaneWorktree,
)
from reposwarm.contracts.merge import (
    BaseInput,
    BaseMove,
    ConflictInput,
    MergeInput,
    MergeResult,
    Overlap,
    Resolution,
)
from reposwarm.contracts.plan import LaneEstimate, LanePlan, Plan, PlanInput, PlanOutcome
from reposwarm.contracts.proposal import LaneProposal, LanesDecision, PackageInfo, RepoLayout
from reposwarm.contracts.review import (
    LaneReview,
    Published,
    PublishInput,
    ReviewDecision,
    ReviewPackage,
    ReviewReceipt,
)
from reposwarm.contracts.run import (
    Delivered,
    DeliverInput,
    LaneRecord,
    LanesReceipt,
    PrepareInput,
    PrepareResult,
    ProposalCheck,
    ProposeInput,
    ProposeOptions,
    ProposeOutcome,
    RoundRecord,
    SwarmRequest,
    SwarmResult,
    SwarmResume,
    SwarmStatus,
)
from reposwarm.contracts.states import (
    ExitClass,
    LanePhase,
    LaneStatus,
    Phase,
    TestChangeKind,
    TrialOutcome,
    Verdict,
)
from reposwarm.contracts.trial import (
    ScoreInput,
    TrialBatchRequest,
    TrialBatchResult,
    TrialClone,
    TrialCloneInput,
    TrialScore,
    TrialSpec,
    TrialVetInput,
    TrialVetting,
)
from reposwarm.contracts.turns import (
    Finish,
    ModelTurnInput,
    ModelTurnResult,
    ProviderWait,
    ToolCall,
    ToolInput,
    ToolOutcome,
    TurnSteps,
    TurnTools,
    WarmInput,
)
from reposwarm.contracts.validation import (
    AttributeInput,
    Attribution,
    CheckPart,
    CheckPlan,
    CommandResult,
    Exercise,
    Loaded,
    PlanCheckInput,
    RollbackInput,
    RollbackResult,
    TestChange,
    TestFailure,
    TestReport,
    ValidateInput,
)

__all__ = [
    "AcpAgent", "AgentSessionInput", "AgentSessionResult",
    "BaseInput", "BaseMove", "WarmInput", "BudgetChange", "BudgetPause", "BudgetReceipt",
    "AttributeInput", "Attribution", "ChangeSet", "CheckProfile", "CheckpointInput", "CheckpointResult",
    "CommandResult", "Exercise", "Loaded", "ConflictInput", "Contract", "Delivered", "DeliverInput", "DeliveryConfig", "ExitClass",
    "FileEdit",
    "Finish", "HelperRole", "HelperTask", "LaneDescription", "LaneEnd", "LaneEstimate", "LanePass", "LanePhase", "LanePlan", "LaneResult",
    "LaneResume", "LaneReview", "LaneStarts", "LaneState", "LaneStatus", "LaneWorktree", "LanesFile", "MergeInput", "MergeResult",
    "ModelPrice", "ModelTurnInput", "ModelTurnResult", "ProviderWait", "Overlap", "Phase", "Plan", "PlanInput", "PlanOutcome",
    "LaneRecord", "RoundRecord", "PrepareInput", "PrepareResult", "PublishInput", "Published", "Resolution", "ReviewDecision", "ReviewPackage",
    "ReviewReceipt", "RollbackInput", "RollbackResult", "ScoreInput", "SwarmConfig", "SwarmRequest", "SwarmResult",
    "SwarmResume", "SwarmStatus", "TestChange", "TestChangeKind", "TestFailure", "TestReport", "ToolCall", "ToolInput", "ToolOutcome",
    "TurnSteps",
    "TurnTools",
    "TrialBatchRequest", "TrialBatchResult", "TrialClone", "TrialCloneInput", "TrialOutcome", "TrialScore",
    "TrialSpec", "TrialVetInput", "TrialVetting", "Usage", "Verdict",
    "ValidateInput", "ValidationConfig", "CheckPart", "CheckPlan", "PlanCheckInput", "CommandRule",
    "LaneProposal", "LanesDecision", "LanesReceipt", "PackageInfo", "ProposalCheck", "ProposeInput",
    "ProposeOptions", "ProposeOutcome", "RepoLayout",
]
