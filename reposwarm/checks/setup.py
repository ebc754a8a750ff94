"""A check profile's dependencies: its setup step, run once per key and cached on the worker host, or the user's
own installed folders.

`setup: [["npm", "ci"]]` runs in the sandbox, in the checked tree, before the checks, with network (unless
`setup_network: false`). The ignored folders it makes (node_modules, .venv, vendor...) are moved into
`$REPOSWARM_HOME/cache/deps/<repository>/<scope>/<key>/` and bound read-only into this tree and every later
checked tree of the repository whose key files (`cache_key`, the lock files by default) are the same: no setup,
no network, nothing copied. The key is the key files' contents, the setup commands, their env and network.

Trust follows the checks' cache scopes (reposwarm/checks/sandbox/caches.py): setup on a tree a lane wrote runs
code the lane chose (its package.json's install scripts), so what it makes is kept for that lane only. The
entries every tree may use are made by the base commit's checks (scope "base"); a lane's checks use the base's
entry when their key is the same, else their own; any other tree (a merged tree under validation) uses the
base's entry when the key is the same, else runs the setup for itself and keeps nothing.

`deps_from_checkout: ["node_modules"]`, without a setup step: those folders of the user's own checkout (on this
host) bound read-only into the checked trees.
"""

from __future__ import annotations

import asyncio
import fcntl
import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from reposwarm.checks import sandbox
from reposwarm.checks.sandbox.caches import safe_part
from reposwarm.contracts import CheckProfile, CommandResult, TestFailure
from reposwarm.runs import ledger, objects
from reposwarm.runs.store import Store
from reposwarm.vcs import gitcmd

TAIL_CHARS = 4000
SETUP_TREE_MB = 16384  # what a setup step may add to its tree (node_modules of a big monorepo); checks keep theirs
KEY_FILE_MAX_BYTES = 256 * 1024 * 1024
LOCK_POLL_S = 0.5
PTH_HEAD_BYTES = 64 * 1024


@dataclass
class Prepared:
    binds: list[sandbox.Bind] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # what happened, for the report and the review
    failed: CommandResult | None = None  # the setup command that failed: no check runs
    failure: TestFailure | None = None


def cache_root() -> Path:
    return objects.home() / "cache" / "deps"


def scope_folder(scope: str) -> str | None:
    """Where a scope's entries live; None: a scope that keeps nothing (a merged tree, a trial, MCP's copy)."""
    if scope == "base":
        return "base"
    if scope.startswith("lane:"):
        run, _, lane = scope[len("lane:"):].partition("/")
        return f"lanes/{safe_part(run)}/{safe_part(lane or 'lane')}"
    return None


def remove_lane_entries(run_id: str) -> int:
    """Remove the lanes' setup entries of a finished run on this host (its lanes' own dependencies); how many."""
    removed = 0
    root = cache_root()
    for folder in root.glob(f"*/lanes/{safe_part(run_id)}") if root.is_dir() else []:
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def _key_files(root: Path, patterns: list[str]) -> list[Path]:
    found: set[Path] = set()
    for pattern in patterns:
        for path in (root.glob(pattern) if any(c in pattern for c in "*?[") else [root / pattern]):
            # (a symlink may point anywhere on the host: it is not read, and counts by its target's name)
            if path.is_symlink() or path.is_file():
                found.add(path)
    return sorted(found)


def key(profile: CheckProfile, root: Path, repo_key: str) -> tuple[str, list[str]]:
    """The setup's cache key in this tree, and the key files it found (relative paths)."""
    h = hashlib.sha256()
    h.update(json.dumps([repo_key, profile.setup, sorted(profile.env.items()), profile.setup_network]).encode())
    names = []
    for path in _key_files(root, profile.cache_key):
        rel = path.relative_to(root).as_posix()
        names.append(rel)
        h.update(b"\0" + rel.encode("utf-8", "surrogateescape") + b"\0")
        if path.is_symlink():
            h.update(b"symlink:" + os.readlink(path).encode("utf-8", "surrogateescape"))
        elif path.stat().st_size <= KEY_FILE_MAX_BYTES:
            h.update(hashlib.sha256(path.read_bytes()).digest())
        else:
            h.update(f"size:{path.stat().st_size}:{path.stat().st_mtime_ns}".encode())
    return h.hexdigest()[:24], names


