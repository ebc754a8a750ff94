"""Nothing a check started outlives the worker that started it (reposwarm/checks/sandbox/reaping.py), for real:
a process that runs checks as the worker does is SIGKILLed mid-check, and every process of the check, found on the
host by a marker in its command line, must be gone: at once where the kernel's parent-death signal reaches it,
else once the next worker starts on the host. Real bubblewrap, real processes, real records; nothing mocked."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import asdict
from pathlib import Path

import pytest

from reposwarm.checks import sandbox
from reposwarm.checks.sandbox import reaping
from reposwarm.contracts import CheckProfile
from tests.helpers import WorkerProcess

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap and /proc are Linux's")

# Runs one check as the worker does, then waits for it: `loop` on its event loop, as validate (an async
# activity) does; `pool` in a thread of an activity pool with an event loop of its own, as the run tool does.
# The check starts a child in a session of its own (a kill of the check's group would miss it), then sleeps;
# the marker is on the command line of every process of the check, bwrap's included.
FAKE_WORKER = """
import asyncio, concurrent.futures, sys
sys.path.insert(0, {root!r})
from pathlib import Path
from reposwarm.checks import sandbox
from reposwarm.contracts import CheckProfile
tree_root, how, marker = sys.argv[1], sys.argv[2], {marker!r}  # (not on this process's own command line)
script = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', "
          "sys.argv[1]], start_new_session=True); time.sleep(300)")
def check():
    argv = [sys.executable, "-c", script, marker]
    return asyncio.run(sandbox.run(argv, sandbox.Tree(root=Path(tree_root), git_dir=None),
                                   CheckProfile(commands=[["x"]]), 600))
if how == "pool":
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        pool.submit(check).result()
else:
    check()
