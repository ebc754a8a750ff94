"""Targeted checks (issue 36): `run_checks(tests=[...])` runs only the named tests, with each runner's own selector,
in the real sandbox, and is judged per test against the same tests of the base commit's full run: its verdict
matches the full profile's for those tests, the base's other tests are never lost, and a hostile name is refused."""

from __future__ import annotations

import asyncio
import shutil
import sys
import time
from pathlib import Path

import pytest

from reposwarm.agent.specs import RunChecksArgs
from reposwarm.agent.tools import Toolbox
from reposwarm.checks.runner import run_profile
from reposwarm.checks.runners import select
from reposwarm.contracts import CheckProfile, LaneResume, TestReport, ToolCall, ToolOutcome, Usage
from reposwarm.runs.store import Store
from reposwarm.slices.policy import PathPolicy, ToolRefused
from tests.helpers import HAS_CARGO, cargo_on_path, git, make_repo
from tests.test_caches import _sandboxed  # noqa: F401 (autouse: the test's own REPOSWARM_HOME, sandbox on)
from workflows.lane import _account

PY = sys.executable
QUICK = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # (this venv's pytest plugins cost seconds at every start)
NODE_MODULES = (Path(__file__).parent / "fixtures" / "node" / "node_modules").resolve()
HAS_NODE = shutil.which("node") is not None
HAS_JEST = HAS_NODE and (NODE_MODULES / ".bin" / "jest").exists()
HAS_GO = shutil.which("go") is not None

PY_FILES = {
    "calc.py": "def add(a, b):\n    return a + b\n",
    "tests/__init__.py": "",
    "tests/test_x.py": ("import calc\n\n\ndef test_a():\n    assert True\n\n\n"
                        "def test_b():\n    assert calc.add(1, 2) == 3\n"),
    "tests/test_y.py": "def test_c():\n    pass\n\n\ndef test_d():\n    pass\n",
}


class Lane:
    """A base commit with its full run (the baseline), and a lane's worktree of it with a Toolbox over it."""

    def __init__(self, tmp: Path, files: dict[str, str], profile: CheckProfile, store: Store,
                 node_modules: Path | None = None) -> None:
        self.base = make_repo(tmp / "base", files)
        self.root = tmp / "lane"
        git(self.base, "worktree", "add", "-q", str(self.root))
        for tree in (self.base, self.root) if node_modules else ():
            (tree / "node_modules").symlink_to(node_modules)
        started = time.monotonic()
        self.baseline: TestReport = asyncio.run(run_profile(profile, self.base, store, scope="base"))
        self.base_s = time.monotonic() - started
        self.tools = Toolbox(PathPolicy(self.root, ["**"]), store=store, check_profiles={"default": profile},
                             baseline=lambda: self.baseline)

    def check(self, tests: list[str] | None = None) -> str:
        return self.tools.run_checks(RunChecksArgs(tests=tests))



def _reads_green(output: str) -> bool:
    """Whether the lane's tally (workflows/lane.py) takes this run_checks output for green checks."""
    resume = LaneResume(turn=1, transcript_ref=None, pending=[], usage=Usage(), started_at=0.0)
    _account(resume, ToolCall(id="c1", name="run_checks"),
             ToolOutcome(call_id="c1", name="run_checks", ok=True, output=output, output_ref="sha256:" + "0" * 64))
    return bool(resume.last_checks_ok)


@pytest.fixture
def store() -> Store:
    return Store("targeted-checks")


def _first(out: str) -> str:
    return out.splitlines()[0]


# --- pytest: the targeted verdict matches the full profile's ------------------------------------------------------

