"""A gate a model cannot game (issue 31): tried as such a model would, on small real repositories with real runners.

Two lanes: `core` breaks `add()`, `tests` then hides it, each way the issue lists (skip, a trivially passing test of
another name, a weakened assertion, a conftest hook that rewrites failed reports as passed, xfail, collect_ignore;
unittest's skip, node --test's `{ skip: true }`). The validate activity runs for real (in an ActivityEnvironment,
on a real git repository, in the sandbox) on the base commit and then on the merged tree: none of them comes out
PASSED, and each is named lost / rewritten / reconfigured with the lane. Before these verdicts the gate said PASSED
to five of the six pytest ones. The honest change passes plainly, and a test removed on purpose by a lane whose
goal says so is listed with its reason and not sent back for repair.
"""

from __future__ import annotations

import shutil
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.validate import validate
from reposwarm.checks import changed_tests
from reposwarm.contracts import CheckProfile, TestChangeKind, TestReport, ValidateInput, Verdict
from tests.helpers import HAS_CARGO, cargo_on_path, git, make_repo

pytestmark = pytest.mark.usefixtures("reposwarm_home")

CALC = "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a * b\n"
BROKEN = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"  # what `core` does
TEST_ADD = "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
TEST_MUL = "from calc import mul\n\n\ndef test_mul():\n    assert mul(2, 3) == 6\n"
PY_FILES = {"calc/__init__.py": CALC, "tests/test_add.py": TEST_ADD, "tests/test_mul.py": TEST_MUL}
PYTEST = [sys.executable, "-m", "pytest", "-q", "tests"]

HOOK = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.outcome = "passed"
"""

UT_CALC_TEST = """import unittest

from calc import add, mul


class CalcTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)

    def test_mul(self):
        self.assertEqual(mul(2, 3), 6)
"""
UNITTEST = [sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."]

JS_CALC = "exports.add = (a, b) => a + b;\nexports.mul = (a, b) => a * b;\n"
JS_TEST = """const test = require('node:test');
const assert = require('node:assert');
const { add, mul } = require('../calc');

