"""A check's own git view: a tiny private repository holding only the tree's HEAD commit, never the shared one.

A lane's worktree shares the repository's git directory with every other lane and the user's branches; bound
into the sandbox whole, a check could `git show swarm/<run>/<other lane>:...` or `git show HEAD:<a path its lane
may not read>`. So the sandbox binds none of it. Instead, per (repository, commit, readable paths), the worker
packs into a cache folder of its own only the objects of one commit:

- no readable paths given (validation, the baseline): HEAD's own commit, tree and blobs, the commit marked
  shallow (its parents are not there), so `git rev-parse HEAD` is the real commit;
- a lane's readable paths (allowed + read-only; the MCP server's --allow + --read-only): a commit of HEAD's tree
  filtered to those paths (readable_tree: an index filtered from `ls-tree`, `write-tree`; then `commit-tree`
  with HEAD's author, dates and message), no parents.

Per check, a git folder of a few small files (HEAD, config, the index, `info/exclude`) is made in scratch
space; the sandbox binds it (and the cached objects under it) where the tree's `.git` points. No ref but a
detached HEAD exists in it; nothing in it is writable from inside.

Every git call here goes through reposwarm/vcs/gitcmd.py; the commands read objects and write index and pack
files, none reads the working tree, so no filter, hook or driver can run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from reposwarm.checks.sandbox import reaping
from reposwarm.slices.policy import PathPolicy, touches_git
from reposwarm.vcs import gitcmd

# Where the private git folder appears inside the sandbox when the tree's `.git` is a file (a linked worktree):
# a neutral path, so the check sees no host folder for it.
INSIDE = Path("/run/reposwarm/git")
KEEP_VIEWS = 16  # cached views kept at least (the newest); older ones go once unused for STALE_S
STALE_S = 3600
CONFIG = "[core]\n\trepositoryformatversion = 0\n\tfilemode = true\n\tbare = false\n"


class GitViewError(RuntimeError):
    """The private view could not be made (the message says which git step failed)."""


@dataclass(frozen=True)
class GitView:
    git_dir: Path  # the per-check git folder (HEAD, config, index, info/exclude; objects/ an empty mount point)
    objects: Path  # the cached objects of the one commit, bound read-only over git_dir/objects
    gitfile: Path  # a `.git` file saying "gitdir: INSIDE", bound over a linked worktree's `.git` file
    commit: str


def _git(args: list[str], env: dict[str, str], stdin: bytes | None = None) -> bytes:
    done = gitcmd.run(args, input=stdin, capture_output=True, env=env)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip().splitlines()
        raise GitViewError(f"git {args[0]} failed: {why[-1] if why else f'exit {done.returncode}'}")
    return done.stdout


def head_of(root: Path) -> str | None:
    done = gitcmd.run(["rev-parse", "--verify", "-q", "HEAD^{commit}"], cwd=root, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def cache_root() -> Path:
    # (imported here: the store module imports the config, which the sandbox's importers need not load)
    from reposwarm.runs.objects import home
    return home() / "cache" / "gitviews"


def _key(common: Path, commit: str, readable: tuple[str, ...] | None) -> str:
    raw = json.dumps([str(common), commit, list(readable) if readable is not None else None])
    return hashlib.sha256(raw.encode()).hexdigest()[:32]


def _entries(listing: bytes) -> list[tuple[bytes, str]]:
    """`ls-tree -r -z` output as (the whole line, its path)."""
    out = []
    for line in listing.split(b"\0"):
        if line:
            path = line.split(b"\t", 1)[1].decode("utf-8", "surrogateescape")
            out.append((line, path))
    return out


def readable_tree(treeish: str, readable: tuple[str, ...], env: dict[str, str]) -> tuple[str, list[str]]:
    """`treeish`'s tree holding only the paths these readable globs let a lane read, never a `.git`: the one
    filter of what a check may see (a lane's git view here; the tree the MCP server's run_checks runs in). The
    tree is written through env's GIT_INDEX_FILE (which must not exist yet) and object directory; returns its id
    and the paths left out."""
    listing = _entries(_git(["ls-tree", "-r", "-z", "--full-tree", treeish], env))
    policy = PathPolicy("/", list(readable))  # (only its globs are used)
    shown = [policy.readable(path) and not touches_git(path) for _, path in listing]
    kept = [entry for entry, keep in zip(listing, shown, strict=True) if keep]
    hidden = [path for (_, path), keep in zip(listing, shown, strict=True) if not keep]
    _git(["update-index", "-z", "--index-info"], env, b"".join(line + b"\0" for line, _ in kept))
    return _git(["write-tree"], env).decode().strip(), hidden


def _build(common: Path, commit: str, readable: tuple[str, ...] | None, into: Path) -> None:
    """Fill `into` with objects/ (a pack), index, head, shallow (maybe) and hidden (paths left out)."""
    objects = into / "objects"
    (objects / "pack").mkdir(parents=True)
    (objects / "info").mkdir()
    # reads go to the shared objects, writes (trees, the commit, the pack) to ours only
    env = {"GIT_DIR": str(common), "GIT_OBJECT_DIRECTORY": str(objects),
           "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(common / "objects"), "GIT_INDEX_FILE": str(into / "index")}
    if readable is None:
        hidden: list[str] = []
        _git(["read-tree", commit], env)
        view = commit
        if _git(["rev-list", "--parents", "-n", "1", commit], env).split()[1:]:
            (into / "shallow").write_text(commit + "\n")
        tree = commit + "^{tree}"
    else:
        tree, hidden = readable_tree(commit, readable, env)
        fields = _git(["log", "-1", "--date=raw", "--format=%an%x00%ae%x00%ad%x00%cn%x00%ce%x00%cd%x00%B",
                       commit], env).decode("utf-8", "surrogateescape").split("\0", 6)
        who = dict(zip(["GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_AUTHOR_DATE", "GIT_COMMITTER_NAME",
                        "GIT_COMMITTER_EMAIL", "GIT_COMMITTER_DATE"], fields[:6], strict=True))
        view = _git(["commit-tree", tree, "-F", "-"], {**env, **who}, fields[6].encode("utf-8", "surrogateescape")
                    ).decode().strip()
    # the pack: the commit, every tree under it, every blob kept (gitlinks name commits of other repositories)
    root_tree = _git(["rev-parse", tree], env).decode().strip()
    wanted = [view, root_tree] + [line.split(b"\t", 1)[0].split()[2].decode() for line, _ in _entries(
        _git(["ls-tree", "-r", "-t", "-z", "--full-tree", tree], env)) if line.split()[1] != b"commit"]
    _git(["pack-objects", "-q", str(objects / "pack" / "pack")], env, "".join(o + "\n" for o in wanted).encode())
    _git(["prune-packed", "-q"], env)
    (into / "head").write_text(view + "\n")
    (into / "hidden").write_bytes("\0".join(hidden).encode("utf-8", "surrogateescape"))


def _cached(common: Path, commit: str, readable: tuple[str, ...] | None) -> Path:
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    final = root / _key(common, commit, readable)
    if (final / "head").is_file():
        os.utime(final)
        return final
    building = root / f".building-{uuid.uuid4().hex}"
    try:
        _build(common, commit, readable, building)
        try:
            building.rename(final)
        except OSError:  # another check made it meanwhile: theirs is the same
            if not (final / "head").is_file():
                raise
    finally:
        shutil.rmtree(building, ignore_errors=True)
    _evict(root)
    return final


def _evict(root: Path) -> None:
    """Keep the cache small: views of old commits go once nobody has used them for a while."""
    try:
        views = sorted((p for p in root.iterdir() if not p.name.startswith(".")), key=lambda p: p.stat().st_mtime,
                       reverse=True)
    except OSError:
        return
    now = time.time()
    for old in views[KEEP_VIEWS:]:
        try:
            if now - old.stat().st_mtime > STALE_S:
                shutil.rmtree(old, ignore_errors=True)
        except OSError:
            pass
    for stale in root.glob(".building-*"):  # left by a killed worker
        try:
            if now - stale.stat().st_mtime > STALE_S:
                shutil.rmtree(stale, ignore_errors=True)
        except OSError:
            pass


def _exclude_line(path: bytes) -> bytes:
    """An info/exclude pattern matching exactly this path."""
    escaped = b"".join(b"\\" + bytes([c]) if c in b"\\*?[" else bytes([c]) for c in path)
    if escaped.startswith((b"#", b"!")):
        escaped = b"\\" + escaped
    if escaped.endswith(b" "):
        escaped = escaped[:-1] + b"\\ "
    return b"/" + escaped


def make(root: Path, common: Path, readable: tuple[str, ...] | None, scratch: Path) -> GitView | None:
    """The check's git view of `root` (None: its HEAD is no commit yet), its per-check part under `scratch`."""
    commit = head_of(root)
    if commit is None:
        return None
    cached = _cached(common, commit, readable)
    view = (cached / "head").read_text().strip()
    git_dir = scratch / "git"
    for folder in ("objects", "refs/heads", "refs/tags", "info"):
        (git_dir / folder).mkdir(parents=True)
    (git_dir / "HEAD").write_text(view + "\n")
    (git_dir / "config").write_text(CONFIG)
    shutil.copyfile(cached / "index", git_dir / "index")
    if (cached / "shallow").is_file():
        shutil.copyfile(cached / "shallow", git_dir / "shallow")
    # Paths left out of the view that the tree has on disk (a full checkout has them all): excluded, so `git
    # status` does not list the tree's own files as untracked. Only those the check can see anyway are named.
    on_disk, skipped = _tree_index(root)
    hidden = [p for p in (cached / "hidden").read_bytes().split(b"\0") if p and p in on_disk]
    (git_dir / "info" / "exclude").write_bytes(b"".join(_exclude_line(p) + b"\n" for p in hidden))
    if skipped:
        _mark_sparse(root, git_dir, cached, skipped)
    gitfile = scratch / "gitfile"
    gitfile.write_text(f"gitdir: {INSIDE}\n")
    return GitView(git_dir=git_dir, objects=cached / "objects", gitfile=gitfile, commit=view)


