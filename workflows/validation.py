"""The test gate, for SwarmWorkflow (workflow code: decisions only).

The check profile runs once on the base commit (the baseline, alongside the
lanes) and on every merged state. Failures the base has too are pre-existing,
never blamed. New failures are attributed to lanes, which are redone with the
failure report; after MAX_CONSECUTIVE_TEST_FAILS red checks in a row the
integration branch goes back to the last green state.

Three verdicts (reposwarm/checks/verdicts.py). A check that PASSED WITH TEST
CHANGES (tests lost, rewritten to pass, or reconfigured) is not red: it does not
count towards the rollback's red checks in a row. Nor is it green: its state is
never the last green one a rollback returns to, and the row of red checks it
sits in goes on. Its lost and rewritten tests go back first to the lanes that
changed them, with the base commit's test as the reference, unless the lane's
goal or finish summary says why the test had to change
(reposwarm/checks/changed_tests.py `stated`); what remains reaches the review.

NOT JUDGED (a changed module the checks loaded from outside the tree: reposwarm/checks/exercised.py) is neither
green nor red either, and goes to review with no repair: no lane's edit can make the checks load the tree's code,
the check's environment can. With `require_exercised: true` a changed source file no check loaded fails the whole
check (applied here, once its parts are merged), and goes back to the lane that changed it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.checking import plan_check
    from activities.validate import attribute_failures, rollback_integration, validate
    from reposwarm.checks import changed_tests, exercised
    from reposwarm.checks.selection.shards import merge
    from reposwarm.checks.verdicts import change_counts, required, selected, settle, why_failed
    from reposwarm.contracts import (
        AttributeInput,
        CheckPart,
        CheckProfile,
        LaneResult,
        PlanCheckInput,
        RollbackInput,
        SwarmRequest,
        SwarmStatus,
        TestChange,
        TestFailure,
        TestReport,
        ValidateInput,
        Verdict,
    )
    from workflows import options


@dataclass
class Gate:
    req: SwarmRequest
    status: SwarmStatus
    profile_name: str
    profile: CheckProfile
    last_green: str  # the base commit, until a merged state passes
    baseline: asyncio.Future[TestReport] | None = None
    checks: int = 0
    consecutive_fails: int = 0
    history: list[str] = field(default_factory=list)  # one line per check, for the review package
    # The round's lane results (SwarmWorkflow sets it; updated in place by repairs): their finish summaries may say
    # why a test had to change.
    results: dict[str, LaneResult] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.start = self.last_green  # the commit this gate's round started from (its baseline's)

    def start_baseline(self) -> None:
        """Run the profile on the base commit while the lanes work."""
        self.baseline = asyncio.create_task(self._validate(self.last_green, "baseline"))

    async def _validate(self, ref: str, label: str, baseline: TestReport | None = None,
                        lanes: bool = False, part: CheckPart | None = None) -> TestReport:
        opts = self._check_options()
        extra: dict[str, dict[str, list[str]]] = {}
        if lanes:
            # the base commit's tests may run once more against the merged code: room for a second run
            opts["start_to_close_timeout"] = timedelta(seconds=4 * self.profile.timeout_s + 120)
            extra = {"touched": self.touched(), "statements": self.statements()}
        return await workflow.execute_activity(
            validate, ValidateInput(run_id=self.req.run_id, repo_path=self.req.repo_path, ref=ref,
                                    profile_name=self.profile_name, profile=self.profile, label=label,
                                    baseline=baseline, part=part, **extra),
            **opts)

    def _check_options(self) -> dict:
        opts = options.validation(self.profile)
        # the hosts' check slots: a check's shards spread over the hosts
        opts["task_queue"] = options.checks_queue(workflow.info().task_queue)
        return opts

    async def _planned(self, label: str, baseline: TestReport, lanes: bool, scope: str) -> TestReport:
        """The check as plan_check splits it (reposwarm/checks/selection/plans.py): its parts in parallel, merged per test."""
        ref = self.status.integration_sha
        made = await workflow.execute_activity(
            plan_check, PlanCheckInput(run_id=self.req.run_id, repo_path=self.req.repo_path, ref=ref,
                                       since=baseline.ref, profile=self.profile, scope=scope),
            **options.CHECK_PLAN)
        if not made.parts:  # nothing of the profile to run for these changes
            return settle(TestReport(passed=True, ref=ref, selection=made.label or f"{scope}: nothing to run",
                                     skipped=made.skipped))
        count = len(made.parts)
        reports = await asyncio.gather(*[
            self._validate(ref, label if count == 1 else f"{label} shard {p.shard[0]} of {count}", baseline, lanes,
                           p) for p in made.parts])
        return reports[0] if count == 1 else merge(list(reports))

    async def with_remainder(self, label: str, baseline: TestReport, selected: TestReport) -> TestReport:
        """The selected check and the tests it did not run, as one report of the whole profile."""
        rest = await self._planned(f"{label} remainder", baseline, False, "remainder")
        return merge([selected, rest], label=f"whole profile: {selected.selection}; then {rest.selection}")

    async def moved_base(self, head: str) -> None:
        """The base moved to `head`: its baseline is the old one with only what the new commits affect run again
        on it (reposwarm/checks/selection/rebased.py), so the checks that follow judge against the base they merged."""
        old = await self.baseline if self.baseline is not None else None
        if old is None or not old.ref or old.ref == head:
            return
        made = await workflow.execute_activity(
            plan_check, PlanCheckInput(run_id=self.req.run_id, repo_path=self.req.repo_path, ref=head, since=old.ref,
                                       profile=self.profile, scope="affected", single=True), **options.CHECK_PLAN)
        part = made.parts[0] if made.parts else CheckPart(label=made.label, skipped=made.skipped)
        new = await workflow.execute_activity(
            validate, ValidateInput(run_id=self.req.run_id, repo_path=self.req.repo_path, ref=head,
                                    profile_name=self.profile_name, profile=self.profile, label="baseline moved",
                                    part=part, moved_from=old), **self._check_options())
        self.baseline = asyncio.get_running_loop().create_future()
        self.baseline.set_result(new)
        self.history.append(f"the base moved from {old.ref[:12]} to {head[:12]}: its results from the old base's, "
                            f"with {part.label or 'the whole profile'} run again on the new one")

    async def before_delivery(self, round_no: int) -> None:
        """`full_at: delivery`: the tests the approved check did not run, run now; red, nothing is delivered."""
        report, baseline = self.status.test_report, await self.baseline if self.baseline is not None else None
        if self.profile.full_at != "delivery" or report is None or not selected(report) or baseline is None:
            return
        self.checks += 1
        label = f"round {round_no} check {self.checks}"
        whole = required(await self.with_remainder(label, baseline, report), self.profile.require_exercised)
        self.history.append(f"{label} at {self.status.integration_sha[:12]} before delivery: {whole.verdict_of} "
                            f"({whole.selection})")
        self.status.test_report = whole
        if whole.verdict_of != Verdict.passed and report.verdict_of == Verdict.passed:  # (red was approved as red)
            raise ApplicationError(f"the whole profile did not pass before delivery (full_at: delivery): "
                                   f"{checks_line(whole)}; nothing delivered, the branches are kept",
                                   non_retryable=True)

    def touched(self) -> dict[str, list[str]]:
        """The files each lane changed, in every round so far: the merged tree holds all of them."""
        files: dict[str, set[str]] = {}
        for record in self.status.rounds:
            for lane in record.lanes:
                files.setdefault(lane.lane, set()).update(e.path for e in lane.edits)
        for name, result in self.results.items():
            files.setdefault(name, set()).update(e.path for e in result.changeset.edits)
        return {lane: sorted(paths) for lane, paths in files.items()}

    def statements(self) -> dict[str, list[str]]:
        """Each lane's own words: its goal, and its finish summary."""
        said: dict[str, list[str]] = {s.lane: [s.goal] for s in self.status.lanes if s.goal}
        for name, result in self.results.items():
            if result.changeset.summary:
                said.setdefault(name, []).append(result.changeset.summary)
        return said

    async def check(self, round_no: int) -> TestReport:
        baseline = await self.baseline if self.baseline is not None else None
        self.checks += 1
        label = f"round {round_no} check {self.checks}"
        # the activity judges the merged tree against the baseline per test (reposwarm/checks/verdicts.py), and the
        # lanes' test changes, with the base commit's tests as the reference
        if baseline is not None and baseline.ref:
            # only the tests the run's changes affect, in parts; then the rest before the review (CheckProfile)
            report = await self._planned(label, baseline, True, "affected")
            if selected(report) and report.verdict_of == Verdict.passed and self.profile.full_at == "review":
                report = await self.with_remainder(label, baseline, report)
        else:
            report = await self._validate(self.status.integration_sha, label, baseline, baseline is not None)
        # (the whole check's evidence, its parts merged)
        report = required(report, self.profile.require_exercised)
        verdict = report.verdict_of
        # (the verdict's word first, as everywhere a verdict is shown)
        state = f"{verdict}, green" if verdict == Verdict.passed else (
            f"{verdict}: {', '.join(change_counts(report))}" if verdict == Verdict.passed_with_test_changes
            else f"{verdict}: {why_failed(report)[:300]}" if verdict == Verdict.not_judged
            else f"{verdict}, red: {len(report.failures)} new failure(s)" if report.failures
            else f"{verdict}, red: {'; '.join(report.problems)[:300]}")
        extra = [report.selection] if report.selection else []  # (a selected check says so wherever it is shown)
        extra += [exercised.counted(report, always=True)] if exercised.counted(report, always=True) else []
        extra += [f"{len(report.pre_existing)} pre-existing"] if report.pre_existing else []
        extra += [f"{len(report.fixed)} fixed"] if report.fixed else []
        extra += [f"{report.tests_run} tests ran, {report.base_tests_run} on the base"] \
            if report.tests_run is not None and report.base_tests_run is not None else []
        extra += [f"{len(report.flaky)} flaky"] if report.flaky else []
        extra += [f"{report.base_tests_paths} test path(s) changed, so the base commit's tests also ran against "
                  f"the merged code: a second run, {report.base_tests_s:.1f}s"] if report.base_tests_s is not None else []
        self.history.append(f"round {round_no} check {self.checks} at {self.status.integration_sha[:12]}: {state}"
                            + (f" ({', '.join(extra)})" if extra else ""))
        if verdict == Verdict.passed:
            self.last_green, self.consecutive_fails = self.status.integration_sha, 0
        elif verdict == Verdict.failed:
            self.consecutive_fails += 1
        # PASSED WITH TEST CHANGES: neither green nor red (the module's docstring)
        self.status.test_report = report
        return report

    @property
    def exhausted(self) -> bool:
        return self.consecutive_fails >= self.req.config.swarm.max_consecutive_test_fails

    async def repairs(self, report: TestReport, results: dict[str, LaneResult],
                      dispatches: dict[str, int]) -> dict[str, list[TestFailure]]:
        """The lanes a red check goes back to, with the failures each is answerable for. Empty once the red
        checks in a row reach the limit (rolled back to the last green state then), or when no lane that
        caused a failure has a dispatch left (MAX_HELPER_LOOPS)."""
        if report.verdict_of == Verdict.not_judged:
            self.history.append("checks NOT JUDGED: they ran another copy of the changed code, not the tree's; no "
                                "lane can mend that (the check's environment can): going to review as it is")
            return {}
        changed = report.verdict_of == Verdict.passed_with_test_changes
        if self.exhausted and not changed:
            await self.rollback()
            if self.req.config.swarm.on_red == "fail":
                raise ApplicationError(f"validation failed {self.consecutive_fails} times in a row; rolled back "
                                       f"to {self.last_green[:12]}", non_retryable=True)
            return {}
        # (a red check asks whom to blame even with no failure to attribute: the histories of earlier runs hold it)
        blamed = {} if changed else await self.blame(
            report, {lane: [e.path for e in r.changeset.edits] for lane, r in results.items()})
        for change in report.test_changes:
            if changed_tests.needs_repair(change):
                for lane in change.lanes:
                    if lane in results:
                        blamed.setdefault(lane, []).append(as_failure(change))
        if any(p.startswith(exercised.REQUIRED) for p in report.problems):  # (require_exercised: true)
            missing = set(exercised.not_exercised(report))
            for lane, result in results.items():
                for path in sorted({e.path for e in result.changeset.edits} & missing):
                    blamed.setdefault(lane, []).append(TestFailure(
                        name=path, file=path, command=NOT_EXERCISED,
                        message="no command of the check loaded this file"))
        loops = self.req.config.swarm.max_helper_loops
        repairs = {lane: failures for lane, failures in blamed.items() if dispatches.get(lane, 0) < loops}
        if not repairs and changed:
            self.history.append("test changes with no repair to send (each one's lane said why, it is test "
                                "configuration, or its lane has no dispatch left): going to review with them")
        elif not repairs:
            self.history.append("no lane left to repair within MAX_HELPER_LOOPS: going to review as it is")
        return repairs

    async def blame(self, report: TestReport, touched: dict[str, list[str]]) -> dict[str, list[TestFailure]]:
        roles = self.req.config.swarm.lanes
        attribution = await workflow.execute_activity(
            attribute_failures, AttributeInput(
                repo_path=self.req.repo_path, ref=self.status.integration_sha, failures=report.failures,
                touched=touched, lane_paths={lane: roles[lane].allowed_paths for lane in touched},
                base=self._base_ref()), **options.GIT)
        by_key = {f.key: f for f in report.failures}
        return {lane: [by_key[k] for k in ks] for lane, ks in attribution.by_lane.items()}

    def _base_ref(self) -> str:
        """The base commit the baseline ran on, once it has ("" before: every touched file is blamed)."""
        if self.baseline is None or not self.baseline.done() or self.baseline.cancelled() \
                or self.baseline.exception() is not None:
            return ""
        return self.baseline.result().ref

    async def rollback(self) -> None:
        red = self.status.integration_sha
        await workflow.execute_activity(
            rollback_integration, RollbackInput(run_id=self.req.run_id, repo_path=self.req.repo_path,
                                                integration_branch=self.status.integration_branch,
                                                from_sha=red, to_sha=self.last_green), **options.GIT)
        self.status.integration_sha = self.last_green
        if self.last_green != self.start:
            where = f"the last green state {self.last_green[:12]}"
        else:  # no merged state passed: back where the round started, which need not be green itself
            base = self.baseline.result() if self._base_ref() and self.baseline is not None else None
            where = f"the round's starting commit {self.last_green[:12]} (no merged state had passed" + (
                "; its own checks fail too)" if base is not None and not base.passed else ")")
        self.history.append(f"rolled back from {red[:12]} to {where} after {self.consecutive_fails} failed checks "
                            f"in a row (the red state is kept under refs/reposwarm/{self.req.run_id}/)")


