"""Trials on a repository's own history, proven with the oracle (a model that knows each commit)."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.worker import Replayer

from activities.trials import BASE_REF, prepare_trial_clone, vet_trial
from reposwarm.agent.tools import Toolbox
from reposwarm.contracts import CheckProfile, TrialCloneInput, TrialSpec, TrialVetInput
from reposwarm.review.webui import KIND_ATTR
from reposwarm.slices.policy import PathPolicy, ToolRefused
from tests.helpers import ROOT, WorkerProcess, commit_files, git, make_repo, write_yaml
from workflows.trial import TrialWorkflow

# Recorded batches (tests/record_trials.py, by `make record-history`): batches still open when a worker upgrades
# must go on the way they started.
RECORDED = sorted((Path(__file__).parent / "trial_histories").glob("*.json"))

API = "def total(xs):\n    return sum(xs)\n"
API_TEST = ("import unittest\n\nfrom api.app import total\n\n\nclass T(unittest.TestCase):\n"
            "    def test_total(self):\n        self.assertEqual(total([1, 2]), 3)\n")
WEB = "def show(n):\n    return f'total: {n}'\n"
WEB_TEST = ("import unittest\n\nfrom web.client import show\n\n\nclass T(unittest.TestCase):\n"
            "    def test_show(self):\n        self.assertEqual(show(3), 'total: 3')\n")


def history(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    repo = make_repo(tmp_path / "repo", {
        "api/__init__.py": "", "api/app.py": API, "api/tests/__init__.py": "", "api/tests/test_app.py": API_TEST,
        "web/__init__.py": "", "web/client.py": WEB, "web/tests/__init__.py": "", "web/tests/test_client.py": WEB_TEST,
        "web/README.md": "web\n"})
    first = commit_files(repo, "Add mean to the API and show it in the client", {
        "api/app.py": API + "\n\ndef mean(xs):\n    return total(xs) / len(xs)\n",
        "api/tests/test_app.py": API_TEST + "\n    def test_mean(self):\n        from api.app import mean\n"
                                            "        self.assertEqual(mean([1, 3]), 2)\n",
        "web/client.py": WEB + "\n\ndef show_mean(m):\n    return f'mean: {m}'\n",
        "web/tests/test_client.py": WEB_TEST + "\n    def test_show_mean(self):\n        from web.client import "
                                               "show_mean\n        self.assertEqual(show_mean(2), 'mean: 2')\n",
        "web/README.md": "web, with means\n"})
    commit_files(repo, "Docs only: one area", {"web/README.md": "web, with means and totals\n"})
    second = commit_files(repo, "Rename the client's label", {
        "api/app.py": API + "\n\ndef mean(xs):\n    return total(xs) / len(xs)\n\n\nLABEL = 'sum'\n",
        "web/client.py": WEB.replace("total:", "sum:") + "\n\ndef show_mean(m):\n    return f'mean: {m}'\n",
        "web/tests/test_client.py": WEB_TEST.replace("total: 3", "sum: 3") + "\n    def test_show_mean(self):\n"
                                    "        from web.client import show_mean\n"
                                    "        self.assertEqual(show_mean(2), 'mean: 2')\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["web/"]}}},
        "validation": {"profiles": {"default": {"commands": [
            [sys.executable, "-m", "unittest", "discover", "-s", "api/tests", "-t", "."],
            [sys.executable, "-m", "unittest", "discover", "-s", "web/tests", "-t", "."]]}}}})
    return repo, lanes, [first, second]


def trial(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), "trial", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env)


@pytest.mark.usefixtures("worker")
async def test_the_oracle_scores_perfectly_and_a_wrong_one_exactly(temporal_address, tmp_path):
    repo, lanes, (first, second) = history(tmp_path)
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address}
    perfect = await asyncio.to_thread(trial, "--repo", str(repo), "--commits", "HEAD~3..HEAD", "--lanes", str(lanes),
                                      "--oracle", "--json", env=env)
    assert perfect.returncode == 0, perfect.stderr
    out = json.loads(perfect.stdout)
    assert out["oracle"] is True
    assert [t["sha"] for t in out["trials"]] == [first, second]  # the docs-only commit spans one lane: left out
    for t in out["trials"]:
        assert (t["status"], t["tests_passed"], t["stray"], t["missed"]) == ("scored", True, [], []), t
        assert t["lines_swarm"] == t["lines_commit"]
    assert out["summary"]["pass_rate"] == 1.0 and out["summary"]["stray_edit_rate"] == 0.0
    assert git(repo, "branch", "--format=%(refname:short)") == "main"  # the user's repository is untouched

    wrong = await asyncio.to_thread(trial, "--repo", str(repo), "--commits", first, "--lanes", str(lanes),
                                    "--oracle", "extra=api&skip=web", "--json", env=env)
    (t,) = json.loads(wrong.stdout)["trials"]
    assert t["stray"] == ["api/ORACLE_EXTRA.txt"] and t["missed"] == ["web/README.md"]
    assert t["tests_passed"] is True

    idle = await asyncio.to_thread(trial, "--repo", str(repo), "--commits", first, "--lanes", str(lanes),
                                   "--oracle", "idle=1", "--json", env=env)
    (t,) = json.loads(idle.stdout)["trials"]
    assert t["tests_passed"] is False  # the commit's own tests, on the parent's code
    assert t["tests"] == ["api/tests/test_app.py", "web/tests/test_client.py"]
    assert len(t["missed"]) == 5 and t["stray"] == []


async def test_a_killed_batch_resumes_without_rerunning_finished_trials(client, temporal_address, tmp_path):
    repo, lanes, (first, second) = history(tmp_path)
    queue, home = f"trials-{uuid.uuid4().hex[:6]}", tmp_path / "home"
    batch = f"trial-resume-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address, "REPOSWARM_TASK_QUEUE": queue,
           "REPOSWARM_HOME": str(home)}
    worker = WorkerProcess(temporal_address, queue, home).start()
    await worker.ready()
    starter_proc = subprocess.Popen([sys.executable, str(ROOT / "starter.py"), "trial", "--repo", str(repo),
                                     "--commits", first, second, "--lanes", str(lanes), "--oracle",
                                     "--parallel", "1", "--batch", batch], cwd=ROOT, env=env,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    results = home / "trials" / batch / "results.jsonl"
    for _ in range(600):
        if results.exists() and results.read_text().count("\n") >= 1:
            break
        await asyncio.sleep(0.1)
    assert results.exists(), worker.log.read_text()
    os.killpg(worker.proc.pid, 9)  # the worker dies with the batch half done
    worker.proc.wait()
    again = WorkerProcess(temporal_address, queue, home).start()
    try:
        await again.ready()
        out, err = await asyncio.to_thread(starter_proc.communicate, timeout=300)
        assert starter_proc.returncode == 0, err
    finally:
        again.stop()
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert sorted(t["sha"] for t in lines) == sorted([first, second])  # each written once
    for sha in (first, second):
        runs = [w async for w in client.list_workflows(f"WorkflowId = '{batch}-{sha[:10]}'")]
        assert len(runs) == 1  # no finished trial ran again


def _commits(repo: Path, *shas: str) -> list[TrialSpec]:
    return [TrialSpec(sha=sha, parent=git(repo, "rev-parse", f"{sha}^"), message=git(repo, "log", "-1", "--format=%B",
                                                                                     sha)) for sha in shas]


@pytest.fixture
def visible_dir():
    """A folder outside /tmp and HOME, which the sandbox leaves readable (it hides only those and the worker's
    home): where a user's repository may well be, and where a check could read it if it knew the path."""
    folder = Path(tempfile.mkdtemp(prefix="reposwarm-trial-test-", dir="/var/tmp"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def test_a_trial_clone_holds_nothing_after_its_base(visible_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    repo, _, (first, _) = history(visible_dir)
    base = git(repo, "rev-parse", f"{first}^")
    secret = commit_files(repo, "Later work", {"api/answer.py": "ANSWER = 'GOLD_ANSWER_42'\n"})
    git(repo, "tag", "-a", "-m", "release", "v1", first)
    git(repo, "tag", "later", secret)
    git(repo, "branch", "feature", first)
    git(repo, "notes", "add", "-m", "the answer is in " + first, first)
    git(repo, "update-ref", "refs/pull/1/head", secret)
    git(repo, "pack-refs", "--all")
    git(repo, "gc", "-q")  # one pack holding every commit: a clone copying or sharing it would hold the answer

    clone = Path(prepare_trial_clone(TrialCloneInput(batch_id="b1", repo_path=str(repo), sha=first,
                                                     base=base)).path)
    assert prepare_trial_clone(TrialCloneInput(batch_id="b1", repo_path=str(repo), sha=first,
                                               base=base)).path == str(clone)  # a retry reuses it
    for gold in (first, secret):
        assert subprocess.run(["git", "-C", str(clone), "cat-file", "-e", gold], capture_output=True).returncode != 0
    assert git(clone, "log", "--all", "--format=%H").split() == git(repo, "rev-list", base).split()
    assert git(clone, "for-each-ref", "--format=%(refname) %(objectname)") == f"{BASE_REF} {base}"
    assert git(clone, "tag") == "" and git(clone, "reflog", "--all") == ""
    assert subprocess.run(["git", "-C", str(clone), "notes", "list"], capture_output=True, text=True).stdout == ""
    assert git(clone, "config", "--list", "--local").find(str(repo)) == -1  # no remote, no url
    # every object it holds is reachable from the base: no pack of the user's came along, and none is shared
    held = set(git(clone, "cat-file", "--batch-all-objects", "--batch-check=%(objectname)").split())
    assert held == {line.split()[0] for line in git(clone, "rev-list", "--objects", "--all").splitlines()}
    assert not (clone / "objects" / "info" / "alternates").exists()
    leaked = [p for p in clone.rglob("*") if p.is_file() and (first.encode() in p.read_bytes()
                                                                or str(repo).encode() in p.read_bytes())]
    assert leaked == []  # (no FETCH_HEAD, packed-refs or log naming the answer or where it is)

    # A lane's worktree of the clone, as the swarm makes it: its checks and read tools find no trace of the gold.
    lane = tmp_path / "lane"
    git(clone, "worktree", "add", "-q", "--detach", str(lane), BASE_REF)
    tools = Toolbox(PathPolicy(lane, ["**"]), check_profiles={"default": CheckProfile(commands=[
        ["git", "show", "--stat", first], ["git", "cat-file", "-e", secret], ["git", "log", "--all", "--oneline"],
        ["git", "grep", "-c", "GOLD_ANSWER", secret]])})
    out = tools.call("run_checks", {})
    assert out.count("(exit 0;") == 1 and "$ git log --all --oneline  (exit 0;" in out, out
    logged = out.split("$ git log --all --oneline", 1)[1].split("\n$ ", 1)[0]
    assert first[:7] not in logged and secret[:7] not in logged  # (whatever history the check is shown)
    assert tools.call("search", {"pattern": "GOLD_ANSWER|show_mean"}) == "no matches"
    with pytest.raises(ToolRefused):
        tools.call("read_file", {"path": ".git"})


async def test_a_task_is_vetted_once_per_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    repo, _, (first, _) = history(tmp_path)
    profile = CheckProfile(commands=[[sys.executable, "-m", "unittest", "discover", "-s", "api/tests", "-t", "."]],
                           timeout_s=120)
    (spec,) = _commits(repo, first)
    vetted = await vet_trial(TrialVetInput(repo_path=str(repo), spec=spec, profile=profile))
    assert (vetted.ok, vetted.cached) == (True, False), vetted
    again = await vet_trial(TrialVetInput(repo_path=str(repo), spec=spec, profile=profile))
    assert (again.ok, again.cached) == (True, True)  # a re-run trial runs no check again
    (no_tests,) = _commits(repo, git(repo, "rev-parse", "HEAD~1"))  # "Docs only": no test tells it apart
    bad = await vet_trial(TrialVetInput(repo_path=str(repo), spec=no_tests, profile=profile))
    assert not bad.ok and "no test" in bad.reason
    assert git(repo, "worktree", "list").count("\n") == 0  # vetting left nothing in the user's repository


def bad_history(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """Beside a good commit, one whose own tests fail on it and one whose tests pass on its base already."""
    repo, lanes, (first, _) = history(tmp_path)
    idle = commit_files(repo, "Test what already works, and reword a label", {
        "api/tests/test_empty.py": "import unittest\n\nfrom api.app import total\n\n\nclass T(unittest.TestCase):\n"
                                   "    def test_empty(self):\n        self.assertEqual(total([]), 0)\n",
        "web/README.md": "web, with means, totals and medians\n"})
    broken = commit_files(repo, "Add a median that its test proves wrong", {
        "api/app.py": git(repo, "show", "HEAD:api/app.py") + "\n\ndef median(xs):\n    return xs[0]\n",
        "api/tests/test_median.py": "import unittest\n\nfrom api.app import median\n\n\nclass T(unittest.TestCase):\n"
                                    "    def test_median(self):\n        self.assertEqual(median([1, 2, 3]), 2)\n",
        "web/client.py": git(repo, "show", "HEAD:web/client.py") + "\n\nMEDIAN = 'median'\n"})
    return repo, lanes, {"good": first, "broken": broken, "idle": idle}


async def test_a_bad_task_is_reported_as_such_and_left_out_of_the_score(client, temporal_address, worker, tmp_path):
    repo, lanes, shas = bad_history(tmp_path)
    batch = f"trial-bad-{uuid.uuid4().hex[:6]}"
    env = {**os.environ, "TEMPORAL_ADDRESS": temporal_address}
    done = await asyncio.to_thread(trial, "--repo", str(repo), "--commits", shas["broken"], shas["idle"],
                                   shas["good"], "--lanes", str(lanes), "--oracle", "--json", "--batch", batch, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    by = {t["sha"]: t for t in out["trials"]}
    broken, idle, good = by[shas["broken"]], by[shas["idle"]], by[shas["good"]]
    assert broken["status"] == "bad_task" and "fails its own tests" in broken["bad_reason"], broken
    assert "test_median" in broken["bad_reason"]
    assert idle["status"] == "bad_task" and "already passes" in idle["bad_reason"], idle
    for bad in (broken, idle):  # not a swarm failure: no swarm ran, and nothing of one is counted
        assert (bad["failure"], bad["tests_passed"], bad["missed"], bad["lines_swarm"]) == ("", None, [], 0)
        assert [w async for w in client.list_workflows(f"WorkflowId = '{bad['run_id']}'")] == []
    assert (good["status"], good["tests_passed"], good["stray"], good["missed"]) == ("scored", True, [], [])
    (run,) = [w async for w in client.list_workflows(f"WorkflowId = '{good['run_id']}'")]
    assert run.typed_search_attributes.get(KIND_ATTR) == "trial"  # the Web UI's saved views leave trials out
    assert out["summary"]["trials"] == 1 and out["summary"]["bad_tasks"] == 2
    assert out["summary"]["pass_rate"] == 1.0  # the good task alone: the bad ones neither pass nor fail it

    # today's batch (vetted, a clone per trial) replays on today's code
    await Replayer(workflows=[TrialWorkflow], data_converter=pydantic_data_converter).replay_workflow(
        await client.get_workflow_handle(batch).fetch_history())

    shown = await asyncio.to_thread(trial, "--repo", str(repo), "--commits", shas["broken"], "--lanes", str(lanes),
                                    "--oracle", env=env)
    assert "bad_task: the commit fails its own tests" in shown.stdout, shown.stdout
    assert "0 trials (1 bad tasks left out): pass rate None" in shown.stdout


def test_there_is_a_recorded_batch():
    assert RECORDED


@pytest.mark.parametrize("path", RECORDED, ids=[p.stem for p in RECORDED])
async def test_a_batch_recorded_before_replays(path):
    recorded = WorkflowHistory.from_json(path.stem, path.read_text())
    scheduled = [e.activity_task_scheduled_event_attributes.activity_type.name
                 for e in recorded.events if e.HasField("activity_task_scheduled_event_attributes")]
    # (tests/record_trials.py) both tasks vetted; the good one alone cloned at its base; both scored
    assert sorted(scheduled) == ["prepare_trial_clone", "score_trial", "score_trial", "vet_trial", "vet_trial"]
    assert sum(e.HasField("start_child_workflow_execution_initiated_event_attributes") for e in recorded.events) == 1
    await Replayer(workflows=[TrialWorkflow], data_converter=pydantic_data_converter).replay_workflow(recorded)
