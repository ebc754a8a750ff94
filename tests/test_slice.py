"""What a lane leaves behind is judged like its own edits; git trusts nothing planted; secrets go by value."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from reposwarm.runs import ledger
from reposwarm.slices.leftovers import revert_outside_slice, stage_slice
from reposwarm.slices.policy import PathPolicy
from reposwarm.vcs import gitcmd
from tests.helpers import git, make_repo

FILES = {"api/app.py": "VERSION = 1\n", "docs/guide.md": "# Guide\n", "web/client.js": "export const v = 1;\n",
         ".gitignore": "*.log\n"}


def _leave_a_mess(repo: Path, outside: Path) -> None:
    """What a lane-written check could leave in the worktree: every kind of change, in and out of the slice."""
    (repo / "api" / "app.py").write_text("VERSION = 2\n")  # the lane's own change
    (repo / "api" / "new.py").write_text("x = 1\n")  # the lane's own new file
    (repo / "docs" / "guide.md").write_text("# Pwned\n")  # a read-only path
    (repo / "web" / "evil.js").write_text("steal()\n")  # another lane's path
    (repo / "web" / "client.js").unlink()  # a deletion out of the slice
    (repo / "root.txt").write_text("x\n")  # the repository root
    (repo / "root.log").write_text("cache\n")  # ignored output outside the slice
    os.symlink(outside, repo / "api" / "out")  # leads outside the repository
    os.symlink("../docs/guide.md", repo / "api" / "to_docs")  # leads into a read-only path
    os.symlink("new.py", repo / "api" / "alias.py")  # inside the slice: fine


def test_stage_slice_stages_the_lane_s_own_paths_and_undoes_the_rest(tmp_path):
    repo = make_repo(tmp_path / "repo", FILES)
    outside = tmp_path / "outside"
    outside.mkdir()
    _leave_a_mess(repo, outside)

    refused = stage_slice(PathPolicy(repo, ["api/"], ["docs/"]))

    assert sorted(git(repo, "diff", "--cached", "--name-only").splitlines()) == [
        "api/alias.py", "api/app.py", "api/new.py"]
    # nothing else is left over: undone, not just left unstaged
    assert git(repo, "status", "--porcelain", "--ignored", "--untracked-files=all").splitlines() == [
        "A  api/alias.py", "M  api/app.py", "A  api/new.py"]
    assert (repo / "docs" / "guide.md").read_text() == "# Guide\n"
    assert (repo / "web" / "client.js").exists() and not (repo / "web" / "evil.js").exists()
    assert not (repo / "root.txt").exists() and not (repo / "root.log").exists()
    assert not (repo / "api" / "out").is_symlink() and not (repo / "api" / "to_docs").is_symlink()
    said = "\n".join(refused)
    for path in ("docs/guide.md", "web/evil.js", "web/client.js", "root.txt", "api/out", "api/to_docs"):
        assert path in said
    assert "root.log" not in said  # ignored output is cleaned without a word: it is never committed
    assert outside.exists() and not any(outside.iterdir())


def test_revert_outside_slice_leaves_a_clean_slice_alone(tmp_path):
    repo = make_repo(tmp_path / "repo", FILES)
    (repo / "api" / "app.py").write_text("VERSION = 3\n")
    assert revert_outside_slice(PathPolicy(repo, ["api/"])) == []
    assert (repo / "api" / "app.py").read_text() == "VERSION = 3\n"


def test_git_run_by_the_worker_runs_no_planted_hook(tmp_path):
    repo = make_repo(tmp_path / "repo", FILES)
    marker = tmp_path / "hook-ran"
    for hook in ("pre-commit", "post-commit", "post-checkout", "reference-transaction"):
        path = repo / ".git" / "hooks" / hook
        path.write_text(f"#!/bin/sh\necho {hook} >> {marker}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    git(repo, "config", "core.fsmonitor", f"sh -c 'echo fsmonitor >> {marker}'")

    g = gitcmd.repo(repo)
    (repo / "api" / "app.py").write_text("VERSION = 2\n")
    g.add("-A")
    g.execute(["git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-q", "-m", "x"])
    g.checkout("-q", "-b", "other")
    gitcmd.run(["status"], cwd=repo, capture_output=True, check=True)
    assert not marker.exists()

    git(repo, "checkout", "-q", "main")  # the same repository with plain git does run them: the test can fail
    assert marker.exists()


def test_redaction_goes_by_value_whatever_the_name(monkeypatch):
    monkeypatch.setenv("DB_CONN", "postgres://app:hunter2-planted@db/x")
    monkeypatch.setenv("SHORT", "abc")  # too short to redact without mangling ordinary text
    monkeypatch.setenv("REPOSWARM_CHECK_ENV_PASS", "PUBLIC_URL")
    monkeypatch.setenv("PUBLIC_URL", "https://example.test/app")  # passed to checks: not a secret
    monkeypatch.setenv("DEPLOY_TOKEN", "https://example.test/app-token")  # a secret-looking name never passes
    text = ledger.redact("conn=postgres://app:hunter2-planted@db/x abc https://example.test/app-token "
                         "https://example.test/app")
    assert "hunter2" not in text and "[redacted:DB_CONN]" in text
    assert "[redacted:DEPLOY_TOKEN]" in text and text.endswith("https://example.test/app")
    assert " abc " in text