def _ignored_folders(root: Path) -> set[str]:
    """The tree's ignored folders, each at its top-most ignored level (node_modules/, packages/a/node_modules/)."""
    done = gitcmd.run(["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"],
                      cwd=root, capture_output=True)
    if done.returncode != 0:
        return set()
    return {p.rstrip("/") for p in done.stdout.decode("utf-8", "surrogateescape").split("\0")
            if p.endswith("/") and p.rstrip("/")}


def _entry(root: Path) -> list[str] | None:
    """The folders of a complete cache entry; None when there is none."""
    try:
        folders = json.loads((root / "manifest.json").read_text())["folders"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(folders, list) or not all(isinstance(f, str) for f in folders):
        return None
    return [f for f in folders if (root / "folders" / f).is_dir()]


def _binds(entry: Path, folders: list[str], tree: Path) -> list[sandbox.Bind]:
    return [sandbox.Bind(host=entry / "folders" / f, dest=tree / f) for f in folders]


async def _locked(path: Path, timeout_s: float) -> int | None:
    """An exclusive lock on `path` (its fd), waited for without blocking the event loop; None: not got in time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except BlockingIOError:
            if time.monotonic() > deadline:
                os.close(fd)
                return None
            await asyncio.sleep(LOCK_POLL_S)


def _unlock(fd: int | None) -> None:
    if fd is not None:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def from_checkout(profile: CheckProfile, tree: sandbox.Tree) -> Prepared:
    """deps_from_checkout: the user's checkout's folders (the repository's work tree on this host)."""
    out = Prepared()
    if not profile.deps_from_checkout:
        return out
    git_dir = tree.git_dir
    checkout = git_dir.parent if git_dir is not None and git_dir.name == ".git" else None
    for rel in profile.deps_from_checkout:
        host = checkout / rel if checkout is not None else None
        if host is None or not host.is_dir() or host.is_symlink():
            where = f"{host}" if host is not None else "the repository has no checkout on this host"
            out.lines.append(f"deps_from_checkout: {rel} is not there ({where}): the checks run without it")
            continue
        if (tree.root / rel).exists() and tree.root.resolve() == checkout.resolve():  # type: ignore[union-attr]
            continue  # the checkout itself is the tree (MCP on the user's own checkout): it is there already
        out.binds.append(sandbox.Bind(host=host.resolve(), dest=tree.root / rel))
        out.lines.append(f"deps_from_checkout: {rel} bound read-only from {host}")
    return out


async def prepare(profile: CheckProfile, tree: sandbox.Tree, repo_key: str, store: Store | None,
                  scope: str = "") -> Prepared:
    """What the checks of this tree need besides the tree: binds of the cached setup result (running the setup
    first when no entry has this tree's key), or of the user's checkout's folders."""
    if not profile.setup:
        return from_checkout(profile, tree)
    digest, names = await asyncio.to_thread(key, profile, tree.root, repo_key)
    keyed = f"key {digest[:12]} of {', '.join(names) or 'no key file'}"
    repo = cache_root() / repo_key
    own = scope_folder(scope)
    # the base's entry first (every scope may use it), then the scope's own
    for folder in dict.fromkeys(["base", *([own] if own else [])]):
        entry = repo / folder / digest
        if folder == "base" and own != "base":
            # a baseline installing this very key right now: wait for it rather than install twice
            _unlock(await _locked(repo / folder / f"{digest}.lock", profile.setup_timeout_s))
        if (folders := await asyncio.to_thread(_entry, entry)) is not None:
            return Prepared(binds=_binds(entry, folders, tree.root),
                            lines=[f"setup: restored from the cache ({keyed}): {', '.join(folders) or 'nothing'}"])
    fd = await _locked(repo / own / f"{digest}.lock", profile.setup_timeout_s) if own else None
    try:
        mine = repo / own / digest if own else None
        if mine is not None and (folders := await asyncio.to_thread(_entry, mine)) is not None:
            return Prepared(binds=_binds(mine, folders, tree.root),
                            lines=[f"setup: restored from the cache ({keyed}): {', '.join(folders) or 'nothing'}"])
        return await _run_setup(profile, tree, store, mine, keyed)
    finally:
        _unlock(fd)


async def _run_setup(profile: CheckProfile, tree: sandbox.Tree, store: Store | None, entry: Path | None,
                     keyed: str) -> Prepared:
    before = await asyncio.to_thread(_ignored_folders, tree.root)
    setup_profile = profile.model_copy(update={"network": profile.setup_network,
                                               "max_tree_mb": max(profile.max_tree_mb, SETUP_TREE_MB)})
    started = time.monotonic()
    out = Prepared()
    for argv in profile.setup:
        remaining = max(1.0, profile.setup_timeout_s - (time.monotonic() - started))
        t0 = time.monotonic()
        ran = await sandbox.run(argv, tree, setup_profile, remaining)
        log = ledger.redact(ran.output.decode("utf-8", errors="replace"))
        command = " ".join(argv)
        if ran.exit_code != 0 or ran.timed_out:
            why = (f"the setup step `{command}` timed out after {remaining:.0f}s" if ran.timed_out else
                   f"the setup step `{command}` failed (exit {ran.exit_code})")
            if ran.tree_over:
                why += f", killed by the tree size limit: {ran.stopped}"
            why += "; no check ran"
            out.failed = CommandResult(argv=argv, exit_code=ran.exit_code, timed_out=ran.timed_out,
                                       duration_s=round(time.monotonic() - t0, 3), output_tail=log[-TAIL_CHARS:],
                                       log_ref=store.put(log) if store is not None else None,
                                       sandboxed=ran.sandboxed, reason=why)
            out.failure = TestFailure(name=f"setup: {command}", message=f"{why}\n{log[-2000:]}", command=command)
            out.lines.append(why)
            _record(store, "setup", command=command, passed=False, reason=why)
            return out
        out.lines.append(f"setup: `{command}` ran in {time.monotonic() - t0:.1f}s"
                         f"{'' if ran.sandboxed else ' (unsandboxed)'}")
    made = sorted((await asyncio.to_thread(_ignored_folders, tree.root)) - before)
    made = [m for m in made if not any(m.startswith(o + "/") for o in made if o != m)]
    if entry is None:
        out.lines.append(f"setup: made {', '.join(made) or 'no ignored folder'} in this tree; not kept (no entry "
                         f"of the base commit has {keyed}, and only the base commit's and a lane's own are kept)")
        return out
    if (named := await asyncio.to_thread(_names_tree, tree.root, made)) is not None:
        out.lines.append(f"setup: {named}; not kept: later trees would run this tree's code, not their own. Install "
                         "the dependencies only (uv sync --no-install-project, pip install -r requirements.txt) "
                         "and run the tests from the tree (python -m pytest)")
        return out
    folders = await asyncio.to_thread(_keep, tree.root, made, entry)
    out.binds = _binds(entry, folders, tree.root)
    out.lines.append(f"setup: cached {', '.join(folders) or 'no ignored folder'} ({keyed}) for the next checks")
    _record(store, "setup", command=" ".join(" ".join(a) for a in profile.setup), passed=True, cached=folders,
            cache_key=keyed)
    return out


def _names_tree(root: Path, made: list[str]) -> str | None:
    """Whether a virtual environment the setup made installed the project itself (an editable install: a .pth
    file or a direct_url.json naming this tree's path), which every tree the entry is bound into would import."""
    here = str(root.resolve())
    for rel in made:
        venv = root / rel
        if not (venv / "pyvenv.cfg").is_file():
            continue
        for site in venv.glob("lib/python*/site-packages"):
            for path in [*site.glob("*.pth"), *site.glob("*.dist-info/direct_url.json")]:
                try:
                    with path.open("rb") as f:  # (a planted .pth may be huge: its head names the path, if any)
                        head = f.read(PTH_HEAD_BYTES).decode("utf-8", "replace")
                    if here in head:
                        return f"{rel} has the project itself installed from this tree ({path.relative_to(root)})"
                except OSError:
                    continue
    return None


def _keep(root: Path, made: list[str], entry: Path) -> list[str]:
    """Move the folders the setup made into a new cache entry (complete once its manifest is written)."""
    staging = entry.with_name(f"{entry.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    kept = []
    for rel in made:
        source = root / rel
        if source.is_symlink() or not source.is_dir():
            continue
        target = staging / "folders" / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(str(source), str(target))
        kept.append(rel)
    staging.mkdir(parents=True, exist_ok=True)
    (staging / "manifest.json").write_text(json.dumps({"folders": kept, "created": time.time()}))
    shutil.rmtree(entry, ignore_errors=True)
    os.replace(staging, entry)
    return kept


def _record(store: Store | None, event: str, **fields: object) -> None:
    if store is None:
        return
    try:
        ledger.record_activity(store.run_id, event, **fields)
    except RuntimeError:  # not in an activity (the checks command, a test): no ledger line
        pass
