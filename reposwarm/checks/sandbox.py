"""The sandbox every command a lane or the gate runs goes through (run_checks, validation, the baseline, MCP's
run_checks): a check runs code a lane wrote, so it gets nothing of the worker's but the tree it checks.

Under bubblewrap: a read-only root; new PID, IPC, UTS, network (unless the profile asks for it), user and cgroup
namespaces; a fresh /proc showing only the sandbox's processes; no capabilities; a private /tmp, and tmpfs over
the worker's HOME (the same path, so toolchains under it still find themselves) and REPOSWARM_HOME, so dotfiles and
other runs' stores are invisible. On top of that, read-only: the toolchains on PATH that live under HOME, the
repository's git directory; writable: the one tree (a lane's worktree or the validation checkout) with its `.git`
entry read-only again, and a report folder of the worker's ({junit}). Limits: wall time, address space, file
size, processes (a pids cgroup per command where one can be made) and output.

Without bubblewrap, running a check is refused (`SandboxUnavailable`) unless REPOSWARM_SANDBOX=off says to run
commands as before the sandbox existed: a scrubbed environment, their own process group, a timeout; every result
then says it ran unsandboxed.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from reposwarm.contracts import CheckProfile
from reposwarm.runs.store import home as reposwarm_home

SWITCH = "REPOSWARM_SANDBOX"  # "off": run checks unsandboxed
BWRAP = "REPOSWARM_BWRAP"  # the bwrap binary to use (default: `bwrap` on PATH)
MIB = 1024 * 1024
OFF_WARNING = ("checks ran unsandboxed (REPOSWARM_SANDBOX=off): they could read the worker's files and "
               "environment, write wherever the worker can, and use the network")
# Variables a sandboxed check sees (besides HOME, TMPDIR, CI and PYTHONDONTWRITEBYTECODE, which are set for it,
# REPOSWARM_CHECK_ENV_PASS's names and the profile's env). Credentials are never among them.
PASS_ENV = ("PATH", "LANG", "TZ", "TERM")
# Unsandboxed (REPOSWARM_SANDBOX=off), the environment checks had before the sandbox.
PASS_ENV_OFF = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "TERM", "USER", "VIRTUAL_ENV")
# Files at the top of a toolchain folder under HOME (~/.cargo/credentials.toml) that stay hidden.
SECRET_FILE = re.compile(r"credential|token|secret|password|\.netrc|auth", re.I)
# bwrap's own processes in a command's pids cgroup: bwrap, and the reaper it runs as the sandbox's PID 1.
BWRAP_PROCESSES = 2
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SandboxUnavailable(RuntimeError):
    """Checks must run sandboxed and cannot: the message is one line saying what to install or set."""


@dataclass(frozen=True)
class Tree:
    """Where a command runs, and the only places it may write."""

    root: Path  # the one writable tree (a lane's worktree, the validation checkout); the command's cwd
    git_dir: Path | None  # the repository's common git directory: readable, never writable
    reports: Path | None = None  # a folder of the worker's the command may write ({junit}), read after it ends


@dataclass
class Ran:
    exit_code: int | None  # None: killed (timeout, output over its cap)
    output: bytes
    timed_out: bool = False
    output_cut: bool = False  # the output passed max_output_mb: the command was ended there
    sandboxed: bool = True
    limits: list[str] = field(default_factory=list)  # the limits in force, in words


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
        done = subprocess.run([binary, "--ro-bind", "/", "/", "--unshare-all", "--unshare-user", "--disable-userns",
                               "--cap-drop", "ALL", "--", "/bin/sh", "-c", "exit 7"], capture_output=True, text=True,
                              timeout=30)
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


# --- the sandbox's environment and mounts ---


def _check_env(profile: CheckProfile) -> dict[str, str]:
    for name, value in profile.env.items():
        if not _ENV_NAME.fullmatch(name) or "\x00" in value:
            raise ValueError(f"check profile env: {name!r} is not a variable name (letters, digits, '_'), or its "
                             f"value holds a NUL byte")
    return dict(profile.env)


def _passed_names() -> list[str]:
    return [v.strip() for v in os.environ.get("REPOSWARM_CHECK_ENV_PASS", "").split(",") if v.strip()]


def sandbox_env(profile: CheckProfile, private_home: Path) -> dict[str, str]:
    names = [*PASS_ENV, *(k for k in os.environ if k.startswith("LC_")), *_passed_names()]
    env = {k: os.environ[k] for k in names if k in os.environ}
    env |= {"HOME": str(private_home), "TMPDIR": "/tmp", "CI": "true", "PYTHONDONTWRITEBYTECODE": "1"}
    return env | _check_env(profile)


def unsandboxed_env(profile: CheckProfile) -> dict[str, str]:
    env = {k: os.environ[k] for k in (*PASS_ENV_OFF, *_passed_names()) if k in os.environ}
    env |= {"CI": "true", "PYTHONDONTWRITEBYTECODE": "1"}
    return env | _check_env(profile)


def _home() -> Path:
    """The worker's HOME; hidden under a tmpfs at the same path, which becomes the command's private HOME. (Not
    over the whole root, nor where bwrap would have to make a mount point on the read-only root.)"""
    home = Path(os.environ.get("HOME") or Path.home()).resolve()
    usable = home != Path("/") and (home.is_dir() or _inside(home, Path("/tmp")))
    return home if usable else Path("/tmp/home")


def _inside(path: Path, folder: Path) -> bool:
    return path == folder or folder in path.parents


def _toolchains(home: Path, hidden: list[Path]) -> list[Path]:
    """Folders the commands need to run at all that a private tmpfs would hide: under HOME, the top folder
    (~/.pyenv, ~/.cargo) of each PATH entry and of the Python the worker runs (tests and profiles name
    sys.executable); elsewhere under a hidden folder (a virtual environment in /tmp), that environment itself."""
    wanted = [Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p.startswith("/")]
    wanted += [Path(sys.executable).resolve(), Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()]
    found: list[Path] = []
    for path in wanted:
        if home in path.parents:
            top = home / path.relative_to(home).parts[0]
        elif any(folder in path.parents for folder in hidden):
            # a bin folder stands for its environment (its lib and pyvenv.cfg are needed too)
            top = path.parent if path.name == "bin" else path
        else:
            continue
        if top.is_dir() and top not in found:
            found.append(top)
    return found


def _secret_files(folder: Path) -> list[Path]:
    try:
        return [p for p in folder.iterdir() if p.is_file() and SECRET_FILE.search(p.name)]
    except OSError:
        return []


def bwrap_argv(binary: str, argv: list[str], tree: Tree, profile: CheckProfile) -> list[str]:
    """bwrap's command line. Later mounts go on top of earlier ones (bwrap makes their mount points), so the
    private tmpfs folders come first and the tree, with its read-only parts, last."""
    home = _home()
    cmd = [binary, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
           # (a user namespace of its own, in which it may not make another: a kernel attack surface less)
           "--unshare-all", "--unshare-user", "--disable-userns", *(["--share-net"] if profile.network else []),
           # (no --new-session: the launcher already runs in a session of its own with no controlling terminal,
           # stdio being pipes, so there is no terminal to inject keystrokes into (TIOCSTI); and a new session
           # would be a new autogroup, which would undo the check's lower priority, check_nice)
           "--die-with-parent", "--cap-drop", "ALL"]
    # private, memory-backed, and bounded: a check filling them would otherwise fill the machine's memory
    size = str(profile.tmp_mb * MIB)
    cmd += ["--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", str(home)]
    store = reposwarm_home()
    hidden = [Path("/tmp")]
    if store.is_dir() and not (_inside(store, home) or _inside(store, Path("/tmp"))):
        cmd += ["--size", size, "--tmpfs", str(store)]
        hidden.append(store)
    for folder in _toolchains(home, hidden):
        cmd += ["--ro-bind", str(folder), str(folder)]
        for secret in _secret_files(folder):
            cmd += ["--ro-bind", "/dev/null", str(secret)]
    if tree.git_dir is not None:
        cmd += ["--ro-bind", str(tree.git_dir), str(tree.git_dir)]
    cmd += ["--bind", str(tree.root), str(tree.root)]
    dot_git = tree.root / ".git"
    if dot_git.exists():  # a file in a linked worktree, the git directory itself in a main one
        cmd += ["--ro-bind", str(dot_git), str(dot_git)]
    if tree.reports is not None:
        cmd += ["--bind", str(tree.reports), str(tree.reports)]
    return [*cmd, "--chdir", str(tree.root), "--", *argv]


# --- limits ---


class PidsCgroup:
    """A pids cgroup for one command: caps its processes and threads (uid 0 is exempt from RLIMIT_NPROC, which
    is all we run as here), and lets every one of them be killed, whatever session or namespace it is in."""

    def __init__(self, path: Path) -> None:
        self.path = path

    @classmethod
    def make(cls, limit: int) -> PidsCgroup | None:
        parent = _pids_parent()
        if parent is None:
            return None
        _sweep(parent)
        path = parent / f"reposwarm-{os.getpid()}-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError:
            return None
        try:
            (path / "pids.max").write_text(str(limit))
        except OSError:
            path.rmdir()
            return None
        return cls(path)

    def pids(self) -> list[int]:
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return []

    def kill(self) -> None:
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def remove(self) -> None:
        """Kill what is left and remove the cgroup (its last processes may take a moment to be reaped)."""
        for _ in range(100):
            self.kill()
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                await asyncio.sleep(0.02)


def own_cgroups(controller: str) -> Iterator[tuple[Path, str]]:
    """This process's own cgroup folder in each mounted hierarchy that has `controller` (cgroup v1's hierarchy
    of it, or the cgroup v2 one), with the hierarchy's version ("cgroup" or "cgroup2")."""
    try:
        own = Path("/proc/self/cgroup").read_text().splitlines()
        mounts = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    for line in own:
        _, controllers, path = line.split(":", 2)
        version = "cgroup2" if controllers == "" else "cgroup" if controller in controllers.split(",") else None
        if version is None:
            continue
        for mount in mounts:
            fields = mount.split()
            sep = fields.index("-")
            root, point, fstype, options = fields[3], fields[4], fields[sep + 1], fields[sep + 3]
            if fstype != version or (version == "cgroup" and controller not in options.split(",")):
                continue
            if _inside(Path(path), Path(root)):
                yield Path(point) / Path(path).relative_to(root), version


