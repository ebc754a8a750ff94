"""What a reviewer (or anyone able to signal a run) sends can never wedge it (issue 30.6), a reviewer's plan
only narrows slices (30.3), and approving a red round must say so (31.4).

Each malformed decision goes in twice: as the Update, which refuses it with its reason, and as the Signal the
Web UI sends, which the run records in `ignored_signals`. After all of them the run still answers its query
and takes a proper approval.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import WorkflowUpdateFailedError
from temporalio.service import RPCError

from reposwarm.cli.common import UserError
from reposwarm.cli.runs import decide
from reposwarm.contracts import Phase, ReviewDecision, Verdict
from tests.helpers import finish, git, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = [pytest.mark.usefixtures("worker"), pytest.mark.timeout(300)]

WIDE_PLAN = {"interface_contract": "anything", "lanes": [{"lane": "api", "goal": "Write anywhere.",
                                                          "allowed_paths": ["**"]}]}
GLOB_PLAN = {"interface_contract": "anything", "lanes": [{"lane": "api", "goal": "Write the admin area.",
                                                          "allowed_paths": ["services/a*/"]}]}
GHOST_PLAN = {"interface_contract": "anything", "lanes": [{"lane": "ghost", "goal": "Haunt."}]}
# Each: the payload, and words its refusal must hold.
MALFORMED: list[tuple[dict[str, Any], str]] = [
    ({"approve": True, "not_after": "garbage"}, "not_after"),
    ({"approve": True, "not_after": "2026-12-01T10:00:00"}, "time zone"),
    ({"approve": True, "not_after": "0001-01-01T00:00:00+23:59"}, "out of range"),
    ({"approve": "maybe"}, "approve"),
    ({"approve": 1}, "approve"),
    ({"approve": True, "comment": "x" * 20_001}, "comment"),
    ({"approve": True, "surprise": 1}, "surprise"),
    ({"approve": False, "comment": "widen it", "plan": WIDE_PLAN}, "may not write"),
    ({"approve": False, "comment": "widen it", "plan": GLOB_PLAN}, "services/ax/x"),
    ({"approve": False, "comment": "haunt it", "plan": GHOST_PLAN}, "unknown lane 'ghost'"),
    ({"approve": False, "comment": "\x1b]0;owned\x07\r\x1b[2J", "reviewer": "\x1b[31mmallory\x07"}, "needs a comment"),
]


def two_lanes(tmp_path: Path, loops: int = 1, **validation: Any) -> tuple[Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"services/a/app.py": "VERSION = 1\n", "services/admin/keys.py": "K = 1\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"max_helper_loops": loops, "lanes": {
        "api": {"allowed_paths": ["services/a/"]}, "admin": {"allowed_paths": ["services/admin/"]}}},
        **validation})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "services/a/app.py exports VERSION.",
                                               "lanes": [{"lane": "api", "goal": "Set VERSION to 2."}]})
    return repo, lanes, plan


def bump(summary: str = "VERSION is 2", reason: str = "Set VERSION to 2 as the goal says") -> list[dict]:
    return [turn(("v1", "write_file", {"path": "services/a/app.py", "content": "VERSION = 2\n", "reason": reason})),
            finish("v2", summary)]


async def test_no_malformed_decision_wedges_the_run(client, tmp_path):
    repo, lanes, plan = two_lanes(tmp_path)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: bump()}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.review)
    handle = client.get_workflow_handle(run_id)

    for payload, words in MALFORMED:  # the Update: refused, with its reason
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("review", payload)
        message = str(refused.value.cause)
        if words in ("not_after", "approve", "comment", "surprise", "time zone", "out of range"):
            assert "review" in message or words in message, (payload, message)  # decoding refused it
        else:
            assert words in message, (payload, message)

    for payload, _ in MALFORMED:  # the Signal: recorded, never a failed task
        await handle.signal("review_signal", payload)
    await handle.signal("review_signal", "garbage")  # not even an object
    await handle.signal("review_signal", ["approve", True])
    too_big = {"approve": True, "comment": "x" * 2_500_000}
    try:
        await handle.signal("review_signal", too_big)
        sent_big = True
    except RPCError as err:  # Temporal refuses a payload over its limit before the run sees it
        assert "size" in str(err).lower() or "limit" in str(err).lower() or "large" in str(err).lower(), err
        sent_big = False

    status = await handle.query(SwarmWorkflow.status)  # still answering
    expected = len(MALFORMED) + 2 + sent_big
    for _ in range(50):
        if len(status.ignored_signals) >= expected:
            break
        status = await handle.query(SwarmWorkflow.status)
    ignored = status.ignored_signals
    assert len(ignored) == expected, ignored
    assert status.phase == Phase.review and not status.decisions
    joined = "\n".join(ignored)
    for _, words in MALFORMED:
        assert words in joined, (words, ignored)
    assert sum("not a review decision" in why for why in ignored) >= 2 + 7  # the payloads that did not decode
    assert not any(c in joined for c in "\x1b\x07\r\x9b\x9d"), ignored
    assert all(len(why) < 2_000 for why in ignored)  # a 2.5 MB comment is not copied into the status

    # A slice the reviewer's plan would have widened is untouched, and a proper approval is still taken.
    receipt = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).execute_update(
        SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann\x1b]0;t\x07"))
    assert receipt.approve
    result = await client.get_workflow_handle_for(SwarmWorkflow.run, run_id).result()
    assert result.delivered_branch
    final = await handle.query(SwarmWorkflow.status)
    assert final.decisions[-1].reviewer == "ann"
    assert git(repo, "show", f"{result.delivered_branch}:services/admin/keys.py") == "K = 1"


async def test_a_reviewer_s_plan_that_narrows_runs_and_one_that_widens_never_does(client, tmp_path):
    repo, lanes, plan = two_lanes(tmp_path, loops=3)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {
        1: bump(), 2: [turn(("n1", "write_file", {"path": "services/a/core/x.py", "content": "X = 1\n",
                                                  "reason": "Add X inside the narrowed slice"})), finish("n2")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    await wait_for_phase(client, run_id, Phase.review)
    handle = client.get_workflow_handle(run_id)
    await handle.signal("review_signal", {"approve": False, "comment": "admin too", "plan": GLOB_PLAN})
    narrow = {"interface_contract": "core", "lanes": [{"lane": "api", "goal": "Add X.",
                                                      "allowed_paths": ["services/a/core/"]}]}
    typed = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    await typed.execute_update(SwarmWorkflow.review, ReviewDecision.model_validate(
        {"approve": False, "comment": "only core", "plan": narrow}))
    second = await wait_for_phase(client, run_id, Phase.planning, Phase.running_lanes, Phase.validating)
    second = await wait_for_phase(client, run_id, Phase.review)
    assert second.round == 2 and "services/ax/x" in second.ignored_signals[0]
    changed = git(repo, "diff", "--name-only", second.review.base_sha, second.integration_sha).split()
    assert "services/a/core/x.py" in changed and not any(p.startswith("services/admin/") for p in changed)
    await typed.terminate("test done")


CHECK = [sys.executable, "-c", "import sys; sys.path.insert(0, 'services/a'); import app; "
         "sys.exit(0 if app.VERSION == 1 else 1)"]


async def test_approving_a_red_round_needs_accept_red(client, tmp_path):
    repo, lanes, plan = two_lanes(tmp_path, validation={"profiles": {"default": {"commands": [CHECK]}}})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"api": {1: bump()}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=120)
    report = status.review.test_report
    assert report is not None and report.verdict_of == Verdict.failed
    typed = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await typed.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="ann"))
    message = refused.value.cause.message
    assert message.startswith("checks FAILED in round 1") and "--accept-red" in message, message
    await client.get_workflow_handle(run_id).signal("review_signal", {"approve": True})
    with pytest.raises(UserError) as said:  # `reposwarm approve` says it before sending anything
        await decide(client, run_id, ReviewDecision(approve=True, reviewer="ann"))
    assert "--accept-red" in str(said.value)
    details = str(await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata"))
    assert f"reposwarm approve {run_id} --accept-red" in details and '\\"accept_red\\": true' in details, details
    status = await typed.query(SwarmWorkflow.status)
    assert status.phase == Phase.review and "--accept-red" in status.ignored_signals[-1]

    answer = await decide(client, run_id, ReviewDecision(approve=True, reviewer="ann", accept_red=True))
    assert answer.startswith("approved round 1") and "delivered" in answer, answer


def test_the_approve_command_has_the_flags() -> None:
    from reposwarm.cli.main import parser

    args = parser().parse_args(["approve", "run-1", "--accept-red", "--accept-test-changes"])
    assert args.accept_red and args.accept_test_changes
    assert isinstance(args, argparse.Namespace)
