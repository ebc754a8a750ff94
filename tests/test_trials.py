"""Trials on a repository's own history, proven with the oracle (a model that knows each commit)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.helpers import ROOT, WorkerProcess, git, make_repo, write_yaml

API = "def total(xs):\n    return sum(xs)\n"
API_TEST = ("import unittest\n\nfrom api.app import total\n\n\nclass T(unittest.TestCase):\n"
            "    def test_total(self):\n        self.assertEqual(total([1, 2]), 3)\n")
WEB = "def show(n):\n    return f'total: {n}'\n"
WEB_TEST = ("import unittest\n\nfrom web.client import show\n\n\nclass T(unittest.TestCase):\n"
            "    def test_show(self):\n        self.assertEqual(show(3), 'total: 3')\n")


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


def history(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    repo = make_repo(tmp_path / "repo", {
        "api/__init__.py": "", "api/app.py": API, "api/tests/__init__.py": "", "api/tests/test_app.py": API_TEST,
        "web/__init__.py": "", "web/client.py": WEB, "web/tests/__init__.py": "", "web/tests/test_client.py": WEB_TEST,
        "web/README.md": "web\n"})
    first = commit(repo, "Add mean to the API and show it in the client", {
        "api/app.py": API + "\n\ndef mean(xs):\n    return total(xs) / len(xs)\n",
        "api/tests/test_app.py": API_TEST + "\n    def test_mean(self):\n        from api.app import mean\n"
                                            "        self.assertEqual(mean([1, 3]), 2)\n",
        "web/client.py": WEB + "\n\ndef show_mean(m):\n    return f'mean: {m}'\n",
        "web/tests/test_client.py": WEB_TEST + "\n    def test_show_mean(self):\n        from web.client import "
                                               "show_mean\n        self.assertEqual(show_mean(2), 'mean: 2')\n",
        "web/README.md": "web, with means\n"})
    commit(repo, "Docs only: one area", {"web/README.md": "web, with means and totals\n"})
    second = commit(repo, "Rename the client's label", {
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
