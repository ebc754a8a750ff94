"""A check that cannot run says why, first, everywhere a verdict is shown (issue 31.4): a command that does not
exist and one that hangs, end to end on the real dev server. Before, both read "this check already fails on the
base commit and gives no per-test results: fix the check, or add {junit}" in the review, and plain "checks FAILED"
in watch and the Web UI, with approve offered as for any round."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError

from reposwarm.cli.live import next_step
from reposwarm.cli.run_state import view
from reposwarm.contracts import Phase, ReviewDecision, Verdict
from reposwarm.review.package import render_review, render_status
from tests.helpers import finish, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = pytest.mark.usefixtures("worker")

CASES = {
    "missing": ([["pytset", "-q"]], 60, "command not found: pytset"),
    "hang": ([[sys.executable, "-c", "import time; time.sleep(600)"]], 3, "timed out after 3 s"),
}


def setup(tmp_path: Path, commands: list[list[str]], timeout_s: int) -> tuple[Path, Path, Path, Path]:
    repo = make_repo(tmp_path / "repo", {"calc/__init__.py": "def add(a, b):\n    return a + b\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_helper_loops": 1, "lanes": {"core": {"allowed_paths": ["calc/"]}}},
        "validation": {"profiles": {"default": {"commands": commands, "timeout_s": timeout_s}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "calc keeps add.", "lanes": [
        {"lane": "core", "goal": "Document add."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"core": {1: [
        turn(("c1", "write_file", {"path": "calc/__init__.py", "reason": "a docstring for add",
                                   "content": 'def add(a, b):\n    """a + b"""\n    return a + b\n'})),
        finish("c2", "add documented")]}}})
    return repo, lanes, plan, script


@pytest.mark.parametrize("case", sorted(CASES))
async def test_a_check_that_cannot_run_says_why_in_review_status_watch_and_the_web_ui(client, tmp_path, case):
    commands, timeout_s, reason = CASES[case]
    repo, lanes, plan, script = setup(tmp_path, commands, timeout_s)
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    try:
        status = await wait_for_phase(client, run_id, Phase.review, timeout=180)
        report = status.review.test_report
        assert report is not None and report.verdict == Verdict.failed and not report.passed, report
        assert report.commands[0].reason == reason, report.commands[0]
        review = render_review(status.review)
        assert reason in review and "{junit}" not in review, review
        assert "checks: FAILED" in render_status(status) and reason in render_status(status)
        assert reason in next_step(await view(client, run_id))
        metadata = str(await handle.query("__temporal_workflow_metadata"))
        assert "checks FAILED" in metadata and reason in metadata, metadata
        # approving it as if it were green is refused, with the reason and the flag that would take it
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update(SwarmWorkflow.review, ReviewDecision(approve=True, reviewer="t"))
        said = str(refused.value.cause)
        assert "checks FAILED" in said and reason in said and "--accept-red" in said, said
    finally:
        await handle.terminate("test done")
