"""Every state a run or a lane can be in, as enums whose values are the strings status JSON and history hold."""

from __future__ import annotations

from enum import Enum, StrEnum


class Phase(str, Enum):
    """Where a swarm run is."""

    preparing = "preparing"
    proposing = "proposing"  # a run with no lanes file: its lanes proposed, then waiting for a person to confirm them
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
    # Only ever shown, never set by the workflow: a run that was cancelled, terminated or timed out (from the
    # server's word), whatever phase its last status had.
    cancelled = "cancelled"
    terminated = "terminated"
    timed_out = "timed_out"


class LaneStatus(str, Enum):
    """How a lane's dispatch ended (its LaneResult)."""

    done = "done"
    budget_exhausted = "budget_exhausted"
    failed = "failed"
    cancelled = "cancelled"


class LanePhase(StrEnum):
    """Where a lane is within a run (LaneState.state): its LaneStatus once it ends, then what merging made of it.

    A StrEnum: the values are the free-text strings statuses held before this enum (old histories and status
    JSON decode), and it formats as its value wherever a status is printed."""

    starting = "starting"  # the lane workflow, before it has read its task
    pending = "pending"  # planned, not dispatched yet
    running = "running"
    paused = "paused at its budget"  # waiting for a person to raise its budget or stop it
    done = "done"
    budget_exhausted = "budget_exhausted"
    failed = "failed"
    cancelled = "cancelled"
    merged = "merged"
    merged_budget_exhausted = "merged (budget exhausted)"
    redo_after_conflict = "redo after conflict"
    conflict = "conflict"  # unresolved, past the dispatch budget: its branch waits at the review gate

    @classmethod
    def ended(cls, status: LaneStatus) -> LanePhase:
        """The phase of a lane whose dispatch ended with this status (before any merge)."""
        return cls(status.value)


class ExitClass(StrEnum):
    """What a check command's exit says (reposwarm/checks/runners.py sorts each runner's codes into these)."""

    passed = "passed"
    tests_failed = "tests failed"
    no_tests = "no tests ran"
    error = "error"  # a usage, collection or internal error: the suite did not run properly
    timed_out = "timed out"

    @property
    def severity(self) -> int:
        """Worse is higher: a suite that did not run properly is worse than failing tests."""
        return {"passed": 0, "tests failed": 1, "no tests ran": 2, "error": 3, "timed out": 3}[self.value]


class Verdict(StrEnum):
    """The gate's word on a check (reposwarm/checks/verdicts.py): a check that passes only because tests changed
    is never plainly PASSED."""

    passed = "PASSED"  # no new failure, nothing lost, nothing rewritten to pass, no test configuration changed
    passed_with_test_changes = "PASSED WITH TEST CHANGES"  # green, but tests were lost, rewritten or reconfigured
    failed = "FAILED"
    # the checks did not run the change's own code: a changed module was loaded from outside the tree (an
    # installed copy, the user's checkout, a stale build): reposwarm/checks/evidence/. Never taken for a pass.
    not_judged = "NOT JUDGED"


class TestChangeKind(StrEnum):
    """How a lane changed the tests that judge it (TestChange.kind)."""

    __test__ = False

    lost = "lost"  # passed on the base; on the merged tree skipped, xfailed, deselected, missing or renamed away
    rewritten = "rewritten"  # the base's version fails against the merged code, the lane's version passes
    reconfigured = "reconfigured"  # test configuration changed (conftest.py, pytest/jest/vitest config, ...)


class TrialOutcome(StrEnum):
    scored = "scored"
    failed = "failed"  # the swarm run itself failed: TrialScore.failure says why
    bad_task = "bad_task"  # the commit failed its own check (TrialScore.bad_reason): no swarm ran, nothing scored
