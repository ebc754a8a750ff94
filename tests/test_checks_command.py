"""`reposwarm checks`: the profile once on HEAD in the sandbox, what ran, the tests found, and what to fix (a
missing tool, a dependency folder the checked tree will not have, a runner it cannot read), with the user's
checkout left as it was."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT, git, make_repo, write_yaml

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None or shutil.which("node") is None,
                                reason="needs bubblewrap and node")

TESTS = """const test = require('node:test');
const assert = require('node:assert');
const isNumber = require('is-number');
test('five is a number', () => assert.ok(isNumber(5)));
test('a word is not', () => assert.ok(!isNumber('five')));
"""


def checks(tmp: Path, repo: Path, profile: dict, *extra: str) -> subprocess.CompletedProcess[str]:
    lanes = write_yaml(tmp / "lanes.yaml", {"swarm": {"lanes": {"all": {"allowed_paths": ["**"]}}},
                                            "validation": {"profiles": {"default": profile}}})
    env = {**os.environ, "REPOSWARM_HOME": str(tmp / "home")}
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), "checks", "--repo", str(repo), "--lanes",
                           str(lanes), *extra], capture_output=True, text=True, env=env, timeout=300)


def state(repo: Path) -> list[str]:
    return [git(repo, "status", "--porcelain", "--ignored"), git(repo, "for-each-ref"),
            git(repo, "worktree", "list", "--porcelain")]


def test_it_says_which_dependencies_a_checked_tree_lacks_and_leaves_the_checkout_alone(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"package.json": json.dumps({"name": "x", "private": True}),
                                         ".gitignore": "node_modules/\n", "test/is.test.js": TESTS})
    (repo / "node_modules" / "is-number").mkdir(parents=True)
    (repo / "node_modules" / "is-number" / "index.js").write_text("module.exports = n => typeof n === 'number';")
    before = state(repo)
    done = checks(tmp_path, repo, {"commands": [["node", "--test", "test/"]]})
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Cannot find module 'is-number'" not in done.stdout  # the verdict and the fix, not the log
    assert "`node --test test/` (node; tests: not counted" in done.stdout or "(node; 0 tests ran" in done.stdout
    assert ("fix: your checkout has node_modules (ignored), which a checked tree never has: add a setup step"
            in done.stdout)
    assert state(repo) == before
    # with the documented fix the same profile is green, per test
    fixed = checks(tmp_path, repo, {"commands": [["node", "--test", "test/"]], "deps_from_checkout": ["node_modules"]})
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "- `node --test test/` (node; 2 tests ran;" in fixed.stdout and "): passed" in fixed.stdout
    assert fixed.stdout.rstrip().endswith("all 1 command(s) passed; 2 tests ran")
    assert state(repo) == before


def test_it_names_a_missing_tool_and_a_runner_it_cannot_read(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README": "x\n"})
    done = checks(tmp_path, repo, {"commands": [["no-such-test-tool", "run"], ["sh", "-c", "echo 3 failed; exit 1"]]})
    assert done.returncode == 1
    out = done.stdout
    assert out.startswith("running profile 'default' (2 command(s)) on HEAD ")
    assert "fix: `no-such-test-tool` was not found in the sandbox" in out
    assert "- `sh -c echo 3 failed; exit 1` (no per-test results; tests: not counted;" in out
    assert "fix: reposwarm cannot read this command's results per test" in out


def test_bad_input_is_one_error_line(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"README": "x\n"})
    done = checks(tmp_path, repo, {"commands": [["true"]]}, "--profile", "fast")
    assert done.returncode == 2
    assert done.stderr.strip() == "error: no check profile 'fast': the lanes file has default"
    gone = checks(tmp_path, tmp_path / "nowhere", {"commands": [["true"]]})
    assert gone.returncode == 2 and gone.stderr.strip() == f"error: no such repository: {tmp_path / 'nowhere'}"


def test_a_configuration_without_lanes_gives_its_profile(tmp_path: Path) -> None:
    """The repository's own reposwarm.yaml may hold its check profiles and no lanes (a run proposes its lanes):
    `checks` runs that profile, not the detected one."""
    config = {"validation": {"profiles": {"default": {"commands": [["node", "--test", "test/"]]}}},
              "prices": {"openai:gpt-4.1": {"input_per_mtok": 2, "output_per_mtok": 8}}}
    repo = make_repo(tmp_path / "repo", {"reposwarm.yaml": json.dumps(config), "test/a.test.js":
                                         "require('node:test')('one', () => {});\n"})
    env = {**os.environ, "REPOSWARM_HOME": str(tmp_path / "home")}
    done = subprocess.run([sys.executable, str(ROOT / "starter.py"), "checks", "--repo", str(repo)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "using the repository's own reposwarm.yaml" in done.stderr
    assert "- `node --test test/` (node; 1 tests ran;" in done.stdout or "- `node --test test/` (node; 1 test ran;" \
        in done.stdout, done.stdout
    # with prices and no profile, the detected profile runs, and says so
    (repo / "reposwarm.yaml").write_text(json.dumps({"prices": config["prices"]}))
    git(repo, "commit", "-qam", "no profile")
    bare = subprocess.run([sys.executable, str(ROOT / "starter.py"), "checks", "--repo", str(repo)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert "reposwarm.yaml has no validation.profiles: the detected profile runs" in bare.stdout, \
        bare.stdout + bare.stderr
