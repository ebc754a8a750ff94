"""What a check's environment holds: names passed by name only, never by prefix, and nothing secret.

A check sees PATH (with toolchain shims resolved: toolchains.py), LANG, TZ and TERM of the worker's, where the
toolchain managers keep their toolchains (RUSTUP_HOME, PYENV_ROOT... when set), the names the operator lists in
REPOSWARM_CHECK_ENV_PASS, the profile's own `env`, and HOME, TMPDIR, CI and PYTHONDONTWRITEBYTECODE set for
it. No prefix passes (an `LC_*` pass-through once carried LC_FOO=<a secret> into checks): LC_ALL or any other
locale variable reaches a check only when the operator names it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from reposwarm.contracts import CheckProfile

PASS_ENV = ("PATH", "LANG", "TZ", "TERM")
# Unsandboxed (REPOSWARM_SANDBOX=off), the environment checks had before the sandbox.
PASS_ENV_OFF = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "TERM", "USER", "VIRTUAL_ENV")
PASS_LIST = "REPOSWARM_CHECK_ENV_PASS"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SandboxUnavailable(RuntimeError):
    """Checks must run sandboxed and cannot: the message is one line saying what to install or set."""


def check_env(profile: CheckProfile) -> dict[str, str]:
    for name, value in profile.env.items():
        if not _ENV_NAME.fullmatch(name) or "\x00" in value:
            raise ValueError(f"check profile env: {name!r} is not a variable name (letters, digits, '_'), or its "
                             f"value holds a NUL byte")
    return dict(profile.env)


def passed_names() -> list[str]:
    return [v.strip() for v in os.environ.get(PASS_LIST, "").split(",") if v.strip()]


def sandbox_env(profile: CheckProfile, private_home: Path, root: Path | None = None) -> dict[str, str]:
    """The check's environment; its PATH is the worker's with rustup's proxies resolved (toolchains.sandbox_path:
    the tree at `root` may name its own toolchain), and the toolchain managers' folders (RUSTUP_HOME...) passed."""
    from reposwarm.checks.sandbox import toolchains  # (it imports this module)

    env = {k: os.environ[k] for k in (*PASS_ENV, *passed_names()) if k in os.environ}
    path = toolchains.sandbox_path(private_home, root)
    if path is not None:
        env["PATH"] = path
    env |= toolchains.sandbox_vars(private_home)
    env |= {"HOME": str(private_home), "TMPDIR": "/tmp", "CI": "true", "PYTHONDONTWRITEBYTECODE": "1"}
    return env | check_env(profile)


def given_env(profile: CheckProfile) -> dict[str, str]:
    """What a check's environment holds before the tree's own variables (Tree.env, which override it): the names
    the operator passes and the profile's `env`. (The tree's PYTHONPATH is made from its PYTHONPATH.)"""
    return {k: os.environ[k] for k in passed_names() if k in os.environ} | dict(profile.env)


def unsandboxed_env(profile: CheckProfile) -> dict[str, str]:
    env = {k: os.environ[k] for k in (*PASS_ENV_OFF, *passed_names()) if k in os.environ}
    env |= {"CI": "true", "PYTHONDONTWRITEBYTECODE": "1"}
    return env | check_env(profile)


def private_home() -> Path:
    """The worker's HOME; hidden under a tmpfs at the same path, which becomes the command's private HOME (the
    same path, so toolchains under it still find themselves)."""
    home = Path(os.environ.get("HOME") or Path.home()).resolve()
    usable = home != Path("/") and (home.is_dir() or inside(home, Path("/tmp")))
    return home if usable else Path("/tmp/home")


def inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def check_nice() -> int:
    """How far below the worker checks run (REPOSWARM_CHECK_NICE, 0-19, default 10). A host running many lanes'
    CPU-heavy checks at the worker's own priority starves the worker: its heartbeats come late, Temporal times
    its activities out and runs them again (bench/results_hosts.json saw it at 32 lanes on one core)."""
    raw = os.environ.get("REPOSWARM_CHECK_NICE", "10").strip()
    if not raw.isdigit() or int(raw) > 19:
        raise SandboxUnavailable(f"REPOSWARM_CHECK_NICE must be a whole number from 0 to 19, not {raw!r}")
    return int(raw)
