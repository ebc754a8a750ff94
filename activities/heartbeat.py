"""Every activity heartbeats while it runs, so a worker that dies mid-activity is noticed in seconds.

Temporal retries an activity whose worker died only when one of its timeouts
expires; with a heartbeat timeout of 30 s that is half a minute, not the
activity's whole start-to-close timeout. One worker interceptor does it for all
activities: an asyncio task beside async ones, a thread beside the ones that run
in the worker's thread pool.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import threading
from typing import Any

from temporalio import activity
from temporalio.worker import (
    ActivityInboundInterceptor,
    ActivityOutboundInterceptor,
    ExecuteActivityInput,
    Interceptor,
)

EVERY_S = 5.0


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
        super().init(_KeepDetails(outbound))

    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        if activity.info().is_local:  # a local activity keeps its workflow task alive instead; nothing to beat
            return await self.next.execute_activity(input)
        if inspect.iscoroutinefunction(input.fn):
            async def beat() -> None:
                while True:
                    activity.heartbeat()
                    await asyncio.sleep(EVERY_S)

            task = asyncio.create_task(beat())
            try:
                return await self.next.execute_activity(input)
            finally:
                task.cancel()
        # A sync activity: this runs in its pool thread; beat from a side thread in the same activity context.
        context = contextvars.copy_context()
        stop = threading.Event()

        def beat_thread() -> None:
            while not stop.wait(EVERY_S):
                context.run(activity.heartbeat)

        thread = threading.Thread(target=beat_thread, daemon=True, name="reposwarm-heartbeat")
        activity.heartbeat()
        thread.start()
        try:
            return await self.next.execute_activity(input)
        finally:
            stop.set()
            thread.join()


class HeartbeatInterceptor(Interceptor):
    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _Beating(next)
