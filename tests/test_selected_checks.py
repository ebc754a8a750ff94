"""Checks at monorepo scale (issue 37), on the activities themselves: plan_check and validate in an
ActivityEnvironment, on real git repositories, the real pytest in the sandbox.

Three services and a shared library: `common/util.py` is imported by svc_a alone, `common/fmt.py` by svc_b. A change
to util runs svc_a's tests only, judged against the same tests of the base commit's run, and says so beside its
verdict; the remainder runs the rest, and the two make the whole profile; a break in the shared module is caught by
the selected run; `when:` filters; the fallbacks (a build file, test configuration); shards merged per test; the
base commit's results reused across runs and recomputed for another environment.
"""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

import pytest
from temporalio.testing import ActivityEnvironment

from activities.checking import plan_check
from activities.validate import validate
from reposwarm.checks import verdicts
from reposwarm.checks.selection import shards
from reposwarm.contracts import CheckProfile, PlanCheckInput, TestReport, ValidateInput, Verdict
from reposwarm.review.package import _checks
from tests.helpers import git, make_repo

pytestmark = pytest.mark.usefixtures("reposwarm_home")

PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
FILES = {
    "pytest.ini": "[pytest]\npythonpath = .\n",
    "common/__init__.py": "",
    "common/util.py": "def double(x):\n    return 2 * x\n",
    "common/fmt.py": "def shout(s):\n    return s.upper() + '!'\n",
    "svc_a/__init__.py": "",
    "svc_a/core.py": "from common.util import double\n\n\ndef quad(x):\n    return double(double(x))\n",
    "svc_a/tests/test_a.py": "from svc_a.core import quad\n\n\ndef test_quad():\n    assert quad(2) == 8\n\n\n"
                             "def test_quad_zero():\n    assert quad(0) == 0\n",
    "svc_b/__init__.py": "",
    "svc_b/core.py": "from common import fmt\n\n\ndef hello(name):\n    return fmt.shout('hi ' + name)\n",
    "svc_b/tests/test_b.py": "from svc_b.core import hello\n\n\ndef test_hello():\n    assert hello('x') == 'HI X!'\n",
    "svc_c/__init__.py": "",
    "svc_c/core.py": "def one():\n    return 1\n",
    "svc_c/tests/test_c.py": "from svc_c.core import one\n\n\ndef test_one():\n    assert one() == 1\n",
    "docs/guide.md": "# guide\n",
}


def profile(**extra) -> CheckProfile:
    # (without this venv's pytest plugins, which cost 1.5 s of CPU at every start)
    return CheckProfile.model_validate({"commands": [PYTEST], "timeout_s": 120,
                                        "env": {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}, **extra})


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


async def baseline(repo: Path, run_id: str, prof: CheckProfile, base: str) -> TestReport:
    return await ActivityEnvironment().run(validate, ValidateInput(
        run_id=run_id, repo_path=str(repo), ref=base, profile_name="default", profile=prof, label="baseline"))


async def check(repo: Path, run_id: str, prof: CheckProfile, ref: str, base: TestReport, scope: str = "affected",
                label: str = "round 1 check 1") -> tuple[TestReport, list]:
    env = ActivityEnvironment()
    made = await env.run(plan_check, PlanCheckInput(run_id=run_id, repo_path=str(repo), ref=ref, since=base.ref,
                                                    profile=prof, scope=scope))
    reports = [await env.run(validate, ValidateInput(
        run_id=run_id, repo_path=str(repo), ref=ref, profile_name="default", profile=prof, baseline=base,
        label=f"{label} shard {p.shard[0]}", part=p)) for p in made.parts]
    merged = reports[0] if len(reports) == 1 else shards.merge(reports) if reports else None
    return merged, made.parts


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return make_repo(tmp_path / "repo", FILES)


def run_id() -> str:
    return f"sel-{uuid.uuid4().hex[:8]}"


