"""Shards (issue 37): per-test durations from real runners, a split balanced by them, and the shards' judged reports
merged per test into the verdict judging the whole command gives."""

from __future__ import annotations

import asyncio
import itertools
import random
import shutil
import sys
from pathlib import Path

import pytest

from reposwarm.checks import verdicts
from reposwarm.checks.runner import load_cases, run_profile
from reposwarm.checks.runners import Case, parse_go, parse_jest, parse_junit, select
from reposwarm.checks.selection import shards
from reposwarm.contracts import CheckProfile, TestChange, TestChangeKind, TestFailure, TestReport, Verdict
from reposwarm.runs.store import Store
from tests.helpers import make_repo
from tests.test_caches import _sandboxed  # noqa: F401 (autouse: the test's own REPOSWARM_HOME, sandbox on)

PY = sys.executable
QUICK = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}  # (this venv's pytest plugins cost seconds at every start)
HAS_NODE = shutil.which("node") is not None


def cases_of(store: Store, report: TestReport) -> list[Case]:
    return [c for cmd in report.commands for c in load_cases(store, cmd) or []]


# --- durations, from the runners' own reports ---------------------------------------------------------------------

def test_a_real_pytest_and_node_test_run_record_each_tests_duration(tmp_path):
    files = {"tests/__init__.py": "",
             "tests/test_slow.py": "import time\n\n\ndef test_slow():\n    time.sleep(0.3)\n\n\n"
                                   "def test_quick():\n    pass\n",
             "tests/test_other.py": "def test_other():\n    pass\n",
             "test/a.test.js": "const test = require('node:test');\n"
                               "test('slow', async () => { await new Promise(r => setTimeout(r, 300)); });\n"
                               "test('quick', () => {});\n"}
    commands = [[PY, "-m", "pytest", "-q", "tests"]] + ([["node", "--test", "test/"]] if HAS_NODE else [])
    root = make_repo(tmp_path / "repo", files)
    store = Store("durations")
    report = asyncio.run(run_profile(CheckProfile(commands=commands, timeout_s=120, env=QUICK), root, store))
    assert report.passed, report
    by_name = {c.name: c for c in cases_of(store, report)}
    assert by_name["tests.test_slow.test_slow"].duration_s >= 0.25
    assert by_name["tests.test_slow.test_quick"].duration_s is not None
    assert by_name["tests.test_slow.test_quick"].duration_s < 0.25
    per_file = shards.durations(list(by_name.values()))
    assert per_file["tests/test_slow.py"] >= 0.25 > per_file["tests/test_other.py"]
    if HAS_NODE:  # (node's JUnit report names no file for a passing test: its time counts under its name)
        assert by_name["slow"].duration_s >= 0.25 and by_name["quick"].duration_s < 0.25
        assert per_file["slow"] >= 0.25


def test_durations_from_go_json_go_text_jest_and_junit_reports(tmp_path):
    events = "\n".join([
        '{"Action":"run","Package":"example.com/m/calc","Test":"TestA"}',
        '{"Action":"pass","Package":"example.com/m/calc","Test":"TestA","Elapsed":1.25}',
        '{"Action":"fail","Package":"example.com/m/calc","Test":"TestB","Elapsed":0.5}',
        '{"Action":"fail","Package":"example.com/m/calc","Elapsed":1.8}'])
    assert {c.name: c.duration_s for c in parse_go(events) or []} == {
        "example.com/m/calc.TestA": 1.25, "example.com/m/calc.TestB": 0.5}
    text = "=== RUN   TestA\n--- PASS: TestA (0.42s)\nok  \texample.com/m/calc\t0.5s\n"
    assert [c.duration_s for c in parse_go(text) or []] == [0.42]
    jest = ('{"testResults": [{"name": "/r/a.test.js", "assertionResults": [{"fullName": "adds", "status": "passed",'
            ' "duration": 1500}, {"fullName": "todo", "status": "todo", "duration": null}]}]}')
    assert [c.duration_s for c in parse_jest(jest, Path("/r"))] == [1.5, None]
    xml = tmp_path / "r.xml"
    xml.write_text('<testsuite><testcase classname="T" name="a" time="1,234.5"/><testcase classname="T" name="b" '
                   'time="soon"/><testcase classname="T" name="c" time="-1"/></testsuite>')
    assert [c.duration_s for c in parse_junit(xml, tmp_path)] == [1234.5, None, None]


