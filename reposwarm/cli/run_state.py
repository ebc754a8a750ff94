"""How a command learns about a run, from any machine that reaches the Temporal server.

A worker answers queries with the run's live status. When none can (no worker polls the run's task queue, or the
run has ended), the run's record on the server answers: the status the workflow writes to its memo at every
phase change, its latest review package (memo too), and how it ended (its result or its failure). No command
needs a worker's disk; `--home` on a worker host reads the deeper files (ledger, saved packages) there.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.service import RPCError, RPCStatusCode

from reposwarm.cli.common import UserError, if_interrupted, prog, said_if_slow, worker_hint
from reposwarm.contracts import Phase, ReviewPackage, SwarmResult, SwarmStatus
from reposwarm.text import error_line
from workflows.failures import root_cause
from workflows.memo import REVIEW_MEMO, STATUS_MEMO

# The run's query is named, not imported: workflows/swarm.py brings every activity's module (a second of imports
# here), which a command that only asks a question should not wait for.
STATUS_QUERY = "status"  # SwarmWorkflow.status


def _query_timeout_s() -> float:
    """8 s, or REPOSWARM_QUERY_TIMEOUT_S (at least 1 s; a value that is no number of seconds leaves the 8 s)."""
    try:
        value = max(1.0, float(os.environ.get("REPOSWARM_QUERY_TIMEOUT_S") or 8))
    except ValueError:
        return 8
    return int(value) if value.is_integer() else value


QUERY_TIMEOUT_S = _query_timeout_s()  # a running worker answers in milliseconds; with none, the server would wait 30 s
POLL_FRESH_S = 75  # a live worker's long poll reaches the server at least once a minute


class NoWorker(UserError):
    """A command needs a worker and none polls the run's task queue."""

    def __init__(self, queue: str, what: str) -> None:
        super().__init__(f"no worker is polling task queue {queue!r}, so {what}; start one ({worker_hint()}, with "
                         "the same TEMPORAL_ADDRESS and REPOSWARM_TASK_QUEUE) and try again")


async def pollers(client: Client, queue: str) -> list[Any] | None:
    """The workflow-task pollers the server remembers on `queue` (each with `identity`, `pid@host`, and
    `last_access_time`); None when the server cannot say."""
    try:
        resp = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW), timeout=timedelta(seconds=QUERY_TIMEOUT_S))
    except RPCError:
        return None
    return list(resp.pollers)


async def worker_polling(client: Client, queue: str) -> bool:
    """Whether a worker has polled the queue for workflow tasks in the last minute or so. A worker that died
    less than a minute ago still counts: whatever then asks it gives up after QUERY_TIMEOUT_S."""
    found = await pollers(client, queue)
    if found is None:
        return True  # cannot tell: let the query itself find out
    now = time.time()
    return any(now - p.last_access_time.ToSeconds() < POLL_FRESH_S for p in found)


async def last_poll(client: Client, queue: str) -> datetime | None:
    """When a worker last polled the queue for workflow tasks, as the server saw it (None: no poller it remembers,
    or it cannot say): what a command waiting on a worker tells the user."""
    found = await pollers(client, queue)
    if found is None:
        return None
    seen = [p.last_access_time.ToSeconds() for p in found]
    return datetime.fromtimestamp(max(seen), UTC) if seen else None


@dataclass
class RunView:
    """What a command knows of a run, and where it came from."""

    run_id: str
    status: SwarmStatus
    review: ReviewPackage | None
    description: WorkflowExecutionDescription
    live: bool  # the worker answered; else the record on the server did
    ending: str = ""  # how a closed run ended, in one line
    result: SwarmResult | None = None

    @property
    def closed(self) -> bool:
        return self.description.status != WorkflowExecutionStatus.RUNNING

    @property
    def queue(self) -> str:
        return self.description.task_queue

    @property
    def source(self) -> str:
        if self.live:
            return ""
        when = self.status.updated_at[11:19] or "?"
        why = "the run has ended" if self.closed else "no worker answered"
        return f"(from the run's record on the Temporal server, written at {when} UTC: {why})"


