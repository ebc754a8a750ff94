"""Every activity's options, in one place: timeouts, heartbeats and retry policies.

Temporal owns retries (no retry loops of our own around model or git calls),
so every attempt is visible in the history. Every activity heartbeats every
2 s (activities/heartbeat.py; worker.py sends each beat on), so when its
worker dies, its attempt times out 4-6 s later (the 6 s heartbeat timeout,
counted from the last beat) and runs again on another worker a second after
that (the retry policies' first interval), rather than after its whole
timeout: bench/bench_swarm.py measures it (recovery), and README, Benchmarks,
says why these values.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING, Any

from temporalio.common import RetryPolicy

if TYPE_CHECKING:
    from reposwarm.contracts import CheckProfile

# An attempt is taken for lost (its worker dead) after this long without a heartbeat. The beats come every
# 2 s once an activity has run 3 s (activities/heartbeat.py FIRST_S, EVERY_S), so two in a row may be lost, or
# the worker's event loop stall for four seconds, before a healthy attempt is given up: the longest gap the server
# saw between beats was 1.0-2.25 s, at 32 lanes and while plan_round indexed 4M lines (docs/benchmarks.md). A
# 4 s timeout (3 s of stall) once failed a healthy attempt on a worker loaded by the whole test suite; 6 s keeps
# the 4 s of slack with half the beats of one a second (each is a write of the run's state in the server:
# docs/benchmarks.md, Heartbeats), and a killed worker's call going on within 5-7 s.
HEARTBEAT = timedelta(seconds=6)
# The first retry of an attempt that failed, timed out or died with its worker (Temporal's default is 1 s too):
# a dead worker's call goes on elsewhere this long after its heartbeat timeout. A model call's later retries back
# off from it, doubling up to a minute; a provider's Retry-After overrides it (reposwarm/models/outage.py).
FIRST_RETRY = timedelta(seconds=1)

# Git and file activities: quick and idempotent (prepare, worktrees, checkpoints, merges, publishing...).
GIT: dict[str, Any] = dict(start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=HEARTBEAT,
                           retry_policy=RetryPolicy(maximum_attempts=5))
def checks_queue(shared: str) -> str:
    """Where checks (validate) go: each host takes only as many at once as its check slots (worker.py), so the
    shards of a check spread over the hosts instead of queueing on the first to poll (docs/scale.md)."""
    return f"{shared}.checks"


# Planning a check (activities/checking.py): a checkout and the import graph, cold on a large repository.
CHECK_PLAN: dict[str, Any] = dict(start_to_close_timeout=timedelta(minutes=15), heartbeat_timeout=HEARTBEAT,
                                  retry_policy=RetryPolicy(maximum_attempts=3))
# A model call (a lane's turn, a planning round): rate limits and 5xx answers are retried, honouring Retry-After.
MODEL: dict[str, Any] = dict(start_to_close_timeout=timedelta(minutes=10), heartbeat_timeout=HEARTBEAT,
                             retry_policy=RetryPolicy(initial_interval=FIRST_RETRY, maximum_attempts=6))
PLAN = MODEL
# The converger: a model call and a merge; fewer attempts, since a lane redone is the fallback.
CONVERGE: dict[str, Any] = dict(start_to_close_timeout=timedelta(minutes=10), heartbeat_timeout=HEARTBEAT,
                                retry_policy=RetryPolicy(initial_interval=FIRST_RETRY, maximum_attempts=4))
# Delivery: git and, where configured, a push and the forge's API.
DELIVER: dict[str, Any] = dict(start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=HEARTBEAT,
                               retry_policy=RetryPolicy(maximum_attempts=5, initial_interval=FIRST_RETRY))
# A lane's quick tools, run as local activities where the lane's worktree is on the workflow's own host.
QUICK: dict[str, Any] = dict(start_to_close_timeout=timedelta(seconds=60), retry_policy=RetryPolicy(maximum_attempts=3))
# Starting a run's warm lanes by the client, and asking after lanes that have not answered (local activities).
LANES: dict[str, Any] = dict(start_to_close_timeout=timedelta(seconds=60),
                             retry_policy=RetryPolicy(initial_interval=FIRST_RETRY, maximum_attempts=5))
# A trial batch's bare clone of the repository (objects shared, so quick but for a huge repository).
TRIAL_CLONE: dict[str, Any] = dict(start_to_close_timeout=timedelta(minutes=30), heartbeat_timeout=HEARTBEAT,
                                   retry_policy=RetryPolicy(maximum_attempts=3))


def agent_session(session_s: float) -> dict[str, Any]:
    """A lane's outside agent, one session (activities/agent_lane.py): as long as the session may run, and some
    for its checkpoint. A worker killed mid-session is seen by the heartbeat, and the next attempt resumes it."""
    return dict(start_to_close_timeout=timedelta(seconds=session_s + 300), heartbeat_timeout=HEARTBEAT,
                retry_policy=RetryPolicy(initial_interval=FIRST_RETRY, maximum_attempts=3))


def host_bound(host_timeout_s: float) -> dict[str, Any]:
    """An activity sent to the one host holding a lane's worktree: not picked up in this time, the host is taken
    for lost (the lane is rebuilt elsewhere from its checkpoints)."""
    return dict(schedule_to_start_timeout=timedelta(seconds=host_timeout_s))


def tool(check_profiles: dict[str, CheckProfile]) -> dict[str, Any]:
    """A lane's tool call, as an activity: as long as its longest check (run_checks) could take, and some."""
    longest = max((p.timeout_s for p in check_profiles.values()), default=0)
    return dict(start_to_close_timeout=timedelta(seconds=longest + 120), heartbeat_timeout=HEARTBEAT,
                retry_policy=RetryPolicy(maximum_attempts=3))


def validation(profile: CheckProfile) -> dict[str, Any]:
    """The check profile on a tree: a failing command runs twice (the flaky check), so allow for both."""
    return dict(start_to_close_timeout=timedelta(seconds=2 * profile.timeout_s + 120), heartbeat_timeout=HEARTBEAT,
                retry_policy=RetryPolicy(maximum_attempts=2))


def scoring(profile: CheckProfile | None) -> dict[str, Any]:
    """Scoring a trial: the commit's own tests run once on the swarm's result, then a diff."""
    return dict(start_to_close_timeout=timedelta(seconds=(profile.timeout_s if profile else 0) + 300),
                heartbeat_timeout=HEARTBEAT, retry_policy=RetryPolicy(maximum_attempts=3))


def model(outage_s: float) -> dict[str, Any]:
    """A model call (a lane's turn, a planning round): retried while the provider does not answer, with backoff
    capped at a minute, for the run's outage window (swarm.model_outage_s, 30 minutes by default); a failure
    that is not an outage is not retried (reposwarm/models/outage.py). The window bounds every attempt, so a
    call that starts just before it closes still has its own start-to-close time."""
    return dict(start_to_close_timeout=timedelta(minutes=10), heartbeat_timeout=HEARTBEAT,
                schedule_to_close_timeout=timedelta(seconds=outage_s) + timedelta(minutes=10),
                retry_policy=RetryPolicy(initial_interval=FIRST_RETRY, backoff_coefficient=2.0,
                                         maximum_interval=timedelta(seconds=60), maximum_attempts=0))
