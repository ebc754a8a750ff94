"""The run's JSONL ledger: one line per event, written idempotently, secrets redacted.

Each line carries a key made of the workflow id, the activity id and the event;
a retried activity writes the same keys, and a key already in the ledger is
not written again. With a shared object store (reposwarm.runs.objects), each
line is also the run's file ledger/<hash of its key>.json, written only if new,
so hosts that share no disk add to one ledger, and a retry on any host adds nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any

import structlog

from reposwarm.runs import objects
from reposwarm.runs.objects import run_dir

_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.I)
# Known key shapes: OpenAI and Anthropic keys, GitHub tokens (classic and fine-grained), GitLab tokens, Slack
# tokens, AWS access key ids.
_SECRET_SHAPES = re.compile(
    r"\b(sk-[A-Za-z0-9_-]{16,}|sk-ant-[A-Za-z0-9_-]{16,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|gl(?:pat|dt|rt|ptt|cbt|oas|soat|ft|imt|agent)-[A-Za-z0-9_-]{16,}|xox[abp]-[A-Za-z0-9-]{10,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16})")
# What a URL may carry besides its address: who and a password (scheme://user[:pass]@host), a token in its query
# string (?private_token=..., &access_token=...).
_URL_USERINFO = re.compile(r"(\b[A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s]+@")
_URL_QUERY_SECRET = re.compile(
    r"([?&](?:[\w.-]*(?:token|key|secret|password|passwd|auth|signature|sig|credential)[\w.-]*)=)[^&#\s]+", re.I)
_lock = threading.Lock()
_seen: dict[Path, set[str]] = {}
_render = structlog.processors.JSONRenderer(sort_keys=True)


# Variables whose values are not secret: they may stay in what the swarm writes. Every other value in the
# worker's environment (8 characters or more) is redacted by value wherever it appears, whatever its name
# (DB_CONN=postgres://app:pw@db is as secret as OPENAI_API_KEY). A name that looks secret is never passed.
PASS_NAMES = frozenset({
    "PATH", "HOME", "PWD", "OLDPWD", "SHELL", "USER", "LOGNAME", "HOSTNAME", "LANG", "LANGUAGE", "TZ", "TERM",
    "TMPDIR", "SHLVL", "_", "VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "NODE_ENV", "EDITOR",
    "PAGER", "MAIL", "LS_COLORS", "COLORTERM", "TERM_PROGRAM", "DISPLAY", "XDG_RUNTIME_DIR", "XDG_CONFIG_HOME",
    "XDG_CACHE_HOME", "XDG_DATA_HOME", "TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE", "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_TRACES_EXPORTER", "OTEL_SERVICE_NAME", "GITHUB_API_URL", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
    "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER", "CI", "MAX_PARALLEL_HELPERS", "MAX_HELPER_LOOPS",
    "MAX_CONSECUTIVE_TEST_FAILS", "SWARM_BRANCH", "BASE_BRANCH", "TEST_PROFILE", "VALIDATION_TIMEOUT_S",
    "AWS_ENDPOINT_URL", "AWS_DEFAULT_REGION", "AWS_REGION",  # where the object store is, not who may use it
})
# The locale's own names, one by one: a prefix would let LC_FOO=<a secret> through unredacted.
PASS_NAMES |= frozenset({"LC_ALL", "LC_CTYPE", "LC_COLLATE", "LC_MESSAGES", "LC_NUMERIC", "LC_TIME", "LC_MONETARY",
                         "LC_PAPER", "LC_NAME", "LC_ADDRESS", "LC_TELEPHONE", "LC_MEASUREMENT", "LC_IDENTIFICATION"})
PASS_PREFIXES = ("REPOSWARM_", "GIT_CONFIG_")
MIN_SECRET_CHARS = 8


@functools.lru_cache(maxsize=512)
def _is_path(value: str) -> bool:
    return value.startswith("/") and os.path.exists(value)


def secret_values() -> list[tuple[str, str]]:
    """(name, value) of every environment value to redact, longest first (a value inside another goes too)."""
    raw = getattr(os.environ, "_data", None)  # CPython's own bytes, undecoded: the cache's key, for every line
    if isinstance(raw, dict):
        return _secret_raw(tuple(raw.items()))
    return _secret_values(tuple(os.environ.items()))


@functools.lru_cache(maxsize=8)
def _secret_raw(raw: tuple[tuple[Any, Any], ...]) -> list[tuple[str, str]]:
    """secret_values, keyed by the environment as the interpreter keeps it: decoding all of os.environ for every
    ledger line and tool output cost more than the rest of the redaction."""
    decode = os.fsdecode if raw and isinstance(raw[0][0], bytes) else str
    return _secret_values(tuple((decode(k), decode(v)) for k, v in raw))


@functools.lru_cache(maxsize=8)  # worked out once per environment, not for every ledger line and tool output
def _secret_values(environ: tuple[tuple[str, str], ...]) -> list[tuple[str, str]]:
    env = dict(environ)
    extra = {v.strip() for v in env.get("REPOSWARM_CHECK_ENV_PASS", "").split(",") if v.strip()}
    found = []
    for name, value in environ:
        if len(value) < MIN_SECRET_CHARS:
            continue
        passed = name in PASS_NAMES or name in extra or name.startswith(PASS_PREFIXES)
        if passed and not _SECRET_ENV.search(name):
            continue
        if not _SECRET_ENV.search(name) and _is_path(value):
            continue  # PYENV_ROOT=/root/.pyenv: a place on disk is no credential, and logs need their paths
        found.append((name, value))
    return sorted(found, key=lambda nv: -len(nv[1]))


def redact(text: str) -> str:
    """Remove the worker's secret values (by value, whatever their names) and values shaped like keys."""
    for name, value in secret_values():
        if value in text:
            text = text.replace(value, f"[redacted:{name}]")
    text = _URL_USERINFO.sub(r"\1[redacted]@", text)
    text = _URL_QUERY_SECRET.sub(r"\1[redacted]", text)
    return _SECRET_SHAPES.sub("[redacted]", text)


