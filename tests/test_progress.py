"""Progress of a long activity stays visible: what it last reported survives the worker's periodic beats, and
`starter.py watch` shows it."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.worker import Worker

with workflow.unsafe.imports_passed_through():  # the sandbox imports this module to run LongStep
    from activities.heartbeat import FIRST_S, HeartbeatInterceptor
    from reposwarm.cli.live import progress_notes


@activity.defn
async def long_step() -> str:
    activity.heartbeat("indexing the repository: 4,000 of 20,272 new files parsed")
    await asyncio.sleep(FIRST_S + 2)  # the interceptor beats (without details) meanwhile
    return "done"


@workflow.defn
class LongStep:
    @workflow.run
    async def run(self) -> str:
        return await workflow.execute_activity(long_step, start_to_close_timeout=timedelta(seconds=60),
                                               heartbeat_timeout=timedelta(seconds=30))


async def test_reported_progress_outlives_the_periodic_beats_and_watch_shows_it(client):
    queue = f"progress-{uuid.uuid4().hex[:6]}"
    async with Worker(client, task_queue=queue, workflows=[LongStep], activities=[long_step],
                      interceptors=[HeartbeatInterceptor()],  # beats are sent on within a second:
                      max_heartbeat_throttle_interval=timedelta(seconds=1),
                      default_heartbeat_throttle_interval=timedelta(seconds=1)):
        handle = await client.start_workflow(LongStep.run, id=queue, task_queue=queue)
        await asyncio.sleep(FIRST_S + 0.5)  # after the interceptor's first beat of its own
        notes = await progress_notes(client, await handle.describe())
        assert notes == ["long_step: indexing the repository: 4,000 of 20,272 new files parsed"]
        assert await handle.result() == "done"
    assert await progress_notes(client, await handle.describe()) == []  # nothing pending
