"""Nothing a check started outlives the worker that started it, not even a worker that died without a word.

While its worker lives, a check dies with it: the launcher and bwrap have PR_SET_PDEATHSIG (--die-with-parent),
and the sandbox's PID 1 takes everything in it along; unsandboxed, the supervisor kills its process group the
moment its parent goes (process.py). What those miss (a bwrap that did not die with its parent, a supervisor
killed first, a process that left the check's group) is found here: each running check has a record under
REPOSWARM_HOME/running-checks/, removed when it ends, and a worker starting on the host (`reap_left_behind`,
from worker.py) kills what is left of every record whose worker is dead, then removes the record.

A record holds where it was made (host, boot, PID namespace), the worker (its pid and start time, as
/proc/PID/stat gives it), the check's first process (bwrap, or the supervisor: its pid, which is the id of the
session and group it leads, and its start time) and a random mark set in the environment of the check's first
processes (MARK; a process's environment as exec'd is in /proc/PID/environ). Only what is ours is killed:

- the check's session, when its leader is there with the recorded start time (a pid is not given to another
  process while its holder or a session it leads lives, and a later process with the same number has a later
  start time);
- any process whose environment holds the record's mark, and the session of one that made its own: the rest
  of a session whose leader is gone, and a process that left it (a daemon, unsandboxed).

A record of another host or PID namespace (a REPOSWARM_HOME shared) is left alone: its pids are not this
host's. One of an earlier boot of this host is removed: nothing of it is left. A dead process left as a zombie
is not alive: it holds nothing but its pid, and only its parent (the init of a host whose worker died) can
take it away.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from reposwarm.runs import objects

# The variable that marks a check's first processes (and, unsandboxed, everything the check starts that keeps
# its environment); bwrap unsets it for the command it runs in the sandbox (mounts.py).
MARK = "REPOSWARM_CHECK_MARK"
log = logging.getLogger(__name__)


def records_dir() -> Path:
    return objects.home() / "running-checks"


@dataclass(frozen=True)
class Proc:
    pid: int
    state: str  # "R", "S", "Z"...
    pgid: int
    sid: int
    start: int  # clock ticks since boot: with the pid, who the process is

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X")


def proc(pid: int) -> Proc | None:
    """What /proc/PID/stat says of a process; None when there is none."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (OSError, ValueError):
        return None
    # (the name in brackets may hold spaces and brackets itself: the fields start after the last ')')
    fields = stat[stat.rfind(")") + 2:].split()
    try:
        return Proc(pid=pid, state=fields[0], pgid=int(fields[2]), sid=int(fields[3]), start=int(fields[19]))
    except (IndexError, ValueError):
        return None


def processes() -> Iterator[Proc]:
    try:
        entries = list(os.scandir("/proc"))
    except OSError:  # (no /proc: no record was made either, start_record needs it)
        return
    for entry in entries:
        if entry.name.isdigit() and (found := proc(int(entry.name))) is not None:
            yield found


def is_alive(pid: int, start: int) -> bool:
    """Whether the process `pid` that started at `start` still runs (not a later one given its number)."""
    found = proc(pid)
    return found is not None and found.start == start and found.alive


def _marked(pid: int, mark: str) -> bool:
    try:
        environ = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False
    return f"{MARK}={mark}".encode() in environ.split(b"\0")


def _place() -> dict[str, str]:
    """Where pids mean what they say: this host, this boot of it, this PID namespace."""
    def read(path: str) -> str:
        try:
            return (os.readlink(path) if path.startswith("/proc/self/ns/") else Path(path).read_text()).strip()
        except OSError:
            return ""
    return {"host": socket.gethostname(), "boot": read("/proc/sys/kernel/random/boot_id"),
            "pid_ns": read("/proc/self/ns/pid")}


@dataclass(frozen=True)
class Record:
    host: str
    boot: str
    pid_ns: str
    worker: int
    worker_start: int
    group: int  # the check's process group: its leader's pid
    group_start: int
    mark: str

    @classmethod
    def read(cls, path: Path) -> Record | None:
        try:
            data = json.loads(path.read_text())
            return cls(host=str(data["host"]), boot=str(data["boot"]), pid_ns=str(data["pid_ns"]),
                       worker=int(data["worker"]), worker_start=int(data["worker_start"]), group=int(data["group"]),
                       group_start=int(data["group_start"]), mark=str(data["mark"]))
        except (OSError, ValueError, TypeError, KeyError):
            return None


def new_mark() -> str:
    return uuid.uuid4().hex


def start_record(group: int, mark: str) -> Path | None:
    """Record a check whose process group `group` (its leader's pid) this process just started; None when it
    cannot be recorded (no writable REPOSWARM_HOME): the check runs on, with its parent-death signals only."""
    me, leader = proc(os.getpid()), proc(group)
    if me is None or leader is None:
        return None
    record = Record(**_place(), worker=me.pid, worker_start=me.start, group=group, group_start=leader.start,
                    mark=mark)
    folder = records_dir()
    path = folder / f"{me.pid}-{mark}.json"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(json.dumps(asdict(record)))
        temporary.replace(path)  # (whole or absent: a reaper never reads half a record)
    except OSError as err:
        log.debug("check %s not recorded: %s", group, err)
        return None
    return path


