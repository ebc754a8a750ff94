"""What `reposwarm doctor` checks of the Temporal server: that it answers at TEMPORAL_ADDRESS (within a few
seconds), the namespace, reposwarm's five search attributes (workflows/attributes.py), the memo size limit, and a
worker polling the task queue; and the worker's registration of the search attributes a server lacks, where the
server allows it (a self-hosted cluster, the dev server), said in one line where it does not (Temporal Cloud).

A server without an attribute still runs every run (a run sets only those its server has), but the Web UI's
saved views and `list --repo` need them all; an attribute registered with another type than Keyword makes the
server refuse a run that sets it.
"""

from __future__ import annotations

import asyncio
import os
import time
from datetime import timedelta
from typing import TYPE_CHECKING

from reposwarm.cli.doctor_host import Finding

if TYPE_CHECKING:
    from temporalio.client import Client

CONNECT_TIMEOUT_S = 5.0  # doctor's connection: a server that answers does so in well under a second
CALL_TIMEOUT = timedelta(seconds=10)
KEYWORD = "Keyword"
# The server's own limit on a workflow's memo (limit.memoSize.error, 2 MB by default) is dynamic configuration,
# which no API reads; the run keeps its record under it (workflows/memo.py: 400 KB status + 1.2 MB package).
MEMO_DEFAULT_MB = 2


def address() -> str:
    """Where a connection goes (reposwarm/client.py connect): the env config's address, else TEMPORAL_ADDRESS,
    else localhost:7233."""
    try:
        from temporalio.envconfig import ClientConfig

        target = ClientConfig.load_client_connect_config().get("target_host")
    except Exception:  # (a broken profile: the connection itself says what is wrong with it)
        target = None
    return str(target or os.environ.get("TEMPORAL_ADDRESS") or "localhost:7233")


def namespace_of(client: Client | None = None) -> str:
    if client is not None:
        return client.namespace
    return os.environ.get("TEMPORAL_NAMESPACE") or "default"


def start_fix(target: str) -> str:
    """How to get a server answering at `target`: a local one started, or a remote one's settings checked."""
    from reposwarm.cli.common import prog
    from reposwarm.cli.local import LOOPBACK

    host = target.rpartition(":")[0].strip("[]") or "localhost"
    if host in LOOPBACK:
        return (f"start one: {prog()} dev-server --background (in a checkout: ./temporal-dev --background; `demo` "
                "and `try` start one too), or set TEMPORAL_ADDRESS to your server's host:port")
    return ("check TEMPORAL_ADDRESS (host:port) and TEMPORAL_NAMESPACE, its TLS or API key settings (TEMPORAL_TLS_*, "
            "TEMPORAL_API_KEY, or a temporal.toml profile: TEMPORAL_PROFILE), and that this host reaches it")


async def reach(timeout_s: float = CONNECT_TIMEOUT_S) -> tuple[Client | None, Finding]:
    """A client of the server (reposwarm/client.py connect, given `timeout_s`), or None and why not."""
    from temporalio.api.workflowservice.v1 import GetSystemInfoRequest

    from reposwarm.cli.common import unreachable
    from reposwarm.client import connect

    target = address()
    try:
        client = await asyncio.wait_for(connect("reposwarm-doctor"), timeout_s)
    except TimeoutError:
        return None, Finding("FAIL", "temporal server", f"nothing answered at {target} within {timeout_s:g} s",
                             start_fix(target))
    except RuntimeError as err:
        said = str(unreachable(err))  # ("cannot reach Temporal at ADDRESS: why (start it: ...)": the fix is ours)
        return None, Finding("FAIL", "temporal server", said.rpartition(" (start it:")[0] or said, start_fix(target))
    version = ""
    try:
        info = await client.workflow_service.get_system_info(GetSystemInfoRequest(), timeout=CALL_TIMEOUT)
        version = f" (server {info.server_version})" if info.server_version else ""
    except Exception:
        pass  # (the version is only said)
    return client, Finding("ok", "temporal server", f"answers at {client.service_client.config.target_host}{version}")


async def check_namespace(client: Client) -> Finding:
    from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
    from temporalio.service import RPCError, RPCStatusCode

    name = namespace_of(client)
    try:
        resp = await client.workflow_service.describe_namespace(DescribeNamespaceRequest(namespace=name),
                                                                timeout=CALL_TIMEOUT)
    except RPCError as err:
        if err.status == RPCStatusCode.NOT_FOUND:
            return Finding("FAIL", "namespace", f"{name!r} does not exist on the server",
                           f"create it (temporal operator namespace create --namespace {name}), or set "
                           "TEMPORAL_NAMESPACE to one that exists")
        return Finding("warn", "namespace", f"cannot describe {name!r} ({err.status.name}: {err.message})",
                       "give this client a role that may read the namespace")
    retention = resp.config.workflow_execution_retention_ttl.ToTimedelta()
    days = retention.total_seconds() / 86400
    return Finding("ok", "namespace", f"{name!r} (closed runs kept {days:g} day{'s' if days != 1 else ''})")