def test_a_targeted_pytest_run_matches_the_full_runs_verdict_for_its_tests(tmp_path, store):
    profile = CheckProfile(commands=[[PY, "-m", "pytest", "-q", "tests"]], timeout_s=120, env=QUICK)
    lane = Lane(tmp_path, PY_FILES, profile, store)
    (lane.root / "calc.py").write_text("def add(a, b):\n    return a - b\n")  # breaks test_b only
    started = time.monotonic()
    full = lane.check()
    full_s = time.monotonic() - started
    assert full.startswith("checks FAILED (1 new failure(s))") and "failing (new): tests.test_x.test_b" in full
    started = time.monotonic()
    broken = lane.check(["tests/test_x.py"])
    targeted_s = time.monotonic() - started
    # the same test fails, and the line says it was targeted, never a whole run
    assert broken.startswith("checks FAILED (targeted: 2 tests of tests/test_x.py; 1 new failure(s)); 2 tests ran "
                             "(base commit: 2)"), broken
    assert "failing (new): tests.test_x.test_b (tests/test_x.py)" in broken
    assert "targeted run: only the tests named ran" in broken
    assert "-- tests/test_x.py" in broken  # the selector, as data after `--`
    # another file: PASSED, and the base's other tests (test_x's) are not lost nor missing
    other = lane.check(["tests/test_y.py"])
    assert other.startswith("checks PASSED (targeted: 2 tests of tests/test_y.py); 2 tests ran (base commit: 2)")
    assert "test change" not in other and "problem" not in other
    # the lane's tally reads the verdict words first, as after a full run
    assert [_reads_green(out) for out in (full, broken, other)] == [False, False, True]
    print(f"\npytest: baseline {lane.base_s:.1f}s, full {full_s:.1f}s, targeted file {targeted_s:.1f}s")


def test_a_selected_test_that_is_skipped_or_gone_is_still_a_test_change(tmp_path, store):
    profile = CheckProfile(commands=[[PY, "-m", "pytest", "-q", "tests"]], timeout_s=120, env=QUICK)
    lane = Lane(tmp_path, PY_FILES, profile, store)
    (lane.root / "tests" / "test_x.py").write_text(
        "import calc\nimport pytest\n\n\n@pytest.mark.skip('later')\ndef test_a():\n    assert True\n\n\n"
        "def test_b():\n    assert calc.add(1, 2) == 3\n")
    out = lane.check(["tests/test_x.py"])
    assert out.startswith("checks PASSED WITH TEST CHANGES (targeted: 1 test of tests/test_x.py; tests 1 lost)"), out
    assert "test change (lost): tests.test_x.test_a" in out and not _reads_green(out)
    # a node id: exactly that test
    one = lane.check(["tests/test_y.py::test_c"])
    assert one.startswith("checks PASSED (targeted: 1 test of tests/test_y.py::test_c); 1 tests ran (base commit: 1)")
    assert "-- tests/test_y.py::test_c" in one
    # a name that matches no test: FAILED, said
    typo = lane.check(["tests/test_y.py::test_nope"])
    assert typo.startswith("checks FAILED (targeted: 0 tests of tests/test_y.py::test_nope")
    assert "`tests/test_y.py::test_nope`: no test the targeted run reported matches it" in typo


def test_over_a_red_base_a_targeted_run_is_judged_by_its_own_tests(tmp_path, store):
    red = {**PY_FILES, "tests/test_y.py": "def test_c():\n    pass\n\n\ndef test_d():\n    assert False\n"}
    profile = CheckProfile(commands=[[PY, "-m", "pytest", "-q", "tests"]], timeout_s=120, env=QUICK)
    lane = Lane(tmp_path, red, profile, store)
    assert not lane.baseline.passed
    # the base's failure is in a file not selected: not "this check already fails on the base commit"
    green = lane.check(["tests/test_x.py"])
    assert green.startswith("checks PASSED (targeted: 2 tests of tests/test_x.py); 2 tests ran"), green
    # selected, it is the base's own failure, not the lane's
    known = lane.check(["tests/test_y.py"])
    assert known.startswith("checks PASSED (targeted: 2 tests of tests/test_y.py; 1 pre-existing)"), known
    assert "failing on the base commit too: tests.test_y.test_d" in known and "failing (new)" not in known


