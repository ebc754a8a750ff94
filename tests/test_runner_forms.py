"""Runners recognised as people run them (issue 32): through `env`, `uv run`, `poetry run`, `python -m`, npm
scripts, `node <runner script>`, tox and nox; mocha; a command's own reporter kept; go test with its own flags;
cargo doc tests. The real runners run here, in the sandbox, through run_profile (vitest, jest and mocha from
tests/fixtures/node/node_modules, which `make toolchains` installs); where a tool is not installed (uv, poetry,
tox, nox), its command line is read and prepared without running it."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reposwarm.checks import runner, runners
from reposwarm.contracts import CheckProfile, TestReport
from tests.helpers import HAS_CARGO, cargo_on_path, make_repo

PY = sys.executable
NODE_MODULES = (Path(__file__).parent / "fixtures" / "node" / "node_modules").resolve()
JS = pytest.mark.skipif(not (NODE_MODULES / ".bin").is_dir() or shutil.which("node") is None,
                        reason="tests/fixtures/node/node_modules is missing (make toolchains installs vitest, jest "
                               "and mocha there), or node is not installed")
GO = pytest.mark.skipif(shutil.which("go") is None or shutil.which("gcc") is None,
                        reason="go (and gcc, for -race) is not installed")
CARGO = pytest.mark.skipif(not HAS_CARGO, reason="cargo is not installed")


async def _run(repo: Path, *commands: list[str], timeout: float = 120) -> TestReport:
    # (PYTEST_DISABLE_PLUGIN_AUTOLOAD: this venv's pytest plugins cost 1.5 s of CPU at every start)
    profile = CheckProfile(commands=list(commands), read_only_paths=[str(NODE_MODULES)], timeout_s=timeout,
                           env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    return await runner.run_profile(profile, repo, None, rerun=False)


def _failed(report: TestReport, command: list[str]) -> list[str]:
    return sorted(f.name for f in report.failures if f.command == " ".join(command))


def _plain(text: str) -> str:
    return re.sub(r"\x1b\[[0-9;]*m", "", text)


def _js_repo(path: Path, files: dict[str, str]) -> Path:
    repo = make_repo(path, {".gitignore": "node_modules\n", **files})
    (repo / "node_modules").symlink_to(NODE_MODULES)
    return repo


PY_TESTS = {"tests/__init__.py": "",
            "tests/test_env.py": "import os\n\n\ndef test_set():\n    assert os.environ['FOO'] == '1'\n\n\n"
                                 "def test_fails():\n    assert 1 == 2\n"}


# --- pytest behind a prefix, and with its own report -------------------------------------------------------------

async def test_pytest_after_env_reports_per_test_and_reads_the_user_s_own_junit_report(tmp_path):
    repo = make_repo(tmp_path / "repo", PY_TESTS)
    env = ["env", "FOO=1", PY, "-m", "pytest", "-q", "tests"]
    own = ["env", "FOO=1", PY, "-m", "pytest", "--junitxml=out/junit.xml", "tests"]
    report = await _run(repo, env, own)
    assert [c.runner for c in report.commands] == ["pytest", "pytest"]
    assert [c.tests_run for c in report.commands] == [2, 2] and report.tests_run == 4
    assert _failed(report, env) == _failed(report, own) == ["tests.test_env.test_fails"]
    assert (repo / "out" / "junit.xml").is_file()  # the user's report, where they asked for it


async def test_a_stale_copy_of_the_user_s_own_report_is_not_read(tmp_path):
    stale = ('<testsuite tests="1"><testcase classname="tests.test_env" name="test_old" file="tests/test_env.py"/>'
             "</testsuite>")
    repo = make_repo(tmp_path / "repo", {**PY_TESTS, "out/junit.xml": stale})
    command = [PY, "-m", "pytest", "--junitxml=out/junit.xml", "-p", "no_such_plugin_here", "tests"]
    report = await _run(repo, command)
    assert report.commands[0].runner == "pytest" and report.commands[0].tests_run is None
    assert not report.passed and "test_old" not in json.dumps(report.model_dump())


@pytest.mark.parametrize("argv", [
    ["uv", "run", "pytest", "-x"], ["uv", "run", "--with", "pytest-xdist", "--frozen", "pytest"],
    ["uv", "run", "-m", "pytest"], ["uv", "run", "--", "python", "-m", "pytest", "tests"],
    ["poetry", "run", "pytest"], ["poetry", "-q", "run", "python", "-m", "pytest"], ["pdm", "run", "pytest"],
    ["hatch", "run", "test:pytest", "-q"], ["pipenv", "run", "pytest"], ["python3.11", "-m", "pytest"],
    ["/usr/bin/python3", "-X", "dev", "-W", "error", "-m", "pytest"], ["coverage", "run", "--branch", "-m", "pytest"],
    ["python", "-m", "coverage", "run", "-m", "pytest", "-q"], ["env", "-u", "CI", "PYTHONHASHSEED=0", "pytest"],
])
def test_python_prefixes_are_looked_through_and_kept(argv, tmp_path):
    prepared = runners.prepare(argv, tmp_path, "r", tmp_path)
    assert runners.detect(argv, tmp_path) == prepared.runner == "pytest"
    assert prepared.argv[:len(argv)] == argv and f"--junitxml={tmp_path / 'r.report'}" in prepared.argv[len(argv):]


@pytest.mark.parametrize("argv", [["python", "script.py", "-m", "pytest"], ["uv", "run", "--script", "t.py"],
                                  ["poetry", "install"], ["go", "vet", "./..."], ["go", "build", "./..."],
                                  ["node", "app.js", "--test"], ["env"], ["python", "-c", "import pytest"]])
def test_what_is_no_runner_stays_none(argv, tmp_path):
    assert runners.prepare(argv, tmp_path, "r", tmp_path).runner == ""


def test_a_python_tool_s_own_script_of_the_same_name_is_not_the_command(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.pdm.scripts]\npytest = "pytest --cov"\n'
                                             '[tool.hatch.envs.test.matrix]\npython = ["3.11", "3.12"]\n')
    pdm = runners.prepare(["pdm", "run", "pytest"], tmp_path, "r", tmp_path)
    hatch = runners.prepare(["hatch", "run", "test:pytest"], tmp_path, "r", tmp_path)
    assert pdm.runner == hatch.runner == ""
    assert "`pdm run pytest` runs the project's `pytest` script" in pdm.why and "matrix" in hatch.why


# --- tox and nox --------------------------------------------------------------------------------------------------

def _prepared(tmp_path: Path, files: dict[str, str], argv: list[str]) -> runners.Prepared:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return runners.prepare(argv, tmp_path / "s", "r", tmp_path)


FLAGS = 7  # --junitxml=, -o junit_family=xunit1, -p no:cacheprovider, --continue-on-collection-errors, -rfExX


@pytest.mark.parametrize("files, argv, args", [
    ({"tox.ini": "[tox]\nenvlist = py\n[testenv]\ndeps = pytest\ncommands =\n    pytest {posargs}\n"},
     ["tox", "-e", "py"], []),
    ({"tox.ini": "[testenv:unit]\ncommands = python -m pytest {posargs:tests -q}\n"}, ["tox", "-e", "unit"],
     ["tests", "-q"]),  # (extra arguments replace the default: it is given again)
    ({"tox.ini": "[testenv]\ncommands = pytest {posargs:tests}\n"}, ["tox", "run", "-e", "py", "--", "-k", "x"],
     ["-k", "x"]),
    ({"pyproject.toml": '[tool.tox.env_run_base]\ncommands = [["pytest", "{posargs}"]]\n'}, ["tox", "-e", "py"], []),
    ({"noxfile.py": "import nox\n\n@nox.session\ndef tests(session):\n    session.install('pytest')\n"
                    "    session.run('pytest', '-q', *session.posargs)\n"}, ["nox", "-s", "tests"], []),
    ({"noxfile.py": "import nox\n\n@nox.session(python=['3.11', '3.12'])\ndef tests(session):\n"
                    "    session.run('pytest', *session.posargs)\n"}, ["nox", "-s", "tests-3.11", "--", "t"], ["t"]),
])
def test_tox_and_nox_running_pytest_with_their_posargs_are_pytest(tmp_path, files, argv, args):
    prepared = _prepared(tmp_path, files, argv)
    cut = argv.index("--") if "--" in argv else len(argv)
    assert prepared.runner == "pytest" and prepared.argv[:cut + 1] == [*argv[:cut], "--"]
    assert prepared.argv[cut + 1:cut + 1 + len(args)] == args and len(prepared.argv) == cut + 1 + len(args) + FLAGS


@pytest.mark.parametrize("files, argv, said", [
    ({"tox.ini": "[testenv:lint]\ncommands = flake8 src {posargs}\n"}, ["tox", "-e", "lint"], "which is not pytest"),
    ({"tox.ini": "[testenv]\ncommands = pytest\n"}, ["tox", "-e", "py"], "no command takes its {posargs}"),
    ({"tox.ini": "[testenv]\ncommands =\n  pytest {posargs}\n  mypy {posargs}\n"}, ["tox", "-e", "py"],
     "more than one command takes its {posargs}"),
    ({"tox.ini": "[testenv]\ncommands =\n  py311: pytest {posargs}\n"}, ["tox", "-e", "py311"], "some factors only"),
    ({"tox.ini": "[testenv]\ncommands = pytest {posargs}\n"}, ["tox"], "name one environment"),
    ({"tox.ini": "[testenv]\ncommands = pytest {posargs}\n"}, ["tox", "-e", "py311,py312"], "name one environment"),
    ({"noxfile.py": "import nox\n\n@nox.session\ndef lint(session):\n    session.run('ruff', 'check', "
                    "*session.posargs)\n"}, ["nox", "-s", "lint"], "which is not pytest"),
    ({"noxfile.py": "import nox\n\n@nox.session\ndef tests(session):\n    args = session.posargs or ['t']\n"
                    "    session.run('pytest', *args)\n"}, ["nox", "-s", "tests"], "exactly one session.run"),
    ({"noxfile.py": "import nox\n\n@nox.session(python=['3.11', '3.12'])\ndef tests(session):\n"
                    "    session.run('pytest', *session.posargs)\n"}, ["nox", "-s", "tests"], "each of its Pythons"),
])
def test_tox_and_nox_otherwise_are_no_runner_and_the_failed_command_s_reason_says_why(tmp_path, files, argv, said):
    prepared = _prepared(tmp_path, files, argv)
    assert prepared.runner == "" and said in prepared.why
    why = runners.reason(prepared.argv, 1, False, False, "", 60, CheckProfile(commands=[argv]), unread=prepared.why)
    assert why == f"exited 1; {runners.NO_RESULTS}: {prepared.why}" and runners.unread(why) == prepared.why


# --- npm, pnpm and yarn scripts -----------------------------------------------------------------------------------

@JS
def test_package_scripts_resolve_to_the_runner_s_own_command(tmp_path):
    scripts = {"test": "cross-env CI=1 jest --ci", "unit": "mocha 'test/**/*.js'", "e2e": "playwright test",
               "lint": "eslint . && vitest run", "pretest:x": "tsc", "test:x": "vitest run",
               "types": "vitest run --typecheck", "v": "vitest"}
    repo = _js_repo(tmp_path / "repo", {"package.json": json.dumps({"scripts": scripts})})
    report = tmp_path / "s" / "r.report"

    def argv(*command: str) -> list[str]:
        return runners.prepare(list(command), tmp_path / "s", "r", repo).argv

    assert argv("pnpm", "test", "--", "-t", "adds") == argv("npm", "test", "--", "-t", "adds") == [
        "env", "CI=1", "node_modules/.bin/jest", "--ci", "-t", "adds", "--json", f"--outputFile={report}"]
    assert argv("yarn", "unit") == argv("npm", "run", "unit") == [
        "node_modules/.bin/mocha", "test/**/*.js", "--reporter", "json", "--reporter-option", f"output={report}"]
    assert argv("yarn", "jest", "--ci") == ["yarn", "jest", "--ci", "--json", f"--outputFile={report}"]  # a binary
    assert argv("pnpm", "run", "v") == ["node_modules/.bin/vitest", "--reporter=default", "--reporter=json",
                                        f"--outputFile.json={report}", "--no-cache"]
    for command, said in [(["npm", "run", "lint"], "(a shell `&&`)"), (["npm", "run", "e2e"], "cannot read"),
                          (["npm", "run", "test:x"], "runs `pretest:x` too"), (["npm", "run", "nope"], "no `nope`"),
                          (["npm", "--prefix", "web", "test"], "another package")]:
        prepared = runners.prepare(command, tmp_path / "s", "r", repo)
        assert prepared.runner == "" and said in prepared.why, (command, prepared.why)


@JS
async def test_vitest_through_npm_test_through_its_node_script_and_with_its_own_reporter(tmp_path):
    repo = _js_repo(tmp_path / "repo", {
        "package.json": json.dumps({"scripts": {"test": "vitest run v/", "bad": "build && vitest run v/"}}),
        "v/sum.test.js": "import { test, expect } from 'vitest'\n\ntest('adds', () => expect(1 + 1).toBe(2))\n"
                         "test('carries', () => expect(9 + 1).toBe(11))\ntest.skip('later', () => {})\n"})
    npm, script = ["npm", "test"], ["node", "node_modules/vitest/vitest.mjs", "run", "v/"]
    verbose, bad = ["node_modules/.bin/vitest", "run", "v/", "--reporter=verbose"], ["npm", "run", "bad"]
    report = await _run(repo, npm, script, verbose, bad)
    assert [c.runner for c in report.commands] == ["vitest", "vitest", "vitest", ""]
    assert [c.tests_run for c in report.commands] == [2, 2, 2, None]
    assert _failed(report, npm) == _failed(report, script) == _failed(report, verbose) == ["carries"]
    assert "✓ v/sum.test.js > adds" in _plain(report.commands[2].output_tail)  # the user's own reporter still prints
    assert "✓ v/sum.test.js > adds" not in _plain(report.commands[1].output_tail)  # (the default one, not verbose)
    assert report.commands[3].reason.startswith(f"exited 127; {runners.NO_RESULTS}: `npm run bad` runs "
                                                "`build && vitest run v/`, which reposwarm cannot read per test")


@JS
async def test_mocha_per_test_and_jest_and_node_keep_their_own_reporters(tmp_path):
    repo = _js_repo(tmp_path / "repo", {
        "package.json": "{}",  # (where jest finds its configuration)
        "m/calc.test.js": (
            "const assert = require('assert');\n"
            "describe('calc', function () {\n"
            "  it('adds', function () { assert.equal(1 + 1, 2); });\n"
            "  it('fails', function () { assert.equal(1 + 1, 3); });\n"
            "  it.skip('skipped one', function () {});\n"
            "  describe('inner', function () {\n"
            "    before(function () { throw new Error('hook boom'); });\n"
            "    it('never runs', function () {});\n  });\n});\n"
            "it('top level', function () {});\n"),
        "j/sum.test.js": "test('adds', () => expect(1 + 1).toBe(2));\ntest('carries', () => expect(9 + 1).toBe(11));\n",
        "n/t.test.js": "const test = require('node:test');\nconst assert = require('assert');\n"
                       "test('ok', () => {});\ntest('bad', () => assert.equal(1, 2));\n"})
    mocha, spec = ["node_modules/.bin/mocha", "m/"], ["node_modules/.bin/mocha", "--reporter", "spec", "m/"]
    jest = ["node", "node_modules/jest/bin/jest.js", "j/", "--reporters=default"]
    node = ["node", "--test", "--test-reporter=dot", "n/"]
    report = await _run(repo, mocha, spec, jest, node)
    assert [c.runner for c in report.commands] == ["mocha", "", "jest", "node"]
    assert [c.tests_run for c in report.commands] == [3, None, 2, 2]
    assert _failed(report, mocha) == ['calc fails', 'calc inner "before all" hook for "never runs"']
    assert report.commands[0].unparsed_results == 0 and report.commands[0].exit_class == runners.TESTS_FAILED
    assert report.commands[1].reason.startswith(f"exited 2; {runners.NO_RESULTS}: mocha runs one reporter and "
                                                "this command chose `spec`")
    assert _failed(report, jest) == ["carries"] and _failed(report, node) == ["bad"]
    assert "FAIL j/sum.test.js" in _plain(report.commands[2].output_tail)  # jest's own reporter, kept
    assert "ℹ tests" not in report.commands[3].output_tail  # dot, theirs, on stdout; not the spec reporter


def test_a_user_s_reporter_kept_beside_reposwarm_s(tmp_path):
    def argv(*command: str) -> list[str]:
        return runners.prepare(list(command), tmp_path, "r", tmp_path).argv

    report = tmp_path / "r.report"
    assert argv("vitest", "run", "--reporter=dot") == ["vitest", "run", "--reporter=dot", "--reporter=json",
                                                       f"--outputFile.json={report}", "--no-cache"]
    assert argv("vitest", "--reporter", "junit", "--outputFile.junit=j.xml")[-3:] == [
        "--reporter=json", f"--outputFile.json={report}", "--no-cache"]
    assert argv("jest", "--reporters=jest-junit", "--", "x") == ["jest", "--reporters=jest-junit", "--json",
                                                                 f"--outputFile={report}", "--", "x"]
    assert argv("node", "--test", "--test-reporter", "tap", "--test-reporter-destination", "stdout")[-2:] == [
        "--test-reporter=junit", f"--test-reporter-destination={report}"]
    own = runners.prepare(["mocha", "-R", "json", "-O", "output=r/m.json"], tmp_path, "r", tmp_path)
    assert own.runner == "mocha" and own.report == tmp_path / "r" / "m.json"
    outside = runners.prepare(["pytest", "--junitxml=/tmp/elsewhere.xml"], tmp_path, "r", tmp_path)
    assert outside.runner == "" and "outside the tree" in outside.why


# --- go and cargo -------------------------------------------------------------------------------------------------

GO_FILES = {"go.mod": "module example.com/calc\n\ngo 1.19\n",
            "calc.go": "package calc\n\nfunc Add(a, b int) int { return a + b }\n",
            "calc_test.go": "package calc\n\nimport \"testing\"\n\n"
                            "func TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal(\"add\")\n\t}\n}\n\n"
                            "func TestWrong(t *testing.T) {\n\tif Add(1, 2) != 4 {\n\t\tt.Fatal(\"wrong\")\n\t}\n}\n"}


@GO
async def test_go_test_with_its_own_flags_behind_env(tmp_path):
    repo = make_repo(tmp_path / "repo", GO_FILES)
    command = ["env", "CGO_ENABLED=1", "go", "test", "-race", "-count=1", "-v", "./..."]
    report = await _run(repo, command, timeout=240)
    assert report.commands[0].runner == "go" and report.tests_run == 2, report.commands[0].output_tail
    assert _failed(report, command) == ["example.com/calc.TestWrong"]
    prepared = runners.prepare(command, tmp_path, "r", repo)
    assert prepared.argv == ["env", "CGO_ENABLED=1", "go", "test", "-json", "-race", "-count=1", "-v", "./..."]


@GO
def test_go_test_v_output_without_json_is_read_too(tmp_path):
    repo = make_repo(tmp_path / "repo", GO_FILES)
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOCACHE": str(tmp_path / "cache"), "GOPATH": str(tmp_path / "gp")}
    done = subprocess.run(["go", "test", "-v", "./..."], cwd=repo, capture_output=True, text=True, env=env)
    cases = runners.parse("go", done.stdout + done.stderr, None, repo)
    assert cases is not None and {c.name: c.outcome for c in cases} == {
        "example.com/calc.TestAdd": "passed", "example.com/calc.TestWrong": "failed"}
    assert "wrong" in next(c.message for c in cases if c.outcome == "failed")
    assert runners.unparsed("go", done.stdout, None, cases) == 0


RS_LIB = '''/// Adds.
///
/// ```
/// assert_eq!(calc::add(1, 2), 3);
/// ```
pub fn add(a: i32, b: i32) -> i32 { a + b }

pub mod m {
    /// Subtracts.
    ///
    /// ```
    /// assert_eq!(calc::m::sub(3, 2), 5);
    /// ```
    pub fn sub(a: i32, b: i32) -> i32 { a - b }
}

#[cfg(test)]
mod tests {
    #[test]
    fn adds() { assert_eq!(super::add(1, 1), 2); }
}
'''


@CARGO
async def test_cargo_doc_tests_are_read_per_test_by_their_names_with_spaces(tmp_path, monkeypatch):
    cargo = cargo_on_path(monkeypatch)
    assert cargo is not None
    repo = make_repo(tmp_path / "repo", {"Cargo.toml": '[package]\nname = "calc"\nversion = "0.1.0"\n'
                                                       'edition = "2021"\n', "src/lib.rs": RS_LIB,
                                         ".gitignore": "target/\n"})
    command = ["env", "CARGO_TERM_COLOR=never", cargo, "test", "--workspace", "--offline"]
    report = await _run(repo, command, timeout=300)
    assert report.commands[0].runner == "cargo" and report.tests_run == 3, report.commands[0].output_tail
    assert _failed(report, command) == ["src/lib.rs - m::sub (line 11)"]
    assert report.commands[0].unparsed_results == 0


def test_cargo_nextest_is_no_runner_and_says_why(tmp_path):
    prepared = runners.prepare(["cargo", "nextest", "run"], tmp_path, "r", tmp_path)
    assert prepared.runner == "" and "cargo test" in prepared.why


# --- one count of the tests that ran ------------------------------------------------------------------------------

def test_tests_that_ran_are_counted_once_per_name_as_the_gate_compares_them(tmp_path):
    output = "running 3 tests\ntest a ... ok\ntest a ... ok\ntest a #2 ... ok\n\ntest result: ok. 3 passed; 0 failed; " \
             "0 ignored; 0 measured; 0 filtered out\n"
    cases = runners.parse("cargo", output, None, tmp_path)
    assert cases is not None and sorted(c.name for c in cases) == ["a", "a #2", "a #3"]
    assert len(runners.ran(cases)) == len({c.name for c in runners.ran(cases)}) == 3
    stored = [runners.Case("t", "passed"), runners.Case("t", "failed"), runners.Case("u", "passed")]
    assert [c.name for c in runners.ran(stored)] == ["t", "u"]  # (cases stored before names were made distinct)


@JS
async def test_over_a_red_base_the_gate_says_why_a_script_has_no_per_test_results(tmp_path):
    """Not "add {junit}" (no help for an npm script or tox): the reason the runner could not be read."""
    from reposwarm.checks import verdicts

    repo = _js_repo(tmp_path / "repo", {"package.json": json.dumps({"scripts": {"test": "build && vitest run"}})})
    base = await _run(repo, ["npm", "test"])
    judged = verdicts.judge(base, base, lambda result: None)
    [problem] = judged.problems
    assert problem.startswith("`npm test`: this check already fails on the base commit and gives no per-test "
                              "results: `npm test` runs `build && vitest run`, which reposwarm cannot read per test")
    assert "{junit}" not in problem