async def test_a_change_runs_only_the_tests_that_import_it_and_the_remainder_makes_the_whole(repo):
    rid, prof = run_id(), profile()
    base_sha = git(repo, "rev-parse", "HEAD").strip()
    base = await baseline(repo, rid, prof, base_sha)
    assert base.passed and base.tests_run == 4, base
    head = commit(repo, {"common/util.py": "def double(x):\n    return x + x\n"}, "util: double by addition")
    report, parts = await check(repo, rid, prof, head, base)
    [part] = parts
    assert part.names == {" ".join(PYTEST): ["svc_a/tests/test_a.py"]}, part
    # only svc_a's two tests ran, judged against the same two of the base commit's four: nothing lost, PASSED
    assert report.verdict == Verdict.passed and report.tests_run == 2 and report.base_tests_run == 2, report
    assert report.selection.startswith("affected: 1 of 3 python test files, from 1 changed file"), report.selection
    said = verdicts.summary(report)
    assert said.startswith("PASSED (affected: 1 of 3 python test files"), said  # never told as a run of the whole profile
    assert any("Not the whole profile" in line for line in _checks_lines(report))
    rest, rest_parts = await check(repo, rid, prof, head, base, scope="remainder", label="round 1 check 1 rest")
    [rest_part] = rest_parts
    assert rest_part.names == {" ".join(PYTEST): ["svc_b/tests/test_b.py", "svc_c/tests/test_c.py"]}, rest_part
    whole = shards.merge([report, rest], label="whole profile")
    assert whole.verdict == Verdict.passed and whole.tests_run == base.tests_run == 4, whole


def _checks_lines(report: TestReport) -> list[str]:
    from reposwarm.contracts import ReviewPackage

    pkg = ReviewPackage.model_construct(run_id="r", test_report=report, lanes=[], validations=[])
    return _checks(pkg, report)


async def test_a_break_in_the_shared_module_is_caught_by_the_selected_run(repo):
    rid, prof = run_id(), profile()
    base = await baseline(repo, rid, prof, git(repo, "rev-parse", "HEAD").strip())
    head = commit(repo, {"common/util.py": "def double(x):\n    return 3 * x\n"}, "util: broken")
    report, _ = await check(repo, rid, prof, head, base)
    assert report.verdict == Verdict.failed, report
    assert sorted(f.name for f in report.failures) == ["svc_a.tests.test_a::test_quad"] or \
        {f.name.rsplit("::", 1)[-1].rsplit(".", 1)[-1] for f in report.failures} == {"test_quad"}, report.failures
    assert verdicts.summary(report).startswith("FAILED (affected: 1 of 3 python test files"), verdicts.summary(report)


async def test_when_filters_and_the_fallbacks_say_what_they_did(repo):
    rid = run_id()
    docs = [sys.executable, "-c", "print('docs built')"]
    prof = profile(commands=[PYTEST, {"run": docs, "when": ["docs/**"]}])
    base = await baseline(repo, rid, prof, git(repo, "rev-parse", "HEAD").strip())
    head = commit(repo, {"svc_c/core.py": "def one():\n    return 3 - 2\n"}, "svc_c: one")
    report, [part] = await check(repo, rid, prof, head, base)
    assert part.whole == [] and part.names == {" ".join(PYTEST): ["svc_c/tests/test_c.py"]}, part
    assert report.skipped == [f"`{' '.join(docs)}`: not run: the changes touch none of its when: paths (docs/**)"]
    assert report.verdict == Verdict.passed and report.tests_run == 1
    # a docs change runs the docs command (whole: no test runner) and no test
    head = commit(repo, {"docs/guide.md": "# guide, longer\n"}, "docs")
    report, [part] = await check(repo, rid, prof, head, base, label="round 1 check 2")
    assert part.whole == [" ".join(docs)], part
    # test configuration changed: the graph cannot see through it, so pytest runs whole, and says why
    head = commit(repo, {"pytest.ini": "[pytest]\npythonpath = .\naddopts = -q\n"}, "pytest.ini")
    report, [part] = await check(repo, rid, prof, head, base, label="round 1 check 3")
    assert " ".join(PYTEST) in part.whole, part
    assert "pytest.ini" in part.label and "whole" in part.label, part.label
    # (and the changed test configuration is said as such: never plainly PASSED)
    assert report.tests_run == 4 and report.verdict == Verdict.passed_with_test_changes, report