def test_durations_sum_per_file_and_fall_back_to_the_test_name():
    cases = [Case("a1", "passed", "a.py", duration_s=1.0), Case("a2", "failed", "a.py", duration_s=2.5),
             Case("b1", "passed", "b.py"), Case("n1", "passed", None, duration_s=0.5)]
    assert shards.durations(cases) == {"a.py": 3.5, "n1": 0.5}
    by_package = shards.durations([Case("example.com/m/calc.TestA", "passed", duration_s=2.0)],
                                  key=lambda c: c.name.rsplit(".", 1)[0])
    assert by_package == {"example.com/m/calc": 2.0}


# --- the split ----------------------------------------------------------------------------------------------------

def _best(weights: list[float], n: int) -> float:
    """The longest group of the best split, by trying every one (small inputs only)."""
    best = float("inf")
    for where in itertools.product(range(n), repeat=len(weights)):
        loads = [0.0] * n
        for w, g in zip(weights, where, strict=True):
            loads[g] += w
        best = min(best, max(loads))
    return best


def test_a_split_is_within_the_lpt_bound_complete_and_deterministic():
    rng = random.Random(37)
    for trial in range(30):
        n = rng.randint(2, 3)
        names = [f"tests/test_{trial}_{i}.py" for i in range(rng.randint(n, 7))]
        times = {name: round(rng.uniform(0.1, 20), 2) for name in names}
        groups = shards.split(names, times, n)
        assert len(groups) == n and all(groups) and all(g == sorted(g) for g in groups)
        assert sorted(m for g in groups for m in g) == sorted(names)  # each name in exactly one group
        longest = max(sum(times[m] for m in g) for g in groups)
        assert longest <= (4 / 3 - 1 / (3 * n)) * _best([times[m] for m in names], n) + 1e-9
        assert shards.split(list(reversed(names)), dict(reversed(list(times.items()))), n) == groups


def test_a_name_with_no_known_duration_weighs_the_median_and_none_is_left_out():
    # a (9) alone; b (1), c (2) and d (unknown: the median, 2) share the other group
    assert shards.split(["d", "c", "b", "a"], {"a": 9.0, "b": 1.0, "c": 2.0}, 2) == [["a"], ["b", "c", "d"]]
    assert shards.loads([["a"], ["b", "c", "d"]], {"a": 9.0, "b": 1.0, "c": 2.0}) == [9.0, 5.0]
    # nothing known: 1.0 each, dealt evenly; zero-second names still spread over every group
    assert shards.split([f"t{i}" for i in range(5)], {}, 2) == [["t0", "t2", "t4"], ["t1", "t3"]]
    assert all(shards.split(["a", "b", "c"], {"a": 0.0, "b": 0.0, "c": 0.0}, 3))
    assert shards.split(["a", "a", "b"], {}, 4) == [["a"], ["b"], [], []]  # (fewer names than groups)
    with pytest.raises(ValueError):
        shards.split(["a"], {}, 0)


# --- the merge ----------------------------------------------------------------------------------------------------

CALC = "def add(a, b):\n    return a + b\n"
SUITE = {
    "calc.py": CALC,
    "tests/__init__.py": "",
    "tests/test_a.py": "import time\n\n\ndef test_slow():\n    time.sleep(0.4)\n",
    "tests/test_b.py": "import calc\n\n\ndef test_adds():\n    assert calc.add(1, 2) == 3\n\n\ndef test_b2():\n    pass\n",
    "tests/test_c.py": "def test_c():\n    pass\n",
    "tests/test_d.py": "def test_old_bug():\n    assert 1 == 2\n",  # failing on the base already
}


def _judged_shard(profile: CheckProfile, names: list[str], root: Path, store: Store, baseline: TestReport,
                  label: str) -> TestReport:
    """One shard as a lane's targeted run_checks judges it (reposwarm/agent/tools.py): its tests only, with the
    runner's selector, judged against the base commit's run cut down to them."""
    plan = select.plan(profile.commands, names, root)
    assert not plan.unclaimed and not plan.skipped
    report = asyncio.run(run_profile(profile.model_copy(update={"commands": [t.argv for t in plan.targets]}), root,
                                     store))
    report = report.model_copy(update={"selection": label})

    def cases(result):
        return load_cases(store, result)

    narrowed, narrowed_cases = select.narrow(baseline, plan.targets, report.commands, cases)
    return verdicts.judge(report, narrowed, narrowed_cases)


