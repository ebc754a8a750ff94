"""A moving base, for SwarmWorkflow (workflow code: decisions only).

Teams keep merging into main while a long run works. Before each review and again before delivery, the run
looks at its base branch; when it has moved, its new commits are merged into the integration branch (merge-tree,
no worktree), a conflict goes to the converger with the base's side as the one to respect, and the gate checks
the refreshed tree. Lanes dispatched afterwards start from it, and the delivered branch sits on the latest base.
`swarm.pin_base: true` (or `run --pin-base`) keeps the commit the run started from.
"""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from activities.converge import resolve_conflict
    from activities.repo import look_at_base, merge_lane
    from reposwarm.contracts import BaseInput, ConflictInput, MergeInput, SwarmRequest, SwarmStatus
    from workflows import options

BASE_GOAL = ("the new commits of the base branch, merged by the team while this run worked: respect them as "
             "they are, and keep the run's change working on top of them")


@dataclass
class BaseTracker:
    req: SwarmRequest
    status: SwarmStatus
    start_sha: str  # the commit the run started from
    head: str  # the base's head last merged into the integration branch

    @property
    def tracking(self) -> bool:
        return bool(self.req.base_branch) and not self.req.config.swarm.pin_base

    async def refresh(self, round_no: int, interface_contract: str) -> bool:
        """Merge the base's new commits into the integration branch; True when it moved the integration branch."""
        req, branch = self.req, self.req.base_branch or ""
        move = await workflow.execute_activity(
            look_at_base, BaseInput(run_id=req.run_id, repo_path=req.repo_path, base_branch=branch,
                                    start_sha=self.start_sha, integration_sha=self.status.integration_sha),
            **options.GIT)
        if not move.head_sha or move.head_sha == self.head:
            return False
        both = f"; files both touched: {', '.join(move.files_both)}" if move.files_both else ""
        moved = f"the base {branch} moved by {move.commits} commit(s) since the run started"
        merged = await workflow.execute_activity(
            merge_lane, MergeInput(run_id=req.run_id, repo_path=req.repo_path, lane="base", lane_branch=branch,
                                   lane_ref=move.ref, integration_branch=self.status.integration_branch,
                                   message=f"reposwarm: refresh from {branch} at {move.head_sha[:12]}"),
            **options.GIT)
        sha = merged.integration_sha
        if not merged.merged:
            resolution = await workflow.execute_activity(
                resolve_conflict, ConflictInput(
                    run_id=req.run_id, repo_path=req.repo_path, round=round_no,
                    attempt=len(self.status.resolutions) + 1, model=req.model, price=req.config.prices.get(req.model),
                    record=req.record, lane="base", lane_goal=BASE_GOAL, lane_sha=merged.lane_sha,
                    integration_branch=self.status.integration_branch, integration_sha=merged.integration_sha,
                    files=merged.conflicts, interface_contract=interface_contract,
                    merge_message=f"reposwarm: refresh from {branch} at {move.head_sha[:12]}"),
                **options.CONVERGE)
            if not resolution.resolved:
                self.status.base_moved = (f"{moved}, and conflicts with the run's change in "
                                          f"{', '.join(merged.conflicts)}: not refreshed ({resolution.how}){both}")
                return False
            self.status.resolutions.append(f"base {branch}: {', '.join(merged.conflicts)}: {resolution.how}")
            sha = resolution.integration_sha
        self.head, self.status.integration_sha = move.head_sha, sha
        self.status.base_moved = f"{moved}; refreshed at {move.head_sha[:12]}{both}"
        return True
