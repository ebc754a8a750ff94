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


@workflow.defn
class ProbeAfterSignal:
    """Waits for a signal, then runs one activity: the workflow task the signal brings goes to the worker that
    ran the workflow before (its sticky queue), which the bench has killed by then."""

    def __init__(self) -> None:
        self.go = False

    @workflow.signal
    def proceed(self) -> None:
        self.go = True

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.go)
        return await workflow.execute_activity(probe_noop, 1, start_to_close_timeout=timedelta(seconds=30))


async def serve(address: str, queue: str, sticky_s: str) -> None:
    """A worker with the given sticky-queue schedule-to-start timeout, in a process the bench can SIGKILL."""
    import asyncio

    from temporalio.client import Client
    from temporalio.worker import Worker

    client = await Client.connect(address)
    async with Worker(client, task_queue=queue, workflows=[ProbeAfterSignal, ProbeRoundTrips],
                      activities=[probe_noop], sticky_queue_schedule_to_start_timeout=timedelta(seconds=float(sticky_s))):
        print("probe worker ready", flush=True)
        await asyncio.Event().wait()

