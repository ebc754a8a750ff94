"""Trials: replaying a repository's own commits as swarm tasks, and scoring the swarm against them."""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from reposwarm.contracts.base import Contract
from reposwarm.contracts.config import CheckProfile, LanesFile
from reposwarm.contracts.states import TrialOutcome


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
    search_attributes: list[str] = []  # ours the server has: the trials' runs carry those (workflows/attributes.py)


class TrialCloneInput(Contract):
    batch_id: str
    repo_path: str  # the user's repository
    sha: str  # the trial's commit: the clone must not hold it
    base: str  # its base: the clone holds the base's history alone


class TrialVetInput(Contract):
    repo_path: str  # the user's repository, where the gold commit is
    spec: TrialSpec
    profile: CheckProfile | None = None


class TrialVetting(Contract):
    """Whether a commit can judge a swarm: its tests pass on it and fail on its base (their versions from it)."""

    ok: bool
    reason: str = ""  # why not, in words
    cached: bool = False  # answered from an earlier vetting of the same commit and profile


class TrialClone(Contract):
    """What prepare_trial_clone answers: the trial's bare clone, where its swarm runs."""

    path: str

    @model_validator(mode="before")
    @classmethod
    def _recorded_shape(cls, data: Any) -> Any:
        return {"path": data} if isinstance(data, str) else data  # recorded before: the bare path


class TrialScore(Contract):
    sha: str
    run_id: str
    message: str
    status: TrialOutcome
    failure: str = ""  # why the swarm run itself failed
    bad_reason: str = ""  # why the task failed its own check (status bad_task): the swarm is not scored on it
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

    @model_validator(mode="before")
    @classmethod
    def _recorded_shape(cls, data: Any) -> Any:
        """Scores recorded before the outcome was an enum said "failed: why" in one string."""
        status = data.get("status") if isinstance(data, dict) else None
        if isinstance(status, str) and status.startswith("failed: "):
            data = {**data, "status": "failed", "failure": status.removeprefix("failed: ")}
        return data


class ScoreInput(Contract):
    batch_id: str
    clone_path: str  # where the swarm ran ("" for a bad task, which ran none)
    spec: TrialSpec
    run_id: str
    result_sha: str | None  # the swarm's delivered commit; None when the run failed
    failure: str = ""
    profile: CheckProfile | None = None
    repo_path: str  # the user's repository, for the gold commit, which the trial's clone does not hold
    bad_reason: str = ""  # the task failed its check: scored as a bad task, with no swarm run


class TrialBatchResult(Contract):
    batch_id: str
    scores: list[TrialScore]
