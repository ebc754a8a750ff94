"""The trial batch of tests/record_history.py, saved as tests/trial_histories/<version>.json (tests/test_trials.py
replays it).

Two commits of a small repository replayed by the oracle: one a good task (its tests pass on it and fail on its
base), vetted, given a clone of its own holding its base alone, run as a swarm and scored; one a bad task (its test
passes on the base already), vetted and scored as such, with no clone and no swarm run.
"""

from __future__ import annotations

import sys
from pathlib import Path

from temporalio.client import Client

from reposwarm.contracts import LanesFile, TrialBatchRequest, TrialSpec
from reposwarm.review.webui import ATTRIBUTES
from tests.helpers import commit_files, git, make_repo
from workflows.trial import TrialWorkflow

API = "def total(xs):\n    return sum(xs)\n"
MEAN = "\n\ndef mean(xs):\n    return total(xs) / len(xs)\n"
TEST = "import unittest\n\nfrom api.app import {name}\n\n\nclass T(unittest.TestCase):\n    def test_{name}(self):\n" \
       "        self.assertEqual({call})\n"
CONFIG = {"swarm": {"lanes": {"api": {"allowed_paths": ["api/"]}, "web": {"allowed_paths": ["web/"]}}},
          "validation": {"profiles": {"default": {"timeout_s": 120, "commands": [
              [sys.executable, "-m", "unittest", "discover", "-s", "api/tests", "-t", "."]]}}}}


def _commit(repo: Path, message: str, files: dict[str, str]) -> TrialSpec:
    sha = commit_files(repo, message, files)
    return TrialSpec(sha=sha, parent=git(repo, "rev-parse", "HEAD~1"), message=message)


async def trial_batch(client: Client, tmp: Path, queue: str) -> str:
    """The batch run to its end on the recorder's worker (its task queue); its workflow id."""
    repo = make_repo(tmp / "repo", {"api/__init__.py": "", "api/app.py": API, "api/tests/__init__.py": "",
                                    "web/__init__.py": "", "web/README.md": "web\n"})
    good = _commit(repo, "Add mean to the API and name it in the web docs", {
        "api/app.py": API + MEAN, "api/tests/test_mean.py": TEST.format(name="mean", call="mean([1, 3]), 2"),
        "web/README.md": "web, with means\n"})
    idle = _commit(repo, "Test what already works", {
        "api/tests/test_total.py": TEST.format(name="total", call="total([1, 2]), 3"),
        "web/README.md": "web, with means and totals\n"})
    batch_id = f"trial-record-{tmp.name}"
    req = TrialBatchRequest(batch_id=batch_id, repo_path=str(repo), trials=[good, idle],
                            config=LanesFile.model_validate(CONFIG), model="oracle",
                            search_attributes=[key.name for key in ATTRIBUTES])
    result = await client.execute_workflow(TrialWorkflow.run, req, id=batch_id, task_queue=queue)
    outcomes = [(s.sha, s.status.value, s.tests_passed) for s in result.scores]
    if outcomes != [(good.sha, "scored", True), (idle.sha, "bad_task", None)]:
        raise AssertionError(f"trial: not one scored task and one bad one: {result.scores}")
    return batch_id