def ledger_path(run_id: str) -> Path:
    return run_dir(run_id) / "ledger.jsonl"


def _keys(path: Path) -> set[str]:
    if path not in _seen:
        keys: set[str] = set()
        if path.exists():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    keys.add(json.loads(line)["key"])
                except (ValueError, KeyError):
                    continue
        _seen[path] = keys
    return _seen[path]


def record(run_id: str, event: str, *, key: str, **fields: Any) -> None:
    path = ledger_path(run_id)
    entry = {"ts": round(time.time(), 3), "run": run_id, "event": event, "key": key, **fields}
    line = redact(str(_render(None, event, entry)))
    if objects.configured():
        with _lock:
            if key in _keys(path):
                return
        # outside the lock: a network call must not hold up every other activity's ledger lines
        if not objects.put(run_id, _line_name(key), line.encode("utf-8"), only_new=True):
            with _lock:
                _keys(path).add(key)  # another attempt (here or on another host) wrote it: the ledger has it
            return
    with _lock:
        keys = _keys(path)
        if key in keys:
            return
        _append(path, (line + "\n").encode("utf-8"))
        keys.add(key)


def _append(path: Path, data: bytes) -> None:
    """One line added to the ledger file, in one write (O_APPEND), the folder made the first time."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def _line_name(key: str) -> str:
    return f"ledger/{hashlib.sha256(key.encode('utf-8', 'surrogatepass')).hexdigest()[:40]}.json"


def record_activity(run_id: str, event: str, **fields: Any) -> None:
    """Record an event of the running activity, keyed so that a retry of it writes nothing new."""
    record_part(run_id, event, "", **fields)


def record_part(run_id: str, event: str, part: str, **fields: Any) -> None:
    """record_activity, for one of several like events of the running activity, each a line: `part` names it (the
    tool calls a model turn answers itself: each call's id). With part "", record_activity's very line."""
    from temporalio import activity

    info = activity.info()
    # A retry of the same activity writes the same key, except where each attempt is its own event (a model
    # call: every attempt reached the provider, so every attempt is a line; and one activity may make several
    # calls, each its own line: the planner's correction after an invalid plan is a second call).
    attempt = f"/{fields.get('call_id') or ''}/{info.attempt}" if event == "model_call" else ""
    key = f"{info.workflow_id}/{info.workflow_run_id}/{info.activity_id}/{event}{attempt}" + (f"/{part}" if part else "")
    record(run_id, event, key=key, workflow_id=info.workflow_id, activity_id=info.activity_id,
           attempt=info.attempt, **fields)


def read(run_id: str) -> list[dict[str, Any]]:
    """The run's ledger lines: this host's, and with a shared object store every host's (one per key, by time)."""
    path = ledger_path(run_id)
    local = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()] \
        if path.exists() else []
    if not objects.configured():
        return local
    by_key: dict[str, dict[str, Any]] = {}
    for name in objects.list(run_id, "ledger/"):
        data = objects.get(run_id, name)
        if data:
            line = json.loads(data)
            by_key.setdefault(line["key"], line)
    for line in local:
        by_key.setdefault(line.get("key", ""), line)
    return sorted(by_key.values(), key=lambda line: line.get("ts", 0))
