"""The language caches a check keeps between runs (GOCACHE, GOMODCACHE, cargo's target and registry, npm's, yarn's
and pip's caches), per worker host and repository: `$REPOSWARM_HOME/cache/build/<repo_key>/`, a subfolder per tool,
bound read-write into the check at the same path, its variables set for the check (where the profile's own env
does not set them).

Whose cache a check writes is its `scope`, for a check runs code a lane (a possibly hostile model) wrote, and a
cache one tree's check writes must never be read by the gate's checks of another tree (a planted test binary or
Go cache entry would make a later check pass):

- "base" (the run's base commit, the user's own HEAD: the user's code) writes the host's shared seed, `base/`;
- "lane:<run>/<lane>" gets a folder of its own, `lanes/<run>/<lane>/`, copied from the seed at its first use and
  written only by that lane's checks (remove_lane_caches(run) removes a finished run's);
- "" (validation of a merged tree, trials, anything else) gets a throwaway copy of the seed in the check's
  scratch folder, gone when the check ends.

A copy keeps mtimes (cargo's fingerprints compare them) and is bounded: a seed over MAX_COPY_BYTES, or more than
the copy's file system has free, is not copied (the copy starts empty, and the log says so). Base checks may write
the seed in parallel (Go and cargo lock their own caches; a copy holds cargo's build-directory locks while it
copies its target folder, so it never takes a half-built one); one lane's first copy at a time (a lock file).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import stat
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from reposwarm.checks.sandbox import Bind
from reposwarm.checks.sandbox.environment import passed_names
from reposwarm.contracts import CheckProfile
from reposwarm.runs import objects

log = logging.getLogger(__name__)

MAX_COPY_BYTES = 4 * 1024 ** 3  # a seed bigger than this is not copied: the lane's or the check's cache starts empty
# A lane's caches grown past this (its checks write them: a lane could fill the disk over its checks) start again
# from the seed at its next check.
MAX_LANE_BYTES = 8 * 1024 ** 3
CARGO_LOCK_WAIT_S = 120.0  # how long a copy waits for a base check's cargo build to let go of the target folder
# subfolder -> the variables naming it
TOOLS: dict[str, tuple[str, ...]] = {
    "go-build": ("GOCACHE",),
    "go-mod": ("GOMODCACHE",),
    "cargo-target": ("CARGO_TARGET_DIR",),
    "cargo-home": ("CARGO_HOME",),
    "npm": ("npm_config_cache", "NPM_CONFIG_CACHE"),
    "yarn": ("YARN_CACHE_FOLDER",),
    "pip": ("PIP_CACHE_DIR",),
}


def root() -> Path:
    return objects.home() / "cache" / "build"


def safe_part(part: str) -> str:
    """One path component from a scope's id: letters, digits, '.', '_', '-'; a hash where it had to change."""
    clean = re.sub(r"[^A-Za-z0-9._-]", "_", part)[:96]
    if clean != part or clean in ("", ".", ".."):
        clean = f"{clean.strip('.') or '_'}-{hashlib.sha256(part.encode()).hexdigest()[:10]}"
    return clean


def lane_folder(repo_key: str, lane_id: str) -> Path:
    """A lane's own caches: lanes/<run>/<lane>/ ("lane:<run>/<lane>"; an id without '/' is a run's lane "_")."""
    run, _, lane = lane_id.partition("/")
    return root() / safe_part(repo_key) / "lanes" / safe_part(run) / safe_part(lane or "_")


