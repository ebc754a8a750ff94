"""A run the server ended (cancelled, terminated) says so in `status --json`, not the phase it was in."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from reposwarm.cli.runs import build_request, start
from reposwarm.client import task_queue
from reposwarm.contracts import Phase
from tests.helpers import finish, make_repo, start_run, turn, wait_for_phase, write_yaml
from tests.test_anywhere import cli


def a_run(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-c", "import api.app"]]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "api/app.py exports NAME.",
                                               "lanes": [{"lane": "api", "goal": "Add NAME to api/app.py."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {r: [
        turn(("a1", "edit_file", {"path": "api/app.py", "old": "VERSION = 1\n", "new": "VERSION = 1\nNAME = 1\n",
                                  "reason": "Add NAME"})), finish("a2", "added NAME")] for r in (1, 2)}}})
    return repo, lanes, plan, script


async def test_a_terminated_run_is_not_shown_as_waiting_for_review(client, worker, temporal_address, tmp_path):
    repo, lanes, plan, script = a_run(tmp_path)
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.review, timeout=120)
    await client.get_workflow_handle(run_id).terminate("the reviewer gave up")
    done, _ = cli(temporal_address, task_queue(), tmp_path / "cli", "status", run_id, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["phase"] == "terminated"
    assert "terminated" in done.stderr and "(it was in phase review)" in done.stderr


async def test_list_is_newest_first_and_leaves_dry_runs_out_unless_asked(client, worker, temporal_address, tmp_path):
    repo, lanes, plan, script = a_run(tmp_path)
    first = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, first, Phase.review, timeout=120)
    dry = build_request(argparse.Namespace(repo=str(repo), task="only a plan", lanes=str(lanes), plan=str(plan),
                                           model=f"replay:{script}"))
    dry.dry_run = True
    await start(client, dry)
    await client.get_workflow_handle(dry.run_id).result()
    second = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, second, Phase.review, timeout=120)
    for run in (first, second):
        await client.get_workflow_handle(run).terminate("test done")
    listed, _ = cli(temporal_address, task_queue(), tmp_path / "cli", "list", "--repo", str(repo))
    assert listed.returncode == 0, listed.stderr
    runs = [line.split()[0] for line in listed.stdout.splitlines()[1:] if line.startswith("reposwarm-")]
    assert runs == [second, first], listed.stdout
    assert "(1 dry run(s) not shown: list --all)" in listed.stdout
    every, _ = cli(temporal_address, task_queue(), tmp_path / "cli", "list", "--repo", str(repo), "--all")
    assert [line.split()[0] for line in every.stdout.splitlines()[1:]] == [second, dry.run_id, first], every.stdout
    dry_line = next(line for line in every.stdout.splitlines() if line.startswith(dry.run_id))
    assert "only a plan" in dry_line, every.stdout  # with its task (RepoSwarmTask, set by the client at start)
