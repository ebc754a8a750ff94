"""A gate a model cannot game (issue 31), end to end: whole runs on the real dev server, two lanes played from a
script (`core` works on calc/, `tests` on tests/), the real pytest in the sandbox.

A lane that hides a broken add() by skipping its test is sent back first, with the base commit's test as the
reference; the restored test then catches the break, which goes to the lane that broke the code (not to the one
that put the test back), and the review gets PASSED on a mended tree, not on a hidden break; a lane whose goal says
it removes a test reaches review
with PASSED WITH TEST CHANGES, the change listed under its own heading with the lane's reason, and is not repaired.
Every place the verdict is shown (status, watch's last line, report --json, the review, the Web UI's details)
says the same word. (tests/test_gaming.py tries each gaming pattern on the activity itself, faster.)
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from reposwarm.cli.live import next_step
from reposwarm.cli.run_state import view
from reposwarm.contracts import HelperTask, Phase, TestChangeKind, Verdict
from reposwarm.review.package import render_review, render_status
from reposwarm.runs.metrics import from_status
from tests.helpers import finish, make_repo, start_run, turn, wait_for_phase, write_yaml
from tests.test_gaming import BROKEN, CALC, PY_FILES, SKIPPED_ADD, TEST_ADD
from tests.test_validation import QUICK

pytestmark = pytest.mark.usefixtures("worker")


def lanes_yaml(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_helper_loops": 2, "max_consecutive_test_fails": 3,
                  "lanes": {"core": {"allowed_paths": ["calc/"]}, "tests": {"allowed_paths": ["tests/"],
                                                                           "depends_on": ["core"]}}},
        "validation": {"profiles": {"default": {"commands": [[sys.executable, "-m", "pytest", "-q", "tests"]],
                                                "timeout_s": 120, "env": QUICK}}}})


def plan_yaml(tmp_path: Path, core_goal: str, tests_goal: str) -> Path:
    return write_yaml(tmp_path / "plan.yaml", {"interface_contract": "calc keeps add.", "lanes": [
        {"lane": "core", "goal": core_goal}, {"lane": "tests", "goal": tests_goal}]})


def write(call_id: str, path: str, content: str) -> dict:
    return turn((call_id, "write_file", {"path": path, "content": content, "reason": "as the goal says"}))


async def assignments(client, run_id: str, lane: str) -> list[HelperTask]:
    """Every task the lane was given: the one it started with, then each `assign` Signal (a repair)."""
    tasks = []
    async for event in client.get_workflow_handle(f"{run_id}.{lane}").fetch_history_events():
        if event.HasField("workflow_execution_started_event_attributes"):
            payloads = event.workflow_execution_started_event_attributes.input.payloads
        elif event.HasField("workflow_execution_signaled_event_attributes") and \
                event.workflow_execution_signaled_event_attributes.signal_name == "assign":
            payloads = event.workflow_execution_signaled_event_attributes.input.payloads
        else:
            continue
        tasks.append((await client.data_converter.decode(payloads, [HelperTask]))[0])
    return tasks


async def test_a_skipped_test_goes_back_to_its_lane_and_then_catches_the_break(client, tmp_path):
    repo = make_repo(tmp_path / "repo", PY_FILES)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        "core": {1: [write("c1", "calc/__init__.py", BROKEN), finish("c2", "add reworked")],
                 "1.2": [write("c3", "calc/__init__.py", CALC), finish("c4", "add mended")]},
        "tests": {1: [write("t1", "tests/test_add.py", SKIPPED_ADD), finish("t2", "the suite passes now")],
                  "1.2": [write("t3", "tests/test_add.py", TEST_ADD), finish("t4", "test put back")]}}})
    run_id = await start_run(client, repo, lanes_yaml(tmp_path), script, plan=plan_yaml(
        tmp_path, "Rework add in calc.", "Make the test suite pass."))
    try:
        status = await wait_for_phase(client, run_id, Phase.review, timeout=240)
        history = status.review.validations
        # check 1: the skip is a lost test, never PASSED, and not red either
        assert history[0].split(": ", 1)[1].startswith("PASSED WITH TEST CHANGES: 1 lost"), history
        assert "a second run" in history[0], history  # the base's tests ran against the merged code: said
        tasks = await assignments(client, run_id, "tests")
        assert len(tasks) == 2, [t.task_id for t in tasks]  # the repair went to the lane that skipped the test
        assert "The base commit's test is the reference" in tasks[1].goal and "test_add" in tasks[1].goal
        assert "skipped on the merged tree" in tasks[1].goal
        # check 2: the test put back catches the break, which goes to the lane that broke add(): the tests lane,
        # whose test is the base's again, is not blamed for it
        assert "red: 1 new failure" in history[1], history
        core = await assignments(client, run_id, "core")
        assert len(core) == 2 and "test_add" in core[1].goal, [t.goal for t in core]
        assert len(await assignments(client, run_id, "tests")) == 2
        # check 3: the mended tree passes plainly, with the base's tests as they were
        assert history[2].split(": ", 1)[1].startswith("PASSED, green"), history
        report = status.review.test_report
        assert report.verdict == Verdict.passed and report.test_changes == [] and report.passed, report
    finally:
        await client.get_workflow_handle(run_id).terminate("test done")


async def test_a_test_removed_on_purpose_reaches_review_with_its_reason(client, tmp_path):
    repo = make_repo(tmp_path / "repo", PY_FILES)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {
        "core": {1: [write("c1", "calc/__init__.py", CALC.split("\n\n\ndef mul")[0] + "\n"),
                     finish("c2", "mul removed")]},
        "tests": {1: [turn(("t1", "delete_file", {"path": "tests/test_mul.py", "reason": "mul is gone"})),
                      finish("t2", "test_mul removed along with mul")]}}})
    run_id = await start_run(client, repo, lanes_yaml(tmp_path), script, plan=plan_yaml(
        tmp_path, "Remove mul from calc: it is deprecated.", "Remove the test test_mul along with mul."))
    try:
        status = await wait_for_phase(client, run_id, Phase.review, timeout=240)
        report = status.review.test_report
        assert report.verdict == Verdict.passed_with_test_changes and not report.passed, report
        [change] = report.test_changes
        assert change.kind == TestChangeKind.lost and change.test.endswith("test_mul"), change
        assert change.lanes == ["tests"] and "Remove the test test_mul" in change.reason, change
        assert len(await assignments(client, run_id, "tests")) == 1  # its lane said why: no repair
        review = render_review(status.review)
        assert "## Test changes" in review and "### lost: tests.test_mul" in review
        assert "reason given: Remove the test test_mul" in review and "lane(s): tests" in review
        assert "**PASSED WITH TEST CHANGES**" in review and "**PASSED**" not in review
        # the same word everywhere: status, watch's last lines, report --json, the Web UI's details
        assert "checks: PASSED WITH TEST CHANGES" in render_status(status)
        assert next_step(await view(client, run_id)).startswith("checks: PASSED WITH TEST CHANGES")
        figures = from_status(status, 1.0)
        assert figures.last_check is not None and figures.last_check.verdict == "PASSED WITH TEST CHANGES"
        assert figures.last_check.test_changes == [f"lost: {change.test}"]
        metadata = str(await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata"))
        assert "checks PASSED WITH TEST CHANGES \\\\(1 lost\\\\)" in metadata, metadata  # (Markdown-escaped)
    finally:
        await client.get_workflow_handle(run_id).terminate("test done")
