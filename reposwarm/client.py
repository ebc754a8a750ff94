"""How everything reaches Temporal: the connection, the task queues, and where a lane's worktree activities go.

The starter, the CLI and the worker all connect here (Temporal's env config conventions: TEMPORAL_ADDRESS,
TEMPORAL_NAMESPACE, profiles, TLS); the routing decides which task queue a lane's worktree activities use.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import weakref
from typing import TYPE_CHECKING

from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.converter import DataConverter
from temporalio.envconfig import ClientConfig

from reposwarm import telemetry
from reposwarm.contracts.errors import ConfigError
from reposwarm.runs import objects

if TYPE_CHECKING:
    from types_aiobotocore_s3.client import S3Client

PAYLOAD_THRESHOLD = "REPOSWARM_PAYLOAD_THRESHOLD"
DEFAULT_PAYLOAD_THRESHOLD = 128 * 1024


async def connect(service: str = "reposwarm") -> Client:
    """A client by Temporal's conventions (TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE, env config profiles, TLS)."""
    config = ClientConfig.load_client_connect_config()
    config.setdefault("target_host", os.environ.get("TEMPORAL_ADDRESS", "localhost:7233"))
    converter = await data_converter()
    interceptors = telemetry.setup_tracing(service)
    rt = telemetry.runtime()
    if rt is not None:
        return await Client.connect(**config, data_converter=converter, interceptors=interceptors, runtime=rt)
    return await Client.connect(**config, data_converter=converter, interceptors=interceptors)


async def data_converter() -> DataConverter:
    """The pydantic converter, and with REPOSWARM_OBJECT_STORE set, Temporal's External Storage in its bucket.

    A payload of REPOSWARM_PAYLOAD_THRESHOLD bytes or more (default 128 KiB) goes to the bucket and history keeps
    a reference (the SDK's own claim check). Every process connects here, so workers, starters and the CLI all
    store and read payloads alike; one without it could not read a stored payload's reference.
    """
    where = objects.location()
    if where is None:
        return pydantic_data_converter
    from temporalio.contrib.aws.s3driver import S3StorageDriver
    from temporalio.contrib.aws.s3driver.aioboto3 import new_aioboto3_client
    from temporalio.converter import ExternalStorage

    threshold = payload_threshold()
    driver = S3StorageDriver(client=new_aioboto3_client(await _payload_s3()), bucket=where.bucket)
    return dataclasses.replace(pydantic_data_converter, external_storage=ExternalStorage(
        drivers=[driver], payload_size_threshold=threshold))


def payload_threshold() -> int:
    value = os.environ.get(PAYLOAD_THRESHOLD, "").strip()
    if not value:
        return DEFAULT_PAYLOAD_THRESHOLD
    try:
        threshold = int(value)
    except ValueError:
        threshold = -1
    if threshold < 0:
        raise ConfigError(f"{PAYLOAD_THRESHOLD} must be a number of bytes (0 or more), not {value!r}")
    return threshold


# The aioboto3 client is an async context manager bound to the event loop that opened it; it stays open for
# the process (workers hold it as long as they run), one per event loop and per S3 environment.
_payload_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str | None, ...],
                                            asyncio.Task[S3Client]]] = weakref.WeakKeyDictionary()
_open_clients: list[contextlib.AsyncExitStack] = []


async def _payload_s3() -> S3Client:
    env = objects.client_env()
    per_loop = _payload_clients.setdefault(asyncio.get_running_loop(), {})
    if env not in per_loop:
        per_loop[env] = asyncio.ensure_future(_open_s3())
    try:
        return await asyncio.shield(per_loop[env])
    except Exception:
        per_loop.pop(env, None)  # the next connect tries again
        raise


async def _open_s3() -> S3Client:
    import aioboto3

    stack = contextlib.AsyncExitStack()
    client = await stack.enter_async_context(aioboto3.Session().client("s3"))
    _open_clients.append(stack)
    return client


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
