"""Validation: the check profile run on a clean checkout of the merged tree; where the lanes changed test paths,
the tests they reach run once more with the base commit's versions of them (reposwarm/checks/changed_tests.py,
reposwarm/checks/selection/second_run.py). Each part of its time is said (TestReport.times)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import posixpath
import re
import shutil
import time
from pathlib import Path, PurePosixPath

import git
from temporalio import activity
from temporalio.exceptions import ApplicationError

from activities.repo import synced
from reposwarm.checks import changed_tests, changed_tests_git, evidence, verdicts
from reposwarm.checks.runner import load_cases, prepared_tree, run_profile, save_baseline
from reposwarm.checks.runners import select
from reposwarm.checks.runners.parsers import Case
from reposwarm.checks.sandbox import SandboxUnavailable
from reposwarm.checks.selection import baselines, plans, second_run, toolselect
from reposwarm.checks.selection.rebased import rebased
from reposwarm.contracts import (
    AttributeInput,
    Attribution,
    CheckPart,
    CheckProfile,
    RollbackInput,
    RollbackResult,
    TestChangeKind,
    TestReport,
    ValidateInput,
)
from reposwarm.contracts.validation import CheckTimes
from reposwarm.runs import ledger
from reposwarm.runs.store import Store, run_dir
from reposwarm.slices.policy import PathPolicy
from reposwarm.vcs import gitcmd
from reposwarm.vcs.remote import Repository, open_repository, worktree_lock


def checkout(repo_path: str, path: Path, ref: str) -> None:
    """A clean detached worktree at `ref`, recycled when it exists (cheaper than remove + add). One a killed git
    left unusable (its index.lock) is made again: nothing in it is kept."""
    if (path / ".git").exists() and not gitcmd.healthy_worktree(path):
        shutil.rmtree(path)
    if (path / ".git").exists():
        wt = gitcmd.repo(str(path))
        wt.checkout("-f", "--detach", ref)
        wt.clean("-fdx")
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        repo = gitcmd.repo(repo_path)
        with worktree_lock(repo_path):  # (a lane's add beside it would look half-made to the mend)
            gitcmd.mend_worktree_registrations(repo)  # one a killed add left unreadable fails every later add
            repo.worktree("prune")
            # -f twice: a registration left locked by an add that was killed half-way ("initializing") is ours too
            repo.worktree("add", "-f", "-f", "--detach", str(path), ref)


def _clean(path: Path) -> None:
    if (path / ".git").exists():
        wt = gitcmd.repo(str(path))
        wt.checkout("-f", "HEAD")
        wt.clean("-fdx")


@activity.defn
async def validate(req: ValidateInput) -> TestReport:
    """Run the check profile (or the part of it `req.part` names: reposwarm/checks/selection/plans.py) on a clean checkout
    of `ref`; keep the validated state under a ref of the run."""
    began = time.monotonic()
    slug = re.sub(r"[^a-z0-9]+", "-", req.label.lower()).strip("-") or "check"
    path = run_dir(req.run_id) / ("baseline" if slug == "baseline" else _checkout_name(req))
    repo = await asyncio.to_thread(synced, req.repo_path, req.run_id)
    await asyncio.to_thread(checkout, str(repo.path), path, req.ref)
    store = Store(req.run_id)
    ran = await asyncio.to_thread(plans.part_profile, req.profile, req.part, path) if req.part is not None else None
    notes: list[str] = []
    if ran is not None and req.part is not None and req.part.tool:
        ran, notes = await _by_build_tool(req.profile, req.part, ran, path, store)
    profile = ran.profile if ran is not None else req.profile
    tree_s = time.monotonic() - began
    try:
        if ran is not None and not ran.targets:  # (nothing of the profile left in this part on this tree)
            report = verdicts.settle(TestReport(passed=True))
        else:
            # (the baseline runs on the run's base commit alone, the user's code: round 1, workflows/validation.py;
            # only it fills the host's shared caches and setup entries, never a tree a lane wrote)
            # (a base commit's results are kept per command and environment, and reused by every later run)
            kept = slug == "baseline" and re.fullmatch(r"[0-9a-f]{40}", req.ref) is not None
            report = await run_profile(profile, path, store, scope="base" if slug == "baseline" else "",
                                       cached_at=req.ref if kept else "",
                                       watched=await _watched(req, path) if slug != "baseline" else None,
                                       expected=_base_failures(req.baseline, ran) if slug != "baseline"
                                       else frozenset())
    except SandboxUnavailable as err:
        # Not a passing fault: retrying cannot help until bubblewrap is installed (or the sandbox switched off).
        raise ApplicationError(str(err), type="SandboxUnavailable", non_retryable=True) from None
    finally:
        # The checkout is throwaway: whatever the checks wrote in it (the only place they could) goes.
        cleaning = time.monotonic()
        await asyncio.to_thread(_clean, path)
        tree_s += time.monotonic() - cleaning
    judging = time.monotonic()
    ran_times = report.times or CheckTimes()
    second_s = 0.0
    report = report.model_copy(update={"ref": req.ref})
    if req.moved_from is not None and ran is not None:
        return await _moved_base(req, req.moved_from, ran, report, repo, path, store)
    if req.baseline is not None and report.commands:
        cases = functools.partial(load_cases, store)
        base: TestReport = req.baseline
        loader: verdicts.CaseLoader = cases
        if ran is not None and len(report.commands) == len(ran.targets):  # (a failed setup step ran no command)
            base, loader = plans.narrowed(req.baseline, ran, report.commands, cases)
        report = verdicts.judge(report, base, loader)
        if req.baseline.ref and slug != "baseline":
            report, second_s = await _judge_tests(req, base, loader, profile, repo, store, report)
    if req.part is not None:
        label = "; ".join([req.part.label, *notes]) if notes else req.part.label
        report = report.model_copy(update={"selection": label, "skipped": req.part.skipped})
    if slug == "baseline":
        # the lanes' run_checks tell their own failures from the base commit's by this
        save_baseline(req.run_id, report)
    else:
        # Every validated state stays reachable (rollback needs the last green one; nothing is lost).
        state = "green" if report.passed else "red"
        ref = f"refs/reposwarm/{req.run_id}/validated/{slug}-{state}"
        await asyncio.to_thread(repo.git.update_ref, ref, req.ref)
        await asyncio.to_thread(repo.push, ref)
    ended = time.monotonic()
    report = report.model_copy(update={"times": ran_times.model_copy(update={
        "tree_s": round(tree_s, 3), "second_run_s": round(second_s, 3),
        "results_s": round(ran_times.results_s + ended - judging - second_s, 3), "total_s": round(ended - began, 3)})})
    ledger.record_activity(req.run_id, "validation", ref=req.ref, label=req.label, profile=req.profile_name,
                           passed=report.passed, failures=[f.name for f in report.failures],
                           flaky=[f.name for f in report.flaky], duration_s=report.duration_s,
                           pre_existing=[f.name for f in report.pre_existing], fixed=[f.name for f in report.fixed],
                           tests_run=report.tests_run, base_tests_run=report.base_tests_run,
                           problems=report.problems, verdict=report.verdict_of.value,
                           test_changes=[f"{c.kind}: {c.test}" for c in report.test_changes],
                           base_tests_s=report.base_tests_s, selection=report.selection,
                           second_run=report.second_run, second_run_tests=report.second_run_tests,
                           times=report.times.model_dump() if report.times is not None else None,
                           check=re.sub(r"( remainder)?( shard \d+ of \d+)?$", "", req.label))
    return report


def _base_failures(baseline: TestReport | None, ran: plans.Ran | None) -> frozenset[str]:
    """The base commit's failures (TestFailure.key) as this check's commands will name them: the verdict never
    blames them, so a command failing only those is not run again (reposwarm/checks/runner.py `_counted`). A
    targeted command names them by its own line (reposwarm/checks/runners/select.py `narrow`)."""
    if baseline is None:
        return frozenset()
    failed = baseline.failures + baseline.pre_existing
    keys = {f.key for f in failed}
    for target in (ran.targets if ran is not None else []):
        if target is not None:
            old, new = " ".join(target.command), " ".join(target.argv)
            keys |= {f"{new}::{f.file or ''}::{f.name}" for f in failed if f.command == old}
    return frozenset(keys)


async def _by_build_tool(profile: CheckProfile, part: CheckPart, ran: plans.Ran, path: Path,
                         store: Store) -> tuple[plans.Ran, list[str]]:
    """The commands `selector:` names narrowed by the repository's own build tool, in this tree's sandbox: to
    what it says is affected, dropped when nothing is, whole when it cannot tell (each said)."""
    commands: list[list[str]] = []
    targets: list[select.Target | None] = []
    notes: list[str] = []
    async with prepared_tree(profile, path, store, readable=None, scope="", reports=False) as (tree, _):
        for argv, target in zip(ran.profile.commands, ran.targets, strict=True):
            if target is None and " ".join(argv) in part.tool:
                chosen = await toolselect.select(profile.selector, argv, part.changed, part.since, tree, profile,
                                                 store)
                notes.append(chosen.note)
                if chosen.argv is None:
                    continue
                argv = chosen.argv
            commands.append(argv)
            targets.append(target)
    if not commands:
        return plans.Ran(profile, []), notes
    return plans.Ran(ran.profile.model_copy(update={"commands": commands}), targets), notes


async def _moved_base(req: ValidateInput, old: TestReport, ran: plans.Ran, report: TestReport, repo: Repository,
                      path: Path, store: Store) -> TestReport:
    """The new base's baseline: the old one, with the tests its new commits affect run again on it (or, when
    that cannot be merged per test, the whole profile on it); kept for the lanes and for every later run."""
    cases = functools.partial(load_cases, store)
    new = rebased(old, ran, report, cases, store, req.ref)
    if new is None:
        await asyncio.to_thread(checkout, str(repo.path), path, req.ref)
        try:
            new = (await run_profile(req.profile, path, store, scope="base", cached_at=req.ref)).model_copy(
                update={"ref": req.ref})
        finally:
            await asyncio.to_thread(_clean, path)
    else:
        env = await asyncio.to_thread(baselines.environment, req.profile)
        for result in new.commands:  # (per command, as run_profile keeps a base commit's results)
            line = " ".join(result.argv)
            await asyncio.to_thread(baselines.keep, baselines.key(req.ref, result.argv, env), baselines.Cached(
                result, cases(result), [f for f in new.failures if f.command == line],
                [f for f in new.flaky if f.command == line]))
    save_baseline(req.run_id, new)
    ledger.record_activity(req.run_id, "validation", ref=req.ref, label=req.label, profile=req.profile_name,
                           passed=new.passed, moved_from=old.ref, tests_run=new.tests_run,
                           rerun=report.tests_run, duration_s=report.duration_s)
    return new


async def _watched(req: ValidateInput, path: Path) -> evidence.Watched:
    """The files the check's evidence is held against (reposwarm/checks/evidence/): the change, the files that differ
    between the base commit and the checked tree (each part of a check, the remainder too, gets all of them), with
    their changed lines; without a base known, the files the lanes touched."""
    base = req.baseline.ref if req.baseline is not None else ""
    files = {f for touched in req.touched.values() for f in touched} | set(req.part.changed if req.part else [])
    net = await asyncio.to_thread(evidence.changed_files, path, base) if base else None
    return await evidence.watched_in(path, base, sorted(net if net is not None else files))


def _checkout_name(req: ValidateInput) -> str:
    """The checkout a check's part runs in: shards of one check run side by side on a host."""
    shard = req.part.shard[0] if req.part is not None else 1
    return "validate" if shard == 1 else f"validate-{shard}"