def _pids_parent() -> Path | None:
    """The worker's own cgroup in a hierarchy with the pids controller: cgroup v1's pids hierarchy, or cgroup v2
    when its pids controller is enabled for the worker's cgroup's children."""
    for parent, version in own_cgroups("pids"):
        if version == "cgroup2":
            try:
                if "pids" not in (parent / "cgroup.subtree_control").read_text().split():
                    continue
            except OSError:
                continue
        if os.access(parent, os.W_OK):
            return parent
    return None


def _sweep(parent: Path) -> None:
    """Remove the cgroups of workers that died (their processes died with them, so each cgroup is empty)."""
    for stale in parent.glob("reposwarm-*-*"):
        try:
            pid = int(stale.name.split("-")[1])
            os.kill(pid, 0)
        except ValueError:
            continue
        except ProcessLookupError:
            try:
                stale.rmdir()
            except OSError:
                pass
        except PermissionError:
            pass


def rlimits(profile: CheckProfile, cgroup: PidsCgroup | None) -> tuple[dict[str, int], list[str]]:
    """The resource limits to set, and the words for every limit in force."""
    limits = {"RLIMIT_AS": profile.memory_mb * MIB, "RLIMIT_FSIZE": profile.max_file_mb * MIB, "RLIMIT_CORE": 0}
    said = [f"memory {profile.memory_mb} MB of address space per process (RLIMIT_AS)",
            f"files up to {profile.max_file_mb} MB (RLIMIT_FSIZE)", f"/tmp and HOME {profile.tmp_mb} MB each"]
    if cgroup is not None:
        said.append(f"{profile.max_processes} processes and threads (pids cgroup)")
    elif os.getuid() != 0:
        limits["RLIMIT_NPROC"] = profile.max_processes
        said.append(f"{profile.max_processes} processes of this user (RLIMIT_NPROC)")
    else:
        said.append("processes NOT limited (uid 0 is exempt from RLIMIT_NPROC, and no pids cgroup could be made)")
    return limits, said


