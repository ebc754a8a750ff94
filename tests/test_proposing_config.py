"""The repository's configuration apart from its lanes (issue 45.2): a configuration-only reposwarm.yaml (or
--config FILE) whose profile, prices, delivery and defaults a run that proposes its lanes uses, and a repository
named by URL whose lanes are proposed on a worker, from its clone.

Real runs on the session's dev server and worker, the command line as a user runs it (a subprocess), the replay
model answering the proposal as the planner did for a real humanize commit (tests/real_shapes.py), and the
lanes writing the change; the delivered tree's own tests run after.
"""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from reposwarm.contracts import SwarmStatus
from reposwarm.lanes.loading import load_lanes_file
from tests.helpers import cli, finish, git, make_repo, turn, write_yaml
from tests.real_shapes import HUMANIZE, HUMANIZE_PROPOSAL
from tests.test_cli_errors import error_line, run_starter
from tests.test_proposing import approve_and_deliver
from workflows.swarm import SwarmWorkflow

TASK = "Give humanize.number.ordinal the right suffixes, test it and document it"
NUMBER = HUMANIZE["src/humanize/number.py"].replace(
    "def ordinal(value):\n    return f'{value}th'\n",
    "def ordinal(value):\n    if value % 100 in (11, 12, 13):\n        return f'{value}th'\n"
    "    return f\"{value}{ {1: 'st', 2: 'nd', 3: 'rd'}.get(value % 10, 'th')}\"\n")
TESTS = HUMANIZE["tests/test_number.py"] + "\n\ndef test_ordinal():\n    assert [humanize.ordinal(n) for n in (1, 2, 3, 4, 11)] == " \
                                            "['1st', '2nd', '3rd', '4th', '11th']\n"
DOCS = HUMANIZE["docs/number.md"] + "\n`ordinal(3)` is `3rd`.\n"


def write(call_id: str, path: str, content: str) -> dict[str, Any]:
    return turn((call_id, "write_file", {"path": path, "content": content, "reason": f"ordinals, in {path}"}))


LANES = {"number": {1: [write("n1", "src/humanize/number.py", NUMBER), finish("n2")]},
         "tests": {1: [write("t1", "tests/test_number.py", TESTS), finish("t2")]},
         "docs": {1: [write("d1", "docs/number.md", DOCS), finish("d2")]}}
# the configured checks: not the `python3 -m pytest -q` the repository's structure suggests
CONFIGURED = ["python3", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]


def script(tmp_path: Path, proposal: dict[str, Any] = HUMANIZE_PROPOSAL) -> Path:
    return write_yaml(tmp_path / "replay.yaml", {"version": 1, "proposer": turn(("p1", "submit_lanes", proposal)),
                                                 "lanes": LANES})


def proposal_lines(run_id: str) -> list[dict[str, Any]]:
    """The run's ledger lines about its proposal (the worker runs in this process: its home is this one's)."""
    from reposwarm.runs import ledger

    return [line for line in ledger.read(run_id) if line["event"] == "proposal"]


def run_id_of(done: subprocess.CompletedProcess[str]) -> str:
    """The run `run --yes --wait` started (it showed the proposal, then followed the run to its review)."""
    assert done.returncode == 0, done.stderr
    return next(line.split()[1] for line in done.stdout.splitlines() if line.startswith("run: "))


async def status_of(client: Any, run_id: str) -> SwarmStatus:
    return await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).query(SwarmWorkflow.status)


def delivered_tests_pass(repo: Path, branch: str, tmp_path: Path) -> None:
    tree = tmp_path / "delivered"
    git(repo, "worktree", "add", "-q", str(tree), branch)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=tree,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "2 passed" in done.stdout, done.stdout + done.stderr


