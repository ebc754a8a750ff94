"""Verdicts per test (issue 17), on the real dev server with the runners installed here: pytest, unittest and
node --test, each known by its command line with no {junit} in the profile.

Each test asserts something the gate could not say when it compared per command (one opaque failure per command,
filed as pre-existing when the base commit failed too, so a tree broken at import over a base with one failing test
was PASSED): fewer tests ran, fixed tests by name, flaky tests by name next to a real failure in the same command,
and a check that cannot be judged at all.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from reposwarm.contracts import Phase, SwarmStatus, TestReport
from reposwarm.review.package import render_review
from tests.helpers import finish, make_repo, start_run, turn, wait_for_phase, write_yaml

pytestmark = pytest.mark.usefixtures("worker")

NOT_JUDGED = "already fails on the base commit and gives no per-test results"

# --- a small repository per runner: a package with a bug the base commit already has (mul is off by one), and its
# tests; the lane either breaks the package at import or fixes mul ---

CALC_PY = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b + 1\n"
TESTS_PY = """import unittest

from calc import add, mul


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)  # fails on the base commit: mul is off by one there
"""
PY_FILES = {"calc/__init__.py": CALC_PY, "tests/__init__.py": "", "tests/test_calc.py": TESTS_PY}

CALC_JS = "exports.add = (a, b) => a + b;\nexports.mul = (a, b) => a * b + 1;\n"
TESTS_JS = """const test = require('node:test');
const assert = require('node:assert');
const { add, mul } = require('../calc');

test('adds', () => assert.strictEqual(add(2, 3), 5));
// fails on the base commit: mul is off by one there
test('multiplies', () => assert.strictEqual(mul(2, 3), 6));
"""
JS_FILES = {"calc/index.js": CALC_JS, "test/calc.test.js": TESTS_JS}


@dataclass(frozen=True)
class Runner:
    name: str
    files: dict[str, str]
    command: list[str]
    module: str  # the file the lane edits
    first_line: str  # the package's first line, before which the lane puts a statement that raises at import
    raise_at_import: str
    tests: tuple[str, str]  # the two tests' names as the gate reports them: (the passing one, the failing one)


RUNNERS = [
    Runner("pytest", PY_FILES, [sys.executable, "-m", "pytest", "-q", "tests"], "calc/__init__.py",
           "def add(a, b):", 'raise RuntimeError("broken")\n\n\n',
           ("tests.test_calc.CalcTest.test_add", "tests.test_calc.CalcTest.test_mul")),
    Runner("unittest", PY_FILES, [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."],
           "calc/__init__.py", "def add(a, b):", 'raise RuntimeError("broken")\n\n\n',
           ("tests.test_calc.CalcTest.test_add", "tests.test_calc.CalcTest.test_mul")),
    # (node's JUnit reporter names a test by its title only)
    Runner("node", JS_FILES, ["node", "--test"], "calc/index.js", "exports.add =", 'throw new Error("broken");\n',
           ("adds", "multiplies")),
]
NODE = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
PARAMS = [pytest.param(r, id=r.name, marks=[NODE] if r.name == "node" else []) for r in RUNNERS]


def lanes_yaml(tmp_path: Path, commands: list[list[str]]) -> Path:
    # One dispatch per lane: a red check goes to review as it is, with no repair loop (the replay script has no
    # second attempt), and the report under review is the one of the merged tree the lane made.
    return write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"max_helper_loops": 1, "max_consecutive_test_fails": 3,
                  "lanes": {"calc": {"allowed_paths": ["calc/"]}}},
        "validation": {"profiles": {"default": {"commands": commands, "timeout_s": 120,
                                                "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}}}}})


def plan_yaml(tmp_path: Path) -> Path:
    return write_yaml(tmp_path / "plan.yaml", {"interface_contract": "calc keeps add and mul.",
                                               "lanes": [{"lane": "calc", "goal": "Work on the calc package."}]})


def edit(path: str, old: str, new: str) -> dict:
    return turn(("e1", "edit_file", {"path": path, "old": old, "new": new, "reason": "The goal asks for it"}))


async def run_to_review(client, tmp_path: Path, files: dict[str, str], commands: list[list[str]],
                        lane_turns: list[dict]) -> tuple[SwarmStatus, TestReport, str]:
    """A one-lane run played from a script, up to the review gate: its status, test report and review Markdown."""
    repo = make_repo(tmp_path / "repo", files)
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"calc": {1: lane_turns}}})
    run_id = await start_run(client, repo, lanes_yaml(tmp_path, commands), script, plan=plan_yaml(tmp_path))
    try:
        status = await wait_for_phase(client, run_id, Phase.review, timeout=180)
    finally:
        await client.get_workflow_handle(run_id).terminate("test done")
    assert status.review is not None and status.review.test_report is not None
    return status, status.review.test_report, render_review(status.review)


def names(failures) -> list[str]:
    return sorted(f.name for f in failures)


@pytest.mark.parametrize("runner", PARAMS)
async def test_a_tree_broken_at_import_over_a_failing_base_is_not_passed(client, tmp_path, runner):
    # The base commit already fails one test; the lane makes the package raise at import, so on the merged tree
    # no test of the module runs at all. Compared per command, both commits "fail" and the merged one was filed
    # as pre-existing and PASSED; per test, fewer tests ran and the import error is new.
    status, report, review = await run_to_review(client, tmp_path, runner.files, [runner.command], [
        edit(runner.module, runner.first_line, runner.raise_at_import + runner.first_line),
        finish("f1", "calc reworked")])
    assert not report.passed, report
    assert "**PASSED**" not in review
    fewer = [p for p in report.problems if "fewer tests ran" in p]
    assert report.failures or fewer, report
    assert report.base_tests_run == 2, report  # both tests ran on the base commit (one of them failing)
    assert report.tests_run is not None and report.tests_run < report.base_tests_run, report
    # The test that failed on the base did not run on the merged tree: it is not "pre-existing" there (that would
    # file the broken import under the base commit's debt), and the problem says which tests did not run.
    assert runner.tests[1] not in names(report.pre_existing), report
    if fewer:
        assert runner.tests[0] in fewer[0], fewer


@pytest.mark.parametrize("runner", PARAMS)
async def test_a_lane_that_fixes_a_failing_test_is_credited_with_it(client, tmp_path, runner):
    # mul fails on the base commit; the lane fixes it. Per command there was nothing to say (the base failed, the
    # merged tree passes); per test, that test is fixed and nothing is left pre-existing.
    status, report, review = await run_to_review(client, tmp_path, runner.files, [runner.command], [
        edit(runner.module, "a * b + 1", "a * b"), finish("f1", "mul fixed")])
    assert report.passed, report
    assert names(report.fixed) == [runner.tests[1]], report
    assert report.pre_existing == [] and report.failures == [] and report.problems == [], report
    assert report.tests_run == report.base_tests_run == 2, report
    assert "**PASSED**" in review and runner.tests[1] in review  # the reviewer sees what was fixed


FLAKY_JS = """const fs = require('node:fs');
const test = require('node:test');
const assert = require('node:assert');

