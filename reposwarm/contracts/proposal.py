"""Lanes the swarm proposes itself: what the repository's structure says (from code, not a model), what the
planner proposes from it, and what a person answers before anything is dispatched."""

from __future__ import annotations

from pydantic import Field

from reposwarm.contracts.base import Contract
from reposwarm.contracts.config import CheckProfile, HelperRole
from reposwarm.contracts.plan import Plan

DEFAULT_MAX_LANES = 8


class PackageInfo(Contract):
    """One unit of the repository's structure: a Go module or package, a Python package, an npm/pnpm/yarn
    workspace, a Cargo workspace member, a Bazel/Buck/Pants package, or else a top-level folder."""

    path: str  # its folder from the repository root, "" for the root itself
    kind: str  # go-module, go-package, python, npm, cargo, bazel, buck, pants, folder
    name: str = ""  # as its own manifest names it (module path, package name), else the folder's name
    files: int = 0  # tracked files below it (its own, not a nested package's)
    owners: list[str] = []  # CODEOWNERS' owners of the folder
    imports: list[str] = []  # paths of the other packages its files import (the symbol index's import graph)
    tests: list[str] = []  # its test folders or files (where tests live apart)
    check: list[str] = []  # the check command detected for it alone, as an argv (empty: none found)
    size_bytes: int = 0  # the size of its own files (lanes' budgets are sized from it)
    # its own files as patterns of a slice (reposwarm/intel/layout.py): its folder, less the nested packages' folders
    paths: list[str] = []


class RepoLayout(Contract):
    """The repository's structure, read from its files: the packages, who owns what, what imports what, and the
    checks the repository says it has. Deterministic for a given tree."""

    packages: list[PackageInfo] = []
    profile: CheckProfile | None = None  # the detected validation profile for the whole repository
    notes: list[str] = []  # why each guess was made, said to the user
    files: int = 0  # tracked files in all


class LaneProposal(Contract):
    """Lanes for one task: the lanes (as a lanes file has them), the round-1 plan (a goal per lane and the
    interface contract), the validation profile, and what was checked. Every field a model filled is checked
    by the same code that checks a lanes file (reposwarm/lanes/loading.py) and by the guardrails, before it is shown."""

    lanes: dict[str, HelperRole] = {}
    plan: Plan | None = None
    profile: CheckProfile | None = None
    overlaps: list[str] = []  # declared: paths two lanes may both write (their merges go to the converger)
    predicted_overlaps: list[str] = []  # files two lanes would both need to write, as the import graph predicts
    estimated_cost_usd: dict[str, float] = {}  # by lane, from the dry-run estimator
    estimated_tokens: dict[str, int] = {}
    warnings: list[str] = []
    problems: list[str] = []  # the guardrails' refusals of the last reply (the proposal failed when non-empty)
    attempts: int = 0  # planner replies asked for (at most 2: the second carries the first one's problems)
    decided: str = ""  # "accepted by ana at ...", "stopped by ana at ...", "accepted at once (run --yes)"


class LanesDecision(Contract):
    """A person's answer to a proposal (the `confirm_lanes` Update, or its Signal twin): accept it as it is,
    accept an edited version (a lanes file's YAML, checked again), or stop the run."""

    accept: bool
    lanes_yaml: str = Field(default="", max_length=1_000_000)  # an edited proposal, as a lanes file
    reviewer: str = Field(default="", max_length=200)
    comment: str = Field(default="", max_length=100_000)
