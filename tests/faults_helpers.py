"""Machinery for tests/test_faults.py: one swarm run end to end, with a worker in its own process, a fake
OpenAI-wire model server that is slow on purpose, and a fault injected by a real signal at a chosen moment.

A scenario is one run of the same change on a fresh copy of the same repository:

    planner (a model call, no --plan) -> lane api: read, edit + run_checks (profile "lane", ~1 s), finish
                                      -> lanes web and docs (both depend on api, run in parallel): write, finish
    -> merges -> validation (profile "default", ~2 s) -> review (the test approves) -> delivery

and `fault` says what is SIGKILLed and when (see tests/test_faults.py). Every moment is detected from
something the run really does (a request reaching the model server, a check command starting, the merge's
git step, the ledger, the review phase), never from a sleep, so the kill lands inside the step it names.
Everything a test needs to judge the run afterwards (the model requests with their times, the ledger, the
delivered history, the pending activities, the recovery times) is collected into an `Outcome`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle
from temporalio.contrib.pydantic import pydantic_data_converter

from reposwarm.cli.runs import build_request, start
from reposwarm.contracts import Phase, ReviewDecision, SwarmResult
from reposwarm.review.webui import ATTRIBUTES
from tests.fake_models import FakeModelServer
from tests.helpers import (
    WorkerProcess,
    finish,
    git,
    lanes_started,
    make_repo,
    temporal_binary,
    turn,
    write_yaml,
)
from workflows.swarm import SwarmWorkflow

KEY = "sk-" + "faults-fake-key-0123456789abcdefABCDEF"  # fake
MODEL_DELAY_S = 0.4  # every model request takes this long: room to kill the worker while one is in flight
RECOVERY_LIMIT_S = 180.0  # a run must complete within this long after the kill
# How long a scenario waits for its run after the kill: RECOVERY_LIMIT_S, or longer (FAULTS_WAIT_S=420) to see
# whether the runs that miss the limit still end right once their activity timeouts expire.
WAIT_LIMIT_S = max(RECOVERY_LIMIT_S, float(os.environ.get("FAULTS_WAIT_S") or RECOVERY_LIMIT_S))
TRIGGER_LIMIT_S = 120.0  # the fault's moment must come within this long after the run starts
LANE_CHECK_S = 1.0  # the run_checks tool's profile command sleeps this long in a lane worktree
VALIDATION_S = 2.0  # the validation profile's command sleeps this long on the merged tree (not on the baseline)
SERVER_DOWN_S = {"server": 3.0, "server_long": 20.0}  # dead this long (server_long: past the SDK's 10 s of retries)
MARK_POLL_S = 0.05  # CheckMarks reads /proc this often (every process's name: at 0.01 s, a sixth of a core)
MARK_LINGER_S = 0.3  # a check stays this long after saying "end", for CheckMarks to see it

FILES = {
    "api/app.py": "VERSION = 1\n",
    "web/client.js": "export const v = 1;\n",
    "docs/index.md": "# Docs\n",
    # The check command: says when it starts and ends (and where: the folder is the lane's name, "baseline"
    # or "validate"), sleeps except on the baseline, then really imports the API from the checked tree. It runs
    # sandboxed and can write nothing but its tree, so it says it in its process name, which CheckMarks reads
    # from the host's /proc (argv[1] is the scenario's token, for CheckMarks to tell the scenarios apart).
    "checks/check.py": (
        "import os, sys, time\n"
        "sleep_s = float(sys.argv[2])\n"
        "where = os.path.basename(os.getcwd())\n"
        "def note(what):\n"
        "    with open('/proc/self/comm', 'w') as f:\n"
        "        f.write(f'{what}:{where}'[:15])\n"
        "note('start')\n"
        "if where != 'baseline':\n"
        "    time.sleep(sleep_s)\n"
        "sys.path.insert(0, os.getcwd())\n"
        "import api.app\n"
        "assert api.app.VERSION == 1\n"
        "note('end')\n"
        f"time.sleep({MARK_LINGER_S})  # long enough to be seen ending\n"
    ),
}
PLAN = {
    "interface_contract": ("api/app.py keeps VERSION and exports NAME = 'swarm'; web/client.js exports "
                           "name = 'swarm'; docs/name.md says so."),
    "summary": "NAME everywhere",
    "lanes": [{"lane": "api", "goal": "Add NAME = 'swarm' to api/app.py and run the checks."},
              {"lane": "web", "goal": "Export name = 'swarm' from web/client.js, as the API does."},
              {"lane": "docs", "goal": "Document the name in docs/name.md."}],
}
QUICK_READS = 20
SCRIPT: dict[str, Any] = {
    "planner": {1: [turn(("plan_1", "submit_plan", PLAN))]},
    "lanes": {
        "api": {1: [turn(("api_1", "read_file", {"path": "api/app.py"}), content="Reading the API first."),
                    # (rewriting VERSION's line, which the contract names and the goal does not: a contract flag)
                    turn(("api_2", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n",
                                                 "new": "VERSION = 1  # the API's version\nNAME = 'swarm'\n",
                                                 "reason": "Export NAME as the interface contract says"}),
                         # quick tools after the edit: local activities that keep the edit's workflow task open
                         # a while, so the quick_tool kill lands inside it
                         *((f"api_2r{i}", "read_file", {"path": "api/app.py"}) for i in range(QUICK_READS)),
                         ("api_3", "run_checks", {"profile": "lane"})),
                    finish("api_4", "api/app.py exports NAME")]},
        "web": {1: [turn(("web_1", "read_file", {"path": "api/app.py"})),
                    turn(("web_2", "write_file", {"path": "web/client.js", "content": "export const name = 'swarm';\n",
                                                  "reason": "Mirror the API's NAME in the client"})),
                    finish("web_3", "web/client.js exports name")]},
        "docs": {1: [turn(("docs_1", "write_file", {"path": "docs/name.md", "content": "The name is `swarm`.\n",
                                                    "reason": "Document the shared name for readers"})),
                     finish("docs_2", "docs/name.md documents the name")]},
    },
}


class RecoveryTimeout(AssertionError):
    """The run did not complete within RECOVERY_LIMIT_S of the kill."""


class LedgerGap(AssertionError):
    """The ledger misses an event that the run's history shows happened."""