// The mark is in the checked tree (the one place a sandboxed check can write, and cleaned after each validation):
// the first run in a fresh checkout fails and leaves it; the immediate re-run finds it and passes.
test('sometimes', () => {
  if (!fs.existsSync('flaky-mark')) {
    fs.writeFileSync('flaky-mark', '');
    assert.fail('first run in this tree');
  }
});
"""


@NODE
async def test_a_flaky_test_is_flaky_by_itself_next_to_a_real_failure_in_the_same_command(client, tmp_path):
    # One command, two failing tests on the first run: the lane breaks add for real, and another test fails only
    # on its first run in a tree. Per command, the command failed twice and nothing was flaky; per test, the one that
    # passed on the re-run is flaky and the other is a new failure.
    files = {"calc/index.js": "exports.add = (a, b) => a + b;\nexports.mul = (a, b) => a * b;\n",
             "test/calc.test.js": TESTS_JS.replace("// fails on the base commit: mul is off by one there\n", ""),
             # (it loads calc too: a change to calc reaches both tests, which run in the one command)
             "test/flaky.test.js": "require('../calc');\n" + FLAKY_JS}
    status, report, review = await run_to_review(client, tmp_path, files, [["node", "--test"]], [
        edit("calc/index.js", "a + b", "a - b"), finish("f1", "add reworked")])
    assert not report.passed, report
    assert names(report.flaky) == ["sometimes"], report
    assert names(report.failures) == ["adds"], report
    assert "sometimes" not in names(report.failures + report.pre_existing)
    assert "**PASSED**" not in review


# --- checks that fail on the base commit too, where nothing but the exit code could be compared ---

NOTE = [turn(("w1", "write_file", {"path": "calc/NOTES.md", "content": "notes\n", "reason": "The goal asks"})),
        finish("f1", "notes written")]


async def test_a_check_with_no_per_test_results_failing_on_both_commits_is_not_judged(client, tmp_path):
    # No runner knows this command and it exits 3 on both commits. Per command, its failure was pre-existing and
    # the check PASSED; it says nothing about the merged tree, so the gate says it cannot judge it, and does not pass.
    command = [sys.executable, "-c", "import sys; sys.exit(3)"]
    status, report, review = await run_to_review(client, tmp_path, PY_FILES, [command], NOTE)
    assert not report.passed, report
    assert len(report.problems) == 1 and NOT_JUDGED in report.problems[0], report
    assert " ".join(command) in report.problems[0]
    assert report.failures == [], report  # not blamed on the lane either
    assert "**PASSED**" not in review and NOT_JUDGED in review


async def test_pytest_on_a_test_file_that_does_not_compile_on_both_commits_is_not_judged(client, tmp_path):
    # The suite cannot start on either commit (exit 2, a collection error, per command before the runner adapter).
    # pytest (run with --continue-on-collection-errors by the adapter) reports the module that does not compile as
    # an error case of its own, which is not a test that ran: no test ran on the base commit, so there is nothing
    # to judge the merged tree against, and the check must not pass. (The gate once said PASSED here.)
    files = {**PY_FILES, "tests/test_syntax.py": "def test_x(:\n    pass\n"}
    command = [sys.executable, "-m", "pytest", "-q", "tests/test_syntax.py"]
    status, report, review = await run_to_review(client, tmp_path, files, [command], NOTE)
    assert not report.passed, report
    assert len(report.problems) == 1 and "no test ran there" in report.problems[0], report
    assert report.failures == [], report  # not blamed on the lane: the base commit was as broken
    assert report.tests_run == 0 and report.base_tests_run == 0, report
    assert "**PASSED**" not in review and "no test ran there" in review


@NODE
async def test_a_node_test_file_that_fails_to_load_on_both_commits_is_pre_existing(client, tmp_path):
    # node --test names a file that fails to load by its path. The base commit and the merged tree are checked out in
    # different folders, so a name with the checkout's absolute path in it would make the same failure look new on
    # the merged tree and blame the lane for the base commit's debt. Per command it was pre-existing; per test it
    # must stay so.
    files = {"calc/index.js": "exports.add = (a, b) => a + b;\n",
             "test/calc.test.js": "const test = require('node:test');\nconst assert = require('node:assert');\n"
                                  "const { add } = require('../calc');\n\n"
                                  "test('adds', () => assert.strictEqual(add(2, 3), 5));\n",
             "test/broken.test.js": "require('../calc/missing');\n"}
    status, report, review = await run_to_review(client, tmp_path, files, [["node", "--test"]], NOTE)
    assert report.failures == [], report
    assert len(report.pre_existing) == 1, report
    name = report.pre_existing[0].name
    assert name.endswith("broken.test.js") and not name.startswith("/"), name
    # one test ran on each commit: the file that did not load is no test that ran
    assert report.passed and report.tests_run == report.base_tests_run == 1, report


# --- whether the checks ran the change's own code (issue 44): the verdict is a pure function of the report and its
# evidence (TestReport.exercise, made by reposwarm/checks/evidence/), so these build reports from the contract ---

SITE = "/usr/lib/python3/dist-packages/calc/core.py"


def green(exercise=None, **fields) -> TestReport:
    """A check that ran 4 tests, all passing, as the merged tree's judged report would be before settling."""
    from reposwarm.contracts import CommandResult

    return TestReport(**{"passed": True, "tests_run": 4, "base_tests_run": 4, "exercise": exercise, "commands": [
        CommandResult(argv=["python", "-m", "pytest"], exit_code=0, duration_s=1.0, tests_run=4)], **fields})