def prepare(profile: CheckProfile, repo_key: str, scope: str, scratch: Path) -> tuple[list[Bind], dict[str, str]]:
    """The binds and variables of this check's caches. `scope`: "base" (the base commit, or the user's HEAD: it
    writes the host's shared caches), "lane:<run>/<lane>" (a lane's own), "" or anything else (a throwaway copy
    in `scratch`)."""
    if not profile.caches:
        return [], {}
    repo = root() / safe_part(repo_key)
    seed = repo / "base"
    if scope == "base":
        where = seed
    elif scope.startswith("lane:") and scope[5:]:
        where = lane_folder(repo_key, scope[5:])
        if where.is_dir() and tree_size(where, MAX_LANE_BYTES + 1) > MAX_LANE_BYTES:
            log.warning("the lane's build cache %s passed %.1f GiB: it starts again from the host's", where,
                        MAX_LANE_BYTES / 1024 ** 3)
            remove(where)
        if not where.is_dir():
            _first_use(seed, where, repo / ".lock")
    else:
        where = scratch / "caches"
        _copy_seed(seed, where)
    for name in TOOLS:
        (where / name).mkdir(parents=True, exist_ok=True)
    binds, env = [Bind(host=where, dest=where, writable=True)], _variables(where, profile)
    if (downloads := go_downloads(profile)) is not None:
        binds.append(Bind(host=downloads, dest=downloads))
        env |= _go_proxy(downloads, profile)
    return binds, env


def go_downloads(profile: CheckProfile) -> Path | None:
    """The worker's own Go module downloads (`$GOMODCACHE/cache/download`, by default ~/go/pkg/mod/...): the
    modules the user installed the usual way (`go mod download`), which the sandbox's private HOME would hide.
    None where there are none, or where the profile's env chooses its own GOPROXY."""
    if any(name.upper() == "GOPROXY" for name in profile.env):
        return None
    cache = os.environ.get("GOMODCACHE") or os.path.join(
        (os.environ.get("GOPATH") or os.path.join(os.environ.get("HOME") or str(Path.home()), "go"))
        .split(os.pathsep)[0], "pkg", "mod")
    downloads = Path(cache) / "cache" / "download"
    return downloads.resolve() if downloads.is_dir() and not downloads.is_symlink() else None


def _go_proxy(downloads: Path, profile: CheckProfile) -> dict[str, str]:
    """Go reads modules from the worker's downloads as a proxy (a file:// GOPROXY), read-only, and extracts them
    into the check's own GOMODCACHE; with no network, nothing else, and no checksum database to ask (go.sum still
    checks every module it names)."""
    if profile.network:
        return {"GOPROXY": f"file://{downloads},{os.environ.get('GOPROXY') or 'https://proxy.golang.org,direct'}"}
    own = {name.upper() for name in profile.env}
    return {"GOPROXY": f"file://{downloads},off", **({} if "GOSUMDB" in own else {"GOSUMDB": "off"})}


def _variables(where: Path, profile: CheckProfile) -> dict[str, str]:
    own = {name.upper() for name in profile.env}
    env: dict[str, str] = {}
    for sub, names in TOOLS.items():
        if sub == "cargo-home" and not _cargo_home_movable():
            continue
        if not any(n.upper() in own for n in names):
            env[names[0]] = str(where / sub)
    if "GOFLAGS" not in own:
        # (the module cache writable: Go makes it read-only, and a copy of it must be removable)
        passed = os.environ.get("GOFLAGS", "") if "GOFLAGS" in passed_names() else ""
        env["GOFLAGS"] = f"{passed} -modcacherw".strip() if "-modcacherw" not in passed else passed
    return env


def _cargo_home_movable() -> bool:
    """Whether a check's cargo may use a CARGO_HOME of the cache (its registry and git checkouts kept): only when
    the worker's own cargo home has nothing a check's cargo reads there, no config (a linker, a source replacement)
    and no registry of downloaded crates (an offline build uses it, read-only). cargo itself is found on PATH
    (the toolchain's bin, ~/.cargo/bin), and so are its subcommands."""
    home = Path(os.environ.get("CARGO_HOME") or Path(os.environ.get("HOME") or Path.home()) / ".cargo")
    return not any((home / name).exists() for name in ("config.toml", "config", "registry", "git"))


# --- copies of the seed ---