TEST_CHANGE = "(test change)"  # TestFailure.command of a test change sent back as a repair
NOT_EXERCISED = "(not exercised)"  # TestFailure.command of a changed file no check loaded (require_exercised)


def as_failure(change: TestChange) -> TestFailure:
    """A lost or rewritten test as a repair item, with the base commit's test as the reference."""
    return TestFailure(name=change.test, file=change.file, command=TEST_CHANGE,
                       message=f"{change.kind}: {change.detail}" + (f"\n{change.diff}" if change.diff else ""))


def repair_note(failures: list[TestFailure]) -> str:
    fails = [f for f in failures if f.command not in (TEST_CHANGE, NOT_EXERCISED)]
    changed = [f for f in failures if f.command == TEST_CHANGE]
    unexercised = [f for f in failures if f.command == NOT_EXERCISED]
    note = ""
    if fails:
        lines = [f"- {f.name}" + (f" ({f.file})" if f.file else "") + (f": {f.message[:600]}" if f.message else "")
                 for f in fails[:10]]
        note += ("\n\nThe merged tree fails these checks, and they are attributed to your change. Fix them, "
                 "keeping the goal above:\n" + "\n".join(lines))
    if changed:
        lines = [f"- {f.name}" + (f" ({f.file})" if f.file else "") + f": {f.message[:2500]}" for f in changed[:10]]
        note += ("\n\nThese tests passed on the base commit, and your change lost them or changed them so that they "
                 "pass where the base commit's version fails. The base commit's test is the reference: put it back "
                 "and make the code pass it. If the goal really needs the test changed, say why in your finish "
                 "summary, naming the test:\n" + "\n".join(lines))
    if unexercised:
        lines = [f"- {f.name}" for f in unexercised[:20]]
        note += ("\n\nNo check loads these files you changed, and the check profile requires every changed source "
                 "file to be exercised (require_exercised): add or extend a test that imports and runs them:\n"
                 + "\n".join(lines))
    return note


def checks_line(report: TestReport | None) -> str:
    """The checks' state in one line, for the Web UI's details at the review gate: the verdict word first."""
    if report is None:
        return "no checks configured"
    verdict = report.verdict_of
    if verdict == Verdict.passed_with_test_changes:
        return f"checks {verdict} ({', '.join(change_counts(report))}): see Test changes in the review"
    why = why_failed(report)
    ran = f" ({report.selection[:200]})" if report.selection else ""
    return f"checks {verdict}{ran}" + (f": {why[:300]}" if why else "")