async def _judge_tests(req: ValidateInput, baseline: TestReport, cases: verdicts.CaseLoader, profile: CheckProfile,
                       repo: Repository, store: Store, report: TestReport) -> tuple[TestReport, float]:
    """The test changes of the merged tree: lost tests (already found by the judge), the base commit's tests run
    against the merged code (rewritten ones), changed test configuration; each with its lanes, their reason and
    the diff. The second run happens only when a test path changed, and runs only the tests the changed paths
    reach (reposwarm/checks/selection/second_run.py). With its wall time."""
    g, base = repo.git, baseline.ref
    paths, config = await asyncio.to_thread(changed_tests_git.changed_paths, g, base, req.ref)
    changes = list(report.test_changes)
    update: dict[str, object] = {}
    second_s = 0.0
    if paths:
        began = time.monotonic()
        by_argv = {tuple(c.argv): c for c in baseline.commands}
        # (the commands the comparison reads: per-test results on both trees, with those results)
        compared: dict[second_run.Argv, list[Case]] = {}
        for cmd in report.commands:
            theirs = cases(by_argv[tuple(cmd.argv)]) if tuple(cmd.argv) in by_argv else None
            mine = cases(cmd) if theirs is not None else None
            if theirs is not None and mine is not None:
                compared[tuple(cmd.argv)] = theirs + mine
        # Same sandbox, same profile, a checkout of its own: the merged tree with the tests as the base has them.
        path = run_dir(req.run_id) / f"{_checkout_name(req)}-base-tests"
        await asyncio.to_thread(checkout, str(repo.path), path, req.ref)
        try:
            await asyncio.to_thread(changed_tests_git.base_tests_tree, g, path, base, paths)
            planned = await asyncio.to_thread(second_run.plan, profile, path, base, paths, config, compared)
            # (a failure there runs again in its own files only: the comparison reads tests, not the command's exit)
            ran = await run_profile(planned.profile, path, store, expected=second_run.expected(planned, compared),
                                    rerun_files=True) if planned.profile.commands else TestReport(passed=True)
        except SandboxUnavailable as err:
            raise ApplicationError(str(err), type="SandboxUnavailable", non_retryable=True) from None
        finally:
            await asyncio.to_thread(_clean, path)
        base_tests = second_run.regrouped(planned, ran, cases, lambda found: store.put_json(
            [dataclasses.asdict(c) for c in found]))
        second_s = time.monotonic() - began
        update = {"base_tests_s": ran.duration_s, "base_tests_paths": len(paths), "second_run": planned.note,
                  "second_run_tests": base_tests.tests_run if planned.profile.commands else 0}
        ran_by_argv = {tuple(c.argv): c for c in base_tests.commands}
        changes = [changed_tests.base_verdict_note(c, base_tests.failures) if c.kind == TestChangeKind.lost else c
                   for c in changes]
        for cmd in report.commands:
            base_cmd, bt_cmd = by_argv.get(tuple(cmd.argv)), ran_by_argv.get(tuple(cmd.argv))
            three = [cases(r) if r is not None else None for r in (base_cmd, cmd, bt_cmd)]
            if three[0] is None or three[1] is None or three[2] is None:
                continue  # no per-test results on one of the three: the judge has said so already
            command = " ".join(cmd.argv)
            found = changed_tests.rewritten(three[0], three[1], three[2], base_tests.failures, command)
            changes += changed_tests.capped(found, TestChangeKind.rewritten, command)
    changes += changed_tests.reconfigured(config)
    if not changes:
        return report.model_copy(update=update), second_s
    files = {c.file for c in changes if c.file}
    diffs = {f: await asyncio.to_thread(changed_tests_git.diff, g, base, req.ref, [f]) for f in sorted(files)}
    shared = await asyncio.to_thread(changed_tests_git.diff, g, base, req.ref, paths) \
        if any(not c.file for c in changes) else ""
    changes = changed_tests.attribute(changes, req.touched, req.statements, diffs, shared)
    return verdicts.settle(report.model_copy(update={**update, "test_changes": changes})), second_s


