"""Running the repository's own checks: argv lists, no shell, a scrubbed
environment, a timeout, and a kill of the whole process group.

Used by validation (on the merged tree), by the lanes' run_checks tool, and by
the MCP server. Inside an activity, a long check heartbeats.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import tempfile
import time
import uuid
from pathlib import Path
from xml.etree import ElementTree

from reposwarm import ledger
from reposwarm.contracts import CheckProfile, CommandResult, TestFailure, TestReport
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


# Each check runs under this small supervisor, the leader of the check's own process group: when the worker
# dies (SIGKILL, a lost host), the supervisor sees its parent change and kills the whole group, so no check
# outlives the worker that started it, nor races the retried activity in the same worktree.
SUPERVISOR = """
import os, signal, subprocess, sys, time
parent = os.getppid()
try:
    child = subprocess.Popen(sys.argv[1:])
except FileNotFoundError:
    print("command not found: " + sys.argv[1], flush=True)
    sys.exit(127)
while child.poll() is None:
    if os.getppid() != parent:
        os.killpg(0, signal.SIGKILL)
    time.sleep(0.2)
sys.exit(child.returncode if child.returncode >= 0 else 128 - child.returncode)
"""


async def run_command(argv: list[str], cwd: Path, timeout_s: float, store: Store | None) -> CommandResult:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SUPERVISOR, *argv, cwd=cwd, env=scrubbed_env(), stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, start_new_session=True,
    )
    chunks: list[bytes] = []

    async def pump() -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(65536):
            chunks.append(chunk)

    reader = asyncio.ensure_future(pump())
    timed_out = False
    try:
        # (Inside an activity the worker's heartbeat interceptor keeps it alive meanwhile.)
        await asyncio.wait_for(proc.wait(), timeout=timeout_s)
    except TimeoutError:
        timed_out = True
        _kill_group(proc)
        await proc.wait()
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


JUNIT = "{junit}"  # in a configured command, the path where its runner should write JUnit XML


def parse_junit(path: Path, command: str, cwd: Path) -> list[TestFailure]:
    """Failing test cases of a JUnit XML report (pytest, jest-junit, gotestsum, Maven Surefire...)."""
    try:
        root = ElementTree.parse(path).getroot()
    except (ElementTree.ParseError, OSError):
        return []
    failures = []
    for case in root.iter("testcase"):
        problem = case.find("failure")
        if problem is None:
            problem = case.find("error")
        if problem is None:
            continue
        classname, name = case.get("classname", ""), case.get("name", "?")
        failures.append(TestFailure(
            name=f"{classname}.{name}" if classname else name, file=case.get("file") or _guess_file(classname, cwd),
            message=((problem.get("message") or "") + "\n" + (problem.text or "")).strip()[:2000], command=command))
    return failures


def _guess_file(classname: str, cwd: Path) -> str | None:
    """pytest and unittest name cases by dotted module path: tests.test_x.TestY -> tests/test_x.py."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (cwd / candidate).is_file():
            return candidate
    return None


async def _run_once(argv: list[str], cwd: Path, timeout_s: float, store: Store | None,
                    scratch: Path) -> tuple[CommandResult, list[TestFailure]]:
    junit = scratch / f"junit-{uuid.uuid4().hex}.xml"
    result = await run_command([a.replace(JUNIT, str(junit)) for a in argv], cwd, timeout_s, store)
    result = result.model_copy(update={"argv": argv})
    command = " ".join(argv)
    if result.exit_code == 0 and not result.timed_out:
        return result, []
    parsed = parse_junit(junit, command, cwd) if junit.exists() else []
    if parsed and not result.timed_out:
        return result, parsed
    why = f"killed after its {timeout_s:.0f}s timeout" if result.timed_out else f"exit {result.exit_code}"
    return result, [TestFailure(name=command, message=f"{why}\n{result.output_tail[-2000:]}", command=command)]


async def run_profile(profile: CheckProfile, cwd: Path, store: Store | None, *, rerun: bool = True) -> TestReport:
    """Run each command; a failing one runs once more, and what passes the second time is flaky."""
    started = time.monotonic()
    results: list[CommandResult] = []
    failures: list[TestFailure] = []
    flaky: list[TestFailure] = []
    with tempfile.TemporaryDirectory(prefix="reposwarm-checks-") as scratch:
        for argv in profile.commands:
            remaining = max(1.0, profile.timeout_s - (time.monotonic() - started))
            result, failed = await _run_once(argv, cwd, remaining, store, Path(scratch))
            results.append(result)
            if failed and rerun and not result.timed_out:
                remaining = max(1.0, profile.timeout_s - (time.monotonic() - started))
                again, failed_again = await _run_once(argv, cwd, remaining, store, Path(scratch))
                if not again.timed_out:
                    still = {f.key for f in failed_again}
                    flaky += [f for f in failed if f.key not in still]
                    failed = [f for f in failed if f.key in still]
            failures += failed
    return TestReport(passed=not failures, failures=failures, flaky=flaky,
                      duration_s=round(time.monotonic() - started, 3), commands=results)


def against_baseline(report: TestReport, baseline: TestReport | None) -> TestReport:
    """Failures that the base commit has too are pre-existing: reported, never blamed on the swarm."""
    if baseline is None:
        return report
    known = {f.key for f in baseline.failures + baseline.pre_existing}
    new = [f for f in report.failures if f.key not in known]
    old = [f for f in report.failures if f.key in known]
    return report.model_copy(update={"failures": new, "pre_existing": old, "passed": not new})
