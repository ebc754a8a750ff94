"""Worktree affinity across hosts: a lane's work goes to the host holding its worktree; when that host dies,
the worktree is rebuilt on another host from the lane's last checkpoint commit and the lane goes on."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from reposwarm.contracts import Phase, ReviewDecision
from tests.helpers import WorkerProcess, finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.faults


def ledger_of(home: Path) -> list[dict]:
    return [json.loads(line) for f in home.glob("runs/*/ledger.jsonl") for line in f.read_text().splitlines()]


async def test_a_lost_host_is_replaced_from_the_last_checkpoint(client, temporal_address, tmp_path, monkeypatch):
    queue = f"hosts-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    homes = [tmp_path / "host-a", tmp_path / "host-b"]
    # two homes on one machine are two hosts only with host queues (auto picks the shared one on loopback)
    workers = [WorkerProcess(temporal_address, queue, home, env={"REPOSWARM_AFFINITY": "host"}).start()
               for home in homes]
    for w in workers:
        await w.ready()
    repo = make_repo(tmp_path / "repo", {"src/a.txt": "0\n", "src/b.txt": "0\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"host_timeout_s": 3, "lanes": {"src": {"allowed_paths": ["src/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "import time; time.sleep(2)"]],
                                                "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-",
                                               "lanes": [{"lane": "src", "goal": "Write a, check, write b."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"src": {1: [
        turn(("w1", "write_file", {"path": "src/a.txt", "content": "1\n", "reason": "First half of the goal"})),
        turn(("c1", "run_checks", {})),
        turn(("w2", "write_file", {"path": "src/b.txt", "content": "1\n", "reason": "Second half of the goal"})),
        finish("f1")]}}})
    try:
        run_id = await start_run(client, repo, lanes, script, plan=plan)
        # find the host that made the lane's worktree, and kill it once the first turn is committed
        holder = None
        for _ in range(300):
            for w, home in zip(workers, homes, strict=True):
                if any(e["event"] == "checkpoint" for e in ledger_of(home)):
                    holder = w
            if holder:
                break
            await asyncio.sleep(0.1)
        assert holder is not None, "the lane never committed its first turn"
        os.killpg(holder.proc.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        survivor_home = homes[1 - workers.index(holder)]
        await wait_for_phase(client, run_id, Phase.review, timeout=180)
        print(f"\nhost lost -> run at review in {time.monotonic() - killed_at:.1f}s")
        handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
        await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True))
        result = await handle.result()
    finally:
        for w in workers:
            w.stop()
    # The survivor rebuilt the worktree from the branch (a checkpoint restore) and finished the lane.
    restored = [e for e in ledger_of(survivor_home) if e["event"] == "checkpoint_restore"]
    assert restored and restored[0]["lane"] == "src"
    assert any(e["event"] == "tool_call" and e["call_id"] == "w2" for e in ledger_of(survivor_home))
    # Both halves are delivered: the one committed on the lost host, and the one made after.
    assert git(repo, "show", f"{result.delivered_branch}:src/a.txt") == "1"
    assert git(repo, "show", f"{result.delivered_branch}:src/b.txt") == "1"
