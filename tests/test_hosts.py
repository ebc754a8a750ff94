"""Worker hosts that share nothing but Temporal, a git remote and an object store (issue #20).

Each worker runs in a mount namespace of its own in which the other worker's home and the test's are empty
folders (a tmpfs over each), so a worker that read another's files would find nothing there. The repository
is a bare remote named by a file:// URL; each worker keeps its own clone of it.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from reposwarm.cli.runs import build_request, start
from reposwarm.contracts import Phase
from tests.fake_models import FakeModelServer
from tests.helpers import (
    ROOT,
    SLOW_CHECK,
    WorkerProcess,
    approve_and_wait,
    finish,
    git,
    home_ledger,
    kill_the_lane_s_host,
    make_repo,
    start_run,
    turn,
    wait_for_phase,
    write_yaml,
)

pytestmark = pytest.mark.faults


def bare_remote(tmp_path: Path, files: dict[str, str]) -> tuple[Path, str]:
    """A bare repository with one commit on main, and its file:// URL."""
    work = make_repo(tmp_path / "work", files)
    bare = tmp_path / "remote.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    return bare, f"file://{bare}"


def hosts(address: str, queue: str, homes: list[Path], hidden: list[Path], env: dict[str, str]) -> list[WorkerProcess]:
    """One worker per home, each unable to see the other homes (nor `hidden`)."""
    for home in homes:  # every home first: a worker mounts over the others' as it starts, so they must exist by then
        home.mkdir(parents=True, exist_ok=True)
    workers = []
    for home in homes:
        others = [h for h in homes if h != home] + hidden
        workers.append(WorkerProcess(address, queue, home, env={"REPOSWARM_AFFINITY": "host", **env},
                                     hide=others).start())
    return workers


async def polling(client, queue: str, workers: int, timeout: float = 60) -> None:
    """Until the server has seen `workers` workers poll the shared queue for activities (where every lane's worktree
    is made): a worker's banner comes before its first poll, and on a loaded machine one host could otherwise take
    every lane before the other asked for work."""
    import asyncio

    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    deadline = time.monotonic() + timeout
    while True:
        described = await client.workflow_service.describe_task_queue(DescribeTaskQueueRequest(
            namespace=client.namespace, task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY))
        seen = {p.identity for p in described.pollers}
        if len(seen) >= workers:
            return
        assert time.monotonic() < deadline, f"only {sorted(seen)} polled {queue} in {timeout:.0f} s"
        await asyncio.sleep(0.2)


def lanes_file(tmp_path: Path, lanes: list[str], host_timeout_s: int = 3) -> Path:
    return write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"host_timeout_s": host_timeout_s,
                  "lanes": {lane: {"allowed_paths": [f"{lane}/"]} for lane in lanes}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "print('ok')"]],
                                                "timeout_s": 60}}}})


