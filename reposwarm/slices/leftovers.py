"""What a lane leaves in its worktree is judged like a lane's own edit.

The file tools check every path before they write (reposwarm/slices/policy.py), but a lane's checks run code it
wrote, and that code can write wherever the sandbox lets it: anywhere in the worktree. After a check, and
again at every checkpoint, the worktree's changes are compared with the lane's slice: a change outside the
paths it may write is undone, a symlink that leads outside the repository or into a path it may not write
is removed, and only what remains is ever staged (never `git add -A`).

A nested repository (a `.git` folder or file anywhere below the worktree's root) is removed the same way,
its files left as files: git would stage it as a gitlink (a dangling one on the delivered branch, or an exit
128 for an empty repository), and its config is the one place a lane can name a command (a filter, a diff
driver) that a git entering it would run as the worker (reposwarm/vcs/gitcmd.py keeps the worker's git out).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from reposwarm.slices.policy import PathPolicy, touches_git
from reposwarm.vcs import gitcmd


@dataclass(frozen=True)
class Change:
    path: str  # relative to the worktree root, posix
    code: str  # git status XY: "??" untracked, "!!" ignored, else a tracked change
    symlink: bool


def changes(root: Path) -> list[Change]:
    """Every path of the worktree that differs from HEAD: tracked changes, untracked and ignored files."""
    out = gitcmd.run(["status", "--porcelain=v1", "-z", "--untracked-files=all", "--ignored=matching",
                      "--no-renames"], cwd=root, capture_output=True, check=True).stdout
    found = []
    for entry in out.split(b"\0"):
        if len(entry) < 4:
            continue
        code, path = entry[:2].decode(), entry[3:].decode("utf-8", "surrogateescape").rstrip("/")
        found.append(Change(path, code, os.path.islink(root / path)))
    return found


def nested_git(root: Path) -> list[str]:
    """Every `.git` (folder or file, in any letter case) below the worktree's root, relative and posix.

    A walk of the whole tree, symlinks not followed: git's own status does not show a nested repository
    inside a tracked folder, nor one inside a submodule's folder (~60 ms for 64,000 files here)."""
    found: list[str] = []
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            if entry.name.lower() == ".git":
                if folder != root:
                    found.append(Path(entry.path).relative_to(root).as_posix())
            elif entry.is_dir(follow_symlinks=False):
                stack.append(Path(entry.path))
    return sorted(found)


def remove_nested_git(root: Path) -> list[str]:
    """Remove every nested `.git` below the worktree's root; one line per repository removed."""
    lines = []
    for rel in nested_git(root):
        path = root / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # a folder that held nothing else (git keeps no empty folder either)
            path.parent.rmdir()
        lines.append(f"{rel} (a nested git repository: its .git was removed, its files stay as plain files)")
    return lines


def _symlink_problem(policy: PathPolicy, change: Change) -> str | None:
    """Why a symlink in the lane's paths may not stay, or None: it must point at a path the lane may write."""
    link = policy.root / change.path
    target = os.readlink(link)
    real = Path(os.path.normpath(link.parent / target))
    try:
        rel = real.relative_to(policy.root).as_posix()
    except ValueError:
        return f"{change.path} is a symlink leading outside the repository"
    if not policy.writable(rel) or touches_git(rel):
        return f"{change.path} is a symlink to {rel}, which this lane may not write"
    return None


def _undo(root: Path, change: Change) -> None:
    path = root / change.path
    if change.code in ("??", "!!"):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    else:  # tracked: back to HEAD (index and file)
        gitcmd.run(["checkout", "-f", "HEAD", "--", f":(literal){change.path}"], cwd=root, capture_output=True)
        if change.code[0] == "A":  # staged as new and not in HEAD: checkout cannot restore it; drop it
            gitcmd.run(["rm", "-q", "-f", "--cached", "--", f":(literal){change.path}"], cwd=root,
                       capture_output=True)
            path.unlink(missing_ok=True)


def _revert(policy: PathPolicy, found: list[Change]) -> tuple[list[Change], list[str]]:
    """Undo the changes in `found` outside the lane's writable paths, and the symlinks it may not keep; returns
    the changes that stay, and one line per undone change a lane should hear about."""
    kept: list[Change] = []
    undone: list[str] = []
    for change in found:
        why = None
        if not policy.writable(change.path) or touches_git(change.path):
            what = {"??": "created", "!!": "created"}.get(change.code, "deleted" if "D" in change.code else "changed")
            why = f"{change.path} ({what}; outside this lane's writable paths)"
        elif change.symlink:
            why = _symlink_problem(policy, change)
        if why is None:
            kept.append(change)
            continue
        _undo(policy.root, change)
        if change.code != "!!":
            undone.append(why)
    return kept, undone


def revert_outside_slice(policy: PathPolicy) -> list[str]:
    """Undo every change outside the lane's writable paths, and every symlink it may not keep.

    Returns one line per undone change that a lane should hear about. Ignored files outside the slice
    (caches and build output of the checks) are removed too, without a line: they are never committed.
    """
    nested = remove_nested_git(policy.root)  # first: what they held is then seen as the files it is
    return nested + _revert(policy, changes(policy.root))[1]


def _add(root: Path, paths: list[str]) -> bool:
    # (-A with an explicit list of the lane's own paths: their deletions are staged too, nothing else)
    spec = b"".join(f":(literal){p}".encode("utf-8", "surrogateescape") + b"\0" for p in paths)
    return gitcmd.run(["add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul"], cwd=root, input=spec,
                      capture_output=True).returncode == 0


def stage_slice(policy: PathPolicy) -> list[str]:
    """Stage the lane's own changes, and only those; returns what was refused (and undone) instead."""
    refused = remove_nested_git(policy.root)
    kept, undone = _revert(policy, changes(policy.root))
    refused += undone
    mine = [c.path for c in kept if c.code != "!!"]
    if mine and not _add(policy.root, mine):
        # One path git will not add (a file inside a submodule's folder, say) must not fail the checkpoint:
        # the others are staged, and that one is undone and said.
        for path in mine:
            if not _add(policy.root, [path]):
                change = next(c for c in kept if c.path == path)
                _undo(policy.root, change)
                refused.append(f"{path} (git would not stage it)")
    return refused
