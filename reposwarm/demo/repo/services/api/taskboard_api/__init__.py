"""taskboard_api: the task service, as plain functions over a sqlite3 connection."""

from .handlers import complete_task, create_task, get_task, list_tasks

__all__ = ["complete_task", "create_task", "get_task", "list_tasks"]
