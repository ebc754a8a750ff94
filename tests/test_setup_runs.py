"""A swarm run on a JavaScript project whose dependencies come from the profile's setup step (`npm ci` from the
npm registry): the baseline installs them once, the lane's own checks and the merged tree's validation restore
them with no network, and every check is judged per test (node --test)."""

from __future__ import annotations

import json
import shutil

import pytest

from reposwarm.contracts import Phase, Verdict
from reposwarm.runs.store import Store
from tests.helpers import approve_and_wait, finish, home_ledger, make_repo, start_run, turn, wait_for_phase, write_yaml
from tests.test_setup import LOCK, PACKAGE, TESTS

pytestmark = [pytest.mark.usefixtures("worker"),
              pytest.mark.skipif(shutil.which("npm") is None or shutil.which("bwrap") is None,
                                 reason="needs npm and bubblewrap")]

ADD_TEST = """const test = require('node:test');
const assert = require('node:assert');
const { add } = require('../lib/add');
test('adds', () => assert.strictEqual(add(2, 3), 5));
"""


async def test_the_setup_runs_once_per_run_and_every_check_is_judged_per_test(client, reposwarm_home, tmp_path):
    repo = make_repo(tmp_path / "repo", {
        "package.json": json.dumps(PACKAGE), "package-lock.json": json.dumps(LOCK), ".gitignore": "node_modules/\n",
        "test/is.test.js": TESTS, "test/add.test.js": ADD_TEST,
        "lib/add.js": "exports.add = (a, b) => a + b;\n"})
    lanes = write_yaml(tmp_path / "lanes.yaml", {
        "swarm": {"lanes": {"lib": {"allowed_paths": ["lib/"], "read_only_paths": ["test/", "package.json"]}}},
        "validation": {"profiles": {"default": {"commands": [["node", "--test", "test/"]],
                                                "setup": [["npm", "ci", "--no-audit", "--no-fund"]]}}}})
    plan = write_yaml(tmp_path / "plan.yaml", {"interface_contract": "lib/add.js exports add and sub.",
                                               "lanes": [{"lane": "lib", "goal": "Add sub(a, b) to lib/add.js."}]})
    script = write_yaml(tmp_path / "replay.yaml", {"version": 1, "lanes": {"lib": {1: [
        turn(("e1", "edit_file", {"path": "lib/add.js", "old": "a + b;\n",
                                  "new": "a + b;\nexports.sub = (a, b) => a - b;\n", "reason": "Add sub"})),
        turn(("c1", "run_checks", {})),
        finish("f1", "sub added; the checks pass")]}}})
    run_id = await start_run(client, repo, lanes, script, plan=plan)
    status = await wait_for_phase(client, run_id, Phase.review, timeout=180)
    report = status.review.test_report
    assert report.verdict_of == Verdict.passed, (report.problems, report.setup)
    assert report.tests_run == 3 and report.base_tests_run == 3
    # the merged tree's dependencies came from the cache the baseline filled: no setup of its own
    assert report.setup and report.setup[0].startswith("setup: restored from the cache"), report.setup
    setups = [e for e in home_ledger(reposwarm_home) if e.get("event") == "setup" and e.get("run") == run_id]
    assert len(setups) == 1 and setups[0]["cached"] == ["node_modules"], setups
    # the lane's own run_checks restored them too, and said so to the model
    said = "\n".join(Store(run_id).get(e["output_ref"]).decode() for e in home_ledger(reposwarm_home)
                     if e.get("run") == run_id and e.get("event") == "tool_call" and e.get("tool") == "run_checks")
    assert "dependencies: setup: restored from the cache" in said or "dependencies: setup: cached" in said, said
    # delivered: the lane's own build caches and setup entries on this host go; the base's stay for the next run
    assert list((reposwarm_home / "cache" / "build").glob(f"*/lanes/{run_id}"))  # (the lane's build caches)
    delivered = await approve_and_wait(client, run_id)
    assert delivered.delivered_branch
    assert not list((reposwarm_home / "cache").glob(f"*/*/lanes/{run_id}"))
    assert list((reposwarm_home / "cache" / "deps").glob("*/base/*/manifest.json"))
