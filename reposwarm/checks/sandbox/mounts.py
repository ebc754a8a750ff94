"""bwrap's command line: what a check sees, and where it may write.

The root is an empty tmpfs, read-only once the mounts are made. On it, read-only: the system folders and /etc
without its secrets (toolchains.py), the toolchains the commands run, the profile's read_only_paths; private
and sized: /tmp, HOME (the worker's own path, so toolchains under it still find themselves) and /dev/shm;
writable: the one tree and the report folder. The tree's `.git` is the check's own git view (gitview.py), never
the repository's git directory, which is not in the sandbox at all.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from reposwarm.checks.sandbox import gitview, reaping, toolchains
from reposwarm.contracts import CheckProfile

MIB = 1024 * 1024


class TreeLike(Protocol):
    @property
    def root(self) -> Path: ...
    @property
    def reports(self) -> Path | None: ...


def _git_mounts(root: Path, view: gitview.GitView | None) -> list[str]:
    dot_git = root / ".git"
    if not dot_git.exists() and not dot_git.is_symlink():
        return []
    if view is None:
        # no view (no commit yet, no repository): the `.git` entry shows nothing; in a main checkout it *is* the
        # repository's git directory
        if dot_git.is_dir() and not dot_git.is_symlink():
            return ["--size", str(MIB), "--tmpfs", str(dot_git), "--remount-ro", str(dot_git)]
        return ["--ro-bind", "/dev/null", str(dot_git)]
    if dot_git.is_dir() and not dot_git.is_symlink():  # a main checkout: the view in place of its git directory
        inside = dot_git
        args = []
    else:  # a linked worktree's `.git` file: one of ours pointing at the view
        inside = gitview.INSIDE
        args = ["--ro-bind", str(view.gitfile), str(dot_git)]
    return ["--ro-bind", str(view.git_dir), str(inside), "--ro-bind", str(view.objects), str(inside / "objects"),
            *args]


def bwrap_argv(binary: str, argv: list[str], tree: TreeLike, profile: CheckProfile, home: Path,
               view: gitview.GitView | None) -> list[str]:
    """Later mounts go on top of earlier ones (bwrap makes their mount points on the root tmpfs), so the private
    tmpfs folders come first and the tree, with its `.git`, last."""
    cmd = [binary, *toolchains.system_mounts(), *toolchains.etc_mounts(profile.network),
           "--dev", "/dev", "--proc", "/proc",
           # (a user namespace of its own, in which it may not make another: a kernel attack surface less)
           "--unshare-all", "--unshare-user", "--disable-userns", *(["--share-net"] if profile.network else []),
           # (no --new-session: the launcher already runs in a session of its own with no controlling terminal,
           # stdio being pipes, so there is no terminal to inject keystrokes into (TIOCSTI); and a new session
           # would be a new autogroup, which would undo the check's lower priority, check_nice)
           "--die-with-parent", "--cap-drop", "ALL", "--unsetenv", reaping.MARK]
    # private, memory-backed, and bounded: a check filling them would otherwise fill the machine's memory
    size = str(profile.tmp_mb * MIB)
    cmd += ["--size", size, "--tmpfs", "/dev/shm", "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs",
            str(home)]
    cmd += toolchains.toolchain_mounts(home, profile.read_only_paths, argv, tree.root)
    cmd += ["--bind", str(tree.root), str(tree.root)]
    cmd += _git_mounts(tree.root, view)
    for bind in getattr(tree, "binds", ()):
        cmd += ["--bind" if bind.writable else "--ro-bind", str(bind.host), str(bind.dest)]
    if tree.reports is not None:
        cmd += ["--bind", str(tree.reports), str(tree.reports)]
    # the root tmpfs and bwrap's /dev: nothing more written to either (memory a check could fill unbounded)
    cmd += ["--remount-ro", "/dev", "--remount-ro", "/"]
    return [*cmd, "--chdir", str(tree.root), "--", *argv]
