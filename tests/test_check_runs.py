"""The checks as the gate runs them (reposwarm/checks/runner.py, in the real sandbox, with real runners): a failed
command says why, first; a flaky command whose re-run is green counts as green; failures a runner reports are
failures whatever its exit code; a runner's results its parser missed leave the check not fully judged; and cargo
runs every test binary and its doc tests."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from reposwarm.checks import runner, verdicts
from reposwarm.contracts import CheckProfile, ExitClass
from reposwarm.runs.store import Store
from tests.helpers import HAS_CARGO, cargo_on_path

PY = sys.executable
QUICK = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # (this venv's pytest plugins cost 1.5 s of CPU at every start)


def _tree(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    return root


async def test_a_missing_command_says_so_first(tmp_path):
    report = await runner.run_profile(CheckProfile(commands=[["pytset", "-q"]], timeout_s=60), tmp_path, None)
    command = report.commands[0]
    assert not report.passed and command.reason == "command not found: pytset"
    assert report.failures[0].message.startswith("command not found: pytset")


async def test_a_missing_command_unsandboxed_says_so_too(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOSWARM_SANDBOX", "off")
    report = await runner.run_profile(CheckProfile(commands=[["pytset"]], timeout_s=60), tmp_path, None)
    assert report.commands[0].exit_code == 127 and report.commands[0].reason == "command not found: pytset"


async def test_a_hang_says_it_timed_out(tmp_path):
    profile = CheckProfile(commands=[[PY, "-c", "import time; time.sleep(60)"]], timeout_s=2)
    report = await runner.run_profile(profile, tmp_path, None)
    assert report.commands[0].reason == "timed out after 2 s"
    assert report.failures[0].message.startswith("timed out after 2 s")


@pytest.mark.parametrize("script, limits, said", [
    ("x = bytearray(2 ** 30)", {"memory_mb": 256}, "killed by the memory limit (256 MB of address space)"),
    ("open('big.bin', 'wb').write(b'y' * (3 * 1024 * 1024))", {"max_file_mb": 1},
     "killed by the file size limit (1 MB per file)"),
    ("import subprocess\nps = [subprocess.Popen(['sleep', '5']) for _ in range(40)]", {"max_processes": 8},
     "killed by the process limit (8 processes)"),
])
async def test_a_limit_says_which(tmp_path, script, limits, said):
    report = await runner.run_profile(CheckProfile(commands=[[PY, "-c", script]], timeout_s=60, **limits),
                                      tmp_path, None, rerun=False)
    assert report.commands[0].reason == said and report.failures[0].message.startswith(said)


async def test_a_base_that_cannot_run_is_not_judged_for_its_reason_not_for_want_of_junit(tmp_path):
    profile = CheckProfile(commands=[["pytset"]], timeout_s=60)
    base = await runner.run_profile(profile, tmp_path, None)
    merged = await runner.run_profile(profile, tmp_path, None)
    judged = verdicts.judge(merged, base, lambda c: None)
    assert not judged.passed
    assert judged.problems == ["`pytset`: this check fails on the base commit: command not found: pytset"]


FLAKY = {
    "tests/test_flaky.py": (
        "from pathlib import Path\n\n"
        "def test_flaky():\n"
        "    marker = Path(__file__).parent / 'ran_once'\n"
        "    if not marker.exists():\n"
        "        marker.write_text('x')\n"
        "        assert False, 'fails on its first run only'\n\n"
        "def test_steady():\n    pass\n"),
}


async def test_a_flake_that_passes_on_its_re_run_is_a_green_base(tmp_path, reposwarm_home):
    store = Store("flaky-base")
    profile = CheckProfile(commands=[[PY, "-m", "pytest", "-q", "tests"]], timeout_s=120, env=QUICK)
    base = await runner.run_profile(profile, _tree(tmp_path / "base", FLAKY), store)
    assert base.passed and [f.name for f in base.flaky] == ["tests.test_flaky.test_flaky"]
    command = base.commands[0]
    assert command.exit_code == 0 and command.exit_class == ExitClass.passed and command.reason == ""  # the re-run counts
    merged = await runner.run_profile(profile, _tree(tmp_path / "merged", FLAKY), store)
    judged = verdicts.judge(merged, base, lambda c: runner.load_cases(store, c))
    assert judged.passed and not judged.problems  # not "this check already fails on the base commit"


async def test_failures_count_though_the_runner_exits_0(tmp_path):
    tree = _tree(tmp_path, {
        "conftest.py": "def pytest_sessionfinish(session, exitstatus):\n    session.exitstatus = 0\n",
        "tests/test_a.py": "def test_ok():\n    pass\n\ndef test_broken():\n    assert 1 == 2\n"})
    profile = CheckProfile(commands=[[PY, "-m", "pytest", "tests"]], timeout_s=120, env=QUICK)
    report = await runner.run_profile(profile, tree, None)
    assert report.commands[0].exit_code == 0
    assert not report.passed and [f.name for f in report.failures] == ["tests.test_a.test_broken"]
    assert report.commands[0].exit_class == ExitClass.tests_failed and "1 test(s) failed" in report.commands[0].reason


async def test_results_the_parser_missed_leave_the_check_not_fully_judged(tmp_path):
    # a test that writes to stderr (where unittest writes its verdicts) with no newline runs its verdict into
    # its output ("... hellook"): no parser can tell it from the output, but unittest's "Ran 2 tests" counts it
    tree = _tree(tmp_path, {"tests/__init__.py": "", "tests/test_p.py": (
        "import unittest\n\nclass T(unittest.TestCase):\n"
        "    def test_prints(self):\n        import sys; sys.stderr.write('hello')\n"
        "    def test_plain(self):\n        pass\n")})
    profile = CheckProfile(commands=[[PY, "-m", "unittest", "discover", "-s", "tests", "-t", "."]], timeout_s=120)
    report = await runner.run_profile(profile, tree, None)
    assert report.commands[0].exit_code == 0 and report.commands[0].unparsed_results == 1
    assert not report.passed and "not fully judged" in report.problems[0]
    judged = verdicts.judge(report, report, lambda c: None)
    assert not judged.passed and any("not fully judged" in p for p in judged.problems)


CRATE = {
    "Cargo.toml": '[package]\nname = "gate"\nversion = "0.1.0"\nedition = "2021"\n',
    "src/lib.rs": ("/// Adds.\n///\n/// ```\n/// assert_eq!(gate::add(2, 3), 6);\n/// ```\n"
                   "pub fn add(a: i32, b: i32) -> i32 { a + b }\n"),
    "tests/a_first.rs": "#[test]\nfn integration_fails() { assert_eq!(gate::add(1, 1), 3); }\n",
    "tests/b_second.rs": "#[test]\nfn later_binary_passes() { assert_eq!(gate::add(1, 1), 2); }\n",
}


@pytest.mark.skipif(not HAS_CARGO, reason="cargo is not installed")
async def test_cargo_runs_the_doc_tests_after_a_failing_test_binary(tmp_path, monkeypatch):
    cargo = cargo_on_path(monkeypatch)
    assert cargo is not None
    profile = CheckProfile(commands=[[cargo, "test", "--offline"]], timeout_s=300, memory_mb=16384)
    report = await runner.run_profile(profile, _tree(tmp_path / "crate", CRATE), None, rerun=False)
    assert sorted(f.name for f in report.failures) == ["integration_fails", "src/lib.rs - add (line 3)"]
    assert report.tests_run == 3 and report.commands[0].unparsed_results == 0
