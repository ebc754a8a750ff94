"""One reposwarm worker: every workflow and activity, on the shared task queue (`reposwarm worker`, worker.py).

Temporal connection settings follow Temporal's conventions (TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, or an env config profile). Model credentials are read here,
from this process's environment, and never enter workflow inputs or history.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from pydantic import ValidationError
from temporalio.client import Client
from temporalio.worker import PollerBehaviorAutoscaling, UnsandboxedWorkflowRunner, Worker

from activities.agent_lane import agent_session
from activities.checking import plan_check
from activities.converge import resolve_conflict
from activities.delivery import deliver
from activities.failure_ledger import FailureLedgerInterceptor
from activities.heartbeat import HeartbeatInterceptor
from activities.lanes import ended_lanes, start_lanes
from activities.model import model_turn, warm_prefix
from activities.planning import plan_round
from activities.proposing import check_proposal_edit, propose_lanes
from activities.publish import publish_review
from activities.repo import (
    checkpoint_lane,
    create_lane_worktree,
    describe_lane,
    look_at_base,
    merge_lane,
    prepare_run,
)
from activities.tool_call import run_tool
from activities.trials import prepare_trial_clone, score_trial, vet_trial
from activities.validate import attribute_failures, rollback_integration, validate
from reposwarm.checks import sandbox
from reposwarm.cli import doctor, doctor_server
from reposwarm.cli.common import UserError, said_if_slow, unreachable
from reposwarm.client import affinity, connect, host_queue, serve_lanes, task_queue
from reposwarm.contracts.errors import ConfigError
from workflows.lane import LaneWorkflow
from workflows.options import checks_queue
from workflows.swarm import SwarmWorkflow
from workflows.trial import TrialWorkflow

WORKFLOWS = [SwarmWorkflow, LaneWorkflow, TrialWorkflow]
# The SDK sends an activity's heartbeats at most once per min(0.8 x its heartbeat timeout, this): the
# interceptor's beat every 2 s each, and an activity's own beats with news (an agent's session id, its tally) within
# a second (activities/heartbeat.py EVERY_S); docs/benchmarks.md, Heartbeats, counts what that costs.
HEARTBEAT_THROTTLE = timedelta(seconds=1)
ACTIVITIES: list[Callable[..., Any]] = [prepare_run, look_at_base, create_lane_worktree, checkpoint_lane, describe_lane, merge_lane, deliver,
              model_turn, plan_round, warm_prefix, run_tool, validate, resolve_conflict, attribute_failures,
              rollback_integration, publish_review, prepare_trial_clone, score_trial, vet_trial, start_lanes, ended_lanes,
              propose_lanes, check_proposal_edit, plan_check, agent_session]


class Workers:
    """This host's workers: one on the shared task queue, one on the host's own queue, where the
    activities of the lane worktrees this host holds are sent. Use as `async with make_worker(...)`."""

    def __init__(self, workers: list[Worker]) -> None:
        self.workers = workers
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Workers:
        for worker in self.workers:
            await self._stack.enter_async_context(worker)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()


# A payload a workflow cannot decode (an activity's result, a child's, its own input) raises pydantic's
# ValidationError while the SDK applies the result (worker/_workflow_instance.py _convert_payloads), outside
# the workflow's code, so no try in it can catch it. As a task failure it would be retried for ever on the
# same bytes, the run looking busy; as a workflow failure it ends the workflow with the reason, which the
# parent sees (a lane ends failed). A ValidationError raised by workflow code itself is as deterministic:
# no retry of its task could pass either.
WORKFLOW_FAILURES = [ValidationError]

DEFAULT_CONCURRENCY = 128  # activity slots of a worker (make_worker)
# The garbage collector, once the worker is up: what it imported and built (modules, the SDK, pydantic's schemas) is
# frozen out of every collection, and the youngest generation is collected every 20,000 allocations, not 700. A
# lane step allocates thousands of objects (protobufs, payloads, pydantic models), nearly all freed by reference
# counting; collecting them every 700 cost 0.4-1.0 ms of CPU a step at 32-64 lanes, 0.1-0.2 ms so (bench/cpu_probe.py).
GC_THRESHOLDS = (20_000, 20, 50)
IO_THREADS = 64  # the event loop's pool for file work (main)
# Pollers as many as the work asks for, not the SDK's fixed five; and as many polling for new workflows' tasks as for
# cached ones' (the SDK's ratio is one in five): a run starts all its lanes at once, and at 32 lanes a lane's first
# model turn came 0.10 s after its start with as many, 0.15 s with one in five (bench, parallel).
POLLERS: dict[str, Any] = dict(workflow_task_poller_behavior=PollerBehaviorAutoscaling(),
                               activity_task_poller_behavior=PollerBehaviorAutoscaling(),
                               nonsticky_to_sticky_poll_ratio=1.0)


def make_worker(client: Client, queue: str | None = None, *, serve: str = "all",
                concurrency: int | None = None) -> Workers:
    """Workers for workflows and activities ("all"), or only orchestration ("workflows") or only lanes
    and other side effects ("activities"), so each can scale on its own hosts."""
    # Activity slots (and pool threads for the sync ones). A running lane holds one (a model turn, a tool call),
    # two while its worktree is made beside its first turn, and the SDK keeps one for each activity poll it has
    # open. An activity that finds no slot free is not handed back with the workflow task that scheduled it (eager
    # dispatch) but queued on the server. So this caps lanes at once across the runs on this worker, not load: at
    # 32 slots, 32 lanes got 7% of their model turns eagerly and waited 80 ms for each of the rest
    # (bench/results.json, parallel). 128 is two slots a lane for 64 lanes.
    concurrency = concurrency or int(os.environ.get("REPOSWARM_WORKER_CONCURRENCY", str(DEFAULT_CONCURRENCY)))
    serve_lanes(queue or task_queue(), client.service_client.config.target_host)
    executor = ThreadPoolExecutor(concurrency)
    shared = Worker(
        client,
        task_queue=queue or task_queue(),
        workflows=WORKFLOWS if serve in ("all", "workflows") else [],
        # an orchestration-only worker still runs the lanes' quick tools, which are local activities where
        # the lane's worktree is on the shared queue (workflows/lane.py QUICK_TOOLS)
        activities=ACTIVITIES,
        no_remote_activities=serve == "workflows",
        activity_executor=executor,
        # A dead worker's sticky queue is abandoned after 1 s, so another worker resumes its runs quickly.
        sticky_queue_schedule_to_start_timeout=timedelta(seconds=1),
        max_concurrent_activities=concurrency,
        interceptors=[HeartbeatInterceptor(), FailureLedgerInterceptor()],
        # send every beat on (one every 2 s, activities/heartbeat.py), not one per 0.8 x the 6 s heartbeat timeout:
        # the server hears from a healthy activity every 2 s (4 s of slack), and from a dead worker's at most
        # 2 s before it died, so their attempts time out 4-6 s after the kill
        max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE,
        workflow_failure_exception_types=WORKFLOW_FAILURES,
        **POLLERS,
        # Workflows run outside the SDK's sandbox. In it (SDK 1.35) every activation compiles and runs code in the
        # sandbox for each payload it converts: a third of the worker CPU of a lane's turn at 32 lanes (bench, parallel).
        # The sandbox's checks still run where they catch mistakes: tests/test_replay.py replays every recorded
        # history under it, so workflow code that calls anything non-deterministic fails the suite.
        workflow_runner=UnsandboxedWorkflowRunner(),
    )
    if serve == "workflows":
        return Workers([shared])
    own = Worker(client, task_queue=host_queue(queue or task_queue()), activities=ACTIVITIES,
                 activity_executor=executor, max_concurrent_activities=concurrency,
                 interceptors=[HeartbeatInterceptor(), FailureLedgerInterceptor()],
                 max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE)
    # Checks on a queue of their own, as many at once as this host has check slots (REPOSWARM_CHECK_SLOTS, default
    # the CPUs this process may use): a host busy with its slots does not poll, so a check's shards spread over the
    # hosts (docs/scale.md). (validate stays on the shared queue too, for runs that scheduled it there.)
    checks = Worker(client, task_queue=checks_queue(queue or task_queue()), activities=[validate],
                    max_concurrent_activities=check_slots(),
                    interceptors=[HeartbeatInterceptor(), FailureLedgerInterceptor()],
                    max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE)
    return Workers([shared, own, checks])


def check_slots() -> int:
    """How many checks this host runs at once: REPOSWARM_CHECK_SLOTS, else the CPUs this process may use."""
    value = os.environ.get("REPOSWARM_CHECK_SLOTS", "").strip()
    if value:
        if not value.isdigit() or int(value) < 1:
            raise UserError(f"REPOSWARM_CHECK_SLOTS={value!r}: a whole number of checks at once, 1 or more")
        return int(value)
    if hasattr(os, "sched_getaffinity"):  # (Linux's; macOS and Windows have none: every CPU, then)
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


def parser(prog: str = "worker.py") -> argparse.ArgumentParser:
    """The worker's options: `python worker.py` and `reposwarm worker` (reposwarm/cli/main.py) both read them here."""
    p = argparse.ArgumentParser(
        prog=prog, description="Run a reposwarm worker on this host: every workflow and activity, on the shared task "
                               "queue (REPOSWARM_TASK_QUEUE), connected to Temporal at TEMPORAL_ADDRESS. Ctrl-C (or "
                               "SIGTERM) stops it once the activities in flight finish.")
    p.add_argument("--serve", choices=["all", "workflows", "activities"], default="all",
                   help="all (default), only orchestration (workflows), or only lanes and side effects (activities)")
    p.add_argument("--concurrency", type=int, metavar="N",
                   help=f"activities at once (default: REPOSWARM_WORKER_CONCURRENCY, else {DEFAULT_CONCURRENCY})")
    return p


