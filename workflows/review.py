"""A round's review package, for SwarmWorkflow (workflow code: decisions only).

What a person reads before approving: the plan, each lane's account (LaneReview,
from its LaneResult), conflicts and how they were settled, the checks, warnings.
"""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from reposwarm.branches import lane_branch
    from reposwarm.contracts import (
        LaneResult,
        LaneReview,
        Plan,
        ReviewPackage,
        SwarmRequest,
        SwarmStatus,
        TestReport,
        Usage,
    )

UNSANDBOXED = ("checks ran UNSANDBOXED (REPOSWARM_SANDBOX=off on the worker): code the lanes wrote ran "
               "with the worker's own powers")


def review_package(req: SwarmRequest, status: SwarmStatus, plan: Plan, base_sha: str,
                   results: dict[str, LaneResult], report: TestReport | None, feedback: list[str]) -> ReviewPackage:
    """The package of the round in `status`; a warning the run must carry from now on is added to `status`."""
    goals = {lp.lane: lp.goal for lp in plan.lanes}
    conflicts = [f"{name}: {', '.join(r.changeset.conflicts)} (branch {lane_branch(req.run_id, name)} kept)"
                 for name, r in results.items() if r.changeset.conflicts]
    if report is not None and report.unsandboxed and UNSANDBOXED not in status.warnings:
        status.warnings.append(UNSANDBOXED)
    return ReviewPackage(run_id=req.run_id, round=status.round, task=req.task, repo_path=req.repo_path,
                         warnings=list(status.warnings),
                         base_sha=base_sha, integration_sha=status.integration_sha, plan=plan,
                         lanes=[LaneReview.of(r, goals[name]) for name, r in results.items()],
                         test_report=report, conflicts=conflicts, resolutions=list(status.resolutions),
                         overlaps=list(status.overlaps), contract_flags=list(status.contract_flags),
                         first_pass_merge_rate=status.first_pass_merge_rate,
                         validations=list(status.validations),
                         usage=sum((r.usage for r in results.values()), Usage()),
                         previous_comments=list(feedback), ui_url=req.ui_url)
