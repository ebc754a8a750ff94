"""A profile's setup step on a real JavaScript project: `npm ci` from the npm registry in the sandbox, its
node_modules cached by the lock file's hash and bound read-only into later checked trees, which run with no
network and are judged per test (node --test); a lane's setup is kept for that lane only; a failing setup says
so and runs no check; deps_from_checkout binds the user's installed folder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reposwarm.checks import setup
from reposwarm.checks.runner import run_profile
from reposwarm.contracts import CheckProfile
from tests.helpers import git, make_repo

pytestmark = [pytest.mark.skipif(shutil.which("npm") is None or shutil.which("bwrap") is None,
                                 reason="needs npm and bubblewrap"),
              pytest.mark.usefixtures("reposwarm_home")]  # (the cache is under REPOSWARM_HOME: the test's own)

PACKAGE = {"name": "uses-is-number", "version": "1.0.0", "private": True,
           "dependencies": {"is-number": "7.0.0"}, "scripts": {"test": "node --test"}}
LOCK = {"name": "uses-is-number", "version": "1.0.0", "lockfileVersion": 3, "requires": True,
        "packages": {"": {"name": "uses-is-number", "version": "1.0.0", "dependencies": {"is-number": "7.0.0"}},
                     "node_modules/is-number": {
                         "version": "7.0.0",
                         "resolved": "https://registry.npmjs.org/is-number/-/is-number-7.0.0.tgz",
                         "integrity": "sha512-41Cifkg6e8TylSpdtTpeLVMqvSBEVzTttHvERD741+pnZ8ANv0004MRL43QKPDlK9cGvNp6NZWZUBlbGXYxxng==",
                         "license": "MIT", "engines": {"node": ">=0.12.0"}}}}
TESTS = """const test = require('node:test');
const assert = require('node:assert');
const isNumber = require('is-number');
test('five is a number', () => assert.ok(isNumber(5)));
test('a word is not', () => assert.ok(!isNumber('five')));
"""
CHECK = [["node", "--test", "test/"]]
NPM_CI = [["npm", "ci", "--no-audit", "--no-fund"]]


def js_repo(path: Path) -> Path:
    return make_repo(path, {"package.json": json.dumps(PACKAGE), "package-lock.json": json.dumps(LOCK),
                            ".gitignore": "node_modules/\n", "test/is.test.js": TESTS})


def worktree(repo: Path, path: Path) -> Path:
    git(repo, "worktree", "add", "-q", "--detach", str(path), "HEAD")
    return path


async def test_the_setup_runs_once_and_later_trees_are_judged_per_test_with_no_network(tmp_path: Path) -> None:
    repo = js_repo(tmp_path / "repo")
    profile = CheckProfile(commands=CHECK, setup=NPM_CI)
    # without the setup step the dependency is not there (the tree is clean: node_modules is ignored)
    bare = await run_profile(CheckProfile(commands=CHECK), worktree(repo, tmp_path / "bare"), None)
    assert not bare.passed and "is-number" in bare.commands[0].output_tail

    first = await run_profile(profile, worktree(repo, tmp_path / "base"), None, scope="base")
    assert first.passed, (first.setup, first.commands[0].output_tail)
    assert first.tests_run == 2 and first.commands[0].runner == "node"
    assert any("`npm ci --no-audit --no-fund` ran" in line for line in first.setup)
    assert any("cached node_modules" in line for line in first.setup)
    # moved into the cache, bound back read-only (what stays in the tree is the bind's empty mount point)
    assert not any((tmp_path / "base" / "node_modules").iterdir())

    # another tree of the repository, same lock file: restored, no setup ran, and the checks had no network
    later = worktree(repo, tmp_path / "validate")
    third = await run_profile(profile, later, None)
    assert third.passed and third.tests_run == 2
    assert third.setup == [line for line in third.setup if line.startswith("setup: restored from the cache")]
    assert third.setup and "node_modules" in third.setup[0]
    # read-only: a check cannot change what the next tree restores
    poison = await run_profile(profile.model_copy(update={"commands": [
        ["node", "-e", "require('fs').writeFileSync('node_modules/is-number/index.js', 'x')"]]}), later, None)
    assert not poison.passed and "EROFS" in poison.commands[0].output_tail


async def test_a_lane_s_changed_lock_file_is_kept_for_that_lane_only(tmp_path: Path) -> None:
    repo = js_repo(tmp_path / "repo")
    lane = worktree(repo, tmp_path / "lane")
    # the lane changes its lock file (say, a new dependency's install script): its key is its own
    lock = json.loads((lane / "package-lock.json").read_text())
    lock["name"] = "changed-by-a-lane"
    (lane / "package-lock.json").write_text(json.dumps(lock))
    profile = CheckProfile(commands=CHECK, setup=NPM_CI)
    mine = await run_profile(profile, lane, None, scope="lane:run-1/api")
    assert mine.passed and any("cached node_modules" in line for line in mine.setup)
    digest, _ = setup.key(profile, lane, _repo_key(repo))
    assert (setup.cache_root() / _repo_key(repo) / "lanes" / "run-1" / "api" / digest / "manifest.json").is_file()
    assert not (setup.cache_root() / _repo_key(repo) / "base" / digest).exists()
    # a merged tree with that lock file (validation: scope "") gets nothing the lane made: it sets up for itself
    merged = worktree(repo, tmp_path / "merged")
    (merged / "package-lock.json").write_text(json.dumps(lock))
    judged = await run_profile(profile, merged, None)
    assert judged.passed and any("not kept" in line for line in judged.setup)
    assert not any("restored" in line for line in judged.setup)
    # the run over, its lanes' entries go (delivery and gc call this on each host); others' stay
    base = await run_profile(profile, worktree(repo, tmp_path / "base"), None, scope="base")
    assert any("cached node_modules" in line for line in base.setup)
    assert setup.remove_lane_entries("run-2") == 0 and setup.remove_lane_entries("run-1") == 1
    assert not (setup.cache_root() / _repo_key(repo) / "lanes" / "run-1").exists()
    assert [p.name for p in (setup.cache_root() / _repo_key(repo) / "base").iterdir() if p.is_dir()]


async def test_a_failing_setup_says_so_and_runs_no_check(tmp_path: Path) -> None:
    repo = js_repo(tmp_path / "repo")
    profile = CheckProfile(commands=CHECK, setup=[["sh", "-c", "echo no registry here >&2; exit 3"]])
    report = await run_profile(profile, worktree(repo, tmp_path / "t"), None, scope="base")
    assert not report.passed and report.tests_run is None
    assert report.problems == ["the setup step `sh -c echo no registry here >&2; exit 3` failed (exit 3); "
                               "no check ran"]
    assert [c.argv for c in report.commands] == profile.setup
    assert "no registry here" in report.failures[0].message
    # nothing was cached: the next check runs the setup again
    again = await run_profile(profile, worktree(repo, tmp_path / "u"), None, scope="base")
    assert again.problems == report.problems


async def test_deps_from_checkout_binds_the_user_s_installed_folder(tmp_path: Path) -> None:
    repo = js_repo(tmp_path / "repo")
    (repo / "node_modules" / "is-number").mkdir(parents=True)
    (repo / "node_modules" / "is-number" / "index.js").write_text(
        "module.exports = n => typeof n === 'number';\n")
    profile = CheckProfile(commands=CHECK, deps_from_checkout=["node_modules"])
    tree = worktree(repo, tmp_path / "validate")
    report = await run_profile(profile, tree, None)
    assert report.passed and report.tests_run == 2, report.commands[0].output_tail
    assert report.setup == [f"deps_from_checkout: node_modules bound read-only from {repo / 'node_modules'}"]
    missing = await run_profile(profile.model_copy(update={"deps_from_checkout": ["vendor"]}), tree, None)
    assert not missing.passed and "vendor is not there" in missing.setup[0]


def _repo_key(repo: Path) -> str:
    from reposwarm.checks.runner import common_git_dir, repo_key

    return repo_key(common_git_dir(repo), repo)


async def test_npx_without_the_package_says_so_at_once_with_no_network(tmp_path: Path) -> None:
    # (npm would retry the unreachable registry for a minute or more; offline, it answers ENOTCACHED)
    repo = make_repo(tmp_path / "repo", {"package.json": json.dumps({"name": "x", "private": True})})
    report = await run_profile(CheckProfile(commands=[["npx", "vitest", "run"]]), repo, None, rerun=False)
    assert not report.passed and "ENOTCACHED" in report.commands[0].output_tail, report.commands[0].output_tail


async def test_a_venv_with_the_project_installed_from_its_tree_is_not_kept(tmp_path: Path) -> None:
    """An editable install names the setup's own tree: bound into another tree, its tests would import the
    first tree's code (the base commit's, under the merged tree's name). Not kept, and said why."""
    repo = make_repo(tmp_path / "repo", {".gitignore": ".venv/\n", "calc.py": "X = 1\n",
                                         "test_calc.py": "import calc\n\ndef test_x():\n    assert calc.X == 1\n"})
    site = ".venv/lib/python3.11/site-packages"
    script = (f"mkdir -p {site} && printf 'home = /usr/bin\\n' > .venv/pyvenv.cfg && "
              f"pwd > {site}/__editable__.calc.pth")
    profile = CheckProfile(commands=[["true"]], setup=[["sh", "-c", script]])
    report = await run_profile(profile, worktree(repo, tmp_path / "base"), None, scope="base")
    assert report.passed
    assert any(".venv has the project itself installed from this tree" in line and "not kept" in line
               for line in report.setup), report.setup
    digest, _ = setup.key(profile, tmp_path / "base", _repo_key(repo))
    assert not (setup.cache_root() / _repo_key(repo) / "base" / digest).exists()