def test_a_change_loaded_from_outside_the_tree_is_not_judged_with_where_and_the_fix():
    from reposwarm.checks import verdicts
    from reposwarm.contracts import Exercise, Verdict

    report = verdicts.settle(green(Exercise(loaded=["calc/api.py"], outside={"calc/core.py": SITE})))
    assert report.verdict == Verdict.not_judged and not report.passed, report
    why = verdicts.why_failed(report)
    assert "`calc/core.py` was loaded from " + SITE in why, why
    assert "the tree's import roots were not first" in why and "docs/checks.md" in why, why
    line = verdicts.summary(report)
    assert line.startswith("NOT JUDGED (1 of 2 changed source files exercised): `calc/core.py`"), line
    # green with test changes, or every other file exercised: still nothing to pass on
    from reposwarm.contracts import TestChange, TestChangeKind

    changed = verdicts.settle(green(Exercise(outside={"calc/core.py": SITE}), test_changes=[
        TestChange(kind=TestChangeKind.lost, test="test_x")]))
    assert changed.verdict == Verdict.not_judged, changed


def test_a_new_failure_with_a_change_loaded_from_outside_is_failed_and_says_both():
    from reposwarm.checks import verdicts
    from reposwarm.contracts import Exercise, TestFailure, Verdict

    failure = TestFailure(name="test_mul", command="python -m pytest")
    report = verdicts.settle(green(Exercise(outside={"calc/core.py": SITE}), failures=[failure]))
    assert report.verdict == Verdict.failed, report
    line = verdicts.summary(report)
    assert line.startswith("FAILED (0 of 1 changed source file exercised; 1 new failure(s)): `calc/core.py` was "
                           "loaded from " + SITE), line
    assert line.endswith("see docs/checks.md; 4 tests ran (base commit: 4)"), line


