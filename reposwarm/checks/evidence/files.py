"""The tree a check ran in, as the evidence speaks of it: its own files (tracked, or new and not ignored), the
language each source file is run by, and the evidence files the check's processes wrote, read with caps (they are
written by code a lane chose: a symlink, a FIFO or a huge file must not make the worker read its own files, hang,
or run out of memory)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from reposwarm.vcs import gitcmd

# Folders of a tree that hold other people's code or made files even when no .gitignore says so (a tree outside
# git is walked, and these are skipped).
NEVER_SOURCE = ("node_modules", ".venv", "venv", "site-packages", "dist-packages", "__pycache__", ".git", ".tox",
                ".nox", "target", ".mypy_cache", ".pytest_cache")
WALK_MAX_FILES = 200_000
EVIDENCE_MAX_FILES = 5_000  # per command and runtime: a check that started more processes is said to be partial
EVIDENCE_FILE_MAX_BYTES = 256 * 1024 * 1024
EVIDENCE_TOTAL_MAX_BYTES = 2 * 1024 * 1024 * 1024


@dataclass(frozen=True)
class TreeFiles:
    """The tree's own files, relative posix paths: what a check that "loaded the tree" loaded. A file under the
    tree's root that is not one of them (an ignored build, a virtual environment or node_modules inside the tree, a
    bound cache) is a copy, never the tree's source."""

    root: Path
    files: frozenset[str]
    walked: bool = False  # not a git tree: every file but NEVER_SOURCE folders counts (nothing is known ignored)
    _real: dict[str, str | None] = field(default_factory=dict, repr=False, compare=False)

    def relative(self, path: str) -> str | None:
        """`path` (absolute, as a process inside the sandbox saw it: the tree is bound at its own path) relative to
        the root, or None when it is not under it. Symlinks are resolved only when the plain path is not under it."""
        rel = _under(self.root, os.path.normpath(path))
        if rel is None and os.path.isabs(path):
            # (every process of a check names the same installed modules: each is resolved once per check)
            if path not in self._real:
                self._real[path] = _realpath(path)
            real = self._real[path]
            rel = _under(self.root, real) if real is not None else None
        return rel

    def own(self, rel: str) -> bool:
        return rel in self.files


def _realpath(path: str) -> str | None:
    try:
        return os.path.realpath(path)
    except (OSError, ValueError):
        return None


def _under(root: Path, path: str) -> str | None:
    top = str(root)
    if path.startswith(top + os.sep):
        return path[len(top) + 1:].replace(os.sep, "/")
    return None


def tree_files(root: Path) -> TreeFiles:
    """The files of the tree at `root`: git's tracked files and new ones it does not ignore; outside git, a walk."""
    root = root.resolve()
    done = gitcmd.run(["ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                      capture_output=True)
    if done.returncode == 0:
        files = frozenset(p for p in done.stdout.decode("utf-8", "surrogateescape").split("\0") if p)
        walked = False
    else:
        files, walked = frozenset(_walk(root)), True
    return TreeFiles(root, files, walked)


def _walk(root: Path) -> Iterator[str]:
    count = 0
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in NEVER_SOURCE]
        for name in names:
            count += 1
            if count > WALK_MAX_FILES:
                return
            yield os.path.relpath(os.path.join(folder, name), root).replace(os.sep, "/")


def read_capped(path: Path, limit: int = EVIDENCE_FILE_MAX_BYTES) -> bytes | None:
    """A regular file's bytes, if it is one (not a symlink, FIFO or device) and not over `limit`; else None."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > limit:
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit + 1)[:limit]
    except OSError:
        return None
    finally:
        os.close(fd)


@dataclass
class Budget:
    """How much of a command's evidence the worker reads: files and bytes; what it left unread is said."""

    files: int = EVIDENCE_MAX_FILES
    total: int = EVIDENCE_TOTAL_MAX_BYTES
    skipped: int = 0

    def evidence(self, folder: Path, suffix: str) -> Iterator[tuple[Path, bytes]]:
        """The evidence files in `folder` (not its sub-folders), oldest name first, within the budget."""
        try:
            names = sorted(n for n in os.listdir(folder) if n.endswith(suffix))
        except OSError:
            return
        for name in names:
            if self.files <= 0 or self.total <= 0:
                self.skipped += 1
                continue
            data = read_capped(folder / name, min(EVIDENCE_FILE_MAX_BYTES, self.total))
            if data is None:
                self.skipped += 1
                continue
            self.files -= 1
            self.total -= len(data)
            yield folder / name, data


def mtime(path: Path) -> float | None:
    try:
        return path.lstat().st_mtime
    except OSError:
        return None
