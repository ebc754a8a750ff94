"""Running the repository's own checks: argv lists, no shell, each command in the sandbox
(reposwarm/checks/sandbox/) with the profile's limits, writing only the tree it checks.

Used by validation (on the merged tree) and the baseline, by the lanes' run_checks tool, and by the MCP
server. Inside an activity, a long check heartbeats.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import re
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from reposwarm.checks import evidence, runners, sandbox, setup
from reposwarm.checks.runners import select
from reposwarm.checks.sandbox import caches, environment, python
from reposwarm.checks.selection import baselines
from reposwarm.contracts import CheckProfile, CommandResult, TestFailure, TestReport
from reposwarm.contracts.validation import CheckTimes
from reposwarm.runs import ledger, objects
from reposwarm.runs.store import Store
from reposwarm.vcs import gitcmd

TAIL_CHARS = 4000


@dataclasses.dataclass
class Clock:
    """Where a check's time goes (CheckTimes), added up as it runs: what it costs beyond its commands."""

    sandbox: float = 0.0  # the tree's caches, import roots and evidence set up, and put away after
    setup: float = 0.0  # the profile's setup step
    commands: float = 0.0  # the commands' processes, from start to exit
    results: float = 0.0  # reading what they wrote (reports, evidence), and reading kept results back

    def times(self, total_s: float) -> CheckTimes:
        return CheckTimes(sandbox_s=round(self.sandbox, 3), setup_s=round(self.setup, 3),
                          commands_s=round(self.commands, 3), results_s=round(self.results, 3),
                          total_s=round(total_s, 3))


def common_git_dir(tree: Path) -> Path | None:
    """The repository's git directory shared by all its worktrees (None: `tree` is not in a git repository)."""
    done = gitcmd.run(["rev-parse", "--path-format=absolute", "--git-common-dir"], cwd=tree, capture_output=True,
                      text=True)
    return Path(done.stdout.strip()).resolve() if done.returncode == 0 and done.stdout.strip() else None


async def run_command(argv: list[str], tree: sandbox.Tree, profile: CheckProfile, timeout_s: float,
                      store: Store | None) -> tuple[CommandResult, str]:
    """Run one command in the sandbox; its result, and its whole (redacted) output."""
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
        # (the one limit the output cannot tell: the sandbox ended it for what it added to its tree)
        reason=f"killed by the tree size limit: {ran.stopped}" if ran.tree_over else "",
    ), log


REPORT_MAX_BYTES = 64 * 1024 * 1024


def _safe_report(path: Path | None) -> Path | None:
    """A report the command wrote, if the worker may read it: written by the command, a symlink or a FIFO there
    must not make the worker read a file of its own, or hang."""
    if path is None or not path.is_file() or path.is_symlink() or path.stat().st_size > REPORT_MAX_BYTES:
        return None
    return path


def _case_failure(case: runners.Case, command: str) -> TestFailure:
    # (a report the check wrote: its messages may quote the environment or a file's secrets)
    return TestFailure(name=case.name, file=case.file, message=ledger.redact(case.message), command=command)


