"""Converging lanes into the integration branch, for SwarmWorkflow (workflow code: decisions only).

Per finished lane: note the files it shares with other lanes (overlaps), then
merge it. A clean three-way merge is taken as is. A textual conflict goes to
the converger model; if its answer is refused, the lane is to be redone from
the integration branch with the conflict in its task; past the retry budget
the conflict waits at the review gate, the lane's branch intact.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities.converge import resolve_conflict
    from activities.repo import merge_lane
    from reposwarm.agent.prompts import conflict_redo_note
    from reposwarm.contracts import (
        ConflictInput,
        LaneResult,
        MergeInput,
        Overlap,
        Plan,
        Resolution,
        SwarmRequest,
        SwarmStatus,
    )
    from reposwarm.vcs.branches import lane_branch
    from workflows import options
    from workflows.failures import root_cause


@dataclass
class Landing:
    merged: bool
    redo_note: str = ""  # set when the lane should be redone on top of the integration branch


@dataclass
class MergeQueue:
    """The merge state of one round."""

    req: SwarmRequest
    plan: Plan
    round_no: int
    status: SwarmStatus
    touched: dict[str, set[str]] = field(default_factory=dict)  # lane -> files it changed
    first_pass: int = 0
    converger_calls: int = 0
    merge_attempts: dict[str, int] = field(default_factory=dict)

    def note_overlaps(self, lane: str, result: LaneResult) -> None:
        files = {e.path for e in result.changeset.edits}
        self.touched[lane] = files
        for other, theirs in self.touched.items():
            for path in sorted(files & theirs) if other != lane else []:
                found = next((o for o in self.status.overlaps if o.path == path), None)
                if found is None:
                    self.status.overlaps.append(Overlap(path=path, lanes=[other, lane]))
                elif lane not in found.lanes:
                    found.lanes.append(lane)

    def rate(self) -> float:
        return round(self.first_pass / max(1, len(self.plan.lanes)), 3)

    async def land(self, lane: str, result: LaneResult) -> Landing:
        cs = result.changeset
        goal = next(lp.goal for lp in self.plan.lanes if lp.lane == lane)
        self.merge_attempts[lane] = self.merge_attempts.get(lane, 0) + 1
        first_try = self.merge_attempts[lane] == 1
        if not cs.edits:
            self.first_pass += first_try
            return Landing(merged=True)  # nothing to merge; dependents may go on
        message = "\n".join([f"reposwarm {lane} (round {self.round_no}): {cs.summary[:200]}", "", f"Goal: {goal}", "",
                             *[f"- {e.operation} {e.path}: {e.reason}" for e in cs.edits]])
        merge = await workflow.execute_activity(
            merge_lane, MergeInput(run_id=self.req.run_id, repo_path=self.req.repo_path, lane=lane,
                                   lane_branch=lane_branch(self.req.run_id, lane),
                                   integration_branch=self.status.integration_branch, message=message, goal=goal,
                                   interface_contract=self.plan.interface_contract), **options.GIT)
        for flag in merge.contract_flags:
            if flag not in self.status.contract_flags:
                self.status.contract_flags.append(flag)
        if merge.merged:
            self.first_pass += first_try
            self.status.integration_sha = merge.integration_sha
            return Landing(merged=True)

        cs.conflicts = merge.conflicts
        others = {o: next(lp.goal for lp in self.plan.lanes if lp.lane == o)
                  for o, files in self.touched.items() if o != lane and files & set(merge.conflicts)}
        try:
            resolution = await self._converge(lane, goal, merge.lane_sha, merge.integration_sha, merge.conflicts,
                                              others, message)
        except ActivityError as err:  # the converger itself failed (no answer, a bad model): the lane is redone
            resolution = Resolution(lane=lane, resolved=False, integration_sha=merge.integration_sha,
                                    how=f"converger failed: {root_cause(err)}")
        self.status.usage = self.status.usage + resolution.usage
        files = ", ".join(merge.conflicts)
        if resolution.resolved:
            self.status.integration_sha = resolution.integration_sha
            cs.conflicts = []
            self.status.resolutions.append(f"converger resolved {lane}'s conflict in {files}: {resolution.how}")
            return Landing(merged=True)
        self.status.resolutions.append(f"{lane}'s conflict in {files}: {resolution.how}")
        sides = ", ".join(others) or "lanes merged before it"
        return Landing(merged=False, redo_note=conflict_redo_note(sides, files, resolution.how))

    async def _converge(self, lane: str, goal: str, lane_sha: str, integration_sha: str, files: list[str],
                        others: dict[str, str], message: str) -> Resolution:
        self.converger_calls += 1
        model = self.req.model
        return await workflow.execute_activity(
            resolve_conflict,
            ConflictInput(run_id=self.req.run_id, repo_path=self.req.repo_path, round=self.round_no,
                          attempt=self.converger_calls, model=model, price=self.req.config.prices.get(model),
                          record=self.req.record, lane=lane, lane_goal=goal, lane_sha=lane_sha,
                          integration_branch=self.status.integration_branch, integration_sha=integration_sha,
                          files=files, other_goals=others, interface_contract=self.plan.interface_contract,
                          merge_message=message),
            **options.CONVERGE)