# --- the model server ---


def call_key(body: dict[str, Any]) -> tuple[str, int, int]:
    """(agent, round, turn) of a Chat Completions request, read as FakeModelServer reads it."""
    messages = body["messages"]
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    rest = [m for m in messages if m["role"] != "system"]
    first = rest[0]["content"] if isinstance(rest[0]["content"], str) else json.dumps(rest[0]["content"])
    turn_no = sum(1 for m in rest if m["role"] == "assistant")
    if "You are the planner" in system:  # PLANNER_SYSTEM's start (a lane's system text holds the run's task)
        comments = first.split("Their comments, oldest first:")[1:]
        return "planner", 1 + (comments[0].count("\n- ") if comments else 0), turn_no
    lane = re.search(r"Goal for lane (\S+):", first)
    said = re.search(r"^Round (\d+)\.", first, re.M) or re.search(r"^Round (\d+)\.", system, re.M)
    return (lane.group(1) if lane else "?"), int(said.group(1)) if said else 1, turn_no


@dataclass
class Call:
    key: tuple[str, int, int]
    started: float
    raw: bytes
    ended: float | None = None  # when the reply was ready to go out (None: the process asking was gone first)


@dataclass
class SlowModelServer(FakeModelServer):
    """FakeModelServer that takes `delay` seconds per request and can act the moment a request arrives."""

    delay: float = MODEL_DELAY_S
    on_call: Callable[[tuple[str, int, int]], None] | None = None
    calls: list[Call] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        self._lock = threading.Lock()
        # A reply to a killed worker meets a closed socket; that is the point, not an error worth a traceback.
        self._httpd.handle_error = lambda request, client_address: None  # type: ignore[method-assign]

    def reply_for(self, body: dict[str, Any]) -> dict[str, Any]:
        key = call_key(body)
        call = Call(key=key, started=time.time(), raw=json.dumps(body, sort_keys=True).encode())
        with self._lock:
            self.calls.append(call)
        if self.on_call is not None:
            self.on_call(key)
        time.sleep(self.delay)
        try:
            return super().reply_for(body)
        finally:
            call.ended = time.time()

    def in_flight(self, at: float, grace: float = 0.5) -> set[tuple[str, int, int]]:
        """Requests started before `at` whose reply was not out `grace` seconds before it (the worker may still
        have been turning the reply into a completed activity)."""
        with self._lock:
            return {c.key for c in self.calls if c.started <= at and (c.ended is None or c.ended > at - grace)}


