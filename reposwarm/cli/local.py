"""Running on this machine: a local Temporal dev server and a worker, started when missing, and the commands that
use them: `demo` (the bundled example, here) and `try` (a commit of the user's own repository, trying.py).

What is started is said at once, with what it waits for and for how long: no wait is silent. The dev server
(reposwarm/devserver.py) keeps running afterwards (its runs stay readable; `reposwarm dev-server --stop` stops
it); a worker this command started is stopped when it ends, and one it found is left alone. Everything comes from
the installed package (the demo is its package data, the worker `python -m reposwarm.cli.main worker`), so these
commands work wherever reposwarm is installed, with no checkout beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from temporalio.client import Client

from reposwarm import devserver
from reposwarm.cli.common import UserError, client_or_die, prog, ui_url
from reposwarm.cli.run_state import POLL_FRESH_S, pollers
from reposwarm.client import task_queue
from reposwarm.contracts import Phase, ReviewDecision
from reposwarm.runs.store import home
from reposwarm.text import inert
from reposwarm.vcs import gitcmd

DEMO = Path(__file__).resolve().parents[1] / "demo"  # package data: lanes.yaml, plan.yaml, replay.yaml, repo/
DEMO_TASK = "Add a priority (low|normal|high, default normal) to tasks across the DB, the API and the web client, with tests"
MADE_WORKER_S = 20  # a worker started just before this command (`make demo` does): how long for its first poll
WORKER_START_S = 90  # a worker this command starts: how long for its first poll (REPOSWARM_WORKER_WAIT_S)
WORKER_STOP_S = 15  # a worker asked to stop finishes the activities in flight; past this it is killed
POLL_TICK_S = 0.5
LOOPBACK = {"localhost", "127.0.0.1", "::1", "0.0.0.0", "ip6-localhost"}


def say(text: str) -> None:
    print(text, flush=True)


def temporal_address() -> tuple[str, str, int]:
    """TEMPORAL_ADDRESS (default localhost:7233) as given, and its host and port."""
    target = os.environ.get("TEMPORAL_ADDRESS") or "localhost:7233"
    host, _, port = target.rpartition(":")
    host = host.strip("[]")
    return target, host or "localhost", int(port) if port.isdigit() else 7233


def answers(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def ensure_server() -> None:
    """A Temporal server at TEMPORAL_ADDRESS: one that answers, or, where the address is this machine's, this
    home's dev server started on that port (reposwarm/devserver.py, as `dev-server --background` starts it). A
    remote address that does not answer is left to the connection's own error."""
    target, host, port = temporal_address()
    if host not in LOOPBACK or answers(host, port):
        return
    try:  # the Web UI where the commands' links point (common.ui_url)
        server = devserver.from_env(port=port, ui_port=None if os.environ.get("TEMPORAL_UI_PORT") else port + 1000)
    except devserver.BadSetting as bad:
        raise UserError(str(bad)) from None
    say(f"no Temporal server answers at {target}: starting one ({prog()} dev-server --background), waiting up to "
        f"{devserver.START_S:g} s for it to answer; it keeps running afterwards ({prog()} dev-server --stop stops "
        "it)")
    if devserver.start(server, background=True, name="dev-server") != 0:
        raise UserError(f"could not start a dev server at {target} (said above); its log is {server.log}")