def end_record(path: Path | None) -> None:
    if path is not None:
        with contextlib.suppress(OSError):
            path.unlink()


@contextlib.contextmanager
def recorded(group: int, mark: str) -> Iterator[None]:
    """The check's record while it runs (the caller ends the check's processes before leaving)."""
    path = start_record(group, mark)
    try:
        yield
    finally:
        end_record(path)


def _ours(record: Record, running: list[Proc]) -> set[int]:
    """The live processes of a dead worker's check: its session while its leader lives (the check runs in a
    session of its own, so its group and session ids are the leader's pid), every process holding its mark, and
    the session of a marked process that made one (a daemon's: all in it descend from that process)."""
    sessions = set()
    # (a leader that is a zombie still holds its pid: its session is still the check's)
    if any(p.pid == record.group and p.start == record.group_start for p in running):
        sessions.add(record.group)
    marked = {p.pid for p in running if p.alive and p.start >= record.group_start and _marked(p.pid, record.mark)}
    sessions |= {p.pid for p in running if p.pid in marked and p.sid == p.pid}
    return marked | {p.pid for p in running if p.alive and p.sid in sessions}


def reap(record: Record, rounds: int = 5) -> list[int]:
    """Kill what is left of a dead worker's check; the pids killed. (Again while any were: a process may have
    forked between the look and the kill.)"""
    killed: list[int] = []
    for _ in range(rounds):
        found = _ours(record, list(processes())) - {os.getpid()}
        for pid in sorted(found):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
        if not found:
            break
        time.sleep(0.05)  # (a killed process takes a moment to be a zombie, which is not counted alive)
    return sorted(set(killed))


# A temporary folder of a check or an agent session (the git view, the bridge's socket folder) is named
# <prefix><owner>-<random>, the owner being who made it: its pid and start time, and where those mean what they say
# (_place, hashed). A worker SIGKILLed leaves such folders in TMPDIR; the next worker to start on the host removes
# those whose owner is dead (reap_scratch). Short names: a unix socket's path has at most 107 bytes.
SCRATCH_PREFIXES = ("rs-agent-", "reposwarm-gitview-")
_SCRATCH = re.compile(r"^(?:rs-agent-|reposwarm-gitview-)(\d+)\.(\d+)\.([0-9a-f]{8})-")


def _place_mark() -> str:
    return hashlib.sha256(json.dumps(_place(), sort_keys=True).encode()).hexdigest()[:8]


def scratch(prefix: str, folder: Path | None = None) -> Path:
    """A new temporary folder of this process (`prefix` one of SCRATCH_PREFIXES) in `folder` (default TMPDIR),
    named so that reap_scratch removes it once this process is dead, if it did not remove it itself."""
    me = proc(os.getpid())
    owner = f"{me.pid}.{me.start}.{_place_mark()}" if me is not None else f"{os.getpid()}.0.{'0' * 8}"
    return Path(tempfile.mkdtemp(prefix=f"{prefix}{owner}-", dir=folder))


@contextlib.contextmanager
def scratch_folder(prefix: str) -> Iterator[Path]:
    """scratch(), removed when the context ends."""
    folder = scratch(prefix)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def reap_scratch(folder: Path | None = None) -> list[str]:
    """At a worker's start: remove the temporary folders (scratch) of this host's processes that are dead; their
    names, one line each (logged too). A folder of another host or PID namespace, or of no known owner, stays."""
    folder = folder or Path(tempfile.gettempdir())
    here = _place_mark()
    removed: list[str] = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    for entry in entries:
        found = _SCRATCH.match(entry.name)
        if found is None or found[3] != here or found[2] == "0" or not entry.is_dir(follow_symlinks=False):
            continue
        if is_alive(int(found[1]), int(found[2])):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed.append(entry.name)
    if removed:
        log.warning("removed %d temporary folders of dead workers in %s: %s", len(removed), folder, ", ".join(removed))
    return removed


def reap_left_behind(folder: Path | None = None) -> list[str]:
    """At a worker's start: kill what is left of the checks of every dead worker of this host, and remove their
    records; what was done, one line per check (logged too)."""
    folder = folder or records_dir()
    try:
        paths = sorted(folder.glob("*.json"))
    except OSError:
        return []
    if not paths:
        return []
    here = _place()
    said: list[str] = []
    for path in paths:
        record = Record.read(path)
        if record is None:  # (not one of ours, or half written by a process killed mid-write: nothing to go by)
            end_record(path)
            continue
        if record.host != here["host"] or record.pid_ns != here["pid_ns"]:
            continue  # another host's (or container's) pids: not ours to judge
        if record.boot == here["boot"]:
            if is_alive(record.worker, record.worker_start):
                continue  # its worker runs: the check is its
            if killed := reap(record):
                said.append(f"killed {len(killed)} processes of a check of worker {record.worker}, dead: "
                            f"{', '.join(map(str, sorted(killed)))}")
        end_record(path)
    for line in said:
        log.warning("%s", line)
    return said
