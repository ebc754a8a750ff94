"""Where a run's files live: this host's run folder and, when configured, an object store all hosts share.

Worker hosts that share no file system must all see one run's files (store blobs, "exactly once" records,
ledger lines, review packages), and so must a CLI on any machine. With REPOSWARM_OBJECT_STORE=s3://bucket[/prefix]
every file is put at <prefix>/runs/<run>/<relpath> as well as written locally, and a file missing here is
fetched from there (and kept here: most of a run's files never change once written; see get's `fresh`).
Endpoint, region and credentials are boto3's own environment (AWS_ENDPOINT_URL, AWS_DEFAULT_REGION,
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY), so they never travel in a workflow's input. Unset, a run's files
are only the local folder, as they always were.

    put(run_id, "review/latest.md", data)       the local copy (write-then-rename), then the object
    get(run_id, "store/ab/ab12...")              bytes, from here or the object store; None when neither has it
    list(run_id, "ledger/")                      the relpaths under a prefix, here and there
"""

from __future__ import annotations

import builtins
import functools
import itertools
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from reposwarm.contracts.errors import ConfigError

VARIABLE = "REPOSWARM_OBJECT_STORE"
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# what decides which S3 client the process holds: the variables boto3 reads for where and as whom
_CLIENT_ENV = ("AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_DEFAULT_REGION", "AWS_REGION", "AWS_PROFILE",
               "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
_EXISTS = frozenset({"PreconditionFailed", "ConditionalRequestConflict"})  # If-None-Match: the object is there
_MISSING = frozenset({"NoSuchKey", "404", "NotFound"})


def home() -> Path:
    """Where this host keeps worktrees and run folders (REPOSWARM_HOME, default ~/.reposwarm)."""
    return _resolved(os.environ.get("REPOSWARM_HOME") or _default_home(os.environ.get("HOME", "")))


@functools.lru_cache(maxsize=4)
def _default_home(user_home: str) -> str:
    """~/.reposwarm, worked out once per HOME (Path.home() for each call cost a worker with no REPOSWARM_HOME as
    much as all the rest of home())."""
    return str(Path.home() / ".reposwarm")


@functools.lru_cache(maxsize=16)
def _resolved(folder: str) -> Path:
    """The folder with its symlinks resolved, once per name: resolving it on every call (every ledger line, every
    store read) was 6% of a worker's time at 32 lanes. A later change of REPOSWARM_HOME is a new name."""
    return Path(folder).resolve()


def check_run_id(run_id: str) -> str:
    if not _RUN_ID.match(run_id):
        raise ValueError(f"run id {run_id!r} must be letters, digits, '.', '_' or '-' (at most 128)")
    return run_id


# Not a run: the files every run shares (the base commit's check results, reposwarm/checks/selection/baselines.py), under
# home/shared and <prefix>/shared, beside runs/ (so no listing of runs sees it). No run may take this id: it is no
# valid run id (check_run_id).
SHARED = "_shared"


def run_dir(run_id: str) -> Path:
    """The run's local folder: home/runs/<run> (home/shared for SHARED)."""
    return _run_dir(home(), run_id)


@functools.lru_cache(maxsize=1024)
def _run_dir(root: Path, run_id: str) -> Path:
    """run_dir, once per home and run: asked a dozen times a lane step (every record, blob and ledger line), its
    two joins were half of the worker's path arithmetic (bench/cpu_probe.py)."""
    return root / "shared" if run_id == SHARED else root / "runs" / check_run_id(run_id)


@dataclass(frozen=True)
class Location:
    """The shared object store: a bucket, and the prefix its runs/ folder is under ("" for the bucket's root)."""

    bucket: str
    prefix: str

    def key(self, run_id: str, relpath: str = "") -> str:
        where = ("shared",) if run_id == SHARED else ("runs", run_id)
        return "/".join(p for p in (self.prefix, *where, relpath) if p)

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}".rstrip("/")


