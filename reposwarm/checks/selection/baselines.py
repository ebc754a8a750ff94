"""The base commit's check results, computed once: kept per (commit, command, environment) where every run and
every worker host finds them, so a later round, a repair, another run on the same base and another host reuse
them instead of running the base's suite again.

    env = environment(profile)                 what besides the commit changes a command's results, as a digest
    k = key(commit, argv, env)
    cached = load(k)                           a Cached (the command's result, its per-test cases, its failures
                                               and flaky tests), or None: never kept, or unreadable (a miss)
    keep(k, Cached(result, cases, failures, flaky))   only a command that finished (not timed out, not killed)
    last_durations(argv, env)                  seconds per test file from the latest kept run of this command in
                                               this environment, on any commit: what shards are balanced by

Entries live in the object store's shared namespace (reposwarm/runs/objects.py SHARED: home/shared, and
<prefix>/shared of the object store when one is configured), gzip-compressed JSON, under
baselines/<slot>/<digest>.json.gz, where the slot names the command and environment (its durations record beside
the entries). A result's cases_ref and log_ref point into the store of the run that ran it: a run that uses a
cached result takes its cases from `Cached.cases` (`adopt` puts them in its own store).

Only the base commit's results belong here (the user's code, run in the sandbox): a lane's or a merged tree's
never do, for a check's commands cannot reach REPOSWARM_HOME (the sandbox hides it) and only the caller keeps.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reposwarm.checks import sandbox
from reposwarm.checks.runners import Case
from reposwarm.checks.runners.prefixes import programs
from reposwarm.checks.sandbox.environment import private_home
from reposwarm.checks.selection import shards
from reposwarm.contracts import CheckProfile, CommandResult, TestFailure
from reposwarm.runs import objects
from reposwarm.runs.store import Store

log = logging.getLogger(__name__)

FORMAT = 4  # of the entries and of what the digests cover: a new one makes every older entry a miss
# (2: Python checks import the tree, its import roots first on PYTHONPATH: results kept before ran installed copies;
# 3: JavaScript checks: jest's in-process tests see the profile's command line, vitest writes no results cache:
# results kept before failed where the user's own run passes; 4: two tests of one name numbered in the order of
# their files, not as the runner reported them)
FOLDER = "baselines"
_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")
_KEY = re.compile(r"^([0-9a-f]{24})-([0-9a-f]{40})$")
# Variables of a check's environment that name this host's folders, not what the check does: left out of the
# digest, so hosts set up alike share their entries.
_HOST_ONLY = frozenset({"PATH", "HOME", "TMPDIR", "USER", "TERM"})  # (TERM: colours, not results)
# Toolchains a check runs whether its command names them or not (npm test runs node; a setup runs pip), asked their
# version (a few ms each, once per worker and installed binary).
_VERSIONED = {"python": ["--version"], "node": ["--version"], "nodejs": ["--version"], "go": ["version"],
              "cargo": ["--version"], "rustc": ["--version"], "deno": ["--version"], "bun": ["--version"],
              "ruby": ["--version"], "java": ["-version"]}
_ALWAYS = ("python3", "node", "go", "cargo", "rustc")
HASH_MAX_BYTES = 64 * 1024 * 1024  # a tool bigger than this is known by its size (and version, where it has one)


# --- the environment ----------------------------------------------------------------------------------------------

def environment(profile: CheckProfile) -> str:
    """A digest of what changes a command's results besides the commit it runs on:

    - the profile's `env`, and the rest of the environment the check sees (LANG, TZ, the variables
      REPOSWARM_CHECK_ENV_PASS passes, CI...; not PATH, HOME, TMPDIR or USER, which only say where this host keeps
      things: the toolchains they lead to count instead; nor TERM, which colours output, no result);
    - `network`, the limits (timeout_s, memory_mb, max_processes, max_file_mb, max_output_mb, tmp_mb, max_tree_mb);
    - the setup step (setup, cache_key, setup_network, setup_timeout_s, deps_from_checkout), `read_only_paths`,
      `caches`;
    - the sandbox on or off (REPOSWARM_SANDBOX), the platform (OS and machine);
    - the toolchains the checks see on their PATH: each command's and setup command's own tool (argv[0] on the
      check's PATH, or named by absolute path; one inside the tree is the commit's), and python3, node, go, cargo
      and rustc wherever present. A known toolchain by its `--version` (a Python in a virtual environment adds
      the packages installed there, by their dist-info names), any other tool by its contents' digest.

    Not covered: the contents of deps_from_checkout and read_only_paths folders (the user's own files), and what
    other tools a command's scripts call. The commands a profile runs before this one (a build step) are the
    caller's to put in the key, where one depends on them."""
    view = _check_env(profile)
    wanted: dict[str, Any] = {
        "format": FORMAT,
        "env": sorted(view.items()),
        "network": profile.network,
        "limits": [profile.timeout_s, profile.memory_mb, profile.max_processes, profile.max_file_mb,
                   profile.max_output_mb, profile.tmp_mb, profile.max_tree_mb],
        "setup": [profile.setup, profile.cache_key, profile.setup_network, profile.setup_timeout_s,
                  profile.deps_from_checkout],
        "read_only_paths": profile.read_only_paths,
        "caches": profile.caches,
        "sandbox": sandbox.enabled(),
        "platform": [sys.platform, platform.machine()],
        "tools": tools(profile, view.get("PATH", "")),
    }
    return _digest(wanted)


def _check_env(profile: CheckProfile) -> dict[str, str]:
    """The check's environment (reposwarm/checks/sandbox/environment.py), without what only names this host's
    folders; PATH kept apart, to find the toolchains with."""
    env = sandbox.sandbox_env(profile, private_home()) if sandbox.enabled() else sandbox.unsandboxed_env(profile)
    path = env.get("PATH", os.environ.get("PATH", ""))
    return {k: v for k, v in env.items() if k not in _HOST_ONLY} | {"PATH": path}


def tools(profile: CheckProfile, path: str) -> dict[str, str]:
    """Each toolchain the commands see, by name: what it is (its version, or its contents' digest)."""
    # (argv[0], and the programs its prefixes run: `env PYTHONPATH=src /venv/bin/python -m pytest` is that venv's)
    named = [p for argv in [*profile.commands, *profile.setup] if argv for p in programs(argv)]
    found: dict[str, str] = {}
    for name in dict.fromkeys([*named, *_ALWAYS]):
        if "/" in name and not name.startswith("/"):
            continue  # (in the tree: the commit says what it is)
        where = name if name.startswith("/") else shutil.which(name, path=path)
        if where is None or not os.path.isfile(where):
            if name in named:
                found[name] = "missing"
            continue
        found[name] = identity(where)
    return dict(sorted(found.items()))


def identity(tool: str) -> str:
    """What a tool is: a toolchain's `--version` (with a virtual environment's packages, for its Python), another
    tool's contents' digest. Worked out once per worker and installed binary (its path, size and mtime)."""
    real = os.path.realpath(tool)
    try:
        st = os.stat(real)
    except OSError:
        return "missing"
    kind = _kind(Path(tool).name) or _kind(Path(real).name)
    # (a multi-call binary answers as what it is called: rustup's proxy named cargo says cargo's version, of the
    # toolchain rustup's settings choose, which may change with no binary changing, as a version manager's shim's
    # may (pyenv global): those are asked again each minute)
    chooses = Path(real).name.startswith("rustup") or "shims" in Path(tool).parts
    said = _probe(tool, real, st.st_size, st.st_mtime_ns, kind, int(time.monotonic() // 60) if chooses else 0)
    packages = _venv_packages(Path(tool))
    return f"{said}; {_digest(packages)}" if packages else said


def _kind(name: str) -> str | None:
    if re.fullmatch(r"python[0-9.]*", name):
        return "python"
    return name if name in _VERSIONED else None


_probe_lock = threading.Lock()


@functools.lru_cache(maxsize=256)
def _probe(tool: str, real: str, size: int, mtime_ns: int, kind: str | None, minute: int) -> str:
    with _probe_lock:  # (one probe at a time: the first check of many at once asks, the others wait for it)
        if kind is not None:
            try:
                done = subprocess.run([tool, *_VERSIONED[kind]], capture_output=True, text=True, timeout=30,
                                      stdin=subprocess.DEVNULL, cwd="/")
                said = (done.stdout.strip() or done.stderr.strip()).splitlines()
                if done.returncode == 0 and said:
                    return f"{kind}: {said[0][:200]}"
            except (OSError, subprocess.TimeoutExpired) as err:
                log.debug("%s %s failed: %s", tool, _VERSIONED[kind], err)
        if size > HASH_MAX_BYTES:
            return f"{Path(real).name}: {size} bytes"
        digest = hashlib.sha256()
        try:
            with open(real, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    digest.update(block)
        except OSError:
            return f"{Path(real).name}: unreadable, {size} bytes"
        return f"{Path(real).name}: sha256 {digest.hexdigest()}"


def _venv_packages(tool: Path) -> list[str]:
    """The dist-info names (name-version) in the site-packages of the virtual environment `tool` is the Python of
    (a listing, no Python run); [] for any other tool."""
    root = tool.parent.parent
    if tool.parent.name != "bin" or not _kind(tool.name) or not (root / "pyvenv.cfg").is_file():
        return []
    names: list[str] = []
    for site in sorted(root.glob("lib/python*/site-packages")):
        try:
            names += [e.name for e in os.scandir(site) if e.name.endswith(".dist-info")]
        except OSError:
            continue
    return sorted(names)


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str).encode()).hexdigest()


# --- the entries --------------------------------------------------------------------------------------------------

def key(commit: str, argv: list[str], env: str) -> str:
    """The entry of `argv`'s results on `commit` (a full commit id: a branch moves) in environment `env`."""
    if not _COMMIT.match(commit):
        raise ValueError(f"a baseline is kept per commit id (40 or 64 hex digits), not {commit!r}")
    return f"{_slot(argv, env)}-{_digest([FORMAT, commit, argv, env])[:40]}"


def _slot(argv: list[str], env: str) -> str:
    return _digest([FORMAT, "slot", argv, env])[:24]


def _entry(k: str) -> str | None:
    m = _KEY.match(k)
    return f"{FOLDER}/{m.group(1)}/{m.group(2)}.json.gz" if m else None


def _durations_path(slot: str) -> str:
    return f"{FOLDER}/{slot}/durations.json.gz"


@dataclass(frozen=True)
class Cached:
    """One command's results on a base commit: what run_profile's command gave (reposwarm/checks/runner.py)."""

    result: CommandResult
    cases: list[Case] | None  # every test's result (None: its runner gave none)
    failures: list[TestFailure]
    flaky: list[TestFailure]


def _pack(value: Any) -> bytes:
    return gzip.compress(json.dumps(value, sort_keys=True, ensure_ascii=False).encode("utf-8"), mtime=0)


def _unpack(data: bytes) -> Any:
    return json.loads(gzip.decompress(data))


def load(k: str) -> Cached | None:
    """The entry kept under `k`; None when there is none, or it cannot be read whole (a miss, never an error:
    the caller runs the command instead)."""
    relpath = _entry(k)
    if relpath is None:
        return None
    try:
        data = objects.get(objects.SHARED, relpath)
        if data is None:
            return None
        value = _unpack(data)
        if not isinstance(value, dict) or value.get("format") != FORMAT or value.get("key") != k:
            return None
        cases = value["cases"]
        return Cached(result=CommandResult.model_validate(value["result"]),
                      cases=None if cases is None else [Case(**c) for c in cases],
                      failures=[TestFailure.model_validate(f) for f in value["failures"]],
                      flaky=[TestFailure.model_validate(f) for f in value["flaky"]])
    except Exception as err:  # (whatever a damaged entry or an unreachable store raises: the command runs again)
        log.warning("baseline entry %s unreadable (%s: %s): running its command instead", k, type(err).__name__, err)
        return None


def keep(k: str, cached: Cached) -> None:
    """Keep a command's results under `k`, and its per-file durations as its command's latest; only a command that
    finished (a timed-out or killed one tells nothing its next run would)."""
    relpath = _entry(k)
    if relpath is None:
        raise ValueError(f"{k!r} is not a baseline key (baselines.key makes them)")
    if cached.result.exit_code is None or cached.result.timed_out:
        return
    objects.put(objects.SHARED, relpath, _pack({
        "format": FORMAT, "key": k, "result": cached.result.model_dump(mode="json"),
        "cases": None if cached.cases is None else [dataclasses.asdict(c) for c in cached.cases],
        "failures": [f.model_dump(mode="json") for f in cached.failures],
        "flaky": [f.model_dump(mode="json") for f in cached.flaky]}))
    times = shards.durations(cached.cases or [])
    if times:
        objects.put(objects.SHARED, _durations_path(k.split("-")[0]),
                    _pack({"format": FORMAT, "key": k, "kept_at": time.time(), "durations": times}))


def last_durations(argv: list[str], env: str) -> dict[str, float]:
    """Seconds per test file (tests without one: per test name) from the latest kept run of `argv` in `env`, on
    any commit; {} when none was kept or it is unreadable."""
    try:
        # (rewritten by every keep, on any host: the object store's copy first)
        data = objects.get(objects.SHARED, _durations_path(_slot(argv, env)), fresh=True)
        value = _unpack(data) if data is not None else None
        times = value.get("durations") if isinstance(value, dict) and value.get("format") == FORMAT else None
        return {str(n): float(s) for n, s in times.items()} if isinstance(times, dict) else {}
    except Exception as err:  # (as load: a damaged record balances nothing, and breaks nothing)
        log.warning("durations of `%s` unreadable (%s: %s)", " ".join(argv), type(err).__name__, err)
        return {}


def adopt(cached: Cached, store: Store | None) -> CommandResult:
    """A cached result as a result of the run `store` is: its cases put in that store (cases_ref), its full log
    kept only where that store holds it (else log_ref None: the output tail is what it has)."""
    if store is None:
        return cached.result.model_copy(update={"cases_ref": None, "log_ref": None})
    log_ref = cached.result.log_ref
    if log_ref is not None:
        try:
            store.get(log_ref)
        except (OSError, ValueError):
            log_ref = None
    cases_ref = store.put_json([dataclasses.asdict(c) for c in cached.cases]) if cached.cases is not None else None
    return cached.result.model_copy(update={"cases_ref": cases_ref, "log_ref": log_ref})
