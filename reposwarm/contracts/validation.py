"""Validation: the check profile's report on a tree, who is answerable for its failures, and rollbacks."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import model_validator

from reposwarm.contracts.base import Contract
from reposwarm.contracts.config import CheckProfile
from reposwarm.contracts.states import ExitClass, TestChangeKind, Verdict


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


class TestChange(Contract):
    """A test a lane lost, rewrote to pass, or whose configuration it changed: never plainly PASSED."""

    __test__ = False

    kind: TestChangeKind
    test: str  # the test's name, or the file for a configuration change
    file: str | None = None
    command: str = ""
    lanes: list[str] = []  # the lanes that changed the file
    reason: str = ""  # the lane's own words for it (its goal or finish), or "" when it gave none
    detail: str = ""  # what happened to it: "passed on the base, skipped on the merged tree"
    diff: str = ""  # the change to the test's file (bounded)


class CommandResult(Contract):
    argv: list[str]  # as configured ({junit} not yet filled in)
    exit_code: int | None
    timed_out: bool = False
    duration_s: float
    output_tail: str = ""
    log_ref: str | None = None
    sandboxed: bool = True  # False when it ran without the sandbox (REPOSWARM_SANDBOX=off)
    runner: str = ""  # the test runner known by its command line (reposwarm/checks/runners.py), or ""
    exit_class: ExitClass | None = None  # None: not sorted (a result recorded before exit classes)
    tests_run: int | None = None  # tests that ran (not skipped); None: no per-test results
    cases_ref: str | None = None  # every test's result, as JSON in the run's store
    # Why it failed, first, in words: "command not found: pytset", "timed out after 30 s", "killed by the memory
    # limit", "exited 2"; "" when it passed or a result recorded before reasons.
    reason: str = ""
    # Test results in its output that its parser did not read (reposwarm/checks/runners/counts.py): tests no
    # verdict saw, so the check is not fully judged and never PASSED. 0: none (or a result recorded before).
    unparsed_results: int = 0
    loaded: Loaded | None = None  # what its processes loaded (None: no evidence taken, or recorded before)

    @model_validator(mode="before")
    @classmethod
    def _recorded_shape(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("exit_class") == "":  # recorded while it was free text
            data = {**data, "exit_class": None}
        return data


class Loaded(Contract):
    """What one command's processes loaded, read from the runtimes themselves (reposwarm/checks/evidence/): the
    Python interpreters' modules, node's V8 coverage, the packages `go test` built. Only what concerns the tree:
    tree-relative paths, bounded (the whole list stays in the run's store, `ref`)."""

    languages: list[str] = []  # the runtimes that gave evidence: "python", "node", "go", ...
    # tree source files loaded from the tree (only those among `watched`, the files the check was asked about;
    # every one when nothing was asked, capped)
    inside: list[str] = []
    # tree source file -> where its module was loaded from instead ("/usr/lib/python3/site-packages/attr/_make.py",
    # "dist/index.js (a build not made from this tree)"): the check ran another copy of that code
    outside: dict[str, str] = {}
    # lines executed per watched file, where the runtime gives them cheaply (diff coverage); absent: not measured
    lines: dict[str, list[int]] = {}
    ref: str | None = None  # every file loaded, per process, as JSON in the run's store
    note: str = ""  # why there is no evidence, or only some ("node gave no V8 coverage: ...")


class Exercise(Contract):
    """Whether the check ran the change's own code: each changed source file the runtimes could speak for, sorted.
    Made from the commands' `Loaded` and the files the lanes changed (reposwarm/checks/evidence/)."""

    loaded: list[str] = []  # changed source files some command loaded from the tree
    outside: dict[str, str] = {}  # changed source file -> where its module was loaded from instead: NOT JUDGED
    not_loaded: list[str] = []  # changed source files no command loaded ("not exercised by any check")
    unknown: list[str] = []  # changed files no evidence speaks for (a language no runtime reported, data files)
    shadowed: dict[str, str] = {}  # unchanged tree files loaded from outside the tree (a warning), capped
    # changed file -> [executed changed lines, changed lines] where measured (diff coverage)
    diff_lines: dict[str, tuple[int, int]] = {}

    @property
    def counted(self) -> int:
        return len(self.loaded) + len(self.outside) + len(self.not_loaded)


class CheckTimes(Contract):
    """Where a check's wall time went, in seconds (issue 49): what a validation costs beyond its commands."""

    tree_s: float = 0.0  # the checkout of the checked tree, and choosing what of the profile runs there
    sandbox_s: float = 0.0  # the commands' sandbox: caches, the tree's import roots, evidence; put away after
    setup_s: float = 0.0  # the profile's setup step (run, or restored from its cache)
    commands_s: float = 0.0  # the commands themselves, a failing command's re-run included
    second_run_s: float = 0.0  # the base commit's tests against the merged code (changed test paths only)
    results_s: float = 0.0  # reading the runners' reports and evidence, and judging them against the base
    total_s: float = 0.0  # the whole validation, as its activity saw it

    def __add__(self, other: CheckTimes) -> CheckTimes:
        return CheckTimes(**{k: round(v + getattr(other, k), 3) for k, v in self.model_dump().items()})


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
    # The gate's word (reposwarm/checks/verdicts.py); None in a report recorded before verdicts: see `verdict_of`.
    verdict: Verdict | None = None
    test_changes: list[TestChange] = []  # lost, rewritten and reconfigured tests, with the lanes that did it
    # The second run, only when the lanes changed test paths: the base commit's tests against the merged code
    # (reposwarm/checks/changed_tests.py). Its time, and how many test paths it put back; None: not run.
    base_tests_s: float | None = None
    base_tests_paths: int = 0
    # What that second run ran (reposwarm/checks/selection/second_run.py): the tests of the changed test paths,
    # selected by each runner's own selector, or a command whole and why, in words; and how many tests ran in it.
    second_run: str = ""
    second_run_tests: int | None = None
    times: CheckTimes | None = None  # where its time went (None: a report recorded before times)
    # What the setup step did for this tree, one line each (reposwarm/checks/setup.py): ran, restored, failed.
    setup: list[str] = []
    # Not the whole profile (reposwarm/checks/selection/plans.py): what ran, in words ("affected: 14 test files of 1,600,
    # from 3 changed files"); "": every test of every command. Said wherever the verdict is.
    selection: str = ""
    skipped: list[str] = []  # "`command`: why" for each command this check did not run (when:, nothing affected)
    # Whether the check ran the change's own code (reposwarm/checks/evidence/); None: no evidence (recorded before)
    exercise: Exercise | None = None

    @property
    def verdict_of(self) -> Verdict:
        """The verdict, also for reports recorded before verdicts (then `passed` says it)."""
        if self.verdict is not None:
            return self.verdict
        return Verdict.passed if self.passed else Verdict.failed


class CheckPart(Contract):
    """What one validate activity runs of its profile (reposwarm/checks/selection/plans.py): some commands whole, some only
    the tests they select (their runner's selector), the rest not at all."""

    whole: list[str] = []  # command lines run whole
    names: dict[str, list[str]] = {}  # command line -> the tests it runs (files, ./go/packages, crates)
    label: str = ""  # what the check says it ran: "affected: ...", "the remainder: ...", "" the whole profile
    shard: tuple[int, int] = (1, 1)  # this part is shard i of n
    skipped: list[str] = []  # "`command`: why" not run by this part
    # `selector: bazel|nx|turbo|pants|go`: the command lines the repository's own build tool narrows, in the
    # part's sandbox, from the files changed since `since` (reposwarm/checks/selection/toolselect.py)
    tool: list[str] = []
    changed: list[str] = []
    since: str = ""


class CheckPlan(Contract):
    """What plan_check answers: the parts (one per shard) a check runs as separate activities."""

    parts: list[CheckPart]
    changed: list[str] = []  # the files the check's changes touch (capped)
    changed_count: int = 0
    fallback: str = ""  # why a selected check runs some command whole ("" when none had to)
    label: str = ""  # as CheckPart.label, also when there is no part to run
    skipped: list[str] = []  # as CheckPart.skipped


class PlanCheckInput(Contract):
    run_id: str
    repo_path: str
    ref: str  # the tree checked
    since: str = ""  # the changes are those from here to `ref` ("" none known: every command whole)
    profile: CheckProfile
    scope: Literal["all", "affected", "remainder"] = "affected"
    single: bool = False  # one part, whatever the commands' shards


class ValidateInput(Contract):
    run_id: str
    repo_path: str
    ref: str
    profile_name: str
    profile: CheckProfile
    label: str = ""  # "baseline", or "round 1 check 2": names the kept ref of a validated state
    baseline: TestReport | None = None  # the base commit's report: the result is judged against it, per test
    # For the test changes (issue 31): the files each lane changed (in any round), and each lane's own words
    # (its goal, its finish summary), which may say why a test had to change.
    touched: dict[str, list[str]] = {}
    statements: dict[str, list[str]] = {}
    part: CheckPart | None = None  # only these commands and tests (reposwarm/checks/selection/plans.py); None: the profile
    # The base moved (reposwarm/checks/selection/rebased.py): the old base's baseline, which the part's run on `ref` (the new
    # base) updates per test into `ref`'s baseline.
    moved_from: TestReport | None = None


class AttributeInput(Contract):
    repo_path: str
    ref: str
    failures: list[TestFailure]
    touched: dict[str, list[str]]  # lane -> files it changed this round
    lane_paths: dict[str, list[str]]  # lane -> its allowed paths
    # The base commit: a file a lane touched that is the same there as at `ref` (a test it skipped, then restored)
    # is no change of that lane's to blame. "": every touched file counts (an input recorded before).
    base: str = ""


class Attribution(Contract):
    """What attribute_failures answers: the new failures each lane is answerable for (TestFailure.key)."""

    by_lane: dict[str, list[str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _recorded_shape(cls, data: Any) -> Any:
        # Recorded before this model: the bare {lane: [key, ...]}. (A lane named by_lane maps to a list there.)
        if isinstance(data, dict) and not isinstance(data.get("by_lane"), dict):
            return {"by_lane": data}
        return data


class RollbackInput(Contract):
    run_id: str
    repo_path: str
    integration_branch: str
    from_sha: str
    to_sha: str


class RollbackResult(Contract):
    """What rollback_integration answers: where the integration branch is now (the last green state)."""

    integration_sha: str

    @model_validator(mode="before")
    @classmethod
    def _recorded_shape(cls, data: Any) -> Any:
        return {"integration_sha": data} if isinstance(data, str) else data  # recorded before: the bare sha
