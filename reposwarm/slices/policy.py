"""The one path policy every tool goes through: a lane's slice of the repository.

Patterns are gitignore-style globs anchored at the repository root
("services/api/" covers everything below it, "**" spans folders). A path is
normalised, resolved through symlinks, and checked again after resolution, so
no spelling of a path ("..", absolute, a symlink) reaches outside the slice.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import pathspec

MAX_WRITE_BYTES = 1_000_000
MAX_NAME_BYTES = 255  # one file name (NAME_MAX on Linux and macOS)
MAX_PATH_BYTES = 1024  # a whole path relative to the root; the worktree's own path comes on top
# The names git itself refuses to track as `.git` (verify_path with core.protectNTFS, on by default, and
# core.protectHFS): any letter case, NTFS's trailing dots and spaces, its 8.3 short name and stream
# suffix (".git::$INDEX_ALLOCATION"), and HFS+'s ignored code points inside (".g\u200cit"). A lane
# writing one would make its checkpoint's `git add` fail; reading one is refused alike.
_NTFS_DOTGIT = re.compile(r"^(\.git|git~1)[. ]*(:.*)?$", re.IGNORECASE | re.DOTALL)
_HFS_IGNORED = re.compile("[\u200c-\u200f\u202a-\u202e\u206a-\u206f\ufeff]")


def is_git_name(name: str) -> bool:
    """Whether a file or folder name is one git takes for `.git` (see _NTFS_DOTGIT)."""
    return bool(_NTFS_DOTGIT.match(name)) or _HFS_IGNORED.sub("", name).lower() == ".git"


def touches_git(rel: str) -> bool:
    """Whether a relative path has a `.git` (in any spelling git takes for one) among its parts."""
    return any(is_git_name(part) for part in rel.split("/"))


class ToolRefused(Exception):
    """A tool call the lane may not make; the message is shown to the model and ledgered."""


class PathRefused(ToolRefused):
    """A tool asked for a path the lane may not use."""


def slice_spec(patterns: list[str]) -> pathspec.PathSpec:
    anchored = []
    for pattern in patterns:
        pattern = pattern.strip()
        if not pattern:
            continue
        if pattern.startswith("./"):
            pattern = pattern[2:]
        anchored.append(pattern if pattern.startswith(("/", "!", "**")) else "/" + pattern)
    return pathspec.PathSpec.from_lines("gitignore", anchored)


spec = slice_spec  # (a check command's `when:` globs match changed paths as a lane's slice matches its paths)


def _short(path: str) -> str:
    return repr(path) if len(path) <= 80 else f"{path[:60]!r}... ({len(path)} characters)"


class PathPolicy:
    def __init__(self, root: str | Path, allowed: list[str], read_only: list[str] | None = None) -> None:
        self.root = Path(root).resolve()
        self.allowed_patterns = list(allowed)
        self.read_only_patterns = list(read_only or [])
        self._allowed = slice_spec(self.allowed_patterns)
        self._read_only = slice_spec(self.read_only_patterns)

    def _normalise(self, path: str) -> str:
        if not isinstance(path, str) or not path.strip():
            raise PathRefused("path must be a non-empty string relative to the repository root")
        if "\x00" in path:
            raise PathRefused("path contains a NUL byte")
        if "\\" in path:
            raise PathRefused(f"{_short(path)}: use forward slashes")
        if path.startswith("/") or (len(path) > 1 and path[1] == ":"):
            raise PathRefused(f"{_short(path)}: absolute paths are refused; give a path relative to the repository root")
        rel = posixpath.normpath(path)
        if rel == ".." or rel.startswith("../"):
            raise PathRefused(f"{_short(path)} points outside the repository")
        encoded = rel.encode("utf-8", "surrogatepass")
        longest = max(len(part.encode("utf-8", "surrogatepass")) for part in rel.split("/"))
        if longest > MAX_NAME_BYTES or len(encoded) > MAX_PATH_BYTES:
            raise PathRefused(f"{_short(path)}: too long ({longest} bytes in one name, {len(encoded)} in all; "
                              f"at most {MAX_NAME_BYTES} in a name and {MAX_PATH_BYTES} in all)")
        return "" if rel == "." else rel

    @staticmethod
    def _touches_git(rel: str) -> bool:
        return touches_git(rel)

    def _resolve(self, path: str) -> tuple[str, Path]:
        rel = self._normalise(path)
        if self._touches_git(rel):
            raise PathRefused(f"{_short(path)}: .git is never readable or writable through tools")
        target = self.root / rel if rel else self.root
        # Resolve symlinks (of the path or any parent) and check where it really lands.
        try:
            real = target.resolve()
        except RuntimeError:  # Python 3.11 says so of a loop (a -> b -> a)
            raise PathRefused(f"{_short(path)} cannot be resolved: a symlink on the way leads back to itself") from None
        except OSError as err:
            raise PathRefused(f"{_short(path)} cannot be resolved ({err.strerror or type(err).__name__})") from None
        try:
            real_rel = real.relative_to(self.root).as_posix()
        except ValueError:
            raise PathRefused(f"{_short(path)} resolves outside the repository (through a symlink)") from None
        real_rel = "" if real_rel == "." else real_rel
        if self._touches_git(real_rel):
            raise PathRefused(f"{_short(path)} resolves into .git, which tools never touch")
        if real_rel != rel and not (self.readable(real_rel) or real_rel == ""):
            raise PathRefused(f"{_short(path)} is a symlink to {real_rel!r}, outside this lane's paths")
        return rel, real

    def readable(self, rel: str) -> bool:
        return bool(rel) and (self._allowed.match_file(rel) or self._read_only.match_file(rel))

    def writable(self, rel: str) -> bool:
        return bool(rel) and self._allowed.match_file(rel) and not self._read_only.match_file(rel)

    def for_read(self, path: str) -> tuple[str, Path]:
        rel, real = self._resolve(path)
        if not self.readable(rel):
            raise PathRefused(
                f"{_short(path)} is outside this lane's readable paths "
                f"(allowed: {', '.join(self.allowed_patterns)}; read-only: {', '.join(self.read_only_patterns) or 'none'})"
            )
        return rel, real

    def for_list(self, path: str) -> tuple[str, Path]:
        """Folders may be listed anywhere in the worktree (but .git); entries are filtered by the caller."""
        return self._resolve(path)

    def for_write(self, path: str, size: int = 0) -> tuple[str, Path]:
        rel, real = self._resolve(path)
        if self._read_only.match_file(rel):
            raise PathRefused(f"{_short(path)} is read-only for this lane (read_only_paths: {', '.join(self.read_only_patterns)})")
        if not self.writable(rel):
            raise PathRefused(f"{_short(path)} is outside this lane's allowed paths ({', '.join(self.allowed_patterns)})")
        real_rel = real.relative_to(self.root).as_posix()
        if real_rel != rel and not self.writable(real_rel):
            raise PathRefused(f"{_short(path)} is a symlink to {real_rel!r}, which this lane may not write")
        if size > MAX_WRITE_BYTES:
            raise PathRefused(f"{_short(path)}: {size} bytes is over the write limit of {MAX_WRITE_BYTES} bytes")
        return rel, real


def cone_dirs(patterns: list[str]) -> list[str] | None:
    """The folders a cone-mode sparse checkout needs for these patterns; None when one cannot be a cone.

    "services/api/" gives services/api; "services/**/tests/" gives services (the fixed part before a
    glob); a pattern that starts with a glob, or names a file at the root, needs the whole tree.
    """
    dirs: set[str] = set()
    for pattern in patterns:
        fixed = re.split(r"[*?\[]", pattern.strip().removeprefix("./").lstrip("/"), maxsplit=1)[0]
        folder = fixed if fixed.endswith("/") else posixpath.dirname(fixed)
        folder = folder.strip("/")
        if not folder:
            if "/" not in fixed.strip("/") and fixed and not any(c in pattern for c in "*?["):
                continue  # a file at the root: cone mode always checks those out
            return None
        dirs.add(folder)
    return sorted(d for d in dirs if not any(d.startswith(o + "/") for o in dirs))