async def test_lanes_spread_over_two_hosts_deliver_to_the_remote(client, temporal_address, reposwarm_home, tmp_path,
                                                                 monkeypatch, s3_server):
    """The deployment the README describes: a remote by URL, an object store, two hosts; the CLI elsewhere."""
    queue = f"hosts-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    lanes = ["a", "b", "c", "d", "e", "f"]
    bare, url = bare_remote(tmp_path, {f"{lane}/x.txt": "0\n" for lane in lanes})
    main_before = git(bare, "rev-parse", "main")
    homes = [tmp_path / "host-1", tmp_path / "host-2"]
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)  # the starter's and this test's client: External Storage on, like workers
    workers = hosts(temporal_address, queue, homes, [reposwarm_home], s3_server.env())
    for w in workers:
        await w.ready()
    await polling(client, queue, len(workers))
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [
        {"lane": lane, "goal": f"Write {lane}/x.txt."} for lane in lanes]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {lane: {1: [
        turn((f"w-{lane}", "write_file", {"path": f"{lane}/x.txt", "content": f"{lane}\n", "reason": "The goal"})),
        finish(f"f-{lane}")]} for lane in lanes}})
    try:
        run_id = await start_run(client, url, lanes_file(tmp_path, lanes), script, plan=plan)
        result = await approve_and_wait(client, run_id)
    finally:
        for w in workers:
            w.stop()
    # The change is on the remote, the user's main untouched, the run's working branches gone from it.
    for lane in lanes:
        assert git(bare, "show", f"{result.delivered_branch}:{lane}/x.txt") == lane
    assert git(bare, "rev-parse", "main") == main_before
    assert git(bare, "for-each-ref", f"refs/heads/swarm/{run_id}/") == ""
    # Lanes ran on both hosts, each in its own clone of the remote.
    made = {str(h): {e["lane"] for e in home_ledger(h) if e["event"] == "helper_spawn"} for h in homes}
    assert all(made.values()), f"lanes did not spread over both hosts: {made}"
    assert set().union(*made.values()) == set(lanes)
    for home in homes:
        assert list((home / "repos").glob("*.git")), f"{home} kept no clone of the remote"
    # A CLI with an empty home of its own reads the run's ledger (the hosts' lines, one ledger) from the store.
    cli_home = tmp_path / "cli-home"
    cli_home.mkdir()
    env = {**os.environ, **s3_server.env(), "TEMPORAL_ADDRESS": temporal_address}
    out = subprocess.run([sys.executable, str(ROOT / "starter.py"), "report", run_id, "--json", "--home",
                          str(cli_home)], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["lanes"] and {lane["lane"] for lane in report["lanes"]} == set(lanes), report
    keys = [o["Key"] for o in s3_server.client().list_objects_v2(
        Bucket=s3_server.bucket, Prefix=f"{s3_server.prefix}/runs/{run_id}/").get("Contents", [])]
    assert any("/ledger/" in k for k in keys) and any("/store/" in k for k in keys) and \
        any("/review/" in k for k in keys), keys


async def test_a_lane_moved_off_a_lost_host_goes_on_with_its_stored_transcript(
        client, temporal_address, reposwarm_home, tmp_path, monkeypatch, s3_server):
    """With an object store, the lane's conversation survives its host: the first request on the new host carries
    the turns made on the lost one, and no turn is asked twice."""
    queue = f"hosts-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    bare, url = bare_remote(tmp_path, {"src/a.txt": "0\n", "src/b.txt": "0\n"})
    script = {"lanes": {"src": {1: [
        turn(("w1", "write_file", {"path": "src/a.txt", "content": "1\n", "reason": "First half of the goal"})),
        turn(("c1", "run_checks", {})),
        turn(("w2", "write_file", {"path": "src/b.txt", "content": "1\n", "reason": "Second half of the goal"})),
        finish("f1")]}}}
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"host_timeout_s": 3, "lanes": {"src": {"allowed_paths": ["src/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", SLOW_CHECK.format(s=3)]],
                                                "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-",
                                               "lanes": [{"lane": "src", "goal": "Write a, check, write b."}]})
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    homes = [tmp_path / "host-a", tmp_path / "host-b"]
    with FakeModelServer("openai", script) as fake:
        model_env = {"OPENAI_BASE_URL": fake.base_url, "OPENAI_API_KEY": "sk-hosts-test-0123456789"}
        workers = hosts(temporal_address, queue, homes, [reposwarm_home], {**s3_server.env(), **model_env})
        for w in workers:
            await w.ready()
        try:
            req = build_request(argparse.Namespace(repo=url, task="Write a and b", lanes=str(lanes), plan=str(plan),
                                                   model="openai:fake"))
            await start(client, req)
            await kill_the_lane_s_host(workers, homes)
            result = await approve_and_wait(client, req.run_id)
        finally:
            for w in workers:
                w.stop()
    moved = [b for b in fake.answered if any("resuming on another machine" in str(m.get("content"))
                                            for m in b["messages"] if m["role"] == "user")]
    assert moved, "no request after the move"
    first = json.dumps(moved[0]["messages"])
    assert '"w1"' in first and "First half of the goal" in first, "the conversation did not survive the move"
    # every lane turn was asked once: turns are counted by the assistant messages a request carries
    lane_turns = [sum(m["role"] == "assistant" for m in b["messages"]) for b in fake.answered
                  if "Goal for lane src" in json.dumps(b["messages"][:2])]
    assert len(lane_turns) == len(set(lane_turns)) == 4, lane_turns
    assert git(bare, "show", f"{result.delivered_branch}:src/a.txt") == "1"
    assert git(bare, "show", f"{result.delivered_branch}:src/b.txt") == "1"


async def test_a_host_killed_mid_lane_hands_its_lane_over_with_nothing_repeated(
        client, temporal_address, reposwarm_home, tmp_path, monkeypatch):
    queue = f"hosts-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    bare, url = bare_remote(tmp_path, {"src/a.txt": "0\n", "src/b.txt": "0\n"})
    homes = [tmp_path / "host-a", tmp_path / "host-b"]
    workers = hosts(temporal_address, queue, homes, [reposwarm_home], {})
    for w in workers:
        await w.ready()
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-",
                                               "lanes": [{"lane": "src", "goal": "Write a, check, write b."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"src": {1: [
        turn(("w1", "write_file", {"path": "src/a.txt", "content": "1\n", "reason": "First half of the goal"})),
        turn(("c1", "run_checks", {})),
        turn(("w2", "write_file", {"path": "src/b.txt", "content": "1\n", "reason": "Second half of the goal"})),
        finish("f1")]}}})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"host_timeout_s": 3, "lanes": {"src": {"allowed_paths": ["src/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", SLOW_CHECK.format(s=3)]],
                                                "timeout_s": 60}}}})
    try:
        run_id = await start_run(client, url, lanes, script, plan=plan)
        held = await kill_the_lane_s_host(workers, homes)
        killed_at = time.monotonic()
        await wait_for_phase(client, run_id, Phase.review, timeout=180)
        print(f"\nhost lost -> run at review in {time.monotonic() - killed_at:.1f}s")
        result = await approve_and_wait(client, run_id)
    finally:
        for w in workers:
            w.stop()
    lost_home, survivor_home = homes[held], homes[1 - held]
    survivor = home_ledger(survivor_home)
    lost = home_ledger(lost_home)
    # The survivor rebuilt the lane's worktree from the checkpoint the lost host pushed, and went on.
    assert any(e["event"] == "checkpoint_restore" and e["lane"] == "src" for e in survivor)
    # Nothing the lost host completed was done again: its tool calls are not in the survivor's ledger.
    done_there = {e["call_id"] for e in lost if e["event"] == "tool_call"}
    done_here = {e["call_id"] for e in survivor if e["event"] == "tool_call"}
    assert "w1" in done_there and "w1" not in done_here and "w2" in done_here
    asked = [e["call_id"] for e in lost + survivor if e["event"] == "model_call" and e.get("agent") == "src"
             and e.get("outcome") != "reused"]
    assert len(asked) == len(set(asked)), f"a model call was asked twice: {asked}"
    # Both halves are delivered, on the remote.
    assert git(bare, "show", f"{result.delivered_branch}:src/a.txt") == "1"
    assert git(bare, "show", f"{result.delivered_branch}:src/b.txt") == "1"
