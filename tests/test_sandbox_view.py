"""What a sandboxed check can see of the host and of the repository (reposwarm/checks/sandbox/), for real: real
bwrap, real git repositories with linked worktrees like a lane's. Each test judges from the host, or from what
the check printed, that a thing outside the check's share stayed out of its reach."""

from __future__ import annotations

import json
import os
import sys
import uuid
from pathlib import Path

import pytest
from pydantic import ValidationError

from reposwarm.checks import sandbox
from reposwarm.checks.runner import common_git_dir, run_profile
from reposwarm.checks.sandbox import Tree, toolchains
from reposwarm.contracts import CheckProfile
from reposwarm.runs import ledger
from tests.helpers import git, make_repo

MIB = 1024 * 1024
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="bubblewrap is Linux-only")

# Reads each path; prints what it could (a read that works prints the text, one that fails its error).
PROBE = r'''
import json, os, sys
out = {}
for path in json.loads(sys.argv[1]):
    try:
        with open(path, "rb") as f:
            out[path] = ["ok", f.read().decode(errors="replace")]
    except OSError as err:
        out[path] = ["failed", type(err).__name__]
with open("/proc/self/mountinfo") as f:
    out["mounts"] = [line.split()[4] for line in f]
out["env"] = dict(os.environ)
print(json.dumps(out))
'''


