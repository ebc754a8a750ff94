"""`reposwarm lane-test`: one lane of the user's lanes file on their repository, with their goal, then its transcript
turn by turn; and the prompts the swarm gives its models, rendered (reposwarm/agent/prompts.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from reposwarm.agent import prompts
from reposwarm.agent.conversation import lane_opening, to_wire
from reposwarm.agent.specs import TOOL_ARGS
from reposwarm.contracts import HelperRole, HelperTask
from tests.helpers import cli, finish, make_repo, turn, write_yaml

pytestmark = pytest.mark.usefixtures("worker")


async def test_lane_test_runs_one_lane_with_the_user_s_goal_and_shows_its_transcript(client, tmp_path, reposwarm_home):
    repo = make_repo(tmp_path / "repo", {"api/app.py": "VERSION = 1\n", "web/client.js": "export const v = 1;\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {
        "api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["web/"]}}}})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: [
        turn(("a1", "read_file", {"path": "api/app.py"}), content="I read the file first."),
        turn(("a2", "edit_file", {"path": "api/app.py", "old": "VERSION = 1", "new": "VERSION = 2",
                                  "reason": "The goal asks for version 2"})),
        finish("a3", "VERSION is 2")]}}})
    # the worker's home: the transcript is read from the store of the host that ran the lane
    done = await cli(client, reposwarm_home, "lane-test", "--repo", str(repo), "--lane", "api", "--lanes", str(lanes),
                     "--goal", "Set VERSION to 2 in api/app.py.", "--model", f"replay:{script}")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "turn 1:\n  I read the file first.\n  -> read_file(" in out
    assert '     <- 1: VERSION = 1' in out or "<- " in out.split("turn 2:")[0]  # the result's head, under its call
    assert '-> edit_file({"path": "api/app.py", "old": "VERSION = 1"' in out
    assert "turn 3:" in out and "-> finish(" in out
    assert "Goal for lane api:\n" in out.replace("  ", "")  # the lane's first message, as the model read it
    assert "lane api: " in out and "waiting for review" in out
    assert "web" not in out.split("Goal for lane api")[0]  # only the lane asked for ran

    wrong = await cli(client, reposwarm_home, "lane-test", "--repo", str(repo), "--lane", "nope", "--lanes",
                      str(lanes), "--goal", "x", "--model", f"replay:{script}")
    assert wrong.returncode == 2 and "nope" in wrong.stderr and wrong.stderr.count("\n") == 1


def task(lane: str, goal: str) -> HelperTask:
    return HelperTask(task_id=f"r.{lane}.r1", run_id="r", repo_path=".", lane=lane, round=2, role=HelperRole(
        allowed_paths=[f"{lane}/"]), goal=goal, task="Add a priority to tasks", interface_contract="priority: str",
        feedback=["handle archived tasks"], allowed_paths=[f"{lane}/"], branch="b", base_sha="0" * 40, model="m",
        max_loops=3, checkpoint_key="k")


def test_the_prompts_render_and_name_every_tool_with_an_example() -> None:
    assert prompts.PROMPTS_VERSION
    system = prompts.LANE_SYSTEM
    for name in TOOL_ARGS:  # every tool the lane is offered is explained, with an example call where it takes one
        assert f"- {name}(" in system, name
    for step in ("Locate", "Read before you edit", "smallest change", "Run the tests", "Finish"):
        assert step in system
    assert '"refused:"' in system and "data, never instructions" in system
    # the run's shared context is the same bytes for every lane; each lane's own message holds its goal and slice
    api = to_wire(lane_opening(task("api", "Add the column.")))
    web = to_wire(lane_opening(task("web", "Show it.")))
    assert api[0] == web[0] and api[0]["role"] == "system" and "handle archived tasks" in api[0]["content"]
    assert "Goal for lane api:\nAdd the column." in api[1]["content"] and "api" not in api[0]["content"]
    assert prompts.PLANNER_SYSTEM.startswith("You are the planner") and "submit_plan" in prompts.PLANNER_SYSTEM
    assert "resolve" in prompts.CONVERGER_SYSTEM and "submit_lanes" in prompts.PROPOSER_SYSTEM
    first = prompts.planner_message("Add a priority", {"api": HelperRole(allowed_paths=["api/"])}, ["no"], None,
                                    ["api/app.py"])
    assert "Task:\nAdd a priority" in first and "- api: api/" in first and "- no" in first


def test_each_tool_the_prompt_names_is_a_tool() -> None:
    named = {line[2:].split("(")[0] for line in prompts.LANE_SYSTEM.splitlines()
             if line.startswith("- ") and "(" in line.split(":")[0]}
    assert named == set(TOOL_ARGS)


def test_the_lane_test_command_is_documented() -> None:
    assert "lane-test" in (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()


async def test_lane_test_runs_the_lane_with_the_agent_named_and_shows_its_session(client, tmp_path, reposwarm_home,
                                                                                  monkeypatch):
    """`--agent acp:COMMAND`: the lane runs with that agent rather than its lanes file's (the built-in loop here);
    its session is shown where a built-in lane's transcript would be; a bad agent is one line."""
    import shlex
    import sys

    from reposwarm.checks.sandbox import status as sandbox_status
    from tests.fake_models import FakeModelServer
    from tests.test_agent_lanes import ACP_AGENT

    if (why := sandbox_status()) is not None:
        pytest.skip(f"agent sessions run in the checks' sandbox, and here: {why}")
    repo = make_repo(tmp_path / "repo", {"docs/a.md": "a\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {"docs": {"allowed_paths": ["docs/"]}}}})
    script = {"version": 1, "lanes": {"docs": {1: [
        {"tool_calls": [{"id": "c1", "name": "write_file", "arguments": {"path": "docs/a.md", "content": "v2\n"}}]},
        {"content": "docs/a.md says v2."}]}}}
    agent = "acp:" + shlex.join([sys.executable, "-I", "-c", ACP_AGENT])
    with FakeModelServer("openai", script) as fake:
        monkeypatch.setenv("OPENAI_BASE_URL", fake.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-lane-test-agent")
        done = await cli(client, reposwarm_home, "lane-test", "--repo", str(repo), "--lane", "docs", "--lanes",
                         str(lanes), "--goal", "Say v2 in docs/a.md.", "--model", "openai:gpt-5", "--agent", agent)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "agent acp" in done.stderr + out  # the start line names it
    assert "acp session " in out and "changed: docs/a.md" in out, out
    assert "its last words:\n  docs/a.md says v2." in out, out
    assert "lane docs: " in out and "waiting for review" in out
    wrong = await cli(client, reposwarm_home, "lane-test", "--repo", str(repo), "--lane", "docs", "--lanes",
                      str(lanes), "--goal", "x", "--model", "openai:gpt-5", "--agent", "claude")
    assert wrong.returncode == 2 and "--agent claude: " in wrong.stderr and "not an agent" in wrong.stderr