# The sandboxed command's first process: it dies with the worker even before bwrap takes over (bwrap's
# --die-with-parent does the same from then on, and the sandbox's PID 1 takes every process in it along), joins
# the command's pids cgroup, sets the resource limits, then becomes bwrap. (A preexec_fn would do the same in
# the worker's forked child, which is unsafe in a threaded worker.)
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
# the worker dies (SIGKILL, a lost host), the supervisor sees its parent change and kills the whole group, so no
# check outlives the worker that started it, nor races the retried activity in the same worktree.
SUPERVISOR = """
import os, signal, subprocess, sys, time
parent = os.getppid()
nice = int(os.environ.pop("REPOSWARM_SUPERVISOR_NICE", "0"))
if nice:
    os.nice(nice)
    try:
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        pass
try:
    child = subprocess.Popen(sys.argv[1:])
except FileNotFoundError:
    print("command not found: " + sys.argv[1], flush=True)
    sys.exit(127)
while child.poll() is None:
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
    time.sleep(0.2)
sys.exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)
"""


# --- running ---


def check_nice() -> int:
    """How far below the worker checks run (REPOSWARM_CHECK_NICE, 0-19, default 10). A host running many lanes'
    CPU-heavy checks at the worker's own priority starves the worker: its heartbeats come late, Temporal times
    its activities out and runs them again (bench/results_hosts.json saw it at 32 lanes on one core)."""
    raw = os.environ.get("REPOSWARM_CHECK_NICE", "10").strip()
    if not raw.isdigit() or int(raw) > 19:
        raise SandboxUnavailable(f"REPOSWARM_CHECK_NICE must be a whole number from 0 to 19, not {raw!r}")
    return int(raw)


