"""The sandboxed command's processes: the launcher that becomes bwrap, the supervisor of an unsandboxed check,
and the watch over a running command (its output cap, its timeout, its tree's growth)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field

from reposwarm.checks.sandbox.limits import MIB, PidsCgroup, TreeCap
from reposwarm.contracts import CheckProfile


@dataclass
class Ran:
    exit_code: int | None  # None: killed (timeout, output or tree over its cap)
    output: bytes
    timed_out: bool = False
    output_cut: bool = False  # the output passed max_output_mb: the command was ended there
    sandboxed: bool = True
    limits: list[str] = field(default_factory=list)  # the limits in force, in words
    tree_over: bool = False  # it added more than max_tree_mb to its tree: ended there, its new files removed
    stopped: str = ""  # why it was ended at a limit, in words ("" when it was not)


# The sandboxed command's first process: it dies with the worker even before bwrap takes over (bwrap's
# --die-with-parent does the same from then on, and the sandbox's PID 1 takes every process in it along), joins
# the command's pids cgroup, sets the resource limits, then becomes bwrap. (A preexec_fn would do the same in
# the worker's forked child, which is unsafe in a threaded worker.)
# PR_SET_PDEATHSIG fires when the *thread* that forked the process ends, not only the whole worker. That is safe
# because sandbox.run forks in the thread running the event loop that awaits the command (`watch`), and `watch`
# returns only once the command has ended (it kills it on every way out: timeout, a cap, a cancellation). That
# thread is the worker's main loop (async activities: validate) or a thread of the activity pool blocked in
# asyncio.run for the whole call (sync ones: the run tool, run_checks), and ThreadPoolExecutor's threads end only
# at its shutdown, after their work. tests/test_reaping.py runs a check from a pool thread while others end.
LAUNCHER = """
import ctypes, json, os, resource, sys
spec = json.loads(sys.argv[1])
ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL
if os.getppid() != spec["parent"]:
    sys.exit(137)
try:
    if spec["cgroup"]:
        with open(spec["cgroup"] + "/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
    for name, value in spec["rlimits"].items():
        resource.setrlimit(getattr(resource, name), (value, value))
    if spec.get("nice"):  # below the worker, its session's autogroup too (niceness weighs only inside a group)
        os.nice(spec["nice"])
        try:
            with open("/proc/self/autogroup", "w") as f:
                f.write(str(spec["nice"]))
        except OSError:
            pass
    # exactly the environment it was given (Python may have coerced a C locale into LC_CTYPE)
    env = {k: os.environ[k] for k in spec["env"]}
    os.execve(spec["argv"][0], spec["argv"], env)
except OSError as err:
    print(f"[reposwarm: the sandbox could not start: {err}]", flush=True)
    sys.exit(126)
"""

# Unsandboxed, each check runs under this small supervisor, the leader of the check's own process group: when
# the worker dies (SIGKILL, a lost host), the supervisor kills the whole group, so no check outlives the worker
# that started it, nor races the retried activity in the same worktree. It hears of the death at once where
# Linux signals it (PR_SET_PDEATHSIG, caught: a SIGKILL would end the supervisor alone), else within 0.2 s by
# its parent no longer being the worker (whose pid is its first argument). A process that leaves the group is
# killed by the next worker to start on the host (reaping.py).
SUPERVISOR = """
import os, signal, subprocess, sys, time
parent, command = int(sys.argv[1]), sys.argv[2:]  # (the worker's pid: it may be dead by now)
def end_the_check(*_):
    os.killpg(0, signal.SIGKILL)
signal.signal(signal.SIGTERM, end_the_check)
if sys.platform.startswith("linux"):
    try:
        import ctypes
        ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
if os.getppid() != parent:  # (dead before the signal was asked for)
    end_the_check()
nice = int(os.environ.pop("REPOSWARM_SUPERVISOR_NICE", "0"))
if nice:
    os.nice(nice)
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass
try:
    child = subprocess.Popen(command)
except FileNotFoundError:
    print("command not found: " + command[0], flush=True)
    sys.exit(127)
while child.poll() is None:
    if os.getppid() != parent:
        end_the_check()
    time.sleep(0.2)
sys.exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)
"""


def _kill(proc: asyncio.subprocess.Process, cgroup: PidsCgroup | None) -> None:
    """Kill the command's process group (bwrap: the sandbox's PID 1 and everything in it die with it) and
    everything in its cgroup."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if cgroup is not None:
        cgroup.kill()


async def watch(proc: asyncio.subprocess.Process, cgroup: PidsCgroup | None, profile: CheckProfile,
                timeout_s: float, tree: TreeCap | None = None) -> Ran:
    """Wait for the command, reading its output up to the cap; kill it at the timeout, the output cap, or when
    it has added more than max_tree_mb to its tree."""
    cap = profile.max_output_mb * MIB
    chunks: list[bytes] = []
    size = 0
    cut = asyncio.Event()
    over = asyncio.Event()

    async def pump() -> None:
        nonlocal size
        assert proc.stdout is not None
        # (past the cap it reads on, keeping nothing, until the killed command's pipe ends: a pipe nobody reads
        # is never seen to end, and the command would look alive until its timeout)
        while chunk := await proc.stdout.read(65536):
            if size < cap:
                chunks.append(chunk[:cap - size])
            size += len(chunk)
            if size > cap and not cut.is_set():
                cut.set()
                _kill(proc, cgroup)

    async def grown() -> None:
        assert tree is not None
        await tree.watch(over)
        _kill(proc, cgroup)

    reader = asyncio.ensure_future(pump())
    measuring = asyncio.ensure_future(grown()) if tree is not None else None
    timed_out = False
    try:
        # (Inside an activity the worker's heartbeat interceptor keeps it alive meanwhile.)
        await asyncio.wait_for(proc.wait(), timeout=timeout_s)
    except TimeoutError:
        timed_out = True
        _kill(proc, cgroup)
        await proc.wait()
    except asyncio.CancelledError:
        _kill(proc, cgroup)
        raise
    finally:
        # Children of the command may hold the pipe open; the kill ends them too.
        _kill(proc, cgroup)
        if measuring is not None:
            measuring.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await measuring
        try:
            await asyncio.wait_for(reader, timeout=5)
        except TimeoutError:
            reader.cancel()
    output = b"".join(chunks)
    stopped = ""
    if timed_out:
        output += f"\n[reposwarm: killed after {timeout_s:.0f}s timeout]".encode()
    if cut.is_set():
        stopped = f"its output passed {profile.max_output_mb} MB"
        output += f"\n[reposwarm: output passed {profile.max_output_mb} MB: the command was ended there]".encode()
    # (measured once more after it ended: it may have passed the cap since the last walk)
    tree_over = tree is not None and (over.is_set() or await asyncio.to_thread(tree.measure))
    if tree is not None and tree_over:
        added_mb = tree.added / MIB
        removed = await asyncio.to_thread(tree.remove_new)
        stopped = stopped or f"it added {added_mb:.0f} MB to its tree, over max_tree_mb {tree.cap_mb} MB"
        output += (f"\n[reposwarm: the command added {added_mb:.0f} MB to its tree, over its max_tree_mb of "
                   f"{tree.cap_mb} MB: it was ended there, and the {removed} files and folders it made were "
                   f"removed]").encode()
    ended = timed_out or cut.is_set() or tree_over
    return Ran(exit_code=None if ended else proc.returncode, output=output, timed_out=timed_out,
               output_cut=cut.is_set(), tree_over=tree_over, stopped=stopped)