async def describe(client: Client, run_id: str) -> WorkflowExecutionDescription:
    try:
        return await client.get_workflow_handle(run_id).describe()
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise UserError(f"no such run: {run_id} ({prog()} list shows the runs)") from None
        raise UserError(f"cannot ask Temporal about run {run_id}: {err.message}") from None


async def view(client: Client, run_id: str, *, live: bool = True) -> RunView:
    """The run as a worker sees it when one answers (and `live`), else as its record on the server has it."""
    desc = await describe(client, run_id)
    record = await desc.memo_value(STATUS_MEMO, None, type_hint=SwarmStatus)
    review = await desc.memo_value(REVIEW_MEMO, None, type_hint=ReviewPackage)
    running = desc.status == WorkflowExecutionStatus.RUNNING
    if running and live and await worker_polling(client, desc.task_queue):
        handle = client.get_workflow_handle(run_id, result_type=SwarmResult)
        try:
            status = await said_if_slow(
                handle.query(STATUS_QUERY, result_type=SwarmStatus, rpc_timeout=timedelta(seconds=QUERY_TIMEOUT_S)),
                f"waiting up to {QUERY_TIMEOUT_S} s for a worker to answer for run {run_id} (else the run's record "
                "on the Temporal server answers) ...")
            return RunView(run_id, status, status.review or review, desc, live=True)
        except RPCError:
            pass  # a worker restarting, or its workflow task failing: the record answers
    if record is None:
        if running and not await worker_polling(client, desc.task_queue):
            raise NoWorker(desc.task_queue, f"run {run_id} has not begun")
        if running:
            raise UserError(f"run {run_id} cannot answer now: no worker answered in {QUERY_TIMEOUT_S} s, and it has "
                            f"no record on the server yet (it started before runs kept one, or has not begun)")
        raise UserError(f"run {run_id} ended ({_closed_word(desc)}) before runs kept a record on the server; "
                        f"`{prog()} review {run_id} --home DIR` on its worker host reads its saved package")
    view_ = RunView(run_id, record, review, desc, live=False)
    if not running:
        await _ending(client, view_)
    elif record.phase == Phase.review:
        record.queued_decision = await queued_decision(client, run_id)
    return view_


QUEUED_PAGES = 5  # pages of the history read back from its end, looking for the last workflow task a worker did


async def queued_decision(client: Client, run_id: str) -> str:
    """Review decisions sent as a Signal (`approve --queue`) that no worker has taken yet, in one line: the
    review_signal events after the history's last completed workflow task. "" when there is none, or the server
    cannot say."""
    from temporalio.api.common.v1 import WorkflowExecution
    from temporalio.api.enums.v1 import EventType
    from temporalio.api.workflowservice.v1 import GetWorkflowExecutionHistoryReverseRequest

    req = GetWorkflowExecutionHistoryReverseRequest(namespace=client.namespace,
                                                    execution=WorkflowExecution(workflow_id=run_id),
                                                    maximum_page_size=100)
    queued: list[str] = []
    try:
        for _ in range(QUEUED_PAGES):
            resp = await client.workflow_service.get_workflow_execution_history_reverse(
                req, timeout=timedelta(seconds=QUERY_TIMEOUT_S))
            for event in resp.history.events:
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
                    return "; then ".join(reversed(queued))
                attrs = event.workflow_execution_signaled_event_attributes
                if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED and \
                        attrs.signal_name == "review_signal":
                    queued.append(await _queued_one(client, attrs.input.payloads, event.event_time.ToDatetime()))
            if not resp.next_page_token:
                break
            req.next_page_token = resp.next_page_token
    except RPCError:
        return ""
    return "; then ".join(reversed(queued))


async def _queued_one(client: Client, payloads: Any, when: datetime) -> str:
    from reposwarm.contracts import ReviewDecision
    from reposwarm.text import inert_line

    stamp = f"{when:%Y-%m-%d %H:%M:%S} UTC"
    try:
        decision = (await client.data_converter.decode(payloads, [ReviewDecision]))[0]
    except Exception:  # noqa: BLE001 - whatever a sender put in a Signal is said, never a traceback
        return f"a review signal at {stamp} that is no decision (the run will ignore it)"
    who = inert_line(decision.reviewer) or "a reviewer"
    said = f": {inert_line(decision.comment)[:120]}" if decision.comment and not decision.approve else ""
    return f"{'approve' if decision.approve else 'reject'} by {who} at {stamp}{said}"


