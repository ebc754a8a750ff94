"""starter.py gc removes only worktrees whose work is safe on a branch, and says what it keeps."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

import pytest

from reposwarm.contracts import Phase
from reposwarm.runs.store import run_dir
from tests.helpers import ROOT, finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml


@pytest.mark.usefixtures("worker")
async def test_gc_keeps_what_is_not_safe_and_removes_the_rest(client, temporal_address, tmp_path):
    repo = make_repo(tmp_path / "repo", {"a/f.txt": "0\n", "b/f.txt": "0\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"a": {"allowed_paths": ["a/"]},
                                                                     "b": {"allowed_paths": ["b/"]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [
        {"lane": "a", "goal": "Write 1 to a."}, {"lane": "b", "goal": "Write 1 to b."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {n: {1: [
        turn((f"{n}1", "write_file", {"path": f"{n}/f.txt", "content": "1\n", "reason": "Write the one, as asked"})),
        finish(f"{n}2")]} for n in "ab"}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.review)
    await client.get_workflow_handle(run_id).terminate("abandoned by its reviewer")
    lanes_dir = run_dir(run_id) / "lanes"
    (lanes_dir / "b" / "b" / "f.txt").write_text("work in progress\n")  # uncommitted: must be kept

    def gc(*args: str) -> str:
        out = subprocess.run([sys.executable, str(ROOT / "starter.py"), "gc", *args], cwd=ROOT, capture_output=True,
                             text=True, timeout=60, env={**os.environ, "TEMPORAL_ADDRESS": temporal_address})
        assert out.returncode == 0, out.stderr
        return out.stdout

    listed = await asyncio.to_thread(gc)
    assert f"remove {lanes_dir / 'a'}: its commits are on swarm/{run_id}/a" in listed
    assert f"keep   {lanes_dir / 'b'}: uncommitted changes" in listed
    assert (lanes_dir / "a").exists()  # listing removes nothing
    await asyncio.to_thread(gc, "--yes")
    assert not (lanes_dir / "a").exists() and (lanes_dir / "b" / "b" / "f.txt").exists()
    assert git(repo, "show", f"swarm/{run_id}/a:a/f.txt") == "1"  # the work is still on its branch
