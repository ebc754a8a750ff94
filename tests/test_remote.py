"""reposwarm/vcs/remote.py on real repositories: a bare remote, two hosts' clones (two homes), no Temporal."""

from __future__ import annotations

from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from reposwarm.vcs.remote import Repository, open_repository
from tests.helpers import git, make_repo

RUN = "run-1"
INTEG = f"refs/heads/swarm/{RUN}/integration"
LANE = f"refs/heads/swarm/{RUN}/api"


@pytest.fixture
def remote(tmp_path: Path) -> str:
    work = make_repo(tmp_path / "work", {"a.txt": "0\n"})
    git(tmp_path, "clone", "-q", "--bare", str(work), str(tmp_path / "remote.git"))
    return f"file://{tmp_path / 'remote.git'}"


def on_host(monkeypatch: pytest.MonkeyPatch, home: Path, url: str) -> Repository:
    monkeypatch.setenv("REPOSWARM_HOME", str(home))
    return open_repository(url)


def commit_on(repo: Repository, ref: str, parent: str, text: str) -> str:
    tree = repo.git.rev_parse(f"{parent}^{{tree}}")
    sha = repo.git.execute(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit-tree", tree, "-p", parent,
                            "-m", text])
    repo.git.update_ref(ref, sha)
    return sha


def test_each_host_clones_the_remote_into_its_own_home(remote, tmp_path, monkeypatch):
    a = on_host(monkeypatch, tmp_path / "a", remote)
    b = on_host(monkeypatch, tmp_path / "b", remote)
    assert a.path.is_relative_to(tmp_path / "a") and b.path.is_relative_to(tmp_path / "b")
    assert a.base("main") == b.base("main") == git(Path(remote[7:]), "rev-parse", "main")


def test_the_remote_wins_over_a_host_s_stale_ref_even_one_ahead(remote, tmp_path, monkeypatch):
    a = on_host(monkeypatch, tmp_path / "a", remote)
    base = a.base("main")
    first = commit_on(a, INTEG, base, "merge 1")
    second = commit_on(a, INTEG, first, "merge 2")
    a.push(INTEG)
    b = on_host(monkeypatch, tmp_path / "b", remote)
    b.fetch(*b.run_refs(RUN))
    assert git(b.path, "rev-parse", INTEG) == second
    # host b rolls the integration branch back; host a, still at the later state, takes the rollback
    b.git.update_ref(INTEG, first)
    b.push(INTEG)
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "a"))
    a.fetch(*a.run_refs(RUN))
    assert git(a.path, "rev-parse", INTEG) == first


def test_a_lane_s_own_branch_ahead_of_the_remote_is_kept_and_pushed(remote, tmp_path, monkeypatch):
    a = on_host(monkeypatch, tmp_path / "a", remote)
    base = a.base("main")
    pushed = commit_on(a, LANE, base, "turn 1")
    a.push(LANE)
    ahead = commit_on(a, LANE, pushed, "turn 2, its push cut short")
    a.fetch(LANE, keep_ahead=(LANE,))
    assert git(a.path, "rev-parse", LANE) == ahead
    assert git(Path(remote[7:]), "rev-parse", LANE) == ahead


def test_the_delivered_branch_never_overwrites_a_branch_of_that_name_on_the_remote(remote, tmp_path, monkeypatch):
    bare = Path(remote[7:])
    theirs = git(bare, "rev-parse", "main")
    git(bare, "update-ref", "refs/heads/feature", theirs)
    a = on_host(monkeypatch, tmp_path / "a", remote)
    mine = commit_on(a, "refs/heads/feature", theirs, "the swarm's change")
    assert mine != theirs
    with pytest.raises(ApplicationError, match="exists there already"):
        a.push(new=("refs/heads/feature",))  # even a fast-forward of it
    assert git(bare, "rev-parse", "feature") == theirs
    # a branch not there is made, and a second push of it (a retried delivery) is no error
    delivered = commit_on(a, "refs/heads/delivered", theirs, "the delivered change")
    a.push(new=("refs/heads/delivered",))
    a.push(new=("refs/heads/delivered",))
    assert git(bare, "rev-parse", "delivered") == delivered


def test_a_local_path_is_opened_as_it_is(tmp_path, monkeypatch):
    repo = make_repo(tmp_path / "repo", {"a.txt": "0\n"})
    local = on_host(monkeypatch, tmp_path / "home", str(repo))
    local.fetch(INTEG)
    local.push(INTEG)
    assert local.url is None and local.path == repo and not (tmp_path / "home" / "repos").exists()


def test_a_remote_that_is_gone_is_a_clear_error_with_no_token_in_it(tmp_path, monkeypatch):
    monkeypatch.setenv("REPOSWARM_HOME", str(tmp_path / "home"))
    with pytest.raises(ApplicationError) as err:
        open_repository(f"file://{tmp_path}/gone.git")
    assert "git clone of" in str(err.value) and "gone.git" in str(err.value) and err.value.non_retryable
    with pytest.raises(ApplicationError) as err:
        open_repository("https://bob:tok3n-s3cret-value@127.0.0.1:9/x.git")
    assert "tok3n-s3cret-value" not in str(err.value) and "127.0.0.1:9" in str(err.value)