async def search_attributes(client: Client) -> dict[str, str] | None:
    """The namespace's custom search attributes and their types ("Keyword", "Text"...); None when the server
    cannot say."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
    from temporalio.service import RPCError

    try:
        resp = await client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=client.namespace), retry=True, timeout=CALL_TIMEOUT)
    except RPCError:
        return None
    return {name: IndexedValueType.Name(kind).removeprefix("INDEXED_VALUE_TYPE_").title()
            for name, kind in resp.custom_attributes.items()}


def ours() -> list[str]:
    from reposwarm.review.webui import ATTRIBUTES

    return [key.name for key in ATTRIBUTES]


def add_by_hand(names: list[str], namespace: str) -> str:
    """How a person adds the attributes: Temporal Cloud's tcld or its UI, the temporal CLI elsewhere."""
    cloud = " ".join(f"--search-attribute {n}={KEYWORD}" for n in names)
    return (f"on Temporal Cloud: tcld namespace search-attributes add --namespace {namespace} {cloud} (or the Cloud "
            f"UI: Namespaces > {namespace} > Search Attributes, type {KEYWORD}); elsewhere, one each: temporal "
            f"operator search-attribute create --namespace {namespace} --type {KEYWORD} --name NAME")


async def check_search_attributes(client: Client) -> list[Finding]:
    have = await search_attributes(client)
    namespace = namespace_of(client)
    if have is None:
        return [Finding("warn", "search attributes", "the server does not say which it has (ListSearchAttributes "
                        "refused): a run sets none of them", add_by_hand(ours(), namespace))]
    out: list[Finding] = []
    wrong = {n: have[n] for n in ours() if n in have and have[n] != KEYWORD}
    if wrong:
        said = ", ".join(f"{n} is {kind}" for n, kind in wrong.items())
        out.append(Finding("warn", "search attributes", f"{said}, not {KEYWORD}: the filters on it (the Web UI's "
                           "saved views, list --repo) may not match as they should",
                           f"remove it (temporal operator search-attribute remove --namespace {namespace} --name "
                           f"NAME) and add it as {KEYWORD}; a dev server: start one on a new database"))
    missing = [n for n in ours() if n not in have]
    if missing:
        out.append(Finding("warn", "search attributes", f"{', '.join(missing)} not registered in {namespace!r}: "
                           "runs set only those the server has, and the Web UI's saved views need them all",
                           f"`reposwarm worker` registers them when it starts, where the server allows it; else "
                           f"{add_by_hand(missing, namespace)}"))
    return out or [Finding("ok", "search attributes", f"{', '.join(ours())} ({KEYWORD})")]


def check_memo() -> Finding:
    return Finding("ok", "memo size", f"the server's limit is unknown (dynamic config, not readable over the API); "
                   f"a run keeps its record under 1.6 MB, within the default {MEMO_DEFAULT_MB} MB "
                   "(limit.memoSize.error); set limit.memoSize.warn=524288 to quiet the server's 2 KB warnings "
                   "(reposwarm dev-server does)")


async def check_worker(client: Client) -> Finding:
    from reposwarm.cli.common import worker_hint
    from reposwarm.cli.run_state import POLL_FRESH_S, pollers
    from reposwarm.client import task_queue

    queue = task_queue()
    found = await pollers(client, queue)
    if found is None:
        return Finding("warn", "worker", f"the server does not say who polls task queue {queue!r}",
                       "give this client a role that may describe task queues")
    now = time.time()
    live = sorted({p.identity for p in found if now - p.last_access_time.ToSeconds() < POLL_FRESH_S})
    if not live:
        return Finding("warn", "worker", f"no worker polls task queue {queue!r}: a run waits until one does",
                       f"start one: {worker_hint()} (with the same TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE and "
                       "REPOSWARM_TASK_QUEUE)")
    shown = ", ".join(live[:5]) + (f" and {len(live) - 5} more" if len(live) > 5 else "")
    return Finding("ok", "worker", f"{len(live)} polling task queue {queue!r} ({shown})")


async def server_findings(client: Client | None, reached: Finding) -> list[Finding]:
    """The server's checks, once it answers (those after reaching it say nothing of a server that does not)."""
    if client is None:
        return [reached]
    return [reached, await check_namespace(client), *await check_search_attributes(client), check_memo(),
            await check_worker(client)]


# --- the worker registers what is missing ---


async def register_search_attributes(client: Client) -> tuple[list[str], str | None]:
    """Register reposwarm's search attributes the namespace lacks, one at a time (a server adds none of a list
    whose first one it has). Returns those registered now, and, where the server did not allow it or cannot say,
    one line naming the attributes and how to add them by hand."""
    from temporalio.api.enums.v1 import IndexedValueType
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest
    from temporalio.service import RPCError

    namespace = namespace_of(client)
    have = await search_attributes(client)
    if have is None:
        return [], (f"cannot tell which search attributes namespace {namespace!r} has (the server refused to list "
                    f"them): runs then set none; if any of {', '.join(ours())} is missing, add it: "
                    f"{add_by_hand(ours(), namespace)}")
    missing = [n for n in ours() if n not in have]
    added: list[str] = []
    refused: list[str] = []
    why = ""
    for name in missing:
        try:
            await client.operator_service.add_search_attributes(AddSearchAttributesRequest(
                namespace=namespace, search_attributes={name: IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD}),
                timeout=CALL_TIMEOUT)
        except RPCError as err:
            if "already" in err.message.lower():  # (another worker starting beside this one added it)
                continue
            refused.append(name)
            why = why or f"{err.status.name}: {err.message}"
            continue
        added.append(name)
    if not refused:
        return added, None
    return added, (f"the Temporal server at {client.service_client.config.target_host} did not let this worker "
                   f"register the search attributes {', '.join(refused)} in namespace {namespace!r} ({why}): runs "
                   f"set only those it has, and the Web UI's saved views need them all; add them: "
                   f"{add_by_hand(refused, namespace)}")