_PY_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+import|import\s+([\w.]+))", re.M)
_JS_IMPORT = re.compile(r"""(?:from\s+|require\(\s*|import\(\s*)['"](\.{1,2}/[^'"]+)['"]""")


def _imports(g: git.Git, ref: str, path: str) -> set[str]:
    """Files of the repository that a test file imports (Python modules, relative JS/TS imports)."""
    text = gitcmd.show(g, ref, path)
    if text is None:
        return set()
    found: set[str] = set()
    for a, b in _PY_IMPORT.findall(text):
        module = (a or b).replace(".", "/")
        found |= {f"{module}.py", f"{module}/__init__.py"}
    base = PurePosixPath(path).parent
    for rel in _JS_IMPORT.findall(text):
        target = posixpath.normpath(str(base / rel))
        found |= {target, *(target + ext for ext in (".js", ".ts", ".mjs", ".tsx", ".jsx", "/index.js"))}
    return found


def _net_changed(g: git.Git, req: AttributeInput) -> set[str] | None:
    """The files that differ between the base commit and `ref` (None: no base given, or git could not say)."""
    if not req.base:
        return None
    status, out, _ = gitcmd.try_git(g, "diff", "--name-only", "--no-renames", "-z", req.base, req.ref, "--")
    return set(out.split("\0")) - {""} if status == 0 else None


