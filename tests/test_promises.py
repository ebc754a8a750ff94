"""Promises of the README that no other test held: each test here fails when its behaviour is removed.

Real runs throughout: the session's dev server and in-process worker (or a worker of the test's own, where it
must be stopped), real git repositories, real sandboxed checks, and the replay model's scripted replies.
"""

from __future__ import annotations

import asyncio
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.client import WorkflowFailureError, WorkflowUpdateFailedError

from reposwarm.cli.worker import make_worker
from reposwarm.contracts import LaneStatus, Phase, Plan, ReviewDecision
from reposwarm.runs import ledger
from tests import test_converge as converge
from tests.helpers import finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from tests.test_review import bump, one_lane
from tests.test_validation import BREAK, FIX, OPS, TESTS
from workflows.swarm import SwarmWorkflow

pytestmark = [pytest.mark.usefixtures("worker"), pytest.mark.timeout(300)]

PYTEST_CMD = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml={junit}", "tests"]
TEXT = "def shout(s):\n    return s.upper()\n"
TEXT_TESTS = """import unittest

from util.text import shout


class TextTest(unittest.TestCase):
    def test_shout(self):
        self.assertEqual(shout("a"), "A")
"""


def calc_repo(tmp_path: Path, extra: dict[str, str] | None = None) -> Path:
    """calc/ops.py and its tests (one of them broken on the base already), plus any other files."""
    return make_repo(tmp_path / "repo", {"calc/__init__.py": "", "calc/ops.py": OPS, "tests/__init__.py": "",
                                         "tests/test_ops.py": TESTS, **(extra or {})})


def tool_calls(run_id: str) -> dict[str, list[str]]:
    """The ids of the tool calls each lane ran, from the run's ledger: each dispatch's script has ids of its own, so
    they say which dispatches of a lane ran (whether a lane is one workflow per dispatch or one for the run)."""
    calls: dict[str, list[str]] = {}
    for e in ledger.read(run_id):
        if e["event"] == "tool_call":
            calls.setdefault(e["lane"], []).append(e["call_id"])
    return calls