@functools.lru_cache(maxsize=8)
def _parse(value: str) -> Location:
    url = urlsplit(value)
    if url.scheme != "s3" or not url.netloc or url.query or url.fragment or "@" in url.netloc:
        raise ConfigError(f"{VARIABLE} must be s3://bucket or s3://bucket/prefix, not {value!r} (the endpoint, "
                          "region and credentials go in AWS_ENDPOINT_URL, AWS_DEFAULT_REGION, AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY)")
    prefix = url.path.strip("/")
    if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
        raise ConfigError(f"{VARIABLE}={value!r}: the prefix {prefix!r} has an empty, '.' or '..' part")
    return Location(url.netloc, prefix)


def location() -> Location | None:
    """The shared object store REPOSWARM_OBJECT_STORE names, or None (a run's files are this host's alone)."""
    value = os.environ.get(VARIABLE, "").strip()
    return _parse(value) if value else None


def configured() -> bool:
    return location() is not None


def check_relpath(relpath: str) -> str:
    """A file's place in a run's folder, refused when it could leave the folder or name it two ways."""
    if not relpath or relpath.startswith("/") or "\\" in relpath or "\x00" in relpath \
            or any(part in ("", ".", "..") for part in relpath.split("/")):
        raise ValueError(f"{relpath!r} is not a relative path inside a run's folder (no '..', '.', empty part, "
                         "backslash or leading '/')")
    return relpath


def path(run_id: str, relpath: str) -> Path:
    """The local copy's place: run_dir(run_id)/relpath."""
    return run_dir(run_id) / check_relpath(relpath)


def of(local: Path) -> tuple[str, str] | None:
    """(run id, relpath) of a file in a run's local folder, or None for a path outside every run's folder."""
    try:
        parts = local.relative_to(_runs(home())).parts
    except ValueError:
        return None
    return (parts[0], "/".join(parts[1:])) if len(parts) > 1 else None


@functools.lru_cache(maxsize=16)
def _runs(root: Path) -> Path:
    return root / "runs"


def read_file(local: Path) -> bytes | None:
    """A file that may be a run's (then read as get does, from here or the object store); None when absent."""
    where = of(local)
    if where is not None:
        return get(*where)
    try:
        return local.read_bytes()
    except FileNotFoundError:
        return None


def write_file(local: Path, data: bytes) -> None:
    """A file that may be a run's (then put as put does, in the object store too); written locally otherwise."""
    where = of(local)
    if where is not None:
        put(*where, data)
    else:
        write_local(local, data)


_TMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
_tmp_names = itertools.count()


def write_local(local: Path, data: bytes) -> None:
    """Write-then-rename, so a crash never leaves a half file under a valid name (a reader takes it for whole).

    The temporary file is named by this process and a counter, and the folder made only when it is missing: a
    random name (mkstemp) and a mkdir on every write were a third of what an exactly-once record cost a lane step
    (bench/bench_swarm.py, parallel)."""
    while True:
        tmp = local.parent / f".{os.getpid()}-{next(_tmp_names)}.tmp"
        try:
            fd = os.open(tmp, _TMP_FLAGS, 0o600)
        except FileNotFoundError:
            local.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(tmp, _TMP_FLAGS, 0o600)
        except FileExistsError:  # a killed process of the same pid left it: the next name
            continue
        break
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, local)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def put(run_id: str, relpath: str, data: bytes, *, only_new: bool = False) -> bool:
    """Write a run's file: the object first, then the local copy, so a local copy means the object is there too.

    only_new: write nothing where the file exists already (here, or as an object from any host), and return
    False; a retried effect on another host then adds nothing. Returns True when the file was written.
    """
    local = path(run_id, relpath)
    if only_new and local.exists():
        return False
    where = location()
    if where is not None:
        extra = {"IfNoneMatch": "*"} if only_new else {}
        try:
            _client().put_object(Bucket=where.bucket, Key=where.key(run_id, relpath), Body=data, **extra)
        except Exception as err:
            if only_new and _code(err) in _EXISTS:
                return False
            raise _named(err, where, run_id, relpath) from err
    write_local(local, data)
    return True


