"""Worktree affinity across hosts: a lane's work goes to the host holding its worktree; when that host dies,
the worktree is rebuilt on another host from the lane's last checkpoint commit and the lane goes on."""

from __future__ import annotations

import sys
import time
import uuid

import pytest

from reposwarm.contracts import Phase
from tests.helpers import (
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
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", SLOW_CHECK.format(s=3)]],
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
        held = await kill_the_lane_s_host(workers, homes)
        killed_at = time.monotonic()
        survivor_home = homes[1 - held]
        await wait_for_phase(client, run_id, Phase.review, timeout=180)
        print(f"\nhost lost -> run at review in {time.monotonic() - killed_at:.1f}s")
        result = await approve_and_wait(client, run_id)
    finally:
        for w in workers:
            w.stop()
    # The survivor rebuilt the worktree from the branch (a checkpoint restore) and finished the lane.
    restored = [e for e in home_ledger(survivor_home) if e["event"] == "checkpoint_restore"]
    assert restored and restored[0]["lane"] == "src"
    assert any(e["event"] == "tool_call" and e["call_id"] == "w2" for e in home_ledger(survivor_home))
    # Both halves are delivered: the one committed on the lost host, and the one made after.
    assert git(repo, "show", f"{result.delivered_branch}:src/a.txt") == "1"
    assert git(repo, "show", f"{result.delivered_branch}:src/b.txt") == "1"
