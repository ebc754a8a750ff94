"""A bench-only workflow for bench/bench_checks.py: one check, exactly as the test gate runs it
(workflows/validation.py Gate._planned): plan_check, then every part's validate at once, then the parts' reports
merged per test (reposwarm/checks/selection/shards.py merge).

Bench code, not product code: a module of its own (not the bench's __main__) so that the workflow sandbox imports
it like any workflow module. Its activities go to the task queues the `python worker.py` hosts serve, the parts to
the checks' queue as the gate sends them (a host takes as many as its check slots: any host takes any part); the
workflow itself runs in the bench's own worker, on a queue of its own.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Literal

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.checking import plan_check
    from activities.validate import validate
    from reposwarm.checks.selection.shards import merge
    from reposwarm.checks.verdicts import settle
    from reposwarm.contracts import CheckPlan, CheckProfile, PlanCheckInput, TestReport, ValidateInput
    from reposwarm.contracts.base import Contract
    from workflows import options


class ProbeCheck(Contract):
    run_id: str  # the run whose checkouts and store the check uses (the same one across a bench's checks: warm)
    repo_path: str
    ref: str  # the tree checked
    since: str  # the commit it is judged against (the changes are since..ref)
    profile: CheckProfile
    scope: Literal["all", "affected", "remainder"] = "affected"  # as PlanCheckInput.scope
    queue: str  # the hosts' shared task queue
    label: str = "check"


class ProbeResult(Contract):
    plan: CheckPlan
    reports: list[TestReport]  # one per part, in the plan's order
    merged: TestReport
    plan_s: float  # plan_check, from the workflow's clock (its tasks' start times)
    parts_s: float  # the parts, all of them, from plan_check's end to the last one's


def _s(a: datetime, b: datetime) -> float:
    return round((b - a).total_seconds(), 3)


@workflow.defn
class ChecksProbe:
    @workflow.run
    async def run(self, req: ProbeCheck) -> ProbeResult:
        started = workflow.now()
        plan = await workflow.execute_activity(
            plan_check, PlanCheckInput(run_id=req.run_id, repo_path=req.repo_path, ref=req.ref, since=req.since,
                                       profile=req.profile, scope=req.scope),
            task_queue=req.queue, **options.CHECK_PLAN)
        planned = workflow.now()
        count = len(plan.parts)
        reports = list(await asyncio.gather(*[
            workflow.execute_activity(
                validate, ValidateInput(run_id=req.run_id, repo_path=req.repo_path, ref=req.ref, profile_name="bench",
                                        profile=req.profile, part=part,
                                        label=req.label if count == 1 else f"{req.label} shard {part.shard[0]} of "
                                                                           f"{count}"),
                task_queue=options.checks_queue(req.queue), **options.validation(req.profile))
            for part in plan.parts]))
        if not reports:  # nothing of the profile to run for these changes: the gate calls that a pass
            merged = settle(TestReport(passed=True, ref=req.ref, selection=plan.label or "nothing to run",
                                       skipped=plan.skipped))
        else:
            merged = reports[0] if count == 1 else merge(reports)
        return ProbeResult(plan=plan, reports=reports, merged=merged, plan_s=_s(started, planned),
                           parts_s=_s(planned, workflow.now()))