def profile(**limits) -> CheckProfile:
    return CheckProfile(commands=[["true"]], timeout_s=120, **limits)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "rshome"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv(sandbox.SWITCH, raising=False)
    (tmp_path / "home").mkdir()
    repo = make_repo(tmp_path / "repo", {"README.md": "# readme\n", "api/app.py": "VERSION = 1\n",
                                         "docs/secret.md": "docs-only-" + uuid.uuid4().hex + "\n"})
    # another lane's branch, with a file of its own
    git(repo, "checkout", "-q", "-b", "swarm/run-1/other")
    (repo / "api" / "other.txt").write_text("other-lane-" + uuid.uuid4().hex + "\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "the other lane's work")
    git(repo, "checkout", "-q", "main")
    return repo


def worktree(repo: Path, name: str, sparse: list[str] | None = None) -> Path:
    path = repo.parent / "rshome" / "runs" / "run-1" / "lanes" / name
    git(repo, "worktree", "add", "-q", "--detach", str(path), "main")
    if sparse:
        git(path, "sparse-checkout", "set", "--cone", *sparse)
    return path.resolve()


async def probe(tree: Tree, paths: list[str], **limits) -> dict:
    (tree.root / "probe.py").write_text(PROBE)
    ran = await sandbox.run([sys.executable, "probe.py", json.dumps(paths)], tree, profile(**limits), 120)
    (tree.root / "probe.py").unlink()
    assert ran.exit_code == 0, ran.output.decode(errors="replace")
    return json.loads(ran.output.decode().strip().splitlines()[-1])


async def test_a_check_reads_no_host_file_outside_its_tree(repo, tmp_path):
    lane = worktree(repo, "api")
    secret = "outside-" + uuid.uuid4().hex
    planted = [tmp_path / "outside.txt", Path("/root") / f"reposwarm-probe-{uuid.uuid4().hex}",
               Path("/srv") / f"reposwarm-probe-{uuid.uuid4().hex}"]
    for path in planted:
        path.write_text(secret)
    try:
        out = await probe(Tree(root=lane, git_dir=common_git_dir(lane)),
                          ["/etc/shadow", "/etc/gshadow", "/etc/passwd", *map(str, planted),
                           str(repo / "README.md"), str(repo / ".git" / "config")])
    finally:
        for path in planted:
            path.unlink()
    assert out["/etc/passwd"][0] == "ok"  # /etc is there (toolchains read it)...
    assert out["/etc/shadow"] != ["ok", Path("/etc/shadow").read_text()] and "root:" not in out["/etc/shadow"][1]
    assert "root:" not in out["/etc/gshadow"][1]  # ...without its secrets
    for path in [*map(str, planted), str(repo / "README.md"), str(repo / ".git" / "config")]:
        assert out[path][0] == "failed", path  # not the test's folder, /root, /srv, the user's checkout, its git
    # the mounts name nothing of the host beyond what is bound: system folders, the toolchains, the tree
    bound = [Path(p) for p in (*toolchains.SYSTEM, "/etc", "/dev", "/proc", "/tmp", "/run/reposwarm/git",
                               os.environ["HOME"], lane)] + toolchains.toolchains(Path(os.environ["HOME"]))
    for point in map(Path, out["mounts"]):
        assert point == Path("/") or any(b == point or b in point.parents for b in bound), point
    assert not any(p.startswith(("/srv", "/work/main/.git", str(repo))) for p in out["mounts"])


@pytest.mark.parametrize(("sparse", "readable"), [(None, ("api/",)), (["api"], ("api/",)), (None, None)],
                         ids=["lane-full", "lane-sparse", "whole-commit"])
async def test_a_check_sees_only_its_own_paths_of_its_own_commit_in_git(repo, sparse, readable):
    lane = worktree(repo, "api", sparse)
    other = git(repo, "show", "swarm/run-1/other:api/other.txt")
    docs = git(repo, "show", "main:docs/secret.md")
    (lane / "api" / "app.py").write_text("VERSION = 2\n")  # the lane's own uncommitted change
    script = ("import subprocess\n"
              "def git(*a):\n"
              "    done = subprocess.run(['git', *a], capture_output=True, text=True)\n"
              "    print('$ git', *a, '->', done.returncode, flush=True)\n"
              "    print(done.stdout + done.stderr, flush=True)\n"
              "git('show', 'swarm/run-1/other:api/other.txt')\n"
              "git('log', '--all', '--format=%s')\n"
              "git('show', 'HEAD:docs/secret.md')\n"
              "git('cat-file', '--batch-all-objects', '--batch-check')\n"
              "git('status', '--porcelain')\n"
              "git('log', '-1', '--format=subject=%s')\n"
              "git('diff', '--stat')\n"
              "git('rev-parse', '--git-common-dir')\n"
              "git('rev-parse', 'HEAD')\n"
              "git('fsck', '--no-progress', '--connectivity-only')\n")
    tree = Tree(root=lane, git_dir=common_git_dir(lane), readable=readable)
    ran = await sandbox.run([sys.executable, "-c", script], tree, profile(), 120)
    text = ran.output.decode()
    assert other not in text and "the other lane's work" not in text  # not its file, not even its commit message
    blobs = {line.split()[0] for line in text.splitlines() if " blob " in line}
    assert git(repo, "rev-parse", "swarm/run-1/other:api/other.txt") not in blobs
    if readable is not None:  # a lane's: none of HEAD's paths it may not read
        assert docs not in text and git(repo, "rev-parse", "main:docs/secret.md") not in blobs
    else:  # the whole commit, as it is (validation, the baseline): the real HEAD
        assert docs in text and f"$ git rev-parse HEAD -> 0\n{git(repo, 'rev-parse', 'main')}" in text
    assert "$ git fsck --no-progress --connectivity-only -> 0" in text, text
    assert git(repo, "rev-parse", "main:api/app.py") in blobs  # its own paths are there
    # git works for what a check needs: status and diff show the lane's change, log its commit
    status = text.split("$ git status --porcelain -> 0\n")[1].split("$ git")[0].split()
    assert status == ["M", "api/app.py"], text
    assert "subject=initial" in text and "api/app.py | 2 +-" in text
    assert str(common_git_dir(lane)) not in text


async def test_the_git_view_is_cached_by_commit_and_readable_paths(repo):
    lane = worktree(repo, "api")
    tree = Tree(root=lane, git_dir=common_git_dir(lane), readable=("api/",))
    await sandbox.run(["true"], tree, profile(), 60)
    views = sandbox.gitview.cache_root()
    first = sorted(p.name for p in views.iterdir())
    await sandbox.run(["true"], tree, profile(), 60)
    assert sorted(p.name for p in views.iterdir()) == first and len(first) == 1
    await sandbox.run(["true"], Tree(root=lane, git_dir=common_git_dir(lane)), profile(), 60)
    assert len(list(views.iterdir())) == 2  # the whole commit is another view


async def test_dev_shm_is_bounded_by_tmp_mb_and_dev_is_read_only(repo):
    lane = worktree(repo, "api")
    script = ("for where in ('/dev/shm/fill', '/dev/fill'):\n"
              "    try:\n"
              "        with open(where, 'wb') as f:\n"
              "            f.write(b'x' * (8 * 1024 * 1024))\n"
              "        print(where, 'filled', flush=True)\n"
              "    except OSError as err:\n"
              "        print(where, 'refused', err.errno, flush=True)\n")
    ran = await sandbox.run([sys.executable, "-c", script], Tree(root=lane, git_dir=None), profile(tmp_mb=4), 60)
    out = ran.output.decode()
    assert "/dev/shm/fill refused" in out and "/dev/fill refused" in out, out
    assert "/dev/shm 4 MB" in "; ".join(ran.limits)


async def test_the_environment_passes_by_name_only(repo, monkeypatch):
    lane = worktree(repo, "api")
    secret = "lc-secret-" + uuid.uuid4().hex
    monkeypatch.setenv("LC_FOO", secret)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    out = await probe(Tree(root=lane, git_dir=None), [])
    assert "LC_FOO" not in out["env"] and "LC_ALL" not in out["env"]
    assert secret not in json.dumps(out)
    monkeypatch.setenv("REPOSWARM_CHECK_ENV_PASS", "LC_ALL")
    out = await probe(Tree(root=lane, git_dir=None), [])
    assert out["env"]["LC_ALL"] == "C.UTF-8" and "LC_FOO" not in out["env"]
    # and no prefix exempts a value from redaction
    assert secret not in ledger.redact(f"the check printed {secret}")


async def test_a_check_that_adds_more_than_max_tree_mb_is_ended_and_its_files_removed(repo):
    lane = worktree(repo, "api")
    (lane / "api" / "kept.txt").write_text("the lane's own file\n")
    # many small files in an ignored folder: no one file is over max_file_mb
    script = ("import os, time\n"
              "os.makedirs('build/out', exist_ok=True)\n"
              "for i in range(40):\n"
              "    with open(f'build/out/{i}.bin', 'wb') as f:\n"
              "        f.write(os.urandom(256 * 1024))\n"
              "print('written', flush=True)\n"
              "time.sleep(60)\n")
    tree = Tree(root=lane, git_dir=common_git_dir(lane))
    ran = await sandbox.run([sys.executable, "-c", script], tree, profile(max_tree_mb=4), 120)
    assert ran.tree_over and ran.exit_code is None and not ran.timed_out
    assert b"over its max_tree_mb of 4 MB: it was ended there" in ran.output
    assert not (lane / "build").exists() and (lane / "api" / "kept.txt").read_text() == "the lane's own file\n"
    # one that writes it all and ends at once is caught by the last measure; the report fails
    quick = CheckProfile(commands=[[sys.executable, "-c", "open('big.bin', 'wb').write(b'y' * (6 * 1024 * 1024))"]],
                         max_tree_mb=4)
    report = await run_profile(quick, lane, None, rerun=False)
    assert not report.passed and report.commands[0].exit_code is None and not (lane / "big.bin").exists()
    # and it says why, first: not as the output cap, which it did not pass
    assert report.commands[0].reason.startswith("killed by the tree size limit"), report.commands[0].reason
    assert report.failures[0].message.startswith("killed by the tree size limit"), report.failures[0].message
    small = CheckProfile(commands=[[sys.executable, "-c", "open('small.bin', 'wb').write(b'y' * 1024)"]],
                         max_tree_mb=4)
    assert (await run_profile(small, lane, None)).passed and (lane / "small.bin").exists()


async def test_a_profile_s_read_only_paths_are_readable_and_nothing_else(repo, tmp_path):
    lane = worktree(repo, "api")
    sdk = Path("/srv") / f"reposwarm-sdk-{uuid.uuid4().hex}"
    sdk.mkdir()
    (sdk / "lib.txt").write_text("sdk\n")
    try:
        tree = Tree(root=lane, git_dir=None)
        assert (await probe(tree, [str(sdk / "lib.txt")]))[str(sdk / "lib.txt")][0] == "failed"
        out = await probe(tree, [str(sdk / "lib.txt")], read_only_paths=[str(sdk)])
        assert out[str(sdk / "lib.txt")] == ["ok", "sdk\n"]
        script = f"open({str(sdk / 'new.txt')!r}, 'w')"
        ran = await sandbox.run([sys.executable, "-c", script], tree, profile(read_only_paths=[str(sdk)]), 60)
        assert b"Read-only file system" in ran.output and not (sdk / "new.txt").exists()
    finally:
        for path in sdk.iterdir():
            path.unlink()
        sdk.rmdir()
    for bad in ["relative/path", "/", "/a/../..", "/x\x00y"]:
        with pytest.raises(ValidationError, match="read_only_paths"):
            profile(read_only_paths=[bad])