def _tree_index(root: Path) -> tuple[set[bytes], list[bytes]]:
    """The tree's own index: the paths it has in the working tree, and those it keeps out (a sparse lane)."""
    done = gitcmd.run(["ls-files", "-t", "-z"], cwd=root, capture_output=True)
    if done.returncode != 0:
        return set(), []
    entries = [entry for entry in done.stdout.split(b"\0") if len(entry) > 2]
    return {e[2:] for e in entries if not e.startswith(b"S ")}, [e[2:] for e in entries if e.startswith(b"S ")]


def _mark_sparse(root: Path, git_dir: Path, cached: Path, skipped: list[bytes]) -> None:
    """Paths the tree's own index keeps out of the working tree stay out in the view's index too; else `git
    status` would call them deleted."""
    env = {"GIT_DIR": str(git_dir), "GIT_OBJECT_DIRECTORY": str(cached / "objects"), "GIT_WORK_TREE": str(root)}
    listed = gitcmd.run(["ls-files", "-z"], capture_output=True, env=env)
    present = set(listed.stdout.split(b"\0")) if listed.returncode == 0 else set()
    wanted = [p for p in skipped if p in present]
    if wanted:
        _git(["update-index", "--skip-worktree", "-z", "--stdin"], env, b"".join(p + b"\0" for p in wanted))


def scratch_dir() -> Path:
    """A folder for a git view, removed by the next worker on the host should this process die first."""
    return reaping.scratch("reposwarm-gitview-")
