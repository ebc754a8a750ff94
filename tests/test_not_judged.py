"""A change the checks never ran is NOT JUDGED, end to end (issue 44): a whole run on the real dev server, a lane
played from a script, the real sandbox, the real import tracer (reposwarm/checks/evidence/).

The repository is a monorepo's Python project (packages/tiny) installed, not editable, in the virtual environment
its check runs, as a user's environment has it. The lane breaks the changed module at import; the tests import the
installed copy, pass, and before issue 44 the gate said PASSED and delivered the broken change. Now the check is
NOT JUDGED, naming the module and where it was loaded from; no lane is sent to repair it; status, watch, the review,
the Web UI's details and the RepoSwarmVerdict search attribute say it; an approval without --accept-unjudged is
refused (the Update, the CLI), and one with it delivers. A lane's run_checks says the same, and `reposwarm checks`
says before any run that the tree's files are loaded from outside it. And `require_exercised: true`: a changed
file no test loads fails the check and goes back to its lane, which adds a test that loads it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
from temporalio.client import WorkflowUpdateFailedError

from reposwarm.cli.live import next_step
from reposwarm.cli.run_state import view
from reposwarm.contracts import Phase, ReviewDecision, Verdict
from reposwarm.review.package import render_review, render_status
from reposwarm.review.webui import VERDICT_ATTR
from tests.helpers import cli, finish, make_repo, start_run, turn, wait_for_phase, write_yaml
from workflows.swarm import SwarmWorkflow

pytestmark = [pytest.mark.usefixtures("worker"), pytest.mark.timeout(400)]

SYSTEM_PY = "/usr/bin/python3"
MODULE = "packages/tiny/tiny/mod.py"
FILES = {
    "packages/tiny/pyproject.toml": '[project]\nname = "tiny"\nversion = "1.0"\n[tool.setuptools]\npackages = ["tiny"]\n',
    "packages/tiny/tiny/__init__.py": "",
    "packages/tiny/tiny/mod.py": "def g():\n    return 1\n",
    "packages/tiny/tests/test_g.py": ("import unittest\nfrom tiny.mod import g\n\n\nclass T(unittest.TestCase):\n"
                                      "    def test_g(self):\n        self.assertEqual(g(), 1)\n"),
}
BROKEN = 'raise RuntimeError("broken at import")\n\n\ndef g():\n    return 1\n'


def _can_install() -> bool:
    """A Python that makes a venv and builds a wheel offline (setuptools and wheel installed)."""
    if not os.path.exists(SYSTEM_PY):
        return False
    return subprocess.run([SYSTEM_PY, "-c", "import venv, setuptools, wheel"], capture_output=True).returncode == 0


def installed(tmp_path: Path, repo: Path) -> Path:
    """A virtual environment with the repository's package installed in it (a copy: not editable)."""
    venv = tmp_path / "venv"
    subprocess.run([SYSTEM_PY, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    subprocess.run([str(venv / "bin/python"), "-m", "pip", "install", "-q", "--no-index", "--no-build-isolation",
                    str(repo / "packages/tiny")], check=True, capture_output=True)
    shutil.rmtree(repo / "packages/tiny/build", ignore_errors=True)
    return venv


@pytest.mark.skipif(not _can_install(), reason=f"{SYSTEM_PY} cannot build a wheel offline (setuptools, wheel)")
async def test_a_change_the_checks_ran_an_installed_copy_of_is_not_judged_and_needs_accept_unjudged(client, tmp_path):
    repo = make_repo(tmp_path / "repo", FILES)
    venv = installed(tmp_path, repo)
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_helper_loops": 2, "lanes": {"tiny": {"allowed_paths": ["packages/tiny/tiny/"]}}},
        # (selection all: the selection does not map `unittest discover -s DIR` to its tests, and would run none)
        "validation": {"profiles": {"default": {"timeout_s": 120, "selection": "all", "commands": [
            [str(venv / "bin/python"), "-m", "unittest", "discover", "-s", "packages/tiny/tests"]]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "tiny.mod keeps g.",
                                               "lanes": [{"lane": "tiny", "goal": "Rework tiny.mod."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"tiny": {1: [
        turn(("w1", "write_file", {"path": MODULE, "content": BROKEN, "reason": "Rework tiny.mod as asked"})),
        finish("f1", "tiny.mod reworked")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    try:
        status = await wait_for_phase(client, run_id, Phase.review, timeout=240)
        report = status.review.test_report if status.review is not None else None
        assert report is not None and report.verdict_of == Verdict.not_judged, (report.selection, report.skipped, status.review.validations)
        assert not report.passed and report.failures == [], report  # (the installed copy passes its test)
        where = report.exercise.outside[MODULE] if report.exercise is not None else ""
        assert where.startswith(str(venv)) and where.endswith("site-packages/tiny/mod.py"), report.exercise

        # the gate's history: NOT JUDGED with the module, and no repair sent (no lane can mend it)
        history = status.review.validations
        assert history[0].split(": ", 1)[1].startswith(f"NOT JUDGED: `{MODULE}` was loaded from {where}"), history
        assert any("no lane can mend that" in line for line in history), history
        assert status.rounds[-1].lane("tiny").dispatches == 1, status.rounds[-1]

        # status, watch's last line, the review: the verdict word, the module, where from, the fix, the flag
        shown = render_status(status)
        assert "checks: NOT JUDGED" in shown and f"`{MODULE}` from {where}" in shown, shown
        assert "the tree's import roots were not first" in shown, shown
        said = next_step(await view(client, run_id))
        assert said.startswith(f"checks: NOT JUDGED (0 of 1 changed source file exercised): `{MODULE}`"), said
        review = render_review(status.review)
        assert f"Verdict: checks NOT JUDGED, 1 lane merged — approve anyway: reposwarm approve {run_id} " \
               "--accept-unjudged" in review, review
        assert f"- **Not judged:** `{MODULE}` was loaded from `{where}`, not from the tree" in review, review
        assert "**PASSED**" not in review

        # the Web UI: its current details name the flag; the list's verdict column
        details = str(await client.get_workflow_handle(run_id).query("__temporal_workflow_metadata"))
        assert f"reposwarm approve {run_id} --accept-unjudged" in details, details
        assert '\\"accept_unjudged\\": true' in details, details
        assert (await handle.describe()).typed_search_attributes.get(VERDICT_ATTR) == "not_judged"

        # an approval must say it delivers a change no check judged: not the red flag, not none
        for decision in (ReviewDecision(approve=True, reviewer="ann"),
                         ReviewDecision(approve=True, reviewer="ann", accept_red=True)):
            with pytest.raises(WorkflowUpdateFailedError) as refused:
                await handle.execute_update(SwarmWorkflow.review, decision)
            message = refused.value.cause.message
            assert message.startswith(f"checks NOT JUDGED in round 1 ({MODULE} was loaded from"), message
            assert "--accept-unjudged" in message, message
        home = tmp_path / "home"
        plain = await cli(client, home, "approve", run_id)
        assert plain.returncode != 0 and "--accept-unjudged" in plain.stderr, (plain.stdout, plain.stderr)
        assert (await handle.query(SwarmWorkflow.status)).phase == Phase.review

        approved = await cli(client, home, "approve", run_id, "--accept-unjudged")
        assert approved.returncode == 0 and "delivered" in approved.stdout, (approved.stdout, approved.stderr)
        result = await handle.result()
        assert result.delivered_branch, result
    finally:
        if (await handle.describe()).status is not None and \
                (await handle.describe()).status.name == "RUNNING":
            await handle.terminate("test done")


@pytest.mark.skipif(not _can_install(), reason=f"{SYSTEM_PY} cannot build a wheel offline (setuptools, wheel)")
async def test_a_lane_s_run_checks_says_not_judged_with_the_module_where_from_and_the_fix(tmp_path):
    # What the model reads from its run_checks (reposwarm/agent/checking.py, as the tool calls it), in a lane's
    # worktree whose change is not committed yet, with the base commit's results in: the verdict word first (the
    # lane's tally reads it: workflows/lane.py), the module, where it was loaded from, the fix.
    import asyncio

    from reposwarm.agent import checking
    from reposwarm.agent.specs import RunChecksArgs
    from reposwarm.checks import runner
    from reposwarm.contracts import CheckProfile
    from reposwarm.slices.policy import PathPolicy
    from tests.helpers import git

    repo = make_repo(tmp_path / "repo", FILES)
    venv = installed(tmp_path, repo)
    profile = CheckProfile(timeout_s=120, selection="all", commands=[
        [str(venv / "bin/python"), "-m", "unittest", "discover", "-s", "packages/tiny/tests"]])
    base = git(repo, "rev-parse", "HEAD").strip()
    baseline = (await runner.run_profile(profile, repo, None)).model_copy(update={"ref": base})
    (repo / MODULE).write_text(BROKEN)  # the lane's edit, not yet checkpointed
    policy = PathPolicy(repo, ["packages/tiny/tiny/"])

    said = await asyncio.to_thread(checking.run, RunChecksArgs(), profile, "default", policy, None, baseline, False)

    first = said.split(",", 1)[0].split(";", 1)[0].split(" (", 1)[0]
    assert first == "checks NOT JUDGED", said
    assert f"loaded from outside the tree (NOT JUDGED): `{MODULE}` from {venv}" in said, said
    assert "fix: the tree's import roots were not first" in said and "docs/checks.md" in said, said
    # put right (the tree first on PYTHONPATH): the tree's module runs, and breaks at import
    fixed = profile.model_copy(update={"env": {"PYTHONPATH": "packages/tiny"}})
    said = await asyncio.to_thread(checking.run, RunChecksArgs(), fixed, "default", policy, None, baseline, False)
    assert said.startswith("checks FAILED"), said
    assert "NOT JUDGED" not in said, said


@pytest.mark.skipif(not _can_install(), reason=f"{SYSTEM_PY} cannot build a wheel offline (setuptools, wheel)")
async def test_reposwarm_checks_says_the_tree_s_files_were_loaded_from_outside_it(client, tmp_path):
    # Before any run: `reposwarm checks` on HEAD runs the profile as a run would and says what its commands loaded
    # of the tree; files of the tree loaded from an installed copy are a fix, since a change to them would be
    # NOT JUDGED.
    repo = make_repo(tmp_path / "repo", FILES)
    venv = installed(tmp_path, repo)
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"tiny": {"allowed_paths": ["packages/tiny/tiny/"]}}},
        "validation": {"profiles": {"default": {"timeout_s": 120, "commands": [
            [str(venv / "bin/python"), "-m", "unittest", "discover", "-s", "packages/tiny/tests"]]}}}})

    done = await cli(client, tmp_path / "home", "checks", "--repo", str(repo), "--lanes", str(lanes))

    assert done.returncode == 0, (done.stdout, done.stderr)
    assert "file(s) of the tree were loaded from outside it" in done.stdout, done.stdout
    assert f"from {venv}" in done.stdout and "a change to them would be NOT JUDGED" in done.stdout, done.stdout
    assert "but they loaded files of the tree from outside it" in done.stdout, done.stdout


CALC = {"calc/__init__.py": "def add(a, b):\n    return a + b\n", "calc/unused.py": "def half(a):\n    return a / 2\n",
        "tests/__init__.py": "", "tests/test_add.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"}
TEST_HALF = "from calc.unused import half\n\n\ndef test_half():\n    assert half(4) == 2\n"


async def test_require_exercised_sends_a_changed_file_no_check_loaded_back_to_its_lane(client, tmp_path):
    # The lane changes calc/unused.py, which no test imports: with require_exercised the check fails, saying which
    # file; the lane is sent back to add a test that loads it, and the check then passes, counting it exercised.
    import sys

    from tests.test_gaming_runs import assignments
    from tests.test_validation import QUICK

    repo = make_repo(tmp_path / "repo", CALC)
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_helper_loops": 2, "lanes": {"calc": {"allowed_paths": ["calc/", "tests/"]}}},
        "validation": {"profiles": {"default": {"timeout_s": 120, "env": QUICK, "require_exercised": True,
                                                "commands": [[sys.executable, "-m", "pytest", "-q", "tests"]]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "calc keeps add.",
                                               "lanes": [{"lane": "calc", "goal": "Make half floor-divide."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"calc": {
        1: [turn(("w1", "write_file", {"path": "calc/unused.py", "content": "def half(a):\n    return a // 2\n",
                                       "reason": "Make half floor-divide as the goal says"})),
            finish("f1", "half floor-divides")],
        "1.2": [turn(("w2", "write_file", {"path": "tests/test_half.py", "content": TEST_HALF,
                                           "reason": "A test that runs half, as the repair asks"})),
                finish("f2", "half is tested")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    handle = client.get_workflow_handle_for(SwarmWorkflow.run, run_id)
    try:
        status = await wait_for_phase(client, run_id, Phase.review, timeout=240)
        history = status.review.validations if status.review is not None else []
        first = history[0].split(": ", 1)[1]
        assert first.startswith("FAILED, red: changed source files not exercised by any check, and the profile says "
                                "require_exercised: true: `calc/unused.py`"), history
        assert "0 of 1 changed source file exercised" in history[0], history
        tasks = await assignments(client, run_id, "calc")
        assert len(tasks) == 2, [t.task_id for t in tasks]
        assert "No check loads these files you changed" in tasks[1].goal and "- calc/unused.py" in tasks[1].goal, \
            tasks[1].goal
        report = status.review.test_report
        assert report is not None and report.verdict_of == Verdict.passed, (report, history)
        assert report.exercise is not None and "calc/unused.py" in report.exercise.loaded, report.exercise
        assert "changed source files exercised" in render_status(status), render_status(status)
    finally:
        await handle.terminate("test done")