def test_names_no_command_selects_are_said_and_a_run_none_can_select_is_refused(tmp_path, store):
    profile = CheckProfile(commands=[[PY, "-m", "pytest", "-q", "tests"], ["sh", "-c", "exit 0"]], timeout_s=120,
                           env=QUICK)
    lane = Lane(tmp_path, PY_FILES, profile, store)
    out = lane.check(["TestFoo", "tests/test_y.py::test_c"])
    assert out.startswith("checks PASSED (targeted: 1 test of tests/test_y.py::test_c); 1 tests ran"), out
    assert "not run: `TestFoo`: no command of the profile selects it (pytest takes files" in out
    assert "skipped for this targeted run: `sh -c exit 0`: no test runner reposwarm knows" in out
    assert "$ sh -c exit 0" not in out
    with pytest.raises(ToolRefused) as refused:
        lane.check(["TestFoo", "pkg/path.TestBar"])
    message = str(refused.value)
    assert message.startswith("run_checks refused: no command of profile 'default' can run only the tests named")
    assert "`TestFoo`" in message and "run_checks without tests runs the tests your change affects" in message
    assert "\n" not in message


# --- hostile names ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name, why", [
    ("--rootdir=/", "is an option"), ("-p", "is an option"), ("/etc/passwd", "is an absolute path"),
    ("../outside/test_x.py", "outside the repository"), ("tests/../../x.py::t", "outside the repository"),
    ("tests/test_x.py\x00", "control character"), ("tests/test_x.py\n--rootdir=/", "control character"),
    ("", "is empty"), (".git/hooks/pre-commit", "git folder"), ("x" * 1001, "longer than"),
])
def test_hostile_names_are_refused_in_one_line(tmp_path, name, why):
    root = make_repo(tmp_path / "repo", PY_FILES)
    marker = tmp_path / "ran"
    tools = Toolbox(PathPolicy(root, ["**"]), check_profiles={"default": CheckProfile(
        commands=[[PY, "-c", f"open({str(marker)!r}, 'w')"]])})
    with pytest.raises(ToolRefused) as refused:
        tools.call("run_checks", {"tests": ["tests/test_y.py", name]})
    assert str(refused.value).startswith("run_checks refused: test ") and why in str(refused.value)
    assert "\n" not in str(refused.value) and not marker.exists()


def test_a_symlink_out_of_the_tree_and_too_many_names_are_refused(tmp_path):
    root = make_repo(tmp_path / "repo", PY_FILES)
    (tmp_path / "elsewhere").mkdir()
    (root / "tests" / "out").symlink_to(tmp_path / "elsewhere")
    tools = Toolbox(PathPolicy(root, ["**"]), check_profiles={"default": CheckProfile(commands=[["true"]])})
    with pytest.raises(ToolRefused, match="leads outside the repository"):
        tools.call("run_checks", {"tests": ["tests/out/test_z.py"]})
    with pytest.raises(ValueError, match="tests: List should have at most 200 items"):
        tools.call("run_checks", {"tests": [f"tests/test_{n}.py" for n in range(201)]})
    assert select.refusal([f"t{n}" for n in range(201)], root) == (
        "run_checks refused: 201 tests named, at most 200: name their files or packages")


# --- per runner: exactly the selected tests ran -------------------------------------------------------------------

@pytest.mark.skipif(not HAS_NODE, reason="node is not installed")
def test_node_test_runs_only_the_named_file(tmp_path, store):
    files = {"test/a.test.js": ("const test = require('node:test');\n"
                                "test('one', () => {});\ntest('two', () => {});\n"),
             "test/b.test.js": "const test = require('node:test');\ntest('three', () => {});\n"}
    profile = CheckProfile(commands=[["node", "--test", "test/"]], timeout_s=120)
    lane = Lane(tmp_path, files, profile, store)
    out = lane.check(["test/a.test.js"])
    assert out.startswith("checks PASSED (targeted: 2 tests of test/a.test.js); 2 tests ran (base commit: 2)"), out
    assert "-- test/a.test.js" in out and "three" not in out.split("$ ", 1)[1].split("# tests")[0]


