"""How everything reaches Temporal: the connection, the task queues, and where a lane's worktree activities go.

The starter, the CLI and the worker all connect here (Temporal's env config conventions: TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, profiles, TLS); the routing decides which task queue a lane's worktree activities use.
"""

from __future__ import annotations

import os

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.envconfig import ClientConfig

from reposwarm import telemetry


async def connect(service: str = "reposwarm") -> Client:
    """A client by Temporal's conventions (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, env config profiles, TLS)."""
    config = ClientConfig.load_client_connect_config()
    config.setdefault("target_host", os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"))
    interceptors = telemetry.setup_tracing(service)
    rt = telemetry.runtime()
    if rt is not None:
        return await Client.connect(**config, data_converter=pydantic_data_converter, interceptors=interceptors,
                                    runtime=rt)
    return await Client.connect(**config, data_converter=pydantic_data_converter, interceptors=interceptors)



def task_queue() -> str:
    """The shared task queue (REPOSWARM_TASK_QUEUE, default "reposwarm"); worker and starter must agree."""
    return os.environ.get("REPOSWARM_TASK_QUEUE") or "reposwarm"


def affinity(target_host: str) -> str:
    """Where a lane's worktree activities go: "host" (the worktree host's own queue) or "shared" (the shared queue).

    REPOSWARM_AFFINITY=host|shared|auto (default auto). Host queues are needed when workers run on several
    machines (or with separate REPOSWARM_HOME folders): a worktree is on one of them. On one machine they only
    cost time: an activity on another task queue than its workflow's misses the SDK's eager dispatch, about
    40 ms a call here (bench/results.json). auto is "shared" when the Temporal server is on the loopback
    interface (the embedded dev server, which no other machine reaches) and REPOSWARM_HOST_ID is unset.
    """
    mode = (os.environ.get("REPOSWARM_AFFINITY") or "auto").strip().lower()
    if mode not in ("host", "shared", "auto"):
        raise ValueError(f"REPOSWARM_AFFINITY must be host, shared or auto, not {mode!r}")
    if mode != "auto":
        return mode
    return "shared" if _loopback(target_host) and not os.environ.get("REPOSWARM_HOST_ID") else "host"


def _loopback(target_host: str) -> bool:
    import ipaddress

    host = target_host.rsplit(":", 1)[0].strip("[]") if target_host.count(":") <= 1 or "]" in target_host \
        else target_host  # host:port, [v6]:port, or a bare v6 address
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def host_queue(shared: str) -> str:
    """This worker host's own task queue: where the activities of the worktrees it holds are sent.

    REPOSWARM_HOST_ID names the host; by default the machine's name and its worktree root, so two
    workers with separate REPOSWARM_HOME folders are two hosts even on one machine.
    """
    import hashlib
    import socket

    from reposwarm.runs.store import home

    host = os.environ.get("REPOSWARM_HOST_ID") or (
        f"{socket.gethostname()}-{hashlib.sha1(str(home()).encode()).hexdigest()[:8]}")
    return f"{shared}-host-{host}"


_lane_queues: dict[str, str] = {}  # shared queue -> where its lanes' worktree activities go, set by the worker


def serve_lanes(shared: str, target_host: str) -> str:
    """Settle, for the workers of this process on `shared`, where lane worktrees made here are served; returns it.

    Called by worker.make_worker: the worker knows the Temporal server it reaches (a sync activity cannot ask).
    """
    _lane_queues[shared] = shared if affinity(target_host) == "shared" else host_queue(shared)
    return _lane_queues[shared]


def lane_queue(shared: str) -> str:
    """The task queue for the activities of a lane worktree made on this worker (see affinity)."""
    return _lane_queues.get(shared) or host_queue(shared)
