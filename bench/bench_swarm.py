"""Benchmark the swarm itself on a real local Temporal dev server: lane set-up, step overhead, parallel efficiency,
recovery after a worker is killed, and history growth.

Why: a swarm is only worth its orchestration if lanes start fast on big repositories, a step costs little more
than Temporal's own round trip, lanes really run side by side, a killed worker is replaced quickly, and
histories stay small. Every figure comes from real runs through the product's own code (starter, workflows,
activities, worker) in one bench run on one dev server; figures are ratios where the machine's speed would
otherwise dominate. Prints a table and writes bench/results.json.

    python bench/bench_swarm.py [--quick] [--services 800] [--out bench/results.json]

1. lane set-up, sparse vs full: runs whose lanes do one `finish` turn (replay model) with swarm.sparse true and
   false, on a generated ~4M-line monorepo (bench/gen_monorepo.py, cached in $TMPDIR/reposwarm-bench); each
   lane's worktree timed from its LaneWorkflow history: its create_lane_worktree activity, or the first turn's
   model_turn where that made it (patch worktree-in-turn: the worktree, then the instant replay call) (scheduled ->
   completed, so failed attempts and their retry back-off count; the last attempt's started -> completed too), for 4 and 32 lanes at
   once (max_parallel = lanes). The headline is the 4-lane run (the default max_parallel).
2. step overhead: one lane step (a replay-model turn with one list_dir call), measured in the lane's history from
   one model turn's scheduling to the next's, divided by one raw activity round trip (bench/swarm_probe.py: a
   no-op activity run N times in a row by a trivial workflow on its own task queue, on a worker in this process
   like the lane's). The headline is this machine's default, REPOSWARM_AFFINITY=auto on a loopback dev server:
   lane activities on the shared queue, list_dir a local activity. The same lane with REPOSWARM_AFFINITY=host
   (lane activities on the host's own queue, as with workers on several machines) and the same probe with the
   activity on a second worker's queue are measured beside it.
3. parallel efficiency for 1, 4, 8, 32 and 64 lanes of ten 1-second turns (tests.fake_models.FakeModelServer on
   the OpenAI wire, lanes on a `python worker.py` process, a repository of 2,129 files so lanes are sparse as on
   any past 2,000): the headline is throughput, the one-lane time / the N lanes' elapsed on the same work per
   lane; beside it the overlap, sum of lane spans / (lanes x elapsed), from the lanes' histories and from
   `starter.py report RUN --json` (which flatters: a lane waiting for a slot counts as working); CPU per lane step
   (a turn and its tool call) of the worker and of the dev server (/proc), and where it goes: the worker's by
   thread and by function (bench/cpu_probe.py, timers inside the worker process), the server's as the requests
   and persistence operations it served per step (its metrics) and the lanes' history events per step; from the
   most lanes, the cores 1,000 lanes of 10 s turns would need; where a lane's time goes (the lanes' start
   spread, set-up before the first turn, model call against turn activity, workflow-task pick-up and run). The
   most lanes run again on a worker of another concurrency (REPOSWARM_WORKER_CONCURRENCY): a slot per lane if
   the default has fewer, else half as many slots as lanes.
4. recovery: a worker process SIGKILLed (its process group) mid-run and a new one started at once (same home,
   same queue): seconds to the run's next ledger event, the kill landing while no activity is in flight (a
   model call in its rate-limit retry back-off), then with a model call and with a tool call in flight (each
   taking 3 s), whose retries wait for the activities' heartbeat timeout (6 s from the last beat) and the
   retry policy's first interval (1 s); where those seconds go, from the server's times for the activity.
5. history events per tool call: all the events of the step lane's histories (continue-as-new runs included)
   divided by its tool calls.
6. tuning: the dev server's SQLite pragmas (./temporal-dev's journal_mode=wal, synchronous=normal) against
   SQLite's defaults, as the wall time of a fan-out of probe workflows on a server of each; its history shard's
   task reads (reposwarm/devserver.py TRANSFER_READS_PER_S against Temporal's 20 a second), as raw round trips
   on the workflow's queue and on another; and the worker's
   sticky-queue timeout (1 s in worker.py) against the SDK's default 10 s, as the time a workflow whose worker
   was SIGKILLed takes to go on after a signal; what the heartbeats cost (RecordActivityTaskHeartbeat RPCs at
   the dev server, from its metrics, for 32 lanes in 10 s model calls); and that a CPU-heavy activity still
   beats (plan_round building the symbol index of the big repository on a fresh worker: the longest gap
   between the beats the server saw, and whether its first attempt survived).

The dev server of sections 1-5 runs on a SQLite file with ./temporal-dev's pragmas and task reads, as users run it.

With --quick (and when CI=true) a smaller repository (400K lines) and fewer lanes, in about three minutes.
--sections runs some parts only; with --merge their figures replace those in the existing --out file.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import logging
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from temporalio.api.enums.v1 import EventType, PendingActivityState  # noqa: E402
from temporalio.client import Client  # noqa: E402
from temporalio.contrib.pydantic import pydantic_data_converter  # noqa: E402
from temporalio.service import RPCError  # noqa: E402
from temporalio.testing import WorkflowEnvironment  # noqa: E402
from temporalio.worker import Worker  # noqa: E402

from activities.failure_ledger import FailureLedgerInterceptor  # noqa: E402
from activities.heartbeat import EVERY_S, HeartbeatInterceptor  # noqa: E402
from bench.cpu_probe import split as cpu_split  # noqa: E402
from bench.gen_monorepo import generate  # noqa: E402
from bench.step_cpu import ProbedWorker, per_step, server_requests  # noqa: E402
from bench.swarm_probe import ProbeAfterSignal, ProbeRoundTrips, probe_noop  # noqa: E402
from reposwarm import devserver  # noqa: E402
from reposwarm.cli.runs import build_request, start  # noqa: E402
from reposwarm.cli.worker import DEFAULT_CONCURRENCY, HEARTBEAT_THROTTLE, make_worker  # noqa: E402
from reposwarm.contracts import LaneStatus, Phase  # noqa: E402
from tests.fake_models import FakeModelServer  # noqa: E402
from tests.faults_helpers import free_port  # noqa: E402
from tests.helpers import (  # noqa: E402
    WorkerProcess,
    finish,
    lane_starts,
    lane_workflow,
    make_repo,
    start_dev_server,
    start_run,
    temporal_binary,
    turn,
    wait_for_phase,
    write_yaml,
)
from workflows import options  # noqa: E402
from workflows.swarm import SwarmWorkflow  # noqa: E402

# The dev server as reposwarm/devserver.py runs it (tests.helpers.start_dev_server has its SQLite pragmas and memo
# limit): its history shard's task reads as often as the product's server makes them.
TRANSFER_READS = ["--dynamic-config-value", f"history.transferProcessorMaxPollRPS={devserver.TRANSFER_READS_PER_S}"]
TARGETS = {"lane_setup_speedup": 10.0, "lane_setup_sparse_s": 1.0, "step_overhead_ratio": 2.0,
           "parallel_efficiency_8": 0.9, "parallel_efficiency_32": 0.9, "parallel_efficiency_64": 0.8,  # throughput
           "recovery_in_model_call_s": 10.0, "recovery_in_tool_call_s": 10.0,
           "cpu_ms_per_step": 15.0, "host_step_overhead_ratio": 2.0}
USAGE = {"input_tokens": 100, "output_tokens": 10}  # fixed usage: token budgets never end a bench lane
FAKE_KEY = "sk-bench-fake-key-0123456789abcdef"
# The starter's environment knobs would change the runs' configuration: the bench sets its own.
KNOBS = ("MAX_PARALLEL_HELPERS", "MAX_HELPER_LOOPS", "MAX_CONSECUTIVE_TEST_FAILS", "SWARM_BRANCH", "BASE_BRANCH",
         "TEST_PROFILE", "VALIDATION_TIMEOUT_S", "REPOSWARM_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY",
         "REPOSWARM_WORKER_CONCURRENCY", "REPOSWARM_HOST_ID")

ET = EventType


class FailureLog(logging.Handler):
    """Activity failures the in-process worker logs (a retried attempt leaves no event in history)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.seen: list[tuple[str, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        activity_type = getattr(record, "temporal_activity", {}).get("activity_type", "") or next(
            (n for n in ("create_lane_worktree", "model_turn", "run_tool", "describe_lane", "merge_lane")
             if n in record.getMessage()), "")
        if record.exc_info and record.exc_info[1] is not None:
            text = str(record.exc_info[1]).strip().splitlines()
            detail = next((line.strip() for line in reversed(text) if line.strip().startswith(("stderr:", "fatal"))),
                          text[-1] if text else "")
            self.seen.append((activity_type, detail[:200]))

    def take(self, activity_type: str) -> Counter[str]:
        mine = Counter(d for a, d in self.seen if a == activity_type)
        self.seen = [(a, d) for a, d in self.seen if a != activity_type]
        return mine


FAILURES = FailureLog()


def log(msg: str) -> None:
    print(f"[bench_swarm {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else 0.0


def _mean_max(values: list[float]) -> dict[str, float | None]:
    return {"mean": _r(_mean(values)), "max": _r(max(values)) if values else None}


def worktree_spans(acts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A lane's worktree as its history times it: its create_lane_worktree activity, or where the first turn's
    activity made it (patch worktree-in-turn), that first model_turn (the worktree, then a model call, then the
    turn's quick calls)."""
    made = [s for s in acts if s["name"] == "create_lane_worktree"]
    return made or [s for s in acts if s["name"] == "model_turn"][:1]


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


# --- histories -----------------------------------------------------------------------------------------------


def _ts(event: Any) -> float:
    return event.event_time.ToMicroseconds() / 1e6


async def histories(client: Client, workflow_id: str) -> list[Any]:
    """Every run of a workflow, oldest first (walking continue-as-new back from the latest run)."""
    out, run_id = [], None
    while True:
        history = await client.get_workflow_handle(workflow_id, run_id=run_id).fetch_history()
        out.append(history)
        run_id = history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id
        if not run_id:
            return list(reversed(out))


def activity_spans(runs: list[Any]) -> list[dict[str, Any]]:
    """Each activity of the runs: name, scheduled/started/closed times, attempt, outcome."""
    spans: list[dict[str, Any]] = []
    for history in runs:
        by_id: dict[int, dict[str, Any]] = {}
        for e in history.events:
            t = e.event_type
            if t == ET.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                by_id[e.event_id] = {"name": e.activity_task_scheduled_event_attributes.activity_type.name,
                                     "scheduled": _ts(e), "started": None, "closed": None, "outcome": None}
                spans.append(by_id[e.event_id])
            elif t == ET.EVENT_TYPE_ACTIVITY_TASK_STARTED:
                a = e.activity_task_started_event_attributes
                by_id[a.scheduled_event_id].update(started=_ts(e), attempt=a.attempt)
            elif t == ET.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
                by_id[e.activity_task_completed_event_attributes.scheduled_event_id].update(
                    closed=_ts(e), outcome="completed")
            elif t == ET.EVENT_TYPE_ACTIVITY_TASK_FAILED:
                by_id[e.activity_task_failed_event_attributes.scheduled_event_id].update(
                    closed=_ts(e), outcome="failed")
            elif t == ET.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
                by_id[e.activity_task_timed_out_event_attributes.scheduled_event_id].update(
                    closed=_ts(e), outcome="timed_out")
    return spans


def workflow_span(runs: list[Any]) -> tuple[float, float]:
    """Start of the first run, close of the last."""
    return _ts(runs[0].events[0]), _ts(runs[-1].events[-1])


def max_overlap(intervals: list[tuple[float, float]]) -> int:
    points = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = cur = 0
    for _, d in points:
        cur += d
        best = max(best, cur)
    return best


def read_ledger(home: Path, run_id: str) -> list[dict[str, Any]]:
    path = home / "runs" / run_id / "ledger.jsonl"
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line being written
    return out


def starter_report(home: Path, run_id: str, address: str) -> dict[str, Any]:
    """`starter.py report RUN --json`, as a user runs it on the worker's host (against the bench's server)."""
    env = {**os.environ, "REPOSWARM_HOME": str(home), "TEMPORAL_ADDRESS": address}
    proc = subprocess.run([sys.executable, str(ROOT / "starter.py"), "report", run_id, "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise RuntimeError(f"starter.py report failed: {proc.stderr.strip()}")
    return json.loads(proc.stdout)


# --- runs ----------------------------------------------------------------------------------------------------


async def start_on(client: Client, queue: str, repo: Path, lanes: Path, script: Path, plan: Path, model: str | None,
                   task: str) -> str:
    """build_request + start (reposwarm.cli.runs; through tests.helpers.start_run) on the given task queue."""
    previous = os.environ.get("REPOSWARM_TASK_QUEUE")
    os.environ["REPOSWARM_TASK_QUEUE"] = queue
    try:
        if model is None:
            return await start_run(client, repo, lanes, script, plan=plan, task=task)
        req = build_request(argparse.Namespace(repo=str(repo), task=task, lanes=str(lanes), plan=str(plan),
                                               model=model))
        await start(client, req)
        return req.run_id
    finally:
        if previous is None:
            os.environ.pop("REPOSWARM_TASK_QUEUE", None)
        else:
            os.environ["REPOSWARM_TASK_QUEUE"] = previous


def write_run_files(tmp: Path, name: str, lanes: dict[str, dict[str, Any]], swarm: dict[str, Any],
                    replies: dict[str, list[dict[str, Any]]], extra: dict[str, Any] | None = None
                    ) -> tuple[Path, Path, Path]:
    """The lanes file, the replay script and the plan of one bench run (in start_on's order)."""
    folder = tmp / name
    folder.mkdir(parents=True, exist_ok=True)
    lanes_file = write_yaml(folder / "lanes.yaml", {"swarm": {**swarm, "lanes": lanes}, **(extra or {})})
    plan = write_yaml(folder / "plan.yaml", {"interface_contract": "-", "summary": name, "lanes": [
        {"lane": lane, "goal": f"Bench lane {lane}: look around, then finish."} for lane in lanes]})
    script = write_yaml(folder / "replay.yaml", {"version": 1, "lanes": {lane: {1: r} for lane, r in replies.items()}})
    return lanes_file, script, plan


async def finish_run(client: Client, run_id: str) -> None:
    try:
        await client.get_workflow_handle(run_id).terminate("bench: measured")
    except Exception:  # noqa: BLE001 - already closed
        pass


def cleanup_run(repo: Path, home: Path, run_id: str) -> None:
    """Remove a run's worktrees and its branches from the repository (the bench's runs are never delivered)."""
    shutil.rmtree(home / "runs" / run_id / "lanes", ignore_errors=True)
    purge_refs(repo, run_id)


def purge_refs(repo: Path, run_id: str = "") -> None:
    subprocess.run(["git", "-C", str(repo), "worktree", "prune"], check=True)
    refs = subprocess.run(["git", "-C", str(repo), "for-each-ref", "--format=%(refname)", "refs/heads/swarm/",
                           "refs/heads/swarm-kept/"], capture_output=True, text=True, check=True).stdout.split()
    doomed = [r for r in refs if run_id in r]
    if doomed:
        subprocess.run(["git", "-C", str(repo), "update-ref", "--stdin"], check=True, text=True,
                       input="".join(f"delete {r}\n" for r in doomed))


async def lane_id(client: Client, run_id: str, lane: str) -> str:
    return await lane_workflow(client, run_id, lane)


async def lane_ids(client: Client, run_id: str, lanes: list[str]) -> list[str]:
    return [await lane_id(client, run_id, lane) for lane in lanes]


# --- 1. lane set-up ------------------------------------------------------------------------------------------


def bench_repo(args: argparse.Namespace, results: dict[str, Any]) -> Path:
    lines = args.services * 25 * 200
    repo = Path(args.cache_dir) / f"mono-{lines}-s{args.seed}"  # the same folder bench_index.py --lines uses
    if not (repo / ".git").exists():
        if repo.exists():
            shutil.rmtree(repo)
        started = time.perf_counter()
        generate(repo, args.services, 25, 200, args.seed)
        results["generate_s"] = round(time.perf_counter() - started, 1)
        log(f"generated {repo} in {results['generate_s']} s")
    else:
        log(f"reusing {repo}")
    purge_refs(repo)  # branches left by an interrupted earlier bench
    files = subprocess.run(["git", "-C", str(repo), "ls-files"], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    counted = subprocess.run(["git", "-C", str(repo), "grep", "-c", "", "HEAD"], capture_output=True, text=True,
                             check=True).stdout.splitlines()
    results["repo_files"] = len(files)
    results["repo_lines"] = sum(int(line.rsplit(":", 1)[1]) for line in counted)
    results["repo_path"] = str(repo)
    return repo


async def setup_run(client: Client, queue: str, home: Path, repo: Path, tmp: Path, services: list[str], n: int,
                    sparse: bool) -> dict[str, Any]:
    mode = "sparse" if sparse else "full"
    lanes = {}
    for i in range(n):
        own = [f"services/{services[2 * i]}/"] + ([f"services/{services[2 * i + 1]}/"] if i % 2 else [])
        lanes[f"s{i:02d}"] = {"allowed_paths": own, "max_turns": 5}
    replies = {lane: [{**finish(f"{lane}_f"), "usage": USAGE}] for lane in lanes}
    files = write_run_files(tmp, f"setup-{mode}-{n}", lanes, {"max_parallel": n, "sparse": sparse}, replies)
    started = time.perf_counter()
    run_id = await start_on(client, queue, repo, *files, None, f"bench lane set-up, {mode}, {n} lanes")
    status = await wait_for_phase(client, run_id, Phase.review, timeout=900)
    wall = time.perf_counter() - started
    bad = [lane.lane for lane in status.review.lanes if lane.status != LaneStatus.done] if status.review else []
    spans = []
    for wf in await lane_ids(client, run_id, list(lanes)):
        spans += worktree_spans(activity_spans(await histories(client, wf)))
    done = [s for s in spans if s["outcome"] == "completed"]
    # scheduled -> completed: what the lane waits for its worktree (a free activity slot, failed attempts and
    # their retry back-off included); started -> completed: the last attempt's own work. Failed attempts that
    # Temporal retried leave no event of their own: the last attempt's number says how many there were.
    latency = [s["closed"] - s["scheduled"] for s in done]
    execs = [s["closed"] - s["started"] for s in done]
    waits = [s["started"] - s["scheduled"] for s in done]
    retries = sum(s.get("attempt", 1) - 1 for s in spans)
    phase = max(s["closed"] for s in done) - min(s["scheduled"] for s in done)
    worktree = home / "runs" / run_id / "lanes" / "s00"
    on_disk = sum(1 for p in worktree.rglob("*") if p.is_file() and ".git" not in p.parts) if worktree.exists() else 0
    await finish_run(client, run_id)
    cleanup_run(repo, home, run_id)
    out = {"lanes": n, "mode": mode, "run_id": run_id, "per_lane_mean_s": _r(_mean(latency)),
           "per_lane_median_s": _r(statistics.median(latency)), "per_lane_max_s": _r(max(latency)),
           "exec_mean_s": _r(_mean(execs)), "exec_median_s": _r(statistics.median(execs)),
           "schedule_to_start_mean_s": _r(_mean(waits)), "setup_phase_wall_s": _r(phase),
           "setup_phase_per_lane_s": _r(phase / n), "retried_attempts": retries,
           "lanes_retried": sum(1 for s in spans if s.get("attempt", 1) > 1),
           "files_on_disk_lane0": on_disk, "run_wall_s": _r(wall, 1), "lanes_not_done": bad,
           "failure_messages": dict(FAILURES.take("create_lane_worktree"))}
    log(f"lane set-up {mode:6} x{n:<3}: {out['per_lane_mean_s']} s per lane (scheduled->completed; last attempt "
        f"{out['exec_mean_s']} s), phase {out['setup_phase_wall_s']} s, {retries} retried attempts, {on_disk} files "
        f"in a worktree, run {out['run_wall_s']} s")
    return out


async def bench_setup(client: Client, queue: str, home: Path, repo: Path, tmp: Path, args: argparse.Namespace,
                      results: dict[str, Any]) -> None:
    services = subprocess.run(["git", "-C", str(repo), "ls-tree", "--name-only", "HEAD", "services/"],
                              capture_output=True, text=True, check=True).stdout.split()
    services = [s.removeprefix("services/") for s in services]
    detail: dict[str, Any] = {}
    notes = []
    for n in args.setup_lanes:
        if 2 * n > len(services):
            notes.append(f"{n} lanes need {2 * n} services; the repository has {len(services)}: skipped")
            continue
        row: dict[str, Any] = {"sparse": await setup_run(client, queue, home, repo, tmp, services, n, True)}
        previous_full = [d["full"] for d in detail.values() if "full" in d]
        predicted = (previous_full[-1]["setup_phase_wall_s"] * n / previous_full[-1]["lanes"]) if previous_full else 0
        if predicted > args.full_budget_s:
            notes.append(f"full set-up not measured for {n} lanes: predicted {predicted:.0f} s "
                         f"(> --full-budget-s {args.full_budget_s:.0f}) from the {previous_full[-1]['lanes']}-lane run")
            log(notes[-1])
        else:
            row["full"] = await setup_run(client, queue, home, repo, tmp, services, n, False)
            row["speedup"] = _r(row["full"]["per_lane_mean_s"] / row["sparse"]["per_lane_mean_s"], 1)
            row["speedup_phase"] = _r(row["full"]["setup_phase_wall_s"] / row["sparse"]["setup_phase_wall_s"], 1)
        detail[str(n)] = row
    both = [n for n, row in detail.items() if "full" in row]
    # the headline: 4 lanes at once (the product's default max_parallel), else the fewest measured in both modes;
    # more lanes add queueing for the 16 activity slots to the per-lane figure (see lane_setup[n])
    head = "4" if "4" in both else (min(both, key=int) if both else None)
    results["lane_setup"] = detail
    results["lane_setup_notes"] = notes
    results["lane_setup_headline_lanes"] = int(head) if head else None
    if head:
        results["lane_setup_sparse_s"] = detail[head]["sparse"]["per_lane_mean_s"]
        results["lane_setup_full_s"] = detail[head]["full"]["per_lane_mean_s"]
        results["lane_setup_speedup"] = detail[head]["speedup"]
    results["lane_setup_speedup_by_lanes"] = {n: detail[n]["speedup"] for n in both}
    results["lane_setup_phase_speedup_by_lanes"] = {n: detail[n]["speedup_phase"] for n in both}


# --- 2 and 5. step overhead, history events ------------------------------------------------------------------


PRODUCT_WORKER: dict[str, Any] = dict(  # the options worker.py gives the product's workers
    interceptors=[HeartbeatInterceptor(), FailureLedgerInterceptor()],
    max_heartbeat_throttle_interval=HEARTBEAT_THROTTLE, sticky_queue_schedule_to_start_timeout=timedelta(seconds=1))


async def raw_round_trips(client: Client, n: int, cross_queue: bool = False) -> dict[str, Any]:
    """N no-op activities in a row, on a worker configured as the product's (interceptors, heartbeat throttle,
    sticky timeout); with cross_queue, on a second worker's task queue (as a lane's host queue)."""
    queue = f"bench-probe-{uuid.uuid4().hex[:8]}"
    other = f"{queue}-other" if cross_queue else ""
    async with contextlib.AsyncExitStack() as stack:
        await stack.enter_async_context(Worker(client, task_queue=queue, workflows=[ProbeRoundTrips],
                                               activities=[probe_noop], **PRODUCT_WORKER))
        if cross_queue:
            await stack.enter_async_context(Worker(client, task_queue=other, activities=[probe_noop]))
        wf_id = f"bench-probe-{uuid.uuid4().hex[:8]}"
        started = time.perf_counter()
        await client.execute_workflow(ProbeRoundTrips.run, args=[n, other], id=wf_id, task_queue=queue)
        wall = time.perf_counter() - started
    spans = activity_spans(await histories(client, wf_id))
    span = max(s["closed"] for s in spans) - min(s["scheduled"] for s in spans)
    return {"n": n, "per_round_trip_s": span / n, "client_wall_per_round_trip_s": wall / n,
            "exec_mean_s": _mean([s["closed"] - s["started"] for s in spans]),
            "schedule_to_start_mean_s": _mean([s["started"] - s["scheduled"] for s in spans])}


def workflow_task_spans(runs: list[Any]) -> list[dict[str, Any]]:
    """Each workflow task: scheduled -> started -> completed, and whether it recorded a marker (a local activity
    ran in it)."""
    spans: list[dict[str, Any]] = []
    for history in runs:
        scheduled = 0.0
        for e in history.events:
            if e.event_type == ET.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
                scheduled = _ts(e)
            elif e.event_type == ET.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                spans.append({"scheduled": scheduled, "started": _ts(e), "closed": None, "marker": False})
            elif e.event_type == ET.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and spans:
                spans[-1]["closed"] = _ts(e)
            elif e.event_type == ET.EVENT_TYPE_MARKER_RECORDED and spans:
                spans[-1]["marker"] = True
    return [s for s in spans if s["closed"] is not None]


async def step_lane(client: Client, queue: str, repo: Path, tmp: Path, steps: int, label: str) -> dict[str, Any]:
    """A lane of `steps` turns of one list_dir call each, then finish. A step is a turn: the lane's time from its
    first model turn's scheduling to its last one's close, over its turns (the turn, its tool call and the
    orchestration between them, whether the tool ran in the turn, as an activity, or as a local activity; and
    where the turn went on to the next in its activity, patch turns-in-activity, that activity's share)."""
    lanes = {"step": {"allowed_paths": ["l00/"], "max_turns": steps + 5, "token_budget": 50_000_000}}
    replies = {"step": [{**turn((f"c{i}", "list_dir", {"path": "l00"})), "usage": USAGE} for i in range(steps)]
               + [{**finish("c_end"), "usage": USAGE}]}
    files = write_run_files(tmp, f"step-{label}-{steps}", lanes, {"max_parallel": 1}, replies)
    run_id = await start_on(client, queue, repo, *files, None, f"bench step overhead ({label})")
    status = await wait_for_phase(client, run_id, Phase.review, timeout=300)
    lane = status.review.lanes[0]
    runs = await histories(client, await lane_id(client, run_id, "step"))
    spans = activity_spans(runs)
    tools = [s for s in spans if s["name"] == "run_tool"]
    models = sorted((s for s in spans if s["name"] == "model_turn"), key=lambda s: s["scheduled"])
    turns = lane.turns  # (the model turns' activities: fewer, where a turn went on to the next in its activity)
    tasks = workflow_task_spans(runs)
    local = [t for t in tasks if t["marker"]]
    events = sum(len(h.events) for h in runs)
    types = Counter(ET.Name(e.event_type).removeprefix("EVENT_TYPE_") for h in runs for e in h.events)
    await finish_run(client, run_id)
    return {
        "run_id": run_id, "steps": turns, "lane_status": lane.status.value, "lane_tool_calls": lane.tool_calls,
        "per_step_s": (models[-1]["closed"] - models[0]["scheduled"]) / turns,
        "activities_per_step": (len(models) + len(tools)) / turns, "model_turn_activities": len(models),
        "tool_calls_as_local_activities": len(local),
        # a step's share of the model turns' activities' run time
        "model_turn_exec_mean_s": sum(s["closed"] - s["started"] for s in models) / turns,
        "run_tool_exec_mean_s": _mean([s["closed"] - s["started"] for s in tools]) if tools else None,
        # a workflow task that ran a list_dir local activity, start to completion (the tool's time is in it)
        "local_tool_task_mean_s": _mean([t["closed"] - t["started"] for t in local]) if local else None,
        "schedule_to_start_mean_s": _mean([s["started"] - s["scheduled"] for s in models + tools]),
        "history_runs": len(runs), "history_events": events, "event_types": dict(types.most_common()),
    }


async def bench_steps(client: Client, queue: str, repo: Path, tmp: Path, args: argparse.Namespace,
                      results: dict[str, Any]) -> None:
    # raw, steps, raw, with the cross-queue probe around them too: the machine's drift shows in before/after.
    # The headline step is the default on this machine: a loopback dev server, so REPOSWARM_AFFINITY=auto puts
    # lane worktrees on the shared queue; the host-affinity step (several machines) is measured beside it.
    raw_before = await raw_round_trips(client, args.raw_n)
    cross_before = await raw_round_trips(client, args.raw_n, cross_queue=True)
    step = await step_lane(client, queue, repo, tmp, args.steps, "shared")
    # The step and the raw round trip drift with the machine: measured again, interleaved (raw, step, raw, ...),
    # each step against the mean of the raw trips either side of it; the headline is the median of those ratios.
    raws, steps_s, step_runs = [raw_before["per_round_trip_s"]], [step["per_step_s"]], [step["run_id"]]
    for _ in range(args.step_repeats - 1):
        raws.append((await raw_round_trips(client, args.raw_n))["per_round_trip_s"])
        again = await step_lane(client, queue, repo, tmp, args.steps, "shared")
        steps_s.append(again["per_step_s"])
        step_runs.append(again["run_id"])
    previous = os.environ.get("REPOSWARM_AFFINITY")
    os.environ["REPOSWARM_AFFINITY"] = "host"
    try:
        async with make_worker(client, f"{queue}-hostaffinity"):
            host = await step_lane(client, f"{queue}-hostaffinity", repo, tmp, args.steps, "host")
    finally:
        if previous is None:
            os.environ.pop("REPOSWARM_AFFINITY", None)
        else:
            os.environ["REPOSWARM_AFFINITY"] = previous
    cross_after = await raw_round_trips(client, args.raw_n, cross_queue=True)
    raw_after = await raw_round_trips(client, args.raw_n)
    raw = (raw_before["per_round_trip_s"] + raw_after["per_round_trip_s"]) / 2
    cross = (cross_before["per_round_trip_s"] + cross_after["per_round_trip_s"]) / 2
    ms = lambda x: None if x is None else _r(x * 1000, 1)  # noqa: E731

    def detail(st: dict[str, Any]) -> dict[str, Any]:
        return {
            "per_step_ms": ms(st["per_step_s"]), "ratio": _r(st["per_step_s"] / raw, 2),
            "ratio_vs_cross_queue": _r(st["per_step_s"] / cross, 2),
            "steps": st["steps"], "lane_status": st["lane_status"],
            "activities_per_step": _r(st["activities_per_step"], 2),
            "tool_calls_as_local_activities": st["tool_calls_as_local_activities"],
            "model_turn_exec_ms": ms(st["model_turn_exec_mean_s"]), "run_tool_exec_ms": ms(st["run_tool_exec_mean_s"]),
            "local_tool_workflow_task_ms": ms(st["local_tool_task_mean_s"]),
            "orchestration_ms_per_step": ms(st["per_step_s"] - st["model_turn_exec_mean_s"]
                                            - (st["run_tool_exec_mean_s"] or 0)),
            "schedule_to_start_ms": ms(st["schedule_to_start_mean_s"]), "run_id": st["run_id"],
        }

    raws.append(raw_after["per_round_trip_s"])
    ratios = [st / ((raws[i] + raws[i + 1]) / 2) for i, st in enumerate(steps_s)]
    results["step_overhead_ratio"] = _r(statistics.median(ratios), 2)
    results["step"] = {
        **detail(step),
        "ratio_median": _r(statistics.median(ratios), 2), "ratio_spread": [_r(min(ratios), 2), _r(max(ratios), 2)],
        "ratios": [_r(r, 3) for r in ratios], "per_step_ms_all": [_r(x * 1000, 2) for x in steps_s],
        "step_runs": step_runs,
        "raw_round_trip_ms_all": [ms(x) for x in raws], "repeats": args.step_repeats,
        "probe_worker": "the product's worker options (interceptors, heartbeat throttle, sticky timeout)",
        "affinity": "shared (REPOSWARM_AFFINITY=auto on a loopback dev server)",
        "raw_round_trip_ms": ms(raw),
        "raw_round_trip_ms_before_after": [ms(raw_before["per_round_trip_s"]), ms(raw_after["per_round_trip_s"])],
        "raw_schedule_to_start_ms": ms(_mean([raw_before["schedule_to_start_mean_s"],
                                              raw_after["schedule_to_start_mean_s"]])),
        "raw_activity_exec_ms": _r(_mean([raw_before["exec_mean_s"], raw_after["exec_mean_s"]]) * 1000, 2),
        "raw_cross_queue_round_trip_ms": ms(cross),
        "raw_cross_queue_ms_before_after": [ms(cross_before["per_round_trip_s"]), ms(cross_after["per_round_trip_s"])],
        "raw_cross_queue_schedule_to_start_ms": ms(_mean([cross_before["schedule_to_start_mean_s"],
                                                          cross_after["schedule_to_start_mean_s"]])),
        "raw_n": args.raw_n,
        "host_affinity": detail(host),
    }
    results["history_events_per_tool_call"] = _r(step["history_events"] / step["steps"], 2)
    results["history"] = {"lane_events": step["history_events"], "runs": step["history_runs"],
                          "tool_calls": step["steps"], "lane_tool_calls_incl_finish": step["lane_tool_calls"],
                          "events_per_tool_call_incl_finish": _r(step["history_events"] / step["lane_tool_calls"], 2),
                          "event_types": step["event_types"],
                          "host_affinity_events_per_tool_call": _r(host["history_events"] / host["steps"], 2)}
    s = results["step"]
    log(f"step: {s['per_step_ms']} ms per step; raw round trip {s['raw_round_trip_ms']} ms (same queue), "
        f"{s['raw_cross_queue_round_trip_ms']} ms (another queue) -> ratio {results['step_overhead_ratio']} "
        f"(median of {s['repeats']}, spread {s['ratio_spread'][0]}-{s['ratio_spread'][1]}); "
        f"with host affinity {s['host_affinity']['per_step_ms']} ms ({s['host_affinity']['ratio']}x); "
        f"{results['history_events_per_tool_call']} events per tool call")


# --- 6. tuning: the dev server's SQLite pragmas, the worker's sticky-queue timeout --------------------------------

PRAGMAS = ["--sqlite-pragma", "journal_mode=wal", "--sqlite-pragma", "synchronous=normal"]  # as ./temporal-dev


async def fanout_on_sqlite(db: Path, pragmas: bool, workflows: int, activities: int) -> dict[str, Any]:
    """A dev server on a SQLite file (as ./temporal-dev runs it), with or without its pragmas: `workflows` probe
    workflows of `activities` activities each, all at once (a fan-out of lanes), then sequential round trips."""
    env = await WorkflowEnvironment.start_local(
        data_converter=pydantic_data_converter, dev_server_existing_path=temporal_binary(),
        dev_server_extra_args=["--db-filename", str(db), *(PRAGMAS if pragmas else [])],
        dev_server_startup_timeout=timedelta(seconds=60))
    try:
        client = env.client
        queue = f"bench-fanout-{uuid.uuid4().hex[:8]}"
        async with Worker(client, task_queue=queue, workflows=[ProbeRoundTrips], activities=[probe_noop],
                          max_concurrent_activities=64):
            started = time.perf_counter()
            handles = await asyncio.gather(*(
                client.start_workflow(ProbeRoundTrips.run, args=[activities, ""], id=f"fan-{i}-{uuid.uuid4().hex[:6]}",
                                      task_queue=queue) for i in range(workflows)))
            await asyncio.gather(*(h.result() for h in handles))
            wall = time.perf_counter() - started
        raw = await raw_round_trips(client, 30)
    finally:
        await env.shutdown()
    return {"fanout_wall_s": _r(wall, 2), "raw_round_trip_ms": _r(raw["per_round_trip_s"] * 1000, 1)}


async def transfer_reads(n: int) -> dict[str, Any]:
    """Raw activity round trips, on the workflow's own queue and on another, on a dev server that reads its shard's
    tasks at Temporal's default rate (20 a second) and on one that reads them as reposwarm/devserver.py's does."""
    out: dict[str, Any] = {"reads_per_s": devserver.TRANSFER_READS_PER_S}
    for label, extra in (("temporal_default", []), ("reposwarm", TRANSFER_READS)):
        env = await start_dev_server(extra)
        try:
            same = await raw_round_trips(env.client, n)
            cross = await raw_round_trips(env.client, n, cross_queue=True)
        finally:
            await env.shutdown()
        out[label] = {"raw_round_trip_ms": _r(same["per_round_trip_s"] * 1000, 1),
                      "raw_cross_queue_round_trip_ms": _r(cross["per_round_trip_s"] * 1000, 1),
                      "cross_queue_schedule_to_start_ms": _r(cross["schedule_to_start_mean_s"] * 1000, 1)}
    return out


async def sticky_recovery(client: Client, sticky_s: float) -> float:
    """Seconds from a signal to the workflow's completion when the worker that last ran it was SIGKILLed: its
    workflow task waits on the dead worker's sticky queue for `sticky_s` before another worker may take it."""
    queue = f"bench-sticky-{uuid.uuid4().hex[:8]}"
    address = client.service_client.config.target_host
    proc = subprocess.Popen(
        [sys.executable, "-c", "import asyncio, sys; from bench.swarm_probe import serve; asyncio.run(serve(*sys.argv[1:]))",
         address, queue, str(sticky_s)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        start_new_session=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)  # type: ignore[union-attr]
        assert b"probe worker ready" in line, line
        handle = await client.start_workflow(ProbeAfterSignal.run, id=f"bench-sticky-{uuid.uuid4().hex[:8]}",
                                             task_queue=queue)
        await wait_until(lambda: _first_task_done(handle), 30, "the probe worker's first workflow task")
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    async with Worker(client, task_queue=queue, workflows=[ProbeAfterSignal], activities=[probe_noop]):
        await asyncio.sleep(0.5)  # polling
        started = time.perf_counter()
        await handle.signal(ProbeAfterSignal.proceed)
        await handle.result()
        return time.perf_counter() - started


async def _first_task_done(handle: Any) -> bool:
    history = await handle.fetch_history()
    return any(e.event_type == ET.EVENT_TYPE_WORKFLOW_TASK_COMPLETED for e in history.events)


def heartbeat_rpcs(metrics_port: int) -> float:
    """RecordActivityTaskHeartbeat requests the dev server's frontend has served so far (its Prometheus metrics)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("service_requests{") and 'operation="RecordActivityTaskHeartbeat"' in line
               and 'service_name="frontend"' in line)


class BeatWatch:
    """The beats the server saw: the pending activities of some workflows (ids not there yet, or gone, are
    skipped), polled every `every` seconds for their start and last heartbeat times, per attempt."""

    def __init__(self, client: Client, workflow_ids: list[str], every: float = 0.2) -> None:
        self.client, self.workflow_ids, self.every = client, workflow_ids, every
        self.seen: dict[tuple[str, str, int], dict[str, Any]] = {}  # (workflow, activity id, attempt)
        self._task: asyncio.Task[None] | None = None

    async def _poll(self) -> None:
        while True:
            for wf in self.workflow_ids:
                try:
                    desc = await self.client.get_workflow_handle(wf).describe()
                except RPCError:
                    continue
                for p in desc.raw_description.pending_activities:
                    if not PendingActivityState.Name(p.state).endswith("STARTED"):
                        continue
                    row = self.seen.setdefault((wf, p.activity_id, p.attempt), {
                        "type": p.activity_type.name, "started": _pb_s(p.last_started_time), "beats": set()})
                    if (beat := _pb_s(p.last_heartbeat_time)) is not None and beat >= (row["started"] or 0):
                        row["beats"].add(beat)
            await asyncio.sleep(self.every)

    def __enter__(self) -> BeatWatch:
        self._task = asyncio.create_task(self._poll())
        return self

    def __exit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()

    def attempts(self, activity_type: str | None = None) -> set[int]:
        return {a for (_, _, a), row in self.seen.items() if activity_type in (None, row["type"])}

    def max_gap(self, activity_type: str | None = None) -> float | None:
        """The longest the server went without a beat from a running attempt (from its start to its first beat,
        or between two beats; to within the polling interval)."""
        gaps = []
        for row in self.seen.values():
            if activity_type in (None, row["type"]):
                times = ([row["started"]] if row["started"] else []) + sorted(row["beats"])
                gaps += [b - a for a, b in zip(times, times[1:], strict=False)]
        return _r(max(gaps), 2) if gaps else None

    def beats(self, activity_type: str | None = None) -> int:
        return sum(len(row["beats"]) for row in self.seen.values() if activity_type in (None, row["type"]))


async def heartbeat_cost(client: Client, home: Path, repo: Path, tmp: Path, metrics_port: int, n: int,
                         turn_s: float) -> dict[str, Any]:
    """What the heartbeats cost the server: n lanes (one worker.py process, a slot each) whose model calls take
    `turn_s` each, two turns a lane; heartbeat RPCs counted at the dev server over the run, per second of
    activity in flight and per second at n lanes."""
    address = client.service_client.config.target_host
    queue = f"bench-beats-{uuid.uuid4().hex[:6]}"
    rhome = home / "beats"
    lanes = {f"lane{i:02d}": {"allowed_paths": [f"l{i:02d}/"], "max_turns": 5} for i in range(n)}
    script = {"lanes": {lane: {1: [{**turn(("b1", "list_dir", {"path": f"l{i:02d}"})), "usage": USAGE},
                                   {**finish("b2"), "usage": USAGE}]} for i, lane in enumerate(lanes)}}
    files = write_run_files(tmp, f"beats-{n}", lanes, {"max_parallel": n}, {})
    fake = FakeModelServer("openai", script, delay_s=turn_s)
    fake._httpd.handle_error = lambda *a: None  # type: ignore[method-assign]
    server_pid = dev_server_pid(address)
    with fake:
        worker = WorkerProcess(address, queue, rhome, {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": FAKE_KEY,
                                                       "REPOSWARM_WORKER_CONCURRENCY": str(max(n, DEFAULT_CONCURRENCY))})
        worker.start()
        try:
            await worker.ready()
            rpcs0, cpu0, t0 = heartbeat_rpcs(metrics_port), process_cpu_s(server_pid) if server_pid else 0.0, time.time()
            run_id = await start_on(client, queue, repo, *files, "openai:bench-fake", f"bench heartbeat cost, {n} lanes")
            sample = [f"{run_id}.{lane}{suffix}" for lane in list(lanes)[:4] for suffix in ("", ".r1")]
            with BeatWatch(client, sample, every=0.25) as watch:  # four lanes' beats, as the server saw them
                await wait_for_phase(client, run_id, Phase.review, timeout=600)
            rpcs1, cpu1, t1 = heartbeat_rpcs(metrics_port), process_cpu_s(server_pid) if server_pid else 0.0, time.time()
            spans = []
            for wf in await lane_ids(client, run_id, list(lanes)):
                spans += [sp for sp in activity_spans(await histories(client, wf)) if sp["started"] and sp["closed"]]
            await finish_run(client, run_id)
        finally:
            worker.stop()
    busy_s = sum(sp["closed"] - sp["started"] for sp in spans)  # seconds of activity in flight (heartbeating)
    beats = rpcs1 - rpcs0
    model = [sp for sp in spans if sp["name"] == "model_turn"]
    return {"lanes": n, "model_call_s": turn_s, "heartbeat_rpcs": int(beats), "window_s": _r(t1 - t0, 1),
            "activity_s_in_flight": _r(busy_s, 1), "rpcs_per_activity_s": _r(beats / busy_s if busy_s else 0, 3),
            f"rpcs_per_s_at_{n}_lanes": _r(n * beats / busy_s if busy_s else 0, 1),
            "rpcs_per_s_window": _r(beats / (t1 - t0), 1),
            "max_concurrent_model_calls": max_overlap([(sp["started"], sp["closed"]) for sp in model]),
            "dev_server_cpu_cores": _r((cpu1 - cpu0) / (t1 - t0), 2) if server_pid else None,
            "sampled_lanes_max_beat_gap_s": watch.max_gap(), "sampled_lanes_attempts": sorted(watch.attempts())}


async def beats_while_indexing(client: Client, home: Path, repo: Path, tmp: Path) -> dict[str, Any]:
    """A CPU-heavy activity still beats: a run without a plan file on the big repository, so the planner's
    activity (plan_round) first builds the symbol index of the whole repository (tree-sitter, parsed in a
    process pool; stored and ranked in a thread of the worker) on a worker.py process with a fresh
    REPOSWARM_HOME. The server's view of plan_round is polled every 0.2 s: the longest gap between the beats it
    saw, and whether the attempt survived (attempt 1)."""
    address = client.service_client.config.target_host
    queue = f"bench-index-{uuid.uuid4().hex[:6]}"
    rhome = home / "indexing"
    plan = {"interface_contract": "-", "summary": "index", "lanes": [{"lane": "a", "goal": "Bench lane a: finish."}]}
    fake = FakeModelServer("openai", {"planner": {1: [{**turn(("p1", "submit_plan", plan)), "usage": USAGE}]},
                                      "lanes": {"a": {1: [{**finish("a1"), "usage": USAGE}]}}})
    fake._httpd.handle_error = lambda *a: None  # type: ignore[method-assign]
    lanes = write_yaml(tmp / "index-lanes.yaml", {"swarm": {"max_parallel": 1, "lanes": {
        "a": {"allowed_paths": ["services/"], "max_turns": 3}}}})
    with fake:
        worker = WorkerProcess(address, queue, rhome, {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": FAKE_KEY})
        worker.start()
        try:
            await worker.ready()
            assert worker.proc is not None
            cpu0 = process_cpu_s(worker.proc.pid)
            req = build_request(argparse.Namespace(repo=str(repo), task="bench: plan on a fresh symbol index",
                                                   lanes=str(lanes), plan=None, model="openai:bench-fake"))
            previous = os.environ.get("REPOSWARM_TASK_QUEUE")
            os.environ["REPOSWARM_TASK_QUEUE"] = queue
            try:
                await start(client, req)
            finally:
                if previous is None:
                    os.environ.pop("REPOSWARM_TASK_QUEUE", None)
                else:
                    os.environ["REPOSWARM_TASK_QUEUE"] = previous
            with BeatWatch(client, [req.run_id]) as watch:
                await wait_until(lambda: "plan_round" in {row["type"] for row in watch.seen.values()}, 300,
                                 "plan_round to start", every=0.1)
                await wait_for_phase(client, req.run_id, Phase.running_lanes, Phase.validating, Phase.review, timeout=900)
            cpu1 = process_cpu_s(worker.proc.pid)
            await wait_for_phase(client, req.run_id, Phase.review, timeout=300)
            span = next(sp for sp in activity_spans(await histories(client, req.run_id)) if sp["name"] == "plan_round")
            await finish_run(client, req.run_id)
        finally:
            worker.stop()
    took = span["closed"] - span["started"]
    return {"plan_round_s": _r(took, 1), "attempt": span.get("attempt"),
            "attempts_seen": sorted(watch.attempts("plan_round")), "beats_seen": watch.beats("plan_round"),
            "max_beat_gap_s": watch.max_gap("plan_round"),
            "worker_cpu_cores": _r((cpu1 - cpu0) / took, 2) if took else None}


async def bench_tuning(client: Client, home: Path, big: Path, small: Path, tmp: Path, args: argparse.Namespace,
                       results: dict[str, Any]) -> None:
    workflows = 30 if args.quick else 100
    sqlite = {}
    for label, pragmas in (("wal_normal", True), ("sqlite_defaults", False)):
        sqlite[label] = await fanout_on_sqlite(tmp / f"tuning-{label}.db", pragmas, workflows, 5)
        log(f"tuning: {workflows} workflows x 5 activities on SQLite ({label}): {sqlite[label]['fanout_wall_s']} s, "
            f"raw round trip {sqlite[label]['raw_round_trip_ms']} ms")
    sqlite["workflows"], sqlite["activities_each"] = workflows, 5
    sqlite["wal_speedup"] = _r(sqlite["sqlite_defaults"]["fanout_wall_s"] / sqlite["wal_normal"]["fanout_wall_s"], 2)
    transfer = await transfer_reads(args.raw_n)
    log(f"tuning: the server's task reads at Temporal's default rate / at {transfer['reads_per_s']} a second: raw round "
        f"trip {transfer['temporal_default']['raw_round_trip_ms']} / {transfer['reposwarm']['raw_round_trip_ms']} ms, "
        f"on another queue {transfer['temporal_default']['raw_cross_queue_round_trip_ms']} / "
        f"{transfer['reposwarm']['raw_cross_queue_round_trip_ms']} ms")
    sticky: dict[str, Any] = {}
    for seconds in (1.0, 10.0):  # ours (worker.make_worker) and the SDK's default
        trials = [_r(await sticky_recovery(client, seconds), 2) for _ in range(2)]
        sticky[f"{seconds:g}s"] = {"signal_to_done_s": trials, "mean_s": _r(_mean(trials), 2)}
        log(f"tuning: sticky-queue timeout {seconds:g} s: a killed worker's workflow resumes in {trials} s")
    n = 32
    beats = await heartbeat_cost(client, home, small, tmp, args.metrics_port, n, 10.0)
    log(f"tuning: heartbeats at {n} lanes in 10 s model calls: {beats['rpcs_per_activity_s']} RPCs per second of "
        f"activity in flight = {beats[f'rpcs_per_s_at_{n}_lanes']} RPCs/s at {n} lanes ({beats['heartbeat_rpcs']} "
        f"in {beats['window_s']} s; dev server {beats['dev_server_cpu_cores']} cores)")
    indexing = await beats_while_indexing(client, home, big, tmp)
    log(f"tuning: plan_round indexing {results.get('repo_lines', 0):,} lines: {indexing['plan_round_s']} s, attempt "
        f"{indexing['attempt']}, longest gap between beats the server saw {indexing['max_beat_gap_s']} s "
        f"(worker {indexing['worker_cpu_cores']} cores)")
    results["tuning"] = {"sqlite": sqlite, "transfer_reads": transfer, "sticky_queue_timeout": sticky,
                         "heartbeats": {"timeout_s": options.HEARTBEAT.total_seconds(), "every_s": EVERY_S,
                                        "first_retry_s": options.FIRST_RETRY.total_seconds(),
                                        "cost": beats, "while_indexing": indexing}}


# --- 3. parallel efficiency ----------------------------------------------------------------------------------


def process_cpu_s(pid: int) -> float:
    """CPU seconds of a process and its reaped children (git, checks), from /proc."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def dev_server_pid(address: str) -> int | None:
    """The dev server's process (the one serving `address`), to account for its CPU."""
    port = address.rsplit(":", 1)[1]
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"start-dev" in argv and b"--port" in argv and argv[argv.index(b"--port") + 1] == port.encode():
            return int(proc.name)
    return None


def machine_cpu() -> tuple[float, float]:
    """(busy, total) jiffies of all CPUs since boot."""
    values = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def lanes_asked(events: list[Any]) -> list[float]:
    """When a run asked for its lanes' workflows: each child it started (before patch "lanes-by-client"), or
    the start of each workflow task that started lanes by the client (a start_lanes local activity's marker)."""
    asked, task_started = [], 0.0
    for e in events:
        if e.event_type == ET.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            task_started = _ts(e)
        elif e.event_type == ET.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
            asked.append(_ts(e))
        elif lane_starts(e):
            asked.append(task_started)
    return asked


async def review_reached(client: Client, run_id: str, timeout: float) -> Any:
    """wait_for_phase(review), asking twice a second rather than five times: each status query is a workflow task
    of the run's and a query of the server's, counted in the CPU per step measured around it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await asyncio.sleep(0.5)
        with contextlib.suppress(RPCError):
            status = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
            if status.phase == Phase.review:
                return status
            assert status.phase != Phase.failed, f"run failed: {status.error}"
    raise AssertionError(f"run {run_id} did not reach review in {timeout} s")


async def parallel_run(client: Client, queue: str, home: Path, repo: Path, tmp: Path, n: int, turns: int,
                       worker_pid: int | list[int], server_pid: int | None, probed: ProbedWorker | None = None,
                       metrics_port: int | None = None) -> dict[str, Any]:
    lanes = {f"lane{i:02d}": {"allowed_paths": [f"l{i:02d}/"], "max_turns": turns + 5} for i in range(n)}
    files = write_run_files(tmp, f"parallel-{n}-{queue[-6:]}", lanes, {"max_parallel": n}, {})
    pids: dict[str, Any] = {"worker": worker_pid if isinstance(worker_pid, list) else [worker_pid],
                            "dev_server": [server_pid] if server_pid else [], "bench_and_fake_model": [os.getpid()]}
    def cpu_now() -> dict[str, float]:  # the worker: all its processes (--worker-processes)
        return {k: sum(process_cpu_s(p) for p in ps) for k, ps in pids.items() if ps}
    probe0 = await probed.snapshot() if probed else None
    served0 = server_requests(metrics_port) if metrics_port else {}
    cpu0, (busy0, total0) = cpu_now(), machine_cpu()
    run_id = await start_on(client, queue, repo, *files, "openai:bench-fake", f"bench parallel efficiency, {n} lanes")
    status = await review_reached(client, run_id, timeout=600)
    cpu1, (busy1, total1) = cpu_now(), machine_cpu()
    probe1 = await probed.snapshot() if probed else None
    served1 = server_requests(metrics_port) if metrics_port else {}
    bad = [lane.lane for lane in status.review.lanes if lane.status != LaneStatus.done]
    spans, models, setups, gaps, made, tasks = [], [], [], [], [], []
    firsts: list[tuple[float, float]] = []
    lane_events = 0
    for wf in await lane_ids(client, run_id, list(lanes)):
        runs = await histories(client, wf)
        lane_events += sum(len(h.events) for h in runs)
        lane_tasks = workflow_task_spans(runs)
        tasks += lane_tasks
        spans.append(workflow_span(runs))
        if lane_tasks:  # the lane's first workflow task, which schedules its worktree and its first turn
            firsts.append((lane_tasks[0]["started"] - spans[-1][0], lane_tasks[0]["closed"] - lane_tasks[0]["started"]))
        acts = activity_spans(runs)
        mine = [s for s in acts if s["name"] == "model_turn" and s["started"]]
        made += [s for s in acts if s["name"] == "create_lane_worktree" and s["started"]]  # (none: made in a turn)
        models += mine
        if mine:  # where a lane's time goes besides its model calls: set-up before its first turn, gaps between
            setups.append(mine[0]["scheduled"] - spans[-1][0])
            gaps += [b["scheduled"] - a["closed"] for a, b in itertools.pairwise(mine)]
    busy = sum(e - s for s, e in spans)
    elapsed = max(e for _, e in spans) - min(s for s, _ in spans)
    # the run's own side of the lanes' start: when it asked for each lane's workflow
    initiated = [t for h in await histories(client, run_id) for t in lanes_asked(h.events)]
    report = starter_report(home, run_id, client.service_client.config.target_host)
    # the model calls' own time (the provider's answer, as calls.complete timed it) against the turn activity's
    latency = [line["latency_s"] for line in read_ledger(home, run_id)
               if line.get("event") == "model_call" and line.get("outcome") == "ok"
               and str(line.get("agent", "")).startswith("lane")]
    await finish_run(client, run_id)
    out = {"lanes": n, "run_id": run_id, "elapsed_s": _r(elapsed), "lane_mean_s": _r(busy / n),
           "efficiency": _r(busy / (n * elapsed)), "efficiency_ledger": report.get("parallel_efficiency"),
           "max_concurrent_model_calls": max_overlap([(s["started"], s["closed"]) for s in models]),
           "model_call_schedule_to_start_mean_s": _r(_mean([s["started"] - s["scheduled"] for s in models])),
           "model_call_schedule_to_start_p90_s": _r(sorted(s["started"] - s["scheduled"] for s in models)[
               int(0.9 * (len(models) - 1))]),
           # handed back with the workflow task's completion (eager dispatch), not through the task queue
           "model_calls_eager": _r(sum(s["started"] - s["scheduled"] < 0.001 for s in models) / len(models), 2),
           "model_call_exec_mean_s": _r(_mean([s["closed"] - s["started"] for s in models])),
           "setup_before_first_turn_s": _mean_max(setups),
           "first_workflow_task_pickup_s": _mean_max([p for p, _ in firsts]),
           "first_workflow_task_run_s": _mean_max([r for _, r in firsts]),
           "worktree_wait_s": _mean_max([s["started"] - s["scheduled"] for s in made]),
           "worktree_exec_s": _mean_max([s["closed"] - s["started"] for s in made]),
           "lane_start_spread_s": _r(max(s for s, _ in spans) - min(s for s, _ in spans)),
           "lane_start_asked_spread_s": _r(max(initiated) - min(initiated)) if initiated else None,
           "lane_start_after_asked_s": _r(max(s for s, _ in spans) - min(initiated)) if initiated else None,
           "between_turns_mean_ms": _r(_mean(gaps) * 1000, 1),
           "model_call_latency_mean_s": _r(_mean(latency)) if latency else None,
           # a lane's workflow tasks: from scheduled to a worker's pick-up, and the worker's work on them
           "workflow_task_pickup_mean_ms": _r(_mean([t["started"] - t["scheduled"] for t in tasks]) * 1000, 1),
           "workflow_task_run_mean_ms": _r(_mean([t["closed"] - t["started"] for t in tasks]) * 1000, 1),
           "worker_cpu_ms_per_turn": _r((cpu1["worker"] - cpu0["worker"]) * 1000 / (n * turns), 1),
           "worker_cpu_cores_used": _r((cpu1["worker"] - cpu0["worker"]) / elapsed, 2),
           "dev_server_cpu_ms_per_turn": _r((cpu1["dev_server"] - cpu0["dev_server"]) * 1000 / (n * turns), 1)
           if "dev_server" in cpu0 else None,
           "cpu_cores_used": {k: _r((cpu1[k] - cpu0[k]) / elapsed, 2) for k in cpu0},
           "machine_cpu_busy": _r((busy1 - busy0) / max(1, total1 - total0), 2),
           "lanes_not_done": bad}
    out["load_average_1min"] = _r(os.getloadavg()[0], 1)  # 2 cores: what else ran shows here
    steps = n * turns  # a lane step: a model turn and its tool call (the last turn's is finish)
    if "dev_server" in cpu0:
        out["cpu_ms_per_step"] = _r(((cpu1["worker"] - cpu0["worker"]) + (cpu1["dev_server"] - cpu0["dev_server"]))
                                    * 1000 / steps, 1)
    if probe0 and probe1:  # where the worker's CPU went (bench/cpu_probe.py)
        out["worker_split_ms_per_step"] = cpu_split(probe0, probe1, steps)
    if served1:  # what the server did for it, per step
        out["server_per_step"] = {"requests": per_step({k: v for k, v in served0.items() if not k.startswith("db:")},
                                                       {k: v for k, v in served1.items() if not k.startswith("db:")},
                                                       steps),
                                  "persistence": per_step({k: v for k, v in served0.items() if k.startswith("db:")},
                                                          {k: v for k, v in served1.items() if k.startswith("db:")},
                                                          steps)}
    out["history_events_per_step"] = _r(lane_events / steps, 2)
    log(f"parallel x{n:<3}: elapsed {out['elapsed_s']} s, lane mean {out['lane_mean_s']} s, overlap "
        f"{out['efficiency']} (ledger {out['efficiency_ledger']}), at most {out['max_concurrent_model_calls']} "
        f"model calls at once; cores used {out['cpu_cores_used']}, machine {out['machine_cpu_busy']:.0%} busy")
    return out


async def bench_parallel(client: Client, home: Path, repo: Path, tmp: Path, args: argparse.Namespace,
                         results: dict[str, Any]) -> None:
    """Lanes on a worker process (`python worker.py`, as deployed), the fake model server in this process."""
    turns = args.turns
    # --parallel-tool: list_dir, a quick call (the turns go on in one activity), or search, which is no quick
    # call (each turn an activity of its own and its call another, as a step of searches, commands or checks)
    def call(i: int) -> dict[str, Any]:
        return {"path": f"l{i:02d}"} if args.parallel_tool == "list_dir" else {"pattern": "X", "path": f"l{i:02d}"}

    script = {"lanes": {f"lane{i:02d}": {1: [turn((f"p{i}_{t}", args.parallel_tool, call(i)))
                                             for t in range(turns - 1)] + [finish(f"p{i}_end")]}
                        for i in range(max(args.parallel_lanes))}}
    address = client.service_client.config.target_host
    server_pid = dev_server_pid(address)
    phome = home / "parallel"
    detail: dict[str, Any] = {}
    compared: dict[str, Any] = {}
    most = max(args.parallel_lanes)
    with FakeModelServer("openai", script, delay_s=args.model_delay) as fake:
        env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": FAKE_KEY}
        queue = f"bench-parallel-{uuid.uuid4().hex[:6]}"
        # --worker-processes K: K worker processes on this host, sharing one home
        wenv = {**env, **({"REPOSWARM_WORKER_CONCURRENCY": str(args.worker_concurrency)}
                          if args.worker_concurrency else {})}
        # the first worker process with the CPU probe's timers (bench/cpu_probe.py: where its CPU goes)
        workers: list[WorkerProcess] = [(ProbedWorker if i == 0 else WorkerProcess)(address, queue, phome, wenv).start()
                                        for i in range(args.worker_processes)]
        try:
            for w in workers:
                await w.ready()
            for n in args.parallel_lanes:
                # each count several times: this machine's figure moves by a tenth from one run to the next
                # (README, Benchmarks); the row is the run of median elapsed time, every run's time beside it
                probed = workers[0] if isinstance(workers[0], ProbedWorker) and len(workers) == 1 else None
                rows = [await parallel_run(client, queue, phome, repo, tmp, n, turns, [w.proc.pid for w in workers],
                                           server_pid, probed, args.metrics_port) for _ in range(args.parallel_repeats)]
                rows.sort(key=lambda row: row["elapsed_s"])
                detail[str(n)] = {**rows[len(rows) // 2], "runs_elapsed_s": [row["elapsed_s"] for row in rows]}
        finally:
            for w in workers:
                w.stop()
        # the most lanes again on a worker of another concurrency (the product's REPOSWARM_WORKER_CONCURRENCY,
        # i.e. worker.py --concurrency): one slot per lane when the default has fewer, else half as many
        other = most if most > DEFAULT_CONCURRENCY else most // 2
        queue = f"bench-parallel-c{other}-{uuid.uuid4().hex[:6]}"
        worker = WorkerProcess(address, queue, phome, {**env, "REPOSWARM_WORKER_CONCURRENCY": str(other)}).start()
        try:
            await worker.ready()
            log(f"parallel x{most} again, on a worker of concurrency {other} (REPOSWARM_WORKER_CONCURRENCY)")
            compared = {"concurrency": other,
                        str(most): await parallel_run(client, queue, phome, repo, tmp, most, turns, worker.proc.pid,
                                                      server_pid)}
        finally:
            worker.stop()
    one = detail.get("1", {}).get("lane_mean_s")
    for row in [*detail.values(), *(v for v in compared.values() if isinstance(v, dict))]:
        row["efficiency_vs_one_lane"] = _r(one / row["elapsed_s"]) if one else None
        if one and "runs_elapsed_s" in row:
            row["efficiency_vs_one_lane_runs"] = [_r(one / e) for e in row["runs_elapsed_s"]]
    # The headline is throughput: N lanes of the same work against one lane's time. The span-based figure (lanes'
    # own spans over lanes x elapsed) counts a lane waiting for a slot as work: kept beside it as "overlap".
    results["parallel_efficiency"] = {n: row["efficiency_vs_one_lane"] for n, row in detail.items()}
    results["parallel_overlap"] = {n: row["efficiency"] for n, row in detail.items()}
    results["parallel_overlap_ledger"] = {n: row["efficiency_ledger"] for n, row in detail.items()}
    results["parallel"] = {"turns_per_lane": turns, "model_delay_s": args.model_delay, "tool": args.parallel_tool,
                           "worker_concurrency": DEFAULT_CONCURRENCY, "runs": detail}
    results["parallel"]["other_concurrency"] = compared
    results["cpu_per_step"] = cpu_per_step(detail, turns)


def cpu_per_step(detail: dict[str, Any], turns: int) -> dict[str, Any]:
    """The worker's and the server's CPU per lane step at each lane count, and what that projects: the cores of
    orchestration 1,000 lanes need when each model turn takes 10 s (100 steps a second), at the most lanes run."""
    out: dict[str, Any] = {}
    for n, row in detail.items():
        if int(n) < 8 or row.get("cpu_ms_per_step") is None:  # (below 8 lanes the server's idle polling dominates)
            continue
        out[n] = {"worker_ms": row["worker_cpu_ms_per_turn"], "server_ms": row["dev_server_cpu_ms_per_turn"],
                  "total_ms": row["cpu_ms_per_step"], "load_average_1min": row.get("load_average_1min"),
                  "history_events": row.get("history_events_per_step")}
    if out:
        most = max(out, key=int)
        total = out[most]["total_ms"]
        out["projection"] = {
            "lanes": 1000, "turn_s": 10.0, "steps_per_s": 100.0, "from_lanes": int(most), "ms_per_step": total,
            "cores": _r(100.0 * total / 1000, 2),
            "note": f"1,000 lanes x one step per 10 s = 100 steps/s x {total} ms ({most} lanes here, {turns} turns "
                    "a lane, lane set-up and end included) = worker + dev server cores, before any check"}
    return out


# --- 4. recovery ---------------------------------------------------------------------------------------------


async def wait_until(predicate: Any, timeout: float, what: str, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        await asyncio.sleep(every)


async def pending_states(client: Client, wf_id: str) -> list[tuple[str, int, str]]:
    desc = await client.get_workflow_handle(wf_id).describe()
    return [(p.activity_type.name, p.attempt,
             PendingActivityState.Name(p.state).removeprefix("PENDING_ACTIVITY_STATE_"))
            for p in desc.raw_description.pending_activities]


def first_after(home: Path, run_id: str, t: float, event: str | None = None) -> dict[str, Any] | None:
    return next((e for e in read_ledger(home, run_id) if e["ts"] > t and (event is None or e["event"] == event)), None)


def _pb_s(ts: Any) -> float | None:
    """A protobuf Timestamp as epoch seconds (None when unset)."""
    return ts.ToMicroseconds() / 1e6 if ts.seconds or ts.nanos else None


async def watch_retry(client: Client, wf_id: str, activity_id: str, killed_at: float) -> dict[str, Any]:
    """Where the seconds of a recovery go, from the server's own times for the killed activity (polled until its
    next attempt has started): the retry came due (the heartbeat timeout, counted from the attempt's last beat,
    then the retry policy's first interval), and the new worker started it."""
    out: dict[str, Any] = {}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            desc = await client.get_workflow_handle(wf_id).describe()
        except RPCError:
            await asyncio.sleep(0.1)
            continue
        mine = [p for p in desc.raw_description.pending_activities if p.activity_id == activity_id]
        if not mine:  # completed (or the lane has gone on) before the poll saw the retry start
            out.setdefault("note", "the retry completed between two polls")
            break
        p = mine[0]
        if p.attempt >= 2:
            due = _pb_s(p.scheduled_time)
            if due is not None:
                out["retry_due_s"] = _r(due - killed_at)
            out["failure"] = p.last_failure.message[:120]  # "activity Heartbeat timeout"
            if PendingActivityState.Name(p.state).endswith("STARTED"):
                started = _pb_s(p.last_started_time)
                out["retry_started_s"] = _r(started - killed_at) if started else None
                break
        await asyncio.sleep(0.1)
    return out


CHECK_COMM = "rsbench-check"  # the process name of the tool_call scenario's check command while it runs


def check_running(token: str) -> bool:
    """Whether the tool_call scenario's check command (the one with `token` on its command line) is running in a
    lane worktree."""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if (proc / "comm").read_text().strip() == CHECK_COMM and \
                    token.encode() in (proc / "cmdline").read_bytes().split(b"\0"):
                return True
        except OSError:
            continue
    return False


async def kill_scenario(client: Client, home: Path, repo: Path, tmp: Path, moment: str) -> dict[str, Any]:
    """One lane on a worker process; SIGKILL its process group at `moment`, start a new worker (same home, same
    queue) at once, and time the run's next ledger event. The moments:

    between     the lane's model call is answered 429 (Retry-After: 1) and waits out its retry back-off:
                no activity is in flight, so nothing waits for a timeout (its turns search: a turn an activity)
    model_call  a model request is in flight (the fake model takes 3 s): its retry waits for model_turn's
                heartbeat timeout, then the retry policy's first interval, and the retried call takes 3 s
                before it writes the ledger event that is timed
    tool_call   a run_checks tool call is running (its command takes 3 s): the same, for run_tool

    With an activity in flight, `breakdown` has the server's times for it, from the kill: its last beat before
    the kill, its attempt timed out, its retry due, the retry started on the new worker.
    """
    address = client.service_client.config.target_host
    queue = f"bench-kill-{moment}-{uuid.uuid4().hex[:6]}"
    rhome = home / f"recovery-{moment}"
    rhome.mkdir(parents=True, exist_ok=True)
    extra: dict[str, Any] = {}
    if moment == "tool_call":
        # The check runs sandboxed (reposwarm/checks/sandbox.py) and can write nothing but its tree, so in a lane
        # worktree it says it is running in its process name, which the bench reads from the host's /proc
        # (argv[1], the queue's name, tells it apart from other runs' checks).
        check = ("import os, time\nif '/lanes/' in os.getcwd():\n"
                 f"    open('/proc/self/comm', 'w').write({CHECK_COMM!r})\n    time.sleep(3)\n")
        extra = {"validation": {"profile": "lane", "profiles": {"lane": {"timeout_s": 60, "commands": [
            [sys.executable, "-c", check, queue]]}}}}
        replies = [turn(("k1", "list_dir", {"path": "l00"})), turn(("k2", "run_checks", {"profile": "lane"})),
                   finish("k3")]
    elif moment == "between":
        # a search each turn (no quick tool: a turn an activity), so that the rate-limited call is an activity's
        # first, which the activity's retry waits out (a later turn's failure would end its activity with the
        # turns before it, and the next turn would be a new activity: no back-off to kill the worker in)
        replies = [turn((f"r{t}", "search", {"pattern": "def"})) for t in range(6)] + [finish("r_end")]
    else:
        replies = [turn((f"r{t}", "list_dir", {"path": "l00"})) for t in range(3)] + [finish("r_end")]
    lanes = {"rec": {"allowed_paths": ["l00/"], "max_turns": 20}}
    files = write_run_files(tmp, f"recovery-{moment}", lanes, {"max_parallel": 1}, {}, extra=extra)
    workers: list[WorkerProcess] = []

    def new_worker(env: dict[str, str]) -> WorkerProcess:
        w = WorkerProcess(address, queue, rhome, env)
        w.log = rhome / f"worker-{len(workers) + 1}.log"  # a log each: ready() looks for the banner in it
        workers.append(w)
        return w.start()

    fake = FakeModelServer("openai", {"lanes": {"rec": {1: replies}}}, delay_s=3.0 if moment == "model_call" else 0.2)
    fake._httpd.handle_error = lambda *a: None  # the killed worker's connection: no traceback
    with fake:
        env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": FAKE_KEY}
        try:
            await new_worker(env).ready()
            run_id = await start_on(client, queue, repo, *files, "openai:bench-fake", f"bench recovery, {moment}")
            if moment == "between":
                await wait_until(lambda: len(fake.requests) >= 3, 120, "the lane's third model request")
                lane_wf = await lane_id(client, run_id, "rec")
                fake.rate_limit_first = 1  # the next request is answered 429, Retry-After: 1
                await wait_until(lambda: any(e["event"] == "model_call" and e.get("outcome") == "error"
                                             for e in read_ledger(rhome, run_id)), 60, "the rate-limited model call")

                async def backing_off() -> list[tuple[str, int, str]] | None:
                    states = await pending_states(client, lane_wf)
                    return states if states and all(st == "SCHEDULED" and a >= 2 for _, a, st in states) else None

                await wait_until(backing_off, 10, "the model call's retry back-off")
            elif moment == "model_call":
                await wait_until(lambda: len(fake.requests) >= 2, 120, "the lane's second model request")
                lane_wf = await lane_id(client, run_id, "rec")
                await asyncio.sleep(1.5)  # inside the request (it takes 3 s), after its first beat
            else:
                await wait_until(lambda: check_running(queue), 120, "the lane's check command", every=0.05)
                lane_wf = await lane_id(client, run_id, "rec")
            desc = await client.get_workflow_handle(lane_wf).describe()
            in_flight = [p for p in desc.raw_description.pending_activities
                         if PendingActivityState.Name(p.state).endswith("STARTED")]
            before = await pending_states(client, lane_wf)
            killed_at = time.time()
            os.killpg(workers[-1].proc.pid, signal.SIGKILL)  # type: ignore[union-attr]
            retry = None
            if in_flight:
                retry = asyncio.create_task(watch_retry(client, lane_wf, in_flight[0].activity_id, killed_at))
            workers[-1].proc.wait()  # type: ignore[union-attr]
            await new_worker(env).ready()
            ready_at = time.time()
            first = await wait_until(lambda: first_after(rhome, run_id, killed_at), 400,
                                     "a ledger event after the kill", every=0.05)
            # the first event that needed the lane's workflow on the new worker (history replayed there)
            driven = await wait_until(lambda: first_after(rhome, run_id, first["ts"], "tool_call")
                                      or first_after(rhome, run_id, first["ts"], "lane_end"), 400,
                                      "a workflow-driven ledger event after the kill", every=0.05)
            status = await wait_for_phase(client, run_id, Phase.review, timeout=300)
            lane = status.review.lanes[0]
            await finish_run(client, run_id)
        finally:
            for w in workers:
                w.stop()
    out = {"run_id": run_id, "killed_while": before, "worker_start_s": _r(ready_at - killed_at),
           "recovery_s": _r(first["ts"] - killed_at), "first_event": f"{first['event']} {first.get('outcome', '')}",
           "recovery_workflow_s": _r(driven["ts"] - killed_at), "lane_status": lane.status.value,
           "lane_tool_calls": lane.tool_calls, "model_requests": len(fake.requests)}
    if in_flight:
        beat = _pb_s(in_flight[0].last_heartbeat_time) or _pb_s(in_flight[0].last_started_time)
        out["breakdown"] = {"last_beat_s": _r(beat - killed_at) if beat else None,
                            **(await retry if retry is not None else {})}
    return out


async def bench_recovery(client: Client, home: Path, repo: Path, tmp: Path, args: argparse.Namespace,
                         results: dict[str, Any]) -> None:
    between = await kill_scenario(client, home, repo, tmp, "between")
    results["recovery_s"] = between["recovery_s"]
    results["recovery"] = {"between_activities": between}
    log(f"recovery: next ledger event {between['recovery_s']} s after the kill (worker start-up "
        f"{between['worker_start_s']} s; first workflow-driven event {between['recovery_workflow_s']} s)")
    if not args.recovery_in_flight:
        return
    for moment in ("model_call", "tool_call"):  # one at a time: each kill and worker start-up on its own
        out = results["recovery"][f"in_{moment}"] = await kill_scenario(client, home, repo, tmp, moment)
        results[f"recovery_in_{moment}_s"] = out["recovery_s"]
        log(f"recovery with a {moment.replace('_', ' ')} in flight: {out['recovery_s']} s ({out['killed_while']}; "
            f"from the kill: {out.get('breakdown')})")


# --- the whole bench -----------------------------------------------------------------------------------------


async def run(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"mode": "quick" if args.quick else "full",
                               "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                                           "platform": platform.platform()}}
    timings: dict[str, float] = {}
    load: dict[str, float] = {}
    t0 = time.perf_counter()
    big = bench_repo(args, results)
    timings["repository_s"] = round(time.perf_counter() - t0, 1)
    for knob in KNOBS:
        os.environ.pop(knob, None)
    logging.getLogger("temporalio").addHandler(FAILURES)  # and not the traceback of every retried attempt
    tmp = Path(tempfile.mkdtemp(prefix="reposwarm-bench-swarm-"))
    home = tmp / "home"
    os.environ["REPOSWARM_HOME"] = str(home)  # the in-process worker's activities read it when they run
    # Past SPARSE_FROM_FILES (2,000) files, as the repositories reposwarm is for: lanes get sparse worktrees of
    # their own folders, by the product's own rule, not the whole tree each.
    small = make_repo(tmp / "small", {"README.md": "bench\n", **{f"l{i:02d}/mod.py": f"X = {i}\n" for i in range(64)},
                                      **{f"l{i:02d}/README.md": f"lane {i}\n" for i in range(64)},
                                      **{f"shared/m{j // 100:02d}/f{j}.py": f"Y = {j}\n" for j in range(2_000)}})
    queue = f"bench-swarm-{uuid.uuid4().hex[:8]}"
    t = time.perf_counter()
    # on a SQLite file with ./temporal-dev's pragmas: the embedded default users run
    args.metrics_port = free_port()  # the dev server's Prometheus metrics: its heartbeat RPCs (tuning)
    env = await start_dev_server(["--db-filename", str(tmp / "bench-temporal.db"),
                                  "--metrics-port", str(args.metrics_port), *TRANSFER_READS])
    timings["dev_server_start_s"] = round(time.perf_counter() - t, 1)
    try:
        client = env.client
        sections = {"steps": lambda: bench_steps(client, queue, small, tmp, args, results),
                    "parallel": lambda: bench_parallel(client, home, small, tmp, args, results),
                    "lane_setup": lambda: bench_setup(client, queue, home, big, tmp, args, results),
                    "recovery": lambda: bench_recovery(client, home, small, tmp, args, results),
                    "tuning": lambda: bench_tuning(client, home, big, small, tmp, args, results)}
        async with make_worker(client, queue):  # the in-process worker of steps and lane_setup
            for name, section in sections.items():
                if name not in args.sections:
                    continue
                t = time.perf_counter()
                log(f"{name} ... (load average {os.getloadavg()[0]:.1f})")
                await section()
                timings[f"{name}_s"] = round(time.perf_counter() - t, 1)
                load[name] = round(os.getloadavg()[1], 1)  # the 5-minute load average at its end
    finally:
        await env.shutdown()
        purge_refs(big)
        shutil.rmtree(tmp, ignore_errors=True)
    timings["total_s"] = round(time.perf_counter() - t0, 1)
    results["timings"] = timings
    results["machine"]["load_average_5min_after"] = load  # 2 cores: other processes' load shows here
    results["targets"] = targets(results)
    return results


def targets(results: dict[str, Any]) -> dict[str, Any]:
    """The targets, met or not (lane set-up for the full mode's ~4M-line repository at 4 lanes)."""
    out = {
        "lane_setup_speedup": {"target": f">= {TARGETS['lane_setup_speedup']}",
                               "measured": results.get("lane_setup_speedup"),
                               "met": (results.get("lane_setup_speedup") or 0) >= TARGETS["lane_setup_speedup"]},
        "lane_setup_sparse_s": {"target": f"< {TARGETS['lane_setup_sparse_s']}",
                                "measured": results.get("lane_setup_sparse_s"),
                                "met": (results.get("lane_setup_sparse_s") or 1e9) < TARGETS["lane_setup_sparse_s"]},
        "step_overhead_ratio": {"target": f"<= {TARGETS['step_overhead_ratio']}",
                                "measured": results.get("step_overhead_ratio"),
                                "met": (results.get("step_overhead_ratio") or 1e9) <= TARGETS["step_overhead_ratio"]},
    }
    for n in ("8", "32", "64"):
        measured = results.get("parallel_efficiency", {}).get(n)
        target = TARGETS[f"parallel_efficiency_{n}"]
        out[f"parallel_efficiency_{n}"] = {"target": f">= {target}", "measured": measured,
                                           "met": (measured or 0) >= target}
    cpu = results.get("cpu_per_step", {})
    most = max((k for k in cpu if k.isdigit()), key=int, default=None)
    measured = cpu[most]["total_ms"] if most else None
    out["cpu_ms_per_step"] = {"target": f"<= {TARGETS['cpu_ms_per_step']} (worker + dev server, at {most} lanes)",
                              "measured": measured, "met": measured is not None and measured <= TARGETS["cpu_ms_per_step"]}
    host = results.get("step", {}).get("host_affinity", {}).get("ratio")
    out["host_step_overhead_ratio"] = {"target": f"<= {TARGETS['host_step_overhead_ratio']}", "measured": host,
                                       "met": host is not None and host <= TARGETS["host_step_overhead_ratio"]}
    for name in ("recovery_in_model_call_s", "recovery_in_tool_call_s"):
        measured = results.get(name)
        out[name] = {"target": f"<= {TARGETS[name]}", "measured": measured,
                     "met": measured is not None and measured <= TARGETS[name]}
    return out


# The results' keys each section writes (their prefixes), for --merge.
SECTION_KEYS = {"steps": ("step", "history"), "parallel": ("parallel", "cpu_per_step"), "lane_setup": ("lane_setup",),
                "recovery": ("recovery",), "tuning": ("tuning",)}


def merge(old: dict[str, Any], new: dict[str, Any], sections: list[str]) -> dict[str, Any]:
    """The figures of the sections just run, in place of theirs in an earlier results file (the others kept, in
    their order)."""
    def rerun(key: str) -> bool:
        return any(key.startswith(prefix) for section in sections for prefix in SECTION_KEYS[section])

    merged: dict[str, Any] = {}
    for key, value in old.items():
        if not rerun(key):
            merged[key] = value
        elif key in new:
            merged[key] = new[key]
    merged.update({k: v for k, v in new.items() if rerun(k) and k not in merged})
    timings = merged.setdefault("timings", {})
    timings.update({k: v for k, v in new["timings"].items() if k[:-2] in sections})
    timings["rerun_total_s"] = new["timings"]["total_s"]
    loads = merged.setdefault("machine", {}).setdefault("load_average_5min_after", {})
    loads.update(new["machine"].get("load_average_5min_after", {}))
    merged["sections_rerun"] = {**old.get("sections_rerun", {}), **{
        section: {"mode": new["mode"], "at": time.strftime("%Y-%m-%d %H:%M")} for section in sections}}
    merged["targets"] = targets(merged)
    return merged


def _parallel_text(row: dict[str, Any]) -> str:
    cores = row["cpu_cores_used"]
    runs = row.get("efficiency_vs_one_lane_runs") or []
    spread = f", runs {min(runs)}-{max(runs)}" if len(runs) > 1 else ""
    return (f"throughput {row['efficiency_vs_one_lane']} (vs one lane, median of {max(1, len(runs))}{spread}); "
            f"overlap {row['efficiency']} (histories), "
            f"{row['efficiency_ledger']} (report) (elapsed {row['elapsed_s']} s, lane mean {row['lane_mean_s']} s, <= "
            f"{row['max_concurrent_model_calls']} model calls at once; CPU per turn: worker "
            f"{row.get('worker_cpu_ms_per_turn')} ms, dev server {row.get('dev_server_cpu_ms_per_turn')} ms; cores: worker "
            f"{cores['worker']}, dev server {cores.get('dev_server')}, machine {row['machine_cpu_busy']:.0%} busy; "
            f"lanes started over {row.get('lane_start_spread_s')} s)")


def _cpu_text(row: dict[str, Any]) -> str:
    """A run's CPU per step, worker and server, and where the worker's went (the largest parts)."""
    split = row["worker_split_ms_per_step"]
    parts = {**split["by_thread_ms"], "git and other children": split["children_ms"]}
    top = ", ".join(f"{k} {v}" for k, v in sorted(parts.items(), key=lambda kv: -kv[1])[:6])
    functions = ", ".join(f"{k} {v}" for k, v in list(split["by_function_ms"].items())[:8])
    server = row.get("server_per_step", {})
    served = ", ".join(f"{k} {v}" for k, v in list(server.get("requests", {}).items())[:4])
    db = ", ".join(f"{k.removeprefix('db:')} {v}" for k, v in list(server.get("persistence", {}).items())[:4])
    return (f"{row.get('cpu_ms_per_step')} ms (worker {row['worker_cpu_ms_per_turn']}, dev server "
            f"{row['dev_server_cpu_ms_per_turn']}; load {row.get('load_average_1min')}); worker by thread: {top}; "
            f"timed: {functions}; server per step: {served}; db {db}; {row.get('history_events_per_step')} history "
            "events")


def table(r: dict[str, Any]) -> str:
    rows: list[tuple[str, str]] = [
        ("repository", f"{r['repo_lines']:,} lines, {r['repo_files']:,} files ({r['mode']})")]
    for n, row in r.get("lane_setup", {}).items():
        sp = row["sparse"]
        text = (f"sparse {sp['per_lane_mean_s']} s/lane (phase {sp['setup_phase_wall_s']} s, "
                f"{sp['retried_attempts']} retries)")
        if "full" in row:
            fu = row["full"]
            text += (f", full {fu['per_lane_mean_s']} s/lane (phase {fu['setup_phase_wall_s']} s, "
                     f"{fu['retried_attempts']} retries): {row['speedup']}x (phase {row['speedup_phase']}x)")
        else:
            text += ", full not measured"
        failed = {m: row[m]["lanes_not_done"] for m in ("sparse", "full") if row.get(m, {}).get("lanes_not_done")}
        if failed:
            text += "; FAILED lanes: " + "; ".join(f"{m} {len(v)} ({', '.join(v)})" for m, v in failed.items())
        rows.append((f"lane set-up, {n} lanes at once", text))
    for note in r.get("lane_setup_notes", []):
        rows.append(("  note", note))
    for n, row in r.get("lane_setup", {}).items():
        for mode in ("sparse", "full"):
            for message, count in row.get(mode, {}).get("failure_messages", {}).items():
                rows.append((f"  {n} lanes {mode}: retried", f"{count}x {message}"))
    if "step" in r:
        s = r["step"]
        h = s["host_affinity"]
        rows.append(("step (turn + list_dir)",
                     f"{s['per_step_ms']} ms = {r['step_overhead_ratio']}x a raw activity round trip "
                     f"({s['raw_round_trip_ms']} ms; {s['activities_per_step']} activities per step, "
                     f"{s['tool_calls_as_local_activities']} tool calls as local activities)"))
        rows.append(("  step breakdown",
                     f"model_turn {s['model_turn_exec_ms']} ms, list_dir's workflow task "
                     f"{s['local_tool_workflow_task_ms']} ms, orchestration {s['orchestration_ms_per_step']} ms"))
        rows.append(("  step, REPOSWARM_AFFINITY=host",
                     f"{h['per_step_ms']} ms = {h['ratio']}x ({h['activities_per_step']} activities per step, "
                     f"model_turn {h['model_turn_exec_ms']} ms, run_tool {h['run_tool_exec_ms']} ms, activities "
                     f"wait {h['schedule_to_start_ms']} ms to start)"))
        rows.append(("  raw round trip, other queue",
                     f"{s['raw_cross_queue_round_trip_ms']} ms (waits {s['raw_cross_queue_schedule_to_start_ms']} ms "
                     f"to start; same queue {s['raw_schedule_to_start_ms']} ms): host-affinity step = "
                     f"{h['ratio_vs_cross_queue']}x"))
        h = r["history"]
        rows.append(("history events per tool call", f"{r['history_events_per_tool_call']} ({h['lane_events']} events, "
                                                     f"{h['runs']} run(s), {h['tool_calls']} tool calls)"))
    if "parallel" in r:
        for n, row in r["parallel"]["runs"].items():
            rows.append((f"parallel efficiency, {n} lanes", _parallel_text(row)))
            if row.get("worker_split_ms_per_step"):
                rows.append(("  CPU per step", _cpu_text(row)))
        if (projection := r.get("cpu_per_step", {}).get("projection")) is not None:
            rows.append(("  1,000 lanes, 10 s turns", f"{projection['cores']} cores of orchestration ({projection['note']})"))
        other = r["parallel"].get("other_concurrency")
        if other:
            n = next(k for k in other if k != "concurrency")
            rows.append((f"  {n} lanes, worker concurrency {other['concurrency']}", _parallel_text(other[n])))
    if "recovery" in r:
        rec = r["recovery"]["between_activities"]
        rows.append(("recovery after SIGKILL",
                     f"{rec['recovery_s']} s to the next ledger event (worker start-up {rec['worker_start_s']} s; "
                     f"workflow replayed by {rec['recovery_workflow_s']} s)"))
        for moment in ("model_call", "tool_call"):
            if f"in_{moment}" in r["recovery"]:
                rec = r["recovery"][f"in_{moment}"]
                b = rec.get("breakdown", {})
                where = (f"; last beat {b.get('last_beat_s')} s, retry due {b.get('retry_due_s')} s, started "
                         f"{b.get('retry_started_s')} s" if b else "")
                rows.append((f"  ... {moment.replace('_', ' ')} in flight (3 s)",
                             f"{rec['recovery_s']} s (workflow replayed by {rec['recovery_workflow_s']} s{where})"))
    if "tuning" in r:
        sq, st = r["tuning"]["sqlite"], r["tuning"]["sticky_queue_timeout"]
        rows.append(("tuning: SQLite WAL + synchronous=normal",
                     f"{sq['workflows']} workflows x {sq['activities_each']} activities at once in "
                     f"{sq['wal_normal']['fanout_wall_s']} s vs {sq['sqlite_defaults']['fanout_wall_s']} s with "
                     f"SQLite's defaults ({sq['wal_speedup']}x); raw round trip {sq['wal_normal']['raw_round_trip_ms']} "
                     f"vs {sq['sqlite_defaults']['raw_round_trip_ms']} ms"))
        if (tr := r["tuning"].get("transfer_reads")) is not None:
            d, o = tr["temporal_default"], tr["reposwarm"]
            rows.append(("tuning: the server's task reads",
                         f"at Temporal's default 20/s vs {tr['reads_per_s']}/s: raw round trip {d['raw_round_trip_ms']} "
                         f"vs {o['raw_round_trip_ms']} ms, on another queue {d['raw_cross_queue_round_trip_ms']} vs "
                         f"{o['raw_cross_queue_round_trip_ms']} ms"))
        rows.append(("tuning: sticky-queue timeout",
                     "a killed worker's workflow resumes in " + ", ".join(
                         f"{v['mean_s']} s with {k}" for k, v in st.items()) + " (worker.py uses 1 s)"))
        hb = r["tuning"].get("heartbeats")
        if hb:
            c, ix = hb["cost"], hb["while_indexing"]
            at_n = c.get(f"rpcs_per_s_at_{c['lanes']}_lanes")
            rows.append(("tuning: heartbeats",
                         f"timeout {hb['timeout_s']:g} s, a beat every {hb['every_s']:g} s, first retry "
                         f"{hb['first_retry_s']:g} s: {c['rpcs_per_activity_s']} RPCs per second of activity = "
                         f"{at_n} RPCs/s at {c['lanes']} lanes (dev server {c['dev_server_cpu_cores']} cores)"))
            rows.append(("  ... while plan_round indexes",
                         f"{ix['plan_round_s']} s, attempt {ix['attempt']}, longest gap between beats "
                         f"{ix['max_beat_gap_s']} s (worker {ix['worker_cpu_cores']} cores)"))
    for name, t in r["targets"].items():
        verdict = "not measured" if t["measured"] is None else "met" if t["met"] else "MISSED"
        if r["mode"] == "quick" and t["measured"] is not None and not name.startswith("recovery"):
            verdict += " (quick mode: the targets are for the ~4M-line repository)"
        rows.append((f"target {name}", f"{t['target']}: {verdict} ({t['measured']})"))
    rows.append(("bench wall time", f"{r['timings']['total_s']} s"))
    if r.get("sections_rerun"):
        rows.append(("  sections run again since", ", ".join(f"{k} ({v['mode']}, {v['at']})"
                                                             for k, v in r["sections_rerun"].items())
                     + f"; {r['timings'].get('rerun_total_s')} s"))
    width = max(len(a) for a, _ in rows)
    return "\n".join(f"| {a.ljust(width)} | {b} |" for a, b in rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", default=os.environ.get("CI") == "true",
                        help="a smaller repository and fewer lanes (the default when CI=true)")
    parser.add_argument("--services", type=int, help="services in the generated repository (25 files of 200 lines "
                                                       "each; default 800, about 4M lines; --quick: 80)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--cache-dir", default=os.path.join(tempfile.gettempdir(), "reposwarm-bench"))
    parser.add_argument("--setup-lanes", type=lambda s: [int(x) for x in s.split(",")],
                        help="lane counts for the set-up runs (default 4,32; --quick: 4,8)")
    parser.add_argument("--full-budget-s", type=float, default=210.0,
                        help="skip a full-checkout set-up run predicted to take longer than this")
    parser.add_argument("--parallel-tool", choices=["list_dir", "search"], default="list_dir",
                        help="the parallel lanes' call each turn: list_dir (quick: turns go on in one activity) or "
                             "search (an activity a call, a step an activity and its call)")
    parser.add_argument("--parallel-lanes", type=lambda s: [int(x) for x in s.split(",")],
                        help="lane counts for parallel efficiency (default 1,4,8,32,64; --quick: 1,4,8)")
    parser.add_argument("--turns", type=int, default=10, help="turns per lane in the parallel runs")
    parser.add_argument("--worker-processes", type=int, default=1,
                        help="worker processes sharing one home (one host) in the parallel runs")
    parser.add_argument("--worker-concurrency", type=int,
                        help="each worker process's activity slots in the parallel runs (default: the product's)")
    parser.add_argument("--model-delay", type=float, default=1.0, help="seconds per fake model turn")
    parser.add_argument("--parallel-repeats", type=int, help="runs of each lane count, the median reported "
                                                             "(default 3; --quick: 1)")
    parser.add_argument("--steps", type=int, help="tool-calling turns of the step lane (default 40; --quick: 20)")
    parser.add_argument("--step-repeats", type=int, default=3,
                        help="the step and the raw round trip, measured this many times, interleaved (default 3)")
    parser.add_argument("--raw-n", type=int, help="raw activity round trips per probe (default 100; --quick: 50)")
    parser.add_argument("--recovery-in-flight", action=argparse.BooleanOptionalAction, default=True,
                        help="also kill workers during a model call and during a tool call (their recoveries wait for "
                             "the 6 s heartbeat timeout: about 15 s each; default: yes)")
    parser.add_argument("--sections", type=lambda s: s.split(","),
                        default=["steps", "parallel", "lane_setup", "recovery", "tuning"],
                        help="which parts to run (default all: steps,parallel,lane_setup,recovery,tuning)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results.json")
    parser.add_argument("--merge", action="store_true",
                        help="keep the --out file's figures of the sections not run (with --sections)")
    args = parser.parse_args(argv)
    quick = args.quick
    args.services = args.services or (80 if quick else 800)
    args.setup_lanes = args.setup_lanes or ([4, 8] if quick else [4, 32])
    args.parallel_repeats = args.parallel_repeats or (1 if quick else 3)
    args.parallel_lanes = sorted(set(args.parallel_lanes or ([1, 4, 8] if quick else [1, 4, 8, 32, 64])) | {1})
    args.steps = args.steps or (20 if quick else 40)
    args.raw_n = args.raw_n or (50 if quick else 100)
    results = asyncio.run(run(args))
    if args.merge and args.out.exists():
        results = merge(json.loads(args.out.read_text()), results, args.sections)
    print(table(results))
    args.out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # as starter.py: skip interpreter finalization, which the Temporal runtime's threads can abort
