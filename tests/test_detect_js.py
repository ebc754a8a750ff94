"""Detection on repositories as they are: a JavaScript project's package manager from its lock file, its install as
the setup step, the runner's own command taken out of the test script (lint and the rest offered apart), judged
per test with no hand-written profile; and a run refused before it starts when its checks need a toolchain this
host lacks (`reposwarm try` on a Go module with no go: exit 2, nothing cloned, no server, no workflow)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from reposwarm.intel import jsscripts, packages, structure, toolchain_needs
from reposwarm.lanes.loading import ENV_KNOBS
from tests.helpers import GIT_ENV, ROOT, git, make_repo

PYTHON = ("python3", True)


def steps(scripts: dict[str, str]) -> list[tuple[str, str, str]]:
    """(kind, the command as words, the script that runs it alone) per step of the test script."""
    return [(s.kind, " ".join([*s.settings, *s.words]) if s.words else s.text, ":".join(s.script))
            for s in jsscripts.read_script(scripts)]


# --- the test script, step by step (fast: only text is read) --------------------------------------------------------

@pytest.mark.parametrize(("scripts", "want"), [
    ({"test": "pnpm lint && vitest run --typecheck", "lint": "eslint . && prettier -c src test"},
     [("lint", "eslint .", "lint"), ("lint", "prettier -c src test", "lint"), ("runner", "vitest run", "")]),
    ({"test": "vitest"}, [("runner", "vitest run", "")]),
    # a script's name says what it is where its program does not
    ({"test": "pnpm lint && npm run types && mocha", "lint": "node lint.js", "types": "node check-types.js"},
     [("lint", "node lint.js", "lint"), ("typecheck", "node check-types.js", "types"), ("runner", "mocha", "")]),
    ({"test": "vitest watch --project a"}, [("runner", "vitest run --project a", "")]),
    ({"test": "cross-env NODE_ENV=test TZ=UTC jest --watchAll --ci"},
     [("runner", "NODE_ENV=test TZ=UTC jest --ci", "")]),
    ({"test": "npm run test:unit -- --coverage", "test:unit": "jest"}, [("runner", "jest --coverage", "")]),
    ({"pretest": "npm run build", "build": "tsc -p .", "test": "mocha 'test/**/*.js'"},
     [("build", "tsc -p .", "build"), ("runner", "mocha test/**/*.js", "")]),
    ({"test": "node --test --watch test/"}, [("runner", "node --test test/", "")]),
    ({"test": "c8 --reporter=lcov npx vitest run"}, [("runner", "vitest run", "")]),
    ({"test": "run-s lint test:*", "lint": "xo", "test:unit": "mocha", "test:types": "tsd"},
     [("lint", "xo", "lint"), ("runner", "mocha", ""), ("typecheck", "tsd", "test:types")]),  # (in package.json's order)
    ({"test": "pnpm -r test"}, [("workspaces", "pnpm -r test", "")]),
    ({"test": "npm test --workspaces"}, [("workspaces", "npm test --workspaces", "")]),
    ({"test": "turbo run test"}, [("workspaces", "turbo run test", "")]),
    ({"test": "tsc --noEmit && vitest run && eslint ."},
     [("typecheck", "tsc --noEmit", ""), ("runner", "vitest run", ""), ("lint", "eslint .", "")]),
    ({"test": "jest || true"}, [("other", "jest || true", "")]),
    ({"test": "npm run test"}, [("other", "npm run test", "test")]),
    ({"test": "bun test"}, [("runner", "bun test", "")]),
    ({"test": "yarn jest --ci"}, [("runner", "jest --ci", "")]),
    ({"test": "vitest bench"}, [("other", "vitest bench", "")]),
    ({"test": "NODE_OPTIONS=--experimental-vm-modules pnpm exec jest"},
     [("runner", "NODE_OPTIONS=--experimental-vm-modules jest", "")]),
])
def test_the_test_script_read_step_by_step(scripts, want):
    assert steps(scripts) == want


def test_the_runner_s_changes_are_said_and_what_is_no_test_is_none():
    said = {s.runner: s.said for s in jsscripts.read_script({"test": "c8 vitest --typecheck"})}
    assert "without c8" in said["vitest"] and "`vitest` as `vitest run`" in said["vitest"]
    assert "without its --typecheck" in said["vitest"]  # (tsc writes into node_modules, read-only in checks)
    assert jsscripts.test_script({"scripts": {"test": 'echo "Error: no test specified" && exit 1'}}) is None
    assert jsscripts.test_script({"scripts": {"lint": "eslint ."}}) is None


# --- the manager, the setup step and the commands, per lock file ----------------------------------------------------

def detect(files: dict[str, str]) -> tuple[dict, list[str]]:
    found, _ = packages.find_packages(list(files), files.get, lambda: PYTHON)
    profile, notes = structure.detect_profile(list(files), files.get, lambda: PYTHON, packages=found)
    assert profile is not None, notes
    return profile, notes


def package(test: str, **more: object) -> str:
    return json.dumps({"name": "p", "scripts": {"test": test, "lint": "eslint ."},
                       "devDependencies": {"vitest": "^3"}, **more})


@pytest.mark.parametrize(("files", "setup", "command"), [
    ({"package.json": package("pnpm lint && vitest run"), "pnpm-lock.yaml": "lockfileVersion: '9.0'\n"},
     ["pnpm", "install", "--frozen-lockfile"], ["pnpm", "exec", "vitest", "run"]),
    ({"package.json": package("jest"), "yarn.lock": "# yarn lockfile v1\n"},
     ["yarn", "install", "--non-interactive", "--frozen-lockfile"], ["yarn", "jest"]),
    ({"package.json": package("mocha"), "yarn.lock": "__metadata:\n  version: 8\n", ".yarnrc.yml": "yarnPath: x\n"},
     ["yarn", "install", "--immutable"], ["yarn", "mocha"]),
    ({"package.json": package("mocha"), "package-lock.json": "{}"},
     ["npm", "ci", "--no-audit", "--no-fund"], ["npx", "mocha"]),
    ({"package.json": package("bun test"), "bun.lock": "{}"},
     ["bun", "install", "--frozen-lockfile"], ["bun", "test", "--reporter=junit", "--reporter-outfile={junit}"]),
    # packageManager wins over a stray lock file of another manager
    ({"package.json": package("vitest", packageManager="pnpm@9.15.9+sha512.x"), "pnpm-lock.yaml": "",
      "package-lock.json": "{}"}, ["pnpm", "install", "--frozen-lockfile"], ["pnpm", "exec", "vitest", "run"]),
    ({"package.json": package("cross-env CI=1 jest")},
     ["npm", "install", "--no-audit", "--no-fund", "--no-package-lock"], ["env", "CI=1", "npx", "jest"]),
])
def test_the_manager_its_install_and_the_runner_through_it(files, setup, command):
    profile, notes = detect(files)
    assert profile["setup"] == [setup]
    assert profile["commands"] == [command]
    lock = next((f for f in files if f not in ("package.json", ".yarnrc.yml")), "package.json")
    assert lock in profile["cache_key"] and "uv.lock" in profile["cache_key"]  # (the other ecosystems' keys stay)
    assert any(n.startswith("JavaScript (package.json): package manager ") for n in notes)


def test_lint_is_offered_a_build_kept_and_yarn_berry_makes_node_modules():
    profile, notes = detect({"package.json": package("pnpm lint && vitest run")})
    assert profile["commands"] == [["npx", "vitest", "run"]]  # (no lock file: npm)
    assert any("not run by the checks: `npm run lint` (eslint .)" in n for n in notes)
    built, notes = detect({"package.json": json.dumps({"scripts": {"build": "tsup", "test": "npm run build && jest"},
                                                       "devDependencies": {"jest": "1"}}),
                           "package-lock.json": "{}"})
    assert built["commands"] == [["npm", "run", "build"], ["npx", "jest"]]
    assert any(n.startswith("kept before the tests, which may need what they make: `npm run build` (tsup)")
               for n in notes)
    berry, notes = detect({"package.json": package("vitest", packageManager="yarn@4.5.0"), "yarn.lock": ""})
    assert berry["env"] == {"YARN_NODE_LINKER": "node-modules"} and berry["setup"] == [["yarn", "install", "--immutable"]]
    unreadable, notes = detect({"package.json": package("node scripts/test.js | tap"), "pnpm-lock.yaml": ""})
    assert unreadable["commands"] == [["pnpm", "test"]]
    assert any("judged by its exit code only (a shell `|`" in n for n in notes)


def test_workspaces_one_install_at_the_root_and_the_members_own_runners_where_the_root_hands_them_over():
    member = json.dumps({"name": "@w/a", "scripts": {"test": "vitest"}, "devDependencies": {"vitest": "3"}})
    files = {"package.json": json.dumps({"name": "w", "private": True, "scripts": {"test": "pnpm -r test"}}),
             "pnpm-workspace.yaml": "packages: ['packages/*']\n", "pnpm-lock.yaml": "",
             "packages/a/package.json": member, "packages/a/src/a.ts": "export const a = 1;\n",
             "tools/package.json": json.dumps({"name": "tools", "scripts": {"test": "jest"},
                                               "devDependencies": {"jest": "1"}}),
             "tools/package-lock.json": "{}"}
    profile, notes = detect(files)
    assert ["env", "-C", "packages/a", "pnpm", "exec", "vitest", "run"] in profile["commands"]
    assert ["env", "-C", "tools", "npx", "jest"] in profile["commands"]  # (no member: its own lock, its own install)
    assert profile["setup"] == [["pnpm", "install", "--frozen-lockfile"],
                                ["env", "-C", "tools", "npm", "ci", "--no-audit", "--no-fund"]]
    assert "tools/package-lock.json" in profile["cache_key"]
    assert any("runs the members' own" in n for n in notes)
    # a root whose runner runs every member's tests: no member command of its own
    files["package.json"] = json.dumps({"name": "w", "scripts": {"test": "vitest run"}, "devDependencies": {"vitest": "3"}})
    profile, _ = detect(files)
    assert profile["commands"][0] == ["pnpm", "exec", "vitest", "run"]
    assert not any("packages/a" in " ".join(c) for c in profile["commands"])


# --- toolchains --------------------------------------------------------------------------------------------------

def test_toolchains_found_or_named_and_corepack_s_shims_count_as_missing(tmp_path):
    assert toolchain_needs.programs(["env", "-C", "web", "X=1", "pnpm", "exec", "jest"]) == ["env", "pnpm"]
    assert toolchain_needs.programs(["timeout", "-s", "KILL", "60", "go", "test"]) == ["timeout", "go"]
    empty = str(tmp_path / "nothing")
    line = toolchain_needs.refusal([["go", "test", "./..."], ["pnpm", "exec", "vitest", "run"]], path=empty)
    assert line is not None and line.startswith("go is not installed where the checks run (needed by `go test ./...`)")
    assert "apt-get install golang-go" in line and "pnpm is not installed" in line and "node is not installed" in line
    assert toolchain_needs.refusal([["sh", "-c", "true"], ["node_modules/.bin/jest"]], path=empty) is None
    # corepack's shim downloads the manager when it first runs: not installed, as far as checks go
    dist = tmp_path / "lib" / "node_modules" / "corepack" / "dist"
    dist.mkdir(parents=True)
    (dist / "pnpm.js").write_text("#!/usr/bin/env node\n")
    (dist / "pnpm.js").chmod(0o755)
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "pnpm").symlink_to(dist / "pnpm.js")
    assert toolchain_needs.find("pnpm", str(tmp_path / "bin")) is None
    assert [n.tool for n in toolchain_needs.missing([["pnpm", "install"]], path=str(tmp_path / "bin"))] == \
        ["pnpm", "node"]


# --- real runs ------------------------------------------------------------------------------------------------------

CALC = "module.exports.add = (a, b) => a + b;\n"
CALC_MUL = CALC + "module.exports.mul = (a, b) => a * b;\n"
TESTS = ("const assert = require('node:assert');\nconst calc = require('../src/calc');\n"
         "describe('calc', () => {\n  it('adds', () => assert.strictEqual(calc.add(1, 2), 3));\n"
         "  it('adds negatives', () => assert.strictEqual(calc.add(-1, -2), -3));\n});\n")
TESTS_MUL = TESTS + "describe('mul', () => {\n  it('multiplies', () => assert.strictEqual(calc.mul(2, 3), 6));\n});\n"
LINT = "console.error('lint: 1 problem (src/calc.js: missing semicolon style)');\nprocess.exit(1);\n"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ENV_KNOBS}
    full.update(GIT_ENV)
    full.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def pnpm_project(tmp_path: Path) -> Path:
    """A pnpm project with its lock file and no node_modules, as every clone is: mocha from the npm registry, a
    test script that lints first (and its lint fails), and a commit adding `mul` with its test."""
    if shutil.which("pnpm") is None or shutil.which("bwrap") is None:
        pytest.skip("needs pnpm (make toolchains) and bubblewrap")
    manifest = {"name": "calc-js", "version": "1.0.0", "private": True,
                "scripts": {"lint": "node lint.js", "test": "pnpm lint && mocha"}, "devDependencies": {"mocha": "10.8.2"}}
    repo = make_repo(tmp_path / "calc-js", {"package.json": json.dumps(manifest, indent=2) + "\n",
                                            ".gitignore": "node_modules/\n", "lint.js": LINT,
                                            "src/calc.js": CALC, "test/calc.test.js": TESTS})
    subprocess.run(["pnpm", "install", "--lockfile-only"], cwd=repo, check=True, capture_output=True, timeout=300)
    git(repo, "add", "pnpm-lock.yaml")
    git(repo, "commit", "-q", "-m", "lock file")
    (repo / "src/calc.js").write_text(CALC_MUL)
    (repo / "test/calc.test.js").write_text(TESTS_MUL)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Add mul, with a test")
    return repo


def test_a_pnpm_project_with_no_node_modules_is_checked_per_test_with_no_profile_written(tmp_path):
    repo = pnpm_project(tmp_path)
    env = {"REPOSWARM_HOME": str(tmp_path / "home")}
    done = cli("checks", "--repo", str(repo), env=env)
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "no lanes file: the profile detected from HEAD's files" in out
    assert "package manager pnpm, from pnpm-lock.yaml" in out
    assert "tests: the test script `pnpm lint && mocha`: pnpm exec mocha, judged per test" in out
    assert "not run by the checks: `pnpm run lint` (node lint.js)" in out  # (it fails: the tests stay judged)
    assert re.search(r"toolchain: pnpm \S+ at /", out) and "toolchain: node v" in out
    assert "setup: `pnpm install --frozen-lockfile` ran in" in out
    assert "- `pnpm exec mocha` (mocha; 3 tests ran;" in out and out.rstrip().endswith("3 tests ran")
    assert not (repo / "node_modules").exists()  # (the user's checkout is only read)
    # a break: the failing test is named, per test; the dependencies come from the cache, keyed by the lock file
    (repo / "src/calc.js").write_text(CALC_MUL.replace("a * b", "a + b"))
    git(repo, "commit", "-q", "-am", "break mul")
    broken = cli("checks", "--repo", str(repo), env=env)
    assert broken.returncode == 1, broken.stdout + broken.stderr
    assert "setup: restored from the cache (key" in broken.stdout
    assert "failed: 1 test(s) failed (mul multiplies)" in broken.stdout


@pytest.mark.usefixtures("worker")
async def test_try_on_a_pnpm_project_passes_per_test_and_delivers_the_commit(temporal_address, tmp_path):
    repo = pnpm_project(tmp_path)
    sha = git(repo, "rev-parse", "HEAD")
    home = Path(os.environ["REPOSWARM_HOME"])  # (the session worker's)
    done = await asyncio.to_thread(cli, "try", "--repo", str(repo), "--yes", env={"TEMPORAL_ADDRESS": temporal_address})
    out = done.stdout
    assert done.returncode == 0, f"stdout:\n{out}\nstderr:\n{done.stderr}"
    lanes = (home / "try" / f"calc-js-{sha[:12]}" / "lanes.yaml").read_text()
    assert "pnpm exec mocha" in lanes and "pnpm install --frozen-lockfile" in lanes
    assert "Verdict: checks PASSED" in out and "- `pnpm exec mocha`: exit 0 (mocha, passed, 3 tests" in out, out
    assert "3 tests ran (base commit: 2)" in out  # (judged per test against the base commit)
    assert f"the swarm's result equals the commit {sha[:12]}" in out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_missing_toolchain_refuses_the_run_before_anything_starts(tmp_path):
    repo = make_repo(tmp_path / "mod", {"go.mod": "module example.com/m\n\ngo 1.19\n", "m.go": "package m\n",
                                        "m_test.go": "package m\n\nimport \"testing\"\n\nfunc TestM(t *testing.T) {}\n"})
    (repo / "m.go").write_text("package m\n\nconst M = 1\n")
    git(repo, "commit", "-q", "-am", "M")
    bin_dir = tmp_path / "bin"  # a PATH with git and no go
    bin_dir.mkdir()
    (bin_dir / "git").symlink_to(shutil.which("git") or "/usr/bin/git")
    if shutil.which("bwrap"):  # (the sandbox is there: the platform passes, and the toolchain is what is missing)
        (bin_dir / "bwrap").symlink_to(shutil.which("bwrap") or "")
    port = free_port()
    home = tmp_path / "home"
    env = {"PATH": str(bin_dir), "REPOSWARM_HOME": str(home), "TEMPORAL_ADDRESS": f"127.0.0.1:{port}"}
    for args in (("try", "--repo", str(repo), "--yes"), ("checks", "--repo", str(repo))):
        done = cli(*args, env=env)
        assert done.returncode == 2, done.stdout + done.stderr
        error = next(line for line in done.stderr.splitlines() if line.startswith("error: "))  # (doctor's hint after)
        assert error.startswith("error: go is not installed where the checks run (needed by `go test ./...`): "
                                "install it (apt-get install golang-go"), error
    assert not list(home.glob("try/*/repo.git"))  # nothing cloned
    assert not (home / "temporal.pid").exists()  # no dev server started, so no workflow either
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    lanes = tmp_path / "lanes.yaml"
    lanes.write_text("swarm: {lanes: {all: {allowed_paths: ['**']}}}\n"
                     "validation: {profiles: {default: {commands: [[go, test, ./...]]}}}\n")
    run = ("run", "--repo", str(repo), "--lanes", str(lanes), "--task", "t", "--model", "openai:gpt-4.1")
    local = cli(*run, env=env)
    assert local.returncode == 2 and "error: go is not installed where the checks run" in local.stderr
    # a worker elsewhere (a Temporal address that is not loopback) is not refused from this host's PATH: the run
    # goes on to connect (and here finds no server: this host's own address, a closed port)
    address = f"{own_address()}:{free_port()}"
    remote = cli(*run, env={**env, "TEMPORAL_ADDRESS": address}, timeout=120)
    assert "go is not installed" not in remote.stderr and f"cannot reach Temporal at {address}" in remote.stderr


def own_address() -> str:
    """This host's address on its default route (no packet is sent), or skip."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))
        except OSError:
            pytest.skip("no network interface but loopback")
        address = str(s.getsockname()[0])
    if address.startswith("127."):
        pytest.skip("no network interface but loopback")
    return address