async def test_a_red_check_goes_back_only_to_the_lane_that_broke_it(client, tmp_path):
    """Blame across lanes: of two lanes, only calc breaks a test (tests/test_ops.py imports calc.ops); util's edit
    is harmless. The gate's repair goes to calc alone: calc is dispatched a second time (attempt 2, its "1.2"
    script runs), util is not. Catches attribution that blames every lane that changed something (util would be
    redone), that blames the wrong lane, or a repair dispatch that re-runs the whole round."""
    repo = calc_repo(tmp_path, {"util/__init__.py": "", "util/text.py": TEXT, "tests/test_text.py": TEXT_TESTS})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_parallel": 2, "max_helper_loops": 3, "max_consecutive_test_fails": 3, "lanes": {
            "calc": {"allowed_paths": ["calc/"]}, "util": {"allowed_paths": ["util/"]}}},
        "validation": {"profiles": {"default": {"commands": [PYTEST_CMD], "timeout_s": 120,
                                                "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "calc.ops keeps add and mul; util.text shout.",
                                               "lanes": [{"lane": "calc", "goal": "Add sub(a, b) to calc/ops.py."},
                                                         {"lane": "util", "goal": "Document shout."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        "calc": {1: [BREAK, finish("b2", "sub added (or so I think)")], "1.2": [FIX, finish("f2", "mul fixed")]},
        "util": {1: [turn(("u1", "edit_file", {"path": "util/text.py", "old": "def shout(s):\n",
                                               "new": "def shout(s):\n    \"\"\"s in capitals.\"\"\"\n",
                                               "reason": "Document shout as the goal says"})),
                     finish("u2", "documented")],
                 # only played if util were wrongly sent back: the run then still reaches review, and the
                 # assertions below say what went wrong
                 "1.2": [turn(("u3", "read_file", {"path": "util/text.py"})), finish("u4", "redone for nothing")]},
    }})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=180)

    assert status.review.validations[0].startswith("round 1 check 1") and "red: 1 new failure" in \
        status.review.validations[0], status.review.validations
    assert status.review.test_report.passed, status.review.test_report.failures
    attempts = {s.lane: (s.attempt, s.state) for s in status.lanes}
    assert attempts == {"calc": (2, "merged"), "util": (1, "merged")}, attempts
    calls = tool_calls(run_id)
    assert calls["calc"] == ["b1", "f1"], calls  # its first dispatch, then its repair
    assert calls["util"] == ["u1"], f"util was sent back though blameless: {calls}"
    checks = [e for e in ledger.read(run_id) if e["event"] == "validation" and e["label"] != "baseline"]
    assert checks[0]["failures"] == ["tests.test_ops.OpsTest.test_mul"], checks[0]  # one new failure, calc's
    merged = git(repo, "show", f"{status.integration_sha}:util/text.py")
    assert "s in capitals" in merged and "def sub(a, b)" in git(repo, "show", f"{status.integration_sha}:calc/ops.py")
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_turn_and_wall_time_budgets_end_a_lane_with_their_reason(client, tmp_path):
    """Budgets are hard: a lane with max_turns 2 stops after its second turn ("turn budget of 2 used up"), and
    a lane with max_wall_s 1 stops at the next turn once a second has passed ("wall-time budget of 1s used
    up"). Each script would go on to finish (status done) without the budget, so removing either check, or
    changing its reason, fails here. Both lanes keep their work so far, merged."""
    repo = make_repo(tmp_path / "repo", {"turns/a.txt": "0\n", "clock/a.txt": "0\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_parallel": 2, "lanes": {
            "turns": {"allowed_paths": ["turns/"], "max_turns": 2},
            "clock": {"allowed_paths": ["clock/"], "max_wall_s": 1}}},
        "validation": {"profile": "default", "profiles": {
            "default": {"commands": [[sys.executable, "-c", "pass"]], "timeout_s": 60},
            # a lane's run_checks of this profile takes two seconds: past clock's wall-time budget
            "slow": {"commands": [[sys.executable, "-c", "import time; time.sleep(2)"]], "timeout_s": 60}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "-", "lanes": [
        {"lane": "turns", "goal": "Write 1 to turns/a.txt."}, {"lane": "clock", "goal": "Write 1 to clock/a.txt."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        "turns": {1: [turn(("t1", "write_file", {"path": "turns/a.txt", "content": "1\n",
                                                 "reason": "Write 1 as the goal says"})),
                      turn(("t2", "read_file", {"path": "turns/a.txt"})),
                      turn(("t3", "read_file", {"path": "turns/a.txt"})),
                      finish("t4", "would have finished at turn 4")]},
        "clock": {1: [turn(("c1", "write_file", {"path": "clock/a.txt", "content": "1\n",
                                                 "reason": "Write 1 as the goal says"}),
                           ("c2", "run_checks", {"profile": "slow"})),
                      finish("c3", "would have finished at turn 2")]},
    }})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=120)
    lanes_by_name = {lane.lane: lane for lane in status.review.lanes}

    turns = lanes_by_name["turns"]
    assert turns.status == LaneStatus.budget_exhausted, (turns.status, turns.reason)
    assert turns.reason == "turn budget of 2 used up"
    assert turns.turns == 2
    clock = lanes_by_name["clock"]
    assert clock.status == LaneStatus.budget_exhausted, (clock.status, clock.reason)
    assert clock.reason == "wall-time budget of 1s used up"
    assert clock.turns <= 1 and clock.summary == clock.reason
    model_calls = [e["agent"] for e in ledger.read(run_id) if e["event"] == "model_call"]
    assert model_calls.count("turns") == 2 and model_calls.count("clock") <= 1, model_calls
    # the work done within the budgets is kept and merged
    states = {s.lane: s.state for s in status.lanes}
    assert states == {"turns": "merged (budget exhausted)", "clock": "merged (budget exhausted)"}, states
    assert git(repo, "show", f"{status.integration_sha}:turns/a.txt") == "1"
    if clock.turns == 1:  # (on a slow machine the worktree alone can use up its second)
        assert git(repo, "show", f"{status.integration_sha}:clock/a.txt") == "1"
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_on_red_fail_ends_the_run_failed_after_the_rollback(client, tmp_path):
    """`swarm.on_red: fail`: after MAX_CONSECUTIVE_TEST_FAILS red checks in a row the integration branch goes
    back to the last green state and the run fails instead of going to review. Catches on_red being ignored
    (the run would wait at review) and a failure that skips the rollback (the branch would hold the red state)."""
    repo = calc_repo(tmp_path)
    base = git(repo, "rev-parse", "HEAD")
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"on_red": "fail", "max_consecutive_test_fails": 1, "lanes": {"calc": {"allowed_paths": ["calc/"]}}},
        "validation": {"profiles": {"default": {"commands": [PYTEST_CMD], "timeout_s": 120,
                                                "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "calc.ops keeps add and mul.",
                                               "lanes": [{"lane": "calc", "goal": "Add sub(a, b) to calc/ops.py."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"calc": {
        1: [BREAK, finish("b2")], "1.2": [FIX, finish("f2")]}}})  # a repair, if the gate wrongly asked for one
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.failed, Phase.review, timeout=180)
    assert status.phase == Phase.failed, f"a red gate with on_red: fail went to {status.phase.value}"

    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    with pytest.raises(WorkflowFailureError) as failed:
        await handle.result()
    assert "validation failed 1 times in a row; rolled back to" in str(failed.value.cause)
    assert status.error.startswith("validation failed 1 times in a row; rolled back to " + base[:12])
    assert status.integration_sha == base
    assert git(repo, "rev-parse", f"swarm/{run_id}/integration") == base
    red = git(repo, "for-each-ref", "--format=%(refname)", f"refs/reposwarm/{run_id}/rolled-back/")
    assert red and "a * b + 1" in git(repo, "show", f"{red}:calc/ops.py")  # the red state is kept
    assert tool_calls(run_id)["calc"] == ["b1"]  # failed at once, no repair dispatched first


async def test_rejecting_max_review_rounds_times_ends_the_run(client, tmp_path):
    """`swarm.max_review_rounds`: with a limit of 2, the first rejection plans round 2; the second ends the run,
    failed with "the review round limit is reached". Catches a limit that is ignored (a third round would
    start) or off by one (the first rejection would end the run)."""
    repo, lanes, plan = one_lane(tmp_path, swarm={"max_review_rounds": 2})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {
        1: bump(), 2: [turn(("n1", "read_file", {"path": "api/app.py"})), finish("n2", "nothing more to do")],
        3: [turn(("n3", "read_file", {"path": "api/app.py"})), finish("n4", "a third round")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await wait_for_phase(client, run_id, Phase.review)
    again = Plan(interface_contract="api/app.py exports VERSION.", lanes=[{"lane": "api", "goal": "Check VERSION."}])
    receipt = await handle.execute_update(SwarmWorkflow.review, ReviewDecision(
        approve=False, comment="Check it once more.", plan=again, reviewer="ann"))
    assert receipt.round == 1 and receipt.phase != Phase.failed
    second = await wait_for_phase(client, run_id, Phase.review)
    assert second.round == 2

    await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=False, comment="Still not it.",
                                                                     plan=again, reviewer="ann"))
    with pytest.raises(WorkflowFailureError) as failed:  # (bounded: an ignored limit would wait at review again)
        await asyncio.wait_for(handle.result(), timeout=30)
    assert str(failed.value.cause) == "rejected 2 times; the review round limit is reached"
    final = await handle.query(SwarmWorkflow.status)
    assert final.phase == Phase.failed and final.round == 2
    assert final.error == "rejected 2 times; the review round limit is reached"
    assert [(d.round, d.approve) for d in final.decisions] == [(1, False), (2, False)]
    assert tool_calls(run_id)["api"] == ["v1", "n1"]  # rounds 1 and 2 ran, no third


async def test_a_second_decision_for_the_same_round_is_refused(client, tmp_path, monkeypatch):
    """The review Update's validator refuses a second decision for the same round ("round 1 already has a
    decision"). Two approvals wait at the server while no worker runs, so both reach the run in one workflow
    task (the only way two decisions can meet one round: any taken decision ends the review phase in the task
    that takes it). Exactly one is taken; without the check both would be accepted, and the later one would
    silently replace the earlier."""
    queue = f"promises-{uuid.uuid4().hex[:10]}"  # a queue of this test's own, so its worker can be stopped
    monkeypatch.setenv("REPOSWARM_TASK_QUEUE", queue)
    repo, lanes, plan = one_lane(tmp_path)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: bump()}}})
    async with make_worker(client, queue):
        run_id = await start_run(client, repo, lanes, script, plan=plan)
        await wait_for_phase(client, run_id, Phase.review)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    # no worker polls the queue now: both decisions are held by the server
    ann = asyncio.create_task(handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann")))
    await asyncio.sleep(0.5)
    bob = asyncio.create_task(handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="bob")))
    await asyncio.sleep(2)
    assert not ann.done() and not bob.done()
    async with make_worker(client, queue):
        outcomes = dict(zip(["ann", "bob"], await asyncio.gather(ann, bob, return_exceptions=True), strict=True))
        result = await handle.result()
        final = await handle.query(SwarmWorkflow.status)
    refused = {who: o for who, o in outcomes.items() if isinstance(o, BaseException)}
    assert len(refused) == 1, f"expected one decision taken and one refused, got {outcomes}"
    (loser, err), = refused.items()
    assert isinstance(err, WorkflowUpdateFailedError), repr(err)
    assert err.cause.message == "round 1 already has a decision", err.cause.message
    winner = "bob" if loser == "ann" else "ann"
    assert outcomes[winner].approve and outcomes[winner].round == 1
    assert [d.reviewer for d in final.decisions] == [winner]
    assert result.delivered_branch and git(repo, "show", f"{result.delivered_branch}:api/app.py") == "VERSION = 2"