def test_changed_files_no_check_loaded_are_counted_and_the_verdict_word_stays_first():
    from reposwarm.checks import verdicts
    from reposwarm.contracts import Exercise, Verdict

    ex = Exercise(loaded=["a.py", "b.py", "c.py"], not_loaded=["d.py", "e.py"], unknown=["README.md"])
    report = verdicts.settle(green(ex))
    assert report.verdict == Verdict.passed and report.passed, report
    line = verdicts.summary(report)
    assert line == "PASSED (3 of 5 changed source files exercised); 4 tests ran (base commit: 4)", line
    # a lane reads its run_checks verdict from the first words (workflows/lane.py _account)
    said = f"checks {line}, in 1.0s"
    assert said.split(",", 1)[0].split(";", 1)[0].split(" (", 1)[0] == "checks PASSED"
    from reposwarm.checks import exercised

    assert "not exercised by any check: `d.py`, `e.py`" in exercised.lines(report)
    # every one exercised: the line says nothing more (the review counts them all the same)
    every = verdicts.settle(green(Exercise(loaded=["a.py", "b.py"])))
    assert verdicts.summary(every) == "PASSED; 4 tests ran (base commit: 4)", verdicts.summary(every)
    assert exercised.counted(every, always=True) == "2 of 2 changed source files exercised"


def test_require_exercised_fails_a_change_no_check_loaded_and_says_which():
    from reposwarm.checks import verdicts
    from reposwarm.contracts import Exercise, Verdict

    report = verdicts.settle(green(Exercise(loaded=["a.py"], not_loaded=["d.py"])))
    assert verdicts.required(report, False) == report  # not required: counted only
    held = verdicts.required(report, True)
    assert held.verdict == Verdict.failed and not held.passed, held
    assert len(held.problems) == 1 and "`d.py`" in held.problems[0] and "require_exercised" in held.problems[0]
    assert verdicts.required(held, True).problems == held.problems  # said once
    assert "`d.py`" in verdicts.why_failed(held)
    everything = verdicts.settle(green(Exercise(loaded=["a.py", "d.py"])))
    assert verdicts.required(everything, True).verdict == Verdict.passed  # nothing missing: passes


def part(loaded, argv=("python", "-m", "pytest"), runner="pytest") -> TestReport:
    """One part of a check (a shard) as its validate activity answers it: its command's evidence, held against the
    change's files (reposwarm/checks/evidence/ exercise), and settled."""
    from reposwarm.checks import evidence, verdicts
    from reposwarm.contracts import CommandResult

    command = CommandResult(argv=list(argv), exit_code=0, duration_s=1.0, tests_run=2, runner=runner, loaded=loaded)
    return verdicts.settle(TestReport(passed=True, tests_run=2, commands=[command], exercise=evidence.exercise(
        [command], ["a.py", "b.py", "c.py", "README.md"], {"a.py": [1, 2, 3]}) if loaded is not None else None))