async def test_a_python_venv_made_by_the_setup_is_restored_into_another_tree(tmp_path: Path) -> None:
    """docs/checks.md's Python profile: a venv with the requirements (from PyPI), kept, and used from another
    tree's path (`.venv/bin/python -m ...` finds its environment wherever it is bound)."""
    repo = make_repo(tmp_path / "repo", {
        ".gitignore": ".venv/\n", "requirements.txt": "six\n",
        "test_six.py": "import unittest\n\nimport six\n\n\nclass T(unittest.TestCase):\n"
                       "    def test_py3(self):\n        self.assertTrue(six.PY3)\n"})
    profile = CheckProfile(commands=[[".venv/bin/python", "-m", "unittest", "-v"]], setup=[
        ["sh", "-c", "python3 -m venv .venv && .venv/bin/pip install -q --disable-pip-version-check -r "
                     "requirements.txt"]])
    first = await run_profile(profile, worktree(repo, tmp_path / "base"), None, scope="base")
    assert first.passed and first.tests_run == 1, (first.setup, first.commands[0].output_tail)
    assert any("cached .venv" in line for line in first.setup)
    other = await run_profile(profile, worktree(repo, tmp_path / "lane"), None, scope="lane:r/l")
    assert other.passed and other.tests_run == 1, other.commands[0].output_tail
    assert other.setup[0].startswith("setup: restored from the cache") and ".venv" in other.setup[0]