def run(argv: list[str] | None = None, prog: str = "worker.py") -> int:
    """Parse the options and run the worker until stopped; its exit code. A Temporal server out of reach, or a bad
    setting, is one `error: ...` line and exit code 2, as in every reposwarm command."""
    args = parser(prog).parse_args(argv)
    try:
        asyncio.run(main(args))
    except (UserError, ConfigError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0


async def main(args: argparse.Namespace) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    sandbox.reap_left_behind()  # what the checks of a dead worker of this host left running: killed (reaping.py)
    sandbox.reap_scratch()  # and the temporary folders its checks and agent sessions left (git views, sockets)
    warnings = doctor.refuse_worker(args.serve)  # (what would fail later, its sandbox or model key: said now)
    try:
        client = await said_if_slow(connect("reposwarm-worker"), "waiting for the Temporal server at "
                                    f"{os.environ.get('TEMPORAL_ADDRESS', 'localhost:7233')} to answer ...")
    except RuntimeError as err:
        raise unreachable(err) from None
    target = client.service_client.config.target_host
    for said in warnings:  # (said once connected: a worker that cannot connect says only that, in one line)
        logging.warning("%s", said)
    added, refused = await doctor_server.register_search_attributes(client)  # (the Web UI's views need them all)
    if added:
        logging.info("registered the search attributes %s in namespace %r", ", ".join(added), client.namespace)
    if refused:
        logging.warning("%s", refused)
    try:
        lanes_on = affinity(target)
    except ValueError as err:
        raise UserError(str(err)) from None
    # The activities' file work off the event loop (asyncio.to_thread: store, records, ledger) goes to the loop's
    # default pool, which Python sizes by cores (six threads here): at 64 lanes a model turn queued there 0.1-0.3 s.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(IO_THREADS, thread_name_prefix="io"))
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        asyncio.get_running_loop().add_signal_handler(sig, stop.set)
    async with make_worker(client, serve=args.serve, concurrency=args.concurrency):
        gc.freeze()
        gc.set_threshold(*GC_THRESHOLDS)
        if (warning := sandbox.status()) is not None:  # said once here; every check and review says it again
            logging.warning("%s", warning)
        logging.info("reposwarm worker on task queue %r at %s (serving %s; lane worktrees on the %s queue)",
                     task_queue(), target, args.serve, lanes_on)
        await stop.wait()
        logging.info("stopping: finishing the activities in flight")
