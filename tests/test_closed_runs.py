"""A run the server ended (cancelled, terminated) says so in `status --json`, not the phase it was in."""

from __future__ import annotations

import json
import sys

from reposwarm.client import task_queue
from reposwarm.contracts import Phase
from tests.helpers import finish, make_repo, start_run, turn, wait_for_phase, write_yaml
from tests.test_anywhere import cli


async def test_a_terminated_run_is_not_shown_as_waiting_for_review(client, worker, temporal_address, tmp_path):
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "import api.app"]]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports NAME.",
                                               "lanes": [{"lane": "api", "goal": "Add NAME to api/app.py."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n", "new": "VERSION = 1\nNAME = 1\n",
                                  "reason": "Add NAME"})), finish("a2", "added NAME")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.review, timeout=120)
    await client.get_workflow_handle(run_id).terminate("the reviewer gave up")
    done, _ = cli(temporal_address, task_queue(), tmp_path / "cli", "status", run_id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["phase"] == "terminated"
    assert "terminated" in done.stderr and "(it was in phase review)" in done.stderr