@activity.defn
def attribute_failures(req: AttributeInput) -> Attribution:
    """Which lanes caused which new failures (failure keys per lane).

    In order: lanes that touched a file the failure names (its test file, or a
    path in its message: the traceback); lanes whose paths hold the failing test;
    lanes that touched a file the failing test imports; else every lane that
    changed something. Given the base commit, only what differs from it counts: a lane that skipped a test and
    then restored it (asked to by its repair) changed nothing there, and a test the base has as it is was broken
    by the code it imports, not by the lane whose slice holds it.
    """
    repo = open_repository(req.repo_path)
    repo.have(req.ref)
    g = repo.git
    policies = {lane: PathPolicy(req.repo_path, paths) for lane, paths in req.lane_paths.items()}
    changed = _net_changed(g, req)
    touched = req.touched if changed is None else {
        lane: [f for f in files if f in changed] for lane, files in req.touched.items()}
    blamed: dict[str, list[str]] = {}
    for failure in req.failures:
        text = f"{failure.file or ''}\n{failure.message}"
        lanes = {lane for lane, files in touched.items() if any(f in text for f in files)}
        if not lanes and failure.file and (changed is None or failure.file in changed):
            lanes = {lane for lane, policy in policies.items() if policy.writable(failure.file)}
        if not lanes and failure.file:
            imported = _imports(g, req.ref, failure.file)
            lanes = {lane for lane, files in touched.items() if imported & set(files)}
        if not lanes:
            lanes = {lane for lane, files in touched.items() if files}
        for lane in sorted(lanes):
            blamed.setdefault(lane, []).append(failure.key)
    return Attribution(by_lane=blamed)


@activity.defn
def rollback_integration(req: RollbackInput) -> RollbackResult:
    """Put the integration branch back on the last green state; the red one stays under a ref of the run."""
    repo = synced(req.repo_path, req.run_id)
    g = repo.git
    kept = f"refs/reposwarm/{req.run_id}/rolled-back/{req.from_sha[:12]}"
    g.update_ref(kept, req.from_sha)
    current = g.rev_parse(f"refs/heads/{req.integration_branch}")
    if current != req.to_sha:
        g.update_ref(f"refs/heads/{req.integration_branch}", req.to_sha, current)
    repo.push(kept, f"refs/heads/{req.integration_branch}")
    ledger.record_activity(req.run_id, "rollback", from_sha=req.from_sha, to_sha=req.to_sha)
    return RollbackResult(integration_sha=req.to_sha)