@dataclass
class LocalWorker:
    """The worker a command relies on; `proc` is set when the command started it (and so stops it)."""

    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        say(f"stopping the worker this command started (pid {self.proc.pid}, up to {WORKER_STOP_S} s; log {self.log})")
        self.proc.terminate()
        try:
            self.proc.wait(timeout=WORKER_STOP_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def made_worker() -> int | None:
    """The worker `make demo` started beside this command (its pid in REPOSWARM_HOME/worker.pid), if alive."""
    try:
        pid = int((home() / "worker.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


async def worker_polling(client: Client, queue: str) -> bool:
    """Whether a live worker polls the queue: one that polled in the last POLL_FRESH_S (answers.worker_polling),
    less those of this host whose process has ended. The server lists a worker for a minute after it stopped,
    and a demo or try run just after another's worker stopped would otherwise wait on it instead of starting
    one. (A worker's poller identity is the SDK's `pid@host`.)"""
    found = await pollers(client, queue)
    if found is None:
        return True  # cannot tell: what needs the worker finds out, and says so
    now = time.time()
    return any(now - p.last_access_time.ToSeconds() < POLL_FRESH_S and not _ended_here(p.identity) for p in found)


async def busy_here(client: Client, queue: str) -> int | None:
    """The pid of a worker process of this host that polled `queue` lately and still runs (None: none, or the
    server cannot say). Such a worker that does not answer a query in time is busy (the checks it runs load the
    machine, a replay of a long history), not gone: a command following the run waits for it."""
    found = await pollers(client, queue)
    if found is None:
        return None
    now = time.time()
    for poller in found:
        pid, _, host = poller.identity.partition("@")
        if now - poller.last_access_time.ToSeconds() < POLL_FRESH_S and host == socket.gethostname() and \
                pid.isdigit() and not _ended_here(poller.identity):
            return int(pid)
    return None


def _ended_here(identity: str) -> bool:
    pid, _, host = identity.partition("@")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # there, and not ours to signal
    return False


async def polled_within(client: Client, queue: str, seconds: float,
                        proc: subprocess.Popen[bytes] | None = None) -> bool:
    """Whether a worker polls `queue` within `seconds` (asked every POLL_TICK_S; a started `proc` that exits
    ends the wait)."""
    deadline = time.monotonic() + seconds
    while True:
        if await worker_polling(client, queue):
            return True
        if (proc is not None and proc.poll() is not None) or time.monotonic() >= deadline:
            return False
        await asyncio.sleep(POLL_TICK_S)


def worker_wait_s() -> float:
    text = os.environ.get("REPOSWARM_WORKER_WAIT_S", "").strip()
    try:
        return max(0.0, float(text)) if text else WORKER_START_S
    except ValueError:
        raise UserError(f"REPOSWARM_WORKER_WAIT_S={text!r} is not a number of seconds") from None


async def ensure_worker(client: Client, queue: str) -> LocalWorker:
    """A worker polling `queue`: one already there, the one `make demo` is starting, or one started here, in the
    background, with its log in REPOSWARM_HOME."""
    if await worker_polling(client, queue):
        return LocalWorker()
    if (pid := made_worker()) is not None:
        say(f"waiting up to {MADE_WORKER_S} s for the worker started beside this command (pid {pid}) to poll task "
            f"queue {queue!r}")
        if await polled_within(client, queue, MADE_WORKER_S):
            return LocalWorker()
        say(f"it did not poll within {MADE_WORKER_S} s: starting one of this command's own")
    wait_s = worker_wait_s()
    log = home() / f"worker-{re.sub(r'[^A-Za-z0-9_.-]+', '-', queue)}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    # the installed package's worker (`reposwarm worker`); -P: the current folder, whatever it holds (a worker.py,
    # a reposwarm/), is not on the worker's import path
    argv = [sys.executable, "-P", "-m", "reposwarm.cli.main", "worker"]
    with log.open("ab") as out:
        # a session of its own: the terminal's Ctrl-C reaches this command, which then stops the worker itself
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    worker = LocalWorker(proc, log)
    say(f"no worker polls task queue {queue!r}: started one (pid {proc.pid}, log {log}), waiting up to {wait_s:g} s "
        "for its first poll; it is stopped when this command ends")
    try:
        ready = await polled_within(client, queue, wait_s, proc)
    except BaseException:
        worker.stop()
        raise
    if not ready:
        code = proc.poll()
        worker.stop()
        lines = log.read_text(errors="replace").strip().splitlines() if log.exists() else []
        last = f" (its last line: {inert(lines[-1])[:200]})" if lines else ""
        what = f"exited with code {code}" if code is not None else f"did not poll within {wait_s:g} s"
        raise UserError(f"the worker this command started {what}; its log is {log}{last}")
    return worker


@dataclass
class Local:
    client: Client
    worker: LocalWorker

    def left(self, run_id: str) -> str:
        """What becomes of a run this command leaves (interrupted, or waiting for review)."""
        if self.worker.proc is None:
            return f"the run goes on with the worker that was running: {prog()} watch {run_id}"
        return (f"the worker this command started stops with it, so the run waits for one: {prog()} worker, then "
                f"{prog()} watch {run_id}")


@asynccontextmanager
async def local_swarm() -> AsyncIterator[Local]:
    """A client of a Temporal server with a worker on the task queue, started as needed (and the worker stopped
    at the end when it was started here)."""
    ensure_server()
    client = await client_or_die()
    worker = await ensure_worker(client, task_queue())
    try:
        yield Local(client, worker)
    finally:
        worker.stop()


async def review_and_approve(local: Local, run_id: str, *, yes: bool, comment: str,
                             accept_test_changes: bool = False) -> int | None:
    """Follow the run to its review, print the package and approve it (asked first on a terminal, without
    `yes`). None once approved and delivered; else the command's exit code (left waiting, or never reviewed)."""
    from reposwarm.cli.live import follow, next_step
    from reposwarm.cli.runs import decide, reviewer_name
    from reposwarm.review.package import render_review, render_status

    client = local.client
    try:
        v = await follow(client, run_id, until_review=True)
    except (KeyboardInterrupt, asyncio.CancelledError):  # Ctrl-C: said, then the command ends (exit 130)
        print(f"interrupted: run {run_id} is not waiting for review yet; {local.left(run_id)}", file=sys.stderr,
              flush=True)
        raise
    if v.status.phase != Phase.review or v.status.review is None:
        print(inert(render_status(v.status)))
        print(inert(next_step(v)))
        return 1
    print()
    print(inert(render_review(v.status.review, ui_url(run_id))))
    if yes:
        approve = True
    elif sys.stdin.isatty():
        approve = input("approve this change? [y/N] ").strip().lower() in ("y", "yes")
    else:
        approve = False  # nobody to ask
    if not approve:
        print(f"left waiting for review: {prog()} approve|reject {run_id}" + (
            f" (with a worker running: {prog()} worker)" if local.worker.proc is not None else ""))
        return 0
    decision = ReviewDecision(approve=True, reviewer=reviewer_name(), comment=comment,
                              accept_test_changes=accept_test_changes)
    try:
        print(await decide(client, run_id, decision))
    except UserError:
        print(f"left waiting for review: {prog()} review|approve|reject {run_id}" + (
            f" (with a worker running: {prog()} worker)" if local.worker.proc is not None else ""))
        raise
    return None


def make_demo_repo() -> Path:
    """A fresh git repository holding the bundled example, in a temporary folder."""
    root = Path(tempfile.mkdtemp(prefix="reposwarm-demo-"))
    repo = root / "taskboard"
    shutil.copytree(DEMO / "repo", repo, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = {"GIT_AUTHOR_NAME": "demo", "GIT_AUTHOR_EMAIL": "demo@localhost",
           "GIT_COMMITTER_NAME": "demo", "GIT_COMMITTER_EMAIL": "demo@localhost"}
    for argv in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "taskboard: initial import"]):
        gitcmd.run(["-C", str(repo), *argv], check=True, env=env)
    return repo


async def cmd_demo(args: argparse.Namespace) -> int:
    from reposwarm.cli.runs import build_request, start

    async with local_swarm() as local:
        client = local.client
        repo = make_demo_repo()
        print(f"demo repository: {repo}")
        ns = argparse.Namespace(repo=str(repo), task=DEMO_TASK, lanes=str(DEMO / "lanes.yaml"),
                                plan=str(DEMO / "plan.yaml"), model=f"replay:{DEMO / 'replay.yaml'}")
        req = build_request(ns)
        await start(client, req)
        print(f"started {req.run_id}; watch it at {ui_url(req.run_id)}")
        code = await review_and_approve(local, req.run_id, yes=args.yes, comment="demo")
        if code is not None:
            return code
        print(f"afterwards, with no worker running: {prog()} status|review|report {req.run_id}")
        return 0
