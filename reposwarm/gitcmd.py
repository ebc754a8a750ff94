"""The one way the worker runs git: trusting nothing a lane or the repository could have planted.

A lane's worktree shares the user's git directory, and a lane's checks run code it wrote; git must not run a
hook, an fsmonitor, a pager, or another command named by configuration while the worker drives it. Every
git the worker runs gets the same overrides, through git's own environment-config mechanism
(GIT_CONFIG_COUNT/KEY/VALUE, git >= 2.31), which outranks every config file:

    core.hooksPath=/dev/null   no hook runs (post-commit, post-checkout, reference-transaction...)
    core.fsmonitor=false       no fsmonitor command
    core.pager=cat             no pager
    protocol.ext.allow=never   no ext:: transport (a command as a "remote")

Diff and merge drivers need a config entry to run anything, and the git directory is never writable by a
lane (not through its tools, not from inside the sandbox), so there is none to plant.

Use `repo(path)` for GitPython and `run(...)` for a plain subprocess; `SAFE_ENV` for anything else.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import git

OVERRIDES = {
    "core.hooksPath": "/dev/null",
    "core.fsmonitor": "false",
    "core.pager": "cat",
    "protocol.ext.allow": "never",
    "gc.auto": "0",  # no background `git gc --auto` racing the lanes
}


def _env() -> dict[str, str]:
    env = {"GIT_CONFIG_COUNT": str(len(OVERRIDES)), "GIT_TERMINAL_PROMPT": "0", "GIT_OPTIONAL_LOCKS": "0"}
    for i, (key, value) in enumerate(OVERRIDES.items()):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    return env


SAFE_ENV = _env()


def repo(path: str | Path) -> git.Git:
    """A GitPython command object at `path` whose every git call carries the overrides."""
    g = git.Git(str(path))
    g.update_environment(**SAFE_ENV)
    return g


def run(args: list[str], cwd: str | Path | None = None, **kwargs: Any) -> subprocess.CompletedProcess:
    """`git <args>` as a subprocess with the overrides (kwargs as for subprocess.run; `env` adds to ours)."""
    env = {**os.environ, **SAFE_ENV, **(kwargs.pop("env", None) or {})}
    return subprocess.run(["git", *args], cwd=cwd, env=env, **kwargs)


def popen(args: list[str], cwd: str | Path | None = None, **kwargs: Any) -> subprocess.Popen:
    env = {**os.environ, **SAFE_ENV, **(kwargs.pop("env", None) or {})}
    return subprocess.Popen(["git", *args], cwd=cwd, env=env, **kwargs)
