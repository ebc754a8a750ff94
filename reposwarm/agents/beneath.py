"""Files read and written beneath a root for an agent that runs in the same tree at the same time (an ACP agent's
fs/read_text_file and fs/write_text_file, answered by the worker: acp.py): each folder on the way is opened one
name at a time with no symlink followed, so a folder the agent swaps for a symlink after the lane's path policy
looked cannot lead out of the tree. The path given is the policy's resolved one, relative to the root.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from reposwarm.slices.policy import MAX_WRITE_BYTES, PathRefused

MAX_READ_BYTES = 4_000_000  # one read at most


def _folder(root: Path, rel: str, create_dirs: bool) -> tuple[int, str]:
    """A descriptor of the folder holding `rel` under `root`, reached one name at a time with no symlink followed
    (the agent runs at the same time in the same worktree: a folder swapped for a symlink after the policy looked
    must not lead out), and the file's own name."""
    parts = [part for part in rel.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise PathRefused(f"{rel!r} is not a file in the worktree")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            if create_dirs:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = inner
    except BaseException:
        os.close(fd)
        raise
    return fd, parts[-1]


def read(root: Path, rel: str) -> bytes:
    """The regular file's bytes (at most MAX_READ_BYTES)."""
    folder, name = _folder(root, rel, create_dirs=False)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder)
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as handle:
        if not _regular(handle.fileno()):
            raise PathRefused(f"{rel} is not a regular file")
        data = handle.read(MAX_READ_BYTES + 1)
    if len(data) > MAX_READ_BYTES:
        raise PathRefused(f"{rel} is over {MAX_READ_BYTES} bytes, more than one read gives: read it with your own "
                          "tools")
    return data


def _regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def write(root: Path, rel: str, data: bytes) -> None:
    """The regular file made or replaced with `data` (at most the policy's MAX_WRITE_BYTES), its folders made."""
    if len(data) > MAX_WRITE_BYTES:
        raise PathRefused(f"{rel}: {len(data)} bytes is over the write limit of {MAX_WRITE_BYTES} bytes")
    folder, name = _folder(root, rel, create_dirs=True)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644,
                     dir_fd=folder)
    finally:
        os.close(folder)
    with os.fdopen(fd, "wb") as handle:
        if not _regular(handle.fileno()):
            raise PathRefused(f"{rel} is not a regular file")
        handle.write(data)
