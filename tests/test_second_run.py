"""The gate's second run costs only what it must run (issue 49): the base commit's tests run against the merged code
only for the tests the changed test paths reach, each runner selecting them itself; the verdict is as before; and
each part of a validation's time is in its report, the ledger and `report`.

The validate activity runs for real (an ActivityEnvironment, a real git repository, real pytest and unittest in the
sandbox) on the base commit and then on the merged tree, as tests/test_gaming.py drives it.
"""

from __future__ import annotations

import dataclasses
import sys
import uuid
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.validate import validate
from reposwarm.checks import runner
from reposwarm.contracts import CheckProfile, Phase, SwarmStatus, TestChangeKind, TestReport, ValidateInput, Verdict
from reposwarm.runs import ledger, metrics
from reposwarm.runs.store import Store
from tests.helpers import git, make_repo

pytestmark = pytest.mark.usefixtures("reposwarm_home")

CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n\n\ndef sub(a, b):\n    return a - b\n"
BROKEN = CALC.replace("return a + b", "return a - b")  # what the `core` lane does
TEST_ADD = ("from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
            "def test_add_zero():\n    assert add(0, 0) == 0\n")
TEST_MUL = "".join(f"from calc import mul\n\n\ndef test_mul_{i}():\n    assert mul({i}, 2) == {2 * i}\n\n\n"
                   for i in range(3))
TEST_SUB = "".join(f"from calc import sub\n\n\ndef test_sub_{i}():\n    assert sub({i}, 1) == {i - 1}\n\n\n"
                   for i in range(4))
FILES = {"calc/__init__.py": CALC, "tests/test_add.py": TEST_ADD, "tests/test_mul.py": TEST_MUL,
         "tests/test_sub.py": TEST_SUB}
WEAKENED_ADD = TEST_ADD.replace("add(2, 3) == 5", "add(2, 3) is not None")
PYTEST = [sys.executable, "-m", "pytest", "-q", "tests"]
PARTS = {"tree_s", "sandbox_s", "setup_s", "commands_s", "second_run_s", "results_s", "total_s"}


def commit(repo: Path, files: dict[str, str | None]) -> str:
    for name, text in files.items():
        if text is None:
            (repo / name).unlink()
        else:
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the lanes' work, merged")
    return git(repo, "rev-parse", "HEAD")