def _first_use(seed: Path, where: Path, lock: Path) -> None:
    """A lane's folder, copied from the seed once: under the repository's lock, into a new folder renamed into
    place (a copy cut short leaves nothing a later check would take for a cache)."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with _flock(lock, fcntl.LOCK_EX):
        if where.is_dir():
            return
        where.parent.mkdir(parents=True, exist_ok=True)
        new = where.with_name(f".{where.name}.new-{uuid.uuid4().hex[:8]}")
        try:
            _copy_seed(seed, new)
            new.rename(where)
        finally:
            if new.exists():
                remove(new)


def _copy_seed(seed: Path, dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    if not seed.is_dir():
        return
    size = tree_size(seed, MAX_COPY_BYTES + 1)
    free = shutil.disk_usage(dest).free
    if size > MAX_COPY_BYTES or size > free // 2:
        log.warning("the build cache %s holds %.1f GiB, more than a copy may take (%.1f GiB, or half of the %.1f "
                    "GiB free): the check's caches start empty", seed, size / 1024 ** 3, MAX_COPY_BYTES / 1024 ** 3,
                    free / 1024 ** 3)
        return
    for sub in sorted(p.name for p in seed.iterdir() if p.is_dir() and p.name in TOOLS):
        if sub == "cargo-target":
            with _cargo_locks(seed / sub) as held:
                if held:
                    _cp(seed / sub, dest / sub)
                else:
                    log.warning("%s: a cargo build held it over %.0fs: the check's cargo target starts empty",
                                seed / sub, CARGO_LOCK_WAIT_S)
        else:
            _cp(seed / sub, dest / sub)


def _cp(source: Path, dest: Path) -> None:
    """A copy keeping modes and mtimes (copy-on-write where the file system can), never hard links: a check writing
    through one would write the seed."""
    if shutil.which("cp"):
        done = subprocess.run(["cp", "-a", "--reflink=auto", "--no-target-directory", str(source), str(dest)],
                              capture_output=True, text=True)
        if done.returncode != 0:  # (files the seed's own tool removed while they were copied: misses, no harm)
            log.info("copying %s: %s", source, done.stderr.strip()[-500:])
        return
    shutil.copytree(source, dest, symlinks=True, dirs_exist_ok=True)


def tree_size(folder: Path, stop: int | None = None) -> int:
    """Bytes of the files under `folder` (symlinks not followed); counting stops past `stop`."""
    total, todo = 0, [folder]
    while todo:
        try:
            entries = list(os.scandir(todo.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    todo.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
            if stop is not None and total > stop:
                return total
    return total


@contextlib.contextmanager
def _flock(path: Path, how: int) -> Iterator[None]:
    with path.open("a") as f:
        fcntl.flock(f, how)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


@contextlib.contextmanager
def _cargo_locks(target: Path) -> Iterator[bool]:
    """cargo's build-directory locks (<target>/[<triple>/]<profile>/.cargo-lock) held shared while the target folder
    is copied: a build in progress holds them exclusive. False: still held after CARGO_LOCK_WAIT_S."""
    locks = sorted({*target.glob("*/.cargo-lock"), *target.glob("*/*/.cargo-lock")})
    files = []
    deadline = time.monotonic() + CARGO_LOCK_WAIT_S
    try:
        for lock in locks:
            try:
                f = lock.open("rb")
            except OSError:
                continue
            files.append(f)
            while True:
                try:
                    fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        yield False
                        return
                    time.sleep(0.2)
        yield True
    finally:
        for f in files:
            f.close()  # (closing it lets go of its lock)


# --- garbage ---


def remove(folder: Path) -> None:
    """Remove a cache folder, read-only entries too (Go's module cache, unless -modcacherw)."""
    def writable(func: object, path: str, _exc: object) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(path), stat.S_IRWXU)
            os.chmod(path, stat.S_IRWXU)
            (shutil.rmtree if os.path.isdir(path) and not os.path.islink(path) else os.unlink)(path)

    shutil.rmtree(folder, onerror=writable)


def remove_lane_caches(run_id: str) -> int:
    """Remove the lanes' caches of a finished run, in every repository's caches of this host; how many."""
    removed = 0
    base = root()
    if not base.is_dir():
        return 0
    for repo in base.iterdir():
        folder = repo / "lanes" / safe_part(run_id)
        if folder.is_dir() and not folder.is_symlink():
            remove(folder)
            removed += 1
    return removed
