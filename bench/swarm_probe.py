"""A trivial workflow and activity for bench/bench_swarm.py: the raw cost of one Temporal activity round trip.

Bench code, not product code: it lives in a module of its own (not the bench's __main__) so that the workflow
sandbox can import it like any workflow module, and it imports nothing heavy.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity, workflow


@activity.defn
async def probe_noop(i: int) -> int:
    """Does nothing: what is left of a round trip is Temporal's own cost (and the SDK's)."""
    return i


@workflow.defn
class ProbeRoundTrips:
    """N activities, one after the other, as a lane schedules its model turns and tool calls: on the workflow's
    own task queue (where the SDK may dispatch them eagerly), or on another queue (always through matching)."""

    @workflow.run
    async def run(self, n: int, activity_queue: str = "") -> int:
        for i in range(n):
            await workflow.execute_activity(probe_noop, i, task_queue=activity_queue or None,
                                            start_to_close_timeout=timedelta(seconds=30))
        return n