def _closed_word(desc: WorkflowExecutionDescription) -> str:
    return desc.status.name.lower().replace("_", " ") if desc.status else "closed"


async def _ending(client: Client, v: RunView) -> None:
    """How a closed run ended, in one line, and its status brought to that end."""
    desc, status = v.description, v.status
    when = f" on {desc.close_time:%Y-%m-%d %H:%M} UTC" if desc.close_time else ""
    handle = client.get_workflow_handle(v.run_id, result_type=SwarmResult)
    if desc.status == WorkflowExecutionStatus.COMPLETED:
        result = v.result = await handle.result()
        if result.delivered_branch:
            status.phase, status.delivered_branch = Phase.delivered, result.delivered_branch
            status.pull_request_url = result.pull_request_url
            pr = f" ({result.pull_request_url})" if result.pull_request_url else ""
            v.ending = f"delivered {result.delivered_branch}{pr} in {status.repo_path}{when}"
        elif result.expired:
            status.phase = Phase.expired
            v.ending = f"expired{when}: no review decision in time; nothing delivered, branches kept"
        elif result.plan is not None and not result.final_sha:
            status.phase = Phase.planned
            v.ending = f"dry run{when}: planned, nothing dispatched"
        else:
            status.phase = Phase.not_approved
            v.ending = f"not approved{when}: nothing delivered"
    elif desc.status == WorkflowExecutionStatus.FAILED:
        try:
            await handle.result()
        except WorkflowFailureError as err:
            status.error = root_cause(err)
        status.phase = Phase.failed
        v.ending = f"failed{when}: {error_line(status.error, 600) if status.error else 'see the Web UI'}"
    else:
        was = status.phase.value
        status.phase = {WorkflowExecutionStatus.CANCELED: Phase.cancelled,
                        WorkflowExecutionStatus.TERMINATED: Phase.terminated,
                        WorkflowExecutionStatus.TIMED_OUT: Phase.timed_out}.get(desc.status, status.phase)  # type: ignore[arg-type]
        v.ending = f"{_closed_word(desc)}{when} (it was in phase {was})"


def ended_at(desc: WorkflowExecutionDescription) -> datetime:
    return desc.close_time or datetime.now(UTC)


UPDATE_TIMEOUT_S = 30  # a worker takes an answer in milliseconds; past this, it is said and left


@contextmanager
def update_failures(run_id: str, timed_out: Callable[[], Exception], refused: str = "refused") -> Iterator[None]:
    """How an Update to a run can go wrong, each as one line: no worker took it in time (`timed_out`'s error), the
    run refused it (why), the run has ended."""
    try:
        yield
    except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
        raise timed_out() from None
    except WorkflowUpdateFailedError as err:
        raise UserError(f"{refused}: {error_line(str(err.cause or err), 2000)}") from None
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            raise UserError(f"run {run_id} has ended meanwhile: {prog()} status {run_id}") from None
        raise


async def send_update(handle: WorkflowHandle[Any, Any], update: Any, arg: Any, *, word: str, taken: str) -> Any:
    """An answer sent as the run's Update (`update`, with `arg`), its result once the run has acted on it; every way
    it goes wrong is one UserError line (update_failures). `word` names the answer ("the stop"), `taken` says
    what is waited for once a worker has it."""
    run_id = handle.id

    def timed_out() -> Exception:
        return UserError(f"no worker took {word} within {UPDATE_TIMEOUT_S} s; {prog()} status {run_id} says "
                         f"whether it applied (start a worker: {worker_hint()})")

    with update_failures(run_id, timed_out), if_interrupted(f"{word} was sent and may still apply: "
                                                           f"{prog()} status {run_id}"):
        sent = await said_if_slow(handle.start_update(update, arg, wait_for_stage=WorkflowUpdateStage.ACCEPTED),
                                  f"waiting up to {UPDATE_TIMEOUT_S} s for a worker to take {word} ...",
                                  timeout_s=UPDATE_TIMEOUT_S)
        return await said_if_slow(sent.result(), f"{word} was taken; {taken}")