async def run(argv: list[str], tree: Tree, profile: CheckProfile, timeout_s: float) -> Ran:
    """Run `argv` in `tree.root`, sandboxed unless REPOSWARM_SANDBOX=off; its output is stdout and stderr."""
    if not enabled():
        env = unsandboxed_env(profile)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SUPERVISOR, *argv, cwd=tree.root,
            env={**env, "REPOSWARM_SUPERVISOR_NICE": str(check_nice())}, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True)
        ran = await _watch(proc, None, profile, timeout_s)
        ran.sandboxed, ran.limits = False, [f"wall time {timeout_s:.0f}s", f"output {profile.max_output_mb} MB"]
        return ran
    binary = bwrap()
    home = _home()
    env = sandbox_env(profile, home)
    cgroup = PidsCgroup.make(profile.max_processes + BWRAP_PROCESSES)
    limits, said = rlimits(profile, cgroup)
    spec = {"parent": os.getpid(), "cgroup": str(cgroup.path) if cgroup else None, "rlimits": limits,
            "nice": check_nice(),
            "env": sorted(env), "argv": bwrap_argv(binary, argv, tree, profile)}
    try:
        # -I -S: no site, no user folders, no PYTHON* variables: nothing of the worker's in the launcher
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-I", "-S", "-c", LAUNCHER, json.dumps(spec), env=env,
            stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            start_new_session=True)
        ran = await _watch(proc, cgroup, profile, timeout_s)
    finally:
        if cgroup is not None:
            await cgroup.remove()
    network = "network" if profile.network else "no network"
    ran.limits = [f"wall time {timeout_s:.0f}s", network, *said, f"output {profile.max_output_mb} MB"]
    return ran


def _kill(proc: asyncio.subprocess.Process, cgroup: PidsCgroup | None) -> None:
    """Kill the command's process group (bwrap: the sandbox's PID 1 and everything in it die with it) and
    everything in its cgroup."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    if cgroup is not None:
        cgroup.kill()


async def _watch(proc: asyncio.subprocess.Process, cgroup: PidsCgroup | None, profile: CheckProfile,
                 timeout_s: float) -> Ran:
    """Wait for the command, reading its output up to the cap; kill it at the timeout or the cap."""
    cap = profile.max_output_mb * MIB
    chunks: list[bytes] = []
    size = 0
    cut = asyncio.Event()

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

    reader = asyncio.ensure_future(pump())
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
        try:
            await asyncio.wait_for(reader, timeout=5)
        except TimeoutError:
            reader.cancel()
    output = b"".join(chunks)
    if timed_out:
        output += f"\n[reposwarm: killed after {timeout_s:.0f}s timeout]".encode()
    if cut.is_set():
        output += f"\n[reposwarm: output passed {profile.max_output_mb} MB: the command was ended there]".encode()
    ended = timed_out or cut.is_set()
    return Ran(exit_code=None if ended else proc.returncode, output=output, timed_out=timed_out,
               output_cut=cut.is_set())