async def test_shards_split_the_tests_and_merge_per_test(repo):
    rid = run_id()
    prof = profile(commands=[{"run": PYTEST, "shards": 2}], selection="all")
    base = await baseline(repo, rid, prof, git(repo, "rev-parse", "HEAD").strip())
    head = commit(repo, {"svc_b/core.py": "from common import fmt\n\n\ndef hello(name):\n    return 'nope'\n"},
                  "svc_b: broken")
    report, parts = await check(repo, rid, prof, head, base)
    assert [p.shard for p in parts] == [(1, 2), (2, 2)], parts
    split = [set(p.names[" ".join(PYTEST)]) for p in parts]
    assert split[0] | split[1] == {"svc_a/tests/test_a.py", "svc_b/tests/test_b.py", "svc_c/tests/test_c.py"}
    assert not split[0] & split[1], split
    # merged per test: every test ran once, the one failure is named, the verdict is the whole run's
    assert report.tests_run == 4 and report.base_tests_run == 4, report
    assert report.verdict == Verdict.failed and [f.name.rsplit("::", 1)[-1].rsplit(".", 1)[-1]
                                                 for f in report.failures] == ["test_hello"], report.failures
    assert report.selection == "", report.selection  # every test of the profile ran: said as the whole profile


async def test_the_base_commit_s_results_are_kept_and_reused_by_another_run(repo):
    prof = profile()
    base_sha = git(repo, "rev-parse", "HEAD").strip()
    first = await baseline(repo, run_id(), prof, base_sha)
    assert first.passed and not any("reused" in line for line in first.setup), first.setup
    again = await baseline(repo, run_id(), prof, base_sha)
    assert any("reused" in line for line in again.setup), again.setup
    assert again.tests_run == first.tests_run and again.verdict == first.verdict
    # another environment is another baseline: run again
    other = await baseline(repo, run_id(), prof.model_copy(update={"env": {**prof.env, "SOME_FLAG": "1"}}), base_sha)
    assert not any("reused" in line for line in other.setup), other.setup


async def test_selector_go_asks_go_itself_in_the_sandbox_and_the_check_says_so(tmp_path):
    from tests.test_toolselect import GO, HAS_GO, MODULE

    if not HAS_GO:
        pytest.skip("go is not installed")
    repo, rid = make_repo(tmp_path / "mod", MODULE), run_id()
    prof = profile(commands=[GO], selector="go")
    base = await baseline(repo, rid, prof, git(repo, "rev-parse", "HEAD").strip())
    head = commit(repo, {"lib/lib.go": "package lib\n\nfunc Add(a, b int) int { return b + a }\n"}, "lib: add")
    report, [part] = await check(repo, rid, prof, head, base)
    assert part.tool == [" ".join(GO)] and part.changed == ["lib/lib.go"], part
    assert report.verdict == Verdict.passed, report
    assert "go: 2 of 3 packages affected" in report.selection, report.selection
    [ran] = report.commands
    assert ran.argv[:5] == ["go", "test", "-count=1", "-v", "example.com/m/app"], ran.argv
    assert "example.com/m/other" not in ran.output_tail and "--- PASS: TestSum" in ran.output_tail


def test_a_lane_s_run_checks_runs_what_its_change_affects_unless_it_asks_for_all(tmp_path):
    import asyncio

    from reposwarm.agent.specs import RunChecksArgs
    from reposwarm.agent.tools import Toolbox
    from reposwarm.checks.runner import run_profile
    from reposwarm.runs.store import Store
    from reposwarm.slices.policy import PathPolicy

    base = make_repo(tmp_path / "base", FILES)
    lane = tmp_path / "lane"
    git(base, "worktree", "add", "-q", str(lane))
    prof, store = profile(), Store(run_id())
    report = asyncio.run(run_profile(prof, base, store, scope="base"))
    baseline = report.model_copy(update={"ref": git(base, "rev-parse", "HEAD").strip()})
    tools = Toolbox(PathPolicy(lane, ["svc_a/**"]), store=store, check_profiles={"default": prof},
                    baseline=lambda: baseline)
    (lane / "svc_a" / "core.py").write_text("from common.util import double\n\n\ndef quad(x):\n    return 5 * x\n")
    out = tools.run_checks(RunChecksArgs())  # (uncommitted: a lane's edit of this turn)
    first = out.splitlines()[0]
    assert first.startswith("checks FAILED (affected: 1 of 3 python test files, from 1 changed file; 1 new "), out
    assert "failing (new):" in out and "test_quad" in out and "svc_b" not in out.split("$ ", 1)[1], out
    assert "scope \"all\" runs every test" in out
    whole = tools.run_checks(RunChecksArgs(scope="all"))
    assert whole.splitlines()[0].startswith("checks FAILED (") and "4 tests ran" in whole.splitlines()[0], whole
    assert "affected" not in whole.splitlines()[0]
    # a change no test reaches runs nothing, and says so
    (lane / "svc_a" / "core.py").write_text(FILES["svc_a/core.py"])
    (lane / "svc_a" / "notes.py").write_text("NOTE = 1\n")
    quiet = tools.run_checks(RunChecksArgs())
    assert quiet.startswith("checks PASSED (affected: no test, from 1 changed file): no test to run"), quiet


