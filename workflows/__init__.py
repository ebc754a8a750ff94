"""Temporal workflows: they decide; activities do."""

from datetime import timedelta

from temporalio.common import RetryPolicy

# Git and file activities: quick, idempotent, heartbeating (activities/heartbeat.py), so a dead worker's
# activity is retried after 30 s rather than after its 5-minute timeout.
GIT = dict(start_to_close_timeout=timedelta(minutes=5), heartbeat_timeout=timedelta(seconds=30),
           retry_policy=RetryPolicy(maximum_attempts=5))


def root_cause(err: BaseException) -> str:
    """The innermost failure's message: 'Activity task failed' says less than what failed in it."""
    while getattr(err, "cause", None) is not None:
        err = err.cause  # type: ignore[attr-defined]
    return str(err) or type(err).__name__