def test_shards_judged_and_merged_give_the_whole_commands_verdict_and_failures(tmp_path):
    profile = CheckProfile(commands=[[PY, "-m", "pytest", "-q", "tests"]], timeout_s=120, env=QUICK)
    store = Store("shards")
    base = make_repo(tmp_path / "base", SUITE)
    baseline = asyncio.run(run_profile(profile, base, store, scope="base"))

    def cases(result):
        return load_cases(store, result)

    # the merged tree: calc broken (test_adds fails, new), test_d still failing (pre-existing)
    tree = make_repo(tmp_path / "tree", {**SUITE, "calc.py": CALC.replace("a + b", "a - b")})
    whole = verdicts.judge(asyncio.run(run_profile(profile, tree, store)), baseline, cases)
    assert whole.verdict == Verdict.failed and [f.name for f in whole.failures] == ["tests.test_b.test_adds"]

    # two shards, balanced by the base run's durations: the slow file alone
    times = shards.durations(cases_of(store, baseline))
    files = sorted(n for n in SUITE if n.startswith("tests/test_"))
    groups = shards.split(files, times, 2)
    assert groups == [["tests/test_a.py"], ["tests/test_b.py", "tests/test_c.py", "tests/test_d.py"]]
    parts = [_judged_shard(profile, g, tree, store, baseline, f"shard {i} of 2") for i, g in enumerate(groups, 1)]
    assert [p.verdict for p in parts] == [Verdict.passed, Verdict.failed]  # the red shard is the one with test_b

    merged = shards.merge(parts, "sharded: 2 shards")
    assert merged.verdict == whole.verdict == Verdict.failed and not merged.passed
    assert [f.name for f in merged.failures] == [f.name for f in whole.failures]
    assert [f.name for f in merged.pre_existing] == [f.name for f in whole.pre_existing] == ["tests.test_d.test_old_bug"]
    assert merged.tests_run == whole.tests_run == 5 and merged.base_tests_run == whole.base_tests_run == 5
    assert merged.problems == whole.problems == []
    assert merged.selection == "sharded: 2 shards" and len(merged.commands) == 2
    assert merged.duration_s == max(p.duration_s for p in parts)


def _report(**kw) -> TestReport:
    return verdicts.settle(TestReport(passed=True, **kw))


def test_a_merge_sums_counts_keeps_each_finding_once_and_settles_the_verdict():
    change = TestChange(kind=TestChangeKind.reconfigured, test="pytest.ini", detail="changed")
    one = _report(tests_run=3, base_tests_run=3, duration_s=4.0, problems=["p"], setup=["setup restored"],
                  skipped=["`x`: nothing affected"], test_changes=[change], base_tests_s=1.0, ref="abc",
                  selection="shard 1 of 2")
    two = _report(tests_run=None, base_tests_run=2, duration_s=9.5, problems=["p", "q"], setup=["setup restored"],
                  skipped=["`x`: nothing affected"], test_changes=[change], flaky=[TestFailure(name="f")],
                  unsandboxed=True)
    merged = shards.merge([one, two])
    assert merged.tests_run == 3 and merged.base_tests_run == 5 and merged.duration_s == 9.5
    assert merged.problems == ["p", "q"] and merged.setup == ["setup restored"]
    assert merged.skipped == ["`x`: nothing affected"] and merged.test_changes == [change]
    assert merged.base_tests_s == 1.0 and merged.unsandboxed and [f.name for f in merged.flaky] == ["f"]
    assert merged.ref == "abc" and merged.selection == "shard 1 of 2" and merged.verdict == Verdict.failed
    green = shards.merge([_report(tests_run=None), _report(tests_run=None, test_changes=[change])])
    assert green.tests_run is None and green.base_tests_s is None
    assert green.verdict == Verdict.passed_with_test_changes and not green.passed
    assert shards.merge([_report(), _report()]).passed
    with pytest.raises(ValueError):
        shards.merge([])