GO_FILES = {
    "go.mod": "module example.com/m\n\ngo 1.19\n",
    "calc/calc.go": "package calc\n\nfunc Add(x, y int) int { return x + y }\n",
    "calc/calc_test.go": ('package calc\n\nimport "testing"\n\n'
                          'func TestA(t *testing.T) {}\n\nfunc TestB(t *testing.T) {}\n\n'
                          'func TestC(t *testing.T) {}\n'),
    "other/other_test.go": 'package other\n\nimport "testing"\n\nfunc TestA(t *testing.T) {}\n',
}


@pytest.mark.skipif(not HAS_GO, reason="go is not installed")
def test_go_test_runs_only_the_named_tests(tmp_path, store):
    profile = CheckProfile(commands=[["go", "test", "./..."]], timeout_s=300)
    lane = Lane(tmp_path, GO_FILES, profile, store)
    started = time.monotonic()
    out = lane.check(["calc.TestB", "example.com/m/calc.TestC"])
    targeted_s = time.monotonic() - started
    # one invocation for the package named, -run of its tests: TestA (in both packages) did not run
    assert out.startswith("checks PASSED (targeted: 2 tests of calc.TestB, example.com/m/calc.TestC); 2 tests ran "
                          "(base commit: 2)"), out
    assert "$ go test -run=^(TestB|TestC)$ ./calc" in out
    assert '"Test":"TestB"' in out and '"Test":"TestC"' in out and '"Test":"TestA"' not in out
    # a bare name runs over the command's own packages: TestA of both
    both = lane.check(["TestA"])
    assert both.startswith("checks PASSED (targeted: 2 tests of TestA); 2 tests ran (base commit: 2)"), both
    assert "$ go test -run=^(TestA)$ ./..." in both
    print(f"\ngo: baseline (the full profile) {lane.base_s:.1f}s, targeted {targeted_s:.1f}s")


CRATE = {
    "Cargo.toml": '[package]\nname = "found"\nversion = "0.1.0"\nedition = "2021"\n',
    "src/lib.rs": ("pub fn add(a: i32, b: i32) -> i32 { a + b }\n\n#[cfg(test)]\nmod tests {\n"
                   "    #[test]\n    fn unit_adds() { assert_eq!(super::add(1, 1), 2); }\n"
                   "    #[test]\n    fn unit_other() {}\n}\n"),
    "tests/more.rs": "#[test]\nfn integration_adds() { assert_eq!(found::add(2, 2), 4); }\n#[test]\nfn later() {}\n",
}


@pytest.mark.skipif(not HAS_CARGO, reason="cargo is not installed")
def test_cargo_runs_only_the_tests_its_filters_match(tmp_path, store, monkeypatch):
    cargo = cargo_on_path(monkeypatch)
    assert cargo is not None
    profile = CheckProfile(commands=[[cargo, "test", "--offline"]], timeout_s=300, memory_mb=16384)
    lane = Lane(tmp_path, CRATE, profile, store)
    (lane.root / "src" / "lib.rs").write_text(CRATE["src/lib.rs"].replace("a + b", "a * b"))  # 1+1 != 2; 2*2 == 4
    started = time.monotonic()
    out = lane.check(["tests::unit_adds", "later"])
    targeted_s = time.monotonic() - started
    # libtest's several filters after `--`, in one invocation: exactly the two tests ran
    assert f"$ {cargo} test --offline -- later tests::unit_adds" in out
    assert out.startswith("checks FAILED (targeted: 2 tests of tests::unit_adds, later; 1 new failure(s)); 2 tests "
                          "ran (base commit: 2)"), out
    assert "failing (new): tests::unit_adds" in out
    assert "test later ... ok" in out and "unit_other" not in out and "integration_adds" not in out
    # the crate named: -p, all its tests
    crate = lane.check(["found::integration_adds"])
    assert f"$ {cargo} test --offline --package=found -- integration_adds" in crate
    assert crate.startswith("checks PASSED (targeted: 1 test of found::integration_adds); 1 tests ran"), crate
    print(f"\ncargo: baseline (the full profile) {lane.base_s:.1f}s, targeted {targeted_s:.1f}s")