@pytest.mark.parametrize("answer, why", [
    ({"files": [{"path": "app/greet.py", "content": 'def greet(name)\n    return "hello, " + name.title(\n'}],
      "explanation": "merged both"}, "app/greet.py does not parse any more"),
    ('{"files": [{"path": "app/greet.py", "content": "def greet(name):', "converger answer refused: "),
], ids=["file-does-not-parse", "resolve-call-does-not-parse"])
async def test_a_converger_answer_that_does_not_parse_is_refused_and_the_lane_redone(client, tmp_path, answer, why):
    """A conflict's resolution is taken only if the resolved file still parses, and only from a well-formed resolve
    call. Here the converger answers with Python that does not parse, or with resolve arguments that are not
    JSON: the answer is refused (said in the resolutions), nothing of it lands on the integration branch, and
    the conflicting lane is redone on top of the other's work. Catches a converger answer taken unchecked (the
    broken file would be merged and no lane redone) and a refusal that drops the lane instead of redoing it."""
    redo_b, redo_a = converge.redo_scripts()
    reply = {"tool_calls": [{"id": "c1", "name": "resolve", "arguments": answer}]}
    repo, lanes, plan, script = converge.setup(tmp_path, {"converger": {1: [reply]}, "lanes": {
        "a": {1: converge.lane_a(), **redo_a}, "b": {1: converge.lane_b(), **redo_b}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=120)

    assert len(status.resolutions) == 1 and why in status.resolutions[0], status.resolutions
    assert "converger resolved" not in status.resolutions[0]
    redone = [s for s in status.lanes if s.attempt == 2]
    assert len(redone) == 1 and redone[0].state == "merged", status.lanes
    redo_call = {"b": "r1", "a": "s1"}[redone[0].lane]  # the first tool call of its "1.2" script
    assert redo_call in tool_calls(run_id)[redone[0].lane]
    assert git(repo, "show", f"{status.integration_sha}:app/greet.py") == converge.BOTH.strip()
    log = git(repo, "log", "--format=%s", status.integration_sha)
    assert "reposwarm converger" not in log  # the refused answer never landed
    assert [e["resolved"] for e in ledger.read(run_id) if e["event"] == "resolution"] == [False]
    assert status.review.test_report.passed
    await client.get_workflow_handle(run_id).terminate("test done")
    converge.all_lane_commits_reachable(repo, run_id)