def test_the_parts_evidence_merges_loaded_anywhere_and_outside_anywhere():
    from reposwarm.checks.selection.shards import merge
    from reposwarm.contracts import Loaded, Verdict

    one = part(Loaded(languages=["python"], inside=["a.py"], lines={"a.py": [1, 2]}))
    two = part(Loaded(languages=["python"], inside=["b.py"]))
    assert one.exercise is not None and one.exercise.not_loaded == ["b.py", "c.py"], one.exercise
    merged = merge([one, two])
    assert merged.exercise is not None
    # loaded by either part: exercised; loaded by none: not exercised; README.md is no source file, not counted
    assert merged.exercise.loaded == ["a.py", "b.py"] and merged.exercise.not_loaded == ["c.py"], merged.exercise
    assert merged.exercise.diff_lines == {"a.py": (2, 3)}, merged.exercise
    assert merged.verdict == Verdict.passed and "2 of 3 changed source files exercised" in verdicts_line(merged)
    # one part ran an installed copy of b.py: the check is not judged, whatever the other parts loaded
    three = part(Loaded(languages=["python"], outside={"b.py": "/site-packages/b.py"}))
    merged = merge([one, two, three])
    assert merged.verdict == Verdict.not_judged and not merged.passed, merged
    assert merged.exercise is not None and merged.exercise.outside == {"b.py": "/site-packages/b.py"}
    assert merged.exercise.loaded == ["a.py"], merged.exercise
    # a part whose command could have run c.py unseen (no runner known, no evidence): c.py is not known to be
    # unexercised
    blind = part(None, argv=("make", "test"), runner="")
    merged = merge([one, two, blind])
    assert merged.exercise is not None and merged.exercise.not_loaded == [] and merged.exercise.unknown == ["c.py"]
    # parts none of which had any evidence: none, as before
    assert merge([green(), green()]).exercise is None


def verdicts_line(report: TestReport) -> str:
    from reposwarm.checks import verdicts

    return verdicts.summary(report)


def test_no_evidence_judges_as_before():
    from reposwarm.checks import verdicts
    from reposwarm.contracts import Exercise, TestFailure, Verdict

    report = verdicts.settle(green())
    assert report.verdict == Verdict.passed and verdicts.summary(report) == "PASSED; 4 tests ran (base commit: 4)"
    assert verdicts.required(report, True) == report
    red = verdicts.settle(green(failures=[TestFailure(name="t", command="python -m pytest")]))
    assert verdicts.summary(red) == "FAILED (1 new failure(s)); 4 tests ran (base commit: 4)", verdicts.summary(red)
    # an empty evidence (a baseline: no changed file) says nothing either
    empty = verdicts.settle(green(Exercise()))
    assert empty.verdict == Verdict.passed and verdicts.summary(empty) == verdicts.summary(report)


def test_a_not_judged_round_needs_accept_unjudged_and_shows_everywhere():
    from reposwarm.checks import verdicts
    from reposwarm.contracts import (
        Exercise,
        FileEdit,
        LanePlan,
        LaneReview,
        LaneStatus,
        Plan,
        ReviewDecision,
        ReviewPackage,
    )
    from reposwarm.review.webui import review_call
    from workflows.attributes import verdict_word
    from workflows.review import approve_hint, red_refusal
    from workflows.validation import checks_line

    report = verdicts.settle(green(Exercise(loaded=["calc/api.py"], outside={"calc/core.py": SITE},
                                            not_loaded=["calc/util.py"], diff_lines={"calc/api.py": (3, 4)})))
    refusal = red_refusal(1, report, ReviewDecision(approve=True))
    assert refusal is not None and refusal.startswith("checks NOT JUDGED in round 1 (calc/core.py was loaded from")
    assert "--accept-unjudged" in refusal and '"accept_unjudged": true' in refusal, refusal
    assert red_refusal(1, report, ReviewDecision(approve=True, accept_red=True)) is not None  # not the red flag
    assert red_refusal(1, report, ReviewDecision(approve=True, accept_unjudged=True)) is None
    assert approve_hint(report) == "accept_unjudged"
    assert "--accept-unjudged" in review_call("run-1", "checks NOT JUDGED", approve_hint(report))
    assert checks_line(report).startswith("checks NOT JUDGED: `calc/core.py` was loaded from " + SITE)
    lane = LaneReview(lane="core", goal="g", status=LaneStatus.done, state="merged", edits=[
        FileEdit(path=p, operation="modify", reason="the goal asks for it") for p in ("calc/core.py", "calc/util.py", "calc/api.py")])
    pkg = ReviewPackage(run_id="run-1", round=1, task="t", repo_path="/r", base_sha="a" * 40,
                        integration_sha="b" * 40, plan=Plan(interface_contract="c", lanes=[LanePlan(lane="core", goal="g")]), lanes=[lane],
                        test_report=report)
    assert verdict_word(pkg) == "not_judged"
    review = render_review(pkg)
    assert "Verdict: checks NOT JUDGED, 1 lane merged — approve anyway: reposwarm approve run-1 --accept-unjudged" \
        in review, review
    assert f"- **Not judged:** `calc/core.py` was loaded from `{SITE}`, not from the tree" in review, review
    assert "- not exercised by any check: `calc/util.py`" in review
    assert "- diff coverage: `calc/api.py`: 3 of 4 changed lines ran" in review
    assert "The tree's import roots were not first" in review and "1 of 3 changed source files exercised" in review
