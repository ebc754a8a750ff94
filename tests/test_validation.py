"""The test gate: baseline, JUnit failures, flaky tests, repair by the guilty lane, rollback, hanging checks."""

from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from reposwarm.contracts import Phase
from tests.helpers import finish, git, lane_assignments, make_repo, start_run, turn, wait_for_phase, write_yaml

pytestmark = pytest.mark.usefixtures("worker")

OPS = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = """import unittest

from calc.ops import add, mul


class OpsTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)

    def test_known_broken(self):
        self.assertEqual(add(1, 1), 3)  # broken before the swarm came
"""
FLAKY = """import os
import unittest

MARK = {mark!r}


class FlakyTest(unittest.TestCase):
    def test_sometimes(self):
        # fails on every other run: the first run leaves a mark, the re-run removes it and passes
        if os.path.exists(MARK):
            os.remove(MARK)
        else:
            open(MARK, "w").close()
            self.fail("first run fails")
"""


def repo_with_tests(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", {
        "calc/__init__.py": "", "calc/ops.py": OPS, "tests/__init__.py": "", "tests/test_ops.py": TESTS,
        # (the mark is in the checked tree, the one place a sandboxed check can write)
        "tests/test_flaky.py": FLAKY.format(mark=f"flaky-{uuid.uuid4().hex}"),
    })


# The checked repositories' tests need pytest alone: this venv's plugins (hypothesis, asyncio, xdist...) would cost
# every pytest a check runs 1.5 s of CPU to start (0.25 s without them), and a run's checks run it several times.
QUICK = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


def lanes_yaml(tmp_path: Path, *, fails: int = 3, loops: int = 3, commands=None, timeout: float = 120) -> Path:
    pytest_cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml={junit}", "tests"]
    return write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_consecutive_test_fails": fails, "max_helper_loops": loops,
                  "lanes": {"calc": {"allowed_paths": ["calc/"]}}},
        "validation": {"profiles": {"default": {"commands": commands or [pytest_cmd], "timeout_s": timeout,
                                                "env": QUICK}}}})


def plan(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "plan.yaml", {"interface_contract": "calc.ops keeps add and mul.",
                                               "lanes": [{"lane": "calc", "goal": "Add sub(a, b) to calc/ops.py."}]})


def edit(call_id: str, old: str, new: str) -> dict:
    return turn((call_id, "edit_file", {"path": "calc/ops.py", "old": old, "new": new,
                                        "reason": "Work on the calc module as the goal says"}))


BREAK = edit("b1", "return a * b", "return a * b + 1")
FIX = edit("f1", "return a * b + 1\n", "return a * b\n\n\ndef sub(a, b):\n    return a - b\n")


async def test_a_broken_test_goes_back_to_the_lane_that_broke_it(client, tmp_path):
    repo = repo_with_tests(tmp_path)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"calc": {
        1: [BREAK, finish("b2", "sub added (or so I think)")],
        "1.2": [FIX, finish("f2", "mul fixed, sub added")],
    }}})
    run_id = await start_run(client, repo, lanes_yaml(tmp_path), script, plan=plan(tmp_path))
    status = await wait_for_phase(client, run_id, Phase.review, timeout=120)
    report = status.review.test_report
    assert report.passed, report.failures
    assert [f.name for f in report.pre_existing] == ["tests.test_ops.OpsTest.test_known_broken"]
    assert report.pre_existing[0].file == "tests/test_ops.py"
    assert [f.name for f in report.flaky] == ["tests.test_flaky.FlakyTest.test_sometimes"]
    calc = status.lanes[0]
    assert calc.attempt == 2 and calc.state == "merged"
    assert "red: 1 new failure" in status.review.validations[0] and "green" in status.review.validations[1]
    # the repair went to the same (warm) lane, as its next assignment
    assert await lane_assignments(client, run_id, "calc") == [f"{run_id}.calc.r1", f"{run_id}.calc.r1.a2"]
    assert "def sub(a, b)" in git(repo, "show", f"{status.integration_sha}:calc/ops.py")
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_a_lane_that_never_fixes_it_is_rolled_back_to_the_last_green_state(client, tmp_path):
    repo = repo_with_tests(tmp_path)
    base = git(repo, "rev-parse", "HEAD")
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"calc": {
        1: [BREAK, finish("b2")],
        "1.2": [edit("g1", "return a + b", "return b + a"), finish("g2", "tried something")],
    }}})
    run_id = await start_run(client, repo, lanes_yaml(tmp_path, fails=2), script, plan=plan(tmp_path))
    status = await wait_for_phase(client, run_id, Phase.review, timeout=120)
    assert status.integration_sha == base  # back on the last green state: the base commit
    assert not status.review.test_report.passed
    assert [f.file for f in status.review.test_report.failures] == ["tests/test_ops.py"]
    # (said as it is: the base commit, whose own checks fail too, is not "the last green state")
    assert (f"to the round's starting commit {base[:12]} (no merged state had passed; its own checks fail too)"
            in status.review.validations[-1]), status.review.validations[-1]
    assert "last green" not in status.review.validations[-1]
    red = git(repo, "for-each-ref", "--format=%(refname)", f"refs/reposwarm/{run_id}/rolled-back/")
    assert red  # the red state is kept, not lost
    assert git(repo, "show", f"{red}:calc/ops.py").count("+ 1") == 1
    await client.get_workflow_handle(run_id).terminate("test done")


async def test_a_hanging_check_is_killed_at_its_timeout_with_nothing_left_behind(client, tmp_path):
    marker = f"reposwarm-hang-{uuid.uuid4().hex}"
    repo = make_repo(tmp_path / "repo", {"calc/ops.py": OPS, "check.py": (
        "import os, subprocess, sys, time\n"
        "if os.path.exists('calc/hang.txt'):\n"
        f"    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', '{marker}'])\n"
        "    time.sleep(300)\n")})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"calc": {1: [
        turn(("h1", "write_file", {"path": "calc/hang.txt", "content": "x", "reason": "Make the check hang here"})),
        finish("h2")]}}})
    lanes = lanes_yaml(tmp_path, loops=1, timeout=3, commands=[[sys.executable, "check.py", marker]])
    run_id = await start_run(client, repo, lanes, script, plan=plan(tmp_path))
    status = await wait_for_phase(client, run_id, Phase.review, timeout=120)
    report = status.review.test_report
    assert not report.passed and report.commands[0].timed_out
    assert report.failures[0].message.startswith("timed out after 3 s")  # the reason, first
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True)
    assert left.stdout.strip() == "", "a process of the check outlived its timeout"
    await client.get_workflow_handle(run_id).terminate("test done")
