"""The test gate, for SwarmWorkflow (workflow code: decisions only).

The check profile runs once on the base commit (the baseline, alongside the
lanes) and on every merged state. Failures the base has too are pre-existing,
never blamed. New failures are attributed to lanes, which are redone with the
failure report; after MAX_CONSECUTIVE_TEST_FAILS red checks in a row the
integration branch goes back to the last green state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities.validate import attribute_failures, rollback_integration, validate
    from reposwarm.checks.verdicts import against_baseline
    from reposwarm.contracts import (
        AttributeInput,
        CheckProfile,
        LaneResult,
        RollbackInput,
        SwarmRequest,
        SwarmStatus,
        TestFailure,
        TestReport,
        ValidateInput,
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

    def start_baseline(self) -> None:
        """Run the profile on the base commit while the lanes work."""
        self.baseline = asyncio.create_task(self._validate(self.last_green, "baseline"))

    async def _validate(self, ref: str, label: str, baseline: TestReport | None = None) -> TestReport:
        return await workflow.execute_activity(
            validate, ValidateInput(run_id=self.req.run_id, repo_path=self.req.repo_path, ref=ref,
                                    profile_name=self.profile_name, profile=self.profile, label=label,
                                    baseline=baseline),
            **options.validation(self.profile))

    async def check(self, round_no: int) -> TestReport:
        baseline = await self.baseline if self.baseline is not None else None
        self.checks += 1
        label = f"round {round_no} check {self.checks}"
        if workflow.patched("judged-per-test"):
            # the activity judges the merged tree against the baseline per test (reposwarm/checks/verdicts.py)
            report = await self._validate(self.status.integration_sha, label, baseline)
        else:  # runs started before: their histories hold unjudged reports
            report = against_baseline(await self._validate(self.status.integration_sha, label), baseline)
        state = "green" if report.passed else (f"red: {len(report.failures)} new failure(s)" if report.failures
                                               else f"red: {'; '.join(report.problems)[:300]}")
        extra = [f"{len(report.pre_existing)} pre-existing"] if report.pre_existing else []
        extra += [f"{len(report.fixed)} fixed"] if report.fixed else []
        extra += [f"{report.tests_run} tests ran, {report.base_tests_run} on the base"] \
            if report.tests_run is not None and report.base_tests_run is not None else []
        extra += [f"{len(report.flaky)} flaky"] if report.flaky else []
        self.history.append(f"round {round_no} check {self.checks} at {self.status.integration_sha[:12]}: {state}"
                            + (f" ({', '.join(extra)})" if extra else ""))
        if report.passed:
            self.last_green, self.consecutive_fails = self.status.integration_sha, 0
        else:
            self.consecutive_fails += 1
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
        if self.exhausted:
            await self.rollback()
            if self.req.config.swarm.on_red == "fail":
                raise ApplicationError(f"validation failed {self.consecutive_fails} times in a row; rolled back "
                                       f"to {self.last_green[:12]}", non_retryable=True)
            return {}
        blamed = await self.blame(report, {lane: [e.path for e in r.changeset.edits] for lane, r in results.items()})
        loops = self.req.config.swarm.max_helper_loops
        repairs = {lane: failures for lane, failures in blamed.items() if dispatches.get(lane, 0) < loops}
        if not repairs:
            self.history.append("no lane left to repair within MAX_HELPER_LOOPS: going to review as it is")
        return repairs

    async def blame(self, report: TestReport, touched: dict[str, list[str]]) -> dict[str, list[TestFailure]]:
        roles = self.req.config.swarm.lanes
        attribution = await workflow.execute_activity(
            attribute_failures, AttributeInput(
                repo_path=self.req.repo_path, ref=self.status.integration_sha, failures=report.failures,
                touched=touched, lane_paths={lane: roles[lane].allowed_paths for lane in touched}), **options.GIT)
        by_key = {f.key: f for f in report.failures}
        return {lane: [by_key[k] for k in ks] for lane, ks in attribution.by_lane.items()}

    async def rollback(self) -> None:
        red = self.status.integration_sha
        await workflow.execute_activity(
            rollback_integration, RollbackInput(run_id=self.req.run_id, repo_path=self.req.repo_path,
                                                integration_branch=self.status.integration_branch,
                                                from_sha=red, to_sha=self.last_green), **options.GIT)
        self.status.integration_sha = self.last_green
        self.history.append(f"rolled back from {red[:12]} to the last green state {self.last_green[:12]} after "
                            f"{self.consecutive_fails} failed checks in a row (the red state is kept under "
                            f"refs/reposwarm/{self.req.run_id}/)")


def repair_note(failures: list[TestFailure]) -> str:
    lines = [f"- {f.name}" + (f" ({f.file})" if f.file else "") + (f": {f.message[:600]}" if f.message else "")
             for f in failures[:10]]
    return ("\n\nThe merged tree fails these checks, and they are attributed to your change. Fix them, "
            "keeping the goal above:\n" + "\n".join(lines))
