"""Running the repository's own checks: argv lists, no shell, a scrubbed
environment, a timeout, and a kill of the whole process group.

Used by validation (on the merged tree), by the lanes' run_checks tool, and by
the MCP server. Inside an activity, a long check heartbeats.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

from temporalio import activity

from reposwarm import ledger
from reposwarm.contracts import CheckProfile, CommandResult, TestReport
from reposwarm.store import Store

# Variables a check may see. Model and forge credentials are never among them.
PASS_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ", "TERM", "USER", "VIRTUAL_ENV")
TAIL_CHARS = 4000


def scrubbed_env() -> dict[str, str]:
    extra = [v for v in os.environ.get("REPOSWARM_CHECK_ENV_PASS", "").split(",") if v]
    env = {k: os.environ[k] for k in (*PASS_ENV, *extra) if k in os.environ}
    env["CI"] = "true"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


async def run_command(argv: list[str], cwd: Path, timeout_s: float, store: Store | None) -> CommandResult:
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=cwd, env=scrubbed_env(), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        )
    except FileNotFoundError:
        return CommandResult(argv=argv, exit_code=127, duration_s=0.0, output_tail=f"command not found: {argv[0]}")
    chunks: list[bytes] = []

    async def pump() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            chunks.append(chunk)

    reader = asyncio.ensure_future(pump())
    timed_out = False
    try:
        while True:
            try:
                await asyncio.wait_for(asyncio.shield(proc.wait()), timeout=5)
                break
            except TimeoutError:
                if activity.in_activity():
                    activity.heartbeat(f"running {argv[0]} for {time.monotonic() - started:.0f}s")
                if time.monotonic() - started > timeout_s:
                    timed_out = True
                    _kill_group(proc)
                    await proc.wait()
                    break
    except asyncio.CancelledError:
        _kill_group(proc)
        raise
    finally:
        # Children of the check may hold the pipe open; the group kill ends them too.
        _kill_group(proc)
        try:
            await asyncio.wait_for(reader, timeout=5)
        except TimeoutError:
            reader.cancel()
    log = b"".join(chunks).decode("utf-8", errors="replace")
    log = ledger.redact(log)
    if timed_out:
        log += f"\n[reposwarm: killed after {timeout_s:.0f}s timeout]"
    return CommandResult(
        argv=argv,
        exit_code=None if timed_out else proc.returncode,
        timed_out=timed_out,
        duration_s=round(time.monotonic() - started, 3),
        output_tail=log[-TAIL_CHARS:],
        log_ref=store.put(log) if store is not None else None,
    )


async def run_profile(profile: CheckProfile, cwd: Path, store: Store | None) -> TestReport:
    started = time.monotonic()
    results = []
    for argv in profile.commands:
        remaining = max(1.0, profile.timeout_s - (time.monotonic() - started))
        results.append(await run_command(argv, cwd, remaining, store))
    failures = [
        f"{' '.join(r.argv)}: " + ("timed out" if r.timed_out else f"exit {r.exit_code}")
        for r in results if r.timed_out or r.exit_code != 0
    ]
    return TestReport(passed=not failures, failures=failures, duration_s=round(time.monotonic() - started, 3),
                      commands=results)
