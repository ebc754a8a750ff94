"""The baseline cache (issue 37): the base commit's results kept once per commit, command and environment, in the
object store's shared namespace, and read back by any run (and any host sharing the store); an environment change,
a corrupt entry or an unfinished command is a miss; the latest kept run's per-file durations balance shards."""

from __future__ import annotations

import asyncio
import dataclasses
import gzip
import subprocess
import sys
from pathlib import Path

import pytest

from reposwarm.checks import sandbox
from reposwarm.checks.runner import load_cases, run_profile
from reposwarm.checks.runners import Case
from reposwarm.checks.selection import baselines
from reposwarm.contracts import CheckProfile, CommandResult, TestFailure
from reposwarm.runs import objects
from reposwarm.runs.store import Store

PY = sys.executable
QUICK = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
COMMAND = [PY, "-m", "pytest", "-q", "tests"]
A, B = "a" * 40, "b" * 40


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch) -> Path:
    """This test's REPOSWARM_HOME: the run stores and the shared namespace; checks sandboxed; no object store."""
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "rshome"))
    monkeypatch.delenv(sandbox.SWITCH, raising=False)
    monkeypatch.delenv(sandbox.BWRAP, raising=False)
    monkeypatch.delenv(objects.VARIABLE, raising=False)
    return tmp_path / "rshome"


def profile(**kw) -> CheckProfile:
    return CheckProfile(commands=[COMMAND], timeout_s=120, env={**QUICK, **kw.pop("env", {})}, **kw)


def entries(home: Path) -> list[Path]:
    return sorted(p for p in (home / "shared" / "baselines").rglob("*.json.gz") if p.name != "durations.json.gz")