async def test_a_configuration_without_lanes_gives_the_proposed_run_its_profile_prices_and_delivery(
        client, worker, tmp_path):
    repo = make_repo(tmp_path / "humanize", HUMANIZE)
    replay = script(tmp_path)
    bare = tmp_path / "team-remote.git"
    git(tmp_path, "init", "-q", "--bare", str(bare))
    model = f"replay:{replay.resolve()}"
    config = write_yaml(tmp_path / "team.yaml", {
        "swarm": {"max_parallel": 1, "max_review_rounds": 2},
        "validation": {"profile": "unit", "profiles": {
            "unit": {"commands": [CONFIGURED], "timeout_s": 120, "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}},
            "slow": {"commands": [["python3", "-c", "raise SystemExit(1)"]]}}},
        "prices": {model: {"input_per_mtok": 2.0, "output_per_mtok": 8.0}},
        "delivery": {"remote": f"file://{bare}"}})
    started = await cli(client, tmp_path / "cli", "run", "--repo", str(repo), "--task", TASK, "--model", model,
                        "--config", str(config), "--yes", "--wait")
    run_id = run_id_of(started)
    assert "est. cost" in started.stdout and "python3 -m pytest -q -p no:cacheprovider tests" in started.stdout, \
        started.stdout
    await approve_and_deliver(client, run_id)
    status = await status_of(client, run_id)
    proposal = status.proposal
    assert proposal is not None and proposal.problems == [] and proposal.attempts == 1, proposal
    # the configured profile, not the detected one; the lanes' estimates priced; the checks that ran
    assert proposal.profile is not None and proposal.profile.commands == [CONFIGURED]
    assert sorted(proposal.estimated_cost_usd) == ["docs", "number", "tests"]
    assert all(cost > 0 for cost in proposal.estimated_cost_usd.values())
    assert status.test_report is not None and [c.argv for c in status.test_report.commands] == [CONFIGURED]
    # delivered to the configured remote as well as the repository
    branch = status.delivered_branch or ""
    assert git(bare, "rev-parse", branch) == git(repo, "rev-parse", branch)
    assert git(repo, "show", f"{branch}:docs/number.md") == DOCS.strip()
    delivered_tests_pass(repo, branch, tmp_path)
    [line] = proposal_lines(run_id)
    assert line["lanes"] == ["number", "tests", "docs"] and line["problems"] == [] and line["warnings"] == []


async def test_the_repository_s_own_configuration_is_kept_in_the_proposal_written_as_a_lanes_file(
        client, worker, tmp_path):
    model = f"replay:{script(tmp_path).resolve()}"
    own = {"swarm": {"max_parallel": 2, "budget_wait_s": 60},
           "validation": {"profiles": {"default": {"commands": [CONFIGURED], "timeout_s": 90}}},
           "prices": {model: {"input_per_mtok": 1.0, "output_per_mtok": 4.0}}}
    repo = make_repo(tmp_path / "humanize", {**HUMANIZE, "reposwarm.yaml": yaml.safe_dump(own)})
    out = tmp_path / "proposed.yaml"
    written = await cli(client, tmp_path / "cli", "run", "--repo", str(repo), "--task", TASK, "--model", model,
                        "--write-lanes", str(out))
    assert written.returncode == 0, written.stderr
    assert "note: using the repository's own reposwarm.yaml" in written.stderr, written.stderr
    config = load_lanes_file(out)  # a lanes file: the repository's configuration with the proposed lanes
    assert list(config.swarm.lanes) == ["number", "tests", "docs"]
    assert config.swarm.lanes["tests"].depends_on == ["number"]
    assert config.swarm.max_parallel == 2 and config.swarm.budget_wait_s == 60
    assert config.validation.profiles["default"].commands == [CONFIGURED]
    assert config.validation.profiles["default"].timeout_s == 90
    assert config.prices[model].input_per_mtok == 1.0


async def test_a_repository_named_by_url_proposes_its_lanes_on_a_worker_from_its_clone(client, worker, tmp_path):
    work = make_repo(tmp_path / "work", HUMANIZE)
    bare = tmp_path / "humanize.git"
    git(tmp_path, "clone", "-q", "--bare", str(work), str(bare))
    url = f"file://{bare}"
    # the docs lane may also write a folder the task may create: what the guardrails cannot decide, a warning
    reply = copy.deepcopy(HUMANIZE_PROPOSAL)
    reply["lanes"][2]["allowed_paths"].append("docs/ordinals/")
    started = await cli(client, tmp_path / "cli", "run", "--repo", url, "--task", TASK, "--model",
                        f"replay:{script(tmp_path, reply).resolve()}", "--yes", "--wait")
    run_id = run_id_of(started)
    assert "proposed lanes (3" in started.stdout, started.stdout
    said = "swarm.lanes.docs.allowed_paths: 'docs/ordinals/' matches no tracked file"
    assert f"warning: {said}" in started.stdout, started.stdout  # under the proposal's table
    [line] = proposal_lines(run_id)
    assert line["problems"] == [] and line["warnings"] == [said], line
    await approve_and_deliver(client, run_id)
    status = await status_of(client, run_id)
    assert status.proposal is not None and status.proposal.problems == []
    assert sorted(s.lane for s in status.lanes) == ["docs", "number", "tests"]
    branch = status.delivered_branch or ""
    assert git(bare, "show", f"{branch}:src/humanize/number.py") == NUMBER.strip()
    # proposed from the worker's clone: the starter's home holds none
    assert not list((tmp_path / "cli").glob("repos/*.git"))
    delivered_tests_pass(bare, branch, tmp_path)


# --- what the command line refuses before anything starts ---


def test_the_repository_s_own_configuration_may_not_set_delivery(tmp_path: Path) -> None:
    own = {"validation": {"profiles": {"default": {"commands": [["python3", "-m", "pytest"]]}}},
           "delivery": {"remote": "https://example.com/elsewhere.git"}}
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n", "reposwarm.yaml": yaml.safe_dump(own)})
    line = error_line(run_starter("run", "--repo", str(repo), "--task", "x", "--model", "openai:gpt-4.1"))
    assert "the repository's own configuration may not set delivery.remote" in line and "--config FILE" in line


def test_lanes_and_config_together_are_refused_and_a_config_with_lanes_is_a_lanes_file(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "x = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}}}})
    both = error_line(run_starter("run", "--repo", str(repo), "--task", "x", "--lanes", str(lanes), "--config",
                                  str(lanes), "--model", "openai:gpt-4.1"))
    assert "--lanes and --config" in both
    # a --config that has lanes is read as the lanes file: --yes (for proposed lanes) is refused with it
    yes = error_line(run_starter("run", "--repo", str(repo), "--task", "x", "--config", str(lanes), "--model",
                                 "openai:gpt-4.1", "--yes"))
    assert "--yes is for a run with no lanes file" in yes


def test_a_configuration_s_problems_are_said_with_its_path_and_key(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"api/app.py": "x = 1\n"})
    bad = write_yaml(tmp_path / "team.yaml", {"validation": {"profiles": {"default": {"comands": [["pytest"]]}}}})
    line = error_line(run_starter("run", "--repo", str(repo), "--task", "x", "--config", str(bad), "--model",
                                  "openai:gpt-4.1"))
    assert str(bad) in line and "validation.profiles.default.comands" in line and "did you mean 'commands'" in line
    missing = error_line(run_starter("run", "--repo", str(repo), "--task", "x", "--config", str(tmp_path / "no.yaml"),
                                     "--model", "openai:gpt-4.1"))
    assert "no.yaml" in missing and "no such file" in missing

