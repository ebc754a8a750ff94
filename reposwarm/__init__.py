"""reposwarm: a swarm of coding agents making one change in a large repository, durably, on Temporal."""

import os


def task_queue() -> str:
    """The shared task queue (REPOSWARM_TASK_QUEUE, default "reposwarm"); worker and starter must agree."""
    return os.environ.get("REPOSWARM_TASK_QUEUE") or "reposwarm"