def real_run(tmp_path: Path) -> tuple[baselines.Cached, Store]:
    """One command's results from a real pytest run on a real repository (one test passing, one failing)."""
    repo = tmp_path / "repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_x.py").write_text("import time\n\n\ndef test_ok():\n    time.sleep(0.2)\n\n\n"
                                              "def test_bad():\n    assert 1 == 2\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    store = Store("baseline-run")
    report = asyncio.run(run_profile(profile(), repo, store, rerun=False, scope="base"))
    (result,) = report.commands
    return baselines.Cached(result, load_cases(store, result), report.failures, report.flaky), store


def test_a_kept_result_loads_whole_in_another_run_with_its_cases_inline(tmp_path, home):
    cached, store = real_run(tmp_path)
    assert cached.cases and cached.failures and cached.result.cases_ref
    env = baselines.environment(profile())
    key = baselines.key(A, COMMAND, env)
    assert baselines.load(key) is None  # (nothing kept yet)
    baselines.keep(key, cached)
    (entry,) = entries(home)
    assert home / "shared" in entry.parents and not (home / "runs" / objects.SHARED).exists()
    assert gzip.decompress(entry.read_bytes())  # (compressed)
    loaded = baselines.load(key)
    assert loaded == cached
    assert any(c.duration_s and c.duration_s >= 0.15 for c in loaded.cases or [])
    # another run (its own store) takes the cases from the entry, not from the run that ran the command
    other = Store("another-run")
    adopted = baselines.adopt(loaded, other)
    assert load_cases(other, adopted) == cached.cases and adopted.log_ref is None
    assert baselines.adopt(loaded, store).log_ref == cached.result.log_ref  # (its own run still has the log)
    # the same environment, worked out again, finds it; another commit or command does not
    assert baselines.load(baselines.key(A, COMMAND, baselines.environment(profile()))) == cached
    assert baselines.load(baselines.key(B, COMMAND, env)) is None
    assert baselines.load(baselines.key(A, [*COMMAND, "-x"], env)) is None


def test_a_change_of_environment_is_a_miss(monkeypatch):
    cached = baselines.Cached(CommandResult(argv=COMMAND, exit_code=0, duration_s=1.0), [], [], [])
    env = baselines.environment(profile())
    baselines.keep(baselines.key(A, COMMAND, env), cached)
    others = [profile(env={"FEATURE": "on"}), profile(network=True), profile(memory_mb=1024),
              profile(setup=[["npm", "ci"]]), profile(read_only_paths=["/opt/x"]), profile(caches=False)]
    digests = {baselines.environment(p) for p in others}
    assert env not in digests and len(digests) == len(others)
    assert all(baselines.load(baselines.key(A, COMMAND, d)) is None for d in digests)
    monkeypatch.setenv(sandbox.SWITCH, "off")  # the sandbox off: another environment
    assert baselines.environment(profile()) != env
    monkeypatch.setenv("REPOSWARM_CHECK_ENV_PASS", "SOME_FLAG")  # a variable the checks see now
    monkeypatch.setenv("SOME_FLAG", "1")
    monkeypatch.delenv(sandbox.SWITCH)
    assert baselines.environment(profile()) != env
    monkeypatch.delenv("REPOSWARM_CHECK_ENV_PASS")
    assert baselines.environment(profile()) == env  # (and back again: the same digest)


def test_the_toolchains_the_checks_see_are_part_of_the_environment():
    checks = CheckProfile(commands=[COMMAND, ["./gradlew", "test"]], setup=[["no-such-tool-37", "x"]])
    seen = baselines.tools(checks, "/usr/bin:/bin")
    assert seen[PY].startswith("python: Python 3.")  # (the venv's Python, with its packages: a digest after it)
    assert "; " in seen[PY] and seen["no-such-tool-37"] == "missing" and "./gradlew" not in seen


def test_a_corrupt_or_foreign_entry_is_a_miss(home):
    cached = baselines.Cached(CommandResult(argv=COMMAND, exit_code=1, duration_s=1.0),
                              [Case("t", "failed", "t.py", "boom", 0.5)], [TestFailure(name="t")], [])
    env = baselines.environment(profile())
    key = baselines.key(A, COMMAND, env)
    baselines.keep(key, cached)
    (entry,) = entries(home)
    good = entry.read_bytes()
    for damaged in (b"not gzip at all", good[: len(good) // 2], gzip.compress(b"{not json"),
                    gzip.compress(b'{"format": 1, "key": "x"}'), gzip.compress(b"[1, 2]")):
        entry.write_bytes(damaged)
        assert baselines.load(key) is None
    entry.write_bytes(good)
    assert baselines.load(key) == cached
    # an entry copied under another key (another commit's) does not answer for it
    other = baselines.key(B, COMMAND, env)
    baselines.keep(other, dataclasses.replace(cached, failures=[]))
    (first, second) = entries(home)
    (second if first == entry else first).write_bytes(good)
    assert baselines.load(other) is None and baselines.load(key) == cached
    assert baselines.load("../../etc/passwd") is None
    with pytest.raises(ValueError, match="commit id"):
        baselines.key("main", COMMAND, env)  # (a branch moves: only a commit id keys a baseline)


def test_only_a_finished_command_is_kept():
    env = baselines.environment(profile())
    for result in (CommandResult(argv=COMMAND, exit_code=None, duration_s=600.0, timed_out=True),
                   CommandResult(argv=COMMAND, exit_code=None, duration_s=3.0)):  # timed out; ended at a limit
        key = baselines.key(A, COMMAND, env)
        baselines.keep(key, baselines.Cached(result, [Case("t", "passed", "t.py", duration_s=9.0)], [], []))
        assert baselines.load(key) is None and baselines.last_durations(COMMAND, env) == {}


def test_last_durations_are_the_latest_kept_runs_per_file(home):
    env = baselines.environment(profile())
    ran = CommandResult(argv=COMMAND, exit_code=0, duration_s=5.0)
    first = [Case("a1", "passed", "tests/a.py", duration_s=4.0), Case("b1", "passed", "tests/b.py", duration_s=1.0)]
    latest = [Case("a1", "passed", "tests/a.py", duration_s=0.5), Case("a2", "passed", "tests/a.py", duration_s=0.25),
              Case("c1", "passed", "tests/c.py", duration_s=2.0), Case("n", "passed", None, duration_s=1.5)]
    assert baselines.last_durations(COMMAND, env) == {}
    baselines.keep(baselines.key(A, COMMAND, env), baselines.Cached(ran, first, [], []))
    assert baselines.last_durations(COMMAND, env) == {"tests/a.py": 4.0, "tests/b.py": 1.0}
    baselines.keep(baselines.key(B, COMMAND, env), baselines.Cached(ran, latest, [], []))
    assert baselines.last_durations(COMMAND, env) == {"tests/a.py": 0.75, "tests/c.py": 2.0, "n": 1.5}
    # a run that reported no times leaves the last ones be; another command or environment has none
    baselines.keep(baselines.key("c" * 40, COMMAND, env), baselines.Cached(ran, None, [], []))
    assert baselines.last_durations(COMMAND, env) == {"tests/a.py": 0.75, "tests/c.py": 2.0, "n": 1.5}
    assert baselines.last_durations([*COMMAND, "-x"], env) == {}
    assert baselines.last_durations(COMMAND, baselines.environment(profile(env={"X": "1"}))) == {}
    (record,) = (home / "shared" / "baselines").rglob("durations.json.gz")
    record.write_bytes(b"garbage")
    assert baselines.last_durations(COMMAND, env) == {}


def test_the_shared_namespace_is_no_run():
    with pytest.raises(ValueError):
        Store(objects.SHARED)
    assert objects.run_dir(objects.SHARED) == objects.home() / "shared"
    assert objects.Location("bucket", "p").key(objects.SHARED, "baselines/x") == "p/shared/baselines/x"
    assert objects.Location("bucket", "").key("run-1", "store/x") == "runs/run-1/store/x"


def test_a_baseline_kept_on_one_host_is_read_on_another(s3_server, tmp_path, monkeypatch):
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    env = baselines.environment(profile())
    key = baselines.key("d" * 40, COMMAND, env)
    cached = baselines.Cached(CommandResult(argv=COMMAND, exit_code=0, duration_s=2.0),
                              [Case("t", "passed", "tests/t.py", duration_s=2.0)], [], [])
    def listed() -> set[str]:  # (the session's object store: other tests may have kept baselines there too)
        found = s3_server.client().list_objects_v2(Bucket=s3_server.bucket,
                                                   Prefix=f"{s3_server.prefix}/shared/baselines/")
        return {o["Key"] for o in found.get("Contents", [])}

    before = listed()
    baselines.keep(key, cached)
    assert len(listed() - before) == 2  # (the entry, and its command's durations)
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "another-host"))  # an empty home: only the object store
    assert baselines.load(key) == cached
    assert baselines.last_durations(COMMAND, env) == {"tests/t.py": 2.0}
