"""reposwarm: a swarm of coding agents making one change in a large repository, durably, on Temporal."""

import os


def task_queue() -> str:
    """The shared task queue (REPOSWARM_TASK_QUEUE, default "reposwarm"); worker and starter must agree."""
    return os.environ.get("REPOSWARM_TASK_QUEUE") or "reposwarm"


def host_queue(shared: str) -> str:
    """This worker host's own task queue: where the activities of the worktrees it holds are sent.

    REPOSWARM_HOST_ID names the host; by default the machine's name and its worktree root, so two
    workers with separate REPOSWARM_HOME folders are two hosts even on one machine.
    """
    import hashlib
    import socket

    from reposwarm.store import home

    host = os.environ.get("REPOSWARM_HOST_ID") or (
        f"{socket.gethostname()}-{hashlib.sha1(str(home()).encode()).hexdigest()[:8]}")
    return f"{shared}-host-{host}"
