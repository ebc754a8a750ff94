"""Every activity heartbeats while it runs, so a worker that dies mid-activity is noticed in seconds.

Temporal retries an activity whose worker died only when one of its timeouts
expires; with a heartbeat timeout of 6 s (workflows/options.py HEARTBEAT) and a
beat every 2 s, that is 4-6 s after the kill, not the activity's whole
start-to-close timeout. One worker interceptor does it for all activities: an
asyncio task on the worker's event loop beside each, async or sync (a sync
activity busy in its pool thread, running git, a check or a parser, leaves the
loop free, and the SDK sends every heartbeat from the loop anyway). What would
cost a healthy activity its attempt is the loop stalling for longer than the
heartbeat timeout minus a beat (a step run on the loop, or one C call holding
the GIL that long), so such work goes to a thread or a process (the symbol
index parses in a process pool; README, Benchmarks, has the measured stalls).
"""

from __future__ import annotations

import asyncio
from typing import Any

from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

# Seconds between beats. worker.py forwards each (max_heartbeat_throttle_interval) rather than one per 0.8 x the
# heartbeat timeout, so the server's last beat is at most this old when a worker dies. Each beat is a write of the
# run's state in the server: at 1,000 lanes they cost it more than the steps do (docs/benchmarks.md), so one
# every 2 s, not every second, with the timeout's slack kept at 4 s.
EVERY_S = 2.0
# The first beat: the heartbeat timeout (6 s, workflows/options.py HEARTBEAT) counts from the start until then, so a worker
# that dies before it is noticed as soon as after any beat; an activity shorter than this (a quick model
# turn, most git and tool calls) sends the server no beat at all.
FIRST_S = 3.0


class _KeepDetails(ActivityOutboundInterceptor):
    """A beat without details repeats the activity's last ones: progress an activity reported ("indexing the
    repository: 4,000 of 20,272 new files parsed") stays visible between its reports."""

    def __init__(self, next: ActivityOutboundInterceptor) -> None:
        super().__init__(next)
        self.last: tuple[Any, ...] = ()

    def heartbeat(self, *details: Any) -> None:
        if details:
            self.last = details
        self.next.heartbeat(*(details or self.last))


class _Beating(ActivityInboundInterceptor):
    def init(self, outbound: ActivityOutboundInterceptor) -> None:
        self.outbound = _KeepDetails(outbound)
        super().init(self.outbound)

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if activity.info().is_local:  # a local activity keeps its workflow task alive instead; nothing to beat
            return await self.next.execute_activity(input)

        async def beat() -> None:
            await asyncio.sleep(FIRST_S - EVERY_S)
            while True:
                await asyncio.sleep(EVERY_S)
                # Straight to the SDK's outbound heartbeat, on this loop, for sync activities too: their own
                # activity.heartbeat() hands the beat to this loop and waits for it (up to 10 s), so a beat
                # thread beside them would reach the server no sooner, and could block on the loop.
                self.outbound.heartbeat()

        task = asyncio.create_task(beat())
        try:
            return await self.next.execute_activity(input)
        finally:
            task.cancel()


class HeartbeatInterceptor(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Beating(next)
