"""`reposwarm try`: a real commit of a real repository replayed through the whole swarm, offline, with the oracle
model; the oracle as a provider any run may name; and the local bring-up that demo and try share, which says at
once what it waits for."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from reposwarm.intel import structure
from reposwarm.lanes.loading import ENV_KNOBS
from tests.helpers import GIT_ENV, ROOT, git, make_repo, write_yaml

OPS = "def add(a, b):\n    return a + b\n"
TEST_OPS = "from calc.ops import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n"
MUL = "\n\ndef mul(a, b):\n    return a * b\n"
TEST_MUL = "\n\ndef test_mul():\n    from calc.ops import mul\n    assert mul(2, 3) == 6\n"


def cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """starter.py as a user runs it, with the lanes-file knobs of this process cleared."""
    full = {k: v for k, v in os.environ.items() if k not in ENV_KNOBS}
    full.update(GIT_ENV)
    full.update(env or {})
    return subprocess.run([sys.executable, str(ROOT / "starter.py"), *args], cwd=ROOT, env=full,
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


def calc_repo(tmp_path: Path) -> tuple[Path, str]:
    """A tiny Python package with a test, and a commit that changes code in two top-level folders and the root."""
    repo = make_repo(tmp_path / "calc", {
        "pyproject.toml": "[project]\nname = \"calc\"\nversion = \"0.1\"\n", "README.md": "calc\n",
        "calc/__init__.py": "", "calc/ops.py": OPS, "tests/test_ops.py": TEST_OPS})
    (repo / "calc/ops.py").write_text(OPS + MUL)
    (repo / "tests/test_ops.py").write_text(TEST_OPS + TEST_MUL)
    (repo / "README.md").write_text("calc: add and mul\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Add mul, with a test")
    return repo, git(repo, "rev-parse", "HEAD")


def error_line(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, f"exit {proc.returncode}; stdout={proc.stdout!r} stderr={proc.stderr!r}"
    lines = [line for line in proc.stderr.strip().splitlines() if not line.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    return lines[0]


@pytest.mark.usefixtures("worker")
async def test_try_replays_a_real_commit_offline_and_delivers_it_in_its_own_clone(temporal_address, tmp_path):
    repo, sha = calc_repo(tmp_path)
    refs_before = git(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    home = Path(os.environ["REPOSWARM_HOME"])  # the session worker's: the try's clone is made there
    done = await asyncio.to_thread(cli, "try", "--repo", str(repo), "--yes",
                                   env={"TEMPORAL_ADDRESS": temporal_address})
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    out = done.stdout

    folder = home / "try" / f"calc-{sha[:12]}"
    lanes = yaml.safe_load((folder / "lanes.yaml").read_text())  # proposed from the commit, and said so
    assert f"proposed {folder / 'lanes.yaml'}" in out
    assert {name: role["allowed_paths"] for name, role in lanes["swarm"]["lanes"].items()} == {
        "calc": ["calc/**"], "tests": ["tests/**"], "root": structure.ROOT_FILES}
    assert lanes["validation"]["profiles"]["default"]["commands"][0][1:] == ["-m", "pytest", "-q"]

    clone = folder / "repo.git"
    branch = re.search(r"git -C \S+ diff trial-base (swarm/\S+)", out).group(1)
    assert git(clone, "rev-parse", f"{branch}^{{tree}}") == git(repo, "rev-parse", f"{sha}^{{tree}}")
    assert f"the swarm's result equals the commit {sha[:12]}" in out
    assert "checks PASSED" in out  # the commit's own tests ran in the sandbox on the merged tree
    # the user's checkout: the same branches at the same commits, nothing changed, nothing added
    assert git(repo, "for-each-ref", "--format=%(refname) %(objectname)") == refs_before
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""


@pytest.mark.usefixtures("worker")
async def test_try_proposes_lanes_into_the_repository_s_configuration_without_lanes(temporal_address, tmp_path):
    """A reposwarm.yaml holding the repository's check profile and no lanes (issue 45): try proposes the lanes and
    checks with that profile, not the detected one."""
    repo = make_repo(tmp_path / "calc", {
        "pyproject.toml": "[project]\nname = \"calc\"\nversion = \"0.1\"\n", "calc/__init__.py": "",
        "calc/ops.py": OPS, "tests/test_ops.py": TEST_OPS,
        "reposwarm.yaml": yaml.safe_dump({"validation": {"profiles": {"unit": {
            "commands": [[sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"]]}},
            "profile": "unit"}})})
    (repo / "calc/ops.py").write_text(OPS + MUL)
    (repo / "tests/test_ops.py").write_text(TEST_OPS + TEST_MUL)
    git(repo, "commit", "-qam", "Add mul, with a test")
    done = await asyncio.to_thread(cli, "try", "--repo", str(repo), "--yes",
                                   env={"TEMPORAL_ADDRESS": temporal_address})
    assert done.returncode == 0, f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}"
    assert "reposwarm.yaml holds no lanes: the proposed lanes run in its configuration (its profile 'unit')" \
        in done.stdout
    run_id = re.search(r"as run (reposwarm-try-\S+),", done.stdout).group(1)
    review = cli("review", run_id, "--json", env={"TEMPORAL_ADDRESS": temporal_address})
    argvs = re.findall(r'"argv": \[([^\]]*)\]', review.stdout)
    assert argvs and all('"no:cacheprovider",' in a and a.strip().endswith('"tests"') for a in argvs), argvs
    assert "checks PASSED" in done.stdout


def test_what_try_cannot_replay_is_one_error_line(tmp_path):
    unreachable = {"TEMPORAL_ADDRESS": "127.0.0.1:1", "REPOSWARM_HOME": str(tmp_path / "home")}
    plain = tmp_path / "plain"
    plain.mkdir()
    assert "not a git repository" in error_line(cli("try", "--repo", str(plain), env=unreachable))
    repo = make_repo(tmp_path / "one", {"README.md": "one\n", "src/a.py": "A = 1\n"})
    root = git(repo, "rev-parse", "HEAD")
    line = error_line(cli("try", "--repo", str(repo), env=unreachable))
    assert f"commit {root[:12]} has no parent" in line
    assert "is not a commit" in error_line(cli("try", "--repo", str(repo), "--commit", "nope", env=unreachable))
    git(repo, "commit", "-q", "--allow-empty", "-m", "nothing")
    assert "changes no file" in error_line(cli("try", "--repo", str(repo), env=unreachable))
    git(repo, "checkout", "-q", "-b", "side", root)
    (repo / "src/b.py").write_text("B = 2\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "b")
    git(repo, "checkout", "-q", "main")
    git(repo, "merge", "-q", "--no-ff", "-m", "merge side", "side")
    assert "is a merge" in error_line(cli("try", "--repo", str(repo), env=unreachable))
    assert not (tmp_path / "home" / "try").exists() or not any((tmp_path / "home" / "try").iterdir())


@pytest.mark.usefixtures("worker")
async def test_the_oracle_is_a_provider_a_run_may_name(temporal_address, tmp_path):
    repo, sha = calc_repo(tmp_path)
    lanes = write_yaml(tmp_path / "lanes.yaml", {"swarm": {"lanes": {
        "calc": {"allowed_paths": ["calc/"]}, "tests": {"allowed_paths": ["tests/"]}}}})
    env = {"TEMPORAL_ADDRESS": temporal_address}
    dry = await asyncio.to_thread(cli, "run", "--repo", str(repo), "--task", "Add mul", "--lanes", str(lanes),
                                  "--model", f"oracle:{repo}#HEAD", "--dry-run", env=env)
    assert dry.returncode == 0, dry.stderr
    assert "nothing was dispatched" in dry.stdout
    assert "- calc: Make the commit's change" in dry.stdout and "- tests: Make the commit's change" in dry.stdout
    assert f"oracle:{repo}#{sha}" in dry.stdout  # the sha resolved, the path absolute: as the worker reads it

    unreachable = {"TEMPORAL_ADDRESS": "127.0.0.1:1"}
    for model, said in ((f"oracle:{tmp_path}/nope#HEAD", "no such repository"),
                        (f"oracle:{tmp_path}#HEAD", "not a git repository"),
                        (f"oracle:{repo}#nope", "'nope' is not a commit"),
                        (f"oracle:{repo}", "must be oracle:<repository>#<sha>"),
                        (f"oracle:{repo}#{git(repo, 'rev-list', '--max-parents=0', 'HEAD')}", "has no parent")):
        line = error_line(cli("run", "--repo", str(repo), "--task", "x", "--lanes", str(lanes), "--model", model,
                              env=unreachable))
        assert said in line and "unknown provider" not in line, line


@pytest.mark.parametrize("command", ["demo", "try"])
async def test_with_no_worker_demo_and_try_say_at_once_what_they_start_and_wait_for(command, client,
                                                                                     temporal_address, tmp_path):
    repo, _ = calc_repo(tmp_path)
    queue = f"nobody-{uuid.uuid4().hex[:6]}"
    env = {"TEMPORAL_ADDRESS": temporal_address, "REPOSWARM_TASK_QUEUE": queue,
           "REPOSWARM_HOME": str(tmp_path / "home"), "REPOSWARM_WORKER_WAIT_S": "0"}
    args = ["demo", "--yes"] if command == "demo" else ["try", "--repo", str(repo), "--yes"]
    done = await asyncio.to_thread(cli, *args, env=env)
    lines = done.stdout.splitlines()
    waiting = next(i for i, line in enumerate(lines) if line.startswith("no worker polls"))
    if command == "demo":
        assert waiting == 0  # the first thing demo says
    log = tmp_path / "home" / f"worker-{queue}.log"
    assert lines[waiting] == (f"no worker polls task queue {queue!r}: started one (pid "
                              f"{lines[waiting].split('pid ')[1].split(',')[0]}, log {log}), waiting up to 0 s for "
                              "its first poll; it is stopped when this command ends")
    pid = int(lines[waiting].split("pid ")[1].split(",")[0])
    assert f"stopping the worker this command started (pid {pid}" in done.stdout
    line = error_line(done)
    assert "the worker this command started did not poll within 0 s" in line and str(log) in line
    with pytest.raises(ProcessLookupError):  # stopped and reaped: nothing left running
        os.kill(pid, 0)


def test_proposed_lanes_fold_past_four_folders_and_checks_follow_the_project_s_files():
    changed = ["api/a.py", "api/b.py", "web/x.ts", "db/m.sql", "docs/d.md", ".github/ci.yml", "root/r.txt", "setup.py"]
    lanes = {lane.name: lane.allowed_paths for lane in structure.propose_lanes(changed)}
    # the folder with most files first, then by name; past four, the rest in the last; a folder named "root" is
    # not the root's lane
    assert lanes == {"api": ["api/**"], "github": [".github/**"], "db": ["db/**"],
                     "others": ["docs/**", "root/**", "web/**"], "root": structure.ROOT_FILES}

    def profile(files: dict[str, str]) -> dict | None:
        return structure.detect_profile(list(files), files.get, python=lambda: ("python3", True))[0]

    assert profile({"go.mod": "module x\n", "main.go": ""}) == {"timeout_s": 600, "commands": [["go", "test", "./..."]]}
    assert profile({"Cargo.toml": "", "src/lib.rs": ""})["commands"] == [["cargo", "test", "--offline"]]
    assert profile({"package.json": '{"scripts": {"test": "vitest run"}}'})["commands"] == [["npx", "vitest", "run"]]
    assert profile({"package.json": '{"scripts": {"test": "echo \\"Error: no test specified\\" && exit 1"}}'}) is None
    assert profile({"pkg/mod.py": "", "tests/test_mod.py": ""})["commands"] == [["python3", "-m", "pytest", "-q"]]
    no_pytest = structure.detect_profile(["setup.py", "m.py"], {}.get, python=lambda: ("python3", False))
    assert no_pytest[0]["commands"] == [["python3", "-m", "unittest", "discover", "-t", "."]]
    assert "cannot import pytest" in no_pytest[1][0]
    assert profile({"README.md": ""}) is None
