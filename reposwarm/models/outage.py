"""A model provider's outage, told to the run once rather than failed in every lane.

Temporal retries a model call that failed because the provider did not answer (a timeout, a refused connection,
429, 5xx) with capped backoff for the run's whole outage window (workflows/options.py: model). While it does,
each waiting call tells its run by a Signal (`provider_wait`), so `status`, `watch` and the Web UI say "waiting
for openai since 14:02 UTC (retry 7, next in 60 s)" once for the run; the call that gets an answer again says so.
A failure that is not an outage (a bad key, an unknown model, a context too long) is not retried at all, and a
malformed reply only MALFORMED_ATTEMPTS times.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from temporalio import activity
from temporalio.service import RPCError

from reposwarm.contracts import ProviderWait
from reposwarm.models import ModelError
from reposwarm.text import error_line

MALFORMED_ATTEMPTS = 6
log = logging.getLogger(__name__)


def activity_attempt() -> int:
    """This call's attempt as Temporal counts it (1 outside an activity)."""
    return activity.info().attempt if activity.in_activity() else 1


def gives_up(err: ModelError, attempt: int) -> bool:
    """Whether this failure ends the call now, rather than after Temporal's next attempt."""
    return not err.retryable or (not err.unavailable and attempt >= MALFORMED_ATTEMPTS)


def next_delay(err: ModelError) -> timedelta | None:
    """When the next attempt should be: the API's Retry-After if it said, else the retry policy's backoff."""
    return timedelta(seconds=err.retry_after) if err.retry_after else None


async def tell_run(run_id: str, wait: ProviderWait) -> None:
    """Signal the run (best effort: a run that has ended, or a call outside an activity, is told nothing)."""
    if not activity.in_activity():
        return
    try:
        await activity.client().get_workflow_handle(run_id).signal("provider_wait", wait)
    except (RPCError, RuntimeError) as err:
        log.info("could not tell run %s of the provider's state: %s", run_id, err)


def waiting(model_name: str, agent: str, err: ModelError) -> ProviderWait:
    info = activity.info()
    policy = info.retry_policy
    backoff = 0.0
    if policy is not None:
        backoff = policy.initial_interval.total_seconds() * policy.backoff_coefficient ** (info.attempt - 1)
        if policy.maximum_interval is not None:
            backoff = min(backoff, policy.maximum_interval.total_seconds())
    return ProviderWait(provider=model_name.partition(":")[0], agent=agent, since=info.scheduled_time.isoformat(),
                        attempt=info.attempt, next_retry_s=round(err.retry_after or backoff, 1),
                        error=error_line(str(err), 300))  # a proxy's 503 page: its title, one line


def answered(model_name: str, agent: str) -> ProviderWait:
    return ProviderWait(provider=model_name.partition(":")[0], agent=agent, cleared=True)