# --- processes ---


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process group of a process started with start_new_session=True (its id is the group's)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class DevServer:
    """`temporal server start-dev` on a SQLite file and a fixed port, in its own process group: killable and
    restartable on the same database."""

    def __init__(self, db: Path, port: int, log: Path) -> None:
        self.db, self.port, self.log = db, port, log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [temporal_binary(), "server", "start-dev", "--db-filename", str(self.db), "--port", str(self.port),
             "--ip", "127.0.0.1", "--headless", "--sqlite-pragma", "journal_mode=wal",
             *(arg for key in ATTRIBUTES for arg in ("--search-attribute", f"{key.name}=Keyword")),
             "--log-level", "warn"],
            stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)

    async def ready(self, client: Client | None = None, timeout: float = 60) -> Client:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if client is None:
                    client = await Client.connect(self.address, data_converter=pydantic_data_converter)
                if await client.service_client.check_health():
                    return client
            except Exception:
                pass
            if self.proc is not None and self.proc.poll() is not None:
                raise AssertionError(f"dev server exited:\n{self.log.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"dev server not ready in {timeout}s")
            await asyncio.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None:
            kill_group(self.proc)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                kill_group(self.proc)


def slow_git(folder: Path, marks: Path, when: str, sleep_s: float = 1.5) -> Path:
    """A `git` for the worker's PATH that notes and slows one step of the merge activity, so that a kill lands
    inside merge_lane; everything else is the real git. `when`: "merge-tree" sleeps before `git merge-tree`
    (nothing written yet; on a big repository the merge's long step), "update-ref" sleeps right after
    `git update-ref` has moved the integration branch (the merge is done, the activity not yet complete)."""
    folder.mkdir(parents=True, exist_ok=True)
    real = shutil.which("git")
    script = folder / "git"
    if when == "merge-tree":
        body = ("for a in \"$@\"; do\n"
                "  if [ \"$a\" = merge-tree ]; then\n"
                f"    echo \"merge-tree $$ $(date +%s.%N)\" >> '{marks}'; sleep {sleep_s}; break\n"
                "  fi\n"
                "done\n")
    else:
        body = ("case \"$1 $2\" in\n"
                "  'update-ref refs/heads/swarm/'*/integration)\n"
                f"    '{real}' \"$@\"; rc=$?\n"
                f"    echo \"update-ref $$ $(date +%s.%N)\" >> '{marks}'; sleep {sleep_s}; exit $rc;;\n"
                "esac\n")
    script.write_text(f"#!/bin/sh\n{body}exec '{real}' \"$@\"\n")
    script.chmod(0o755)
    return folder


# --- one scenario ---


@dataclass
class Outcome:
    fault: str | None
    tmp: Path
    run_id: str = ""
    repo: Path | None = None
    home: Path | None = None
    queue: str = ""
    started_at: float = 0.0
    killed_at: float | None = None
    killed_what: str = ""
    restarted_at: float | None = None  # the new worker (or server) process was started
    ready_at: float | None = None  # ... and was polling again
    completed_at: float | None = None
    in_flight_at_kill: set[tuple[str, int, int]] = field(default_factory=set)  # model requests
    pending_at_kill: list[str] = field(default_factory=list)  # activities Temporal had started
    ledger_at_kill: list[dict[str, Any]] = field(default_factory=list)
    result: SwarmResult | None = None
    delivered_tree: str | None = None
    calls: list[Call] = field(default_factory=list)
    ledger_lines: list[str] = field(default_factory=list)
    commits: list[dict[str, Any]] = field(default_factory=list)  # the delivered branch since the base
    review: dict[str, Any] = field(default_factory=dict)  # the review package the run published (latest.json)
    marks: list[str] = field(default_factory=list)  # check command and merge-tree marks
    notes: list[str] = field(default_factory=list)
    lost_workflow_tasks: int | None = None  # quick_tool: lane api's workflow tasks that died with the worker

    @property
    def ledger(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.ledger_lines if line.strip()]

    def after_kill(self, at: float | None) -> float | None:
        return None if at is None or self.killed_at is None else round(at - self.killed_at, 1)

    @property
    def next_ledger_event_at(self) -> float | None:
        """The first ledger event written after the restart began."""
        if self.restarted_at is None:
            return None
        times = [e["ts"] for e in self.ledger if e["ts"] >= self.restarted_at]
        return min(times) if times else None

    @property
    def recovery_s(self) -> float | None:
        return self.after_kill(self.completed_at)

    def summary(self) -> str:
        def secs(value: float | None, missing: str) -> str:
            return f"{value}s" if value is not None else missing

        if self.fault is None:
            took = None if self.completed_at is None else round(self.completed_at - self.started_at, 1)
            return f"reference: completed in {secs(took, '(not completed)')}, {len(self.calls)} model requests"
        never = f"none within {WAIT_LIMIT_S:.0f}s"
        down = f" (server down {SERVER_DOWN_S[self.fault]:.0f}s)" if self.fault in SERVER_DOWN_S else ""
        seen = "pending after the restart" if self.fault in SERVER_DOWN_S else "pending at the kill"
        return (f"{self.fault} [{self.killed_what}]{down}: kill -> new process ready "
                f"{secs(self.after_kill(self.ready_at), '-')}, -> next ledger event "
                f"{secs(self.after_kill(self.next_ledger_event_at), never)}, -> run completed "
                f"{secs(self.recovery_s, never)}; {seen}: {', '.join(self.pending_at_kill) or 'none'}"
                + (f"; lane api's workflow tasks lost with the worker: {self.lost_workflow_tasks}"
                   if self.lost_workflow_tasks is not None else ""))


async def pending_activities(client: Client, run_id: str) -> list[str]:
    """The activities Temporal has scheduled or started for the run and its lanes, with attempt and timeouts."""
    found = []
    ids = [run_id]
    while ids:
        wid = ids.pop()
        try:
            desc = await client.get_workflow_handle(wid).describe(rpc_timeout=timedelta(seconds=5))
        except Exception as err:
            found.append(f"{wid}: describe failed ({type(err).__name__})")
            continue
        raw = desc.raw_description
        ids += [c.workflow_id for c in raw.pending_children]
        if wid == run_id:  # its lanes started by the client (activities/lanes.py)
            try:
                ids += lanes_started((await client.get_workflow_handle(wid).fetch_history()).events)
            except Exception as err:  # noqa: BLE001 - a diagnostic: say what could not be read
                found.append(f"{wid}: history unreadable ({type(err).__name__})")
        for a in raw.pending_activities:
            opts = a.activity_options
            s2c = opts.start_to_close_timeout.ToSeconds() if opts.HasField("start_to_close_timeout") else None
            hb = opts.heartbeat_timeout.ToSeconds() if opts.HasField("heartbeat_timeout") else None
            state = {1: "scheduled", 2: "started", 3: "cancel requested", 4: "paused", 5: "pause requested"}.get(
                a.state, str(a.state))
            found.append(f"{a.activity_type.name}[{wid.removeprefix(run_id) or 'swarm'}] {state} "
                         f"attempt {a.attempt} start_to_close={s2c}s heartbeat={hb or 'none'}")
    return found


class Watch(threading.Thread):
    """Polls `ready` every few milliseconds on a thread of its own and runs `act` once when it is true."""

    def __init__(self, ready: Callable[[], bool], act: Callable[[], None]) -> None:
        super().__init__(daemon=True)
        self.ready, self.act, self.stopped = ready, act, threading.Event()

    def run(self) -> None:
        while not self.stopped.is_set():
            try:
                if self.ready():
                    self.act()
                    return
            except OSError:
                pass
            time.sleep(0.005)


class CheckMarks(threading.Thread):
    """One watcher for every scenario: a check command names its process "start:<where>", later
    "end:<where>"; this writes "start|end <pid> <where> <time>" into the marks file of the scenario whose token
    is on the process's command line, once for each process and state."""

    shared: CheckMarks | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.files: dict[str, Path] = {}
        self.seen: set[tuple[int, str]] = set()

    @classmethod
    def watch(cls, token: str, marks: Path) -> None:
        with cls._lock:
            if cls.shared is None:
                cls.shared = cls()
                cls.shared.start()
            cls.shared.files[token] = marks

    @classmethod
    def forget(cls, token: str) -> None:
        with cls._lock:
            if cls.shared is not None:
                cls.shared.files.pop(token, None)

    def run(self) -> None:
        while True:
            for entry in os.scandir("/proc"):
                if entry.name.isdigit():
                    self._look(int(entry.name))
            time.sleep(MARK_POLL_S)

    def _look(self, pid: int) -> None:
        try:
            comm = Path(f"/proc/{pid}/comm").read_text().strip()
            what, _, where = comm.partition(":")
            if what not in ("start", "end") or not where or (pid, comm) in self.seen:
                return
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            return
        self.seen.add((pid, comm))
        with self._lock:
            marks = next((self.files[a] for a in argv if a in self.files), None)
        if marks is not None:
            with marks.open("a") as f:
                f.write(f"{what} {pid} {where} {time.time():.3f}\n")


def _marked(path: Path, pattern: str) -> Callable[[], bool]:
    rx = re.compile(pattern, re.M)
    return lambda: path.exists() and rx.search(path.read_text(errors="replace")) is not None


def read_ledger(home: Path, run_id: str) -> list[str]:
    path = home / "runs" / run_id / "ledger.jsonl"
    return path.read_text(encoding="utf-8").splitlines() if path.exists() else []


def parse_lines(lines: list[str]) -> list[dict[str, Any]]:
    """Ledger lines as read while the ledger is written (a last line may be half written)."""
    out = []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def delivered_commits(repo: Path, base: str, branch: str) -> list[dict[str, Any]]:
    trees = dict(line.split() for line in git(repo, "log", "--format=%H %T", branch).splitlines())
    out = []
    for sha in git(repo, "rev-list", "--topo-order", f"{base}..{branch}").splitlines():
        parents = git(repo, "log", "-1", "--format=%P", sha).split()
        out.append({"sha": sha, "tree": trees[sha], "parents": parents, "parent_trees": [trees[p] for p in parents],
                    "message": git(repo, "log", "-1", "--format=%B", sha).strip()})
    return out


async def run_scenario(out: Outcome, client: Client, address: str, mp: pytest.MonkeyPatch) -> Outcome:
    """One run end to end, with `out.fault` injected (None: the undisturbed reference), filling `out`. Raises
    RecoveryTimeout when the run does not complete within WAIT_LIMIT_S of the kill, saying what Temporal still
    waits for. The tests judge the Outcome (tests/test_faults.py)."""
    # Scenarios share the event loop: anything that blocks (git, waiting for a process) goes to a thread.
    fault, tmp = out.fault, out.tmp
    repo = out.repo = await asyncio.to_thread(make_repo, tmp / "repo", FILES)
    base = await asyncio.to_thread(git, repo, "rev-parse", "HEAD")
    home = out.home = tmp / "home"
    marks = tmp / "marks.log"
    token = f"faults-{uuid.uuid4().hex}"  # on the check commands' command lines: CheckMarks finds them by it
    CheckMarks.watch(token, marks)
    py = sys.executable
    lanes = write_yaml(tmp / "lanes.yaml", {
        "swarm": {"max_parallel": 2, "lanes": {
            "api": {"allowed_paths": ["api/"], "read_only_paths": ["checks/"]},
            "web": {"allowed_paths": ["web/"], "read_only_paths": ["api/"], "depends_on": ["api"]},
            "docs": {"allowed_paths": ["docs/"], "read_only_paths": ["api/"], "depends_on": ["api"]}}},
        "validation": {"profile": "default", "profiles": {
            "default": {"timeout_s": 60, "commands": [[py, "checks/check.py", token, str(VALIDATION_S)]]},
            "lane": {"timeout_s": 60, "commands": [[py, "checks/check.py", token, str(LANE_CHECK_S)]]}}},
    })
    out.queue = queue = f"faults-{fault or 'reference'}-{uuid.uuid4().hex[:6]}"
    fake = SlowModelServer("openai", SCRIPT)
    worker_env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": KEY}
    if fault in ("merge", "merge_committed"):
        when = "merge-tree" if fault == "merge" else "update-ref"
        worker_env["PATH"] = f"{slow_git(tmp / 'bin', marks, when)}:{os.environ['PATH']}"
    server: DevServer | None = None
    workers: list[WorkerProcess] = []
    watches: list[Watch] = []
    killed = threading.Event()
    kill_lock = threading.Lock()

    def new_worker() -> WorkerProcess:
        w = WorkerProcess(address, queue, home, worker_env)
        w.log = home / f"worker-{len(workers) + 1}.log"  # a log each: ready() looks for the banner in it
        workers.append(w)
        return w

    def kill(what: str) -> None:
        """The fault: SIGKILL the worker's process group (or the dev server's), then take note."""
        with kill_lock:
            if killed.is_set():
                return
            target = server.proc if fault in SERVER_DOWN_S and server is not None else workers[-1].proc
            assert target is not None
            os.killpg(target.pid, signal.SIGKILL)
            out.killed_at, out.killed_what = time.time(), what
            target.wait()
            out.in_flight_at_kill = fake.in_flight(out.killed_at)
            out.ledger_at_kill = parse_lines(read_ledger(home, out.run_id))
            killed.set()

    def on_model_call(key: tuple[str, int, int]) -> None:
        target = {"planning": ("planner", 1, 0), "lane_turn": ("api", 1, 1), "server": ("web", 1, 1),
                  "server_long": ("api", 1, 1), "lane_steps": ("web", 1, 2)}.get(fault or "")
        if key == target:
            kill(f"model request {key[0]} turn {key[2]} in flight")

    fake.on_call = on_model_call
    if fault == "tool_call":
        watches.append(Watch(_marked(marks, r"^start \d+ api "), lambda: kill("run_checks tool of lane api running")))
    elif fault == "validation":
        watches.append(Watch(_marked(marks, r"^start \d+ validate "), lambda: kill("validation command running")))
    elif fault == "quick_tool":
        # lane api's edit_file is a local activity (the worker's dev server is on loopback: shared-queue
        # affinity); killed as soon as it has ledgered its call, while the quick reads after it keep its
        # workflow task open: its result is lost with the task, and the replaying worker runs it again
        def edited() -> bool:
            return any(e.get("event") == "tool_call" and e.get("call_id") == "api_2"
                       for e in parse_lines(read_ledger(home, out.run_id)))

        watches.append(Watch(edited, lambda: kill("edit_file of lane api done in a local activity")))
    elif fault in ("merge", "merge_committed"):
        # Right after the first lane (api) finished, as the ledger shows, while its merge is in git.
        def api_finished() -> bool:
            return any(e.get("event") == "model_call" and e.get("call_id") == "api-r1-t2"
                       for e in parse_lines(read_ledger(home, out.run_id)))

        step = _marked(marks, r"^merge-tree " if fault == "merge" else r"^update-ref ")
        what = ("git merge-tree of lane api running" if fault == "merge"
                else "merge_lane of api: integration branch moved, activity not complete")
        watches.append(Watch(lambda: step() and api_finished(), lambda: kill(what)))

    handle: WorkflowHandle[Any, Any] | None = None
    fake.__enter__()
    try:
        if fault in SERVER_DOWN_S:
            server = DevServer(tmp / "t.db", free_port(), tmp / "server.log")
            server.start()
            client = await server.ready()
            address = server.address
        worker = new_worker()
        worker.start()
        await worker.ready()
        for w in watches:
            w.start()
        req = await asyncio.to_thread(build_request, argparse.Namespace(
            repo=str(repo), task="NAME everywhere", lanes=str(lanes), plan=None, model="openai:fake"))
        out.run_id = req.run_id
        mp.setenv("REPOSWARM_TASK_QUEUE", queue)  # start reads it (task_queue()) before its first await
        out.started_at = time.time()
        await start(client, req)
        handle = client.get_workflow_handle_for(SwarmWorkflow.run, req.run_id)

        if fault == "review":
            await wait_phase(handle, Phase.review, out.started_at + TRIGGER_LIMIT_S, AssertionError)
            await asyncio.to_thread(kill, "waiting for review")
        elif fault is not None:
            deadline = time.monotonic() + TRIGGER_LIMIT_S
            while not killed.is_set():
                if time.monotonic() > deadline:
                    raise AssertionError(f"the moment for fault {fault!r} never came")
                await asyncio.sleep(0.02)

        if fault is not None:
            assert out.killed_at is not None
            out.restarted_at = time.time()
            if fault in SERVER_DOWN_S:
                assert server is not None
                # meanwhile the worker finishes its model and tool calls, with no server to report them to
                await asyncio.sleep(max(0.0, out.killed_at + SERVER_DOWN_S[fault] - time.time()))
                out.restarted_at = time.time()
                server.start()
                await server.ready(client)
                out.ready_at = time.time()
                # (a dead server cannot be asked: this is what it knows once it is back)
                out.pending_at_kill = await pending_activities(client, req.run_id)
            else:
                new_worker().start()
                out.pending_at_kill = await pending_activities(client, req.run_id)  # while the worker boots
                await workers[-1].ready()
                out.ready_at = time.time()
        limit = (out.killed_at or out.started_at) + (WAIT_LIMIT_S if fault else TRIGGER_LIMIT_S)
        late = RecoveryTimeout if fault is not None else AssertionError
        try:
            await wait_phase(handle, Phase.review, limit, late)
            await asyncio.wait_for(handle.execute_update(SwarmWorkflow.review, ReviewDecision(
                approve=True, reviewer="faults")), timeout=max(1.0, limit - time.time()))
            out.result = await asyncio.wait_for(handle.result(), timeout=max(1.0, limit - time.time()))
        except (TimeoutError, RecoveryTimeout) as err:
            stuck = await pending_activities(client, req.run_id)
            raise late(f"{fault or 'reference'}: the run did not complete within {WAIT_LIMIT_S:.0f}s of the "
                       f"kill ({out.killed_what}); Temporal still waits for: {'; '.join(stuck) or 'nothing'}"
                       ) from err
        out.completed_at = time.time()
        assert out.result.delivered_branch
        out.delivered_tree = await asyncio.to_thread(git, repo, "rev-parse",
                                                     f"{out.result.delivered_branch}^{{tree}}")
        out.commits = await asyncio.to_thread(delivered_commits, repo, base, out.result.delivered_branch)
        out.review = json.loads((home / "runs" / req.run_id / "review" / "latest.json").read_text(encoding="utf-8"))
        if fault == "quick_tool":  # did the kill land inside the workflow task that ran the edit?
            history = await client.get_workflow_handle(f"{req.run_id}.api").fetch_history()
            out.lost_workflow_tasks = sum(e.event_type in (EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT,
                                                           EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED)
                                          for e in history.events)
    finally:
        for w in watches:
            w.stopped.set()
        out.calls = list(fake.calls)
        if out.run_id:
            out.ledger_lines = read_ledger(home, out.run_id)
        CheckMarks.forget(token)
        out.marks = marks.read_text().splitlines() if marks.exists() else []
        if handle is not None and out.completed_at is None:
            try:
                await handle.terminate("fault test over", rpc_timeout=timedelta(seconds=10))
            except Exception:
                pass
        for w in workers:
            await asyncio.to_thread(w.stop)
        if server is not None:
            await asyncio.to_thread(server.stop)
        await asyncio.to_thread(fake.__exit__, None, None, None)
    return out


async def wait_phase(handle: WorkflowHandle[Any, Any], phase: Phase, deadline: float,
                     late: type[AssertionError]) -> None:
    while True:
        try:
            status = await handle.query(SwarmWorkflow.status, rpc_timeout=timedelta(seconds=5))
            if status.phase == phase:
                return
            if status.phase == Phase.failed:
                raise AssertionError(f"run failed: {status.error}")
        except AssertionError:
            raise
        except Exception:
            pass  # no worker answering yet
        if time.time() > deadline:
            raise late(f"phase {phase.value} not reached in time")
        await asyncio.sleep(0.2)