async def test_a_moved_base_runs_again_only_what_its_new_commits_affect(repo):
    rid, prof = run_id(), profile()
    old = await baseline(repo, rid, prof, git(repo, "rev-parse", "HEAD").strip())
    # a teammate's commit lands on the base: it breaks svc_b (not the swarm's doing)
    moved = commit(repo, {"svc_b/core.py": "def hello(name):\n    return 'bye'\n"}, "teammate: svc_b")
    env = ActivityEnvironment()
    made = await env.run(plan_check, PlanCheckInput(run_id=rid, repo_path=str(repo), ref=moved, since=old.ref,
                                                    profile=prof, single=True))
    [part] = made.parts
    new = await env.run(validate, ValidateInput(run_id=rid, repo_path=str(repo), ref=moved, profile_name="default",
                                                profile=prof, label="baseline moved", part=part, moved_from=old))
    assert new.ref == moved and new.tests_run == 4, new  # every test has a result on the new base
    assert [f.name.rsplit(".", 1)[-1].rsplit("::", 1)[-1] for f in new.failures] == ["test_hello"], new.failures
    assert "1 failed" in new.commands[0].output_tail and "passed" not in new.commands[0].output_tail  # only svc_b ran
    assert any("only the tests its new commits affect ran again" in line for line in new.setup), new.setup
    # the swarm's change on the moved base: the teammate's break is the base's, never blamed on the swarm
    head = commit(repo, {"svc_a/core.py": "from common.util import double\n\n\ndef quad(x):\n    return 4 * x\n"},
                  "lane: quad")
    report, _ = await check(repo, rid, prof, head, new)
    rest, _ = await check(repo, rid, prof, head, new, scope="remainder", label="round 1 check 1 rest")
    whole = shards.merge([report, rest])
    assert whole.verdict == Verdict.passed and not whole.failures and len(whole.pre_existing) == 1, whole
    # kept for the next run on this base: the rebased results are reused, not run again
    again = await baseline(repo, run_id(), prof, moved)
    assert any("reused" in line for line in again.setup) and again.tests_run == 4, again.setup


async def test_a_deleted_test_file_runs_the_whole_command_so_its_lost_tests_are_seen(repo):
    rid, prof = run_id(), profile()
    base = await baseline(repo, rid, prof, git(repo, "rev-parse", "HEAD").strip())
    git(repo, "rm", "-q", "svc_b/tests/test_b.py")
    head = commit(repo, {"svc_a/core.py": "from common.util import double\n\n\ndef quad(x):\n    return 4 * x\n"},
                  "svc_a changed, svc_b's test gone")
    report, [part] = await check(repo, rid, prof, head, base)
    assert part.whole == [" ".join(PYTEST)] and "svc_b/tests/test_b.py was deleted" in part.label, part
    assert report.verdict == Verdict.passed_with_test_changes and not report.passed, report
    assert [c.kind.value for c in report.test_changes] == ["lost"], report.test_changes


async def test_a_test_file_named_like_an_option_runs_the_command_whole_never_as_an_argument(tmp_path):
    repo, rid, prof = make_repo(tmp_path / "repo", FILES), run_id(), profile()
    base = await baseline(repo, rid, prof, git(repo, "rev-parse", "HEAD").strip())
    head = commit(repo, {"-pno:terminal_test.py": "def test_x():\n    assert True\n"}, "a test file named as an option")
    report, [part] = await check(repo, rid, prof, head, base)
    assert part.whole == [" ".join(PYTEST)] and part.names == {}, part
    assert "is an option, not a test" in part.label and "the whole command runs" in part.label, part.label
    assert all("-pno:terminal_test.py" not in c.argv for c in report.commands), report.commands
