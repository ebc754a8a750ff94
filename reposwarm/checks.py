"""Running the repository's own checks: argv lists, no shell, each command in the sandbox
(reposwarm/sandbox.py) with the profile's limits, writing only the tree it checks.

Used by validation (on the merged tree) and the baseline, by the lanes' run_checks tool, and by the MCP
server. Inside an activity, a long check heartbeats.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path
from xml.etree import ElementTree

from reposwarm import gitcmd, ledger, sandbox
from reposwarm.contracts import CheckProfile, CommandResult, TestFailure, TestReport
from reposwarm.store import Store

TAIL_CHARS = 4000


def common_git_dir(tree: Path) -> Path | None:
    """The repository's git directory shared by all its worktrees (None: `tree` is not in a git repository)."""
    done = gitcmd.run(["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=tree, capture_output=True,
                      text=True)
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 and done.stdout.strip() else None


async def run_command(argv: list[str], tree: sandbox.Tree, profile: CheckProfile, timeout_s: float,
                      store: Store | None) -> CommandResult:
    started = time.monotonic()
    ran = await sandbox.run(argv, tree, profile, timeout_s)
    log = ledger.redact(ran.output.decode("utf-8", errors="replace"))
    # The full log opens with how the command ran; the tail (what a model or a reviewer reads) is its output.
    how = f"[reposwarm: {'sandboxed' if ran.sandboxed else sandbox.OFF_WARNING}; {'; '.join(ran.limits)}]\n"
    return CommandResult(
        argv=argv,
        exit_code=ran.exit_code,
        timed_out=ran.timed_out,
        duration_s=round(time.monotonic() - started, 3),
        output_tail=log[-TAIL_CHARS:],
        log_ref=store.put(how + log) if store is not None else None,
        sandboxed=ran.sandboxed,
    )


JUNIT = "{junit}"  # in a configured command, the path where its runner should write JUnit XML
JUNIT_MAX_BYTES = 64 * 1024 * 1024


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
            # (a report the check wrote: its messages may quote the environment or a file's secrets)
            message=ledger.redact(((problem.get("message") or "") + "\n" + (problem.text or "")).strip())[:2000],
            command=command))
    return failures


def _guess_file(classname: str, cwd: Path) -> str | None:
    """pytest and unittest name cases by dotted module path: tests.test_x.TestY -> tests/test_x.py."""
    parts = classname.split(".")
    for end in range(len(parts), 0, -1):
        candidate = "/".join(parts[:end]) + ".py"
        if (cwd / candidate).is_file():
            return candidate
    return None


async def _run_once(argv: list[str], tree: sandbox.Tree, profile: CheckProfile, timeout_s: float,
                    store: Store | None) -> tuple[CommandResult, list[TestFailure]]:
    # A folder of its own for its {junit} report: the one place outside the tree this command may write.
    reports = Path(tempfile.mkdtemp(prefix="command-", dir=tree.reports))
    junit = reports / "junit.xml"
    result = await run_command([a.replace(JUNIT, str(junit)) for a in argv], dataclasses.replace(tree, reports=reports),
                               profile, timeout_s, store)
    result = result.model_copy(update={"argv": argv})
    command = " ".join(argv)
    if result.exit_code == 0:
        return result, []
    # (written by the command: a symlink or a FIFO there must not make the worker read a file of its own, or hang)
    readable = junit.is_file() and not junit.is_symlink() and junit.stat().st_size <= JUNIT_MAX_BYTES
    parsed = parse_junit(junit, command, tree.root) if readable else []
    if parsed and result.exit_code is not None:
        return result, parsed
    why = (f"killed after its {timeout_s:.0f}s timeout" if result.timed_out
           else f"ended: its output passed {profile.max_output_mb} MB" if result.exit_code is None
           else f"exit {result.exit_code}")
    return result, [TestFailure(name=command, message=f"{why}\n{result.output_tail[-2000:]}", command=command)]


async def run_profile(profile: CheckProfile, cwd: Path, store: Store | None, *, rerun: bool = True) -> TestReport:
    """Run each command in `cwd`, the one tree they may write; a failing one runs once more, and what passes the
    second time is flaky."""
    started = time.monotonic()
    results: list[CommandResult] = []
    failures: list[TestFailure] = []
    flaky: list[TestFailure] = []
    git_dir = common_git_dir(cwd)
    with tempfile.TemporaryDirectory(prefix="reposwarm-checks-") as scratch:
        tree = sandbox.Tree(root=cwd.resolve(), git_dir=git_dir, reports=Path(scratch))
        for argv in profile.commands:
            remaining = max(1.0, profile.timeout_s - (time.monotonic() - started))
            result, failed = await _run_once(argv, tree, profile, remaining, store)
            results.append(result)
            if failed and rerun and result.exit_code is not None:  # (a command killed at a limit is not rerun)
                remaining = max(1.0, profile.timeout_s - (time.monotonic() - started))
                again, failed_again = await _run_once(argv, tree, profile, remaining, store)
                if again.exit_code is not None:
                    still = {f.key for f in failed_again}
                    flaky += [f for f in failed if f.key not in still]
                    failed = [f for f in failed if f.key in still]
            failures += failed
    return TestReport(passed=not failures, failures=failures, flaky=flaky,
                      duration_s=round(time.monotonic() - started, 3), commands=results,
                      unsandboxed=any(not r.sandboxed for r in results))


def against_baseline(report: TestReport, baseline: TestReport | None) -> TestReport:
    """Failures that the base commit has too are pre-existing: reported, never blamed on the swarm."""
    if baseline is None:
        return report
    known = {f.key for f in baseline.failures + baseline.pre_existing}
    new = [f for f in report.failures if f.key not in known]
    old = [f for f in report.failures if f.key in known]
    return report.model_copy(update={"failures": new, "pre_existing": old, "passed": not new})