async def gate(tmp_path: Path, base_files: dict[str, str], command: list[str], core: dict[str, str | None],
               tests: dict[str, str | None]) -> tuple[TestReport, str]:
    """The baseline on the base commit, then the merged tree judged against it: its report and the run's id."""
    repo = make_repo(tmp_path / "repo", base_files)
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {**core, **tests})
    run_id = f"second-run-{uuid.uuid4().hex[:8]}"
    profile = CheckProfile(commands=[command], timeout_s=120, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    env = ActivityEnvironment()

    async def check(ref: str, label: str, baseline: TestReport | None = None) -> TestReport:
        env.info = dataclasses.replace(env.info, activity_id=label)  # (each its own ledger line)
        return await env.run(validate, ValidateInput(
            run_id=run_id, repo_path=str(repo), ref=ref, profile_name="default", profile=profile, label=label,
            baseline=baseline, touched={"core": sorted(core), "tests": sorted(tests)},
            statements={"core": ["Rework calc."], "tests": ["Make the suite pass."]}))

    baseline = await check(base, "baseline")
    assert baseline.passed, baseline
    return await check(head, "round 1 check 1", baseline), run_id


def merged_line(run_id: str) -> dict:
    lines = [e for e in ledger.read(run_id) if e["event"] == "validation" and e.get("label") != "baseline"]
    assert len(lines) == 1, lines
    return lines[0]


def the_change(report: TestReport, kind: TestChangeKind, test: str):
    found = [c for c in report.test_changes if c.kind == kind and c.test.endswith(test)]
    assert len(found) == 1, (kind, test, report.test_changes)
    return found[0]


async def test_only_the_changed_test_file_runs_again_and_the_rewritten_test_is_found(tmp_path):
    report, run_id = await gate(tmp_path, FILES, PYTEST, {"calc/__init__.py": BROKEN},
                                {"tests/test_add.py": WEAKENED_ADD})
    # the verdict as before: the weakened test_add is rewritten (the base's version fails against the merged
    # code), and it goes back to the lane that changed the test
    assert report.verdict != Verdict.passed and not report.passed, report
    change = the_change(report, TestChangeKind.rewritten, "test_add")
    assert change.lanes == ["tests"] and "version of it fails" in change.detail, change
    assert report.tests_run == 9, report
    # the second run ran test_add.py's two tests, not the nine of the profile
    assert report.second_run_tests == 2, report
    assert "1 python test file (tests/test_add.py)" in report.second_run, report.second_run
    assert report.base_tests_paths == 1 and report.base_tests_s is not None, report
    # each part of its time, in the report and the ledger line, and said by `report`
    assert report.times is not None and report.times.second_run_s > 0 and report.times.commands_s > 0, report.times
    assert report.times.total_s >= report.times.commands_s + report.times.second_run_s, report.times
    line = merged_line(run_id)
    assert line["second_run_tests"] == 2 and set(line["times"]) == PARTS, line
    shown = metrics.render(metrics.report(run_id, ledger.read(run_id)))
    assert "gate time " in shown and "second run " in shown and "x its commands" in shown, shown
    assert "second run (the base commit's tests against the merged code): 2 tests" in shown, shown
    # the same figures from the run's record on the server, also once it is delivered (its review package gone)
    status = SwarmStatus(run_id=run_id, repo_path="", task="", phase=Phase.delivered, round=1, test_report=report)
    served = metrics.from_status(status, 1.0).last_check
    hosted = metrics.report(run_id, ledger.read(run_id)).last_check
    assert served is not None and hosted is not None and served.times == hosted.times == line["times"], served
    assert served.second_run == hosted.second_run == report.second_run and served.second_run_tests == 2


async def test_a_changed_test_helper_runs_again_the_tests_that_import_it(tmp_path):
    helper = "def expected_sum():\n    return 5\n"
    files = {**FILES, "tests/helpers.py": helper,
             "tests/test_add.py": "from tests.helpers import expected_sum\n" + TEST_ADD.replace(
                 "== 5", "== expected_sum()"),
             "tests/__init__.py": ""}
    # the tests lane "adapts" the helper to the broken add: the base's helper, against the merged code, fails
    report, _ = await gate(tmp_path, files, PYTEST, {"calc/__init__.py": BROKEN},
                           {"tests/helpers.py": helper.replace("return 5", "return -1")})
    assert report.verdict != Verdict.passed, report
    assert the_change(report, TestChangeKind.rewritten, "test_add").lanes == ["tests"]
    assert report.second_run_tests == 2 and "tests/test_add.py" in report.second_run, report


async def test_a_test_file_tox_names_is_still_a_test_of_its_own(tmp_path):
    # tox.ini runs tests/test_add.py by name: a test it runs, not a file every test loads (attrs' tox.ini names
    # tests/test_functional.py so)
    tox = "[testenv]\ncommands = pytest tests/test_add.py\n"
    report, _ = await gate(tmp_path, {**FILES, "tox.ini": tox}, PYTEST, {"calc/__init__.py": BROKEN},
                           {"tests/test_add.py": WEAKENED_ADD})
    assert the_change(report, TestChangeKind.rewritten, "test_add").lanes == ["tests"]
    assert report.second_run_tests == 2 and "1 python test file (tests/test_add.py)" in report.second_run, report


async def test_changed_test_configuration_runs_the_whole_command_and_says_why(tmp_path):
    hook = ("import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\ndef pytest_runtest_makereport(item, call):\n"
            "    outcome = yield\n    report = outcome.get_result()\n    if report.failed:\n"
            "        report.outcome = 'passed'\n")
    report, _ = await gate(tmp_path, FILES, PYTEST, {"calc/__init__.py": BROKEN}, {"tests/conftest.py": hook})
    assert the_change(report, TestChangeKind.rewritten, "test_add").lanes == ["tests"]
    assert the_change(report, TestChangeKind.reconfigured, "tests/conftest.py").lanes == ["tests"]
    assert report.second_run_tests == 9, report
    assert "whole: tests/conftest.py: test configuration changed" in report.second_run, report.second_run


async def test_a_new_test_file_alone_needs_no_second_run(tmp_path):
    extra = "from calc import add\n\n\ndef test_add_more():\n    assert add(1, 1) == 2\n"
    report, _ = await gate(tmp_path, FILES, PYTEST, {"calc/__init__.py": CALC.replace("a + b", "sum((a, b))")},
                           {"tests/test_more.py": extra})
    assert report.verdict == Verdict.passed and report.test_changes == [] and report.tests_run == 10, report
    # the base has no version of it, and no other test reads it: nothing of the base's tests differs
    assert report.second_run_tests == 0 and report.base_tests_s == 0.0, report
    assert "not run: none of its tests is a changed test path or reads one" in report.second_run, report.second_run


UT_ADD = ("import unittest\n\nfrom calc import add\n\n\nclass AddTest(unittest.TestCase):\n"
          "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
          "    def test_add_zero(self):\n        self.assertEqual(add(0, 0), 0)\n")
UT_MUL = ("import unittest\n\nfrom calc import mul\n\n\nclass MulTest(unittest.TestCase):\n"
          + "".join(f"    def test_mul_{i}(self):\n        self.assertEqual(mul({i}, 2), {2 * i})\n\n" for i in range(3)))


async def test_unittest_selects_the_changed_file_by_its_own_ids(tmp_path):
    files = {"calc/__init__.py": CALC, "tests/__init__.py": "", "tests/test_add.py": UT_ADD,
             "tests/test_mul.py": UT_MUL}
    weakened = UT_ADD.replace("self.assertEqual(add(2, 3), 5)", "self.assertIsNotNone(add(2, 3))")
    report, _ = await gate(tmp_path, files, [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."],
                           {"calc/__init__.py": BROKEN}, {"tests/test_add.py": weakened})
    assert report.verdict != Verdict.passed, report
    assert the_change(report, TestChangeKind.rewritten, "test_add").lanes == ["tests"]
    assert report.tests_run == 5 and report.second_run_tests == 2, report


FAILING_ON_BASE = "def test_always_fails():\n    assert False, 'fails on the base commit too'\n"


async def test_a_failure_the_base_has_too_is_not_run_again(tmp_path):
    # Each run of the suite adds a line to runs.txt in the checked tree: one line is one run.
    counting = ("from pathlib import Path\n\n\ndef test_counts():\n"
                "    with Path('runs.txt').open('a') as f:\n        f.write('run\\n')\n\n\n" + FAILING_ON_BASE)
    tree = make_repo(tmp_path / "tree", {**FILES, "tests/test_counts.py": counting})
    profile = CheckProfile(commands=[PYTEST], timeout_s=120, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    store = Store("rerun-" + uuid.uuid4().hex[:8])
    line = " ".join(PYTEST)
    report = await runner.run_profile(profile, tree, store)
    assert (tree / "runs.txt").read_text().count("run") == 2, report  # failed: run again, as ever
    [failure] = report.failures
    assert failure.name.endswith("test_always_fails") and failure.command == line, failure
    (tree / "runs.txt").unlink()
    again = await runner.run_profile(profile, tree, store, expected=frozenset({failure.key}))
    assert (tree / "runs.txt").read_text().count("run") == 1, again  # only the base's failure: not run again
    assert [f.key for f in again.failures] == [failure.key] and again.flaky == [], again
    assert again.times is not None and again.times.commands_s > 0, again.times


async def test_a_failed_test_alone_runs_again_when_asked(tmp_path):
    # Each test adds its name to runs.txt in the checked tree when it runs: the failed one runs twice, its
    # neighbour in the same file and the other file's test once (the second run's re-run: `rerun_files`).
    def counting(name: str, passes: bool) -> str:
        return (f"def test_{name}():\n    with Path('runs.txt').open('a') as f:\n        f.write('{name}\\n')\n"
                f"    assert {passes}\n\n\n")
    head = "from pathlib import Path\n\n\n"
    tree = make_repo(tmp_path / "tree", {
        "tests/test_good.py": head + counting("good", True),
        "tests/test_bad.py": head + "class TestBad:\n" + "".join(
            "    " + line + "\n" if line else "\n"
            for line in (counting("bad", False) + counting("neighbour", True)).replace("():", "(self):").splitlines())})
    profile = CheckProfile(commands=[PYTEST], timeout_s=120, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    report = await runner.run_profile(profile, tree, Store("files-" + uuid.uuid4().hex[:8]), rerun_files=True)
    runs = (tree / "runs.txt").read_text().split()
    assert sorted(runs) == ["bad", "bad", "good", "neighbour"], runs
    [failure] = report.failures  # failed both times: it stands, under the command's own line
    assert failure.name == "tests.test_bad.TestBad.test_bad" and failure.command == " ".join(PYTEST), failure
    assert report.flaky == [], report
