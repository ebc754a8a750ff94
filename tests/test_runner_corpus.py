"""Every runner's parser on a corpus of its outputs (tests/fixtures/runner_outputs/): pytest, unittest, node
--test and cargo test ran for real (generate.py remakes them); go, jest, vitest and a Surefire JUnit report are
written by hand in each tool's documented shape (go, jest and vitest are not installed here). Doc tests,
subtests, parametrised and duplicate names, names with spaces and unicode, and crashes mid-run; and each
runner's independent count, which says when a parser missed results."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reposwarm.checks import runners

CORPUS = Path(__file__).parent / "fixtures" / "runner_outputs"

EXPECTED: dict[str, dict[str, str] | None] = {
    "pytest_mixed": {
        "tests.test_broken": "error", "tests.test_mixed.test_ok": "passed", "tests.test_mixed.test_fail": "failed",
        "tests.test_mixed.test_skip": "skipped", "tests.test_mixed.test_xfail": "xfailed",
        "tests.test_mixed.test_xpass": "xpassed", "tests.test_mixed.test_xpass_strict": "failed",
        "tests.test_mixed.test_param[1]": "passed", "tests.test_mixed.test_param[2]": "failed",
        "tests.test_mixed.test_param[\\xfc x]": "passed", "tests.test_mixed.test_param[a - b]": "passed",
        "tests.test_mixed.test_same_id[0_0]": "passed", "tests.test_mixed.test_same_id[0_1]": "passed",
        "tests.test_mixed.test_xpass_param[p - q]": "xpassed", "tests.test_mixed.test_teardown_error": "failed",
        "tests.test_mixed.test_ünïcode": "passed", "tests.test_mixed.TestGroup.test_method": "passed"},
    "pytest_crash": None,  # pytest died before writing its report: no per-test results, never a green
    "unittest_mixed": {
        "tests.test_broken": "error", "tests.test_mixed.T.test_documented": "passed",
        "tests.test_mixed.T.test_error": "failed", "tests.test_mixed.T.test_fail": "failed",
        "tests.test_mixed.T.test_ok": "passed", "tests.test_mixed.T.test_prints": "passed",
        "tests.test_mixed.T.test_skip": "skipped", "tests.test_mixed.T.test_subtests": "failed",
        "tests.test_mixed.T.test_subtests_pass": "passed", "tests.test_mixed.T.test_xfail": "xfailed",
        "tests.test_mixed.T.test_xpass": "failed", "tests.test_mixed.T.test_ünïcode": "passed"},
    "unittest_crash": {"tests.test_crash.C.test_a": "passed", "tests.test_crash.C.test_b_crash": "failed"},
    "node_mixed": {
        "adds": "passed", "fails": "failed", "skipped one": "skipped", "todo one": "skipped",
        "todo failing": "skipped", "ünïcode name with spaces": "passed", "adds #2": "passed", "sub a": "passed",
        "sub b": "failed", "inner": "passed", "test/broken.test.js": "error", "test/crash.test.js": "error"},
    "cargo_mixed": {
        "tests::adds": "passed", "tests::fails": "failed", "tests::panics": "passed", "tests::slow": "skipped",
        "tests::slow_plain": "skipped", "tests::tést_ünï": "passed", "adds": "passed",
        "integration_fails": "failed", "second_ok": "passed", "a_before": "passed", "b_crash": "failed",
        "src/lib.rs - add (line 5)": "passed", "src/lib.rs - cf (line 26)": "passed",
        "src/lib.rs - ign (line 19)": "skipped", "src/lib.rs - sub (line 12)": "failed"},
    "go_mixed": {
        "example.com/calc.TestAdd": "passed", "example.com/calc.TestDiv": "failed",
        "example.com/calc.TestSkip": "skipped", "example.com/calc.TestTable/zero": "passed",
        "example.com/calc.TestTable/ünï_name_with_spaces": "failed", "example.com/calc.TestTable": "failed",
        "example.com/calc.TestPanic": "failed", "example.com/mainexit.TestOK": "passed",
        "example.com/mainexit": "error", "example.com/broken": "error"},
    "jest_mixed": {
        "client lists tasks": "passed", "client shows priority": "failed", "client archives": "skipped",
        "client exports ünï data with spaces": "passed", "client imports": "skipped",
        "client filtered by -t lists tasks": "skipped", "client lists tasks #2": "passed",
        "test/broken.test.js": "error"},
    "vitest_mixed": {"sum adds": "passed", "sum carries": "failed", "sum big numbers": "skipped",
                     "sum negative": "skipped", "sum zero": "passed", "src/broken.test.ts": "error"},
    "junit_surefire": {"com.example.CalcTest.adds": "passed", "com.example.CalcTest.divides": "failed",
                       "com.example.CalcTest.parses": "failed", "com.example.CalcTest.slow": "skipped",
                       "com.example.CalcTest.ünï name with spaces": "passed"},
}


def _load(name: str, tmp_path: Path) -> tuple[str, str, Path | None, Path]:
    meta = json.loads((CORPUS / f"{name}.meta.json").read_text())
    report = CORPUS / f"{name}.report"
    output = (CORPUS / f"{name}.out").read_text(encoding="utf-8")
    return meta["runner"], output, report if report.exists() else None, Path(meta["cwd"])


def _parsed(name: str, tmp_path: Path) -> list[runners.Case] | None:
    runner, output, report, cwd = _load(name, tmp_path)
    if runner == "node":
        # node names a test file that did not load by its path; it is told from a test by the file being there:
        # the recorded tree, made again with those two files, under this test's own folder
        here = tmp_path / "node_mixed"
        (here / "test").mkdir(parents=True)
        for file in ("broken.test.js", "crash.test.js"):
            (here / "test" / file).write_text("//\n")
        moved = tmp_path / "node.report"
        assert report is not None
        moved.write_text(report.read_text(encoding="utf-8").replace(str(cwd), str(here)), encoding="utf-8")
        report, output, cwd = moved, output.replace(str(cwd), str(here)), here
    return runners.parse(runner, output, report, cwd)


def test_every_corpus_output_has_its_expectation():
    assert {p.name.removesuffix(".meta.json") for p in CORPUS.glob("*.meta.json")} == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_output_parses_to_every_test_with_its_outcome(name, tmp_path):
    cases = _parsed(name, tmp_path)
    expected = EXPECTED[name]
    if expected is None:
        assert cases is None
        return
    assert cases is not None and {c.name: c.outcome for c in cases} == expected
    assert len(cases) == len(expected)  # (no name twice: a duplicate is "name #2")
    runner, output, report, _ = _load(name, tmp_path)
    assert runners.unparsed(runner, output, report, cases) == 0  # the independent count agrees


@pytest.mark.parametrize("name", ["cargo_mixed", "unittest_mixed", "pytest_mixed", "node_mixed", "go_mixed",
                                  "jest_mixed", "vitest_mixed", "junit_surefire"])
def test_a_parser_that_misses_results_is_caught_by_the_independent_count(name, tmp_path):
    """As if the parser could not read some tests (the old cargo parser never saw a doc test): the runner's own
    count says how many it missed."""
    cases = _parsed(name, tmp_path)
    assert cases
    runner, output, report, _ = _load(name, tmp_path)
    if runner == "node":
        report = tmp_path / "node.report"
    tested = [c for c in cases if c.outcome != "error"]
    missed = tested[-2:]
    kept = [c for c in cases if c not in missed]
    assert runners.unparsed(runner, output, report, kept) == 2


def test_doc_tests_and_the_binaries_after_a_failing_one_are_read(tmp_path):
    cases = _parsed("cargo_mixed", tmp_path)
    assert cases is not None
    sub = next(c for c in cases if c.name == "src/lib.rs - sub (line 12)")
    assert "left: -1" in sub.message  # its failure's output, found under its name with spaces
    assert next(c for c in cases if c.name == "tests::slow").message == "slow on CI"  # the ignore's reason
    crashed = next(c for c in cases if c.name == "b_crash")
    assert "SIGABRT" in crashed.message  # the binary died during it: failed, and why
    # a doc test failing, and the integration tests after the first failing binary, were all run (--no-fail-fast)
    meta = json.loads((CORPUS / "cargo_mixed.meta.json").read_text())
    assert "--no-fail-fast" in meta["argv"] and meta["argv"].index("--no-fail-fast") < meta["argv"].index("--")


def test_only_real_passes_and_fails_count_as_run(tmp_path):
    cases = _parsed("pytest_mixed", tmp_path)
    assert cases is not None
    ran = {c.name for c in runners.ran(cases)}
    assert "tests.test_mixed.test_skip" not in ran and "tests.test_mixed.test_xfail" not in ran
    assert "tests.test_mixed.test_xpass" in ran  # it ran and passed, though marked xfail
    assert "tests.test_broken" not in ran  # a module that did not load ran nothing
    assert len(ran) == 14  # of 17: not the module that did not load, the skip, the xfail


def test_old_stored_cases_still_load():
    stored = {"name": "tests.test_a.T.test_ok", "outcome": "passed", "file": "tests/test_a.py", "message": ""}
    assert runners.Case(**stored).outcome == "passed"


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_corpus_was_made_by_the_gate_s_own_prepare():
    meta = json.loads((CORPUS / "node_mixed.meta.json").read_text())
    assert "--test-reporter=junit" in meta["argv"] and "--test-reporter=spec" in meta["argv"]
    meta = json.loads((CORPUS / "pytest_mixed.meta.json").read_text())
    assert "-rfExX" in meta["argv"]