async def _run_once(argv: list[str], tree: sandbox.Tree, profile: CheckProfile, timeout_s: float,
                    store: Store | None, watching: evidence.Context | None = None, clock: Clock | None = None
                    ) -> tuple[CommandResult, list[TestFailure]]:
    """Run one command with per-test reporting added for its runner; its failures, per test where it can. With
    `watching`, what its processes loaded is taken too (reposwarm/checks/evidence/): `CommandResult.loaded`."""
    began = time.monotonic()
    clock = clock if clock is not None else Clock()
    # A folder of its own for its report: the one place outside the tree this command may write.
    reports = Path(tempfile.mkdtemp(prefix="command-", dir=tree.reports))
    prepared = runners.prepare(argv, reports, "report", tree.root)
    if shown := runners.shown_argv_env(prepared, reports, {**profile.env, **dict(tree.env)}):
        tree = dataclasses.replace(tree, env=tuple(sorted((dict(tree.env) | shown).items())))
    taking = await asyncio.to_thread(
        evidence.start, reports, watching, {**profile.env, **dict(tree.env)},
        {b.dest: b.host for b in tree.binds}) if watching is not None else None
    env = tree.env if taking is None else tuple(sorted((dict(tree.env) | taking.env).items()))
    ran_from = time.monotonic()
    result, log = await run_command(prepared.argv, dataclasses.replace(tree, reports=reports, env=env), profile,
                                    timeout_s, store)
    ran_s = time.monotonic() - ran_from
    clock.commands += ran_s
    command = " ".join(argv)
    cases = None
    report = _safe_report(prepared.report)
    if prepared.runner and result.exit_code is not None:  # a command killed at a limit left a partial report
        cases = runners.parse(prepared.runner, log, report, tree.root)
    ran = None if cases is None else len(runners.ran(cases))
    # (what the runner said about each test, whatever its exit code: a conftest that makes pytest exit 0 does
    # not hide the failures in its report)
    failed = [_case_failure(c, command) for c in runners.failing(cases or [])]
    cut = result.exit_code is None and not result.timed_out
    why = result.reason or runners.reason(prepared.argv, result.exit_code, result.timed_out, cut, log, timeout_s,
                                          profile, len(failed), prepared.why)
    result = result.model_copy(update={
        "argv": argv, "runner": prepared.runner, "tests_run": ran, "reason": why,
        "unparsed_results": runners.unparsed(prepared.runner, log, report, cases) if prepared.runner else 0,
        "exit_class": runners.exit_class(prepared.runner, result.exit_code, result.timed_out, cases),
        "cases_ref": store.put_json([dataclasses.asdict(c) for c in cases])
        if store is not None and cases is not None else None,
        "loaded": await asyncio.to_thread(evidence.collect, taking, prepared.runner, log, store)
        if taking is not None else None})
    clock.results += time.monotonic() - began - ran_s
    if failed or not why:
        return result, failed
    # No test of its own to blame: the command is the failure, and its message says why, first.
    return result, [TestFailure(name=command, message=f"{why}\n{result.output_tail[-2000:]}", command=command)]


BASELINE = "baseline.json"  # the run's baseline report (the profile on the base commit), in the run's files


def save_baseline(run_id: str, report: TestReport) -> None:
    """Keep the baseline where every host's lanes read it (the object store, when the hosts share one)."""
    objects.put(run_id, BASELINE, report.model_dump_json().encode("utf-8"))


def load_baseline(run_id: str) -> TestReport | None:
    """The baseline for the lanes' run_checks to compare with; None until it has run (it runs beside the lanes)."""
    try:
        data = objects.get(run_id, BASELINE, fresh=True)  # rewritten when a later round starts from a new green
        return TestReport.model_validate_json(data) if data is not None else None
    except (OSError, ValueError):
        return None


def load_cases(store: Store | None, result: CommandResult) -> list[runners.Case] | None:
    """A command's per-test results, kept in the run's store; None when it gave none (or they are not here)."""
    if store is None or result.cases_ref is None:
        return None
    try:
        return [runners.Case(**c) for c in store.get_json(result.cases_ref)]
    except (OSError, ValueError, TypeError, KeyError):
        return None


_NUMBERED = re.compile(r" #\d+$")  # "adds #2" (runners.distinct): a run of some files may number it otherwise