def get(run_id: str, relpath: str, *, fresh: bool = False) -> bytes | None:
    """A run's file from the local folder, else from the object store (kept locally then); None if neither has it.

    Most files are written once (a blob, a record, a ledger line), so a local copy is as good as the object.
    fresh: the file is rewritten (review/latest.md each round), possibly by another host: the object store's
    copy comes first, then the local one, and nothing is kept.
    """
    local = path(run_id, relpath)
    where = location()
    if not (fresh and where is not None):
        try:
            return local.read_bytes()
        except FileNotFoundError:
            pass
    if where is None:
        return None
    try:
        body = _client().get_object(Bucket=where.bucket, Key=where.key(run_id, relpath))["Body"]
        data: bytes = body.read()
    except Exception as err:
        if _code(err) not in _MISSING:
            raise _named(err, where, run_id, relpath) from err
        if not fresh:
            return None
        try:
            return local.read_bytes()  # written before this host had the object store
        except FileNotFoundError:
            return None
    if not fresh:
        write_local(local, data)
    return data


def list(run_id: str, prefix: str = "") -> builtins.list[str]:
    """The relpaths of a run's files under `prefix` ("ledger/", or "" for all), local and in the object store."""
    folder = prefix.rstrip("/")
    root = run_dir(run_id)
    found: set[str] = set()
    base = root / check_relpath(folder) if folder else root
    if base.is_dir():
        found.update(p.relative_to(root).as_posix() for p in base.rglob("*")
                     if p.is_file() and not (p.name.startswith(".") and p.name.endswith(".tmp")))
    elif base.is_file():
        found.add(folder)
    where = location()
    if where is not None:
        start = where.key(run_id) + "/"
        try:
            for page in _client().get_paginator("list_objects_v2").paginate(Bucket=where.bucket,
                                                                            Prefix=start + prefix):
                found.update(item["Key"][len(start):] for item in page.get("Contents", []))
        except Exception as err:
            raise _named(err, where, run_id, prefix) from err
    return sorted(r for r in found if r == folder or not folder or r.startswith(folder + "/"))


def describe(run_id: str, relpath: str) -> str:
    """Where a run's file is looked for, in words for an error message."""
    where = location()
    local = path(run_id, relpath)
    return f"{local} or s3://{where.bucket}/{where.key(run_id, relpath)}" if where is not None else str(local)


_lock = threading.Lock()
_clients: dict[tuple[str | None, ...], Any] = {}


def _client() -> Any:
    """This process's S3 client (boto3's clients are thread-safe; making one is not, hence the lock), one per
    environment, so a change of endpoint or credentials (a test) gets its own."""
    env = client_env()
    with _lock:
        if env not in _clients:
            import boto3
            from botocore.config import Config

            # the worker runs up to REPOSWARM_WORKER_CONCURRENCY (128) activities at once, each may store files
            _clients[env] = boto3.session.Session().client(
                "s3", config=Config(max_pool_connections=128, retries={"mode": "standard"}))
        return _clients[env]


def client_env() -> tuple[str | None, ...]:
    """The environment an S3 client is made from: a client made from another is another client."""
    return tuple(os.environ.get(name) for name in _CLIENT_ENV)


def _code(err: Exception) -> str:
    response = getattr(err, "response", None)
    return str(response.get("Error", {}).get("Code", "")) if isinstance(response, dict) else ""


def _named(err: Exception, where: Location, run_id: str, relpath: str) -> OSError:
    """An object store failure as an OSError naming the object and the variable that chose the store."""
    return OSError(f"object store {where} ({VARIABLE}), {where.key(run_id, relpath)}: {type(err).__name__}: {err}")