@pytest.mark.skipif(not HAS_JEST, reason="jest is not installed in tests/fixtures/node/node_modules")
def test_jest_runs_the_named_file_and_the_named_test(tmp_path, store):
    files = {".gitignore": "node_modules\n", "package.json": "{}",
             "j/a.test.js": "test('adds', () => expect(1 + 1).toBe(2));\ntest('subs (x)', () => expect(1).toBe(1));\n",
             "j/ba.test.js": "test('other', () => {});\n"}
    profile = CheckProfile(commands=[["node_modules/.bin/jest", "--ci"]], timeout_s=120,
                           read_only_paths=[str(NODE_MODULES)])
    lane = Lane(tmp_path, files, profile, store, node_modules=NODE_MODULES)
    out = lane.check(["j/a.test.js"])
    assert "--runTestsByPath j/a.test.js" in out  # (a path, not jest's regex: j/ba.test.js did not run)
    assert out.startswith("checks PASSED (targeted: 2 tests of j/a.test.js); 2 tests ran (base commit: 2)"), out
    named = lane.check(["j/a.test.js::subs (x)"])
    assert r"--testNamePattern=(?:subs \(x\))" in named  # the name, literally
    assert named.startswith("checks PASSED (targeted: 1 test of j/a.test.js::subs (x)); 1 tests ran (base commit: "
                            "1)"), named


# --- the selectors each runner is given (no run) ------------------------------------------------------------------

def _argvs(tmp_path: Path, files: dict[str, str], command: list[str], tests: list[str]) -> list[list[str]]:
    root = make_repo(tmp_path / "repo", files)
    return [t.argv for t in select.plan([command], tests, root).targets]


def test_unittest_vitest_and_cargo_crates_get_their_own_selectors(tmp_path):
    ut = _argvs(tmp_path / "ut", PY_FILES, [PY, "-m", "unittest", "discover", "-s", "tests", "-t", "."],
                ["tests.test_x.test_a", "tests/test_y.py"])
    assert ut == [[PY, "-m", "unittest", "-v", "--", "tests.test_x.test_a", "tests.test_y"]]
    refused = select.plan([[PY, "-m", "unittest", "discover", "-s", "tests"]], ["tests.test_x"],
                          make_repo(tmp_path / "ut2", PY_FILES))
    assert not refused.targets and "top-level folder" in refused.skipped[0][1]
    js = {"v/a.test.ts": "", "v/b.test.ts": ""}
    assert _argvs(tmp_path / "vi", js, ["npx", "vitest", "run", "--reporter=verbose"], ["v/a.test.ts::adds"]) == [
        ["npx", "vitest", "run", "--reporter=verbose", "--testNamePattern=(?:adds)", "v/a.test.ts"]]
    workspace = {"Cargo.toml": '[workspace]\nmembers = ["a", "b-c"]\n',
                 "a/Cargo.toml": '[package]\nname = "a"\n', "b-c/Cargo.toml": '[package]\nname = "b-c"\n'}
    assert _argvs(tmp_path / "ws", workspace, ["cargo", "test", "--workspace", "--", "--test-threads=1"],
                  ["b_c::parses", "a", "adds"]) == [
        ["cargo", "test", "--workspace", "--", "--test-threads=1", "adds"],
        ["cargo", "test", "--package=a", "--", "--test-threads=1"],
        ["cargo", "test", "--package=b-c", "--", "--test-threads=1", "parses"]]
    assert "own test filter" in select.plan([["cargo", "test", "slow"]], ["adds"], tmp_path).skipped[0][1]
    go = _argvs(tmp_path / "go", GO_FILES, ["go", "test", "-count=1", "./...", "-args", "-v"],
                ["./other/...", "calc", "TestA", "calc.TestB"])
    assert go == [["go", "test", "-count=1", "./calc", "./other/...", "-args", "-v"],
                  ["go", "test", "-count=1", "-run=^(TestA)$", "./...", "-args", "-v"],
                  ["go", "test", "-count=1", "-run=^(TestB)$", "./calc", "-args", "-v"]]