test('adds', () => assert.strictEqual(add(2, 3), 5));
test('multiplies', () => assert.strictEqual(mul(2, 3), 6));
"""
NODE = pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")


@dataclass
class Merged:
    """The merged tree of a round: the files each lane changed (None: deleted), and what each lane said."""

    core: dict[str, str | None]
    tests: dict[str, str | None] = field(default_factory=dict)
    goals: dict[str, list[str]] = field(default_factory=lambda: {
        "core": ["Rework add in calc.", "add reworked"], "tests": ["Make the test suite pass.", "tests pass now"]})


def commit(repo: Path, files: dict[str, str | None], message: str) -> str:
    for name, text in files.items():
        if text is None:
            (repo / name).unlink()
        else:
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


async def gate(tmp_path: Path, base_files: dict[str, str], command: list[str], merged: Merged) -> TestReport:
    """The validate activity on the base commit (the baseline), then on the merged tree judged against it."""
    repo = make_repo(tmp_path / "repo", base_files)
    base = git(repo, "rev-parse", "HEAD")
    head = commit(repo, {**merged.core, **merged.tests}, "the lanes' work, merged")
    run_id = f"gaming-{uuid.uuid4().hex[:8]}"
    # (without this venv's pytest plugins, which cost 1.5 s of CPU at every start)
    profile = CheckProfile(commands=[command], timeout_s=120, env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    env = ActivityEnvironment()

    async def check(ref: str, label: str, baseline: TestReport | None = None) -> TestReport:
        return await env.run(validate, ValidateInput(
            run_id=run_id, repo_path=str(repo), ref=ref, profile_name="default", profile=profile, label=label,
            baseline=baseline, touched={"core": sorted(merged.core), "tests": sorted(merged.tests)},
            statements=merged.goals))

    baseline = await check(base, "baseline")
    assert baseline.passed, baseline
    return await check(head, "round 1 check 1", baseline)


def changes(report: TestReport, kind: TestChangeKind) -> list:
    return [c for c in report.test_changes if c.kind == kind]


def the_change(report: TestReport, kind: TestChangeKind, test: str):
    found = [c for c in changes(report, kind) if c.test.endswith(test)]
    assert len(found) == 1, (kind, test, report.test_changes)
    return found[0]


# --- pytest: each way the issue lists ---------------------------------------------------------------------------

SKIPPED_ADD = "import pytest\n\n" + TEST_ADD.replace("def test_add", "@pytest.mark.skip\ndef test_add")
XFAILED_ADD = "import pytest\n\n" + TEST_ADD.replace("def test_add", "@pytest.mark.xfail\ndef test_add")
SWAPPED_ADD = "from calc import add\n\n\ndef test_add_exists():\n    assert add is not None\n"
WEAKENED_ADD = TEST_ADD.replace("== 5", "is not None")


@pytest.mark.parametrize("tests_lane, kind, detail", [
    pytest.param({"tests/test_add.py": SKIPPED_ADD}, TestChangeKind.lost, "skipped on the merged tree", id="skip"),
    pytest.param({"tests/test_add.py": XFAILED_ADD}, TestChangeKind.lost, "xfailed on the merged tree", id="xfail"),
    pytest.param({"tests/test_add.py": SWAPPED_ADD}, TestChangeKind.lost, "not on the merged tree at all",
                 id="renamed-away"),
    pytest.param({"tests/test_add.py": WEAKENED_ADD}, TestChangeKind.rewritten, "version of it fails",
                 id="weakened"),
])
async def test_a_hidden_broken_add_is_never_passed(tmp_path, tests_lane, kind, detail):
    report = await gate(tmp_path, PY_FILES, PYTEST, Merged(core={"calc/__init__.py": BROKEN}, tests=tests_lane))
    assert report.verdict != Verdict.passed and not report.passed, report
    change = the_change(report, kind, "test_add")
    assert detail in change.detail, change
    assert change.lanes == ["tests"], change  # the lane that changed the test, not the one that broke add
    assert change.file == "tests/test_add.py" and "tests/test_add.py" in change.diff, change
    assert change.reason == "" and changed_tests.needs_repair(change)  # it goes back to the tests lane first
    if kind == TestChangeKind.lost:
        # the second run says why it matters: the base commit's test fails against the merged code
        assert "version of it FAILS against the merged code" in change.detail, change
    assert report.base_tests_s is not None and report.base_tests_paths == 1, report


async def test_a_conftest_that_rewrites_failed_reports_is_rewritten_and_reconfigured(tmp_path):
    report = await gate(tmp_path, PY_FILES, PYTEST,
                  Merged(core={"calc/__init__.py": BROKEN}, tests={"tests/conftest.py": HOOK}))
    assert report.verdict != Verdict.passed, report
    rewritten = the_change(report, TestChangeKind.rewritten, "test_add")
    assert rewritten.lanes == ["tests"], rewritten
    config = the_change(report, TestChangeKind.reconfigured, "tests/conftest.py")
    assert config.lanes == ["tests"] and "added" in config.detail and "pytest_runtest_makereport" in config.diff


async def test_collect_ignore_is_lost_and_reconfigured(tmp_path):
    report = await gate(tmp_path, PY_FILES, PYTEST, Merged(
        core={"calc/__init__.py": BROKEN}, tests={"tests/conftest.py": 'collect_ignore = ["test_add.py"]\n'}))
    assert report.verdict != Verdict.passed, report
    assert the_change(report, TestChangeKind.lost, "test_add").lanes == ["tests"]
    assert the_change(report, TestChangeKind.reconfigured, "tests/conftest.py").lanes == ["tests"]
    # the lost test is said once, as a test change: not also as "fewer tests ran"
    assert not any("fewer tests ran" in p for p in report.problems), report


async def test_the_honest_change_passes_plainly(tmp_path):
    # core reworks add without breaking it; tests adds a test to the same file: the base's tests pass against the
    # merged code (the second run says so), nothing is lost, so the verdict is a plain PASSED.
    honest = TEST_ADD + "\n\ndef test_add_negative():\n    assert add(-2, -3) == -5\n"
    report = await gate(tmp_path, PY_FILES, PYTEST, Merged(core={"calc/__init__.py": CALC.replace("a + b", "sum((a, b))")},
                                                     tests={"tests/test_add.py": honest}))
    assert report.verdict == Verdict.passed and report.passed, report
    assert report.test_changes == [] and report.tests_run == 3, report
    assert report.base_tests_s is not None  # it cost a second run, because a test file changed


async def test_a_test_removed_on_purpose_is_listed_with_its_reason_and_not_repaired(tmp_path):
    goals = {"core": ["Remove mul from calc.", "mul removed"],
             "tests": ["Remove the test test_mul along with mul: mul is deprecated.", "test_mul removed"]}
    report = await gate(tmp_path, PY_FILES, PYTEST, Merged(
        core={"calc/__init__.py": CALC.split("\n\n\ndef mul")[0] + "\n"}, tests={"tests/test_mul.py": None},
        goals=goals))
    assert report.verdict == Verdict.passed_with_test_changes and not report.passed, report
    change = the_change(report, TestChangeKind.lost, "test_mul")
    assert change.lanes == ["tests"] and "Remove the test test_mul" in change.reason, change
    assert not changed_tests.needs_repair(change)  # its lane said why: it reaches review as it is
    assert report.failures == [] and report.problems == [], report


# --- the same tricks with other runners ---------------------------------------------------------------------------

async def test_unittest_skip_is_lost(tmp_path):
    files = {"calc/__init__.py": CALC, "tests/__init__.py": "", "tests/test_calc.py": UT_CALC_TEST}
    skipped = UT_CALC_TEST.replace("    def test_add", "    @unittest.skip('later')\n    def test_add")
    report = await gate(tmp_path, files, UNITTEST,
                  Merged(core={"calc/__init__.py": BROKEN}, tests={"tests/test_calc.py": skipped}))
    assert report.verdict != Verdict.passed, report
    change = the_change(report, TestChangeKind.lost, "test_add")
    assert "skipped on the merged tree" in change.detail and change.lanes == ["tests"], change


@NODE
async def test_node_test_skip_is_lost(tmp_path):
    files = {"calc/index.js": JS_CALC, "test/calc.test.js": JS_TEST}
    skipped = JS_TEST.replace("test('adds', () =>", "test('adds', { skip: true }, () =>")
    report = await gate(tmp_path, files, ["node", "--test"], Merged(
        core={"calc/index.js": JS_CALC.replace("a + b", "a - b")}, tests={"test/calc.test.js": skipped}))
    assert report.verdict != Verdict.passed, report
    change = the_change(report, TestChangeKind.lost, "adds")
    assert "skipped on the merged tree" in change.detail and change.lanes == ["tests"], change
    assert "FAILS against the merged code" in change.detail, change


@NODE
async def test_node_weakened_assertion_is_rewritten(tmp_path):
    files = {"calc/index.js": JS_CALC, "test/calc.test.js": JS_TEST}
    weakened = JS_TEST.replace("assert.strictEqual(add(2, 3), 5)", "assert.ok(add(2, 3) !== undefined)")
    report = await gate(tmp_path, files, ["node", "--test"], Merged(
        core={"calc/index.js": JS_CALC.replace("a + b", "a - b")}, tests={"test/calc.test.js": weakened}))
    assert report.verdict != Verdict.passed, report
    assert the_change(report, TestChangeKind.rewritten, "adds").lanes == ["tests"]


# --- configuration: only its test sections count ------------------------------------------------------------------

PYPROJECT = '[project]\nname = "calc"\nversion = "1.0"\n'


async def test_deselecting_a_test_in_pyproject_is_lost_and_reconfigured(tmp_path):
    files = {**PY_FILES, "pyproject.toml": PYPROJECT}
    hidden = PYPROJECT + '\n[tool.pytest.ini_options]\naddopts = "--deselect tests/test_add.py::test_add"\n'
    report = await gate(tmp_path, files, PYTEST, Merged(core={"calc/__init__.py": BROKEN},
                                                        tests={"pyproject.toml": hidden}))
    assert report.verdict != Verdict.passed, report
    assert the_change(report, TestChangeKind.lost, "test_add").lanes == ["tests"]
    config = the_change(report, TestChangeKind.reconfigured, "pyproject.toml")
    assert "pytest" in config.detail and "--deselect" in config.diff, config


async def test_a_build_only_change_to_pyproject_is_no_test_change(tmp_path):
    # pyproject.toml is shared with the build: a new version is the merged code's, not a change to the tests
    files = {**PY_FILES, "pyproject.toml": PYPROJECT}
    report = await gate(tmp_path, files, PYTEST, Merged(core={"pyproject.toml": PYPROJECT.replace("1.0", "1.1")}))
    assert report.verdict == Verdict.passed and report.test_changes == [], report
    assert report.base_tests_s is None  # no test path changed: no second run


# --- cargo: an ignored test and a weakened integration test ---------------------------------------------------------

CARGO = pytest.mark.skipif(not HAS_CARGO, reason="cargo is not installed")
RS_TOML = '[package]\nname = "calc"\nversion = "0.1.0"\nedition = "2021"\n'
RS_LIB = "pub fn add(a: i64, b: i64) -> i64 {\n    a + b\n}\n\npub fn mul(a: i64, b: i64) -> i64 {\n    a * b\n}\n"
RS_TEST = ("use calc::{add, mul};\n\n#[test]\nfn adds() {\n    assert_eq!(add(2, 3), 5);\n}\n\n"
           "#[test]\nfn multiplies() {\n    assert_eq!(mul(2, 3), 6);\n}\n")


@CARGO
@pytest.mark.parametrize(("tests_lane", "kind"), [
    (RS_TEST.replace("#[test]\nfn adds", "#[test]\n#[ignore]\nfn adds"), TestChangeKind.lost),
    (RS_TEST.replace("assert_eq!(add(2, 3), 5)", "assert!(add(2, 3) != 0)"), TestChangeKind.rewritten),
], ids=["ignore", "weakened"])
async def test_cargo_hidden_broken_add_is_never_passed(tmp_path, monkeypatch, tests_lane, kind):
    cargo = cargo_on_path(monkeypatch)
    assert cargo is not None
    files = {"Cargo.toml": RS_TOML, "src/lib.rs": RS_LIB, "tests/calc.rs": RS_TEST, ".gitignore": "target/\n"}
    report = await gate(tmp_path, files, [cargo, "test", "--offline"], Merged(
        core={"src/lib.rs": RS_LIB.replace("a + b", "a - b")}, tests={"tests/calc.rs": tests_lane}))
    assert report.verdict != Verdict.passed and not report.passed, report
    assert the_change(report, kind, "adds").lanes == ["tests"], report.test_changes


# --- go test: a skipped test and a weakened one ---------------------------------------------------------------------

GO = pytest.mark.skipif(shutil.which("go") is None, reason="go is not installed")
GO_MOD = "module example.com/calc\n\ngo 1.19\n"
GO_CALC = "package calc\n\nfunc Add(a, b int) int { return a + b }\n\nfunc Mul(a, b int) int { return a * b }\n"
GO_TEST = ('package calc\n\nimport "testing"\n\n'
           'func TestAdd(t *testing.T) {\n\tif Add(2, 3) != 5 {\n\t\tt.Fatal("Add(2, 3) != 5")\n\t}\n}\n\n'
           'func TestMul(t *testing.T) {\n\tif Mul(2, 3) != 6 {\n\t\tt.Fatal("Mul(2, 3) != 6")\n\t}\n}\n')


@GO
@pytest.mark.parametrize(("tests_lane", "kind"), [
    (GO_TEST.replace("func TestAdd(t *testing.T) {\n", "func TestAdd(t *testing.T) {\n\tt.Skip(\"flaky\")\n"),
     TestChangeKind.lost),
    (GO_TEST.replace("Add(2, 3) != 5 {", "Add(2, 3) == 12345 {"), TestChangeKind.rewritten),
], ids=["skip", "weakened"])
async def test_go_hidden_broken_add_is_never_passed(tmp_path, tests_lane, kind):
    files = {"go.mod": GO_MOD, "calc.go": GO_CALC, "calc_test.go": GO_TEST}
    report = await gate(tmp_path, files, ["go", "test", "./..."], Merged(
        core={"calc.go": GO_CALC.replace("a + b", "a - b")}, tests={"calc_test.go": tests_lane}))
    assert report.verdict != Verdict.passed and not report.passed, report
    assert the_change(report, kind, "TestAdd").lanes == ["tests"], report.test_changes
