"""The language caches of checks, in the real sandbox: the base commit's checks fill the host's seed, later checks of
the repository reuse it, and no check of a lane's (or of a merged tree) can write what another tree's check reads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from reposwarm.checks import sandbox
from reposwarm.checks.runner import common_git_dir, repo_key, run_profile
from reposwarm.checks.sandbox import caches
from reposwarm.contracts import CheckProfile
from tests.helpers import make_repo

HAS_GO = shutil.which("go") is not None
MODULE = {
    "go.mod": "module example.com/m\n\ngo 1.19\n",
    "calc/calc.go": "package calc\n\nfunc Add(x, y int) int { return x + y }\n",
    "calc/calc_test.go": ('package calc\n\nimport "testing"\n\n'
                          'func TestAdd(t *testing.T) {\n\tif Add(1, 2) != 3 {\n\t\tt.Fatal("1+2")\n\t}\n}\n'),
}


@pytest.fixture(autouse=True)
def _sandboxed(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "rshome"))
    monkeypatch.delenv(sandbox.SWITCH, raising=False)
    monkeypatch.delenv(sandbox.BWRAP, raising=False)


def seed_of(repo: Path) -> Path:
    return caches.root() / repo_key(common_git_dir(repo), repo) / "base"


def sh(script: str, **kw) -> CheckProfile:
    return CheckProfile(commands=[["/bin/sh", "-c", script]], timeout_s=60, **kw)


async def output(profile: CheckProfile, repo: Path, scope: str) -> str:
    report = await run_profile(profile, repo, None, rerun=False, scope=scope)
    assert report.commands[0].exit_code == 0, report.commands[0].output_tail
    return report.commands[0].output_tail


@pytest.mark.skipif(not HAS_GO, reason="go is not installed")
async def test_a_later_check_reuses_the_go_cache_the_base_filled(tmp_path):
    repo = make_repo(tmp_path / "mod", MODULE)
    profile = CheckProfile(commands=[["go", "test", "./..."]], timeout_s=120)
    first = await run_profile(profile, repo, None, rerun=False, scope="base")
    assert first.passed and first.tests_run == 1
    assert "(cached)" not in first.commands[0].output_tail
    assert any((seed_of(repo) / "go-build").rglob("*-a")), "the base check's GOCACHE is the host's seed"
    # a check of the same repository in a throwaway copy of the seed: the package's test result is Go's cached one
    second = await run_profile(profile, repo, None, rerun=False, scope="")
    assert second.passed and second.tests_run == 1
    assert "example.com/m/calc\\t(cached)" in second.commands[0].output_tail, second.commands[0].output_tail


async def test_a_lanes_cache_writes_reach_no_other_trees_check(tmp_path):
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    await output(sh('echo base > "$GOCACHE/from-base"'), repo, "base")
    seed = seed_of(repo)
    # a lane's first check starts from a copy of the seed, and plants an entry in its own cache
    lane = await output(sh('cat "$GOCACHE/from-base"; echo fake > "$GOCACHE/planted"; echo "at $GOCACHE"'), repo,
                        "lane:run-1/api")
    assert "base" in lane and str(caches.lane_folder(repo_key(common_git_dir(repo), repo), "run-1/api")) in lane
    assert not (seed / "go-build" / "planted").exists()
    # the lane's own next check keeps it; the gate's check of a merged tree (scope "") never sees it
    assert "fake" in await output(sh('cat "$GOCACHE/planted"'), repo, "lane:run-1/api")
    gate = await output(sh('test -e "$GOCACHE/planted" && echo SEEN || echo unseen; cat "$GOCACHE/from-base"; '
                           'echo throwaway > "$GOCACHE/mine"; echo "at $GOCACHE"'), repo, "")
    assert "unseen" in gate and "SEEN" not in gate and "base" in gate
    other = await output(sh('test -e "$GOCACHE/planted" && echo SEEN || echo unseen'), repo, "lane:run-1/web")
    assert "unseen" in other  # nor another lane's
    # the throwaway copy is gone with its check, and wrote nothing to the seed
    where = Path(gate.split("at ")[-1].strip())
    assert where.name == "go-build" and not where.exists() and not (seed / "go-build" / "mine").exists()
    # a finished run's lane caches can be removed; the seed stays
    assert caches.remove_lane_caches("run-1") == 1
    assert not caches.lane_folder(repo_key(common_git_dir(repo), repo), "run-1/api").exists()
    assert (seed / "go-build" / "from-base").is_file()


async def test_the_profiles_own_variables_win_and_caches_can_be_off(tmp_path):
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    own = sh('echo "GOCACHE=$GOCACHE GOFLAGS=$GOFLAGS PIP=$PIP_CACHE_DIR"',
             env={"GOCACHE": "/tmp/mine", "GOFLAGS": "-mod=vendor"})
    out = await output(own, repo, "base")
    assert "GOCACHE=/tmp/mine GOFLAGS=-mod=vendor " in out and f"PIP={seed_of(repo) / 'pip'}" in out
    default = await output(sh('echo "GOFLAGS=$GOFLAGS TARGET=$CARGO_TARGET_DIR"'), repo, "base")
    assert f"GOFLAGS=-modcacherw TARGET={seed_of(repo) / 'cargo-target'}" in default
    off = await output(sh('echo "GOCACHE=[$GOCACHE] TARGET=[$CARGO_TARGET_DIR]"', caches=False), repo, "base")
    assert "GOCACHE=[] TARGET=[]" in off


async def test_a_seed_over_the_copy_limit_is_not_copied(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo", {"README.md": "x\n"})
    await output(sh('head -c 4096 /dev/zero > "$GOCACHE/big"'), repo, "base")
    monkeypatch.setattr(caches, "MAX_COPY_BYTES", 1024)
    out = await output(sh('test -e "$GOCACHE/big" && echo COPIED || echo empty'), repo, "")
    assert "empty" in out and "COPIED" not in out
    monkeypatch.setattr(caches, "MAX_COPY_BYTES", 1 << 30)
    assert "COPIED" in await output(sh('test -e "$GOCACHE/big" && echo COPIED || echo empty'), repo, "lane:r/a")
    # a lane's own caches grown past their bound start again from the seed at its next check
    await output(sh('head -c 8192 /dev/zero > "$GOCACHE/grown"'), repo, "lane:r/a")
    monkeypatch.setattr(caches, "MAX_LANE_BYTES", 10000)
    again = await output(sh('ls "$GOCACHE"'), repo, "lane:r/a")
    assert "big" in again and "grown" not in again


def _module_proxy(folder: Path) -> Path:
    """A Go module proxy on disk (the GOPROXY file:// layout) serving example.com/dep v1.0.0: stands for the
    registry the user downloaded from."""
    import json
    import zipfile

    at = folder / "example.com" / "dep" / "@v"
    at.mkdir(parents=True)
    (at / "list").write_text("v1.0.0\n")
    (at / "v1.0.0.info").write_text(json.dumps({"Version": "v1.0.0", "Time": "2026-01-01T00:00:00Z"}))
    (at / "v1.0.0.mod").write_text("module example.com/dep\n\ngo 1.19\n")
    with zipfile.ZipFile(at / "v1.0.0.zip", "w") as z:
        z.writestr("example.com/dep@v1.0.0/go.mod", "module example.com/dep\n\ngo 1.19\n")
        z.writestr("example.com/dep@v1.0.0/dep.go", "package dep\n\nfunc Two() int { return 2 }\n")
    return folder


@pytest.mark.skipif(not HAS_GO, reason="go is not installed")
async def test_go_modules_the_user_downloaded_are_read_with_no_network(tmp_path, monkeypatch):
    """`go mod download` the usual way fills ~/go/pkg/mod, which the sandbox's private HOME hides: the checks read
    its downloads as a read-only file:// proxy (they used to fail: dial tcp ... network is unreachable)."""
    import os
    import subprocess

    repo = make_repo(tmp_path / "mod", {
        "go.mod": "module example.com/m\n\ngo 1.19\n\nrequire example.com/dep v1.0.0\n",
        "two/two.go": 'package two\n\nimport "example.com/dep"\n\nfunc Two() int { return dep.Two() }\n',
        "two/two_test.go": ('package two\n\nimport "testing"\n\n'
                            'func TestTwo(t *testing.T) {\n\tif Two() != 2 {\n\t\tt.Fatal("two")\n\t}\n}\n')})
    modcache = tmp_path / "home" / "go" / "pkg" / "mod"
    env = {**os.environ, "GOMODCACHE": str(modcache), "GOFLAGS": "-mod=mod", "GOSUMDB": "off",
           "GOPROXY": f"file://{_module_proxy(tmp_path / 'registry')}"}
    subprocess.run(["go", "mod", "download", "all"], cwd=repo, env=env, check=True, capture_output=True)
    subprocess.run(["go", "mod", "tidy"], cwd=repo, env=env, check=True, capture_output=True)
    subprocess.run(["git", "add", "go.sum"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@x", "commit", "-qm", "sum"], cwd=repo, check=True)
    shutil.rmtree(tmp_path / "registry")  # (the registry is out of reach now, as with no network)
    monkeypatch.setenv("GOMODCACHE", str(modcache))
    report = await run_profile(CheckProfile(commands=[["go", "test", "./..."]], timeout_s=120), repo, None,
                               rerun=False, scope="base")
    assert report.passed and report.tests_run == 1, report.commands[0].output_tail
    # the user's module cache is only read: the check extracted the module into its own
    assert (seed_of(repo) / "go-mod" / "example.com" / "dep@v1.0.0" / "dep.go").is_file()
    # and a profile choosing its own GOPROXY is left as it is
    said = await output(CheckProfile(commands=[["go", "env", "GOPROXY"]]), repo, "")
    assert said.strip().endswith(f"file://{modcache / 'cache' / 'download'},off"), said
    own = await output(CheckProfile(commands=[["go", "env", "GOPROXY"]], env={"GOPROXY": "direct"}), repo, "")
    assert own.strip().endswith("direct") and "file://" not in own
