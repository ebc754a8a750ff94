"""Each runner adapter on that runner's real output: pytest, unittest and node run here for real; go, cargo and
jest from recorded output (tests/fixtures/runners/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reposwarm.checks import runners

FIXTURES = Path(__file__).parent / "fixtures" / "runners"
PY_TESTS = {
    "pkg/__init__.py": "VALUE = 1\n",
    "tests/__init__.py": "",
    "tests/test_a.py": (
        "import unittest\nimport pkg\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_ok(self):\n        self.assertEqual(pkg.VALUE, 1)\n"
        "    def test_bad(self):\n        self.assertEqual(pkg.VALUE, 2)\n"
        "    def test_documented(self):\n        '''A docstring printed in verbose mode.'''\n"
        "    @unittest.skip('not today')\n    def test_skip(self):\n        pass\n"
    ),
    "tests/test_b.py": "import unittest\nimport pkg.missing\n\nclass U(unittest.TestCase):\n"
                       "    def test_x(self):\n        pass\n",
}


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def _run(argv: list[str], cwd: Path, scratch: Path) -> tuple[runners.Prepared, str, int]:
    prepared = runners.prepare(argv, scratch, "cmd")
    # (without this venv's pytest plugins, which cost 1.5 s of CPU at every start)
    proc = subprocess.run(prepared.argv, cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    return prepared, proc.stdout + proc.stderr, proc.returncode


def _outcomes(cases: list[runners.Case]) -> dict[str, str]:
    return {c.name: c.outcome for c in cases}


@pytest.mark.parametrize("argv, runner", [
    (["pytest", "-q"], "pytest"), (["python3", "-m", "pytest"], "pytest"), (["/usr/bin/python3.11", "-m", "unittest"],
                                                                           "unittest"),
    (["node", "--test", "test/"], "node"), (["go", "test", "./..."], "go"), (["cargo", "test"], "cargo"),
    (["npx", "jest"], "jest"), (["node_modules/.bin/vitest", "run"], "vitest"), (["make", "check"], ""),
    (["mvn", "test", "-Dout={junit}"], "junit"), (["python3", "-m", "mypkg"], ""),
])
def test_runners_are_known_by_their_command_line(argv, runner):
    assert runners.detect(argv) == runner


def test_pytest_reports_each_test_with_its_file(tmp_path):
    repo = _tree(tmp_path / "repo", PY_TESTS)
    prepared, output, code = _run([sys.executable, "-m", "pytest", "tests"], repo, tmp_path)
    cases = runners.parse(prepared.runner, output, prepared.report, repo)
    outcomes = _outcomes(cases)
    assert outcomes["tests.test_a.T.test_ok"] == "passed" and outcomes["tests.test_a.T.test_bad"] == "failed"
    assert outcomes["tests.test_a.T.test_skip"] == "skipped"
    # the module that does not import is one case of its own, by file: an error (its tests did not run)
    assert any(c.outcome == "error" and c.file == "tests/test_b.py" for c in cases)
    assert len(runners.ran(cases)) == 3  # test_ok, test_bad, test_documented; not the skip, not the error
    bad = next(c for c in cases if c.name.endswith("test_bad"))
    assert bad.file == "tests/test_a.py" and "AssertionError" in bad.message
    # the module that does not import is a failure of its own; the others' tests still ran
    assert runners.exit_class("pytest", code, False, cases) == runners.TESTS_FAILED
    assert not (repo / ".pytest_cache").exists()  # the run left nothing in the tree


def test_pytest_with_nothing_collected_is_no_tests(tmp_path):
    repo = _tree(tmp_path / "repo", {"tests/test_none.py": "x = 1\n"})
    prepared, output, code = _run([sys.executable, "-m", "pytest", "tests"], repo, tmp_path)
    cases = runners.parse(prepared.runner, output, prepared.report, repo)
    assert cases == [] and runners.exit_class("pytest", code, False, cases) == runners.NO_TESTS


def test_unittest_verbose_output_gives_one_result_per_test(tmp_path):
    repo = _tree(tmp_path / "repo", PY_TESTS)
    prepared, output, code = _run([sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."], repo,
                                  tmp_path)
    assert prepared.argv[-1] == "-v"
    cases = runners.parse(prepared.runner, output, prepared.report, repo)
    assert _outcomes(cases) == {
        "tests.test_a.T.test_bad": "failed", "tests.test_a.T.test_documented": "passed",
        "tests.test_a.T.test_ok": "passed", "tests.test_a.T.test_skip": "skipped", "tests.test_b": "error"}
    broken = next(c for c in cases if c.name == "tests.test_b")
    assert broken.file == "tests/test_b.py" and "No module named 'pkg.missing'" in broken.message
    bad = next(c for c in cases if c.name.endswith("test_bad"))
    assert "AssertionError: 1 != 2" in bad.message and bad.file == "tests/test_a.py"
    assert runners.exit_class("unittest", code, False, cases) == runners.TESTS_FAILED


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_test_runner_reports_through_its_junit_reporter(tmp_path):
    repo = _tree(tmp_path / "repo", {"test/a.test.js": (
        "const test = require('node:test'); const assert = require('node:assert');\n"
        "test('adds', () => assert.strictEqual(1 + 1, 2));\n"
        "test('fails', () => assert.strictEqual(1 + 1, 3));\n"
        "test.describe('suite', () => { test('inner', () => {}); test('later', {skip: true}, () => {}); });\n")})
    prepared, output, code = _run(["node", "--test", "test/"], repo, tmp_path)
    cases = runners.parse(prepared.runner, output, prepared.report, repo)
    assert _outcomes(cases) == {"adds": "passed", "fails": "failed", "inner": "passed", "later": "skipped"}
    fails = next(c for c in cases if c.name == "fails")
    assert "a.test.js:3" in fails.message  # the place, from its stack...
    assert fails.file == "test/a.test.js"  # ...names its file, for repair routing (node's report names none)
    assert "✖ fails" in output  # the human-readable report is still in the log
    assert runners.exit_class("node", code, False, cases) == runners.TESTS_FAILED
    (repo / "test" / "broken.test.js").write_text("require('../missing');\n")
    prepared, output, code = _run(["node", "--test", "test/"], repo, tmp_path)
    cases = runners.parse(prepared.runner, output, prepared.report, repo)
    assert _outcomes(cases)["test/broken.test.js"] == "error"  # named by its path, made relative, not a test


def test_go_test_json_events_give_tests_and_build_failures():
    cases = runners.parse("go", (FIXTURES / "go_test.json").read_text(), None, Path("."))
    assert _outcomes(cases) == {"example.com/calc.TestAdd": "passed", "example.com/calc.TestDiv": "failed",
                                "example.com/calc.TestSlow": "skipped", "example.com/broken": "error"}
    assert "want error" in next(c for c in cases if c.name.endswith("TestDiv")).message
    assert "build failed" in next(c for c in cases if c.name == "example.com/broken").message
    assert runners.prepare(["go", "test", "./..."], Path("/s"), "c").argv == ["go", "test", "-json", "./..."]


def test_cargo_libtest_lines_give_one_result_per_test(tmp_path):
    cases = runners.parse("cargo", (FIXTURES / "cargo_test.txt").read_text(), None, Path("."))
    assert _outcomes(cases) == {"tests::adds": "passed", "tests::fails": "failed", "tests::slow": "skipped"}
    assert "math is broken" in next(c for c in cases if c.name == "tests::fails").message
    crate = tmp_path / "crate"  # the panic's location names the file, where the crate has it
    (crate / "src").mkdir(parents=True)
    (crate / "src" / "lib.rs").write_text("// lib\n")
    fails = next(c for c in runners.parse("cargo", (FIXTURES / "cargo_test.txt").read_text(), None, crate)
                 if c.name == "tests::fails")
    assert fails.file == "src/lib.rs"
    assert runners.exit_class("cargo", 101, False, cases) == runners.TESTS_FAILED


def test_jest_json_gives_tests_and_suites_that_did_not_load(tmp_path):
    report = tmp_path / "cmd.report"
    shutil.copy(FIXTURES / "jest.json", report)
    cases = runners.parse("jest", "", report, Path("/repo/clients/web"))
    assert _outcomes(cases) == {"client lists tasks": "passed", "client shows priority": "failed",
                                "client archives": "skipped", "test/broken.test.js": "error"}
    assert next(c for c in cases if c.outcome == "failed").file == "test/client.test.js"
    assert "Cannot find module" in cases[-1].message
    prepared = runners.prepare(["npx", "vitest", "run"], tmp_path, "cmd")
    assert "--reporter=json" in prepared.argv and prepared.report is not None


def test_a_command_no_runner_knows_gives_no_per_test_results(tmp_path):
    prepared = runners.prepare(["make", "check"], tmp_path, "cmd")
    assert prepared.argv == ["make", "check"] and runners.parse(prepared.runner, "FAIL", None, tmp_path) is None
    assert runners.exit_class("", 2, False, None) == runners.ERROR


GAMED = {
    "tests/test_g.py": (
        "import pytest\n\n"
        "def test_plain():\n    pass\n\n"
        "@pytest.mark.skip(reason='hidden')\ndef test_skipped():\n    assert False\n\n"
        "@pytest.mark.xfail(reason='hidden')\ndef test_xfailed():\n    assert False\n\n"
        "@pytest.mark.xfail(reason='maybe')\ndef test_xpassed():\n    pass\n\n"
        "@pytest.mark.xfail(reason='must fail', strict=True)\ndef test_strict_xpass():\n    pass\n\n"
        "@pytest.mark.slow\ndef test_deselected():\n    pass\n"),
}


def test_pytest_tells_skip_xfail_xpass_and_deselect_apart(tmp_path):
    repo = _tree(tmp_path / "repo", GAMED)
    prepared, output, code = _run([sys.executable, "-m", "pytest", "tests", "-m", "not slow"], repo, tmp_path)
    cases = runners.parse(prepared.runner, output, prepared.report, repo)
    assert _outcomes(cases) == {"tests.test_g.test_plain": "passed", "tests.test_g.test_skipped": "skipped",
                                "tests.test_g.test_xfailed": "xfailed", "tests.test_g.test_xpassed": "xpassed",
                                "tests.test_g.test_strict_xpass": "failed"}  # (the deselected test: not there)
    # only real passes and fails ran: not the skip, not the xfail
    assert {c.name for c in runners.ran(cases)} == {"tests.test_g.test_plain", "tests.test_g.test_xpassed",
                                                    "tests.test_g.test_strict_xpass"}
    assert runners.unparsed("pytest", output, prepared.report, cases) == 0
    prepared, output, code = _run([sys.executable, "-m", "pytest", "tests", "-k", "plain"], repo, tmp_path)
    assert _outcomes(runners.parse(prepared.runner, output, prepared.report, repo)) == {
        "tests.test_g.test_plain": "passed"}


def test_unittest_skip_and_expected_failures_did_not_run(tmp_path):
    repo = _tree(tmp_path / "repo", {"tests/__init__.py": "", "tests/test_u.py": (
        "import unittest\n\nclass U(unittest.TestCase):\n"
        "    def test_ok(self):\n        pass\n"
        "    @unittest.skip('hidden')\n    def test_skip(self):\n        assert False\n"
        "    @unittest.expectedFailure\n    def test_xfail(self):\n        assert False\n"
        "    @unittest.expectedFailure\n    def test_xpass(self):\n        pass\n")})
    prepared, output, code = _run([sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."], repo,
                                  tmp_path)
    cases = runners.parse(prepared.runner, output, prepared.report, repo)
    assert _outcomes(cases) == {"tests.test_u.U.test_ok": "passed", "tests.test_u.U.test_skip": "skipped",
                                "tests.test_u.U.test_xfail": "xfailed", "tests.test_u.U.test_xpass": "failed"}
    assert "unexpected success" in next(c for c in cases if c.name.endswith("test_xpass")).message
    assert len(runners.ran(cases)) == 2 and code == 1


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_node_skip_and_todo_did_not_run(tmp_path):
    repo = _tree(tmp_path / "repo", {"test/t.test.js": (
        "const test = require('node:test');\n"
        "test('runs', () => {});\n"
        "test('skipped', { skip: true }, () => { throw new Error('hidden'); });\n"
        "test('todo that fails', { todo: true }, () => { throw new Error('hidden'); });\n")})
    prepared, output, code = _run(["node", "--test", "test/"], repo, tmp_path)
    cases = runners.parse(prepared.runner, output, prepared.report, repo)
    assert _outcomes(cases) == {"runs": "passed", "skipped": "skipped", "todo that fails": "skipped"}
    assert [c.name for c in runners.ran(cases)] == ["runs"] and code == 0
    assert runners.unparsed("node", output, prepared.report, cases) == 0


def test_cargo_is_run_past_its_first_failing_binary():
    assert runners.prepare(["cargo", "test"], Path("/s"), "c").argv == ["cargo", "test", "--no-fail-fast"]
    assert runners.prepare(["cargo", "test", "--", "--test-threads=1"], Path("/s"), "c").argv == [
        "cargo", "test", "--no-fail-fast", "--", "--test-threads=1"]


def test_unittest_closing_tally_is_no_test(tmp_path):
    # "FAILED (failures=1)" is shaped like a verdict line ("name (where)"): it must not become a test
    repo = _tree(tmp_path / "repo", {"tests/__init__.py": "", "tests/test_one.py": (
        "import unittest\n\nclass O(unittest.TestCase):\n    def test_bad(self):\n        self.fail('no')\n")})
    prepared, output, code = _run([sys.executable, "-m", "unittest", "discover", "-s", "tests", "-t", "."], repo,
                                  tmp_path)
    assert "FAILED (failures=1)" in output
    assert _outcomes(runners.parse(prepared.runner, output, prepared.report, repo)) == {
        "tests.test_one.O.test_bad": "failed"}
