"""A run's warm lanes, started by the client, and asked after when one has not answered for a while.

The run asks for all of a round's lanes in one workflow task. Started as child workflows, the dev server
starts them one after another, each under the run's lock, behind the running lanes' own work: 0.5-2.8 s
from the first lane to the last at 64 lanes (README, Benchmarks). Started here, by the client, all at once,
they start together; and, where every worker shares one home, eagerly: the server hands each lane's first
workflow task back to this worker in its answer to the start (request_eager_start), not through the task
queue, where 64 new lanes' first tasks waited 0.18-0.32 s for a poll. A warm lane answers its run by a
Signal (`lane_done`), so the run needs no child handle for its result; a lane that ends without answering
(terminated, timed out, failed) is found by `ended_lanes`, which the run asks now and then while it waits
(workflows/scheduler.py: WarmLanes).

Local activities: quick, and their results go in the run's history as markers, one per batch.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHistoryEventFilterType
from temporalio.common import (
    SearchAttributePair,
    TypedSearchAttributes,
    WorkflowIDConflictPolicy,
    WorkflowIDReusePolicy,
)
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from reposwarm.contracts import LaneEnd, LaneStarts
from reposwarm.review.webui import KIND_ATTR, LANE, registered_attributes

RPC = timedelta(seconds=10)
_KIND_KNOWN: dict[tuple[str, str], bool] = {}  # (server, namespace): has it RepoSwarmKind? asked once a process


async def lane_attributes(client: Client) -> TypedSearchAttributes:
    """RepoSwarmKind `lane`, where the server has it: the Web UI's saved views leave lanes out by it."""
    where = (client.service_client.config.target_host, client.namespace)
    if where not in _KIND_KNOWN:
        registered = await registered_attributes(client)
        if not registered:
            return TypedSearchAttributes.empty  # it could not say: asked again at the next batch
        _KIND_KNOWN[where] = KIND_ATTR.name in registered
    return TypedSearchAttributes([SearchAttributePair(KIND_ATTR, LANE)] if _KIND_KNOWN[where] else [])


@activity.defn
async def start_lanes(req: LaneStarts) -> dict[str, str]:
    """Start each lane's workflow on the run's task queue; what was started (workflow id -> task id), which the
    run's history keeps. A lane already running under its id is this batch's own start, made by an attempt that
    did not live to say so."""
    client = activity.client()
    attributes = await lane_attributes(client)

    async def start(workflow_id: str) -> None:
        task = req.lanes[workflow_id]
        try:
            await client.start_workflow(
                "LaneWorkflow", task, id=workflow_id, task_queue=req.task_queue, rpc_timeout=RPC,
                # eagerly only where every worker shares one home (a lane queue known before the worktree is
                # made): with worker hosts of their own, a lane's first task goes through the task queue, so
                # the lanes spread over the hosts rather than all starting on the one that ran the run's task
                request_eager_start=bool(task.lane_queue),
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
                static_summary=f"lane {task.lane} of run {task.run_id}", search_attributes=attributes,
                memo={"run_id": task.run_id, "lane": task.lane})
        except WorkflowAlreadyStartedError:
            pass

    await asyncio.gather(*(start(w) for w in sorted(req.lanes)))
    return {w: req.lanes[w].task_id for w in sorted(req.lanes)}


@activity.defn
async def ended_lanes(workflow_ids: list[str]) -> list[LaneEnd]:
    """Which of these lanes' workflows are no longer running, and why each ended, in a line: the reason given to
    a termination, the failure of a failed one."""
    client = activity.client()

    async def end(workflow_id: str) -> LaneEnd | None:
        handle = client.get_workflow_handle(workflow_id)
        try:
            described = await handle.describe(rpc_timeout=RPC)
        except RPCError as err:
            if err.status != RPCStatusCode.NOT_FOUND:
                raise
            return LaneEnd(workflow_id=workflow_id, status="NOT_FOUND", reason="not found on the server")
        if described.status in (None, WorkflowExecutionStatus.RUNNING):
            return None
        status = described.status.name
        reason = status.lower().replace("_", " ")
        async for e in client.get_workflow_handle(workflow_id, run_id=described.run_id).fetch_history_events(
                event_filter_type=WorkflowHistoryEventFilterType.CLOSE_EVENT, rpc_timeout=RPC):
            if e.HasField("workflow_execution_terminated_event_attributes"):
                reason += f" ({e.workflow_execution_terminated_event_attributes.reason})"
            elif e.HasField("workflow_execution_failed_event_attributes"):
                reason += f" ({e.workflow_execution_failed_event_attributes.failure.message})"
        return LaneEnd(workflow_id=workflow_id, status=status, reason=" ".join(reason.split())[:300])

    ends = await asyncio.gather(*(end(w) for w in sorted(set(workflow_ids))))
    return [e for e in ends if e is not None]
