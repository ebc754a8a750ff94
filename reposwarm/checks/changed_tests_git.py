"""The git side of the base-tests comparison (reposwarm/checks/changed_tests.py, which workflows read and so
runs no git): which test paths the lanes changed, the checkout that puts the base commit's back, and the bounded
diff a reviewer and a repairing lane read. Activities only."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import git

from reposwarm.checks import testpaths
from reposwarm.vcs import gitcmd

DIFF_CHARS = 4000  # per changed file: the assertion a reviewer reads, not the whole rewrite


def changed_paths(g: git.Git, base: str, merged: str) -> tuple[list[str], dict[str, str]]:
    """The test paths that differ between the two commits, and among them the test configuration changes
    (path -> how it changed). A shared file (pyproject.toml...) whose test sections did not change is neither."""
    status, out, _ = gitcmd.try_git(g, "diff", "--name-only", "--no-renames", "-z", base, merged)
    if status != 0:
        return [], {}
    paths, config = [], {}
    for path in (p for p in out.split("\0") if p):
        if not testpaths.is_test(path):
            continue
        if testpaths.is_config(path):
            how = testpaths.config_change(path, gitcmd.show(g, base, path), gitcmd.show(g, merged, path))
            if not how:
                continue  # a build section of a shared file: the merged code's, not a test change
            config[path] = how
        paths.append(path)
    return paths, config


def base_tests_tree(g: git.Git, tree: Path, base: str, paths: list[str]) -> None:
    """In `tree` (a checkout of the merged tree), `paths` as the base commit has them: a changed or deleted one
    restored, one the lanes added removed."""
    wt = gitcmd.repo(str(tree))
    on_base = set(g.ls_tree("-r", "--name-only", "-z", base, "--", *paths).split("\0")) - {""}
    if on_base:
        wt.checkout(base, "--", *sorted(on_base))
    for path in sorted(set(paths) - on_base):
        target = tree / path
        if target.is_file() or target.is_symlink():
            target.unlink()


def diff(g: git.Git, base: str, merged: str, paths: Iterable[str]) -> str:
    """The change to these files, bounded: the reviewer's and the repairing lane's reference."""
    wanted = sorted(set(paths))
    if not wanted:
        return ""
    status, out, _ = gitcmd.try_git(g, "diff", "--no-color", "--no-ext-diff", base, merged, "--", *wanted)
    if status != 0:
        return ""
    return out if len(out) <= DIFF_CHARS else out[:DIFF_CHARS] + f"\n... ({len(out) - DIFF_CHARS} more characters)"