def _rerun_name(runner: str, failure: TestFailure) -> str:
    """How the command's runner names a failed test to run it alone: pytest's node id (tests/test_x.py::T::test_y,
    checked against the JUnit name it came from), unittest's dotted id; else (and where that cannot be said) its
    file."""
    file = failure.file or ""
    if runner == "pytest" and file.endswith(".py"):
        module = file[:-3].replace("/", ".")
        if failure.name.startswith(module + "."):
            head, bracket, tail = failure.name[len(module) + 1:].partition("[")
            node = f"{file}::{head.replace('.', '::')}{bracket}{tail}"
            if runners.outcome.pytest_junit_name(node) == failure.name:
                return node
    if runner == "unittest" and re.fullmatch(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+", failure.name):
        return failure.name
    return file


async def _failed_again(argv: list[str], runner: str, failed: list[TestFailure], tree: sandbox.Tree,
                        profile: CheckProfile, started: float, store: Store | None,
                        watching: evidence.Context | None, clock: Clock | None) -> list[TestFailure] | None:
    """The failed tests run again by themselves (their node ids, ids or files: `_rerun_name`), named with the
    command's own selector (select.py): the failures of that run, under the command's own line; None when they
    cannot be named so (a failure of the command itself, a numbered name, a name no plain selector, a runner that
    cannot select). A re-run killed at a limit tells nothing: every failure stands."""
    if any(f.file is None or _NUMBERED.search(f.name) for f in failed):
        return None
    names = sorted({_rerun_name(runner, f) for f in failed})
    if any(select.unsafe(name, tree.root) for name in names):
        return None
    planned = select.plan([argv], names, tree.root)
    if planned.skipped or planned.unclaimed or not planned.targets:
        return None
    line = " ".join(argv)
    found: list[TestFailure] = []
    for target in planned.targets:
        remaining = max(1.0, profile.timeout_s - (time.monotonic() - started))
        again, failures = await _run_once(target.argv, tree, profile, remaining, store, watching, clock)
        if again.exit_code is None:
            return list(failed)
        own = " ".join(target.argv)
        found += [f.model_copy(update={"command": line, "name": line if f.name == own and f.file is None else f.name})
                  for f in failures]
    return found


async def _counted(argv: list[str], tree: sandbox.Tree, profile: CheckProfile, started: float, store: Store | None,
                   rerun: bool, watching: evidence.Context | None = None, expected: frozenset[str] = frozenset(),
                   clock: Clock | None = None, rerun_files: bool = False
                   ) -> tuple[CommandResult, list[TestFailure], list[TestFailure]]:
    """One command, run again once if it failed: the result that counts, its failures, and its flaky tests.

    A failure is blamed only if it failed on both runs. When the re-run is green, it is the run that counts
    (its exit code, exit class and cases): a base whose only failures passed on re-run is a green base, not a
    command that "already fails on the base commit". When both runs failed, on different tests, neither is
    green: the re-run counts, with its failures. A run whose every failure is `expected` (TestFailure.key: a
    failure the base commit has too, which no verdict blames) is not run again: the re-run would cost a whole
    run of the command to tell nothing the verdict reads. With `rerun_files`, only the failed tests run again
    where the runner can name them (by id, else by file; the first run's result counts then, its failures split
    into those that failed again and the flaky); else the whole command."""
    remaining = max(1.0, profile.timeout_s - (time.monotonic() - started))
    result, failed = await _run_once(argv, tree, profile, remaining, store, watching, clock)
    if not failed or not rerun or result.exit_code is None:  # (a command killed at a limit is not rerun)
        return result, failed, []
    if all(f.key in expected for f in failed):
        return result, failed, []
    if rerun_files and (again_failed := await _failed_again(argv, result.runner, failed, tree, profile, started,
                                                            store, watching, clock)) is not None:
        still = {f.key for f in again_failed}
        return result, [f for f in failed if f.key in still], [f for f in failed if f.key not in still]
    remaining = max(1.0, profile.timeout_s - (time.monotonic() - started))
    again, failed_again = await _run_once(argv, tree, profile, remaining, store, watching, clock)
    if again.exit_code is None:  # the re-run was killed: it tells nothing about the first run's failures
        return result, failed, []
    if not failed_again:
        return again, [], failed
    still = {f.key for f in failed_again}
    both = [f for f in failed if f.key in still]
    flaky = [f for f in failed if f.key not in still]
    if both:
        return result, both, flaky
    return again, failed_again, flaky


def offline(profile: CheckProfile) -> dict[str, str]:
    """With no network, npm and npx say at once that a package is not installed (ENOTCACHED), where they would
    otherwise retry the registry for a minute or more (`npx vitest` in a tree without node_modules: 70 s)."""
    return {} if profile.network or "npm_config_offline" in profile.env else {"npm_config_offline": "true"}


def repo_key(git_dir: Path | None, cwd: Path) -> str:
    """Who a host's caches belong to: the repository's git directory on this host (its clone, for a remote)."""
    return hashlib.sha256(str(git_dir or cwd.resolve()).encode()).hexdigest()[:16]


@contextlib.asynccontextmanager
async def prepared_tree(profile: CheckProfile, cwd: Path, store: Store | None, *, readable: tuple[str, ...] | None,
                        scope: str, reports: bool, clock: Clock | None = None
                        ) -> AsyncIterator[tuple[sandbox.Tree, setup.Prepared]]:
    """The tree commands of `profile` run in (a check's, a lane's `run`): its language caches, its setup step's
    folders (the setup run first where its cache has no entry: see `failed`), offline once set up; with
    `reports`, a scratch folder the commands may write their reports to. `clock`: the sandbox's time and the
    setup step's, added to it."""
    clock = clock if clock is not None else Clock()
    began = time.monotonic()
    git_dir = common_git_dir(cwd)
    key = repo_key(git_dir, cwd)
    holder = tempfile.TemporaryDirectory(prefix="reposwarm-checks-")
    try:
        scratch = holder.name
        tree = sandbox.Tree(root=cwd.resolve(), git_dir=git_dir, reports=Path(scratch) if reports else None,
                            readable=readable)
        binds, env = await asyncio.to_thread(caches.prepare, profile, key, scope, Path(scratch))
        tree = dataclasses.replace(tree, binds=tuple(binds), env=tuple(sorted(env.items())))
        set_from = time.monotonic()
        deps = await setup.prepare(profile, tree, key, store, scope)  # (with network: npm not offline there)
        set_s = time.monotonic() - set_from
        clock.setup += set_s
        # the tree's own Python packages first on PYTHONPATH, before any copy installed in the interpreter, with the
        # version file its build would write (an ignored _version.py the package imports)
        roots = await asyncio.to_thread(python.pythonpath, tree.root, environment.given_env(profile))
        made, said = await asyncio.to_thread(python.write_version_files, tree.root) if roots else ([], [])
        deps.lines += said
        clock.sandbox += time.monotonic() - began - set_s
        try:
            yield dataclasses.replace(tree, binds=tree.binds + tuple(deps.binds), env=tuple(sorted(
                (offline(profile) | env | ({"PYTHONPATH": roots} if roots else {})).items()))), deps
        finally:
            began = time.monotonic()
            await asyncio.to_thread(python.remove_files, made)
    finally:
        # In a thread: a validation's copy of the host's yarn cache is 30,000 files, and removing them on the event
        # loop stalled the worker past its heartbeat timeout (the server retried the check beside the one still
        # running, and `try` took the unanswered worker for gone).
        await asyncio.to_thread(holder.cleanup)
        clock.sandbox += time.monotonic() - began


async def run_profile(profile: CheckProfile, cwd: Path, store: Store | None, *, rerun: bool = True,
                      readable: tuple[str, ...] | None = None, scope: str = "", cached_at: str = "",
                      watched: evidence.Watched | None = None, expected: frozenset[str] = frozenset(),
                      rerun_files: bool = False) -> TestReport:
    """Run each command in `cwd`, the one tree they may write; a failing one runs once more, and what passes the
    second time is flaky. `readable`: the paths (a lane's) the commands' git view holds; None: the whole commit.
    `scope`: whose language caches the commands use (reposwarm/checks/sandbox/caches.py). `cached_at`: `cwd` is a
    clean checkout of this commit, and a command's results there are kept and reused, by every run on every host
    sharing the object store, for as long as its environment is the same (reposwarm/checks/selection/baselines.py).
    `watched`: the changed files (and lines) the evidence of what the commands loaded is held against
    (reposwarm/checks/evidence/: `TestReport.exercise`); None: none, only the tree's modules loaded from elsewhere
    are said. `expected`: failures (TestFailure.key) the verdict will not blame, the base commit's own: a command
    failing only those is not run again. `rerun_files`: a failing command runs again only its failed tests,
    where its runner can name them (`_counted`). The report's `times` says where its time went."""
    started = time.monotonic()
    clock = Clock()
    done: dict[int, tuple[CommandResult, list[TestFailure], list[TestFailure]]] = {}
    lines: list[str] = []
    watching: evidence.Context | None = None
    async with contextlib.AsyncExitStack() as stack:
        prepared: tuple[sandbox.Tree, setup.Prepared] | None = None
        if profile.setup or not cached_at:  # (first: lanes wait on a baseline's setup only once it has begun)
            prepared = await stack.enter_async_context(
                prepared_tree(profile, cwd, store, readable=readable, scope=scope, reports=True, clock=clock))
        reading = time.monotonic()
        env = await asyncio.to_thread(baselines.environment, profile) if cached_at else ""
        keys = {i: baselines.key(cached_at, argv, env) for i, argv in enumerate(profile.commands)} if cached_at else {}
        for i, k in keys.items():
            if (hit := await asyncio.to_thread(baselines.load, k)) is not None:
                done[i] = (await asyncio.to_thread(baselines.adopt, hit, store), hit.failures, hit.flaky)
                lines.append(f"`{' '.join(profile.commands[i])}`: its results on {cached_at[:12]} reused (same "
                             "commit and environment)")
        clock.results += time.monotonic() - reading
        misses = [i for i in range(len(profile.commands)) if i not in done]
        if misses and prepared is None:
            prepared = await stack.enter_async_context(
                prepared_tree(profile, cwd, store, readable=readable, scope=scope, reports=True, clock=clock))
        if prepared is not None:
            tree, deps = prepared
            if deps.failed is not None:
                took = time.monotonic() - started
                return TestReport(passed=False, commands=[deps.failed], failures=[f for f in [deps.failure] if f],
                                  setup=deps.lines, problems=[deps.failed.reason], duration_s=round(took, 3),
                                  unsandboxed=not deps.failed.sandboxed, times=clock.times(took))
            lines = deps.lines + lines
            began = time.monotonic()
            watching = await asyncio.to_thread(evidence.context, cwd, watched) if evidence.enabled() else None
            clock.sandbox += time.monotonic() - began
            for i in misses:
                done[i] = await _counted(profile.commands[i], tree, profile, started, store, rerun, watching,
                                         expected, clock, rerun_files)
                if cached_at:
                    began = time.monotonic()
                    result, failed, flakes = done[i]
                    await asyncio.to_thread(baselines.keep, keys[i], baselines.Cached(
                        result, load_cases(store, result), failed, flakes))
                    clock.results += time.monotonic() - began
    results = [done[i][0] for i in range(len(profile.commands))]
    failures = [f for i in range(len(profile.commands)) for f in done[i][1]]
    flaky = [f for i in range(len(profile.commands)) for f in done[i][2]]
    counted = [r.tests_run for r in results if r.tests_run is not None]
    # (the gate's judge keeps these problems beside its own: reposwarm/checks/verdicts.py)
    problems = [p for p in map(runners.not_fully_judged, results) if p]
    began = time.monotonic()
    asked = watching.watched if watching is not None else watched or evidence.Watched()  # (files still there)
    exercise = evidence.exercise(results, asked.files, asked.lines) \
        if any(r.loaded is not None for r in results) else None
    clock.results += time.monotonic() - began
    took = time.monotonic() - started
    return TestReport(passed=not failures and not problems, failures=failures, flaky=flaky, setup=lines,
                      duration_s=round(took, 3), commands=results, problems=problems,
                      unsandboxed=any(not r.sandboxed for r in results), tests_run=sum(counted) if counted else None,
                      exercise=exercise, times=clock.times(took))