"""

# A bwrap that does not die with its parent (what the fault suite once left behind: a bwrap alive long after its
# worker): the launcher's parent-death signal cleared, --die-with-parent dropped, then the real bwrap.
DEATHLESS_BWRAP = """#!{python}
import ctypes, os, sys
ctypes.CDLL(None).prctl(1, 0)
os.execv({bwrap!r}, [{bwrap!r}, *(a for a in sys.argv[1:] if a != "--die-with-parent")])
"""


def host_processes(marker: str) -> dict[int, bytes]:
    """The live processes of the machine whose command line holds `marker` (a zombie's is empty: not counted)."""
    found = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline:
                found[int(entry.name)] = cmdline
    return found


def wait_for(condition, within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def escaped(found: dict[int, bytes]) -> list[int]:
    """The check's child in a session of its own."""
    return [pid for pid, cmdline in found.items() if b"time.sleep(300)\0" in cmdline and b"Popen" not in cmdline]


def kill_everything(marker: str) -> None:
    for pid in host_processes(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class FakeWorker:
    """A process that runs one check as the worker does (FAKE_WORKER), to be SIGKILLed mid-check."""

    def __init__(self, tmp_path: Path, how: str, env: dict[str, str]) -> None:
        self.marker = f"reposwarm-reaped-{uuid.uuid4().hex}"
        self.home = tmp_path / "home"
        tree = tmp_path / "tree"
        tree.mkdir()
        (tmp_path / "userhome").mkdir()
        script = tmp_path / "fake_worker.py"
        script.write_text(FAKE_WORKER.format(root=str(ROOT), marker=self.marker))
        clean = {k: v for k, v in os.environ.items() if not k.startswith("REPOSWARM_")}
        self.env = {**clean, "REPOSWARM_HOME": str(self.home), "HOME": str(tmp_path / "userhome"), **env}
        self.proc = subprocess.Popen([sys.executable, str(script), str(tree), how], env=self.env,
                                     start_new_session=True)

    def running(self, processes: int) -> dict[int, bytes]:
        """Wait until the check runs with all its `processes`; they."""
        wait_for(lambda: len(host_processes(self.marker)) >= processes and self.proc.poll() is None, 60,
                 f"the check never started: {host_processes(self.marker)}, worker exit {self.proc.poll()}")
        return host_processes(self.marker)

    def records(self) -> list[Path]:
        return sorted((self.home / "running-checks").glob("*.json"))

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def cleanup(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        kill_everything(self.marker)


def reap_as_a_new_worker(home: Path) -> str:
    """What a worker starting on the host does first (worker.py), in a process of its own; what it said."""
    done = subprocess.run([sys.executable, "-c", "from reposwarm.checks import sandbox\n"
                           "print('\\n'.join(sandbox.reap_left_behind()))"],
                          cwd=ROOT, env={**os.environ, "REPOSWARM_HOME": str(home)}, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.parametrize("how", ["loop", "pool"])
def test_a_sandboxed_check_dies_with_its_killed_worker(tmp_path, how):
    """bwrap, the sandbox's PID 1, the check and its child in a session of its own: all gone at the kill, whether
    the check was started from the worker's event loop or from a thread of its activity pool."""
    worker = FakeWorker(tmp_path, how, {})
    try:
        worker.running(4)  # bwrap, its PID 1 in the sandbox, the check, its child
        assert len(worker.records()) == 1  # the check's record while it runs
        worker.kill()
        wait_for(lambda: not host_processes(worker.marker), 10,
                 f"the check outlived its killed worker: {host_processes(worker.marker)}")
        assert reap_as_a_new_worker(worker.home) == "\n"  # nothing left to kill
        assert worker.records() == []
    finally:
        worker.cleanup()


def test_an_unsandboxed_check_dies_with_its_worker_and_what_left_its_group_with_the_next(tmp_path):
    """REPOSWARM_SANDBOX=off: the supervisor kills the check's group at the kill (its parent-death signal); the
    child that left the group lives on until the next worker starts on the host, which kills it by its mark."""
    worker = FakeWorker(tmp_path, "pool", {sandbox.SWITCH: "off"})
    try:
        worker.running(3)  # the supervisor, the check, its child in a session of its own
        # (on a loaded machine the count can be reached before the child has its own command line: wait for it)
        wait_for(lambda: len(escaped(host_processes(worker.marker))) == 1, 30,
                 f"the check's child never started: {host_processes(worker.marker)}")
        before = host_processes(worker.marker)
        daemon = escaped(before)
        assert len(daemon) == 1, before
        worker.kill()
        wait_for(lambda: set(host_processes(worker.marker)) == set(daemon), 2,
                 f"the check's group outlived its killed worker: {host_processes(worker.marker)}")
        time.sleep(0.5)
        assert set(host_processes(worker.marker)) == set(daemon)  # (nothing of this worker's kills it)
        assert len(worker.records()) == 1
        said = reap_as_a_new_worker(worker.home)
        assert f"killed 1 processes of a check of worker {worker.proc.pid}, dead: {daemon[0]}" in said
        wait_for(lambda: not host_processes(worker.marker), 5, "the reaper left the check's child running")
        assert worker.records() == []
    finally:
        worker.cleanup()


async def test_a_bwrap_that_outlived_its_worker_is_killed_when_the_next_worker_starts(tmp_path, temporal_address):
    """The fault suite's leftover, made on purpose: a bwrap without --die-with-parent outlives its SIGKILLed worker
    with everything in it; a real worker (worker.py) starting on the host kills all of it before it serves."""
    real = shutil.which("bwrap")
    assert real is not None
    wrapper = tmp_path / "bwrap"
    wrapper.write_text(DEATHLESS_BWRAP.format(python=sys.executable, bwrap=real))
    wrapper.chmod(0o755)
    worker = FakeWorker(tmp_path, "loop", {sandbox.BWRAP: str(wrapper)})
    next_worker = None
    try:
        before = worker.running(4)
        worker.kill()
        await asyncio.sleep(1.5)
        assert set(host_processes(worker.marker)) == set(before), "the deathless bwrap died: nothing to reap"
        next_worker = WorkerProcess(temporal_address, f"reaping-{uuid.uuid4().hex[:8]}", worker.home).start()
        await next_worker.ready()
        assert not host_processes(worker.marker), f"left running: {host_processes(worker.marker)}"
        assert worker.records() == []
        log = next_worker.log.read_text()
        assert f"of a check of worker {worker.proc.pid}, dead" in log, log
    finally:
        if next_worker is not None:
            next_worker.stop()
        worker.cleanup()


def test_the_reaper_kills_only_what_is_its_own(tmp_path, monkeypatch):
    """Records that must not kill: a live worker's check, a group leader whose pid another process now has (told
    by its start time), another host's record; garbage is dropped. The same process, recorded as a dead worker's
    check's leader, is killed."""
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    folder = reaping.records_dir()
    folder.mkdir(parents=True)
    gone_worker = subprocess.Popen(["sleep", "30"])
    gone = reaping.proc(gone_worker.pid)
    gone_worker.kill()
    gone_worker.wait()
    stranger = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        me, other = reaping.proc(os.getpid()), reaping.proc(stranger.pid)
        assert gone is not None and me is not None and other is not None
        place = reaping._place()

        def record(name: str, **fields: object) -> Path:
            values = {**place, "worker": gone.pid, "worker_start": gone.start, "group": other.pid,
                      "group_start": other.start, "mark": uuid.uuid4().hex, **fields}
            path = folder / f"{name}.json"
            path.write_text(json.dumps(asdict(reaping.Record(**values))))  # type: ignore[arg-type]
            return path

        live = record("live-worker", worker=me.pid, worker_start=me.start)
        reused = record("pid-reused", group_start=other.start - 1)
        elsewhere = record("another-host", host="elsewhere-" + uuid.uuid4().hex)
        (folder / "garbage.json").write_text("{not json")
        assert reaping.reap_left_behind() == []
        assert stranger.poll() is None, "a process that was not the check's was killed"
        assert sorted(p.name for p in folder.iterdir()) == sorted([live.name, elsewhere.name])
        assert reused.name not in {p.name for p in folder.iterdir()}

        record("dead-worker")
        said = reaping.reap_left_behind()
        assert said == [f"killed 1 processes of a check of worker {gone.pid}, dead: {stranger.pid}"]
        assert stranger.wait(timeout=10) == -signal.SIGKILL
    finally:
        if stranger.poll() is None:
            stranger.kill()
            stranger.wait()


def test_a_check_run_from_a_thread_outlives_the_threads_that_end_beside_it(tmp_path, monkeypatch):
    """The parent-death signal is the forking *thread*'s: a check started from a thread (as the run tool starts
    them, from the activity pool) must run to its end while other threads of the worker start checks and end."""
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    tree = sandbox.Tree(root=tmp_path, git_dir=None)
    profile = CheckProfile(commands=[["x"]])
    results: dict[str, sandbox.Ran] = {}

    def check(name: str, argv: list[str]) -> None:
        results[name] = asyncio.run(sandbox.run(argv, tree, profile, 120))

    long = threading.Thread(target=check, args=("long", ["sh", "-c", "sleep 2; echo done"]))
    long.start()
    time.sleep(0.5)  # (its command running)
    for i in range(4):  # threads that start a check of their own and end while the long one runs
        short = threading.Thread(target=check, args=(f"short-{i}", ["true"]))
        short.start()
        short.join()
    long.join(timeout=60)
    assert all(results[f"short-{i}"].exit_code == 0 for i in range(4))
    assert results["long"].exit_code == 0 and results["long"].output == b"done\n", results["long"]


# A process that makes the temporary folders of a check's git view and of an agent session's bridge (socket folder),
# as a worker does, says so and waits to be killed.
MAKES_SCRATCH = """
import sys, time
from reposwarm.checks.sandbox import gitview, reaping
view = gitview.scratch_dir()
with reaping.scratch_folder("rs-agent-") as socket_folder:
    (socket_folder / "api.sock").write_text("")
    print(view, socket_folder, flush=True)
    time.sleep(600)
"""


async def test_a_killed_worker_s_temporary_folders_are_removed_when_the_next_worker_starts(tmp_path,
                                                                                         temporal_address):
    """A SIGKILLed worker removes none of its temporary folders (a git view, an agent session's socket folder);
    a real worker (worker.py) starting on the host removes them, and none of a process alive, of another host or
    PID namespace, or of a name not ours."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    dying = subprocess.Popen([sys.executable, "-c", MAKES_SCRATCH], env=env, stdout=subprocess.PIPE, text=True,
                             start_new_session=True)
    assert dying.stdout is not None
    made = [Path(p) for p in dying.stdout.readline().split()]
    os.killpg(dying.pid, signal.SIGKILL)
    dying.wait()
    assert len(made) == 2 and all(p.is_dir() and p.parent == tmp for p in made), made
    mine = reaping.scratch("rs-agent-", tmp)  # this process's: alive
    name = made[0].name
    elsewhere = tmp / (name[:name.rindex("-")].rsplit(".", 1)[0] + ".0badcafe-x")  # the same pid, another place
    unknown = tmp / "reposwarm-gitview-notours"
    for folder in (elsewhere, unknown):
        folder.mkdir()
    next_worker = WorkerProcess(temporal_address, f"scratch-{uuid.uuid4().hex[:8]}", tmp_path / "home",
                                {"TMPDIR": str(tmp)}).start()
    try:
        await next_worker.ready()
        assert not any(p.exists() for p in made), [p for p in made if p.exists()]
        assert mine.is_dir() and elsewhere.is_dir() and unknown.is_dir()
        log = next_worker.log.read_text()
        assert "removed 2 temporary folders of dead workers" in log and made[1].name in log, log
    finally:
        next_worker.stop()
        shutil.rmtree(mine, ignore_errors=True)
