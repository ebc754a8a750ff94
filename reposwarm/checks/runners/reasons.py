"""Why a command failed, first, in words a new user can act on: "command not found: pytset", "timed out after
30 s", "killed by the memory limit (512 MB of address space)", "exited 2".

Limits are told from what the command left: the sandbox's own words for a timeout or the output cap; the
signal it died of (bwrap and the unsandboxed supervisor both exit 128 + N); and what runtimes print when a
limit refuses them (RLIMIT_AS makes allocations fail, RLIMIT_FSIZE makes writes fail with EFBIG since Python,
which launches the sandbox, ignores SIGXFSZ and its children inherit that, RLIMIT_NPROC and the pids cgroup make
fork fail with EAGAIN). A runtime's words count only where the runner gave no failing test of its own, or the
command died of a signal: a test that itself raises MemoryError is a failing test, not a limit.
"""

from __future__ import annotations

import re
import signal

from reposwarm.checks.runners.prefixes import programs
from reposwarm.contracts.config import CheckProfile

NOT_FOUND = "command not found"
NOT_EXECUTABLE = "command not executable"
TIMED_OUT = "timed out"
KILLED = "killed by"
OUTPUT = "output passed"
NO_SANDBOX = "the sandbox could not start"
EXITED = "exited"
NO_RESULTS = "no per-test results"  # after a failed command's exit code, when reposwarm knows why it has none

_MEMORY = re.compile(r"MemoryError|std::bad_alloc|[Oo]ut of memory|memory allocation of \d+ bytes failed|"
                     r"Cannot allocate memory|JavaScript heap out of memory|runtime: out of memory")
_PROCESSES = re.compile(r"Resource temporarily unavailable|fork: retry|can't start new thread|"
                        r"BlockingIOError: \[Errno 11\]|failed to spawn thread|Cannot fork|pthread_create")
_FILE_SIZE = re.compile(r"File too large|\[Errno 27\]")
_TAIL = 4000  # where a runtime's last words are


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def reason(argv: list[str], exit_code: int | None, timed_out: bool, output_cut: bool, output: str,
           timeout_s: float, profile: CheckProfile, failing_tests: int = 0, unread: str = "") -> str:
    """Why the command failed, or "" when it passed (exit 0, no failing test). `unread`: why the command gives
    no per-test results, where reposwarm can tell (commands.Prepared.why)."""
    if timed_out:
        return f"{TIMED_OUT} after {timeout_s:.0f} s"
    if output_cut or exit_code is None:
        return f"{OUTPUT} {profile.max_output_mb} MB"
    if exit_code == 0:
        return f"{EXITED} 0 but {failing_tests} test(s) failed" if failing_tests else ""
    tail = output[-_TAIL:]
    program = argv[0] if argv else ""
    # bwrap: "bwrap: execvp pytset: No such file or directory" (exit 1); unsandboxed, the supervisor's 127
    missing = re.search(r"^bwrap: execvp (.+?): No such file or directory$", tail, re.M)
    if missing or (exit_code == 127 and f"command not found: {program}" in tail):
        return f"{NOT_FOUND}: {missing.group(1) if missing else program}"
    denied = re.search(r"^bwrap: execvp (.+?): Permission denied$", tail, re.M)
    if denied or (exit_code == 1 and re.search(r"PermissionError: \[Errno 13\].*" + re.escape(program), tail)
                  and "_execute_child" in tail):
        return f"{NOT_EXECUTABLE}: {denied.group(1) if denied else program}"
    if (inner := _missing_after_prefix(argv, exit_code, tail)) is not None:
        return inner
    started = re.search(r"^\[reposwarm: the sandbox could not start: (.*)\]$", tail, re.M)
    if exit_code == 126 and started:
        return f"{NO_SANDBOX}: {started.group(1)}"
    died = _signal_name(exit_code - 128) if 128 < exit_code < 160 else ""
    if died == "SIGXFSZ":
        return f"{KILLED} the file size limit ({profile.max_file_mb} MB per file)"
    if not failing_tests or died:
        if _MEMORY.search(tail):
            return f"{KILLED} the memory limit ({profile.memory_mb} MB of address space)"
        if _PROCESSES.search(tail):
            return f"{KILLED} the process limit ({profile.max_processes} processes)"
        if _FILE_SIZE.search(tail):
            return f"{KILLED} the file size limit ({profile.max_file_mb} MB per file)"
    if died in ("SIGKILL", "SIGSEGV", "SIGABRT", "SIGBUS"):
        # what a refused allocation often ends as, with nothing printed: said as a maybe, not as the cause
        return f"{KILLED} {died} (exit {exit_code}; perhaps the memory limit, {profile.memory_mb} MB of address space)"
    if died:
        return f"{KILLED} {died} (exit {exit_code})"
    if failing_tests:
        return f"{EXITED} {exit_code}: {failing_tests} test(s) failed"
    return f"{EXITED} {exit_code}; {NO_RESULTS}: {unread}" if unread else f"{EXITED} {exit_code}"


# How a prefix says the program it runs is not there (`{p}`: the program), and the exit code it says it with (None:
# any failing one): coreutils' (env, timeout, nice...: "env: ‘/x/python’: No such file or directory", 127), a shell's
# (hatch run), uv's, poetry's, pdm's, pipenv's, pnpm's.
_PREFIX_MISSING: tuple[tuple[str, int | None, str], ...] = (
    (r"^[\w.-]+: (?:failed to run command )?['‘\"]?{p}['’\"]?: No such file or directory$", 127, NOT_FOUND),
    (r"^[\w.-]+: (?:failed to run command )?['‘\"]?{p}['’\"]?: Permission denied$", 126, NOT_EXECUTABLE),
    (r"^(?:/bin/|/usr/bin/)?(?:sh|dash|bash)(?:: line)?:? \d+: {p}: (?:not found|command not found)$", 127, NOT_FOUND),
    (r"Failed to spawn: `{p}`", None, NOT_FOUND),
    (r"^Command not found: {p}$", None, NOT_FOUND),
    (r"Command '{p}' is not found", None, NOT_FOUND),
    (r"the command {p} could not be found", None, NOT_FOUND),
    (r"Command \"{p}\" not found", None, NOT_FOUND),
)


def _missing_after_prefix(argv: list[str], exit_code: int, tail: str) -> str | None:
    """A program a prefix runs that is not there, named as itself (`env X=1 /x/python`: /x/python, never env);
    the innermost first."""
    for program in reversed(programs(argv)[1:]):
        for pattern, code, what in _PREFIX_MISSING:
            if code is not None and exit_code != code:
                continue
            if re.search(pattern.replace("{p}", re.escape(program)), tail, re.M | re.I):
                return f"{what}: {program}"
    return None


def missing_program(why: str) -> str | None:
    """The program a reason says was not found or not executable, else None."""
    for what in (NOT_FOUND, NOT_EXECUTABLE):
        if why.startswith(f"{what}: "):
            return why[len(what) + 2:]
    return None


def unread(why: str) -> str:
    """Why a failed command gave no per-test results, from its reason ("" when the reason does not say)."""
    head, found, rest = why.partition(f"; {NO_RESULTS}: ")
    return rest if found and head.startswith(EXITED) else ""


def stops_judging(why: str) -> bool:
    """A reason that says the check itself could not run or finish (a missing command, a timeout, a limit):
    no per-test results are to be had by adding {junit}; the reason is what to fix."""
    return why.startswith((NOT_FOUND, NOT_EXECUTABLE, TIMED_OUT, KILLED, OUTPUT, NO_SANDBOX))
