"""The sandbox every command a lane or the gate runs goes through (run_checks, validation, the baseline, MCP's
run_checks): a check runs code a lane wrote, so it gets nothing of the worker's but the tree it checks.

Under bubblewrap: new PID, IPC, UTS, network (unless the profile asks for it), user and cgroup namespaces; a
fresh /proc showing only the sandbox's processes; no capabilities. What it sees (mounts.py): the system folders
and /etc without its secrets, the toolchains it runs (toolchains.py), the profile's read_only_paths; a private,
sized /tmp, HOME and /dev/shm; its one tree, writable, whose `.git` is a private git view of the tree's own
commit (gitview.py); a report folder of the worker's ({junit}). No other host file, and not the repository's
git directory. Its environment is passed by name only (environment.py). Limits (limits.py): wall time,
address space, file size, processes (a pids cgroup per command where one can be made), output, and what it
may add to its tree.

Without bubblewrap, running a check is refused (`SandboxUnavailable`) unless REPOSWARM_SANDBOX=off says to run
commands as before the sandbox existed: a scrubbed environment, their own process group, a timeout; every result
then says it ran unsandboxed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from reposwarm.checks.sandbox import gitview, reaping, toolchains
from reposwarm.checks.sandbox.environment import (
    PASS_ENV,
    PASS_ENV_OFF,
    SandboxUnavailable,
    check_nice,
    private_home,
    sandbox_env,
    unsandboxed_env,
)
from reposwarm.checks.sandbox.limits import MIB, PidsCgroup, TreeCap, own_cgroups, rlimits
from reposwarm.checks.sandbox.mounts import bwrap_argv
from reposwarm.checks.sandbox.process import LAUNCHER, SUPERVISOR, Ran, watch
from reposwarm.checks.sandbox.reaping import reap_left_behind, reap_scratch
from reposwarm.checks.sandbox.toolchains import SECRET_FILE
from reposwarm.contracts import CheckProfile

__all__ = ["BWRAP", "Bind", "LAUNCHER", "MIB", "OFF_WARNING", "PASS_ENV", "PASS_ENV_OFF", "SECRET_FILE", "SUPERVISOR",
           "SWITCH", "PidsCgroup", "Ran", "SandboxUnavailable", "Tree", "bwrap", "bwrap_argv", "check_nice",
           "enabled", "own_cgroups", "reap_left_behind", "reap_scratch", "rlimits", "run", "sandbox_env", "status", "unsandboxed_env"]

SWITCH = "REPOSWARM_SANDBOX"  # "off": run checks unsandboxed
BWRAP = "REPOSWARM_BWRAP"  # the bwrap binary to use (default: `bwrap` on PATH)
OFF_WARNING = ("checks ran unsandboxed (REPOSWARM_SANDBOX=off): they could read the worker's files and "
               "environment, write wherever the worker can, and use the network")
# bwrap's own processes in a command's pids cgroup: bwrap, and the reaper it runs as the sandbox's PID 1.
BWRAP_PROCESSES = 2


@dataclass(frozen=True)
class Tree:
    """Where a command runs, and the only places it may write."""

    root: Path  # the one writable tree (a lane's worktree, the validation checkout); the command's cwd
    # the repository's common git directory: the check's git view is made from it; it is never in the sandbox
    git_dir: Path | None
    reports: Path | None = None  # a folder of the worker's the command may write ({junit}), read after it ends
    # the paths (globs, as a lane's allowed + read-only paths) the check's git view holds; None: the whole commit
    readable: tuple[str, ...] | None = None
    # host folders bound into the sandbox at their `dest` (the setup cache's node_modules in the tree, a
    # language cache), after the tree; and variables set for the command (GOCACHE=...), after the profile's env
    binds: tuple[Bind, ...] = ()
    env: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class Bind:
    host: Path
    dest: Path
    writable: bool = False


# --- is there a sandbox? ---


def enabled() -> bool:
    value = os.environ.get(SWITCH, "").strip().lower()
    if value not in ("", "on", "off"):
        raise ValueError(f"{SWITCH}={os.environ[SWITCH]!r}: it must be 'on' (the default) or 'off'")
    return value != "off"


def bwrap() -> str:
    """The bwrap binary, or SandboxUnavailable saying what to do about it."""
    given = os.environ.get(BWRAP)
    if given:
        found = given if os.path.isfile(given) and os.access(given, os.X_OK) else None
        why = f"{BWRAP}={given} does not exist or is not executable"
    else:
        found = shutil.which("bwrap")
        why = "bubblewrap (bwrap) is not installed"
    if found:
        failed = _fails(found)
        if failed is None:
            return found
        why = f"{found} cannot make a sandbox here ({failed})"
    raise SandboxUnavailable(f"refused: checks run only inside a bubblewrap sandbox, and {why}; install it "
                             f"(apt-get install bubblewrap), or set {SWITCH}=off to run checks unsandboxed")


@functools.cache
def _fails(binary: str) -> str | None:
    """Why this bwrap cannot make our sandbox on this machine (no user namespaces for a non-root user, an old
    bwrap without --disable-userns, not bwrap at all...), or None. Tried once per worker process."""
    try:
        done = subprocess.run([binary, *toolchains.system_mounts(), "--unshare-all", "--unshare-user",
                               "--disable-userns", "--cap-drop", "ALL", "--remount-ro", "/", "--", "/bin/sh", "-c",
                               "exit 7"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as err:
        return str(err)
    # (exit 7 from the command inside: a binary that exits 0 whatever it is given must not pass for bwrap)
    return None if done.returncode == 7 else (done.stderr.strip().splitlines() or [f"exit {done.returncode}"])[-1]


def status() -> str | None:
    """None when checks run sandboxed; else what a reader of the run should know, in plain words."""
    if not enabled():
        return OFF_WARNING
    try:
        bwrap()
    except SandboxUnavailable as err:
        return str(err)
    return None


# --- running ---


def _link_binds(tree: Tree) -> None:
    """Unsandboxed, a bind inside the tree is a symlink to its host folder (where the tree has nothing there)."""
    for bind in tree.binds:
        if tree.root in bind.dest.parents and not os.path.lexists(bind.dest):
            bind.dest.parent.mkdir(parents=True, exist_ok=True)
            bind.dest.symlink_to(bind.host, target_is_directory=True)


async def run(argv: list[str], tree: Tree, profile: CheckProfile, timeout_s: float) -> Ran:
    """Run `argv` in `tree.root`, sandboxed unless REPOSWARM_SANDBOX=off; its output is stdout and stderr."""
    if not enabled():
        env = unsandboxed_env(profile) | dict(tree.env)
        await asyncio.to_thread(_link_binds, tree)
        grown = await asyncio.to_thread(TreeCap, tree.root, profile)
        mark = reaping.new_mark()  # (the command keeps it: a process that leaves the check's session holds it)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SUPERVISOR, str(os.getpid()), *argv, cwd=tree.root,
            env={**env, "REPOSWARM_SUPERVISOR_NICE": str(check_nice()), reaping.MARK: mark},
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
        with reaping.recorded(proc.pid, mark):
            ran = await watch(proc, None, profile, timeout_s, grown)
        ran.sandboxed, ran.limits = False, [f"wall time {timeout_s:.0f}s", f"output {profile.max_output_mb} MB",
                                            f"the tree may grow by {profile.max_tree_mb} MB"]
        return ran
    binary = bwrap()
    home = private_home()
    env = sandbox_env(profile, home, tree.root) | dict(tree.env)
    nice = check_nice()
    scratch = gitview.scratch_dir() if tree.git_dir is not None else None
    cgroup = None
    try:
        view, note = None, b""
        if tree.git_dir is not None and scratch is not None:
            try:
                view = await asyncio.to_thread(gitview.make, tree.root, tree.git_dir, tree.readable, scratch)
            except (gitview.GitViewError, OSError) as err:  # the check runs on, without git metadata
                note = f"[reposwarm: the check's git view could not be made ({err}); it has no git metadata]\n".encode()
        grown = await asyncio.to_thread(TreeCap, tree.root, profile)
        cgroup = PidsCgroup.make(profile.max_processes + BWRAP_PROCESSES)
        limits, said = rlimits(profile, cgroup)
        # (bwrap holds the mark, and unsets it for the command: mounts.py)
        launched = env | {reaping.MARK: reaping.new_mark()}
        spec = {"parent": os.getpid(), "cgroup": str(cgroup.path) if cgroup else None, "rlimits": limits,
                "nice": nice, "env": sorted(launched),
                "argv": bwrap_argv(binary, argv, tree, profile, home, view)}
        # -I -S: no site, no user folders, no PYTHON* variables: nothing of the worker's in the launcher
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", "-c", LAUNCHER, json.dumps(spec), env=launched,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
        with reaping.recorded(proc.pid, launched[reaping.MARK]):
            ran = await watch(proc, cgroup, profile, timeout_s, grown)
        ran.output = note + ran.output
    finally:
        if cgroup is not None:
            await cgroup.remove()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    network = "network" if profile.network else "no network"
    ran.limits = [f"wall time {timeout_s:.0f}s", network, *said, f"output {profile.max_output_mb} MB"]
    return ran
